# SPDX-License-Identifier: GPL-2.0-only
"""The plug-in registry behind ``emu.cc.create`` and ``emu.paths.create``."""

from __future__ import annotations

import pytest

from emu.core.registry import Registry


def test_register_build_and_the_errors_a_user_sees():
    loaded = []
    reg: Registry[object] = Registry("widget", lambda: loaded.append(1))

    @reg.register
    class Spinner:
        name = "spin"

        def __init__(self, speed: int, *, sides: int = 4) -> None:
            self.speed, self.sides = speed, sides

    assert reg.available() == ["spin"] and loaded  # the built-ins were asked to load
    w = reg.build("spin", 3, sides=6)
    assert (w.speed, w.sides) == (3, 6)
    assert reg.register(Spinner) is Spinner  # the same class again is harmless
    with pytest.raises(ValueError, match=r"unknown widget 'spun'; have \['spin'\]"):
        reg.build("spun", 1)
    with pytest.raises(ValueError, match="spin: .*colour"):
        reg.build("spin", 1, colour="red")
    with pytest.raises(ValueError, match="already registered"):
        reg.register(type("Other", (), {"name": "spin"}))
    with pytest.raises(ValueError, match="has no name"):
        reg.register(type("Nameless", (), {}))

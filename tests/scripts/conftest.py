# SPDX-License-Identifier: GPL-2.0-only
"""A fake ``emu`` for the shell scripts' tests: the scripts run ``$EMU`` when it is set,
and this one prints its argv a line each — no root, no cluster touched."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def fake_emu(tmp_path: Path) -> Path:
    emu = tmp_path / "emu"
    emu.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    emu.chmod(0o755)
    return emu

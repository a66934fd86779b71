# SPDX-License-Identifier: GPL-2.0-only
"""Checkers for the topology sections that belong to the packages above this one.

``[switch]`` configures the switch pipeline (:mod:`emu.switch.topology`) and
``[nic]`` the NIC daemons' engines (:mod:`emu.nic.topology`). Only those
packages know what is valid there (the switch's settings, the engines'
options), and they sit above the topology model, which must not import them.
So they register a checker here when imported, and the loader asks for it:
the dependency points down, and a bad key is still a one-line
:class:`~emu.topology.model.TopologyError` at load time, with its line number.

A section whose owner was not imported cannot be checked; the loader refuses
it with a message naming the module instead of accepting it unchecked.
Importing :mod:`emu.cluster` (what every command that loads a topology does)
registers both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emu.topology.model import Topology

#: ``check(table, topology) -> (key path, reason) | None``: the first problem, or None
SectionCheck = Callable[[dict[str, Any], Topology], "tuple[str, str] | None"]

#: section name → the module that registers its checker (for the refusal's message)
OWNERS = {"switch": "emu.switch.topology", "nic": "emu.nic.topology"}

_CHECKS: dict[str, SectionCheck] = {}


def register(section: str, check: SectionCheck) -> None:
    """Make ``check`` the checker of ``[section]`` (one per section; re-registering the
    same function is harmless, as a module reloaded by a test does)."""
    if section not in OWNERS:
        raise ValueError(f"no topology section {section!r} (known: {', '.join(OWNERS)})")
    _CHECKS[section] = check


def checker(section: str) -> SectionCheck | None:
    """The registered checker of ``[section]``, or None while its owner is not imported."""
    return _CHECKS.get(section)

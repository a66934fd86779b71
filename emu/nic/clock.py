# SPDX-License-Identifier: GPL-2.0-only
"""The NIC daemon's trio clock: fabric time (:mod:`emu.fabricclock`) as trio's own.

Why a trio clock and not conversions at each call: with it installed
(``trio.run(..., clock=TrioFabricClock(fc))``) ``trio.current_time()`` is fabric
time, so the engines' ``now``, their timers (cancel-scope deadlines), the control
plane's ``now`` and PFC pause quanta are all fabric time with no code of theirs
changed, and trio converts a deadline to a wall sleep at the one boundary
(:meth:`deadline_to_sleep_time`: fabric seconds × scale). What still runs on the
wall clock (the kernel's timerfd, receive stamps, the port serializer) converts
through :class:`emu.fabricclock.FabricClock`.
"""

from __future__ import annotations

import trio

from emu.fabricclock import FabricClock


class TrioFabricClock(trio.abc.Clock):
    """trio's clock at fabric time: ``current_time`` = ``fc.now()``, sleeps × scale."""

    def __init__(self, fc: FabricClock) -> None:
        self.fc = fc

    def start_clock(self) -> None:
        """Nothing to start: fabric time is a function of ``CLOCK_MONOTONIC``."""

    def current_time(self) -> float:
        return self.fc.now()

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return max(0.0, (deadline - self.fc.now()) * self.fc.scale)

    def __repr__(self) -> str:
        return f"TrioFabricClock(scale={self.fc.scale:g}, epoch={self.fc.epoch:.6f})"


def current_scale() -> float:
    """The scale of the running trio loop's clock: a :class:`TrioFabricClock`'s, else 1
    (trio's own clock is real time)."""
    clk = trio.lowlevel.current_clock()
    return clk.fc.scale if isinstance(clk, TrioFabricClock) else 1.0

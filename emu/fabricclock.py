# SPDX-License-Identifier: GPL-2.0-only
"""The fabric clock: the one place emu converts between fabric time and the wall clock.

Why (DESIGN.md, Fabric time): emu runs the emulated world ``scale`` times slower than
the wall clock, so that a 400 Gb/s fabric can be run on a machine that keeps up only
with a fraction of that. Fabric time is ``(monotonic − epoch) / scale``; ``epoch`` and
``scale`` come from the cluster's plan (:class:`emu.plan.model.TimePlan`), which hands
them to every daemon on its command line. Protocol code reads only fabric time (the
NIC daemon installs this clock as trio's, so ``trio.current_time()`` *is* fabric time
there); what must stay on the wall clock (the kernel's timers, receive stamps, the
port serializer that stands for the dilated wire) reads it through :func:`wall` /
:func:`realtime` here, so every wall read is named and a test can list them.

Stdlib only: the bottom layer, importable by every package.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

__all__ = ["FabricClock", "check_scale", "realtime", "wall"]


def wall() -> float:
    """The wall clock (``CLOCK_MONOTONIC`` seconds, shared by every namespace): what the
    kernel's timers (``timerfd``) and the dilated hardware (tbf, the port serializer) run on."""
    return time.monotonic()


def realtime() -> float:
    """``CLOCK_REALTIME`` seconds: the clock of the kernel's ``SO_TIMESTAMPNS`` receive
    stamps, which :meth:`FabricClock.stamp` converts to fabric time."""
    return time.time()


def check_scale(value: object) -> float:
    """A time scale as given (``[time] scale``, ``--set time.scale=N``, ``--time-scale``):
    a finite number ≥ 1 (ValueError otherwise, one line saying why)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        raise ValueError('time scale "auto" is chosen by a cluster\'s plan ([time] scale, '
                         "emu up); here give a number >= 1 (e.g. the one emu up chose)")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"time scale {value!r} must be a number >= 1")
    try:
        s = float(value)
    except ValueError:
        raise ValueError(f"time scale {value!r} must be a number >= 1") from None
    if not math.isfinite(s) or s < 1:
        raise ValueError(f"time scale {value!r} must be a finite number >= 1 (1 = real time; "
                         "a fabric faster than this machine needs a larger one)")
    return s


@dataclass(frozen=True)
class FabricClock:
    """Fabric time for a cluster: ``scale`` wall seconds per fabric second, counted from
    ``epoch`` (a :func:`wall` time, the cluster's ``emu up``). Scale 1 and epoch 0 is
    plain ``CLOCK_MONOTONIC``: real time."""

    scale: float = 1.0
    epoch: float = 0.0

    def __post_init__(self) -> None:
        check_scale(self.scale)

    def now(self) -> float:
        """Fabric seconds since the epoch."""
        return (time.monotonic() - self.epoch) / self.scale

    def fabric_at(self, wall_s: float) -> float:
        """The fabric time of a :func:`wall` time."""
        return (wall_s - self.epoch) / self.scale

    def wall_at(self, fabric_s: float) -> float:
        """The :func:`wall` time of a fabric time (a kernel timer's deadline)."""
        return self.epoch + fabric_s * self.scale

    def to_wall(self, fabric_dt: float) -> float:
        """A fabric duration as the wall time it takes."""
        return fabric_dt * self.scale

    def to_fabric(self, wall_dt: float) -> float:
        """A wall duration as fabric time."""
        return wall_dt / self.scale

    def stamp(self, realtime_s: float, real_now: float, fabric_now: float) -> float:
        """A ``CLOCK_REALTIME`` receive stamp as fabric time, from one pair of readings of
        the two clocks taken together (``real_now``, ``fabric_now``)."""
        if self.scale == 1:  # today's arithmetic exactly, at real time
            return realtime_s - (real_now - fabric_now)
        return fabric_now - (real_now - realtime_s) / self.scale

    def describe(self) -> str:
        """One line for ``emu up``/``emu status``/``emu perf``: the scale and its cost."""
        if self.scale == 1:
            return "time scale 1 (real time: one fabric ms costs 1 ms of wall time)"
        return (f"time scale {self.scale:g} (one fabric ms costs {self.scale:g} ms of "
                "wall time)")

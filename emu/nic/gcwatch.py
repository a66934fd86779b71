# SPDX-License-Identifier: GPL-2.0-only
"""The interpreter's own pauses: how long each garbage collection stopped this process.

Why: a NIC daemon stands in for hardware that never stops, and a collection of the
oldest generation walks every container object the process holds — modules, engines,
QPs, scoreboards, queued datagrams — while nothing else runs. A pause longer than a
port's transmit FIFO leaves the port idle (``tx_late``) or a QP's pacer behind its
schedule (``pacer_late``) though the machine had CPUs to spare. ``emu nicd stats``
shows the pauses beside the overload they may explain (``gc``).

Measured (the default leaf-spine, two README write-bw runs h1 -> h4, ~60 s of wall): the
sending worker collected 34 times in generation 0 (longest 0.5 ms), 3 in generation 1
(1.8 ms), never in 2; the receiving one's longest generation-0 pause was 17 ms of wall
(a collection preempted, or one over a burst of young objects) — rare, but longer than
a 2-fabric-µs FIFO at 5900 (11.8 ms). Freezing a daemon's set-up (``gc.freeze`` once it
is ready) was tried in alternating 4 -> 1 DCQCN incasts: two runs each, 0/0 late sends
without it, 8/5 with (switched by an environment variable the daemons were not asked
to confirm) — noise at this count, or worse: not adopted.
"""

from __future__ import annotations

import gc
from typing import Any

from emu.fabricclock import wall

#: a pause at least this long is counted apart (seconds of wall time)
LONG_PAUSE = 1e-3

_count = [0, 0, 0]
_total = [0.0, 0.0, 0.0]
_max = [0.0, 0.0, 0.0]
_long = [0]
_started = [0.0]


def _callback(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = wall()
        return
    d = wall() - _started[0]
    g = int(info.get("generation", 2))
    _count[g] += 1
    _total[g] += d
    if d > _max[g]:
        _max[g] = d
    if d >= LONG_PAUSE:
        _long[0] += 1


def install() -> None:
    """Time this process's collections from now on (idempotent)."""
    if _callback not in gc.callbacks:
        gc.callbacks.append(_callback)


def counters() -> dict[str, Any]:
    """Collections per generation, their total and longest pause (wall s), how many
    lasted :data:`LONG_PAUSE` or more, the thresholds in force and the frozen objects."""
    return {"collections": list(_count), "total_s": [round(x, 6) for x in _total],
            "max_s": [round(x, 6) for x in _max], "long": _long[0],
            "threshold": list(gc.get_threshold()), "frozen": gc.get_freeze_count()}

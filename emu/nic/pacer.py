# SPDX-License-Identifier: GPL-2.0-only
"""A NIC port's serializer: everything a daemon sends on a port leaves at its line rate.

Why in the daemon and not only in the engines: a real NIC port is one
serializer that every transport, QP and PDC shares; an engine's own pacer
(RoCE's DCQCN rate, UET's window) decides what it *may* send, the port
decides *when* it is on the wire. Without it a sender paced to a fictional
25 Gb/s outran the receiving daemon: the receiver's socket buffer
overflowed, and the emulator's own overflow showed up as protocol loss and
go-back-N collapse.

Model: ``t_free`` is when the port finishes serializing what it was given
(a virtual clock, exact over any interval). A datagram may leave while
``t_free - now <= burst_s``: the port's transmit FIFO. The burst is small
(a few frames or ``burst_s``) so that a switch port of the same rate
downstream sees no queue the emulated NIC would not have made; the daemon
sleeps on a ``timerfd`` (:mod:`emu.nic.timerfd`) with microsecond precision
until the next frame may go, since trio's own timers round up to a
millisecond.

Charged bytes are whole Ethernet frames without FCS and preamble (UDP
payload + UDP + IP + 14), what a ``tbf`` on the link counts, so a host
paced to its link's rate never queues in that link's shaper.

**Overload.** When frames wait for the port and the daemon comes back
later than the port went idle, the emulated link lost time that the
emulated hardware would not have lost: the daemon was behind its schedule.
Each such gap longer than one frame time counts as ``late`` (with the lost
seconds in ``late_s``); a result with late sends is not credible. The last
:data:`LATE_LOG` of them are kept with their times (``late_events``: when the daemon
was due, when the port ran dry, when it came back; ``CLOCK_MONOTONIC``), so that a
stall of the whole machine can be told from the daemon's own lateness
(:mod:`emu.credible.stallwatch`).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

#: bytes on top of a UDP payload that the port serializes: UDP 8 + Ethernet 14, plus IP
FRAME_OVERHEAD = {4: 8 + 20 + 14, 6: 8 + 40 + 14}
#: the serializer's FIFO: at least this many seconds of line rate may be queued ahead …
BURST_S = 1e-3
#: … and at least this many full frames, whatever the rate
BURST_MIN_FRAMES = 2
#: the share of a full FIFO that drains before the daemon tops it up (:meth:`PortPacer.due`).
#: A quarter, not half: the README's default UET write-bw (pair, 1 Gb/s) had ``tx_late``
#: 30 → 17 and flagged runs 16 → 9 of 18 in alternating blocks on a quiet machine (34 → 14
#: under another cluster's load; every block fewer), goodput and the daemon's CPU the same —
#: its late refills are wake-ups 1–2 ms behind, and three quarters of a FIFO cover more
#: of them than half (docs/measurements.md)
REFILL_SHARE = 0.25
#: late sends kept with their times (a run with more is judged without the oldest)
LATE_LOG = 256


class PortPacer:
    """One NIC port's line-rate serializer (sans-IO: time is an argument).

    ``rate`` in bits/s; ``math.inf`` (or 0/None) means unpaced: :meth:`room` is
    always infinite and nothing is late.
    """

    __slots__ = ("ifname", "rate", "burst_s", "t_free", "c", "_byte_s", "_frame_s", "late_log")

    def __init__(self, ifname: str, rate: float | None, *, burst_s: float = BURST_S,
                 mtu: int = 9000) -> None:
        if rate is not None and rate < 0:
            raise ValueError(f"{ifname}: line rate {rate!r} must be > 0 bits/s")
        self.ifname = ifname
        self.rate = float(rate) if rate else math.inf
        self._byte_s = 8.0 / self.rate  # seconds per byte on the wire
        self._frame_s = (mtu + 14) * self._byte_s  # one full frame's time
        self.burst_s = max(burst_s, BURST_MIN_FRAMES * self._frame_s) if self.paced else 0.0
        self.t_free = 0.0
        self.c = {"bytes": 0, "frames": 0, "waits": 0, "late": 0, "late_s": 0.0}
        #: (due, port dry, back) of the last late sends: see the module docstring
        self.late_log: deque[tuple[float, float, float]] = deque(maxlen=LATE_LOG)

    @property
    def paced(self) -> bool:
        return self.rate != math.inf

    def room(self, now: float) -> float:
        """Bytes that may be handed to the wire now (≤ 0: wait until :meth:`due`)."""
        if not self.paced:
            return math.inf
        t = self.t_free if self.t_free > now else now  # an idle port saves no credit
        return (now + self.burst_s - t) / self._byte_s

    def due(self) -> float:
        """When a full FIFO has drained by :data:`REFILL_SHARE`: the time to give the port
        more. Why not as soon as one frame fits: a daemon woken per frame spent most of
        its CPU on the wake-ups (a RoCEv2 sender at 500 Mb/s: ~0.8 of a core for ~15,000
        frames a second); refilled by a quarter of a FIFO it still has the other three
        quarters' time on the wire before the port could go idle."""
        return self.t_free - self.burst_s * (1.0 - REFILL_SHARE)

    def charge(self, now: float, nbytes: int, frames: int, waited: bool) -> None:
        """``frames`` frames of ``nbytes`` (frame bytes) left at ``now``. ``waited``:
        they had been waiting for this port, so a gap since it went idle is the
        daemon's lateness (overload), not an idle link."""
        c = self.c
        c["bytes"] += nbytes
        c["frames"] += frames
        c["waits"] += waited
        if not self.paced:
            return
        t = self.t_free
        if now > t:
            gap = now - t
            if waited and gap > self._frame_s:
                c["late"] += 1
                c["late_s"] += gap
                self.late_log.append((t - self.burst_s, t, now))
            t = now
        self.t_free = t + nbytes * self._byte_s

    def counters(self) -> dict[str, Any]:
        return {"line_rate": None if not self.paced else self.rate,
                "burst_s": self.burst_s, **self.c, "late_s": round(self.c["late_s"], 6),
                "late_events": [[round(x, 6) for x in e] for e in self.late_log]}


# SPDX-License-Identifier: GPL-2.0-only
"""Propagation delay, held by the receiving NIC: each datagram waits until its kernel
receive stamp plus its path's fixed delay.

Why here (DESIGN.md, Fabric time; issue #34): the kernels emu runs on may have no netem
(and no fq/etf), so nothing in the kernel can hold a packet for a microsecond of fabric
time. The receiving NIC daemon already has each datagram's kernel receive stamp
(``SO_TIMESTAMPNS``): it releases the datagram to its engine at ``stamp + delay`` (wall:
the path's fabric delay × the scale), and tells the engine that time as the arrival. A
daemon that reads the datagram late — a wake-up, a busy turn — still delivers it with
the arrival it would have had, so its own lateness, up to the path's delay, vanishes
from what the protocol sees (``late`` counts the reads that came after the release time).

What the model is, exactly: one fixed delay per (source host, this host) — the path's
cable propagation, each switch's forwarding latency and both NICs' pipeline latency
(``[latency]``; :func:`emu.credible.rates.path_delay`) — added after the last queue
instead of spread along the path. For a packet that meets one bottleneck, or queues
that every flow into them reaches after the same delay, that is the same timeline
shifted; where flows from near and far hosts meet in one queue (a leaf's downlink in an
incast from both leaves), each arrives at the queue earlier than it would by its own
upstream delay, so their interleaving there is approximated. Serialization, queueing,
ECN marking and trimming stay the kernel's and the switches' (at the dilated rates).
Kernel tools that emu does not run (ping, iperf) see no propagation delay.

Sans-IO apart from the stamps: the daemon pushes read datagrams with their stamps and
pulls those due at a given ``CLOCK_REALTIME`` (the stamps' clock).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from typing import Any

from emu.nic.udp import stamp_seconds


def parse_delays(specs: list[str]) -> dict[str, float]:
    """``--path-delay ADDR=SECONDS`` (``*`` for every other peer), repeatable → {addr: s}
    (ValueError with one line on a bad one)."""
    out: dict[str, float] = {}
    for spec in specs:
        addr, eq, val = spec.rpartition("=")
        if not eq or not addr:
            raise ValueError(f"--path-delay {spec!r}: expected ADDR=SECONDS or *=SECONDS")
        try:
            d = float(val)
        except ValueError:
            raise ValueError(f"--path-delay {spec!r}: {val!r} is not a number of seconds"
                             ) from None
        if not d >= 0:
            raise ValueError(f"--path-delay {spec!r}: a delay is >= 0 seconds")
        out[addr] = d
    return out


class DelayLine:
    """Datagrams waiting out their path's delay, in release order.

    ``delays``: peer address → fabric seconds (``"*"``: every other peer); ``scale``:
    wall seconds per fabric second. Items are the daemon's backlog entries
    ``(data, addr, tos)``; what comes out is each with its release time
    (``CLOCK_REALTIME`` seconds), the arrival the engine is told."""

    __slots__ = ("_wall", "_default", "_heap", "_seq", "late", "held", "unstamped")

    def __init__(self, delays: Mapping[str, float], scale: float = 1.0) -> None:
        self._wall = {a: d * scale for a, d in delays.items() if a != "*"}
        self._default = delays.get("*", 0.0) * scale
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = 0  # ties keep arrival order
        #: datagrams read after their release time (the daemon was later than the path's
        #: whole delay: its own lateness then shows, and this says how often)
        self.late = 0
        self.held = 0  # datagrams that went through the line
        self.unstamped = 0  # datagrams without a kernel stamp (released at once)

    def __len__(self) -> int:
        return len(self._heap)

    def delay_of(self, addr: Any) -> float:
        """The wall delay of a datagram from ``addr`` (a socket address tuple)."""
        return self._wall.get(addr[0], self._default) if self._wall else self._default

    def absorb(self, backlog: deque[Any], stamps: deque[bytes | None], now: float) -> None:
        """Move everything in ``backlog`` (with its raw stamps, in step) into the line;
        ``now``: ``CLOCK_REALTIME`` seconds, for counting late reads."""
        heap, push = self._heap, heapq.heappush
        wall, default = self._wall, self._default
        while backlog:
            item = backlog.popleft()
            raw = stamps.popleft() if stamps else None
            if raw is None:
                self.unstamped += 1
                t = now
            else:
                t = stamp_seconds(raw) + (wall.get(item[1][0], default) if wall else default)
                if t < now:
                    self.late += 1
            self._seq += 1
            push(heap, (t, self._seq, item))
        self.held = self._seq

    def release(self, now: float, items: deque[Any], times: deque[float], limit: int) -> int:
        """Up to ``limit`` datagrams due by ``now`` (``CLOCK_REALTIME``) into ``items``,
        their release times into ``times``; returns how many."""
        heap, pop = self._heap, heapq.heappop
        n = 0
        while heap and n < limit and heap[0][0] <= now:
            t, _, item = pop(heap)
            items.append(item)
            times.append(t)
            n += 1
        return n

    def next_release(self) -> float | None:
        """The earliest release time held (``CLOCK_REALTIME``), None when empty."""
        return self._heap[0][0] if self._heap else None

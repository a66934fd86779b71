# SPDX-License-Identifier: GPL-2.0-only
"""A tiny packet-level bottleneck for window-based congestion controllers (test helper).

Why: "NSCC flows converge to a fair share with a bounded queue" is a claim
about dynamics, which unit tests of single ACKs cannot show. This is the
smallest network that can: N always-backlogged senders, one FIFO bottleneck
of ``rate`` bits/s that marks ECN-CE on packets that leave while more than
``ecn_k`` bytes wait behind them (as a switch marks on dequeue), and a fixed
``prop`` return delay. The clock is a heap of events, stepped by hand — no
wall clock, fully deterministic.

Each sender asks its controller (:meth:`send_allowance` with the bytes it
has in flight) before every packet and feeds every ACK back with the
packet's measured RTT and its ECN mark.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_ARRIVE, _DEPART, _ACK, _START = range(4)


@dataclass
class Flow:
    cc: Any
    start: float
    in_flight: int = 0
    acked: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes)
    max_in_flight: int = 0


@dataclass
class Bottleneck:
    """N flows through one queue; :meth:`run` until ``until`` seconds."""

    flows: list[Flow]
    rate: float = 100e9
    prop: float = 12e-6
    mtu: int = 4096
    ecn_k: int = 60_000
    now: float = 0.0
    queue: list[tuple[int, float]] = field(default_factory=list)  # (flow, sent_at)
    qbytes: int = 0
    busy: bool = False
    qtrace: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes queued)
    on_step: Callable[[Bottleneck], None] | None = None

    def __post_init__(self) -> None:
        self._ev: list[tuple[float, int, int, tuple]] = []
        self._seq = 0
        self.svc = self.mtu * 8 / self.rate
        for i, f in enumerate(self.flows):
            self._push(f.start, _START, (i,))

    def _push(self, t: float, kind: int, data: tuple) -> None:
        heapq.heappush(self._ev, (t, self._seq, kind, data))
        self._seq += 1

    def _send(self, i: int) -> None:
        f = self.flows[i]
        while True:
            allow = f.cc.send_allowance(f.in_flight)
            if allow is not None and allow < self.mtu:
                return
            f.in_flight += self.mtu
            f.max_in_flight = max(f.max_in_flight, f.in_flight)
            f.cc.on_sent(self.mtu, self.now)
            self.queue.append((i, self.now))
            self.qbytes += self.mtu
            if not self.busy:
                self.busy = True
                self._push(self.now + self.svc, _DEPART, ())

    def run(self, until: float) -> None:
        while self._ev and self._ev[0][0] <= until:
            t, _, kind, data = heapq.heappop(self._ev)
            self.now = t
            if kind == _START:
                self._send(data[0])
            elif kind == _DEPART:
                i, sent = self.queue.pop(0)
                self.qbytes -= self.mtu
                ecn = self.qbytes > self.ecn_k
                self.qtrace.append((t, self.qbytes))
                self._push(t + self.prop, _ACK, (i, sent, ecn))
                if self.queue:
                    self._push(t + self.svc, _DEPART, ())
                else:
                    self.busy = False
            elif kind == _ACK:
                i, sent, ecn = data
                f = self.flows[i]
                f.in_flight -= self.mtu
                f.acked.append((t, self.mtu))
                f.cc.on_ack(self.mtu, t, ecn_echo=ecn, rtt=t - sent)
                self._send(i)
            if self.on_step is not None:
                self.on_step(self)
        self.now = until


def throughput(f: Flow, t0: float, t1: float) -> float:
    """Bits/s a flow had ACKed in [t0, t1)."""
    return sum(n for t, n in f.acked if t0 <= t < t1) * 8 / (t1 - t0)


def jain(xs: list[float]) -> float:
    """Jain's fairness index: 1 for equal shares, 1/n when one flow has everything."""
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))

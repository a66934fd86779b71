# SPDX-License-Identifier: GPL-2.0-only
"""The switch's egress queues as a pure state machine (sans-IO).

Why sans-IO: the same code runs in the daemon (fed by NFQUEUE, clock = the
cluster's fabric clock, :class:`emu.fabricclock.FabricClock`) and in tests with a
hand-stepped clock and a seeded ``random.Random`` — so RED curves, tail drops,
trim ordering, pause hysteresis and delay lines are checked exactly, in
milliseconds, without root. No sockets, no time, no global randomness here.

Units: every time (``now``, departures, ``delay``/``jitter``, ``pfc_refresh``,
``paused_time``, ``late_s``) is fabric seconds and every rate fabric bits/s, as the
topology wrote them; byte thresholds are bytes at any time scale. So the model
makes the same decisions at every scale (``tests/switch/test_fabric_time.py``);
only the daemon knows the wall clock.

Model of one egress port (what a shared-buffer ASIC port does, simplified):

* per class a FIFO (class from DSCP, :meth:`SwitchConfig.klass_of`), served by
  deficit round robin (quantum 9000 B); one **strict-priority** FIFO for
  trimmed packets ahead of all data;
* one shared buffer of ``depth`` bytes for data (tail drop beyond) and
  ``trim_depth`` for trimmed packets; a packet occupies the buffer from
  arrival until its serialization ends;
* serialization at ``rate`` bits/s: a packet starts when the port is free and
  departs ``len × 8 / rate`` later; back-to-back starts chain on the previous
  departure time, not on when the caller happened to call, so timer lateness
  does not lower the rate;
* after departure an optional delay line (``delay`` ± uniform ``jitter``;
  jitter reorders, as netem does) before the packet is released;
* a port without ``rate`` has no queue: packets pass (after loss and delay);
* at arrival, in this order: random loss; trimming (class ``trim`` on and the
  class queue above ``trim_threshold``, or — threshold unset — when the
  packet would be tail-dropped; the caller's ``trimmer`` says whether the
  packet can be trimmed and to what length); tail drop; RED ECN marking on the
  **instantaneous** class queue (ECT packets only: ECN 1 or 2); enqueue;
* lossless classes: when a class queue exceeds ``xoff`` every ingress port that
  has packets of that class queued (and any that sends more while paused) is
  told to pause; at or below ``xon`` all of them are released. The driver
  turns :class:`PauseEvent` into 802.1Qbb frames (:mod:`emu.switch.pfc`). An
  ingress paused by several egress ports stays paused until the last releases.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emu.switch.config import PortConfig, SwitchConfig
from emu.switch.pausebook import PauseBook, PauseEvent

__all__ = ["PauseEvent", "Pipeline", "Pkt", "PortState"]

DRR_QUANTUM = 9000
NCLASS = 64

#: arrival outcomes
QUEUED, RELEASE, DROP_TAIL, DROP_RANDOM, DROP_TRIM = "queued", "release", "tail", "random", "trim"


class Pkt:
    """One packet as the pipeline sees it. ``handle`` is the caller's (e.g. the NFQUEUE id)."""

    __slots__ = ("handle", "length", "dscp", "ecn", "cls", "port", "indev", "marked", "trimmed",
                 "arrival", "departure")

    def __init__(self, handle: Any, length: int, dscp: int, ecn: int, port: str,
                 indev: Any = None) -> None:
        self.handle = handle
        self.length = length
        self.dscp = dscp
        self.ecn = ecn
        self.port = port
        self.indev = indev
        self.cls = 0
        self.marked = False
        self.trimmed = False
        self.arrival = 0.0
        self.departure = 0.0

    def __repr__(self) -> str:
        flags = ("M" if self.marked else "") + ("T" if self.trimmed else "")
        return f"Pkt({self.handle!r}, {self.length}B, c{self.cls}{' ' + flags if flags else ''})"


COUNTER_NAMES = ("enqueued", "bytes", "released", "marked", "trimmed", "dropped_tail",
                 "dropped_random", "dropped_trim", "xoff", "xon", "paused_time", "depth",
                 "max_depth", "late", "late_s")
#: a release this much later than its departure time, or a full frame's time at the port's
#: rate if that is longer, is the daemon behind its schedule (overload, not queueing)
LATE_FRAME = 9014


@dataclass
class PortState:
    """Queues, timers and counters of one egress port."""

    name: str
    cfg: PortConfig
    data: list[deque[Pkt]] = field(default_factory=lambda: [deque() for _ in range(NCLASS)])
    prio: deque[Pkt] = field(default_factory=deque)
    class_bytes: list[int] = field(default_factory=lambda: [0] * NCLASS)
    data_bytes: int = 0
    prio_bytes: int = 0
    active: deque[int] = field(default_factory=deque)
    deficit: list[int] = field(default_factory=lambda: [0] * NCLASS)
    busy: Pkt | None = None
    busy_until: float = 0.0
    delayed: list[tuple[float, int, Pkt]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTER_NAMES, 0))

    @property
    def depth(self) -> int:
        return self.data_bytes + self.prio_bytes


class Pipeline:
    """Every egress port of one switch. Feed :meth:`arrive`, call :meth:`advance` at timers."""

    def __init__(self, cfg: SwitchConfig, rng: random.Random | None = None) -> None:
        self.cfg = cfg
        self.rng = rng if rng is not None else random.Random(cfg.seed)
        self.ports: dict[str, PortState] = {}
        self._busy: set[str] = set()        # ports serializing or with delayed packets
        self._seq = 0
        #: lossless classes' pauses (the rule both datapaths share)
        self.pauses = PauseBook(cfg.pfc_refresh)

    # ------------------------------------------------------------------ ports

    def port(self, name: str) -> PortState:
        st = self.ports.get(name)
        if st is None:
            st = self.ports[name] = PortState(name, self.cfg.port(name))
        return st

    # ------------------------------------------------------------------ arrival

    def arrive(self, now: float, pkt: Pkt,
               trimmer: Callable[[Pkt], int | None] | None = None) -> str:
        """Take ``pkt`` at ``now``; return QUEUED, RELEASE (send it now) or a DROP_* reason.

        ``trimmer(pkt)`` is called only when the pipeline decides to trim: it
        returns the trimmed length, or None when the packet cannot be trimmed
        (no payload, not a known transport) — then it is treated as data.
        """
        st = self.port(pkt.port)
        cfg = st.cfg
        c = st.counters
        pkt.arrival = now
        pkt.cls = cls = self.cfg.klass_of(pkt.dscp)
        if cfg.loss and self.rng.random() < cfg.loss:
            c["dropped_random"] += 1
            return DROP_RANDOM
        if cfg.rate is None:
            c["enqueued"] += 1
            c["bytes"] += pkt.length
            return self._departed(now, st, pkt)
        kc = cfg.klass(cls)
        qc = st.class_bytes[cls]
        if kc.trim and trimmer is not None:
            over = (qc > kc.trim_threshold if kc.trim_threshold is not None
                    else st.data_bytes + pkt.length > cfg.depth)
            if over:
                n = trimmer(pkt)
                if n is not None:
                    if st.prio_bytes + n > cfg.trim_depth:
                        c["dropped_trim"] += 1
                        return DROP_TRIM
                    pkt.length = n
                    pkt.trimmed = True
                    c["trimmed"] += 1
                    c["enqueued"] += 1
                    c["bytes"] += n
                    st.prio.append(pkt)
                    st.prio_bytes += n
                    self._note_depth(st)
                    self._kick(now, st)
                    return QUEUED
        if st.data_bytes + pkt.length > cfg.depth:
            c["dropped_tail"] += 1
            return DROP_TAIL
        if kc.ecn and pkt.ecn in (1, 2) and qc >= kc.kmin:
            if qc >= kc.kmax:
                pkt.marked = True
            elif kc.kmax > kc.kmin:
                pkt.marked = self.rng.random() < kc.pmax * (qc - kc.kmin) / (kc.kmax - kc.kmin)
            if pkt.marked:
                c["marked"] += 1
        c["enqueued"] += 1
        c["bytes"] += pkt.length
        q = st.data[cls]
        if not q:
            st.active.append(cls)
        q.append(pkt)
        st.class_bytes[cls] += pkt.length
        st.data_bytes += pkt.length
        self._note_depth(st)
        if kc.lossless:
            self._check_pause(now, st, cls, pkt.indev)
        self._kick(now, st)
        return QUEUED

    def _note_depth(self, st: PortState) -> None:
        d = st.depth
        st.counters["depth"] = d
        if d > st.counters["max_depth"]:
            st.counters["max_depth"] = d

    # ------------------------------------------------------------------ service

    def _next_pkt(self, st: PortState) -> Pkt | None:
        if st.prio:
            return st.prio.popleft()
        active = st.active
        while active:
            cls = active[0]
            q = st.data[cls]
            head = q[0]
            if st.deficit[cls] >= head.length:
                st.deficit[cls] -= head.length
                q.popleft()
                if not q:
                    active.popleft()
                    st.deficit[cls] = 0
                return head
            st.deficit[cls] += DRR_QUANTUM
            active.rotate(-1)
        return None

    def _kick(self, now: float, st: PortState) -> None:
        """Start serializing the next packet if the port is idle."""
        if st.busy is not None:
            return
        pkt = self._next_pkt(st)
        if pkt is None:
            return
        start = max(now, st.busy_until)
        st.busy = pkt
        st.busy_until = start + pkt.length * 8 / st.cfg.rate  # type: ignore[operator]
        self._busy.add(st.name)

    def _departed(self, t: float, st: PortState, pkt: Pkt) -> str:
        """Packet left the port at ``t``: delay line or release now."""
        pkt.departure = t
        cfg = st.cfg
        if cfg.delay or cfg.jitter:
            d = cfg.delay + (self.rng.uniform(-cfg.jitter, cfg.jitter) if cfg.jitter else 0.0)
            self._seq += 1
            heapq.heappush(st.delayed, (t + max(0.0, d), self._seq, pkt))
            self._busy.add(st.name)
            return QUEUED
        st.counters["released"] += 1
        return RELEASE

    def advance(self, now: float) -> list[Pkt]:
        """Everything due by ``now``, in release order; also refreshes pause state."""
        out: list[Pkt] = []
        for name in list(self._busy):
            st = self.ports[name]
            slack = LATE_FRAME * 8 / st.cfg.rate if st.cfg.rate else 0.0
            while st.busy is not None and st.busy_until <= now:
                pkt, t = st.busy, st.busy_until
                st.busy = None
                if now - t > slack:  # the daemon came back late: the link lost that time
                    st.counters["late"] += 1
                    st.counters["late_s"] += now - t
                if pkt.trimmed:
                    st.prio_bytes -= pkt.length
                else:
                    st.class_bytes[pkt.cls] -= pkt.length
                    st.data_bytes -= pkt.length
                    if self.pauses.is_paused(st.name, pkt.cls):
                        self._check_pause(t, st, pkt.cls, None)
                st.counters["depth"] = st.depth
                if self._departed(t, st, pkt) == RELEASE:
                    out.append(pkt)
                nxt = self._next_pkt(st)
                if nxt is not None:
                    st.busy = nxt
                    st.busy_until = t + nxt.length * 8 / st.cfg.rate  # type: ignore[operator]
            while st.delayed and st.delayed[0][0] <= now:
                pkt = heapq.heappop(st.delayed)[2]
                st.counters["released"] += 1
                out.append(pkt)
            if st.busy is None and not st.delayed:
                self._busy.discard(name)
        self.pauses.tick(now)
        return out

    def next_timer(self) -> float | None:
        """When :meth:`advance` next has something to do (None: nothing pending)."""
        t = self.pauses.refresh_at
        for name in self._busy:
            st = self.ports[name]
            if st.busy is not None and (t is None or st.busy_until < t):
                t = st.busy_until
            if st.delayed and (t is None or st.delayed[0][0] < t):
                t = st.delayed[0][0]
        return t

    def flush(self) -> list[Pkt]:
        """Every held packet, at once (shutdown: release rather than lose them)."""
        out: list[Pkt] = []
        for st in self.ports.values():
            if st.busy is not None:
                out.append(st.busy)
                st.busy = None
            out += st.prio
            st.prio.clear()
            for q in st.data:
                out += q
                q.clear()
            out += [p for _, _, p in sorted(st.delayed)]
            st.delayed.clear()
            st.active.clear()
            st.class_bytes = [0] * NCLASS
            st.data_bytes = st.prio_bytes = 0
            st.counters["depth"] = 0
        self._busy.clear()
        return out

    # ------------------------------------------------------------------ pause

    def _check_pause(self, now: float, st: PortState, cls: int, indev: Any) -> None:
        kc = st.cfg.klass(cls)

        def holders() -> set[Any]:  # the ingress ports with packets of the class queued
            devs = {p.indev for p in st.data[cls]}
            if st.busy is not None and st.busy.cls == cls:
                devs.add(st.busy.indev)
            return devs

        self.pauses.check(now, st.name, cls, st.class_bytes[cls], kc.xoff, kc.xon, holders,
                          indev)

    @property
    def pause_events(self) -> list[PauseEvent]:
        return self.pauses.events

    def take_pause_events(self) -> list[PauseEvent]:
        return self.pauses.take_events()

    # ------------------------------------------------------------------ counters

    def counters(self, now: float | None = None) -> dict[str, dict[str, float]]:
        """Per port counters (``paused_time`` includes a pause still in progress)."""
        out = {}
        for name, st in self.ports.items():
            c = dict(st.counters)
            c.update(self.pauses.port_counts(name, now))
            out[name] = c
        return out

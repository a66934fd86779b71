# SPDX-License-Identifier: GPL-2.0-only
"""Priority flow control on the switch's kernel datapath: the agent beside the tc BPF
program that decides XOFF/XON and sends the 802.1Qbb frames.

Division of work: the program (``bpf/port.bpf.c``) cannot hold a packet or send a frame,
but it sees every packet; per egress port it keeps the backlog (its virtual queue) and,
for lossless classes, which ingress port each packet came from and when the latest one
of each leaves (``emu_port_pfc``). The agent polls both several times in the time the
headroom above ``xoff`` takes to fill (:data:`POLLS_PER_FILL`), applies the reference
pipeline's rule (:class:`PauseBook`, shared with :mod:`emu.switch.queue`: a class above
``xoff`` pauses every ingress port with packets of it queued, at or below ``xon``
releases them, refreshes while held) and sends the frames out of those ingress ports, as
the user-space datapath does; NIC daemons honour them (``emu.nic.pause``).

Fabric time makes polling cheap: at time scale N the headroom fills N times slower in
wall time (1 MB above ``xoff`` at 400 Gb/s: 20 fabric µs, 70 wall ms at 3500), so a poll
every few wall ms pauses well within it. What differs from the user-space datapath, said
rather than hidden: the class queue is the port's data backlog (one FIFO, as for RED); a
crossing is seen at the next poll, not at the packet (the backlog may pass ``xoff`` by
what arrives in one poll interval — the headroom above ``xoff`` must cover it, as a real
switch's covers the cable's round trip); the ingress table has 64 slots (ifindex mod
64).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from emu.fabricclock import FabricClock
from emu.switch.config import PortConfig, SwitchConfig
from emu.switch.kernel import PFC_PRIOS, KernelPort, ktime_ns
from emu.switch.pausebook import PauseBook
from emu.switch.pfc import hold_quanta
from emu.switch.queue import NCLASS

#: polls per headroom fill: the agent polls this many times in the time the fastest
#: lossless port's buffer above ``xoff`` takes to fill at its line rate (in wall time at
#: the cluster's scale), within :data:`POLL_MIN` .. :data:`POLL_MAX` wall seconds. Why so:
#: a pause must come before the headroom is gone, and a poll costs CPU the NIC daemons
#: need (a fixed 0.5 ms was a fifth of a CPU per switch)
POLLS_PER_FILL = 8
POLL_MIN, POLL_MAX = 0.0002, 0.02


class KernelPfc:
    """The PFC agent of one switch's kernel ports (module docstring)."""

    def __init__(self, cfg: SwitchConfig, ports: dict[str, KernelPort], clock: FabricClock,
                 send: Callable[[str, dict[int, int]], None],
                 ifname: Callable[[int], str] = socket.if_indextoname) -> None:
        self.cfg, self.clock, self.send, self.ifname = cfg, clock, send, ifname
        self.book = PauseBook(cfg.pfc_refresh)
        self.ports: dict[str, tuple[KernelPort, PortConfig, list[int]]] = {}
        self.frames = self.send_errors = 0
        #: per port: late polls that found it above ``xoff``, paused, or with drops since
        #: the poll before, and their delay (fabric s) — where a pause may have come late;
        #: a late poll of a quiet port is harmless and not counted
        self.late: dict[str, int] = {}
        self.late_s: dict[str, float] = {}
        #: per port: its drops at the last poll (a late poll that finds more: overload)
        self.drops: dict[str, int] = {}
        self.last_poll: float | None = None
        self.interval = POLL_MAX           # wall seconds between polls
        self.late_after = 4 * POLL_MAX     # a gap (wall) beyond which a poll is late
        self.reconfigure(ports)

    def reconfigure(self, ports: dict[str, KernelPort]) -> None:
        """Which ports have lossless classes (after a live ``set`` too)."""
        self.ports = {}
        fill = POLL_MAX * POLLS_PER_FILL   # wall seconds: the soonest a headroom fills
        for name, kp in ports.items():
            p = self.cfg.port(name)
            lossless = [c for c in range(NCLASS) if p.klass(c).lossless]
            if lossless:
                self.ports[name] = (kp, p, lossless)
                if p.rate:
                    room = max(1, p.depth - max(p.klass(c).xoff for c in lossless))
                    fill = min(fill, room * 8 / p.rate * self.clock.scale)
        self.interval = min(POLL_MAX, max(POLL_MIN, fill / POLLS_PER_FILL))
        # late: half the fill time gone unpolled (a pause may have come too late)
        self.late_after = max(2 * self.interval, fill / 2)

    @property
    def active(self) -> bool:
        return bool(self.ports)

    def poll(self, now: float | None = None) -> None:
        """Read every lossless port's backlog and ingress table, update the pauses, send
        the frames they call for."""
        now = self.clock.now() if now is None else now
        gap = 0.0 if self.last_poll is None else now - self.last_poll
        late = gap > self.late_after / self.clock.scale
        self.last_poll = now
        now_ns = ktime_ns()
        for name, (kp, p, classes) in self.ports.items():
            s = kp.state()
            queued = kp.backlog(p, s, now_ns=now_ns)
            drops = s["dropped_tail"] + s["dropped_random"] + s["dropped_trim"]
            dropped, self.drops[name] = drops > self.drops.get(name, drops), drops
            table = kp.ingress()
            vnow = kp.vnow(now_ns)  # the port's own clock: departures are on it

            def holders(prio: int, table: dict[int, list[int]] = table,
                        vnow: int = vnow) -> set[Any]:
                return {i for i, t in table.items() if t[prio] > vnow}

            # the queue may have overflowed and drained again while nobody polled (a
            # stopped or starved daemon): the drops since the last poll say so
            if late and (dropped or queued > min(p.klass(c).xoff for c in classes)
                         or any(self.book.is_paused(name, c) for c in classes)):
                self.late[name] = self.late.get(name, 0) + 1
                self.late_s[name] = self.late_s.get(name, 0.0) + gap
            for c in classes:
                kc = p.klass(c)
                prio = c % PFC_PRIOS
                self.book.check(now, name, c, queued, kc.xoff, kc.xon,
                                lambda prio=prio: holders(prio))
                self.book.join(now, name, c, holders(prio))  # who sends more while paused
        self.book.tick(now)
        quanta = hold_quanta(self.cfg.pfc_refresh, self.cfg.pfc_quantum)
        for ev in self.book.take_events():
            try:
                self.send(self.ifname(ev.indev), {ev.cls % PFC_PRIOS: quanta if ev.pause else 0})
                self.frames += 1
            except OSError:  # the kernel refused the frame (or the port is gone)
                self.send_errors += 1

    def counters(self, name: str, now: float) -> dict[str, float]:
        """``xoff``, ``xon`` and ``paused_time`` of one port; on a port with lossless
        classes also the agent's ``late`` polls that found it above ``xoff``, paused or
        dropping, and their ``late_s`` (overload)."""
        c = self.book.port_counts(name, now)
        if name in self.ports:
            c.update(late=self.late.get(name, 0), late_s=round(self.late_s.get(name, 0.0), 6))
        return c

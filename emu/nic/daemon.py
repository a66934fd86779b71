# SPDX-License-Identifier: GPL-2.0-only
"""The NIC daemon's I/O driver: sockets ↔ sans-IO engines, one timer per engine (trio).

``python -m emu.nic.daemon --cluster C --host h1`` (= ``emu nicd run …``) runs
inside the host's namespace. Shape, after trio's DTLS endpoint: per engine,
one receive task per socket drains the socket until EAGAIN (``checkpoint()``
every ``rx_batch`` reads, ``wait_readable`` when empty) into a bounded
backlog that drops and counts; one engine task feeds the backlog to the
engine in batches (``receive_batch`` where it has one, else
``receive_datagram`` per datagram) and then *pumps* the engine; one
timer task sleeps in a cancel scope whose deadline is re-armed from
``get_timer()`` after every pump; one transmit task waits for socket space
only while the transmit queue is blocked. Readiness is ``nursery.start``:
sockets and the control socket exist before ``run`` reports started.

Pumping (after every input: a batch of datagrams, a timer, a control
request) is::

    out = engine.datagrams_to_send(now)   → TxPath (GSO grouping, entropy sockets)
    while (ev := engine.next_event()):    → control server (CQs, QP events)
    timer deadline = engine.get_timer()

SIGTERM/SIGINT: stop accepting clients, pump every engine once more, flush
the transmit queues and the clients' pending replies/events (each bounded by
``drain_timeout``), tell clients ``shutdown``, close everything, exit 0.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import trio

from emu.core.memory import MemoryTable
from emu.core.trace import NULL_TRACE, Trace
from emu.fabricclock import FabricClock, realtime, wall
from emu.nic import engines, linkwatch, rxheader
from emu.nic.clock import current_scale
from emu.nic.coalesce import RxCoalescer
from emu.nic.config import NicConfig
from emu.nic.control import ControlServer
from emu.nic.daemonstats import daemon_stats
from emu.nic.delayline import DelayLine
from emu.nic.frames import RING_FRAMES, FrameTx, Ring, ring_frames
from emu.nic.framing import framer_for
from emu.nic.linkwatch import LinkWatch
from emu.nic.pacer import FRAME_OVERHEAD, PortPacer
from emu.nic.pause import PortPause
from emu.nic.slot import SLOT_COUNTERS, EngineSlot, take, takes, trimmed_table
from emu.nic.timerfd import TimerFd
from emu.nic.txpath import TxPath
from emu.nic.udp import (
    ArrivalTimes,
    Iface,
    PortSocket,
    arrival,
    family_of,
    gid_of,
    in_netns,
    interfaces,
)
from emu.proc import process_age


def _frame_ring(main: PortSocket, rings: dict[str, Ring]) -> FrameTx | None:
    """Frames from ``main``'s address through its port's ring (``emu.nic.frames``): one
    ring a port (``rings``, by interface), shared by the port's addresses and transports,
    sized for its pacer's FIFO; None for a port with no interface."""
    if not main.ifname:
        return None
    ring = rings.get(main.ifname)
    if ring is None:
        p = main.pacer
        ring = rings[main.ifname] = Ring(
            main.ifname, main.mtu,
            ring_frames(p.rate, p.burst_s, main.mtu) if p and p.paced else RING_FRAMES)
    try:
        return FrameTx(main.ifname, main.address, main.mtu, ring=ring)
    except BaseException:
        if ring.refs <= 0:  # closed with its only user: the next one makes a new ring
            del rings[main.ifname]
        raise


#: engine timers due within this are slept on a timerfd (microseconds), later ones on trio's
#: deadline (a millisecond late at most): pacing needs the one, retransmission the other
PRECISE_WITHIN = 2e-3
#: while the port holds the transmit queue, a due engine timer waits at least this long
#: (the transmit task pumps the engine when the port has taken the queue)
HELD_RECHECK = 1e-3



def _port_names(addrs: list[tuple[str, Iface]]) -> list[str]:
    """The NIC's ports (interface names) in the order :func:`_per_port` numbers them."""
    return list(dict.fromkeys(i.name for _, i in addrs if i.name))


def _per_port(addrs: list[tuple[str, Iface]]) -> list[list[str]]:
    """The addresses grouped by NIC port (interface), ports in order; addresses not on a
    known interface left out."""
    out: dict[str, list[str]] = {}
    for a, i in addrs:
        if i.name:
            out.setdefault(i.name, []).append(a)
    return list(out.values())

class NicDaemon:
    """One host's NIC: its ports, engines, registered memory and control server."""

    def __init__(self, cfg: NicConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.memory = MemoryTable(self.rng)
        self.slots: dict[str, EngineSlot] = {}
        self.ifaces: list[Iface] = []
        self.port_names: list[str] = []   # the NIC's ports in engine port order
        self.linkwatch: LinkWatch | None = None
        self.control = ControlServer(self)
        self.warnings: list[str] = []
        self._stop = trio.Event()
        self._t0 = wall()
        #: fabric time (emu.fabricclock): trio's clock when run by ``emu nicd`` at a scale
        #: (emu.nic.clock), so ``trio.current_time()`` is fabric time; this converts what
        #: stays wall (timerfd deadlines, receive stamps, the port serializer's clock)
        self.clock = FabricClock(cfg.time_scale, cfg.time_epoch)
        #: PRECISE_WITHIN and HELD_RECHECK are wall durations (trio's millisecond
        #: rounding, the daemon's own turn): as fabric time they shrink with the scale
        self._precise = self.clock.to_fabric(PRECISE_WITHIN)
        self._held_recheck = self.clock.to_fabric(HELD_RECHECK)
        self.ready_after: float | None = None
        self._ns_fd: int | None = None
        self.pause_ports: list[PortPause] = []
        self.pause_errors = 0
        #: ifname → the port's line-rate serializer, shared by every transport on it
        self.pacers: dict[str, PortPacer] = {}
        self.trace: Trace = NULL_TRACE
        self._trace_file: Any = None
        #: ``{"pid", "hosts"}`` when a worker process serves this host among others
        #: (:mod:`emu.nic.worker`): pid, memory and CPU figures are then the process's
        self.worker: dict[str, Any] | None = None
        #: a worker closes its hosts' sockets itself, several at once (emu.nic.worker)
        self.defer_close = False
        #: fd → the wait of the task that polls it for room (:meth:`wait_writable`)
        self._writable: dict[int, trio.Event] = {}

    # -- setup ----------------------------------------------------------------------

    def _addresses(self) -> list[tuple[str, Iface]]:
        self.ifaces = interfaces()
        by_addr = {a: i for i in self.ifaces for a in i.ipv4 + i.ipv6}
        if self.cfg.addresses is not None:
            return [(a, by_addr.get(a) or Iface("", 1500)) for a in self.cfg.addresses]
        if self.cfg.family == 6:  # engines take the first address as their own
            return [(a, i) for i in self.ifaces for a in i.ipv6 + i.ipv4]
        return [(a, i) for i in self.ifaces for a in i.ipv4 + i.ipv6]

    def open(self) -> None:
        """Create sockets and engines (synchronously: readiness means they exist)."""
        # the namespace we are in now is the NIC's: sockets made later go there too
        self._ns_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        addrs = self._addresses()
        mtu = min((i.mtu for _, i in addrs), default=1500)
        used: dict[int, str] = {}
        rings: dict[str, Ring] = {}  # the ports' frame rings, by interface
        trimmed = trimmed_table(self.cfg.trimmed_dscps)
        rates = self._make_pacers(addrs)
        try:
            if self.cfg.trace:
                self._open_trace(self.cfg.trace)
            for name in self.cfg.transports:
                port = self.cfg.ports.get(name)
                if port is None:
                    raise ValueError(f"no UDP port configured for transport {name!r}")
                if port in used:
                    raise ValueError(f"transports {used[port]!r} and {name!r} both want UDP "
                                     f"port {port}: give one another port (--port {name}=N)")
                socks: list[PortSocket] = []
                try:
                    for a, i in addrs:  # port 0 (tests): the first socket's port for all
                        socks.append(PortSocket(a, port, ifname=i.name, mtu=i.mtu,
                                                gso=self.cfg.gso, gro=self.cfg.gro,
                                                rcvbuf=self.cfg.rcvbuf, sndbuf=self.cfg.sndbuf))
                        port = port or socks[0].sock.getsockname()[1]
                        socks[-1].port = port
                        socks[-1].pacer = self.pacers.get(i.name)
                    opts = dict(self.cfg.engine_options.get(name, {}))
                    if rates:  # the engine's controller starts from the port's real speed
                        # (rates are wall units, the engine's fabric: × scale)
                        opts.setdefault("line_rate", min(rates) * self.clock.scale)
                        # and its timeouts cover the time a datagram may wait in the port
                        opts.setdefault("tx_hold", self.clock.to_fabric(self.cfg.tx_lead))
                        # and what the port serializes on top of each datagram (its pacer
                        # then keeps the port's schedule: QueuePair.frame_overhead)
                        fam = 6 if ":" in str(addrs[0][0]) else 4
                        opts.setdefault("frame_overhead", FRAME_OVERHEAD[fam])
                    ctx = engines.EngineContext(self.memory, self.rng, [a for a, _ in addrs],
                                                port, mtu, opts,
                                                self.trace.child(f"{self.cfg.host}/{name}"),
                                                port_addresses=_per_port(addrs),
                                                srv6_paths=engines.srv6_table(self.cfg.srv6_paths))
                    self.port_names = _port_names(addrs)
                    engine = engines.create(name, ctx)
                except BaseException as e:
                    for ps in socks:
                        ps.close()
                    if not (isinstance(e, ImportError) and self.cfg.optional_transports):
                        raise
                    self.warnings.append(f"transport {name} not available: {e}")
                    continue
                used[port] = name
                if getattr(engine, "reads_flow_label", False):  # MRC's STEV/SRv6 EVs
                    for ps in socks:
                        ps.enable_flowinfo()
                c = dict.fromkeys(SLOT_COUNTERS, 0)
                framer = framer_for(name)
                tx = TxPath(socks, c, max_queue=self.cfg.tx_backlog, netns_fd=self._ns_fd,
                            seal=framer.seal if framer else None,
                            seal_many=getattr(framer, "seal_many", None),
                            seal_at=getattr(framer, "seal_at", None))
                # every transport sends from source ports of its own (UET's entropies, a
                # RoCEv2 QP's port): through the frame ring, not a socket each
                if self.cfg.frame_ring:
                    n = tx.use_rings(lambda m: _frame_ring(m, rings))
                    if n < len(socks):
                        self.warnings.append(f"{name}: {len(socks) - n} of {len(socks)} ports "
                                             "send by socket only (no frame ring)")
                # a spraying engine's entropy set (UET): sockets for its first 64 now, not
                # mid-burst, on the ports that send by socket, the rest of the set folded
                # onto them (TxPath.preopen: why not 4096 sockets); a ring's port opens one
                # only for a datagram whose next hop is not resolved yet: 128 sockets a
                # host made a 64-host worker take ~3 s to open
                tx.preopen(getattr(engine, "entropies", ()))
                ip_header = ""
                if getattr(framer, "needs_ip_word", False):
                    ip_header, why = rxheader.stamp(port, socks)
                    if why:
                        self.warnings.append(f"{name}: {why}")
                arrived = takes(engine, "arrived")
                line = (DelayLine(self.cfg.path_delays, self.clock.scale)
                        if self.cfg.path_delays else None)
                self.slots[name] = EngineSlot(name, engine, port, tx, c, ip_header=ip_header,
                                              check=framer.check if framer else None,
                                              check_buf=getattr(framer, "check_buf", None),
                                              trimmed_tos=trimmed,
                                              takes_trimmed=takes(engine, "trimmed"),
                                              times=(deque() if arrived or line is not None
                                                     else None),
                                              delay=line, takes_arrived=arrived,
                                              batch=getattr(engine, "receive_batch", None),
                                              port_held=getattr(engine, "port_held", None),
                                              options_in_force=ctx.options_in_force
                                              or dict(opts))
                if self.slots[name].times is not None:
                    for ps in tx.mains:
                        ps.enable_stamps()
            if self.cfg.pfc:
                self._open_pause({i.name for _, i in addrs if i.name})
        except BaseException:
            self.close()
            raise

    def _make_pacers(self, addrs: list[tuple[str, Iface]]) -> list[float]:
        """One :class:`PortPacer` per port that has a line rate (``cfg.line_rates``: by
        ifname, ``"*"`` for the rest); returns the rates in force."""
        lr = self.cfg.line_rates
        for _, i in addrs:
            rate = lr.get(i.name, lr.get("*")) if i.name else None
            if rate and i.name not in self.pacers:
                self.pacers[i.name] = PortPacer(i.name, rate, mtu=i.mtu,
                                                burst_s=self.cfg.tx_lead)
        return [p.rate for p in self.pacers.values()]

    def _open_pause(self, ifnames: set[str]) -> None:
        """One PFC listener per NIC port (``emu.nic.pause``); a port without one is a
        warning, not a failure (e.g. no CAP_NET_RAW): the NIC then ignores pause."""
        for ifname in sorted(ifnames):
            try:
                self.pause_ports.append(PortPause(ifname, self.cfg.pfc_quantum))
            except OSError as e:
                self.warnings.append(f"{ifname}: PFC pause frames ignored ({e})")

    def _open_trace(self, path: str) -> None:
        """``--trace FILE``: one JSON-lines event trace (:mod:`emu.core.trace`) shared by
        every engine, each under the endpoint name ``<host>/<transport>``. Times are the
        daemon's clock (``trio.current_time()``, what engines are given as ``now``); the
        ``daemon_started`` record pairs it with the wall clock."""
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        self._trace_file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.trace = Trace.to_stream(self._trace_file, self.cfg.host, header={
            "source": "emu nicd", "cluster": self.cfg.cluster, "host": self.cfg.host,
            "pid": os.getpid(), "clock": "trio.current_time"})

    def close(self) -> None:
        if self._trace_file is not None:
            with contextlib.suppress(OSError):
                self._trace_file.close()
            self._trace_file = None
        for pp in self.pause_ports:
            pp.close()
        self.pause_ports = []
        for slot in self.slots.values():
            for ps in slot.tx.mains:
                ps.close()
            slot.tx.close()
            for tfd in (slot.tx_timer, slot.eng_timer, *slot.rx_timers):
                if tfd is not None:
                    tfd.close()
        for slot in self.slots.values():  # the stamping rule of a port that reads it
            if any(ps.ip_word for ps in slot.tx.mains):
                with in_netns(self._ns_fd):  # nft runs where the rule is: the host's
                    rxheader.remove(slot.port)
        if self._ns_fd is not None:
            os.close(self._ns_fd)
            self._ns_fd = None

    def device_info(self) -> dict[str, Any]:
        """What ``hello``/``query_device`` return: ports, addresses, GIDs, transports."""
        ports = []
        for n, i in enumerate(self.ifaces, 1):
            addrs = i.ipv4 + i.ipv6
            ports.append({"port": n, "ifname": i.name, "mtu": i.mtu, "addresses": addrs,
                          "gids": [gid_of(a) for a in addrs]})
        return {"cluster": self.cfg.cluster, "host": self.cfg.host, "pid": os.getpid(),
                "ports": ports, "time": {"scale": self.clock.scale, "epoch": self.clock.epoch},
                "transports": {s.name: {"udp_port": s.port,
                                        "sockets": [p.describe() for p in s.tx.mains]}
                               for s in self.slots.values()}}

    # -- the tasks ------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until :meth:`stop`; report readiness once sockets and control socket exist."""
        if current_scale() != self.clock.scale:  # engines would run on the wrong clock
            raise RuntimeError(f"time scale {self.clock.scale:g} configured, but trio's clock "
                               f"runs at {current_scale():g} (run under emu.nic.clock)")
        if self._ns_fd is None:  # not opened yet (a worker opens each host in its namespace)
            self.open()
        try:
            listener = self.control.listen()
            async with trio.open_nursery() as n:
                for slot in self.slots.values():
                    for ps in slot.tx.mains:
                        n.start_soon(self._rx_loop, slot, ps)
                    n.start_soon(self._engine_loop, slot)
                    if slot.delay is not None:
                        n.start_soon(self._delay_loop, slot)
                    n.start_soon(self._timer_loop, slot)
                    n.start_soon(self._tx_loop, slot)
                for pp in self.pause_ports:
                    n.start_soon(self._pause_loop, pp)
                if any(hasattr(sl.engine, "port_link") for sl in self.slots.values()):
                    await self._watch_links(n)
                n.start_soon(self.control.serve, listener)
                if self.trace.enabled:
                    self.trace.event("daemon_started", trio.current_time(), wall=realtime(),
                                     transports=list(self.slots),
                                     time_scale=self.clock.scale, time_epoch=self.clock.epoch)
                    n.start_soon(self._trace_flush_loop)
                self.ready_after = process_age()
                task_status.started(self)
                await self._stop.wait()
                await self._drain()
                n.cancel_scope.cancel()
        finally:
            self.control.close_all()
            if not self.defer_close:
                self.close()

    def stop(self) -> None:
        self._stop.set()

    async def _watch_links(self, n: trio.Nursery) -> None:
        """Tell the engines that take it (MRC's ``port_link``) when a port's link goes down
        or comes back (:mod:`emu.nic.linkwatch`), as a NIC's hardware would; a namespace
        without netlink is a warning: ports then fail only by the transport's timeouts."""
        if not self.port_names:
            return

        def changed(port: int, up: bool) -> None:
            now = trio.current_time()
            self.trace.event("port_link", now, port=port, ifname=self.port_names[port], up=up)
            for slot in self.slots.values():
                hook = getattr(slot.engine, "port_link", None)
                if hook is not None:
                    self._engine_call(slot, hook, port, up, now)
                    self.pump(slot)

        self.linkwatch, why = await linkwatch.start(n, self.port_names, changed, self._ns_fd)
        if why:
            self.warnings.append(why)

    async def _rx_loop(self, slot: EngineSlot, ps: PortSocket) -> None:
        sock, batch, maxlen = ps.sock, self.cfg.rx_batch, self.cfg.rx_backlog
        c = slot.c
        pacer = ps.pacer
        co = RxCoalescer.for_port(self.cfg.rx_coalesce, pacer.rate if pacer else None, ps.mtu)
        timer = None
        if co is not None:
            timer = TimerFd()
            slot.rx_timers.append(timer)  # closed with the slot (close)
        got = 0  # bytes this loop's reads brought since the coalescer last heard
        while True:
            b0 = c["rx_bytes"]
            try:
                ps.recv_batch(slot.backlog, batch, maxlen, c, slot.check, slot.check_buf,
                              slot.times)
            except BlockingIOError:
                got += c["rx_bytes"] - b0
                if len(slot.backlog) == 1:
                    # a lone datagram (a ping-pong's, an ACK): into the engine and its answer
                    # out in this turn — waking the engine task cost a scheduler turn on
                    # each hop of a round trip. A batch still goes to the engine task.
                    self._feed(slot, trio.current_time())
                    self.pump(slot)
                else:
                    slot.rx_lot.unpark_all()
                if co is not None and timer is not None:
                    got = await self._hold_reads(slot, ps, co, timer, got)
                    if got:  # a hold's read brought data: into the engine, read on
                        slot.rx_lot.unpark_all()
                        await trio.lowlevel.checkpoint()
                        continue
                await trio.lowlevel.wait_readable(sock)
                continue
            except OSError:
                c["rx_errors"] += 1  # e.g. a queued ICMP error: keep serving
            got += c["rx_bytes"] - b0
            slot.rx_lot.unpark_all()
            await trio.lowlevel.checkpoint()

    async def _hold_reads(self, slot: EngineSlot, ps: PortSocket, co: RxCoalescer,
                          timer: TimerFd, got: int) -> int:
        """Interrupt coalescing (:mod:`emu.nic.coalesce`) after a read that brought ``got``
        bytes: while a stream lasts, or the port's own queue covers the wait, the next
        read waits instead of a wake-up per datagram. Returns the bytes the last hold's
        read brought; 0 means nothing holds any more (a hold that found nothing ends the
        stream): wait for the socket."""
        c = slot.c
        pacer = ps.pacer
        co.on_read(wall(), got)
        found = got > 0
        while (until := co.hold_until(wall(), pacer.t_free if pacer else 0.0,
                                      found)) is not None:
            c["rx_holds"] += 1
            await timer.sleep_until(until)
            b0 = c["rx_bytes"]
            self._read(slot, ps)
            if c["rx_bytes"] > b0:
                return c["rx_bytes"] - b0
            co.paused()
            found = False
        return 0

    async def _engine_loop(self, slot: EngineSlot) -> None:
        backlog, ready = slot.backlog, slot.ready
        while True:
            if not backlog and not ready:
                await slot.rx_lot.park()
                continue
            self._feed(slot, trio.current_time())
            self.pump(slot)
            if backlog or ready:  # more to take in: let the other tasks run first
                await trio.lowlevel.checkpoint()
            # (an empty backlog parks at once: a checkpoint first cost a scheduler turn
            # per received packet, the most of a ping-pong's)

    def _source(self, slot: EngineSlot) -> tuple[deque[Any], deque[Any] | None]:
        """Where the engine's next datagrams come from, with their receive times (raw
        stamps, or release times: :func:`emu.nic.udp.arrival` takes both; None for an
        engine that takes no ``arrived=``): the backlog, or — with a propagation delay —
        what the delay line has released by now (the backlog first goes into it)."""
        line = slot.delay
        if line is None:
            return slot.backlog, slot.times
        real = realtime()
        if slot.backlog:
            assert slot.times is not None
            line.absorb(slot.backlog, slot.times, real)
            nxt = line.next_release()
            if nxt is not None and nxt < slot.delay_wake:  # sooner than the task sleeps
                slot.delay_scope.cancel()
                slot.delay_lot.unpark_all()
        line.release(real, slot.ready, slot.ready_times, self.cfg.engine_batch - len(slot.ready))
        if not slot.takes_arrived:
            slot.ready_times.clear()
            return slot.ready, None
        return slot.ready, slot.ready_times

    async def _delay_loop(self, slot: EngineSlot) -> None:
        """Wakes when the delay line's next datagram is due (a ``timerfd`` on the wall
        clock: the release times are receive stamps plus wall delays) and feeds it."""
        line = slot.delay
        assert line is not None
        timer = TimerFd()
        slot.rx_timers.append(timer)  # closed with the slot (close)
        while True:
            t = line.next_release()
            if t is None:
                slot.delay_wake = math.inf
                await slot.delay_lot.park()
                continue
            with trio.CancelScope() as scope:
                slot.delay_scope, slot.delay_wake = scope, t
                await timer.sleep_until(wall() + max(0.0, t - realtime()))
            slot.delay_wake = math.inf
            if scope.cancelled_caught:
                continue  # something due sooner arrived: sleep for that instead
            self._feed(slot, trio.current_time())
            self.pump(slot)
            if slot.ready:
                slot.rx_lot.unpark_all()

    def _feed(self, slot: EngineSlot, now: float) -> None:
        """Hand the engine up to ``engine_batch`` datagrams from the backlog; an engine
        that takes ``arrived=`` gets each one's kernel receive time on its own clock."""
        if slot.batch is not None:
            self._feed_batch(slot, now)
            return
        backlog, times = self._source(slot)  # times in step with it (recv_batch)
        if not backlog:
            return  # the delay line holds it all
        if times is not None:
            real = realtime()
            skew = real - now  # the receive stamps' clock minus trio's
        c = slot.c
        recv = slot.engine.receive_datagram
        trimmed, takes = slot.trimmed_tos, slot.takes_trimmed
        kw: dict[str, float | None] = {}
        for _ in range(min(self.cfg.engine_batch, len(backlog))):
            data, addr, tos = backlog.popleft()
            if times is not None:
                kw["arrived"] = arrival(times.popleft(), skew, self.clock, real)
            try:
                if trimmed[tos]:  # a switch cut it to its headers (its DSCP says so)
                    c["rx_trimmed"] += 1
                    if takes:
                        recv(data, addr, now, ecn=tos & 3, trimmed=True, **kw)
                        continue
                recv(data, addr, now, ecn=tos & 3, **kw)
            except Exception as e:  # noqa: BLE001 - the contract says never; a NIC survives
                c["engine_errors"] += 1
                self._log_once(f"{slot.name}: receive_datagram raised {e!r}")
        c["engine_batches"] += 1

    def _feed_batch(self, slot: EngineSlot, now: float) -> None:
        """:meth:`_feed` for an engine that takes a batch (``receive_batch``): the
        backlog's items as they are, the batch's kernel receive times on trio's clock."""
        c = slot.c
        backlog, times = self._source(slot)
        k = min(self.cfg.engine_batch, len(backlog))
        if not k:
            return  # the delay line holds it all
        items = take(backlog, k)
        arrived = None
        if times is not None:
            real = realtime()
            skew = real - now  # the receive stamps' clock minus trio's
            arrived = ArrivalTimes(take(times, k), skew, self.clock, real)
        trim = slot.trimmed_tos if any(slot.trimmed_tos) else None
        if trim is not None:
            c["rx_trimmed"] += sum(trim[tos] for _, _, tos in items)
        try:
            slot.batch(items, now, trim=trim, arrived=arrived)
        except Exception as e:  # noqa: BLE001 - the contract says never; a NIC survives
            c["engine_errors"] += 1
            self._log_once(f"{slot.name}: receive_batch raised {e!r}")
        c["engine_batches"] += 1

    def _ingest(self, slot: EngineSlot, now: float) -> None:
        """Everything that has arrived, into the engine: the backlog, then the sockets.

        Why before a timer: when the daemon is busy, the ACKs that make a
        retransmission timeout moot may already sit in the socket or the
        backlog; trio runs ready tasks in random order, so the timer task
        could fire first and resend data that was delivered (measured: ACKs
        waited up to ~20 ms behind a busy sender's bursts, and most of its
        RTO retransmissions were duplicates at the target). A NIC's receive
        interrupt is served before its retransmission timer."""
        for ps in slot.tx.mains:
            self._read(slot, ps)
        while slot.backlog or slot.ready:
            self._feed(slot, now)
            if slot.delay is not None and not slot.ready:
                break  # the rest waits out its delay

    def _read(self, slot: EngineSlot, ps: PortSocket) -> None:
        """What ``ps`` holds, into the backlog, outside the receive loop's own reads:
        nothing there is no error, a socket error (a queued ICMP error) is counted as the
        receive loop counts it."""
        try:
            ps.recv_batch(slot.backlog, self.cfg.rx_batch, self.cfg.rx_backlog, slot.c,
                          slot.check, slot.check_buf, slot.times)
        except BlockingIOError:
            pass  # nothing (more) there
        except OSError:
            slot.c["rx_errors"] += 1

    async def _timer_loop(self, slot: EngineSlot) -> None:
        """Fires the engine's timer. One due within :data:`PRECISE_WITHIN` (a QP's pacer)
        is slept on a ``timerfd``; trio's own deadline — which :meth:`pump` moves when the
        engine's timer changes — wakes up to a millisecond late (``epoll_wait`` rounds its
        timeout up), and a pacer whose saved credit is capped below that lost line rate
        with every late wake-up (RoCEv2 on the leaf-spine at 200 Mb/s: 0.83–0.88 of the
        rate, no loss, no overload). Later timers (retransmission) keep the deadline."""
        eng = slot.engine
        while True:
            t = eng.get_timer()
            now = trio.current_time()
            if t is not None and t <= now:
                # already due (a pacer whose next packet came due while the daemon
                # worked): one scheduler turn for the other tasks, not a cancel scope
                # whose deadline has passed — its Cancelled costs ~7x a turn
                await trio.lowlevel.checkpoint()
            else:
                with trio.CancelScope(deadline=math.inf if t is None else t) as scope:
                    slot.timer_scope = scope
                    if t is not None and t < now + self._precise:
                        if slot.eng_timer is None:
                            slot.eng_timer = TimerFd()
                        # trio's clock (fabric) and the timerfd's (wall) differ by an
                        # offset and, dilated, by the scale
                        await slot.eng_timer.sleep_until(wall() + self.clock.to_wall(t - now))
                    else:
                        await trio.sleep_forever()
            now = trio.current_time()
            t = eng.get_timer()
            if t is None or t > now:
                continue
            # what arrived first, with what it makes the engine send (an ACK may make the
            # timeout moot; a NACK's retransmission leaves as the NACK's, not the timer's)
            self._ingest(slot, now)
            self.pump(slot)
            t = eng.get_timer()
            if t is not None and t <= now:
                slot.c["timer_fires"] += 1
                self._engine_call(slot, eng.handle_timer, now)
                self.pump(slot)

    async def _trace_flush_loop(self) -> None:
        """Flush the trace file now and then, so ``tail -f`` / ``jq`` see a live run (the
        file is block-buffered: one write per event would cost a syscall each)."""
        while True:
            await trio.sleep(self.clock.to_fabric(self.cfg.trace_flush))  # wall s
            with contextlib.suppress(OSError, ValueError):
                self.trace.flush()

    async def _tx_loop(self, slot: EngineSlot) -> None:
        """Waits for socket space (EAGAIN) or for a port's serializer (the queue's head
        is paced); once a paced queue has drained, asks the engine for more (:meth:`pump`
        holds the engine back while its output waits for the port)."""
        tx = slot.tx
        while True:
            if tx.blocked is not None:
                await self.wait_writable(tx.blocked.sock)
            elif tx.paced_until is not None:
                if slot.tx_timer is None:
                    slot.tx_timer = TimerFd()
                await slot.tx_timer.sleep_until(tx.paced_until)
            else:
                await slot.tx_lot.park()
                continue
            with contextlib.suppress(BlockingIOError):
                tx.flush()
            if tx.blocked is None and tx.paced_until is None:
                # receive before new work: what arrived (ACKs, NAKs, the peer's data)
                # goes into the engine before it is asked for more, so a daemon short of
                # CPU sends less instead of letting its receive buffer overflow (receive
                # livelock: finishing work in hand beats taking on new work)
                self._ingest(slot, trio.current_time())
                self.pump(slot)

    async def _pause_loop(self, pp: PortPause) -> None:
        """PFC frames from one port → ``engine.pause(priority, until)`` on every engine, then
        a pump (an XON, or a shorter pause, lets held QPs go at once; an XOFF is honoured
        by the engine on its next drain and re-armed by its own pause timer)."""
        while True:
            await trio.lowlevel.wait_readable(pp.sock)
            now = trio.current_time()
            try:
                items = pp.drain(now)
            except OSError:
                self.pause_errors += 1
                await trio.lowlevel.checkpoint()
                continue
            if not items:
                continue
            for slot in self.slots.values():
                for prio, until in items:
                    self._engine_call(slot, slot.engine.pause, prio, until)
                self.pump(slot)

    def _engine_call(self, slot: EngineSlot, fn: Any, *args: Any) -> None:
        """An engine's hook called; what it raises is counted and logged once (the contract
        says never: a NIC survives its engine)."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            slot.c["engine_errors"] += 1
            self._log_once(f"{slot.name}: {getattr(fn, '__name__', 'hook')} raised {e!r}")

    def pump(self, slot: EngineSlot) -> None:
        """Drain the engine after an input: datagrams out, events to clients, re-arm the timer.

        While the transmit queue waits for its port's serializer the engine is not
        asked for more (back-pressure, as a NIC's doorbell stalls on a full ring):
        what it would send waits in the engine, where its pacing and window
        see it, not in an unbounded queue here; the transmit task pumps again
        once the port has taken the queue."""
        eng = slot.engine
        tx = slot.tx
        held = tx.paced_until is not None or tx.blocked is not None
        if slot.port_held is not None and (held or tx.ports_busy()):
            # the port holds the queue or still has frames to serialize: a QP pacer served
            # late meanwhile lost no link time (several QPs on a saturated port, or a FIFO
            # that covered the lateness)
            slot.port_held()
        if not held:
            out = eng.datagrams_to_send(trio.current_time())
            if out:
                tx.put(out)
                try:
                    tx.flush()
                except BlockingIOError:
                    pass
                if tx.blocked is not None or tx.paced_until is not None:
                    slot.tx_lot.unpark_all()
        ev = eng.next_event()
        while ev is not None:
            self.control.on_event(slot, ev)
            ev = eng.next_event()
        self.control.flush()  # completions out now, not on the writer task's turn
        t = eng.get_timer()
        if t is not None and held:
            # a due pacing timer would spin while held: the transmit task pumps instead
            t = max(t, trio.current_time() + self._held_recheck)
        scope = slot.timer_scope
        deadline = math.inf if t is None else t
        if deadline == scope.deadline:
            return  # trio's setter is a generator context manager: ~3 µs for nothing
        if t is not None and t < scope.deadline and t < trio.current_time() + self._precise:
            scope.cancel()  # the timer task re-arms its precise sleep for the earlier time
        scope.deadline = deadline

    async def wait_writable(self, sock: Any) -> None:
        """Until ``sock`` takes more. Several tasks may wait for one socket — a port's
        frame ring is its transports' (each one's transmit task blocks on it when it is
        full), and the drain waits beside them — where trio lets one task wait per fd
        (``BusyResourceError``, which stopped a worker serving two hosts under eight
        flows): the first waits on the fd, the others for it."""
        fd = sock.fileno()
        ev = self._writable.get(fd)
        if ev is not None:
            await ev.wait()
            return
        ev = self._writable[fd] = trio.Event()
        try:
            await trio.lowlevel.wait_writable(sock)
        finally:
            del self._writable[fd]
            ev.set()

    async def _drain(self) -> None:
        """SIGTERM: flush what is queued (bounded by ``drain_timeout``), then tell clients."""
        self.control.close_listener()
        with trio.move_on_after(self.clock.to_fabric(self.cfg.drain_timeout)):  # wall s
            for slot in self.slots.values():
                self.pump(slot)
                while slot.tx.queue:
                    try:
                        slot.tx.flush()
                    except BlockingIOError:
                        assert slot.tx.blocked is not None
                        await self.wait_writable(slot.tx.blocked.sock)
                    if slot.tx.paced_until is not None:
                        await trio.sleep_until(trio.current_time() + self.clock.to_fabric(
                            max(0.0, slot.tx.paced_until - wall())))
            await self.control.shutdown()

    # -- counters -------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return daemon_stats(self)

    _logged: set[str] = set()

    def _log_once(self, msg: str) -> None:
        if msg not in self._logged and len(self._logged) < 100:
            self._logged.add(msg)
            print(f"emu nicd: {msg}", file=sys.stderr, flush=True)


@contextlib.asynccontextmanager
async def running(cfg: NicConfig, netns: str | None = None) -> AsyncIterator[NicDaemon]:
    """An in-process daemon (tests, benchmarks): sockets opened inside ``netns``, stopped
    (drained) on exit. The namespace is entered only while sockets are made."""
    d = NicDaemon(cfg)
    if netns:
        from emu.fabric.netns import entered

        with entered(netns):
            d.open()
    else:
        d.open()
    async with trio.open_nursery() as n:
        await n.start(d.run)
        try:
            yield d
        finally:
            d.stop()


def main(argv: list[str] | None = None) -> int:
    from emu.nic.cli import run_main

    return run_main(argv)


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["EngineSlot", "NicDaemon", "family_of", "main", "running", "takes", "trimmed_table"]

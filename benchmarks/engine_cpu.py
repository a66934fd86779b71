# SPDX-License-Identifier: GPL-2.0-only
"""The CPU an engine spends per data packet, sans-IO: MRC beside UET in one process.

Why: a NIC daemon is pure Python, so what its engine costs per packet sets the time
scale a fabric needs (``emu.plan.scale``) and whether a run is credible. Measured
through the daemons (``bench-mrc --part transports``, ``bench-uet pair``) that cost is
mixed with the sockets', the event loop's and the machine's; here only the engines
run, so a change to one shows in its own figure, and in a few seconds.

Each transport's engine pair is built by its own daemon factory (``create_engine`` /
``build_engine``) from the options a daemon passes on a paced 400 Gb/s port
(``emu.nic.daemon``: ``line_rate``, ``tx_hold`` — the plan's 2-fabric-µs FIFO —
``frame_overhead``, and ``base_rtt`` as ``emu up`` gives it), so each runs as a daemon
runs it: UET with its daemon defaults (gather, runs, ACK coalescing, NSCC), MRC over
two planes (a port each) with ``--evs`` EVs per QP and NSCC. The sender writes
``--mib`` MiB as 1 MiB WRITEs, 8 in flight, in ``--mtu``-byte packets.

The wire between them stands in for the daemon around each engine (:class:`Driver`):
each port (a plane's, by destination address) serialises at the line rate and the
datagrams arrive ``DELAY`` later; a receiving daemon reads its socket once per
``TICK`` and hands the engine what arrived in one batch (``receive_batch`` where the
engine has one, else ``receive_datagram`` each, as ``NicDaemon._feed`` does); after
every input the engine is pumped (``datagrams_to_send``, its events, ``get_timer``),
and not asked for more while its ports' FIFOs hold more than ``tx_hold`` (the
daemon's back-pressure); a due timer fires ``handle_timer`` and a pump.

``time.process_time`` is read around each of those calls only, per end; the figure is
that CPU divided by the transfer's data packets (``mib`` MiB / ``mtu``), so an end's
figure holds everything its engine did for them — the sender's SACK/ACK handling, the
receiver's SACKs and ACKs. The driver, the wire and the digest are not counted.

Every datagram either engine emitted, with its fabric time, side, UDP source port,
DSCP, ECN and destination, goes into a SHA-256 (``digest``): two trees whose digests
agree sent the same bytes at the same times (the check that a CPU change kept the
behaviour). After a 2 MiB transfer of each to warm the interpreter (uncounted), runs
alternate MRC and UET ``--runs`` times; the table gives each end's best and median.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import random
import statistics
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

from lossy_link import register  # noqa: E402

from emu.core.datagram import expand  # noqa: E402
from emu.core.memory import MemoryTable  # noqa: E402
from emu.core.portsched import PortSchedule  # noqa: E402
from emu.core.verbs import SendWR, Sge  # noqa: E402
from emu.nic.pacer import FRAME_OVERHEAD  # noqa: E402
from emu.nic.slot import trimmed_table  # noqa: E402
from emu.plan.build import TX_FIFO  # noqa: E402
from emu.transports.base import Completion  # noqa: E402
from emu.wire.uet_defs import DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP  # noqa: E402

MiB = 1 << 20
#: each port's line rate (bits/s): the shipped fabrics' 400 Gb/s
RATE = 400e9
#: one-way fabric delay of the wire (s), and the base round trip the engines are told
DELAY, BASE_RTT = 3e-6, 8e-6
#: how often a receiving daemon reads its socket (fabric s): what arrived meanwhile is
#: one batch (about 12 packets of 4 KiB per 400 Gb/s port)
TICK = 1e-6
#: 1 MiB WRITEs, this many in flight (``emu perf write-bw -s 1M``'s shape)
MSG, DEPTH = MiB, 8
#: the daemon's table of trimmed DSCPs (none is trimmed here: the engines' bulk path)
TRIM = trimmed_table((DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP))
_REC = struct.Struct("!QBHBBI")


@dataclass
class Host:
    """One end: its engine, its addresses (one per port/plane), CPU spent in it."""

    name: str
    engine: Any
    addrs: list[str]
    port: int
    ports: dict[str, PortSchedule] = field(default_factory=dict)  # by destination
    cpu: float = 0.0
    timer: float | None = None
    held_until: float = -math.inf  # the daemon does not pump while its FIFO is over
    batches: int = 0
    received: int = 0
    events: list[Any] = field(default_factory=list)


class Driver:
    """Two engines joined as two daemons would join them (module docstring)."""

    def __init__(self, a: Host, b: Host, *, tick: float = TICK) -> None:
        self.hosts = (a, b)
        self.tick = tick
        self.now = 0.0
        self.q: list[tuple[float, int, int, bytes, tuple[str, int], int]] = []
        self.seq = 0
        self.digest = hashlib.sha256()
        self.datagrams = 0

    def _port(self, h: Host, dest: str) -> PortSchedule:
        p = h.ports.get(dest)
        if p is None:
            p = h.ports[dest] = PortSchedule(RATE, TX_FIFO, FRAME_OVERHEAD[4])
        return p

    def pump(self, i: int) -> None:
        """``NicDaemon.pump``: output unless the ports hold it, events, the timer."""
        h, now = self.hosts[i], self.now
        eng = h.engine
        t0 = time.process_time()
        out = eng.datagrams_to_send(now) if now >= h.held_until else []
        ev = eng.next_event()
        while ev is not None:
            h.events.append(ev)
            ev = eng.next_event()
        h.timer = eng.get_timer()
        h.cpu += time.process_time() - t0
        if out:
            self._wire(i, out)

    def _wire(self, i: int, out: list[Any]) -> None:
        h, peer, now = self.hosts[i], self.hosts[1 - i], self.now
        upd = self.digest.update
        for data, addr, meta in expand(out):
            data = bytes(data)
            dest = addr[0]
            # the source address: this host's port on the destination's plane
            k = peer.addrs.index(dest) if dest in peer.addrs else 0
            src = (h.addrs[min(k, len(h.addrs) - 1)], meta.entropy)
            port = self._port(h, dest)
            leaves = port.charge(now, len(data))
            t = math.ceil((leaves + DELAY) / self.tick - 1e-9) * self.tick
            heapq.heappush(self.q, (t, self.seq, 1 - i, data, src, meta.tos))
            self.seq += 1
            upd(_REC.pack(round(now * 1e12), i, meta.entropy, meta.dscp, meta.ecn, len(data)))
            upd(dest.encode())
            upd(data)
            self.datagrams += 1
        over = max(p.t_free - p.lead_s for p in h.ports.values())
        if over > now:
            h.held_until = over

    def feed(self, i: int, items: list[tuple[bytes, tuple[str, int], int]]) -> None:
        """``NicDaemon._feed``: one batch, or one ``receive_datagram`` per datagram."""
        h, now = self.hosts[i], self.now
        eng = h.engine
        batch = getattr(eng, "receive_batch", None)
        t0 = time.process_time()
        if batch is not None:
            batch(items, now, trim=TRIM)
        else:
            recv = eng.receive_datagram
            for data, addr, tos in items:
                recv(data, addr, now, ecn=tos & 3)
        h.cpu += time.process_time() - t0
        h.batches += 1
        h.received += len(items)

    def step(self) -> bool:
        """The next instant anything happens; False when nothing is left."""
        cand = [t for h in self.hosts for t in (h.timer,) if t is not None]
        cand += [h.held_until for h in self.hosts if h.held_until > self.now]
        if self.q:
            cand.append(self.q[0][0])
        if not cand:
            return False
        self.now = now = max(self.now, min(cand))
        due: tuple[list[Any], list[Any]] = ([], [])
        while self.q and self.q[0][0] <= now:
            _, _, to, data, src, tos = heapq.heappop(self.q)
            due[to].append((data, src, tos))
        for i, h in enumerate(self.hosts):
            if due[i]:
                self.feed(i, due[i])
                self.pump(i)
            elif h.held_until == now:
                self.pump(i)
        for i, h in enumerate(self.hosts):
            if h.timer is not None and h.timer <= now:
                t0 = time.process_time()
                h.engine.handle_timer(now)
                h.cpu += time.process_time() - t0
                self.pump(i)
        return True


def _ctx(mem: MemoryTable, seed: int, addrs: list[str], port: int, mtu: int,
         opts: dict[str, Any]) -> SimpleNamespace:
    """An ``EngineContext`` as ``NicDaemon.open`` builds it (one port per address)."""
    return SimpleNamespace(memory=mem, rng=random.Random(seed), addresses=list(addrs),
                           port=port, mtu=mtu, options=dict(opts),
                           port_addresses=[[a] for a in addrs], srv6_paths=None)


def _daemon_opts() -> dict[str, Any]:
    """What ``NicDaemon.open`` and ``emu up`` pass every engine on a paced port."""
    return {"line_rate": RATE, "tx_hold": TX_FIFO, "frame_overhead": FRAME_OVERHEAD[4],
            "base_rtt": BASE_RTT}


@dataclass
class Pair:
    """Two hosts of one transport, a region each, and how to post a WRITE."""

    a: Host
    b: Host
    post: Callable[[int, int, float], None]  # (wr_id, offset, now)
    data: bytes
    dst: Any


def mrc_pair(total: int, mtu: int, evs: int, seed: int = 1) -> Pair:
    """Two MRC engines from the daemon's factory, two planes each, one QP connected."""
    from emu.transports.mrc.factory import create_engine

    ip_mtu = mtu + 104  # PMTU fits: factory.pmtu_for
    aa, ba = ["10.0.0.1", "10.1.0.1"], ["10.0.0.2", "10.1.0.2"]
    ma, mb = MemoryTable(random.Random(seed)), MemoryTable(random.Random(seed + 1))
    opts = {**_daemon_opts(), "ev_set": evs}
    ea = create_engine(_ctx(ma, seed + 2, aa, 4971, ip_mtu, opts))
    eb = create_engine(_ctx(mb, seed + 3, ba, 4971, ip_mtu, opts))
    qa = ea.create_qp(send_cq="a.s", recv_cq="a.r")
    qb = eb.create_qp(send_cq="b.s", recv_cq="b.r")
    ia, ib = ea.query_qp(qa), eb.query_qp(qb)
    ea.connect(qa, ib)
    eb.connect(qb, ia)
    src, dst = register(ma, total), register(mb, total)
    data = random.Random(seed).randbytes(total)
    src.view[:] = data
    dst.view[:] = bytes(total)  # touched, as a registered buffer is: no page faults timed

    def post(wr: int, off: int, now: float) -> None:
        ea.post_send(qa, SendWR.write(wr, [Sge(src.va + off, MSG, src.lkey)], dst.va + off,
                                      dst.rkey), now)

    return Pair(Host("mrc-a", ea, aa, 4971), Host("mrc-b", eb, ba, 4971), post, data, dst)


def uet_pair(total: int, mtu: int, seed: int = 1) -> Pair:
    """Two UET engines from the daemon's factory (its defaults), one endpoint each."""
    from emu.transports.uet.factory import build_engine

    ip_mtu = mtu + 104  # UET_OVERHEAD: the payload per packet is mtu
    ma, mb = MemoryTable(random.Random(seed)), MemoryTable(random.Random(seed + 1))
    ea = build_engine(_ctx(ma, seed + 2, ["10.0.0.1"], 4793, ip_mtu, _daemon_opts()))
    eb = build_engine(_ctx(mb, seed + 3, ["10.0.0.2"], 4793, ip_mtu, _daemon_opts()))
    a = ea.create_ep(send_cq="a.s", recv_cq="a.r")
    b = eb.create_ep(send_cq="b.s", recv_cq="b.r")
    src, dst = register(ma, total), register(mb, total)
    data = random.Random(seed).randbytes(total)
    src.view[:] = data
    dst.view[:] = bytes(total)

    def post(wr: int, off: int, now: float) -> None:
        ea.post_write(a, wr, [Sge(src.va + off, MSG, src.lkey)], ("10.0.0.2", b),
                      dst.va + off, dst.rkey, now)

    return Pair(Host("uet-a", ea, ["10.0.0.1"], 4793), Host("uet-b", eb, ["10.0.0.2"], 4793),
                post, data, dst)


def transfer(p: Pair, total: int, mtu: int) -> dict[str, Any]:
    """Write ``total`` bytes A → B through a :class:`Driver`; the CPU per data packet at
    each end, the fabric time, the datagrams' digest. Raises AssertionError if a WRITE
    failed or the bytes differ."""
    d = Driver(p.a, p.b)
    n = total // MSG
    posted = done = 0

    def post() -> None:
        nonlocal posted
        t0 = time.process_time()
        p.post(posted, posted * MSG, d.now)
        p.a.cpu += time.process_time() - t0
        posted += 1

    while posted < min(DEPTH, n):
        post()
    d.pump(0)
    steps = 0
    while done < n:
        if not d.step():
            raise AssertionError(f"{p.a.name}: stalled after {done} of {n} WRITEs")
        steps += 1
        evs, p.a.events[:] = list(p.a.events), []
        more = False
        for ev in evs:
            if isinstance(ev, Completion):
                assert ev.wc.ok, ev.wc
                done += 1
                if posted < n:
                    post()
                    more = True
        if more:
            d.pump(0)  # the posts' doorbell: a control request pumps the engine
    assert bytes(p.dst.view[:total]) == p.data, f"{p.a.name}: the data differ"
    pkts = total // mtu
    a_c, b_c = p.a.engine.counters(), p.b.engine.counters()
    return {"sender_us": p.a.cpu / pkts * 1e6, "receiver_us": p.b.cpu / pkts * 1e6,
            "packets": pkts, "fabric_us": round(d.now * 1e6, 2), "datagrams": d.datagrams,
            "digest": d.digest.hexdigest(),
            "rx_batch": round(p.b.received / max(1, p.b.batches), 1),
            "retransmits": a_c.get("tx_retransmits", 0),
            "counters": {"a": a_c, "b": b_c}}


def run(mib: int = 64, mtu: int = 4096, evs: int = 256, runs: int = 3,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """``runs`` rounds of MRC then UET; each end's best and median µs per data packet and
    the MRC/UET ratios of the medians; every round's digests must agree."""
    total = mib * MiB
    rows: dict[str, list[dict[str, Any]]] = {"mrc": [], "uet": []}
    # warm: the interpreter specialises the hot code on its first packets (the first
    # 4 MiB cost twice what later ones do); not counted
    transfer(mrc_pair(2 * MiB, mtu, evs), 2 * MiB, mtu)
    transfer(uet_pair(2 * MiB, mtu), 2 * MiB, mtu)
    for _ in range(runs):
        rows["mrc"].append(transfer(mrc_pair(total, mtu, evs), total, mtu))
        rows["uet"].append(transfer(uet_pair(total, mtu), total, mtu))
    out: dict[str, Any] = {"mib": mib, "mtu": mtu, "evs": evs, "runs": runs,
                           "rate_gbps": RATE / 1e9, "tx_hold_us": TX_FIFO * 1e6,
                           "tick_us": TICK * 1e6}
    for tr, rs in rows.items():
        digests = {r["digest"] for r in rs}
        if len(digests) != 1:
            raise AssertionError(f"{tr}: the runs emitted different datagrams: {digests}")
        last = rs[-1]
        out[tr] = {k: last[k] for k in ("packets", "fabric_us", "datagrams", "digest",
                                        "rx_batch", "retransmits")}
        for end in ("sender_us", "receiver_us"):
            xs = [r[end] for r in rs]
            out[tr][end] = {"best": round(min(xs), 2), "median": round(statistics.median(xs), 2)}
    out["ratio"] = {end: round(out["mrc"][end]["median"] / out["uet"][end]["median"], 2)
                    for end in ("sender_us", "receiver_us")}
    log(f"engine CPU per data packet (sans-IO, process_time in the engines' calls): "
        f"{mib} MiB as 1 MiB WRITEs, {mtu} B packets, {RATE / 1e9:g} Gb/s ports, tx_hold "
        f"{TX_FIFO * 1e6:g} us; MRC over 2 planes and {evs} EVs; {runs} runs, best / median")
    log(f"  {'':4s} {'sender us':>17s} {'receiver us':>17s} {'datagrams':>10s} "
        f"{'rx batch':>8s} {'resent':>6s}  digest")
    for tr in ("mrc", "uet"):
        r = out[tr]
        s, v = r["sender_us"], r["receiver_us"]
        log(f"  {tr:4s} {s['best']:8.2f} / {s['median']:6.2f} {v['best']:8.2f} / "
            f"{v['median']:6.2f} {r['datagrams']:10d} {r['rx_batch']:8.1f} "
            f"{r['retransmits']:6d}  {r['digest'][:16]}")
    log(f"  MRC / UET (medians): sender {out['ratio']['sender_us']}, receiver "
        f"{out['ratio']['receiver_us']}")
    return out


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 64)

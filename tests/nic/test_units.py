# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's parts without namespaces or root: timer re-arming under a virtual clock,
the stub engine sans-IO, bounded queues, GSO grouping on ::1, framing."""

from __future__ import annotations

import contextlib
import random
import socket
from collections import deque

import pytest
import trio

from emu.core.cq import WcOpcode, WcStatus
from emu.core.datagram import Run
from emu.core.memory import Access, MemoryTable, SharedBuffer
from emu.core.verbs import RecvWR, SendWR, Sge
from emu.nic import engines
from emu.nic.config import NicConfig
from emu.nic.daemon import NicDaemon
from emu.nic.loopback import LoopbackEngine
from emu.nic.protocol import LineBuffer, ProtocolError
from emu.nic.txpath import TxPath
from emu.nic.udp import PortSocket
from emu.transports.base import Completion, StateChanged, TxMeta


class TimerEngine:
    """Records when the daemon calls handle_timer; deadlines set by the test."""

    def __init__(self, ctx: engines.EngineContext) -> None:
        self.deadlines: list[float] = []
        self.fired: list[float] = []

    def receive_datagram(self, data, addr, now, *, ecn=0):  # noqa: ANN001
        pass

    def datagrams_to_send(self, now):  # noqa: ANN001
        return []

    def get_timer(self):  # noqa: ANN201
        return min(self.deadlines) if self.deadlines else None

    def handle_timer(self, now):  # noqa: ANN001
        self.fired.append(now)
        self.deadlines = [d for d in self.deadlines if d > now]

    def next_event(self):  # noqa: ANN201
        return None

    def counters(self):  # noqa: ANN201
        return {}

    def pause(self, cls, until):  # noqa: ANN001
        pass


@contextlib.asynccontextmanager
async def _daemon_with(engine: type, name: str, port: int, tmp_path):  # noqa: ANN202
    """An in-process daemon with no addresses serving the test engine ``engine``; yields
    the daemon and its engine slot, and stops it after the body."""
    engines.register(name, engine)
    cfg = NicConfig(sock_path=str(tmp_path / "c" / "h.sock"), transports=[name],
                    ports={name: port}, addresses=[])
    d = NicDaemon(cfg)
    async with trio.open_nursery() as n:
        await n.start(d.run)
        yield d, d.slots[name]


@pytest.mark.trio
async def test_one_timer_per_engine_rearmed_after_every_input(autojump_clock, tmp_path):
    async with _daemon_with(TimerEngine, "timer-test", 4999, tmp_path) as (d, slot):
        eng = slot.engine
        t0 = trio.current_time()
        eng.deadlines = [t0 + 10.0]
        d.pump(slot)  # an input happened: the daemon re-reads get_timer()
        await trio.sleep(1.0)
        eng.deadlines.append(t0 + 2.0)  # an earlier deadline must win
        d.pump(slot)
        await trio.sleep(20.0)
        assert eng.fired == [t0 + 2.0, t0 + 10.0]
        assert slot.c["timer_fires"] == 2
        d.stop()


class AckEngine(TimerEngine):
    """A datagram saying "ack" clears the deadlines, as an ACK makes an RTO moot."""

    def __init__(self, ctx: engines.EngineContext) -> None:
        super().__init__(ctx)
        self.log: list[str] = []

    def receive_datagram(self, data, addr, now, *, ecn=0):  # noqa: ANN001
        self.log.append(f"rx {bytes(data).decode()}")
        if data == b"ack":
            self.deadlines = []

    def handle_timer(self, now):  # noqa: ANN001
        self.log.append("timer")
        super().handle_timer(now)


@pytest.mark.trio
async def test_what_has_arrived_goes_in_before_a_due_timer_fires(autojump_clock, tmp_path):
    """The datagram sits in the backlog, its reader not yet scheduled, when the timer comes
    due: the daemon feeds it first, so an ACK cancels the retransmission timeout."""
    async with _daemon_with(AckEngine, "ack-test", 4998, tmp_path) as (d, slot):
        eng = slot.engine
        t0 = trio.current_time()
        eng.deadlines = [t0 + 1.0]
        d.pump(slot)
        slot.backlog.append((b"ack", ("10.0.0.9", 4998), 0))  # not announced to the loop
        await trio.sleep(2.0)
        assert eng.log == ["rx ack"] and slot.c["timer_fires"] == 0
        eng.deadlines = [trio.current_time() + 1.0]
        d.pump(slot)
        slot.backlog.append((b"data", ("10.0.0.9", 4998), 0))
        await trio.sleep(2.0)
        assert eng.log == ["rx ack", "rx data", "timer"] and slot.c["timer_fires"] == 1
        d.stop()


def _pair(rng_seed: int = 1):
    mem = MemoryTable(random.Random(rng_seed))
    buf = SharedBuffer.create(8192)
    pd = mem.alloc_pd()
    mr = mem.register(pd, buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    mk = lambda a: LoopbackEngine(engines.EngineContext(mem, random.Random(a), [a], 4791,  # noqa: E731
                                                        options={"rto": 0.1, "retry_cnt": 2}))
    a, b = mk("10.0.0.1"), mk("10.0.0.2")
    qa = a.create_qp(pd=pd, send_cq="A", recv_cq="A")
    qb = b.create_qp(pd=pd, send_cq="B", recv_cq="B")
    a.connect(qa, b.query_qp(qb), 0.0)
    b.connect(qb, a.query_qp(qa), 0.0)
    return a, b, qa, qb, mr, buf


def _events(e) -> list:  # noqa: ANN001
    out = []
    while (ev := e.next_event()) is not None:
        out.append(ev)
    return out


def test_loopback_engine_sans_io_send_write_retry_and_garbage():
    a, b, qa, qb, mr, buf = _pair()
    try:
        _events(a), _events(b)
        buf.view[:4] = b"ping"
        b.post_recv(qb, RecvWR(7, (Sge(mr.va + 100, 16, mr.lkey),)), 0.0)
        a.post_send(qa, SendWR.send(1, [Sge(mr.va, 4, mr.lkey)]), 0.0)
        a.post_send(qa, SendWR.write(2, [Sge(mr.va, 4, mr.lkey)], mr.va + 200, mr.rkey), 0.0)
        for d, addr, meta in a.datagrams_to_send(0.0):
            assert addr == ("10.0.0.2", 4791) and isinstance(meta, TxMeta)
            b.receive_datagram(d, ("10.0.0.1", meta.entropy), 0.001)
        for d, _, _ in b.datagrams_to_send(0.001):
            a.receive_datagram(d, ("10.0.0.2", 4791), 0.002)
        assert bytes(buf.view[100:104]) == b"ping" and bytes(buf.view[200:204]) == b"ping"
        (rx,) = _events(b)
        assert isinstance(rx, Completion) and rx.cq == "B" and rx.wc.opcode is WcOpcode.RECV
        assert [e.wc.wr_id for e in _events(a)] == [1, 2]
        assert a.get_timer() is None
        # the link dies: retransmit on the timer, then error with flushed completions
        a.post_send(qa, SendWR.send(3, [Sge(mr.va, 4, mr.lkey)]), 1.0)
        a.post_send(qa, SendWR.send(4, [Sge(mr.va, 4, mr.lkey)]), 1.0)
        a.datagrams_to_send(1.0)
        now = 1.0
        while a.get_timer() is not None:
            now = a.get_timer()
            a.handle_timer(now)
            a.datagrams_to_send(now)
        evs = _events(a)
        wcs = [e.wc for e in evs if isinstance(e, Completion)]
        assert [(w.wr_id, w.status) for w in wcs] == [(3, WcStatus.RETRY_EXC_ERR),
                                                     (4, WcStatus.WR_FLUSH_ERR)]
        assert [e.new for e in evs if isinstance(e, StateChanged)] == ["ERR"]
        assert a.counters()["retransmits"] == 2 * 2
        for junk in (b"", b"\x00" * 3, bytes(range(40))):
            b.receive_datagram(junk, ("10.0.0.9", 1), 2.0)
        assert b.counters()["malformed"] == 3
    finally:
        buf.close()


def test_loopback_bad_rkey_writes_nothing_and_errors():
    a, b, qa, qb, mr, buf = _pair()
    try:
        buf.view[:4] = b"evil"
        a.post_send(qa, SendWR.write(9, [Sge(mr.va, 4, mr.lkey)], mr.va + 300, mr.rkey ^ 1), 0.0)
        for d, _, _ in a.datagrams_to_send(0.0):
            b.receive_datagram(d, ("10.0.0.1", 4791), 0.0)
        for d, _, _ in b.datagrams_to_send(0.0):
            a.receive_datagram(d, ("10.0.0.2", 4791), 0.0)
        assert bytes(buf.view[300:304]) == b"\0" * 4
        wcs = [e.wc for e in _events(a) if isinstance(e, Completion)]
        assert wcs[-1].status is WcStatus.REM_ACCESS_ERR
    finally:
        buf.close()


def test_tx_queue_is_bounded_and_counts():
    c = {k: 0 for k in ("tx_backlog_drops",)}
    tx = TxPath([], c, max_queue=5)
    tx.put([(b"x", ("::1", 1), None)] * 3)
    tx.put([(b"y", ("::1", 1), None)] * 4)
    assert len(tx.queue) == 5 and c["tx_backlog_drops"] == 2


def test_tx_queue_counts_a_run_as_its_datagrams_and_takes_it_whole():
    c = {k: 0 for k in ("tx_backlog_drops",)}
    tx = TxPath([], c, max_queue=10)

    def run(n: int) -> Run:
        return Run(bytearray(4 * n), 4, memoryview(bytes(8 * n)), 8, [TxMeta(5000)] * n)

    tx.put([(run(4), ("::1", 1), None), (b"x", ("::1", 1), None), (run(6), ("::1", 1), None),
            (b"y", ("::1", 1), None)])
    # 4 + 1 fit; the 6-datagram run does not (5 left): it and what follows are dropped
    assert [type(d) for d, _, _ in tx.queue] == [Run, bytes]
    assert c["tx_backlog_drops"] == 7


def tx_counters_and_receiver() -> tuple[dict[str, int], socket.socket, int]:
    """A TxPath's counters and a UDP receiver on ::1 (and its port) for send tests."""
    c = dict.fromkeys(("tx_packets", "tx_bytes", "tx_gso_sends", "tx_gso_disabled",
                       "tx_errors", "tx_entropy_fallback", "tx_backlog_drops"), 0)
    rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    rx.bind(("::1", 0))
    rx.settimeout(5)
    return c, rx, rx.getsockname()[1]


def test_gso_groups_equal_datagrams_to_one_destination():
    c, rx, port = tx_counters_and_receiver()
    ps = PortSocket("::1", 0, mtu=65536, gro=False)
    if not ps.gso:
        pytest.skip("no UDP GSO on this kernel")
    tx = TxPath([ps], c, max_queue=100)
    meta = TxMeta(ps.sock.getsockname()[1])
    other = TxMeta(ps.sock.getsockname()[1], ecn=2)
    items = [(bytes([i]) * 1000, ("::1", port), meta) for i in range(10)]
    items.append((b"z" * 500, ("::1", port), meta))  # shorter last segment joins the group
    items.append((b"w" * 1000, ("::1", port), other))  # another meta: another send
    tx.put(items)
    tx.flush()
    got = [rx.recv(65536) for _ in range(12)]
    assert got == [d for d, _, _ in items]
    assert c["tx_gso_sends"] == 1 and c["tx_packets"] == 12
    ps.close()
    rx.close()


def test_a_run_without_a_frame_ring_leaves_datagram_by_datagram_on_its_entropies():
    """No frame ring (``--no-frame-ring``, or a port without one): a Run at the head of the
    queue is opened into its datagrams, each sent from the socket bound to its entropy."""
    c, rx, port = tx_counters_and_receiver()
    ps = PortSocket("::1", 0, mtu=65536, gro=False)
    tx = TxPath([ps], c, max_queue=100)
    try:
        own = ps.port = ps.sock.getsockname()[1]
        ents = [own, 0, 0]  # the port's own, then two other free source ports
        for i in (1, 2):
            probe = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            probe.bind(("::1", 0))
            ents[i] = probe.getsockname()[1]
            probe.close()
        pay = bytes(range(256)) * 12
        heads = b"".join(b"hd%d" % i for i in range(3))
        run = Run(bytearray(heads), 3, memoryview(pay), 1000, [TxMeta(e) for e in ents])
        tx.put([(b"first", ("::1", port), TxMeta(own)), (run, ("::1", port), None)])
        tx.flush()
        got = [rx.recvfrom(65536) for _ in range(4)]
        assert [g[0] for g in got] == [b"first"] + [b"hd%d" % i + pay[i * 1000:(i + 1) * 1000]
                                                   for i in range(3)]
        assert [g[1][1] for g in got] == [own, *ents]
        assert c["tx_packets"] == 4 and not tx.queue
    finally:
        tx.close()
        ps.close()
        rx.close()


@pytest.mark.parametrize("gso", [True, False])
def test_gather_datagrams_are_sealed_and_sent_whole(gso):
    """Scatter-gather datagrams (header, payload view, pad + ICRC tail) leave as the
    same bytes a joined buffer would, with the ICRC over the real headers — in a GSO
    batch mixed with plain buffers and one by one."""
    from emu.nic.framing import RoceIcrc
    from emu.transports.roce import packets as P

    c, rx, port = tx_counters_and_receiver()
    ps = PortSocket("::1", 0, mtu=65536, gro=False, gso=gso)
    if gso and not ps.gso:
        pytest.skip("no UDP GSO on this kernel")
    icrc = RoceIcrc()
    tx = TxPath([ps], c, max_queue=100, seal=icrc.seal, seal_many=icrc.seal_many)
    meta = TxMeta(ps.sport)
    memory = bytearray(random.Random(7).randbytes(4096 * 4))
    dst = ("::1", port)
    items = [(P.build_gather(P.WRITE_MIDDLE, 0x12, i, memoryview(memory)[i * 4096:(i + 1)
                                                                         * 4096]), dst, meta)
             for i in range(3)]
    items.append((P.build(P.WRITE_MIDDLE, 0x12, 3, b"", memory[3 * 4096:]), dst, meta))
    items.append((P.build_gather(P.WRITE_LAST, 0x12, 4, memoryview(memory)[5:1002]), dst,
                  meta))  # 997 B: 3 pad bytes in the tail, shorter last segment
    tx.put(items)
    tx.flush()
    got = [rx.recv(65536) for _ in range(len(items))]
    assert c["tx_packets"] == len(items) and c["tx_gso_sends"] == (1 if gso else 0)
    for (d, _, _), g in zip(items, got, strict=True):
        assert g == bytes(d) and len(g) == len(d)
        assert icrc.check(g, "::1", ps.sport, "::1", port), "bad ICRC"
    assert got[4][12:12 + 997] == memory[5:1002] and got[4][12 + 997:-4] == bytes(3)
    ps.close()
    rx.close()


def test_entropy_sockets_open_up_front_and_carry_their_source_port():
    """A spraying engine's entropy set gets its sockets at start (preopen); sends then
    leave from them — the UDP source port is the entropy — without opening more."""
    c, rx, port = tx_counters_and_receiver()
    ps = PortSocket("::1", 0, mtu=65536, gro=False)
    tx = TxPath([ps], c, max_queue=100)
    free = []
    for _ in range(3):  # three free ports to use as the entropy set
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as t:
            t.bind(("::1", 0))
            free.append(t.getsockname()[1])
    try:
        assert tx.preopen(free) == 3 and tx.preopen(free) == 0  # idempotent
        opened = len(tx.sockets())
        tx.put([(b"x%d" % e, ("::1", port), TxMeta(e)) for e in free])
        tx.flush()
        got = sorted(rx.recvfrom(100)[1][1] for _ in free)
        assert got == sorted(free) and len(tx.sockets()) == opened
        assert c["tx_entropy_fallback"] == 0
    finally:
        tx.close()
        ps.close()
        rx.close()


def test_ipv4_gso_is_off_by_default_for_the_icrc():
    ps = PortSocket("127.0.0.1", 0)
    try:
        assert ps.gso is False  # IP IDs would count up per segment: RoCE ICRC breaks
    finally:
        ps.close()


def test_line_buffer_bounds_messages():
    lb = LineBuffer(max_line=10)
    assert lb.feed(b'{"a"') == [] and lb.feed(b":1}\n{") == [b'{"a":1}']
    with pytest.raises(ProtocolError):
        lb.feed(b"x" * 20)


def test_daemon_and_api_import_no_scapy_or_pyroute2():
    """Start-up time and idle RSS: the daemon loads neither (pyroute2 alone is ~100 ms)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import emu.nic.daemon, emu.nic.cli, emu.nic.framing, emu.api\n"
            "import contextlib\n"
            "with contextlib.suppress(ImportError):\n"
            "    import emu.transports.roce.engine, emu.wire.icrc\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('scapy', 'pyroute2'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_reads_are_lent_from_chunks_never_overwritten_while_held():
    """Without a framing check every datagram is a view of a receive chunk: views kept
    across many chunks' worth of reads keep their bytes; chunks nobody holds are
    reused; the counts and the TOS are those of the general path."""
    import collections
    import os

    from emu.nic import udp

    rx = PortSocket("::1", 0, gro=False, rcvbuf=8 << 20)
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IPV6, udp.IPV6_TCLASS, 0x2A << 2 | 2)
    try:
        c = collections.Counter()
        kept = []
        for rnd in range(6):  # each round fills ~2 chunks
            sent = [os.urandom(4000 + (i * 37) % 4000) for i in range(100)]
            for d in sent:
                tx.sendto(d, ("::1", rx.sport))
            out: collections.deque = collections.deque()
            while True:
                try:
                    rx.recv_batch(out, 64, 10_000, c)
                except BlockingIOError:
                    break
            got = list(out)
            assert [bytes(g[0]) for g in got] == sent
            assert all(type(g[0]) is memoryview and g[2] == 0x2A << 2 | 2 for g in got)
            if rnd < 2:
                kept.append((sent, [g[0] for g in got]))  # held across later rounds
        for sent, views in kept:
            assert [bytes(v) for v in views] == sent  # never overwritten
        assert c["rx_packets"] == 600 and c["rx_bytes"] == sum(
            4000 + (i * 37) % 4000 for i in range(100)) * 6
        assert len(rx._spare) <= udp.RX_SPARE + 1
        made = {id(ch) for ch in rx._spare} | {id(rx._chunk)}
        assert len(made) < 12  # the unheld ones went round again
    finally:
        rx.close()
        tx.close()


def test_reads_after_a_kernel_drop_stay_on_the_quick_path_and_count_the_drops():
    """Once a socket's receive buffer has overflowed, every read carries the kernel's drop
    count (SO_RXQ_OVFL) beside its TOS: the reads still take the common path — an
    overloaded daemon must not get slower per datagram — and the count is kept."""
    ps = PortSocket("::1", 0, mtu=65536, gro=False, rcvbuf=4096)
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        dst = ("::1", ps.sock.getsockname()[1])
        out: deque = deque()
        c = dict.fromkeys(("rx_packets", "rx_bytes", "rx_backlog_drops", "rx_bad_icrc",
                           "rx_truncated"), 0)
        for i in range(400):  # far beyond a 4 KiB buffer: the kernel drops most
            tx.sendto(bytes([i & 0xFF]) * 700, dst)
        with contextlib.suppress(BlockingIOError):
            ps.recv_batch(out, 1000, 1000, c)
        first = len(out)
        general = []
        real = ps._read_general
        ps._read_general = lambda *a, **k: (general.append(a), real(*a, **k))[1]
        for _ in range(2):  # queued after the drops: they carry the count
            tx.sendto(b"x" * 700, dst)
        with contextlib.suppress(BlockingIOError):
            ps.recv_batch(out, 1000, 1000, c)
        assert len(out) == first + 2 and not general
        assert ps.kernel_drops + first == 400
        assert c["rx_packets"] == len(out)
        assert all(len(d) == 700 and tos == 0 for d, _, tos in out)
    finally:
        tx.close()
        ps.close()


def test_ports_are_busy_while_every_paced_port_still_has_frames_to_serialize():
    """What decides whether a RoCEv2 pacer served late cost link time (pacer_late): while
    every port's serializer still has frames, it did not."""
    import time
    from types import SimpleNamespace

    from emu.nic.pacer import PortPacer
    from emu.nic.txpath import TxPath

    a, b = PortPacer("eth0", 1e9), PortPacer("eth1", 1e9)
    tx = TxPath([SimpleNamespace(pacer=a), SimpleNamespace(pacer=b)], {}, max_queue=8)
    now = time.monotonic()
    a.charge(now, 10**6, 100, waited=False)  # 8 ms of frames on eth0
    assert not tx.ports_busy()  # eth1 has none
    b.charge(now, 10**6, 100, waited=False)
    assert tx.ports_busy()
    a.t_free = b.t_free = now  # both have run dry
    assert not tx.ports_busy()
    assert not TxPath([SimpleNamespace(pacer=None)], {}, max_queue=8).ports_busy()  # unpaced

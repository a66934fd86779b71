# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's parts without namespaces or root: timer re-arming under a virtual clock,
the stub engine sans-IO, the control protocol's line buffer, what the daemon imports.
The way out is in ``test_txpath.py``, the ports' sockets in ``test_udp.py``."""

from __future__ import annotations

import contextlib
import random

import pytest
import trio

from emu.core.cq import WcOpcode, WcStatus
from emu.core.memory import Access, MemoryTable, SharedBuffer
from emu.core.verbs import RecvWR, SendWR, Sge
from emu.nic import engines
from emu.nic.config import NicConfig
from emu.nic.daemon import NicDaemon
from emu.nic.loopback import LoopbackEngine
from emu.nic.protocol import LineBuffer, ProtocolError
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


# SPDX-License-Identifier: GPL-2.0-only
"""Go-back-N under adversarial interleavings: every request on the wire carries the right bytes.

Why this exists (issue #12, item 0): a rewind (timeout or NAK) followed by the
ACKs of the original packets left the requester's transmit pointer behind the
oldest outstanding WQE; compacting the send queue then made it negative and
packets were built from the wrong WQE at the wrong offset (WRITE_MIDDLEs of 0
or 16 bytes, ``REM_INV_REQ_ERR`` at the peer). End-to-end transfers only
caught it under CPU load, so here hypothesis plays the network *and* the
clock: it posts WRITEs/SENDs of random sizes, delivers, drops, duplicates and
reorders packets and ACK/NAKs in both directions, and fires timers at
arbitrary moments. An oracle derives, from the posted WRs alone, what the
packet with each PSN must be (opcode, RETH, immediate, payload = which bytes
of the posted buffer) and checks every request the requester emits. At the
end the wire heals: everything completes successfully and the responder's
memory is byte-exact; neither QP ever leaves RTS.

Sans-IO: two :class:`RoceEngine` instances and lists standing in for the wire.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from lossy_link import register

from emu.core.cq import WcOpcode, WcStatus
from emu.core.datagram import expand
from emu.core.memory import MemoryTable
from emu.core.psn import PSN24
from emu.transports.base import Completion, StateChanged
from emu.transports.roce import RecvWR, RoceEngine, SendWR, Sge
from emu.transports.roce import packets as P
from emu.transports.roce.qp import QpState

PMTU = 256
RETRY_CNT = 7
_OPS = {  # kind -> (only, first, middle, last)
    "write": (P.WRITE_ONLY, P.WRITE_FIRST, P.WRITE_MIDDLE, P.WRITE_LAST),
    "write_imm": (P.WRITE_ONLY_IMM, P.WRITE_FIRST, P.WRITE_MIDDLE, P.WRITE_LAST_IMM),
    "send": (P.SEND_ONLY, P.SEND_FIRST, P.SEND_MIDDLE, P.SEND_LAST),
    "send_imm": (P.SEND_ONLY_IMM, P.SEND_FIRST, P.SEND_MIDDLE, P.SEND_LAST_IMM),
    "read": (P.READ_REQUEST,) * 4,  # a READ request for packet k asks for the rest from k
}


@dataclass
class Msg:
    """A posted WR as the oracle sees it: where its bytes are and which PSNs it owns."""

    wr_id: int
    kind: str
    src_off: int  # offset in A's source region (READ: in A's region the READ fills)
    length: int
    dst_off: int  # offset in B's WRITE region, receive region (SEND/imm), READ source
    imm: int | None
    psn: int  # extended first PSN (assigned in post order, as the requester does)
    npkts: int


class Wire:
    """Requester engine A, responder engine B, and the packets between them.

    ``daemon`` builds the engines as the NIC daemon does (no ICRC inside,
    Gather output, so ``Requester.middles`` and ``Responder.middle``
    carry the bulk); otherwise ICRCs are sealed and checked with the pseudo
    header. ``compact_after`` lowers the requester's send-queue compaction
    threshold so that short examples reach it.
    """

    def __init__(self, daemon: bool, compact_after: int, seed: int) -> None:
        kw = ({"icrc": None, "gather": True} if daemon
              else {"icrc": P.pseudo_header_icrc})
        self.ma, self.mb = MemoryTable(random.Random(seed)), MemoryTable(random.Random(seed + 1))
        self.ea = RoceEngine(self.ma, random.Random(seed + 2), line_rate=10e9, cc=None, **kw)
        self.eb = RoceEngine(self.mb, random.Random(seed + 3), line_rate=10e9, cc=None, **kw)
        qkw = {"pmtu": PMTU, "timeout": 1, "retry_cnt": RETRY_CNT, "min_rnr_timer": 1,
               "max_rd_atomic": 2, "max_dest_rd_atomic": 2}
        self.qa = self.ea.create_qp(send_cq="a.scq", recv_cq="a.rcq", **qkw)
        self.qb = self.eb.create_qp(send_cq="b.scq", recv_cq="b.rcq", **qkw)
        ia, ib = self.ea.query_qp(self.qa), self.eb.query_qp(self.qb)
        self.addr_a, self.addr_b = ("10.0.0.1", 4791), ("10.0.0.2", 4791)
        self.ea.connect(self.qa, {**ib, "address": self.addr_b[0]})
        self.eb.connect(self.qb, {**ia, "address": self.addr_a[0]})
        self.req = self.ea._qps[self.qa].requester  # white box: retry budget, compaction
        self.req.compact_after = compact_after
        self.src = register(self.ma, 1 << 17)
        self.src.view[:] = random.Random(seed + 4).randbytes(len(self.src.view))
        self.dst = register(self.mb, 1 << 17)
        self.rcv = register(self.mb, 1 << 17)
        self.rsrc = register(self.mb, 1 << 17)  # what READs fetch
        self.rsrc.view[:] = random.Random(seed + 5).randbytes(len(self.rsrc.view))
        self.rdst = register(self.ma, 1 << 17)  # where READs land
        self.psn0 = ia["psn"]
        self.msgs: list[Msg] = []
        self.starts: list[int] = []
        self.next_psn = self.psn0
        self.src_top = self.dst_top = self.rcv_top = 0
        self.a2b: list[bytes] = []
        self.b2a: list[bytes] = []
        self.now = 0.0
        self.checked = 0
        self.events: dict[str, list] = {"a": [], "b": []}

    # -- posting --------------------------------------------------------------

    def post(self, kind: str, length: int, split: bool) -> None:
        wr_id = len(self.msgs) + 1
        npkts = max(1, -(-length // PMTU))
        if kind == "read":  # A's rdst and B's rsrc at the same offset
            off = self.src_top
            self.src_top += length
            self.msgs.append(Msg(wr_id, kind, off, length, off, None, self.next_psn, npkts))
            self.starts.append(self.next_psn)
            self.next_psn += npkts
            self.ea.post_send(self.qa, SendWR.read(
                wr_id, [Sge(self.rdst.va + off, length, self.rdst.lkey)], self.rsrc.va + off,
                self.rsrc.rkey), self.now)
            return
        imm = 0xC0DE0000 + wr_id if kind.endswith("imm") else None
        send = kind.startswith("send")
        off = self.src_top
        self.src_top += length
        cut = length // 2 if split and length > 1 else length
        sges = [Sge(self.src.va + off, cut, self.src.lkey)]
        if cut < length:
            sges.append(Sge(self.src.va + off + cut, length - cut, self.src.lkey))
        if send or imm is not None:
            roff = self.rcv_top
            self.rcv_top += length
            self.eb.post_recv(self.qb, RecvWR(wr_id, [Sge(self.rcv.va + roff, max(length, 1),
                                                          self.rcv.lkey)]))
        if send:
            dst_off = self.rcv_top - length
            wr = SendWR.send(wr_id, sges, imm=imm)
        else:
            dst_off = self.dst_top
            self.dst_top += length
            wr = SendWR.write(wr_id, sges, self.dst.va + dst_off, self.dst.rkey, imm=imm)
        self.msgs.append(Msg(wr_id, kind, off, length, dst_off, imm, self.next_psn, npkts))
        self.starts.append(self.next_psn)
        self.next_psn += npkts
        self.ea.post_send(self.qa, wr, self.now)

    # -- the oracle -------------------------------------------------------------

    def check_request(self, data: bytes) -> None:
        """The packet must be exactly what its PSN stands for in the posted WRs."""
        p = P.parse(data)  # a request the requester built must parse
        if self.ea.icrc is not None:
            assert P.icrc_ok(data, self.ea.icrc)
        ext = self.psn0 + ((p.psn - self.psn0) & PSN24.mask)
        i = bisect.bisect_right(self.starts, ext) - 1
        assert i >= 0 and ext < self.next_psn, f"PSN {p.psn:#x} was never assigned"
        m = self.msgs[i]
        k = ext - m.psn
        assert k < m.npkts, f"PSN {p.psn:#x} is past WR {m.wr_id}"
        only, first, middle, last = _OPS[m.kind]
        want = (only if m.npkts == 1 else first if k == 0 else last if k == m.npkts - 1
                else middle)
        assert p.opcode == want, (f"WR {m.wr_id} packet {k}/{m.npkts}: opcode "
                                  f"{p.opcode:#x}, expected {want:#x}")
        off = k * PMTU
        if m.kind == "read":  # resumed from packet k: the rest of the range
            assert (p.va, p.rkey, p.dmalen) == (self.rsrc.va + m.dst_off + off, self.rsrc.rkey,
                                                m.length - off)
            assert p.ackreq == 1
            self.checked += 1
            return
        chunk = min(PMTU, m.length - off)
        want_bytes = bytes(self.src.view[m.src_off + off:m.src_off + off + chunk])
        assert bytes(p.payload) == want_bytes, (
            f"WR {m.wr_id} packet {k}/{m.npkts}: {len(p.payload)} B on the wire, "
            f"expected {chunk} B from offset {off}")
        if p.opcode in (P.WRITE_FIRST, P.WRITE_ONLY, P.WRITE_ONLY_IMM):
            assert (p.va, p.rkey, p.dmalen) == (self.dst.va + m.dst_off, self.dst.rkey,
                                                m.length)
        if p.opcode in (P.WRITE_ONLY_IMM, P.WRITE_LAST_IMM, P.SEND_ONLY_IMM, P.SEND_LAST_IMM):
            assert p.imm == m.imm
        assert p.ackreq == 1 or k < m.npkts - 1, "the last packet of a message asks for an ACK"
        self.checked += 1

    # -- the wire -----------------------------------------------------------------

    def pump(self, a: bool = True, b: bool = True) -> None:
        """Engine output onto the wire (A's, B's or both: a busy daemon sends late);
        every request goes through the oracle."""
        if a:
            for d, _, _ in expand(self.ea.datagrams_to_send(self.now)):
                d = bytes(d)
                self.check_request(d)
                self.a2b.append(d)
        if b:
            for d, _, _ in expand(self.eb.datagrams_to_send(self.now)):
                self.b2a.append(bytes(d))
        self.collect()

    def check_rd_out(self) -> None:
        """The READ/atomic count the requester limits by is the number actually outstanding."""
        r = self.req
        out = sum(1 for w in r.sq[r.head:r.tx] if w.op.is_read_or_atomic)
        assert r.rd_out == out and 0 <= out <= 2, (r.rd_out, out)

    def collect(self) -> None:
        for side, eng in (("a", self.ea), ("b", self.eb)):
            while (ev := eng.next_event()) is not None:
                assert not isinstance(ev, StateChanged), f"{side}: {ev}"
                self.events[side].append(ev)

    def deliver(self, to_b: bool, i: int, keep: bool = False) -> None:
        q = self.a2b if to_b else self.b2a
        d = q[i] if keep else q.pop(i)
        if to_b:
            self.eb.receive_datagram(d, self.addr_a, self.now)
        else:
            self.ea.receive_datagram(d, self.addr_b, self.now)
        self.collect()

    def timers(self) -> None:
        for eng in (self.ea, self.eb):
            t = eng.get_timer()
            if t is not None and t <= self.now:
                eng.handle_timer(self.now)
        self.collect()

    def heal(self, until_refilled: bool) -> None:
        """A lossless, zero-delay wire until idle (or until the retry budget is full again).

        Whatever was in flight is lost first: packets held back for an arbitrary
        time could otherwise spend the requester's last retries (stale NAKs), and
        a peer that never answers is not the healthy peer this test is about.
        """
        self.a2b.clear()
        self.b2a.clear()
        for _ in range(1_000_000):
            self.pump()
            if self.a2b or self.b2a:
                while self.a2b:
                    self.deliver(True, 0)
                while self.b2a:
                    self.deliver(False, 0)
                continue
            if until_refilled and self.req.retry_left == RETRY_CNT:
                return
            nxt = [t for t in (self.ea.get_timer(), self.eb.get_timer()) if t is not None]
            if not nxt:
                return
            self.now = max(self.now, min(nxt))
            self.timers()
        raise AssertionError("no quiescence")


SIZES = st.one_of(st.integers(0, 3), st.integers(PMTU - 2, PMTU + 2),
                  st.integers(0, 7 * PMTU + 5))
KINDS = st.sampled_from(sorted(_OPS))


def drive(w: Wire, data: st.DataObject, steps: int) -> None:
    """Apply ``steps`` adversarial actions drawn by hypothesis."""
    for _ in range(steps):
        if w.req.retry_left <= 2:  # never let the wire exhaust a healthy peer's retries
            w.heal(until_refilled=True)
        act = data.draw(st.sampled_from(
            ["post", "post", "pump", "pump", "deliver", "deliver", "deliver", "drop", "dup",
             "ack", "ack", "tick", "expire"]))
        if act == "post":
            if w.src_top > (1 << 17) - 8 * PMTU or len(w.msgs) > 60:
                continue
            w.post(data.draw(KINDS), data.draw(SIZES), data.draw(st.booleans()))
        elif act == "pump":
            side = data.draw(st.sampled_from(["a", "b", "ab"]))
            w.pump("a" in side, "b" in side)
        elif act in ("deliver", "drop", "dup", "ack"):
            to_b = act != "ack" and data.draw(st.booleans())
            q = w.a2b if to_b else w.b2a
            if not q:
                continue
            i = data.draw(st.integers(0, len(q) - 1))
            if act == "drop":
                q.pop(i)
            else:
                w.deliver(to_b, i, keep=act == "dup")
        elif act == "tick":
            w.now += data.draw(st.floats(0, 20e-6))
            w.timers()
        else:  # expire: jump to the next timer (ACK timeout, pacer, RNR), whatever is pending
            t = [x for x in (w.ea.get_timer(), w.eb.get_timer()) if x is not None]
            if t:
                w.now = max(w.now, min(t))
                w.timers()
        w.check_rd_out()


def finish(w: Wire) -> None:
    """Heal the wire; every WR must complete successfully and the data be exact."""
    w.heal(until_refilled=False)
    assert w.ea._qps[w.qa].state is QpState.RTS and w.eb._qps[w.qb].state is QpState.RTS
    wcs = [e.wc for e in w.events["a"] if isinstance(e, Completion)]
    assert [c.wr_id for c in wcs] == [m.wr_id for m in w.msgs]
    assert all(c.status is WcStatus.SUCCESS for c in wcs), wcs
    recvs = [e.wc for e in w.events["b"] if isinstance(e, Completion)]
    with_recv = [m for m in w.msgs if m.kind not in ("write", "read")]
    assert [(c.wr_id, c.status, c.imm) for c in recvs] == [
        (m.wr_id, WcStatus.SUCCESS, m.imm) for m in with_recv]
    for m in w.msgs:
        sent = bytes(w.src.view[m.src_off:m.src_off + m.length])
        if m.kind == "read":
            sent = bytes(w.rsrc.view[m.dst_off:m.dst_off + m.length])
            got = bytes(w.rdst.view[m.src_off:m.src_off + m.length])
        elif m.kind.startswith("send"):
            got = bytes(w.rcv.view[m.dst_off:m.dst_off + m.length])
        else:
            got = bytes(w.dst.view[m.dst_off:m.dst_off + m.length])
        assert got == sent, f"WR {m.wr_id} ({m.kind}, {m.length} B) differs at the responder"
    for c in recvs:
        m = w.msgs[c.wr_id - 1]
        assert c.opcode is (WcOpcode.RECV if m.kind.startswith("send")
                            else WcOpcode.RECV_RDMA_WITH_IMM)
        assert c.byte_len == m.length
    for eng in (w.ea, w.eb):
        assert eng.counters().get("rx_drop_internal_error", 0) == 0
        assert eng.counters().get("qp_errors", 0) == 0


@settings(max_examples=300)
@given(daemon=st.booleans(), compact_after=st.sampled_from([1, 2, 5, 256]),
       seed=st.integers(0, 2**16), steps=st.integers(10, 150), data=st.data())
def test_gbn_wire_matches_posted_buffers_under_any_interleaving(daemon, compact_after, seed,
                                                                steps, data):
    w = Wire(daemon, compact_after, seed)
    drive(w, data, steps)
    finish(w)


def test_late_acks_after_a_rewind_past_the_compaction_threshold():
    """The reported interleaving with the real compaction threshold: a spurious ACK
    timeout rewinds, then the ACKs for the original packets complete more than 256
    WQEs; the next WRs must still go out with their own PSNs and bytes."""
    w = Wire(daemon=False, compact_after=256, seed=12)
    for _ in range(300):
        w.post("write", 40, False)
    w.pump()
    assert len(w.a2b) == 300
    for _ in range(100):  # the first 100 arrive and are ACKed: head moves to 100
        w.deliver(True, 0)
    w.pump(a=False)
    while w.b2a:
        w.deliver(False, 0)
    assert w.req.head == 100
    w.now = w.ea.get_timer()  # the timeout fires though the rest is merely late
    w.timers()
    assert w.ea.counters()["timeouts"] == 1
    while w.a2b:  # the originals arrive; their ACK completes WQEs the rewind will resend
        w.deliver(True, 0)
    w.pump(a=False)  # the requester's daemon is busy: its resends have not left yet
    while w.b2a:
        w.deliver(False, 0)
    for _ in range(300):
        w.post("write", 40, False)
    finish(w)  # checks every packet against its PSN, then the data
    assert w.checked >= 600

# SPDX-License-Identifier: GPL-2.0-only
"""The receiving half of an MRC QP, sans-IO (issue #35, item 1): WRITE packets placed
out of order by their own RETH, every packet SACKed with its EV echoed, the MPR window,
trims NACKed, access errors transport-NAKed, immediates completing in MSN order.

Every packet the target sends is decoded again with the codec, so what is asserted is
what goes on the wire."""

from __future__ import annotations

import random

import pytest
from lossy_link import register

from emu.core.cq import WcOpcode
from emu.core.memory import Access, MemoryTable
from emu.core.verbs import RecvWR
from emu.transports.mrc.target import CC_FLAG_CE, TargetQP, trimmed_reason
from emu.wire.codec.mrc import (
    CC_STATE,
    METH,
    MPR_UNIT,
    MRC_RELIABILITY_NACK,
    MRC_RELIABILITY_SACK,
    MRC_TRANSPORT_ACK,
    MRC_WRITE_FIRST,
    MRC_WRITE_LAST,
    MRC_WRITE_LAST_IMM,
    MRC_WRITE_MIDDLE,
    MRC_WRITE_ONLY,
    MRC_WRITE_ONLY_IMM,
    NACK_PSN_OOR_WINDOW,
    NACK_TRIMMED,
    NACK_TRIMMED_LASTHOP,
    NETH,
    SETH,
    TSETH,
    sack_bitmap_psns,
)
from emu.wire.codec.roce import AETH, BTH, RETH, ImmDt, aeth_kind, decode_packet, encode_packet

MTU = 1024
PEER, QPN = 0x51, 0x17


def _target(size: int = 8 * MTU, **kw):
    mem = MemoryTable(random.Random(1))
    mr = register(mem, size)
    return TargetQP(QPN, PEER, mem, **kw), mr


def _message(mr, msn: int, data: bytes, psn0: int, *, imm: int | None = None, off: int = 0,
             rkey: int | None = None, ts: int | None = None) -> list:
    """The packets of one WRITE (one per MTU), each with METH and its own RETH."""
    n = max(1, -(-len(data) // MTU))
    pkts = []
    for i in range(n):
        if n == 1:
            op = MRC_WRITE_ONLY if imm is None else MRC_WRITE_ONLY_IMM
        elif i == 0:
            op = MRC_WRITE_FIRST
        elif i < n - 1:
            op = MRC_WRITE_MIDDLE
        else:
            op = MRC_WRITE_LAST if imm is None else MRC_WRITE_LAST_IMM
        hdrs = [METH(rqmsn=0, msn=msn)]
        if ts is not None:
            hdrs.append(TSETH(tx_timestamp=ts))
        hdrs.append(RETH(va=mr.va + off + i * MTU, rkey=mr.rkey if rkey is None else rkey,
                         dmalen=len(data)))
        if op in (MRC_WRITE_LAST_IMM, MRC_WRITE_ONLY_IMM):
            hdrs.append(ImmDt(imm=imm))
        bth = BTH(opcode=op, dqpn=QPN, psn=(psn0 + i) & 0xFFFFFF, ts=int(ts is not None))
        pkts.append(decode_packet(encode_packet(bth, hdrs, data[i * MTU:(i + 1) * MTU])))
    return pkts


def _replies(t: TargetQP) -> list:
    return [(decode_packet(d), ev) for d, ev in t.take()]


def test_packets_placed_out_of_order_and_each_sacked_with_its_ev():
    t, mr = _target()
    data = bytes(random.Random(3).randrange(256) for _ in range(4 * MTU))
    pkts = _message(mr, 0, data, psn0=100)
    t.window = type(t.window)(t.window.space, 100, t.mpr - 1)  # the peer's first PSN
    order = [2, 0, 3, 1]
    for k, i in enumerate(order):
        t.receive(pkts[i], ev=0x1000 + i, now=float(k))
    assert bytes(mr.view[:4 * MTU]) == data
    sacks = [(p, ev) for p, ev in _replies(t) if p.bth.opcode == MRC_RELIABILITY_SACK]
    assert [ev for _, ev in sacks] == [0x1000 + i for i in order]
    for (p, _), i in zip(sacks, order, strict=True):
        seth = p.header(SETH)
        assert seth.ev == 0x1000 + i and seth.dpdcid == PEER and seth.mpr == t.mpr // MPR_UNIT
        assert seth.cack_psn + seth.ack_psn_offset == 100 + i  # the PSN it answers
    first = sacks[0][0].header(SETH)  # 102 before 100 and 101: CACK 99, bit for 102
    assert first.cack_psn == 99
    assert sack_bitmap_psns(first.cack_psn, first.sack_offset, first.sack_bitmap) == [102]
    last = sacks[-1][0].header(SETH)
    assert last.cack_psn == 103  # everything in
    assert t.stats["rx_ooo"] == 2 and t.stats["msgs_done"] == 1
    assert sacks[-1][0].header(CC_STATE).rcvd_bytes == 4 * MTU // 256


def test_a_duplicate_is_sacked_again_and_not_placed_twice():
    t, mr = _target()
    (p,) = _message(mr, 0, b"a" * 100, psn0=0)
    t.receive(p, ev=7, now=0.0)
    mr.view[:100] = b"z" * 100  # the application wrote over it since
    t.receive(p, ev=9, now=1.0)
    assert bytes(mr.view[:100]) == b"z" * 100
    sacks = [x for x in _replies(t) if x[0].bth.opcode == MRC_RELIABILITY_SACK]
    assert [ev for _, ev in sacks] == [7, 9] and t.stats["rx_duplicate"] == 1


def test_trimmed_packets_are_nacked_with_where_they_were_cut():
    t, mr = _target()
    a, b = _message(mr, 0, b"x" * 2 * MTU, psn0=0)
    t.trimmed(a.bth, ev=3, reason=trimmed_reason(last_hop=False))
    t.trimmed(b.bth, ev=4, reason=trimmed_reason(last_hop=True), ce=True)
    nacks = [(p.header(NETH), ev) for p, ev in _replies(t)]
    assert [(n.nack_reason, n.nack_psn, n.ev, ev) for n, ev in nacks] == [
        (NACK_TRIMMED, 0, 3, 3), (NACK_TRIMMED_LASTHOP, 1, 4, 4)]
    assert nacks[1][0].cc_flags == CC_FLAG_CE
    assert t.window.first_missing == 0 and t.stats["rx_trimmed"] == 2  # not accepted


def test_beyond_mpr_is_refused_with_psn_oor_window():
    """The window is [cack + 1, cack + MPR) (specs/mrc.md): with nothing received yet
    (cack = first PSN - 1) PSN first + MPR - 2 is the last one taken, cack + MPR is not."""
    t, mr = _target(mpr=MPR_UNIT)
    edge = _message(mr, 0, b"y" * 10, psn0=MPR_UNIT - 2)[0]
    t.receive(edge, ev=4, now=0.0)
    assert all(p.bth.opcode != MRC_RELIABILITY_NACK for p, _ in _replies(t))
    assert t.stats["rx_out_of_window"] == 0
    far = _message(mr, 1, b"y" * 10, psn0=MPR_UNIT - 1)[0]
    t.receive(far, ev=5, now=0.0)
    ((p, ev),) = _replies(t)
    assert p.bth.opcode == MRC_RELIABILITY_NACK
    assert p.header(NETH).nack_reason == NACK_PSN_OOR_WINDOW and ev == 5
    assert t.stats["rx_out_of_window"] == 1 and t.stats["rx_bytes"] == 10
    with pytest.raises(ValueError, match="multiple of 128"):
        _target(mpr=100)


def test_a_bad_rkey_is_sacked_and_transport_naked_and_writes_nothing():
    t, mr = _target()
    (p,) = _message(mr, 0, b"q" * 64, psn0=0, rkey=0xDEAD)
    t.receive(p, ev=1, now=0.0)
    assert bytes(mr.view[:64]) == bytes(64)
    kinds = [r.bth.opcode for r, _ in _replies(t)]
    assert kinds == [MRC_TRANSPORT_ACK, MRC_RELIABILITY_SACK]  # the NAK, then the SACK: it arrived
    t2, mr2 = _target()
    (p,) = _message(mr2, 0, b"q" * 64, psn0=0, rkey=0xDEAD)
    t2.receive(p, ev=1, now=0.0)
    nak = _replies(t2)[0][0].header(AETH)
    assert aeth_kind(nak.syndrome) == (3, 2)  # NAK, remote access error
    assert t2.stats["rx_access_error"] == 1 and t2.stats["tx_naks"] == 1


def test_a_region_without_remote_write_is_refused():
    mem = MemoryTable(random.Random(1))
    mr = register(mem, MTU, Access.LOCAL_WRITE | Access.REMOTE_READ)
    t = TargetQP(QPN, PEER, mem)
    (p,) = _message(mr, 0, b"r" * 10, psn0=0)
    t.receive(p, ev=1, now=0.0)
    assert t.stats["rx_access_error"] == 1 and bytes(mr.view[:10]) == bytes(10)


def test_immediates_complete_in_msn_order_and_wait_for_a_posted_receive():
    t, mr = _target()
    m0 = _message(mr, 0, b"A" * 2 * MTU, psn0=0, imm=0xA0)
    m1 = _message(mr, 1, b"B" * MTU, psn0=2, imm=0xB1, off=2 * MTU)
    m2 = _message(mr, 2, b"C" * MTU, psn0=3, off=3 * MTU)  # a plain WRITE between
    m3 = _message(mr, 3, b"D" * MTU, psn0=4, imm=0xD3, off=4 * MTU)
    t.post_recv(RecvWR(10))
    for p in (*m1, *m3, *m2):  # later messages first: nothing completes before MSN 0
        t.receive(p, ev=1, now=0.0)
    assert t.completions == [] and t.stats["msgs_done"] == 0
    t.receive(m0[1], ev=1, now=1.0)
    t.receive(m0[0], ev=1, now=1.0)  # MSN 0 whole: 0 and 1 complete; 3 waits for a receive
    assert [(c.wr_id, c.imm, c.byte_len, c.opcode) for c in t.completions] == [
        (10, 0xA0, 2 * MTU, WcOpcode.RECV_RDMA_WITH_IMM)]
    assert t.stats["imm_waiting_recv"] == 1
    t.post_recv(RecvWR(11))
    t.post_recv(RecvWR(12))
    assert [(c.wr_id, c.imm) for c in t.completions] == [(10, 0xA0), (11, 0xB1), (12, 0xD3)]
    assert t.stats["msgs_done"] == 4 and t.next_msn == 4
    acks = [p.header(AETH).msn for p, _ in _replies(t) if p.bth.opcode == MRC_TRANSPORT_ACK]
    assert acks == [0, 1, 2, 3]  # the semantic ACKs, message by message


def test_ce_is_echoed_per_ev_and_the_timestamp_reflected():
    t, mr = _target()
    a, b = _message(mr, 0, b"e" * 2 * MTU, psn0=0, ts=0x1234)
    t.receive(a, ev=0xAAAA, now=0.0, ce=True)
    t.receive(b, ev=0xBBBB, now=0.0)
    sacks = [p for p, _ in _replies(t) if p.bth.opcode == MRC_RELIABILITY_SACK]
    assert [(s.header(SETH).ev, s.header(SETH).cc_flags) for s in sacks] == [
        (0xAAAA, CC_FLAG_CE), (0xBBBB, 0)]
    assert all(s.header(CC_STATE).tx_timestamp == 0x1234 for s in sacks)
    assert t.stats["rx_ce"] == 1


def test_psns_wrap_at_24_bits():
    t, mr = _target()
    t.window = type(t.window)(t.window.space, 0xFFFFFE, t.mpr - 1)
    pkts = _message(mr, 0, b"w" * 4 * MTU, psn0=0xFFFFFE)
    for p in reversed(pkts):
        t.receive(p, ev=1, now=0.0)
    assert bytes(mr.view[:4 * MTU]) == b"w" * 4 * MTU
    last = [p for p, _ in _replies(t) if p.bth.opcode == MRC_RELIABILITY_SACK][-1]
    assert last.header(SETH).cack_psn == 1 and t.stats["msgs_done"] == 1


def test_meth_is_read_for_the_message_it_names():
    # two messages interleaved packet by packet: each completes on its own bytes
    t, mr = _target()
    m0 = _message(mr, 0, b"0" * 2 * MTU, psn0=0)
    m1 = _message(mr, 1, b"1" * 2 * MTU, psn0=2, off=2 * MTU)
    for p in (m0[0], m1[0], m0[1]):
        t.receive(p, ev=1, now=0.0)
    assert t.stats["msgs_done"] == 1 and 1 in t.msgs and t.msgs[1].got == MTU
    assert isinstance(m1[1].header(METH), METH)

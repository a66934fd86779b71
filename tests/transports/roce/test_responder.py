# SPDX-License-Identifier: GPL-2.0-only
"""The RoCEv2 receive verdicts: ``Responder.classify`` and ``Requester.classify``.

Issue #15: receiving is one classify step whose verdict both the general path
and the middle-packet fast path (SEND and WRITE) act on. These tests pin each
verdict to its IBTA rule (rocev2.md: Behaviour) and check that the fast path,
given any SEND or WRITE middle — in order, duplicate, ahead, short, padded,
beyond the receive buffer — leaves the responder, the memory and the output
exactly as the general path does.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lossy_link import register

from emu.core.memory import MemoryTable
from emu.core.psn import PSN24
from emu.core.verbs import RecvWR, Sge
from emu.transports.roce import RoceEngine
from emu.transports.roce import packets as P
from emu.transports.roce.requester import Resp
from emu.transports.roce.responder import Rx

PMTU = 256
PEER = ("10.0.0.1", 4791)
EPSN = 0xFFFFF8  # the expected PSN wraps during the tests
MSG = 6 * PMTU  # the WRITE in progress: FIRST, four MIDDLEs, LAST


def responder(fast: bool, max_psn_ahead: int = 64):
    """Engine B as a daemon builds it (no ICRC), one QP expecting EPSN from PEER, and a
    region for WRITEs; ``fast`` False turns the WRITE-middle fast path off."""
    mem = MemoryTable(random.Random(1))
    eng = RoceEngine(mem, random.Random(2), line_rate=10e9, cc=None, icrc=None,
                     max_psn_ahead=max_psn_ahead)
    eng._fast_rx = fast
    qpn = eng.create_qp(pmtu=PMTU, timeout=8)
    eng.connect(qpn, {"qpn": 0x42, "psn": EPSN, "address": PEER[0], "port": PEER[1]})
    return eng, eng._qps[qpn], register(mem, MSG)


def write_first(qp, mr, psn: int = EPSN) -> bytearray:
    return P.build(P.WRITE_FIRST, qp.qpn, psn & PSN24.mask, P.reth(mr.va, mr.rkey, MSG),
                   bytes(PMTU))


def test_responder_verdicts_follow_go_back_n():
    eng, qp, mr = responder(fast=False)
    r = qp.responder
    mid, first = P.WRITE_MIDDLE, P.WRITE_FIRST
    assert r.classify(EPSN, mid, PMTU) is Rx.INVALID  # a middle with no WRITE under way
    assert r.classify(EPSN, first, PMTU - 1) is Rx.INVALID  # a FIRST must be full
    assert r.classify(EPSN, P.READ_RESP_ONLY, 0) is Rx.INVALID  # not a request
    assert r.classify(EPSN, first, PMTU) is Rx.EXPECTED
    assert r.classify(EPSN - 1, first, PMTU) is Rx.DUPLICATE
    assert r.classify(EPSN + 1, mid, PMTU) is Rx.SEQ_ERROR
    assert r.classify(EPSN + 65, mid, PMTU) is Rx.STRAY  # beyond max_psn_ahead
    eng.receive_datagram(write_first(qp, mr), PEER, 0.0)
    assert r.classify(EPSN + 1, mid, PMTU) is Rx.EXPECTED
    assert r.classify(EPSN + 1, first, PMTU) is Rx.INVALID  # a new message inside one
    # an out-of-sequence packet draws one sequence-error NAK; the rest of the episode none
    eng.receive_datagram(P.build(mid, qp.qpn, (EPSN + 3) & PSN24.mask, b"", bytes(PMTU)),
                         PEER, 0.0)
    assert eng.stats["tx_seq_naks"] == 1
    assert r.classify(EPSN + 4, mid, PMTU) is Rx.AHEAD
    # the expected PSN ends the episode
    eng.receive_datagram(P.build(mid, qp.qpn, (EPSN + 1) & PSN24.mask, b"", bytes(PMTU)),
                         PEER, 0.0)
    assert r.classify(EPSN + 4, mid, PMTU) is Rx.SEQ_ERROR


def test_requester_verdicts():
    eng, qp, _ = responder(fast=False)
    q = qp.requester
    q.una, q.sent_high = 100, 110
    assert [q.classify(p) for p in (99, 100, 105, 110)] == [
        Resp.OLD, Resp.NEXT, Resp.LATER, Resp.UNSENT]


#: one request as the test feeds it: (PSN offset from the expected PSN, opcode,
#: payload length, AckReq)
_REQUEST = st.tuples(
    st.sampled_from([-2, -1, 0, 0, 0, 0, 1, 2, 70]),
    st.sampled_from([P.WRITE_MIDDLE] * 4 + [P.SEND_MIDDLE] * 4
                    + [P.WRITE_FIRST, P.WRITE_LAST, P.SEND_FIRST, P.SEND_LAST]),
    st.sampled_from([PMTU] * 6 + [PMTU - 4, PMTU - 3, 0]),
    st.integers(0, 1))


@settings(max_examples=200, deadline=None)
@given(st.lists(_REQUEST, min_size=1, max_size=14), st.sampled_from([None, "write", "send"]),
       st.integers(1, 3))
def test_fast_path_acts_as_the_general_path(reqs, started, sges):
    """Fed the same requests, an engine whose SEND and WRITE middles take the fast path
    and one that decodes every packet end in the same state with the same output. The
    SENDs land in receive buffers of ``sges`` pieces (the fast path scatters too) of
    1.5 packets, so a SEND of two or more full ones overruns its buffer."""
    engines = [responder(fast=True), responder(fast=False)]
    outs: list[list[bytes]] = [[], []]
    for (eng, qp, mr), out in zip(engines, outs, strict=True):
        rng = random.Random(7)
        buf = 3 * PMTU // 2  # two receive buffers in the region
        piece = buf // sges
        for k in range(2):
            base = mr.va + k * buf
            eng.post_recv(qp.qpn, RecvWR(k, [Sge(base + i * piece, piece, mr.lkey)
                                             for i in range(sges)]))
        if started == "write":
            eng.receive_datagram(write_first(qp, mr), PEER, 0.0)
        elif started == "send":
            eng.receive_datagram(P.build(P.SEND_FIRST, qp.qpn, EPSN, b"", rng.randbytes(PMTU)),
                                 PEER, 0.0)
        for off, op, n, ackreq in reqs:
            psn = (qp.responder.epsn + off) & PSN24.mask
            ext = P.reth(mr.va, mr.rkey, MSG) if op == P.WRITE_FIRST else b""
            eng.receive_datagram(P.build(op, qp.qpn, psn, ext, rng.randbytes(n),
                                         ackreq=ackreq), PEER, 0.0)
        out.extend(bytes(b) for b, _, _ in eng.datagrams_to_send(0.0))
    (fe, fq, fm), (ge, gq, gm) = engines
    f, g = fq.responder, gq.responder
    assert (f.epsn, f.msn, f.nak_episode, f.since_ack) == (g.epsn, g.msn, g.nak_episode,
                                                           g.since_ack)
    assert (f.cur and (f.cur.off, f.cur.total)) == (g.cur and (g.cur.off, g.cur.total))
    assert fq.state is gq.state
    assert bytes(fm.view) == bytes(gm.view)
    assert outs[0] == outs[1]
    assert dict(fe.stats) == dict(ge.stats)


@pytest.mark.parametrize("verb", ["write", "send"])
def test_fast_path_carries_in_order_middles(verb):
    """The equivalence above is not vacuous: in-order full middles take the fast path,
    a SEND's across its receive buffer's SGEs."""
    eng, qp, mr = responder(fast=True)
    if verb == "write":
        first, mid = write_first(qp, mr), P.WRITE_MIDDLE
    else:
        half = MSG // 2
        eng.post_recv(qp.qpn, RecvWR(1, [Sge(mr.va + half, half, mr.lkey),
                                         Sge(mr.va, half, mr.lkey)]))
        first, mid = P.build(P.SEND_FIRST, qp.qpn, EPSN, b"", bytes(PMTU)), P.SEND_MIDDLE
    eng.receive_datagram(first, PEER, 0.0)
    r = qp.responder
    sent = bytearray(PMTU)
    for k in range(1, 5):
        payload = bytes([k]) * PMTU
        sent += payload
        data = P.build(mid, qp.qpn, (EPSN + k) & PSN24.mask, b"", payload)
        assert r.middle(data, len(data))
    dup = P.build(mid, qp.qpn, (EPSN + 1) & PSN24.mask, b"", bytes(PMTU))
    assert not r.middle(dup, len(dup))  # a duplicate: the general path re-ACKs it
    assert r.epsn == EPSN + 5 and r.cur is not None and r.cur.off == 5 * PMTU
    mem = bytes(mr.view)
    got = mem[:5 * PMTU] if verb == "write" else mem[MSG // 2:] + mem[:5 * PMTU - MSG // 2]
    assert got == sent

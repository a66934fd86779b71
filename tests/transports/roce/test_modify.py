# SPDX-License-Identifier: GPL-2.0-only
"""``ibv_modify_qp`` with attribute masks (issue #33 item 2), sans-IO.

Every legal RC transition with exactly its required attributes; every illegal one
and every missing or foreign attribute refused with the transition and the attribute
named; the address vector; SQD draining; ERR flushing; and the ``ibv_rc_pingpong``
order — receives posted in INIT, consumed by the peer's first SEND — over an
in-memory link with no RNR NAK.
"""

from __future__ import annotations

import random

import pytest
from lossy_link import LossyLink, register

from emu.core.cq import WcOpcode, WcStatus
from emu.core.memory import MemoryTable
from emu.core.verbs import QpAttrMask as M
from emu.transports.base import StateChanged, VerbsError
from emu.transports.roce import QpState, RecvWR, RoceEngine, SendWR, Sge, modify
from emu.transports.roce.modify import RC_TRANSITIONS

S = QpState
#: libibverbs verbs.h, enum ibv_qp_attr_mask
VERBS_H = {"STATE": 1 << 0, "CUR_STATE": 1 << 1, "EN_SQD_ASYNC_NOTIFY": 1 << 2,
           "ACCESS_FLAGS": 1 << 3, "PKEY_INDEX": 1 << 4, "PORT": 1 << 5, "QKEY": 1 << 6,
           "AV": 1 << 7, "PATH_MTU": 1 << 8, "TIMEOUT": 1 << 9, "RETRY_CNT": 1 << 10,
           "RNR_RETRY": 1 << 11, "RQ_PSN": 1 << 12, "MAX_QP_RD_ATOMIC": 1 << 13,
           "ALT_PATH": 1 << 14, "MIN_RNR_TIMER": 1 << 15, "SQ_PSN": 1 << 16,
           "MAX_DEST_RD_ATOMIC": 1 << 17, "PATH_MIG_STATE": 1 << 18, "CAP": 1 << 19,
           "DEST_QPN": 1 << 20, "RATE_LIMIT": 1 << 25}

#: a value for every attribute a mask bit can select
ATTR = {"pkey_index": 0, "port_num": 1, "qp_access_flags": 0b1111, "path_mtu": 3,
        "dest_qp_num": 0x22, "rq_psn": 100, "max_dest_rd_atomic": 1, "min_rnr_timer": 12,
        "sq_psn": 200, "timeout": 14, "retry_cnt": 7, "rnr_retry": 7, "max_rd_atomic": 1,
        "en_sqd_async_notify": 1, "qkey": 0x11111111, "path_mig_state": 0,
        "ah_attr": {"dgid": "::ffff:10.0.0.2", "sgid_index": 0, "hop_limit": 64}}
INIT = M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS
RTR = M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC \
    | M.MIN_RNR_TIMER
RTS = M.STATE | M.SQ_PSN | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.MAX_QP_RD_ATOMIC


def engine(seed: int = 1) -> RoceEngine:
    return RoceEngine(MemoryTable(random.Random(seed)), random.Random(seed + 1), cc=None)


def to(e: RoceEngine, q: int, state: QpState, mask: int, **over) -> QpState:
    return e.modify(q, {**ATTR, **over, "qp_state": state.value}, mask)


def qp_in(e: RoceEngine, state: QpState) -> int:
    """A new QP brought to ``state`` the way an application would (SQE: set directly,
    since nothing may ask for it and RC never enters it)."""
    q = e.create_qp()
    path = {S.RESET: [], S.INIT: [(S.INIT, INIT)], S.RTR: [(S.INIT, INIT), (S.RTR, RTR)]}
    rts = [(S.INIT, INIT), (S.RTR, RTR), (S.RTS, RTS)]
    path.update({S.RTS: rts, S.SQD: [*rts, (S.SQD, M.STATE)], S.SQE: rts,
                 S.ERR: [(S.INIT, INIT), (S.ERR, M.STATE)]})
    for st, mask in path[state]:
        to(e, q, st, mask)
    if state is S.SQE:
        e._qps[q].state = S.SQE
    assert e.qp_attr(q)[0] is state
    return q


def test_mask_bits_are_libibverbs():
    assert {m.name: int(m) for m in M} == VERBS_H


@pytest.mark.parametrize(("cur", "new"), sorted(RC_TRANSITIONS, key=str))
def test_every_legal_transition_with_its_required_attributes(cur, new):
    e = engine()
    q = qp_in(e, cur)
    req, opt = RC_TRANSITIONS[(cur, new)]
    assert to(e, q, new, M.STATE | req) is new
    assert e.qp_attr(q)[0] is new
    if opt & ~modify.UNSUPPORTED:  # every optional one may come along too
        q2 = qp_in(e, cur)
        both = M.STATE | req | (opt & ~modify.UNSUPPORTED)
        assert to(e, q2, new, both, cur_qp_state=cur.value) is new


@pytest.mark.parametrize(("cur", "new"), [(c, n) for c in S for n in S
                                          if (c, n) not in RC_TRANSITIONS])
def test_every_illegal_transition_is_refused_naming_both_states(cur, new):
    e = engine()
    q = qp_in(e, cur)
    with pytest.raises(VerbsError, match=f"QP {q:#x}: {cur.value}\u2192{new.value} is not a "
                                         f"legal transition"):
        to(e, q, new, M.STATE)
    assert e.qp_attr(q)[0] is cur


MISSING = [(c, n, bit) for (c, n), (req, _) in RC_TRANSITIONS.items() for bit in M
           if req & bit]


@pytest.mark.parametrize(("cur", "new", "bit"), MISSING,
                         ids=[f"{c.value}-{n.value}-{b.name}" for c, n, b in MISSING])
def test_a_missing_required_attribute_is_named(cur, new, bit):
    e = engine()
    q = qp_in(e, cur)
    req, _ = RC_TRANSITIONS[(cur, new)]
    with pytest.raises(VerbsError) as ei:
        to(e, q, new, (M.STATE | req) & ~bit)
    assert str(ei.value) == (f"modify_qp QP {q:#x}: {cur.value}\u2192{new.value} needs "
                             f"IBV_QP_{bit.name}")
    assert e.qp_attr(q)[0] is cur


@pytest.mark.parametrize(("cur", "new", "extra"), [
    (S.RESET, S.INIT, M.QKEY), (S.INIT, S.RTR, M.SQ_PSN), (S.RTR, S.RTS, M.AV),
    (S.RTS, S.RTS, M.PATH_MTU), (S.INIT, S.INIT, M.DEST_QPN), (S.RTS, S.SQD, M.TIMEOUT),
    (S.INIT, S.RTR, M.CAP), (S.ERR, S.RESET, M.TIMEOUT)])
def test_an_attribute_the_transition_does_not_take_is_named(cur, new, extra):
    e = engine()
    q = qp_in(e, cur)
    req, _ = RC_TRANSITIONS[(cur, new)]
    with pytest.raises(VerbsError, match=f"{cur.value}\u2192{new.value} does not take "
                                         f"IBV_QP_{extra.name}$"):
        to(e, q, new, M.STATE | req | extra)
    assert e.qp_attr(q)[0] is cur


def test_the_message_shape_the_issue_asks_for():
    e = engine()
    q = qp_in(e, S.INIT)
    with pytest.raises(VerbsError, match=r"^modify_qp QP 0x11: INIT→RTR needs IBV_QP_DEST_QPN$"):
        to(e, q, S.RTR, RTR & ~M.DEST_QPN)


def test_no_state_bit_means_the_current_state():
    e = engine()
    q = qp_in(e, S.RTS)
    assert e.modify(q, {"min_rnr_timer": 3}, M.MIN_RNR_TIMER) is S.RTS
    assert e.qp_attr(q)[1].min_rnr_timer == 3
    q = qp_in(e, S.RTR)  # RTR → RTR is not a transition, with attributes or without
    with pytest.raises(VerbsError, match="RTR→RTR is not a legal transition"):
        e.modify(q, {"timeout": 3}, M.TIMEOUT)


def test_cur_state_must_be_the_qps():
    e = engine()
    q = qp_in(e, S.RTR)
    with pytest.raises(VerbsError, match="IBV_QP_CUR_STATE says INIT but the QP is in RTR"):
        to(e, q, S.RTS, RTS | M.CUR_STATE, cur_qp_state=1)
    assert to(e, q, S.RTS, RTS | M.CUR_STATE, cur_qp_state="RTR") is S.RTS
    q = qp_in(e, S.INIT)
    with pytest.raises(VerbsError, match="only taken in RTR, RTS, SQD or SQE"):
        to(e, q, S.INIT, M.STATE | M.CUR_STATE, cur_qp_state="INIT")


def test_states_by_verbs_number_and_name():
    e = engine()
    q = e.create_qp()
    assert e.modify(q, {**ATTR, "qp_state": 1}, INIT) is S.INIT  # IBV_QPS_INIT
    assert e.modify(q, {**ATTR, "qp_state": "IBV_QPS_RTR"}, RTR) is S.RTR
    with pytest.raises(VerbsError, match="not a QP state"):
        e.modify(q, {**ATTR, "qp_state": 9}, RTS)


def test_values_are_checked_and_nothing_changes_on_refusal():
    e = engine()
    q = qp_in(e, S.INIT)
    before = e.query_qp_attr(q)
    for over, msg in [({"path_mtu": 7}, "IBV_QP_PATH_MTU: path_mtu 7 is not an ibv_mtu"),
                      ({"rq_psn": 1 << 24}, "IBV_QP_RQ_PSN: rq_psn must be an integer"),
                      ({"min_rnr_timer": 32}, "IBV_QP_MIN_RNR_TIMER"),
                      ({"ah_attr": {"dgid": "not-a-gid"}}, "'not-a-gid' is not a GID")]:
        with pytest.raises(VerbsError, match=msg):
            to(e, q, S.RTR, RTR, **over)
        assert e.query_qp_attr(q) == before
    with pytest.raises(VerbsError, match="IBV_QP_PORT: port_num must be an integer in 1..1"):
        e.modify(q, {"port_num": 2}, M.PORT)
    with pytest.raises(VerbsError, match="IBV_QP_PKEY_INDEX"):
        e.modify(q, {"pkey_index": 1}, M.PKEY_INDEX)
    with pytest.raises(VerbsError, match="IBV_QP_ALT_PATH is not supported"):
        to(e, q, S.RTR, RTR | M.ALT_PATH)


def test_path_mtu_may_not_exceed_the_ports():
    e = RoceEngine(MemoryTable(random.Random(1)), random.Random(2), cc=None,
                   default_pmtu=1024)
    q = qp_in(e, S.INIT)
    with pytest.raises(VerbsError, match="path_mtu 2048 is larger than the port's active "
                                         "MTU 1024"):
        to(e, q, S.RTR, RTR, path_mtu=4)
    to(e, q, S.RTR, RTR, path_mtu=3)
    assert e.query_qp_attr(q)["path_mtu"] == 3 and e.qp_attr(q)[1].pmtu == 1024


def test_address_vector_for_rocev2():
    e = engine()
    q = qp_in(e, S.INIT)
    to(e, q, S.RTR, RTR, ah_attr={"dgid": "::ffff:10.1.2.3", "sgid_index": 1, "hop_limit": 9,
                                  "traffic_class": 106, "flow_label": 0x12345})
    a = e.qp_attr(q)[1]
    assert a.dest_addr == ("10.1.2.3", 4791)
    assert a.dscp == 106 >> 2 and a.hop_limit == 9 and a.sgid_index == 1
    # the kernel's rdma_flow_label_to_udp_sport: low 14 bits ^ the high 6, in 0xC000..
    assert a.udp_sport == ((0x12345 & 0x3FFF) ^ (0x12345 >> 14)) | 0xC000
    got = e.query_qp_attr(q)["ah_attr"]
    assert (got["dgid"], got["flow_label"], got["udp_sport"]) == ("::ffff:10.1.2.3", 0x12345,
                                                                  a.udp_sport)
    q6 = qp_in(e, S.INIT)
    sport = e.qp_attr(q6)[1].udp_sport
    to(e, q6, S.RTR, RTR, ah_attr={"grh": {"dgid": "fd00::2", "traffic_class": 26 << 2}})
    a6 = e.qp_attr(q6)[1]
    assert a6.dest_addr == ("fd00::2", 4791) and a6.dscp == 26
    assert a6.udp_sport == sport  # no flow label: the QP keeps its drawn source port


def test_address_vector_checks_the_gid_table():
    e = engine()
    gids = ["::ffff:10.0.0.1", "fd00::1"]
    q = qp_in(e, S.INIT)
    with pytest.raises(VerbsError, match="sgid_index 2 is not in the GID table"):
        e.modify(q, {**ATTR, "qp_state": "RTR", "ah_attr": {"dgid": "fd00::2",
                                                            "sgid_index": 2}}, RTR, gids=gids)
    with pytest.raises(VerbsError, match="different address families"):
        e.modify(q, {**ATTR, "qp_state": "RTR", "ah_attr": {"dgid": "fd00::2",
                                                            "sgid_index": 0}}, RTR, gids=gids)
    with pytest.raises(VerbsError, match="RoCEv2 needs a GRH"):
        e.modify(q, {**ATTR, "qp_state": "RTR", "ah_attr": {"dgid": "fd00::2",
                                                            "is_global": 0}}, RTR)
    e.modify(q, {**ATTR, "qp_state": "RTR", "ah_attr": {"dgid": "fd00::2", "sgid_index": 1}},
             RTR, gids=gids)


def test_posting_per_state():
    e = engine()
    mem = e.memory
    mr = register(mem, 64)
    sge = [Sge(mr.va, 64, mr.lkey)]
    q = e.create_qp()
    with pytest.raises(VerbsError, match=f"post_recv QP {q:#x}: the QP is in RESET"):
        e.post_recv(q, RecvWR(1, sge))
    for st, mask in ((S.INIT, INIT), (S.RTR, RTR)):
        to(e, q, st, mask)
        e.post_recv(q, RecvWR(1, sge))  # receives from INIT on
        with pytest.raises(VerbsError, match=f"post_send QP {q:#x}: the QP is in {st.value}"):
            e.post_send(q, SendWR.send(1, sge))


def test_max_rd_atomic_zero_refuses_reads_only():
    e = engine()
    mr = register(e.memory, 64)
    q = qp_in(e, S.INIT)
    to(e, q, S.RTR, RTR)
    to(e, q, S.RTS, RTS, max_rd_atomic=0)  # perftest's write and send tests set 0
    e.post_send(q, SendWR.send(1, [Sge(mr.va, 8, mr.lkey)]))
    with pytest.raises(VerbsError, match="needs max_rd_atomic >= 1"):
        e.post_send(q, SendWR.read(2, [Sge(mr.va, 8, mr.lkey)], mr.va, mr.rkey))


def test_query_qp_reports_what_was_set():
    e = engine()
    q = qp_in(e, S.RTS)
    got = e.query_qp_attr(q)
    assert got["qp_state"] == "RTS"
    for k in ("dest_qp_num", "rq_psn", "sq_psn", "timeout", "retry_cnt", "rnr_retry",
              "min_rnr_timer", "max_rd_atomic", "max_dest_rd_atomic", "path_mtu",
              "qp_access_flags", "port_num", "pkey_index"):
        assert got[k] == ATTR[k], k
    assert got["ah_attr"]["address"] == "10.0.0.2"


def test_err_flushes_receives_posted_in_init():
    e = engine()
    mr = register(e.memory, 64)
    q = qp_in(e, S.INIT)
    e.post_recv(q, RecvWR(5, [Sge(mr.va, 64, mr.lkey)]))
    to(e, q, S.ERR, M.STATE)
    evs = []
    while (ev := e.next_event()) is not None:
        evs.append(ev)
    wcs = [ev.wc for ev in evs if hasattr(ev, "wc")]
    assert [(w.wr_id, w.status) for w in wcs] == [(5, WcStatus.WR_FLUSH_ERR)]
    assert any(isinstance(ev, StateChanged) and ev.new == "ERR" for ev in evs)
    to(e, q, S.RESET, M.STATE)
    assert e.query_qp_attr(q)["qp_state"] == "RESET"


# -- two engines: the ibv_rc_pingpong order, and SQD draining ----------------------------


def verbs_pair(seed: int = 3, **link_kw):
    """Engines A and B with one QP each, still in RESET, on a LossyLink."""
    ea, eb = engine(seed), engine(seed + 10)
    link = LossyLink(ea, eb, seed=seed, **link_kw)
    return link, ea, eb, ea.create_qp(send_cq="a.s", recv_cq="a.r"), \
        eb.create_qp(send_cq="b.s", recv_cq="b.r")


def rtr(e: RoceEngine, q: int, peer: dict, addr: tuple[str, int]) -> None:
    e.modify(q, {"qp_state": "RTR", "path_mtu": 3, "dest_qp_num": peer["qpn"],
                 "rq_psn": peer["psn"], "max_dest_rd_atomic": 1, "min_rnr_timer": 12,
                 "ah_attr": {"dgid": f"::ffff:{addr[0]}", "sgid_index": 0}}, RTR)


def rts(e: RoceEngine, q: int, **over) -> None:
    e.modify(q, {"qp_state": "RTS", "sq_psn": e.query_qp(q)["psn"], "timeout": 14,
                 "retry_cnt": 7, "rnr_retry": 7, "max_rd_atomic": 1, **over},
             RTS)


def test_receives_posted_in_init_meet_the_first_send_without_rnr():
    link, ea, eb, qa, qb = verbs_pair()
    ia, ib = ea.query_qp(qa), eb.query_qp(qb)
    src, dst = register(ea.memory, 3000), register(eb.memory, 2 * 3000)
    data = random.Random(7).randbytes(3000)
    src.view[:] = data
    # the responder: RESET → INIT, receives posted in INIT, then RTR and RTS
    eb.modify(qb, {**ATTR, "qp_state": "INIT"}, INIT)
    for i in range(2):
        eb.post_recv(qb, RecvWR(10 + i, [Sge(dst.va + i * 3000, 3000, dst.lkey)]))
    rtr(eb, qb, ia, link.addr_a)
    rts(eb, qb)
    # the requester: all three steps, then SENDs at once
    ea.modify(qa, {**ATTR, "qp_state": "INIT"}, INIT)
    rtr(ea, qa, ib, link.addr_b)
    rts(ea, qa)
    ea.post_send(qa, SendWR.send(1, [Sge(src.va, 3000, src.lkey)]))
    ea.post_send(qa, SendWR.send(2, [Sge(src.va, 3000, src.lkey)]))
    link.run()
    assert [(w.wr_id, w.status) for w in link.completions("a")] == \
        [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS)]
    got = link.completions("b")
    assert [(w.wr_id, w.opcode, w.byte_len) for w in got] == \
        [(10, WcOpcode.RECV, 3000), (11, WcOpcode.RECV, 3000)]
    assert bytes(dst.view[:3000]) == data and bytes(dst.view[3000:]) == data
    assert eb.counters().get("tx_rnr_naks", 0) == 0 and ea.counters().get("rx_rnr_naks", 0) == 0


def test_sqd_finishes_started_messages_starts_none_and_says_drained():
    link, ea, eb, qa, qb = verbs_pair(seed=5)
    ia, ib = ea.query_qp(qa), eb.query_qp(qb)
    n = 256 * 1024  # more than one pacer burst: the first WRITE is mid-way after a step
    src, dst = register(ea.memory, n), register(eb.memory, 2 * n)
    src.view[:] = random.Random(1).randbytes(n)
    for e, q, peer, addr in ((ea, qa, ib, link.addr_b), (eb, qb, ia, link.addr_a)):
        e.modify(q, {**ATTR, "qp_state": "INIT"}, INIT)
        rtr(e, q, peer, addr)
        rts(e, q)
    for i in range(2):
        ea.post_send(qa, SendWR.write(i, [Sge(src.va, n, src.lkey)], dst.va + i * n, dst.rkey))
    link.step()  # the first WRITE has started (some of its packets are out)
    req = ea._qps[qa].requester
    assert req.tx_pkt > 0 and req.sq[1].psn is None
    ea.modify(qa, {"qp_state": "SQD", "en_sqd_async_notify": 1},
              M.STATE | M.EN_SQD_ASYNC_NOTIFY)
    assert ea.query_qp_attr(qa)["sq_draining"] == 1
    with pytest.raises(VerbsError, match="still draining"):
        ea.modify(qa, {"timeout": 10}, M.TIMEOUT)
    link.run()
    assert [w.wr_id for w in link.completions("a")] == [0]  # the second never started
    assert bytes(dst.view[:n]) == bytes(src.view) and bytes(dst.view[n:]) == bytes(n)
    drained = [ev for ev in link.state_changes("a") if ev.reason == "SQ_DRAINED"]
    assert len(drained) == 1 and (drained[0].old, drained[0].new) == ("SQD", "SQD")
    assert ea.query_qp_attr(qa)["sq_draining"] == 0
    assert ea.modify(qa, {"timeout": 10}, M.TIMEOUT) is S.SQD  # drained: attributes may change
    ea.modify(qa, {"qp_state": "RTS"}, M.STATE)
    link.run()
    assert [w.wr_id for w in link.completions("a")] == [0, 1]
    assert bytes(dst.view[n:]) == bytes(src.view)


def test_connect_stays_the_shortcut_from_reset_or_init():
    e = engine()
    mr = register(e.memory, 64)
    peer = {"qpn": 0x33, "psn": 9, "address": "10.0.0.2", "gid": "::ffff:10.0.0.2"}
    q = e.create_qp()
    e.connect(q, peer)
    got = e.query_qp_attr(q)
    assert (got["qp_state"], got["dest_qp_num"], got["rq_psn"], got["ah_attr"]["dgid"]) == \
        ("RTS", 0x33, 9, "::ffff:10.0.0.2")
    q = qp_in(e, S.INIT)
    e.post_recv(q, RecvWR(1, [Sge(mr.va, 64, mr.lkey)]))
    e.connect(q, peer)
    assert e.qp_attr(q)[0] is S.RTS and len(e._qps[q].responder.rq) == 1  # still waiting

# SPDX-License-Identifier: GPL-2.0-only
"""Two MRC engines over a seeded, misbehaving in-memory wire (issue #35, item 1):
WRITEs and WRITEs with immediate arrive byte-exact through loss, reordering,
duplication and trimming, sprayed over the EV set, holes resent only, completions
from the transport ACK; a dead peer fails the QP with RETRY_EXC_ERR."""

from __future__ import annotations

from collections import Counter

import pytest
from lossy_link import mrc_pair, register, trim_roce

from emu.core.cq import WcOpcode, WcStatus
from emu.core.verbs import RecvWR, SendWR, Sge
from emu.transports.base import VerbsError
from emu.wire.codec.mrc import MRC_TRANSPORT_ACK, WRITE_OPCODES
from emu.wire.codec.roce import BTH

PMTU = 1024


def _pair(seed: int = 1, size: int = 1 << 20, engine_kw: dict | None = None, **link_kw):
    return mrc_pair(seed, size, pmtu=PMTU, engine_kw=engine_kw, **link_kw)


def _write(eng, qp, src, dst, n: int, wr_id: int, *, off: int = 0, imm: int | None = None):
    eng.post_send(qp, SendWR.write(wr_id, [Sge(src.va + off, n, src.lkey)], dst.va + off,
                                   dst.rkey, imm=imm))


def _two_plane_qps(ea, eb) -> tuple[int, int]:
    """A QP on each NIC of a two-plane pair (ports 10.0.0.x and 10.1.0.x), connected."""
    ea.local_addrs, eb.local_addrs = ["10.0.0.1", "10.1.0.1"], ["10.0.0.2", "10.1.0.2"]
    qa2, qb2 = ea.create_qp(send_cq="a.s"), eb.create_qp(send_cq="b.s")
    ia, ib = ea.query_qp(qa2), eb.query_qp(qb2)
    ea.connect(qa2, {**ib, "port": 4791})
    eb.connect(qb2, {**ia, "port": 4791})
    return qa2, qb2


def test_a_clean_write_arrives_and_completes_from_the_transport_ack():
    link, ea, eb, qa, qb, src, dst, data = _pair(size=64 * PMTU)
    _write(ea, qa, src, dst, 64 * PMTU, 1)
    link.run()
    assert bytes(dst.view) == data
    (wc,) = link.completions("a", "a.s")
    assert (wc.wr_id, wc.status, wc.opcode, wc.byte_len) == (
        1, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE, 64 * PMTU)
    c = ea.counters()
    assert c["tx_packets"] == 64 and c["tx_retransmits"] == 0 and c["rx_acks"] == 1
    assert eb.counters()["tx_sacks"] == 64  # every packet SACKed
    # a destroyed QP's counts stay in the NIC's totals: counters never go back
    before = {e: e.counters() for e in (ea, eb)}
    ea.destroy_qp(qa)
    eb.destroy_qp(qb)
    for e, c in before.items():
        after = e.counters()
        assert after["qps"] == 0
        assert {k: v for k, v in after.items() if k != "qps"} == \
            {k: v for k, v in c.items() if k != "qps"}


def test_packets_are_sprayed_over_the_ev_set():
    link, ea, eb, qa, qb, src, dst, data = _pair(size=256 * PMTU)
    link.wire = []
    _write(ea, qa, src, dst, 256 * PMTU, 1)
    link.run()
    ports = Counter(meta.entropy for _, side, d, _, meta in link.wire
                    if side == "a" and BTH.decode(d).opcode in WRITE_OPCODES)
    assert len(ports) == 128 and set(ports.values()) == {2}  # each EV twice in 256 packets
    assert all(p >= 0xD000 for p in ports)  # EVs are source ports, clear of UET's entropies
    table = ea.ev_table(qa)
    assert table["summary"]["size"] == 128 and sum(r["sent"] for r in table["evs"]) == 256
    assert sum(r["sacked"] for r in table["evs"]) == 256  # each SACK echoed its EV


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_byte_exact_through_loss_reordering_and_duplication(seed):
    link, ea, eb, qa, qb, src, dst, data = _pair(seed, size=1 << 20, loss=0.02, reorder=0.1,
                                                 dup=0.02)
    for i in range(4):  # four 256 KiB writes back to back
        _write(ea, qa, src, dst, 1 << 18, 10 + i, off=i << 18)
    link.run()
    assert bytes(dst.view) == data
    wcs = link.completions("a", "a.s")
    assert [(w.wr_id, w.status) for w in wcs] == [(10 + i, WcStatus.SUCCESS) for i in range(4)]
    c = ea.counters()
    assert c["tx_retransmits"] > 0 and link.dropped > 0
    # holes only: about what the wire lost (each loss resent once or, if the resend or
    # the SACKs were lost too, again), far from go-back-N's resend of everything after
    assert c["tx_retransmits"] < 4 * link.dropped, (c, link.dropped)
    assert c["retx_sack"] > 0  # most resends from the SACKs, not the timer


def test_immediates_complete_at_the_receiver_in_order():
    link, ea, eb, qa, qb, src, dst, data = _pair(size=32 * PMTU, loss=0.05, reorder=0.2)
    for j in range(4):
        eb.post_recv(qb, RecvWR(100 + j))
    for i in range(4):
        _write(ea, qa, src, dst, 8 * PMTU, i, off=i * 8 * PMTU, imm=0xA0 + i)
    link.run()
    assert bytes(dst.view) == data
    rx = link.completions("b", "b.r")
    assert [(w.wr_id, w.imm, w.byte_len, w.opcode) for w in rx] == [
        (100 + i, 0xA0 + i, 8 * PMTU, WcOpcode.RECV_RDMA_WITH_IMM) for i in range(4)]


def test_trimmed_packets_are_resent_on_the_nack_not_the_timer():
    cut = {"n": 0}

    def trim_some(d, s, t):  # every 10th data packet of the first 200
        if BTH.decode(d).opcode in WRITE_OPCODES and cut["n"] < 200:
            cut["n"] += 1
            return cut["n"] % 10 == 0
        return False

    # cut by the switch pipeline's own trim (emu.switch.trim: MRC's chains are registered
    # with the RoCEv2 codec), as on UDP 4791
    link, ea, eb, qa, qb, src, dst, data = _pair(size=256 * PMTU, trim=trim_some,
                                                 trimmer=trim_roce)
    _write(ea, qa, src, dst, 256 * PMTU, 1)
    link.run()
    assert bytes(dst.view) == data and link.trimmed == 20
    c = ea.counters()
    assert c["retx_trim"] == 20 and c["rto"] == 0 and eb.counters()["rx_trimmed"] == 20
    skipped = [r for r in ea.ev_table(qa)["evs"] if r["trimmed"]]
    assert len(skipped) == 20  # each trim was told to the EV that carried it


def test_a_dead_peer_fails_the_qp_after_its_retries():
    link, ea, eb, qa, qb, src, dst, data = _pair(size=4 * PMTU, drop=lambda d, s, t: True,
                                                 engine_kw={"retry_linear": 2, "retry_exp": 2})
    _write(ea, qa, src, dst, 4 * PMTU, 7)
    _write(ea, qa, src, dst, 4 * PMTU, 8)
    link.run()
    wcs = link.completions("a", "a.s")
    assert [(w.wr_id, w.status) for w in wcs] == [(7, WcStatus.RETRY_EXC_ERR),
                                                   (8, WcStatus.WR_FLUSH_ERR)]
    (sc,) = link.state_changes("a")
    assert (sc.old, sc.new, sc.status) == ("RTS", "ERR", WcStatus.RETRY_EXC_ERR)
    assert ea.counters()["rto"] == 5  # 2 linear + 2 exponential retries, then the end
    assert ea.get_timer() is None


def test_bad_verbs_are_refused():
    link, ea, eb, qa, qb, src, dst, data = _pair(size=PMTU)
    with pytest.raises(VerbsError, match="WRITE and WRITE with immediate only"):
        ea.post_send(qa, SendWR.send(1, [Sge(src.va, 10, src.lkey)]))
    with pytest.raises(VerbsError, match="bad SGE"):
        ea.post_send(qa, SendWR.write(1, [Sge(src.va, 10, 0xBAD)], dst.va, dst.rkey))
    with pytest.raises(VerbsError, match="unknown MRC QP attribute"):
        ea.create_qp(attrs={"bogus": 1})
    with pytest.raises(VerbsError, match="not RESET"):
        ea.connect(qa, {"qpn": 1, "psn": 0, "address": "x"})
    with pytest.raises(VerbsError, match="needs qpn"):
        ea.connect(ea.create_qp(), {"psn": 0})


def test_garbage_from_the_wire_is_counted_not_raised():
    link, ea, eb, qa, qb, src, dst, data = _pair(size=PMTU)
    for junk in (b"", b"\xc6" * 5, bytes(12) + b"\x00" * 3, b"\xdc" + bytes(40)):
        ea.receive_datagram(junk, ("10.0.0.2", 50000), 0.0)
    c = ea.counters()
    assert c["rx_drop_malformed"] + c["rx_drop_unknown_qp"] == 4


def test_a_broken_path_retires_its_ev_probes_revive_it_when_it_heals():
    """Every packet on one EV (source port) is lost: the first loss the SACKs show retires
    it (ASSUMED_BAD) and a fresh EV takes its slot; the transfer completes on the others;
    probes on the retired EV go unanswered while the path is down, and once it heals
    they are answered (a SACK with PR) and it comes back GOOD."""
    link, ea, eb, qa, qb, src, dst, data = _pair(size=64 * PMTU)
    bad = ea._qps[qa].ini.evs.slots[5].ev
    state = {"broken": True, "lost": 0}
    send = ea.datagrams_to_send

    def path(now):  # the path of source port `bad` loses everything while broken
        out = []
        for d, addr, meta in send(now):
            if state["broken"] and meta.entropy == bad:
                state["lost"] += 1
                continue
            out.append((d, addr, meta))
        return out

    ea.datagrams_to_send = path
    _write(ea, qa, src, dst, 64 * PMTU, 1)
    link.run(until=0.5)
    assert bytes(dst.view) == data
    evs = ea._qps[qa].ini.evs
    assert evs.by_ev[bad].state.value == "assumed_bad" and evs.by_ev[bad] in evs.retired
    c = ea.counters()
    assert state["lost"] >= 2 and c["tx_probes"] >= 1 and c["probe_lost"] >= 1
    state["broken"] = False  # the path heals
    link.run(until=link.now + 0.5)
    assert evs.by_ev[bad].state.value == "good"
    assert ea.counters()["probe_ok"] >= 3 and eb.counters()["rx_probes"] >= 3
    events, _ = evs.events()
    assert [e.cause for e in events if e.ev == bad] == ["lost", "probes answered"]


def test_a_qp_sprays_over_both_planes_of_a_two_port_nic():
    """Each NIC has two ports (planes) with an address each: the EV set is split over
    both, and a packet goes to the peer's address on its EV's plane (the kernel then
    sends it out of that plane's port) — half of the packets each."""
    link, ea, eb, qa, qb, src, dst, data = _pair(
        size=128 * PMTU, engine_kw={"planes": 2})
    for e, addrs in ((ea, ["10.0.0.1", "10.1.0.1"]), (eb, ["10.0.0.2", "10.1.0.2"])):
        e.local_addrs = addrs
    qa2, qb2 = ea.create_qp(send_cq="a.s", recv_cq="a.r"), eb.create_qp(send_cq="b.s",
                                                                       recv_cq="b.r")
    ia, ib = ea.query_qp(qa2), eb.query_qp(qb2)
    assert ia["addresses"] == ["10.0.0.1", "10.1.0.1"]
    ea.connect(qa2, {**ib, "port": 4791})
    eb.connect(qb2, {**ia, "port": 4791})
    link.wire = []
    _write(ea, qa2, src, dst, 128 * PMTU, 1)
    link.run()
    assert bytes(dst.view) == data
    dests = Counter(addr[0] for _, side, d, addr, _ in link.wire
                    if side == "a" and BTH.decode(d).opcode in WRITE_OPCODES)
    assert dests == {"10.0.0.2": 64, "10.1.0.2": 64}
    planes = Counter(r["plane"] for r in ea.ev_table(qa2)["evs"])
    assert planes == {0: 64, 1: 64}


def test_a_port_taken_down_moves_its_traffic_to_the_live_plane_and_back():
    link, ea, eb, qa, qb, src, dst, data = _pair(size=128 * PMTU, engine_kw={"planes": 2})
    qa2, qb2 = _two_plane_qps(ea, eb)
    assert ea.port_admin(1, False, 0.0) == {"port": 1, "up": False, "qps": 1,
                                           "ports_down": [1], "admin_down": [1],
                                           "link_down": [], "peers_told": 1}
    link.wire = []
    _write(ea, qa2, src, dst, 64 * PMTU, 1)
    link.run()

    def dests(side):
        return Counter(addr[0] for _, s, d, addr, _ in link.wire
                       if s == side and BTH.decode(d).opcode in WRITE_OPCODES)

    assert dests("a") == {"10.0.0.2": 64}  # everything on the live plane
    # the peer was told (ENDPOINT_REQUEST PORT_STATUS_UPDATE) and answered; its QP no
    # longer sends to this NIC's address on the plane that is down
    assert eb.counters()["rx_port_updates"] == 1 and ea.counters()["rx_port_update_acks"] == 1
    assert eb._qps[qb2].ini.evs.down == {1}
    back = register(eb.memory, 64 * PMTU)
    eb.post_send(qb2, SendWR.write(5, [Sge(back.va, 64 * PMTU, back.lkey)], src.va, src.rkey))
    link.wire = []
    link.run()
    assert dests("b") == {"10.0.0.1": 64}
    assert {r["state"] for r in ea.ev_table(qa2)["evs"] if r["plane"] == 1} == {"assumed_bad"}
    ea.port_admin(1, True, link.now)
    link.run()  # the port is back: probes on its EVs, answered, bring them back
    assert {r["state"] for r in ea.ev_table(qa2)["evs"]} == {"good"}
    assert ea.counters()["probe_ok"] > 0
    link.wire = []
    _write(ea, qa2, src, dst, 64 * PMTU, 2, off=64 * PMTU)
    link.run()
    assert dests("a") == {"10.0.0.2": 32, "10.1.0.2": 32} and bytes(dst.view) == data
    assert eb._qps[qb2].ini.evs.down == set()  # told again: both planes
    with pytest.raises(VerbsError, match="port 2"):
        ea.port_admin(2, False, 0.0)


def test_a_port_that_loses_its_link_is_left_until_it_returns_but_admin_down_wins():
    """The daemon's link watch (``port_link``) takes a plane out as the controller does,
    and tells the peer; the link coming back restores it — unless the controller took
    the port down meanwhile: that stays until ``port_admin(up)``."""
    link, ea, eb, qa, qb, src, dst, data = _pair(size=128 * PMTU, engine_kw={"planes": 2})
    qa2, qb2 = _two_plane_qps(ea, eb)
    out = eb.port_link(1, False, 0.0)  # the receiver's plane-1 cable
    assert (out["link_down"], out["admin_down"], out["peers_told"]) == ([1], [], 1)
    link.run()  # the PORT_STATUS_UPDATE reaches the sender
    link.wire = []
    _write(ea, qa2, src, dst, 64 * PMTU, 1)
    link.run()
    sent = Counter(addr[0] for _, s, d, addr, _ in link.wire
                   if s == "a" and BTH.decode(d).opcode in WRITE_OPCODES)
    assert sent == {"10.0.0.2": 64}  # the sender was told: nothing towards the dead port
    assert ea._qps[qa2].ini.evs.down == {1}
    eb.port_admin(1, False, link.now)
    assert eb.port_link(1, True, link.now)["ports_down"] == [1]  # admin still has it down
    assert eb.port_admin(1, True, link.now)["ports_down"] == []
    link.run()
    assert ea._qps[qa2].ini.evs.down == set()
    c = eb.counters()
    assert (c["link_downs"], c["link_ups"]) == (1, 1)


def test_one_plane_overtaking_the_other_is_not_taken_for_loss():
    """Plane 0's path holds a 60-µs queue that plane 1's does not: plane-1 packets overtake
    hundreds of plane-0 ones — far past the SACK count's reordering threshold. A path is
    FIFO, so nothing is resent until a later packet on the *same* EV arrived: no packet
    is taken for lost, no EV is blamed, the write completes byte-exact."""
    size = 1024 * PMTU
    link, ea, eb, qa, qb, src, dst, data = _pair(size=size, engine_kw={"planes": 2})
    qa2, qb2 = _two_plane_qps(ea, eb)
    link.delay_sent = lambda side, d, addr, meta: 60e-6 if addr[0].startswith("10.0.") else 0
    _write(ea, qa2, src, dst, size, 1)
    link.run()
    assert bytes(dst.view) == data
    c = ea.counters()
    assert c["tx_retransmits"] == 0 and c["rto"] == 0, c
    assert {r["state"] for r in ea.ev_table(qa2)["evs"]} == {"good"}


def test_the_transport_ack_goes_where_the_data_comes_from_not_where_probes_do():
    """A plane comes back but its way back to the sender is still broken (a fabric
    converging): the sender's probes on it reach the receiver, their answers do not,
    and the data stays on the good plane. The transport ACK must follow the data —
    sent where the probes came from, it was lost and the write completed only at the
    sender's ACK request, a timeout later."""
    link, ea, eb, qa, qb, src, dst, data = _pair(size=128 * PMTU, engine_kw={"planes": 2})
    qa2, qb2 = _two_plane_qps(ea, eb)
    link.src_of = lambda side, dest: dest[:-1] + ("1" if side == "a" else "2")
    for e in (ea, eb):
        e.port_link(1, False, 0.0)
    _write(ea, qa2, src, dst, 64 * PMTU, 1)  # on plane 0 while plane 1 is down
    link.run()
    link.drop_sent = lambda side, d, addr, meta: side == "b" and addr[0] == "10.1.0.1"
    for e in (ea, eb):
        e.port_link(1, True, link.now)
    link.run(until=link.now + 30e-6)  # the first probes on plane 1 reach the receiver
    _write(ea, qa2, src, dst, 64 * PMTU, 2, off=64 * PMTU)
    # (the probes go on while plane 1 stays broken: run until the write completes)
    link.run(stop=lambda: len(link.completions("a", "a.s")) == 2, max_steps=200_000)
    assert bytes(dst.view) == data
    assert [wc.status for wc in link.completions("a", "a.s")] == [WcStatus.SUCCESS] * 2
    c = ea.counters()
    assert c["tx_probes"] > 0 and c["probe_ok"] == 0  # plane 1 still broken on the way back
    assert c["ack_requests"] == 0 and c["rto"] == 0, c


def test_a_lost_port_status_update_is_sent_again_until_the_peer_answers():
    """A PORT_STATUS_UPDATE lost on the wire (a fabric still converging) is sent again
    after a few round trips, with the ports as they are then, until the peer answers:
    the peer must hear that a plane came back, or it never uses it again."""
    from emu.wire.codec.mrc import MRC_ENDPOINT_REQUEST

    link, ea, eb, qa, qb, src, dst, data = _pair(size=8 * PMTU, engine_kw={"planes": 2})
    qa2, qb2 = _two_plane_qps(ea, eb)
    ea.port_admin(1, False, 0.0)
    link.run()
    assert eb._qps[qb2].ini.evs.down == {1}
    lost = []

    def drop_first_update(side, d, addr, meta):
        if side == "a" and BTH.decode(d).opcode == MRC_ENDPOINT_REQUEST and not lost:
            lost.append(d)
            return True
        return False

    link.drop_sent = drop_first_update
    ea.port_admin(1, True, link.now)
    link.run()
    assert lost and eb._qps[qb2].ini.evs.down == set()  # heard the second time
    c = ea.counters()
    assert c["tx_port_update_retries"] == 1 and c["rx_port_update_acks"] == 2
    assert ea.get_timer() is None  # answered: nothing more to resend


def test_a_plane_failing_mid_write_is_resent_on_the_live_plane_at_once():
    """Plane 1 fails in the middle of a write (every packet on it lost from then on) and
    both NICs' link watches report it: what was in flight on plane 1 is resent on plane 0
    at once — no timeout, no EV blamed — and the write completes byte-exact."""
    size = 512 * PMTU
    link, ea, eb, qa, qb, src, dst, data = _pair(size=size, engine_kw={"planes": 2})
    qa2, qb2 = _two_plane_qps(ea, eb)
    failed = False
    link.drop_sent = lambda side, d, addr, meta: failed and addr[0].startswith("10.1.")
    link.delay = 20e-6  # a bandwidth-delay product's worth in flight on each plane
    _write(ea, qa2, src, dst, size, 1)
    while link.sent["a"] < 200:
        assert link.step()
    failed = True
    ea.port_link(1, False, link.now)
    eb.port_link(1, False, link.now)
    link.run()
    assert bytes(dst.view) == data
    (wc,) = link.completions("a", "a.s")
    assert wc.status == WcStatus.SUCCESS
    c = ea.counters()
    assert c["retx_plane"] > 0 and c["rto"] == 0, c
    assert c["tx_retransmits"] == c["retx_plane"] + c["retx_sack"]
    # plane 0's EVs were not blamed; plane 1's are assumed bad until probes say otherwise
    states = {p: {r["state"] for r in ea.ev_table(qa2)["evs"] if r["plane"] == p}
              for p in (0, 1)}
    assert states == {0: {"good"}, 1: {"assumed_bad"}}
    failed = False
    ea.port_link(1, True, link.now)
    eb.port_link(1, True, link.now)
    link.run()
    assert all(r["state"] == "good" for r in ea.ev_table(qa2)["evs"])


def test_a_lost_transport_ack_is_asked_for_again_after_the_timeout():
    """Every packet SACKed but the one transport ACK lost: after its timeout the requester
    sends the message's last packet again asking for an ACK, the target (a duplicate
    with AckReq) says its last AETH again, and the WRITE completes — not open for ever."""
    link, ea, eb, qa, qb, src, dst, data = _pair(size=8 * PMTU)
    lost = []

    def drop(d, s, t):
        if d[0] == MRC_TRANSPORT_ACK and not lost:
            lost.append(1)
            return True
        return False

    link.drop = drop
    _write(ea, qa, src, dst, 8 * PMTU, 1)
    link.run()
    (wc,) = link.completions("a", "a.s")
    assert wc.status == WcStatus.SUCCESS and bytes(dst.view) == data and lost
    assert ea.counters()["ack_requests"] == 1 and eb.counters()["tx_ack_repeats"] == 1


def test_an_ev_probe_is_answered_on_its_ev_with_the_round_trip():
    """EV_PROBE (an endpoint operation, no QP needed): the request leaves on the EV it
    probes, the peer NIC answers OK on the same EV, and the prober records the round
    trip; a request with an op the NIC does not know is answered UNSUPPORTED_OP."""
    link, ea, eb, qa, qb, src, dst, data = _pair(size=PMTU)
    link.wire = []
    rid = ea.ev_probe(link.addr_b[0], 0xD123, link.now)
    link.run()
    (res,) = ea.take_probe_results()
    assert (res["request_id"], res["ev"], res["status"]) == (rid, 0xD123, "OK")
    assert res["rtt_ns"] == pytest.approx(2 * link.delay * 1e9)
    sent = [(side, meta.entropy) for _, side, d, _, meta in link.wire]
    assert sent == [("a", 0xD123), ("b", 0xD123)]  # both ways on the probed EV
    assert eb.counters()["rx_ev_probes"] == 1 and ea.counters()["rx_ev_probe_answers"] == 1
    assert ea.take_probe_results() == []
    with pytest.raises(VerbsError, match="16 bits"):
        ea.ev_probe(link.addr_b[0], 0x12345, link.now)


def test_ev_and_cc_profiles_go_init_offline_online_and_new_qps_use_the_default():
    """mrc_ctl.h's profiles: created INIT, OFFLINE, then ONLINE; only an ONLINE profile
    is given to a QP (by name, or as the NIC's default); a QP sprays over its EV
    profile's values and runs its CC profile; the default cannot go offline."""
    link, ea, eb, qa, qb, src, dst, data = _pair(size=16 * PMTU)
    ea.profile_op("ev", "create", "four", {"mode": "exp", "evs": [0xE000, 0xE001, 0xE002,
                                                                   0xE003]})
    ea.profile_op("cc", "create", "none", {"algorithm": "none"})
    with pytest.raises(VerbsError, match="INIT: it cannot go ONLINE"):
        ea.profile_op("ev", "online", "four")
    q = ea.create_qp(send_cq="a.s", attrs={"ev_profile": "four"})
    with pytest.raises(VerbsError, match="is INIT, not ONLINE"):
        ea.connect(q, {**eb.query_qp(eb.create_qp()), "address": link.addr_b[0]})
    for kind, name in (("ev", "four"), ("cc", "none")):
        ea.profile_op(kind, "offline", name)
        ea.profile_op(kind, "online", name)
        ea.profile_op(kind, "default", name)
    with pytest.raises(VerbsError, match="default EV profile"):
        ea.profile_op("ev", "offline", "four")
    listing = ea.profile_op("ev", "list")
    assert listing["default"] == {"ev": "four", "cc": "none"}
    qa2, qb2 = ea.create_qp(send_cq="a.s"), eb.create_qp(send_cq="b.s")
    ia, ib = ea.query_qp(qa2), eb.query_qp(qb2)
    ea.connect(qa2, {**ib, "address": link.addr_b[0], "port": link.addr_b[1]})
    eb.connect(qb2, {**ia, "address": link.addr_a[0], "port": link.addr_a[1]})
    assert ea._qps[qa2].ini.cc is None  # the CC profile "none": the MPR window alone
    link.wire = []
    _write(ea, qa2, src, dst, 16 * PMTU, 1)
    link.run()
    assert bytes(dst.view) == data
    evs = {meta.entropy for _, side, d, _, meta in link.wire
           if side == "a" and BTH.decode(d).opcode in WRITE_OPCODES}
    assert evs == {0xE000, 0xE001, 0xE002, 0xE003}
    ea.profile_op("ev", "create", "stev", {"format": "stev", "mode": "auto"})
    ea.profile_op("ev", "offline", "stev")
    ea.profile_op("ev", "online", "stev")
    q3 = ea.create_qp(attrs={"ev_profile": "stev"})
    with pytest.raises(VerbsError, match="stev EV format needs IPv6"):
        ea.connect(q3, {**eb.query_qp(eb.create_qp()), "address": link.addr_b[0]})
    with pytest.raises(VerbsError, match="unknown CC parameter"):
        ea.profile_op("cc", "create", "x", {"eta": 3})
    with pytest.raises(VerbsError, match="is ONLINE: take it offline"):
        ea.profile_op("ev", "delete", "stev")


def test_the_event_trace_has_each_packets_ev_the_per_ev_feedback_and_ev_state_changes():
    """``emu nicd --trace`` for MRC: every packet with its EV, every SACK with the EV it
    echoes (and its CE mark and hint), a trim's NACK, the resend on another EV, a real
    loss found by the SACKs, and the EV state changes those cause."""
    from emu.core.trace import Trace

    trace = Trace.memory("h1/mrc")
    n = [0]

    def drop(d, s, t):  # the 20th data packet is lost, the 40th trimmed
        if BTH.decode(d).opcode in WRITE_OPCODES:
            n[0] += 1
            return n[0] == 20
        return False

    link, ea2, eb, qa, qb, src, dst, data = _pair(
        size=128 * PMTU, engine_kw={"trace": trace}, drop=drop,
        trim=lambda d, s, t: BTH.decode(d).opcode in WRITE_OPCODES and n[0] == 40)
    qa2, qb2 = ea2.create_qp(send_cq="a.s"), eb.create_qp(send_cq="b.s")
    ia, ib = ea2.query_qp(qa2), eb.query_qp(qb2)
    ea2.connect(qa2, {**ib, "address": link.addr_b[0], "port": link.addr_b[1]})
    eb.connect(qb2, {**ia, "address": link.addr_a[0], "port": link.addr_a[1]})
    _write(ea2, qa2, src, dst, 128 * PMTU, 1)
    link.run()
    assert bytes(dst.view) == data
    ev = [e for e in trace.events if e["data"].get("qp") == qa2]  # the sender's QP
    names = Counter(e["name"] for e in ev)
    assert names["packet_sent"] == 128 and names["ack_received"] >= 127
    sent = [e["data"] for e in ev if e["name"] == "packet_sent"]
    assert all(e["qp"] == qa2 and 0xD000 <= e["ev"] <= 0xFFFF for e in sent)
    assert len({e["ev"] for e in sent}) >= 120  # sprayed: a new EV for nearly each
    sacks = [e["data"] for e in ev if e["name"] == "ack_received"]
    assert all({"ev", "ce", "hint", "cack"} <= set(s) for s in sacks)
    (nack,) = [e["data"] for e in ev if e["name"] == "nack_received"]
    assert nack["reason"] == "TRIMMED"
    lost = [e["data"] for e in ev if e["name"] == "packet_lost"]
    assert [x["by"] for x in lost] == ["sack"]
    resent = [e["data"] for e in ev if e["name"] == "packet_retransmitted"]
    assert len(resent) == 2 and all(r["ev"] != r["lost_on"] for r in resent)
    states = [e["data"] for e in ev if e["name"] == "ev_state"]
    assert any(s["ev"] == lost[0]["ev"] and s["to"] == "assumed_bad" for s in states), states


def test_without_trim_nack_a_trim_is_a_silent_loss_and_the_sacks_find_it():
    """TRIM_NACK off at the receiver (mrc.h capability): a trimmed packet draws no NACK;
    the sender resends it when the SACKs show the hole — later, but the write completes."""
    n = [0]

    def trim(d, s, t):
        if BTH.decode(d).opcode in WRITE_OPCODES:
            n[0] += 1
            return n[0] == 10
        return False

    link, ea, eb, qa, qb, src, dst, data = _pair(size=64 * PMTU, trim=trim)
    qa2 = ea.create_qp(send_cq="a.s")
    qb2 = eb.create_qp(send_cq="b.s", attrs={"trim_nack": False})
    ia, ib = ea.query_qp(qa2), eb.query_qp(qb2)
    assert ib["trim_nack"] is False and ia["trim_nack"] is True
    ea.connect(qa2, {**ib, "address": link.addr_b[0], "port": link.addr_b[1]})
    eb.connect(qb2, {**ia, "address": link.addr_a[0], "port": link.addr_a[1]})
    _write(ea, qa2, src, dst, 64 * PMTU, 1)
    link.run()
    assert bytes(dst.view) == data
    cb, ca = eb.counters(), ea.counters()
    assert cb["rx_trimmed"] == cb["rx_trimmed_silent"] == 1 and cb["tx_nacks"] == 0
    assert ca["retx_trim"] == 0 and ca["retx_sack"] == 1


def test_dynamic_mpr_follows_the_receivers_window_only_when_both_ends_enable_it():
    """DYNAMIC_MPR (effective only when both peers enable it): the receiver shrinks its
    window to 128 and the sender keeps at most 127 PSNs outstanding from the next SACK
    on; with only one end enabled the sender keeps its connect-time MPR."""
    for both in (True, False):
        link, ea, eb, qa, qb, src, dst, data = _pair(size=2048 * PMTU, rate=1e9)
        qa2 = ea.create_qp(send_cq="a.s", attrs={"dynamic_mpr": True, "mpr": 1024})
        qb2 = eb.create_qp(send_cq="b.s", attrs={"dynamic_mpr": both, "mpr": 1024})
        ia, ib = ea.query_qp(qa2), eb.query_qp(qb2)
        ea.connect(qa2, {**ib, "address": link.addr_b[0], "port": link.addr_b[1]})
        eb.connect(qb2, {**ia, "address": link.addr_a[0], "port": link.addr_a[1]})
        assert eb.resize_window(qb2, 128) == {"qpn": qb2, "mpr": 128}
        ea._qps[qa2].ini.cc = None  # the window alone limits what is outstanding
        _write(ea, qa2, src, dst, 2048 * PMTU, 1)
        ini = ea._qps[qa2].ini
        most = 0  # PSNs outstanding once the first burst (up to 1023) is all SACKed
        while link.step():
            if ini.stats["rx_sacks"] >= 1024:
                most = max(most, ini.sb.span)
        assert bytes(dst.view) == data
        assert ini.dynamic_mpr is both and ini.mpr == (128 if both else 1024)
        if both:
            assert ini.stats["mpr_changes"] == 1 and most <= 127
        else:  # the connect-time window stays in force
            assert ini.stats["mpr_changes"] == 0 and most > 127


def test_an_ev_probe_on_a_port_taken_down_is_port_down_at_once():
    link, ea, eb, qa, qb, src, dst, data = _pair(size=PMTU, engine_kw={"planes": 2})
    ea.port_admin(1, False, 0.0)
    link.wire = []
    ea.ev_probe(link.addr_b[0], 0xD001, link.now, plane=1)
    link.run()
    (res,) = ea.take_probe_results()
    assert res["status"] == "PORT_DOWN" and res["rtt_ns"] is None
    assert not [w for w in link.wire if w[1] == "a"]  # nothing left the NIC


def test_heavy_loss_with_timeouts_under_the_round_trip_completes_byte_exact():
    """15 % loss and a local ACK timeout (code 6: 262 µs) far under what the losses cost:
    EVs retire, probes revive some as spares, and news of packets sent on them earlier
    still arrives. Every message lands byte-exact (the golden-trace driver checks), with
    no exception out of the engines' timers (a revived spare timing out again raised
    ValueError there)."""
    import golden_trace as g

    recs = g._mrc(43, {"ev_set": 16, "pmtu": 1024, "line_rate": 10e9, "base_rtt": 20e-6,
                       "timeout": 6, "ev_min_active": 4}, g.MRC_MIXED,
                  {**g.IMPAIR, "loss": 0.15}, 0.02)
    assert recs

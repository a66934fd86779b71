# SPDX-License-Identifier: GPL-2.0-only
"""UET PDS (RUD): PDC setup and close, ACK generation, SACK, NACK reactions, RTO, trimming."""

from __future__ import annotations

import pytest
from lossy_link import drop_first
from uet_pair import A, B, ok, uet_pair, write

from emu.core.cq import WcStatus
from emu.core.trace import Trace, select
from emu.transports.base import ECN_CE
from emu.transports.uet import NACK_REACTIONS, PdcState, Reaction
from emu.transports.uet.pds import nack_packet
from emu.wire.codec.uet import decode_packet


def pds_type(d: bytes) -> int:
    return d[0] >> 3


def is_data(d: bytes) -> bool:
    return pds_type(d) == 2


def is_ack(d: bytes) -> bool:
    return pds_type(d) in (7, 8)


# -- PDC establishment ----------------------------------------------------------


def test_syn_on_every_request_until_the_first_ack_then_dpdcid():
    p = uet_pair(seed=1, ekw={"mtu": 1024})
    p.link.tap = []
    write(p, 1, 8 * 1024)
    p.ea.datagrams_to_send(0.0)  # nothing more to say: the pair runs from here
    p.link.run()
    ok(p.link.completions("a"), 1)
    p.link.tap.clear()
    write(p, 2, 4 * 1024)
    p.link.run()
    ok(p.link.completions("a"), 1, 2)
    reqs = [decode_packet(d).pds for _, s, d, _ in p.link.tap if s == "a" and is_data(d)]
    assert reqs and all(not r.syn for r in reqs)
    (ini,) = [x for x in p.ea.pdcs() if x["role"] == "initiator"]
    (tgt,) = [x for x in p.eb.pdcs() if x["role"] == "target"]
    assert ini["dpdcid"] == tgt["pdcid"] and tgt["dpdcid"] == ini["pdcid"] != 0
    assert all(r.dpdcid == tgt["pdcid"] for r in reqs)


def test_first_packets_carry_syn_and_psn_offset_from_a_random_start():
    p = uet_pair(seed=2, ekw={"mtu": 1024})
    write(p, 1, 5 * 1024)
    out = p.ea.datagrams_to_send(0.0)
    hdrs = [decode_packet(d).pds for d, _, _ in out]
    start = hdrs[0].psn
    assert [h.syn for h in hdrs] == [1] * 5
    assert [h.psn_offset for h in hdrs] == [0, 1, 2, 3, 4]
    assert all(h.start_psn() == start for h in hdrs)
    q = uet_pair(seed=3, ekw={"mtu": 1024})
    write(q, 1, 1024)
    assert decode_packet(q.ea.datagrams_to_send(0.0)[0][0]).pds.psn != start  # from the RNG


@pytest.mark.parametrize("lost", ["syn", "first_ack"])
def test_pdc_setup_survives_a_lost_syn_or_first_ack(lost):
    p = uet_pair(seed=4)
    if lost == "syn":
        p.link.drop = drop_first(lambda d, s: s == A and is_data(d))
    else:
        p.link.drop = drop_first(lambda d, s: s == B and is_ack(d))
    _, dst, data = write(p, 1, 3000)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:3000]) == data
    assert p.link.drop.seen and p.ea.counters()["rto_retransmits"] == 1
    assert p.eb.counters()["pdc_target_created"] == 1  # the retransmitted SYN found it
    if lost == "first_ack":
        assert p.eb.counters()["rx_duplicate"] == 1


def test_unknown_dpdcid_without_syn_gets_inv_dpdcid_and_closes_the_pdc():
    p = uet_pair(seed=5)
    write(p, 1, 100)
    p.link.run()
    (tgt,) = p.eb.pdcs()
    p.eb.destroy_pdc(tgt["pdcid"])  # the target forgets it
    write(p, 2, 100)
    p.link.run()
    wcs = p.link.completions("a")
    assert wcs[1].wr_id == 2 and wcs[1].status is WcStatus.REM_OP_ERR
    assert wcs[1].vendor_err == 0x0E
    (sc,) = p.link.state_changes("a")
    assert sc.new == PdcState.ERROR.value
    _, dst, data = write(p, 3, 100)  # a new PDC, with SYN again
    p.link.run()
    assert p.link.completions("a")[-1].ok and bytes(dst.view[:100]) == data


# -- window ---------------------------------------------------------------------------


def test_psn_beyond_the_window_gets_psn_oor_window_and_is_resent():
    p = uet_pair(seed=6, ekw={"mtu": 1024, "mpr": 4}, ekw_b={"mtu": 1024, "mpr": 1})
    p.link.drop = drop_first(lambda d, s: s == A and is_data(d))  # a hole holds the window
    _, dst, data = write(p, 1, 300 * 1024)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    assert p.eb.counters()["rx_psn_oor_window"] > 0
    assert p.ea.counters()["rx_nack_0x0b"] > 0
    (ini,) = p.ea.pdcs()
    assert ini["window"] == 128  # lowered to the target's advertised mpr


# -- ACK generation --------------------------------------------------------------------


def _acks_for_second_write(size: int, mtu: int, **kw) -> list:
    p = uet_pair(seed=7, ekw={"mtu": mtu}, **kw)
    write(p, 1, 10)
    p.link.run()
    p.link.tap = []
    write(p, 2, size)
    p.link.run()
    ok(p.link.completions("a"), 1, 2)
    return [decode_packet(d).pds for _, s, d, _ in p.link.tap if s == "b" and is_ack(d)]


def test_ack_every_16_kib_and_on_ar():
    acks = _acks_for_second_write(32 * 1024, 1024)
    assert len(acks) == 2  # after 16 KiB, and the AR of the last packet


def test_small_packets_count_as_1_kib_each():
    acks = _acks_for_second_write(32 * 100, 100)
    assert len(acks) == 2  # 16 packets × max(100, 1024) = 16 KiB


def test_ecn_ce_forces_an_ack_with_m_set():
    acks = _acks_for_second_write(8 * 1024, 1024, ce=1.0)
    assert len(acks) == 8 and all(a.m for a in acks)


def test_sack_bitmap_lsb_first_from_the_sack_base():
    # the hole must outlive the look at the ACK: no resend before the RTO
    p = uet_pair(seed=8, ekw={"mtu": 1024, "loss_threshold": 0})
    write(p, 1, 10)
    p.link.run()
    first: list[int] = []

    def drop(d: bytes, s: tuple, dst: tuple) -> bool:
        if s == A and is_data(d):
            psn = decode_packet(d).pds.psn
            if not first:
                first.append(psn)
            return psn == first[0] + 2 and len(first) == 1 and first.append(-1) is None
        return False

    p.link.drop = drop
    p.link.tap = []
    write(p, 2, 6 * 1024)
    p.link.run(until=p.link.now + 20e-6)
    ack = [decode_packet(d).pds for _, s, d, _ in p.link.tap if s == "b" and is_ack(d)][-1]
    lost = first[0] + 2
    assert ack.cack_psn == lost - 1
    assert ack.sack_base() == lost
    assert ack.sacked_psns() == [lost + 1, lost + 2, lost + 3]  # bit 0 (the hole) clear
    assert ack.sack_bitmap == 0b1110
    p.link.run()
    ok(p.link.completions("a"), 1, 2)


def test_duplicate_in_window_resends_the_ack():
    p = uet_pair(seed=9)
    write(p, 1, 100)
    (d, _, _), = p.ea.datagrams_to_send(0.0)
    p.eb.receive_datagram(d, A, 0.0)
    p.eb.receive_datagram(d, A, 1e-6)
    acks = p.eb.datagrams_to_send(1e-6)
    assert len(acks) == 2 and p.eb.counters()["rx_duplicate"] == 1
    assert decode_packet(acks[1][0]).ses.return_code == 1  # with the stored response


def test_replies_echo_the_entropy_and_data_is_sprayed():
    p = uet_pair(seed=10, ekw={"mtu": 1024, "entropies": range(50000, 50016)})
    write(p, 1, 64 * 1024)
    out = p.ea.datagrams_to_send(0.0)
    ents = [m.entropy for _, _, m in out]
    assert len(set(ents)) > 4 and set(ents) <= set(range(50000, 50016))
    for d, _, m in out:
        p.eb.receive_datagram(d, (A[0], m.entropy), 0.0)
        for _, _, am in p.eb.datagrams_to_send(0.0):
            assert am.entropy == m.entropy and am.dscp == 46


# -- NACK reactions ------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(NACK_REACTIONS))
def test_each_nack_code_gets_its_reaction(code):
    p = uet_pair(seed=12, ekw={"mtu": 1024})
    block = [True]
    p.link.drop = lambda d, s, dst: block[0] and s == A
    _, dst, data = write(p, 1, 2048)
    p.link.run(until=1e-6)
    (ini,) = p.ea.pdcs()
    psn = ini["start_psn"]
    nack = nack_packet(code, psn, 0, ini["pdcid"], payload=0x1000)
    p.link.tap = []
    t0 = p.link.now
    p.ea.receive_datagram(nack, B, t0)
    reaction = NACK_REACTIONS[code]
    block[0] = False
    if reaction is Reaction.CLOSE:
        p.link.run()
        (wc,) = p.link.completions("a")
        assert wc.status is WcStatus.REM_OP_ERR and wc.vendor_err == code
        assert p.link.state_changes("a")[0].new == "ERROR"
        return
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:2048]) == data
    sent = [decode_packet(d).pds for _, s, d, _ in p.link.tap if s == "a" and is_data(d)]
    times = [t for t, s, d, _ in p.link.tap if s == "a" and is_data(d)]
    if reaction is Reaction.RETRANSMIT:
        assert sent[0].psn == psn and sent[0].retx and sent[0].ar
        # trimmed: at once; other codes: after nack_retx_delay, well before the RTO
        want = t0 if code in (1, 2, 3) else t0 + p.ea.nack_retx_delay
        assert times[0] == pytest.approx(want)
    elif reaction is Reaction.NEW_START_PSN:
        assert sorted(h.psn for h in sent)[:2] == [0x1000, 0x1001]
        assert p.eb.pdcs()[0]["start_psn"] == 0x1000
    else:  # ignored: the RTO resends
        assert p.ea.counters()["rto_retransmits"] >= 1


def test_trimmed_packet_is_nacked_and_resent_before_the_rto():
    trace = Trace.memory("a")
    p = uet_pair(seed=13, ekw={"mtu": 1024, "trace": trace})
    write(p, 1, 10)
    p.link.run()
    trimmed = []

    def trim(d: bytes, s: tuple, dst: tuple) -> bool:
        if s == A and is_data(d) and not trimmed and len(d) > 1000:
            h = decode_packet(d)
            trimmed.append((p.link.now, h.pds.psn))
            p.link._push(p.link.now + p.link.delay, "b", d[:12 + 44], 0)  # headers only
            return True
        return False

    p.link.drop = trim
    _, dst, data = write(p, 2, 8 * 1024)
    p.link.run()
    ok(p.link.completions("a"), 1, 2)
    assert bytes(dst.view[:len(data)]) == data
    assert p.eb.counters()["rx_trimmed"] == 1 and p.ea.counters()["rx_nack_0x01"] == 1
    t0, psn = trimmed[0]
    (rt,) = select(trace.events, "packet_retransmitted", psn=psn)
    assert rt["data"]["reason"] == "nack" and rt["time"] - t0 < p.ea.rto / 10
    assert p.ea.counters().get("rto_retransmits", 0) == 0


def test_explicit_trimmed_flag_gets_nack_trimmed():
    p = uet_pair(seed=14)
    write(p, 1, 100)
    (d, _, m), = p.ea.datagrams_to_send(0.0)
    p.eb.receive_datagram(d, (A[0], m.entropy), 0.0, trimmed=True)
    ((nack, _, nm),) = p.eb.datagrams_to_send(0.0)
    h = decode_packet(nack).pds
    assert h.type == 10 and h.nack_code == 0x01 and nm.entropy == m.entropy


def test_two_nacks_for_one_trimmed_packet_in_a_batch_owe_one_resend():
    """A receiver that saw two trimmed copies of a packet NACKs it twice; both NACKs in
    one receive batch must resend it once (a second copy back to back is trimmed in
    turn at the congested port, draws its own NACK, and the pair repeats)."""
    p = uet_pair(seed=16)
    write(p, 1, 100)
    (d, _, m), = p.ea.datagrams_to_send(0.0)
    psn = decode_packet(d).pds.psn
    nacks = []
    for _ in range(2):
        p.eb.receive_datagram(d, (A[0], m.entropy), 0.0, trimmed=True)
        nacks += [n for n, _, _ in p.eb.datagrams_to_send(0.0)]
    assert len(nacks) == 2 and all(decode_packet(n).pds.nack_code == 0x01 for n in nacks)
    for n in nacks:
        p.ea.receive_datagram(n, (B[0], m.entropy), 1e-4)
    resent = [x for x, _, _ in p.ea.datagrams_to_send(1e-4)
              if is_data(x) and decode_packet(x).pds.psn == psn]
    assert len(resent) == 1


# -- loss presumed from SACKs -------------------------------------------------------------


def _lose_data_packet(n: int):
    """A drop hook losing the ``n``-th first transmission of a data request from A."""
    seen = []

    def drop(d: bytes, s: tuple, dst: tuple) -> bool:
        if s == A and is_data(d) and not decode_packet(d).pds.retx:
            seen.append(d)
            return len(seen) == n
        return False

    drop.seen = seen  # type: ignore[attr-defined]
    return drop


# (which of how many packets is lost, loss_threshold, loss probes, resent on SACKs, on a
# probe's answer, by the RTO)
LOSSES = {
    # the 5th of 64: 16 sent after it are SACKed one round trip later, long before the RTO
    "sixteen after it sacked": (5, 64, 16, True, 1, 0, 0),
    # loss_threshold 0 and no probes: the RTO alone
    "rto only": (5, 64, 0, False, 0, 0, 1),
    # loss_threshold 0: the probe finds it (the ACKs stop with it missing)
    "no count, a probe": (5, 64, 0, True, 0, 1, 0),
    # the 18th of 20: the 2 after it are all there will be (RFC 5827's Early Retransmit)
    "all after it at the tail": (18, 20, 16, True, 1, 0, 0),
    # the last: nothing sent after it can show it lost — the probe's answer does
    "the last packet": (20, 20, 16, True, 0, 1, 0),
    # … and without probes, only the timer
    "the last packet, no probes": (20, 20, 16, False, 0, 0, 1),
}


@pytest.mark.parametrize("case", LOSSES)
def test_a_lost_packet_is_resent_on_sacks_on_a_probe_or_at_the_rto(case):
    nth, count, threshold, probes, on_sacks, on_probe, on_rto = LOSSES[case]
    p = uet_pair(seed=21, ekw={"mtu": 1024, "rto": 5e-3, "loss_threshold": threshold,
                               "loss_probes": probes})
    p.link.drop = _lose_data_packet(nth)
    _, dst, data = write(p, 1, count * 1024)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:count * 1024]) == data
    c = p.ea.counters()
    assert (c.get("sack_retransmits", 0), c.get("probe_retransmits", 0),
            c.get("rto_retransmits", 0)) == (on_sacks, on_probe, on_rto)
    assert c["tx_retransmits"] == 1
    assert (p.link.now > 5e-3) == bool(on_rto)  # only a timeout waits its 5 ms


# -- RTO and close --------------------------------------------------------------------


def test_timeouts_cover_the_ports_hold_of_an_emitted_packet():
    """A daemon's port may hold a datagram ``tx_hold`` after the engine emits it (its
    transmit FIFO); the spec's timer runs from transmission, so every retry waits
    ``rto + tx_hold``: with a 4 ms hold the same five retries take 5 × 5 ms, not 5 × 1 ms
    (a packet still in its own port's queue must not time out)."""
    p = uet_pair(seed=15, ekw={"rto": 1e-3, "max_retries": 5, "tx_hold": 4e-3})
    p.link.drop = lambda d, s, dst: s == A
    write(p, 1, 100)
    p.link.run()
    (wc,) = p.link.completions("a")
    assert wc.status is WcStatus.RETRY_EXC_ERR
    assert 30e-3 - 1e-9 <= p.link.now < 31e-3  # (1 + 5 retries) × (1 + 4) ms
    with pytest.raises(ValueError, match="tx_hold"):
        uet_pair(ekw={"tx_hold": -1.0})


def test_rto_retries_exhausted_close_the_pdc_in_error():
    p = uet_pair(seed=15, ekw={"rto": 1e-3, "max_retries": 5})
    p.link.drop = lambda d, s, dst: s == A
    write(p, 1, 5000)
    write(p, 2, 100)
    p.link.run()
    wcs = p.link.completions("a")
    assert sorted(w.wr_id for w in wcs) == [1, 2]
    assert all(w.status is WcStatus.RETRY_EXC_ERR for w in wcs)
    (sc,) = p.link.state_changes("a")
    assert (sc.old, sc.new, sc.status) == ("SYN_SENT", "ERROR", WcStatus.RETRY_EXC_ERR)
    assert 6e-3 - 1e-9 <= p.link.now < 7e-3  # 1 + 5 retries × 1 ms
    assert p.ea.counters()["rto_retransmits"] == 5 * 3  # 3 packets, 5 retries each
    assert p.ea.pdcs() == []


@pytest.mark.parametrize("lost", ["none", "close", "close_ack"])
def test_close_waits_for_acks_then_close_consumes_a_psn(lost):
    p = uet_pair(seed=16)
    p.link.tap = []
    _, dst, data = write(p, 1, 20_000)
    p.link.run(until=1e-6)
    (ini,) = p.ea.pdcs()
    p.ea.close_pdc(ini["pdcid"])
    if lost == "close":
        p.link.drop = drop_first(lambda d, s: s == A and pds_type(d) == 11)
    elif lost == "close_ack":
        p.link.drop = drop_first(lambda d, s: s == B and is_ack(d) and
                                 bool(closepsn) and decode_packet(d).pds.cack_psn == closepsn[0])
    closepsn: list[int] = []
    orig = p.ea.datagrams_to_send

    def spy(now: float):
        out = orig(now)
        for d, _, _ in out:
            if pds_type(d) == 11 and not closepsn:
                closepsn.append(decode_packet(d).pds.psn)
        return out

    p.ea.datagrams_to_send = spy  # type: ignore[method-assign]
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    (sc,) = p.link.state_changes("a")
    assert sc.new == "CLOSED" and sc.status is None
    data_psns = [decode_packet(d).pds.psn for _, s, d, _ in p.link.tap if s == "a"
                 and is_data(d)]
    assert closepsn[0] == (max(data_psns) + 1) & 0xFFFFFFFF  # CLOSE consumed the next PSN
    # CLOSE left only after the last data ACK
    assert p.eb.pdcs() == [] and p.ea.pdcs() == []
    if lost == "close":
        assert p.ea.counters()["tx_retransmits"] == 1
    if lost == "close_ack":
        assert p.eb.counters()["rx_close_duplicate"] == 1


def test_ack_after_close_opens_nothing_and_new_posts_open_a_new_pdc():
    p = uet_pair(seed=17)
    write(p, 1, 100)
    p.link.run()
    (ini,) = p.ea.pdcs()
    p.ea.close_pdc(ini["pdcid"])
    write(p, 2, 100)  # goes to a new PDC
    p.link.run()
    ok(p.link.completions("a"), 1, 2)
    assert [x["pdcid"] for x in p.ea.pdcs()] != [ini["pdcid"]]
    assert p.ea.counters()["pdc_initiator_created"] == 2


def test_ce_marked_arrival_is_counted_by_the_initiator():
    p = uet_pair(seed=18)
    write(p, 1, 100)
    (d, _, _), = p.ea.datagrams_to_send(0.0)
    p.eb.receive_datagram(d, A, 0.0, ecn=ECN_CE)
    ((ack, _, _),) = p.eb.datagrams_to_send(0.0)
    assert decode_packet(ack).pds.m == 1


def test_target_classify_verdicts_at_the_window_edges():
    """One verdict per request PSN: what on_request and the WRITE fast path both act on;
    a ROD PDC's window is ordered (past the hole: AHEAD), a RUD PDC's is not."""
    from emu.core.reliable.window import Rx
    from emu.transports.uet.pdc import Mode, TargetPdc
    for mode in (Mode.RUD, Mode.ROD):
        t = TargetPdc(1, "h", ("h", 1), 2, (1 << 32) - 3, 128, mode=mode)
        fm = t.first_missing
        t.rcvd.add_advance(fm & 0xFFFFFFFF)  # fm received, in order
        t.rcvd.add_advance((fm + 2) & 0xFFFFFFFF)  # fm + 2 ahead: fm + 1 is missing
        fm += 1
        assert t.first_missing == fm
        assert t.win.classify(fm) is Rx.NEW
        assert t.win.classify(fm - 1) is Rx.DUPLICATE and t.win.classify(fm + 1) is Rx.DUPLICATE
        assert t.win.classify(fm + 3) is (Rx.AHEAD if mode is Mode.ROD else Rx.NEW)
        assert t.win.classify(fm - 128) is Rx.DUPLICATE and t.win.classify(fm - 129) is Rx.STALE
        assert t.win.classify(fm + 127) is not Rx.OUT_OF_WINDOW
        assert t.win.classify(fm + 128) is Rx.OUT_OF_WINDOW
        t.clear_to(fm + 2)  # never past one beyond the first missing PSN
        assert t.clear_psn != fm + 2
        t.clear_to(fm + 1)
        assert t.clear_psn == fm + 1


def test_pdc_state_table_allows_exactly_its_moves():
    """The initiator PDC's life cycle is one checked table (as RoCEv2's QP): a move it
    does not list raises and leaves the state alone; ended PDCs stay ended."""
    from emu.transports.uet.pdc import PDC_TRANSITIONS, InitiatorPdc, PdcState, PdcStateError
    assert set(PDC_TRANSITIONS) == set(PdcState)
    assert not PDC_TRANSITIONS[PdcState.CLOSED] and not PDC_TRANSITIONS[PdcState.ERROR]
    for old, allowed in PDC_TRANSITIONS.items():
        for new in PdcState:
            pdc = InitiatorPdc(1, "h", ("h", 1), None, 0, 128)
            pdc.state = old
            if new in allowed:
                assert pdc.move(new) is old and pdc.state is new
            else:
                with pytest.raises(PdcStateError, match=f"{old.value} → {new.value}"):
                    pdc.move(new)
                assert pdc.state is old


def test_a_packet_resent_once_counts_once_in_the_retransmitted_fraction():
    """emu perf's retransmitted fraction sums the engines' RETX_KEYS: one lost SYN resent
    once by the RTO is one retransmission, not two (rto_retransmits is a cause inside
    tx_retransmits)."""
    from emu.credible.overload import RETX_KEYS

    p = uet_pair(seed=4)
    p.link.drop = drop_first(lambda d, s: s == A and is_data(d))
    write(p, 1, 3000)
    p.link.run()
    c = p.ea.counters()
    assert c["rto_retransmits"] == 1
    assert sum(c.get(k, 0) for k in RETX_KEYS) == 1

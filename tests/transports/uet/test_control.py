# SPDX-License-Identifier: GPL-2.0-only
"""UET control packets (ACK_REQ, CLEAR, CLEAR_REQ, CLOSE_REQ, PROBE, CREDIT, CREDIT_REQ) and
PDC setup/teardown under loss, in RUD and ROD, ending with empty PDC tables on both sides."""

from __future__ import annotations

import pytest
from lossy_link import drop_first
from uet_pair import LOSSY, A, B, clean, ok, uet_pair
from uet_pair import write as uet_write

from emu.core.cq import WcStatus
from emu.transports.uet import pdc as D
from emu.transports.uet.pds import nack_packet
from emu.wire.codec.uet import decode_packet


def pds_type(d: bytes) -> int:
    return d[0] >> 3


def cp_type(d: bytes) -> int | None:
    return decode_packet(d).pds.ctl_type if pds_type(d) == 11 else None


def write(p, wr_id: int, size: int, mode: str = "rud"):
    _, dst, data = uet_write(p, wr_id, size, mode=mode)
    return dst, data


def established(p, mode: str = "rud"):
    """A pair with one completed WRITE: (initiator PDC id, target PDC id)."""
    dst, data = write(p, 1, 5000, mode)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:5000]) == data
    (i,) = p.ea.pdcs()
    (t,) = p.eb.pdcs()
    return i["pdcid"], t["pdcid"]


# -- ACK_REQ, CLEAR, CLEAR_REQ --------------------------------------------------------------


def test_nack_for_a_psn_sack_shows_arrived_sends_ack_req_not_data():
    p = uet_pair(seed=51)
    ipid, tpid = established(p)
    psn = p.ea.pdcs()[0]["start_psn"]
    p.ea.receive_datagram(nack_packet(0x12, psn, tpid, ipid), B, p.link.now)
    out = p.ea.datagrams_to_send(p.link.now)
    assert [cp_type(d) for d, _, _ in out] == [D.CP_ACK_REQ]  # no data resent
    assert decode_packet(out[0][0]).pds.psn == psn
    p.eb.receive_datagram(out[0][0], A, p.link.now)
    ((ack, _, _),) = p.eb.datagrams_to_send(p.link.now)
    assert pds_type(ack) == 8 and p.eb.counters()["rx_ack_req"] == 1
    assert p.ea.counters().get("tx_retransmits", 0) == 0


def test_ack_with_req_clear_gets_a_clear_that_advances_clear_psn():
    p = uet_pair(seed=52)
    ipid, tpid = established(p)
    t = p.eb.target.pdcs[tpid]
    before = t.clear_psn
    p.eb.target.ack(t, t.first_missing - 1, None, False, 0, None, req=D.ACK_REQ_CLEAR)
    p.link.run()
    assert p.ea.counters()["tx_cp"] == 1
    assert t.clear_psn == t.first_missing > before  # everything up to here seen ACKed


def test_clear_req_from_the_target_is_answered_with_clear():
    p = uet_pair(seed=53)
    ipid, tpid = established(p)
    t = p.eb.target.pdcs[tpid]
    p.eb.control._send_cp(t, D.CP_CLEAR_REQ, 0, None)
    p.link.run()
    assert p.ea.counters()["rx_clear_req"] == 1 and t.clear_psn == t.first_missing


# -- CLOSE_REQ ------------------------------------------------------------------------------


@pytest.mark.parametrize("lost", [False, True])
def test_close_req_makes_the_initiator_close_gracefully(lost):
    p = uet_pair(seed=54)
    ipid, tpid = established(p)
    if lost:
        p.link.drop = drop_first(lambda d, s: s == B and cp_type(d) == D.CP_CLOSE_REQ)
    p.eb.request_close(tpid, p.link.now)
    p.link.run()
    (sc,) = p.link.state_changes("a")
    assert sc.new == "CLOSED" and sc.status is None
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []
    assert p.ea.counters()["rx_close_req"] == 1
    assert p.eb.counters()["tx_close_req"] == (2 if lost else 1)


def test_close_req_during_a_transfer_lets_it_finish_byte_exact_first():
    p = uet_pair(seed=55, ekw={"mtu": 1024}, **LOSSY)
    dst, data = write(p, 1, 2000)
    p.link.run()
    (t,) = p.eb.pdcs()
    dst2, data2 = write(p, 2, 300_000)
    p.link.run(until=p.link.now + 20e-6)
    p.eb.request_close(t["pdcid"], p.link.now)
    p.link.run()
    ok(p.link.completions("a"), 1, 2)
    assert bytes(dst2.view[:len(data2)]) == data2
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []
    clean(p)


def test_close_req_waits_for_an_initiator_that_is_still_sending():
    """A CLOSE_REQ (the idle reaper's, or a SYN conflict's) that meets a long message:
    the initiator finishes it before its CLOSE. The target gives up only on an
    initiator it no longer hears from — before, it counted its CLOSE_REQs alone and
    dropped the PDC after five RTOs in the middle of the message (INV_DPDCID)."""
    from emu.transports.uet.control import CLOSE_REQ_RETRIES

    rto = 5e-3
    p = uet_pair(seed=57, ekw={"mtu": 4096, "rto": rto}, delay=1e-3)
    dst, data = write(p, 1, 2000)
    p.link.run()
    (t,) = p.eb.pdcs()
    dst2, data2 = write(p, 2, 16 << 20)  # a window (512 KiB) per 2 ms round trip: 64 ms
    p.link.run(until=p.link.now + 100e-6)
    p.eb.request_close(t["pdcid"], p.link.now)
    t0 = p.link.now
    p.link.run()
    assert p.link.now - t0 > (CLOSE_REQ_RETRIES + 1) * rto
    ok(p.link.completions("a"), 1, 2)
    assert bytes(dst2.view[:len(data2)]) == data2
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []
    assert p.eb.counters().get("pdc_target_abandoned", 0) == 0
    clean(p)


def test_close_req_to_an_initiator_that_forgot_the_pdc_drops_the_target_half():
    p = uet_pair(seed=56)
    ipid, tpid = established(p)
    p.ea.destroy_pdc(ipid)
    p.eb.request_close(tpid, p.link.now)
    p.link.run()
    assert p.eb.pdcs() == [] and p.eb.counters()["pdc_target_closed_by_nack"] == 1


# -- PROBE ---------------------------------------------------------------------------------


def test_probe_is_answered_by_an_ack_and_reports_the_rtt():
    p = uet_pair(seed=57)
    ipid, _ = established(p)
    seen = []
    p.ea.control.on_probe = lambda pdc, rtt, now: seen.append((pdc.pdcid, rtt))
    sent_before = p.ea.pdcs()[0]["next_psn"]
    p.ea.probe_pdc(ipid, p.link.now)
    p.link.run()
    assert seen == [(ipid, pytest.approx(2 * p.link.delay))]
    assert p.eb.counters()["rx_probe"] == 1 and p.ea.counters()["rx_probe_reply"] == 1
    assert p.ea.pdcs()[0]["next_psn"] == sent_before  # a PROBE consumes no PSN


def test_lost_probe_is_resent_and_unanswered_probes_close_in_error():
    p = uet_pair(seed=58, ekw={"rto": 1e-3, "max_retries": 2})
    ipid, _ = established(p)
    p.link.drop = drop_first(lambda d, s: s == A and cp_type(d) == D.CP_PROBE)
    p.ea.probe_pdc(ipid, p.link.now)
    p.link.run()
    assert p.ea.counters()["rx_probe_reply"] == 1 and p.ea.counters()["tx_probe"] == 2
    p.link.drop = lambda d, s, dst: s == B  # the peer went silent
    p.ea.probe_pdc(ipid, p.link.now)
    p.link.run()
    (sc,) = p.link.state_changes("a")
    assert sc.new == "ERROR" and sc.status is WcStatus.RETRY_EXC_ERR
    assert p.ea.counters()["probe_timeouts"] == 1 and p.ea.pdcs() == []


def test_probe_to_a_target_that_forgot_the_pdc_closes_it_in_error():
    p = uet_pair(seed=59)
    ipid, tpid = established(p)
    p.eb.destroy_pdc(tpid)
    p.ea.probe_pdc(ipid, p.link.now)
    p.link.run()
    (sc,) = p.link.state_changes("a")
    assert sc.new == "ERROR" and p.ea.pdcs() == []


# -- CREDIT ---------------------------------------------------------------------------------


def test_credit_req_is_answered_from_the_target_hook_and_reaches_the_initiator_hook():
    p = uet_pair(seed=60)
    ipid, tpid = established(p)
    p.eb.control.credit_source = lambda t, now: 12345 + t.pdcid
    got = []
    p.ea.control.on_credit = lambda pdc, credit, now: got.append((pdc.pdcid, credit))
    p.ea.request_credit(ipid, p.link.now)
    p.link.run()
    assert got == [(ipid, 12345 + tpid)]
    p.eb.grant_credit(tpid, 777, p.link.now)  # unsolicited
    p.link.run()
    assert got[-1] == (ipid, 777) and p.ea.counters()["rx_credit"] == 2


def test_default_credit_hook_keeps_the_last_grant_on_the_pdc():
    p = uet_pair(seed=61, ekw={"mtu": 2048, "mpr": 2})
    ipid, tpid = established(p)
    p.ea.request_credit(ipid, p.link.now)
    p.link.run()
    assert p.ea.ini[ipid].credit == 2 * 128 * 2048  # MP_RANGE × mtu by default


# -- PDC setup and teardown under loss -------------------------------------------------------


def _closepsn_of(p):
    """Spy A's output for its CLOSE's PSN (to drop exactly that CLOSE's ACK)."""
    seen: list[int] = []
    orig = p.ea.datagrams_to_send

    def spy(now: float):
        out = orig(now)
        for d, _, _ in out:
            if cp_type(d) == D.CP_CLOSE and not seen:
                seen.append(decode_packet(d).pds.psn)
        return out

    p.ea.datagrams_to_send = spy
    return seen


@pytest.mark.parametrize("mode", ["rud", "rod"])
@pytest.mark.parametrize("lost", ["syn", "first_ack", "close", "close_ack", "all"])
def test_setup_and_close_survive_losses_and_leave_no_pdc(mode, lost):
    p = uet_pair(seed=62, ekw={"mtu": 1024})
    closepsn = _closepsn_of(p)
    req = 2 if mode == "rud" else 3
    preds = {
        "syn": lambda d, s: s == A and pds_type(d) == req,
        "first_ack": lambda d, s: s == B and pds_type(d) == 8,
        "close": lambda d, s: s == A and cp_type(d) == D.CP_CLOSE,
        "close_ack": lambda d, s: s == B and pds_type(d) == 8 and bool(closepsn)
        and decode_packet(d).pds.cack_psn == closepsn[0],
    }
    drops = [drop_first(preds[k]) for k in (preds if lost == "all" else [lost])]
    p.link.drop = lambda d, s, dst: any(f(d, s, dst) for f in drops)
    dst, data = write(p, 1, 8 * 1024, mode)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    (ini,) = p.ea.pdcs()
    p.ea.close_pdc(ini["pdcid"], p.link.now)
    p.link.run()
    assert all(f.seen for f in drops)  # each loss really happened
    (sc,) = p.link.state_changes("a")
    assert sc.new == "CLOSED" and sc.status is None
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []
    assert p.ea.counters()["pdcs_initiator"] == 0 and p.eb.counters()["pdcs_target"] == 0
    clean(p)


@pytest.mark.parametrize("mode", ["rud", "rod"])
def test_close_in_error_then_the_target_reaps_its_half(mode):
    """The link dies mid-transfer: the initiator closes in error after its retries; the
    target, idle, asks for a close nobody answers and forgets the PDC."""
    p = uet_pair(seed=63, ekw={"mtu": 1024, "rto": 1e-3, "max_retries": 3})
    p.eb.control.idle_timeout = 10e-3
    n = [0]

    def cut(d, s, dst):
        n[0] += 1
        return n[0] > 6  # a few packets get through, then nothing in either direction

    p.link.drop = cut
    write(p, 1, 64 * 1024, mode)
    p.link.run()
    (wc,) = p.link.completions("a")
    assert wc.status is WcStatus.RETRY_EXC_ERR
    (sc,) = p.link.state_changes("a")
    assert sc.new == "ERROR"
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []
    c = p.eb.counters()
    assert c["pdc_target_created"] == 1 and c["pdc_target_idle"] == 1
    assert c["pdc_target_abandoned"] == 1 and c["tx_close_req"] == 4  # CLOSE_REQ + 3 retries


def test_idle_target_pdc_is_closed_through_the_live_initiator():
    p = uet_pair(seed=64)
    established(p)
    t0 = p.link.now
    p.eb.control.idle_timeout = 50e-3
    p.link.run()
    (sc,) = p.link.state_changes("a")
    assert sc.new == "CLOSED" and sc.status is None
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []
    assert p.eb.counters()["pdc_target_idle"] == 1
    assert p.link.now - t0 >= 50e-3


def test_a_syn_from_nobody_leaves_no_state_behind():
    """A request with SYN from a peer that never answers (a vanished initiator, or random
    bytes that parse as one) makes a target PDC; with the daemons' idle_timeout it is
    asked to close a bounded number of times, then dropped — no state, no endless CPs."""
    import random

    from emu.core.memory import MemoryTable
    from emu.transports.uet import UetEngine
    from emu.transports.uet.control import CLOSE_REQ_RETRIES
    from emu.wire.codec.uet import encode_packet
    from emu.wire.codec.uet_pds import PdsRequestSyn
    from emu.wire.codec.uet_ses import SesStandardRequestSom

    eng = UetEngine(MemoryTable(random.Random(1)), random.Random(2), idle_timeout=20e-3,
                    max_retries=200, rto=5e-3)
    syn = encode_packet(PdsRequestSyn(next_hdr=3, syn=1, psn=1000, spdcid=9, psn_offset=0),
                        SesStandardRequestSom(opcode=1, som=1, eom=1, request_length=8),
                        None, bytes(8))
    eng.receive_datagram(bytes(syn), ("10.9.9.9", 50000), 0.0)
    assert eng.counters()["pdcs_target"] == 1  # it NACKs (no such key), but the PDC exists
    sent = len(eng.datagrams_to_send(0.0))
    now = 0.0
    for _ in range(1000):
        t = eng.get_timer()
        if t is None:
            break
        now = max(now, t)
        eng.handle_timer(now)
        sent += len(eng.datagrams_to_send(now))
    c = eng.counters()
    assert c["pdcs_target"] == 0 and eng.get_timer() is None, c
    assert c["pdc_target_abandoned"] == 1
    # the NACK, then one CLOSE_REQ and its retries: bounded, not max_retries (200)
    assert sent <= 2 + CLOSE_REQ_RETRIES, sent
    assert now < 1.0

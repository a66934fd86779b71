# SPDX-License-Identifier: GPL-2.0-only
"""Hostile packets during a transfer, sans-IO (issue #14): a forged or stray packet is
counted and dropped; it never ends, rewinds or corrupts an established connection.

The forger sits on the initiator's host (another UDP port, same address), as an
unprivileged user there can: the target's replies to its packets go to the real
initiator, so the initiator's checks of ACKs and NACKs are tested too.
"""

from __future__ import annotations

import random

from lossy_link import register, roce_pair
from uet_pair import A, B, ok, uet_pair, write

from emu.chaos.fuzz import Fuzzer, rejected
from emu.transports.roce import QpState, SendWR, Sge
from emu.transports.roce import packets as P
from emu.transports.uet import UetEngine
from emu.transports.uet.pds import nack_packet
from emu.wire.codec.uet import PdsAckCcNscc, PdsRequestSyn, encode_packet
from emu.wire.codec.uet_ses import SesStandardRequestSom
from emu.wire.uet_defs import NACK_CODES

FORGER = (A[0], 40000)  # the initiator's address, another port


def syn(spdcid: int, psn: int, kind: str = "ses", offset: int = 0) -> bytes:
    """A RUD request with SYN: with a valid SES WRITE header, none, or garbage after PDS."""
    h = PdsRequestSyn(type=2, next_hdr=3, ar=1, psn=psn, spdcid=spdcid, psn_offset=offset)
    if kind == "ses":
        return bytes(encode_packet(h, SesStandardRequestSom(
            opcode=1, som=1, eom=1, mem_key_match_bits=0x1234, request_length=64), None,
            bytes(64)))
    h.next_hdr = 0
    return bytes(encode_packet(h)) + (b"\xa5" * 17 if kind == "garbage" else b"")


def until_established(p) -> tuple[dict, dict]:
    p.link.run(stop=lambda: any(d["dpdcid"] for d in p.ea.pdcs() if d["role"] == "initiator"))
    (ini,) = [d for d in p.ea.pdcs() if d["role"] == "initiator"]
    (tgt,) = p.eb.pdcs()
    return ini, tgt


def run_injecting(p, packets, into, src) -> int:
    """Step the link, handing ``into`` one hostile datagram from ``src`` per step."""
    n = 0
    for d in packets:
        into.receive_datagram(d, src, p.link.now)
        n += 1
        p.link.step()
    p.link.run()
    return n


def test_forged_syns_from_the_initiators_host_change_nothing():
    p = uet_pair(seed=21, ekw={"mtu": 1024})
    _, dst, data = write(p, 1, 256 * 1024)
    ini, tgt = until_established(p)
    rng = random.Random(5)
    forged = [syn(ini["pdcid"], rng.randrange(1 << 32), kind)
              for _ in range(40) for kind in ("ses", "none", "garbage")]
    n = run_injecting(p, forged, p.eb, FORGER)
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    (after,) = p.eb.pdcs()
    assert (after["pdcid"], after["start_psn"]) == (tgt["pdcid"], tgt["start_psn"])
    c = p.eb.counters()
    assert c["rx_drop_syn_conflict"] + c["rx_drop_syn_invalid"] == n == 120
    assert c["rx_drop_syn_invalid"] == 80 and c["pdc_target_created"] == 1
    assert p.ea.counters().get("pdc_errors", 0) == 0


def test_a_syn_that_does_not_validate_creates_nothing():
    p = uet_pair(seed=22)
    for kind in ("none", "garbage"):
        p.eb.receive_datagram(syn(7, 1000, kind), FORGER, 0.0)
    p.eb.receive_datagram(syn(0, 1000), FORGER, 0.0)  # SPDCID 0 is reserved
    assert p.eb.pdcs() == [] and p.eb.counters()["rx_drop_syn_invalid"] == 3
    assert p.eb.datagrams_to_send(0.0) == []  # and nothing answers it


def test_a_forged_syn_for_an_idle_pdc_costs_a_reconnect_never_data():
    """Every packet of a short WRITE carries SYN (none waits for the first ACK), yet
    the initiator learns our PDCID from the ACK and sends the next one without SYN.
    A forged SYN naming its SPDCID with another Start_PSN used to replace the target's
    PDC once it was quiet, and that next WRITE died with INV_DPDCID (REM_OP_ERR,
    vendor_err 14: the rare failure of the end-to-end fuzz test). Now the target
    keeps the PDC and asks its initiator to close it; the initiator closes it
    gracefully, after the WRITE posted meanwhile completes."""
    p = uet_pair(seed=23)
    write(p, 1, 5000)
    p.link.run()
    ok(p.link.completions("a"), 1)
    (ini,) = p.ea.pdcs()
    (tgt,) = p.eb.pdcs()
    eb = p.eb
    eb.receive_datagram(syn(ini["pdcid"], 9000), FORGER, p.link.now)  # too soon: dropped
    assert eb.pdcs() == [tgt] and eb.counters()["rx_drop_syn_conflict"] == 1
    assert eb.counters().get("pdc_target_syn_conflict_close_req", 0) == 0
    p.link.now += eb.target.conflict_quiet
    eb.receive_datagram(syn(ini["pdcid"], 9000), FORGER, p.link.now)  # quiet: ask
    assert eb.pdcs() == [tgt] and eb.counters()["pdc_target_syn_conflict_close_req"] == 1
    _, dst, data = write(p, 2, 64 * 1024, seed=2)
    p.link.run()
    ok(p.link.completions("a"), 1, 2)
    assert bytes(dst.view[:len(data)]) == data
    assert [(sc.old, sc.new, sc.status) for sc in p.link.state_changes("a")
            if sc.new in ("CLOSED", "ERROR")] == [("CLOSING", "CLOSED", None)]
    # WRITE 2 went out before the CLOSE_REQ arrived: it finished on the old PDC,
    # which then closed; nothing of either side is left
    assert eb.counters()["rx_close"] == 1 and eb.pdcs() == [] and p.ea.pdcs() == []
    assert p.ea.counters().get("pdc_errors", 0) == 0


def test_a_restarted_initiator_gets_its_pdcid_back():
    """An initiator's daemon restarts and its first PDC has the old PDCID with a new
    Start_PSN. The target still holds the old PDC: its SYNs conflict, the target asks
    (CLOSE_REQ), the new engine does not know the PDC (INV_DPDCID), the old PDC goes,
    and the next SYN — a retransmission — opens the new one: the WRITE completes."""
    p = uet_pair(seed=26, ekw={"mtu": 1024})
    write(p, 1, 256 * 1024)  # long enough that later packets go without SYN
    p.link.run()
    ok(p.link.completions("a"), 1)
    (old,) = p.eb.pdcs()
    fresh = UetEngine(p.ma, random.Random(4242), mtu=1024)
    a = fresh.create_ep(send_cq="a.scq", recv_cq="a.rcq")
    p.link.a, p.ea, p.a = fresh, fresh, a
    p.link.now += p.eb.target.conflict_quiet
    _, dst, data = write(p, 2, 64 * 1024, seed=2)
    p.link.run()
    ok(p.link.completions("a")[-1:], 2)
    assert bytes(dst.view[:len(data)]) == data
    (new,) = p.eb.pdcs()
    assert new["start_psn"] != old["start_psn"]
    c = p.eb.counters()
    assert c["pdc_target_syn_conflict_close_req"] == 1 and c["pdc_target_closed_by_nack"] == 1


def test_uet_fuzz_at_the_target_during_a_write_is_counted_not_fatal():
    p = uet_pair(seed=24, ekw={"mtu": 2048}, loss=0.01, reorder=0.02)
    _, dst, data = write(p, 1, 1024 * 1024)
    until_established(p)
    fz = Fuzzer(24, src=A[0], sport=FORGER[1], dst=B[0])
    hostile = [d for cls, port, d in fz.packets(3000) if port == 4793]
    run_injecting(p, hostile, p.eb, FORGER)
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    for e in (p.ea, p.eb):
        c = e.counters()
        assert c.get("rx_drop_internal_error", 0) == 0 and c.get("pdc_errors", 0) == 0
        # one counter per NACK code the spec names, and one "other"
        nack_keys = [k for k in c if k.startswith(("rx_nack_", "tx_nack_"))]
        assert len(nack_keys) <= 2 * (len(NACK_CODES) + 1)
    cb = p.eb.counters()
    assert cb["rx_drop_syn_invalid"] > 0 and cb["rx_drop_malformed"] > 0
    assert cb["rx_drop_unknown_dpdcid"] > 0


def test_nack_counters_are_bounded_and_an_unknown_code_is_other():
    p = uet_pair(seed=25, ekw={"mtu": 1024})
    write(p, 1, 64 * 1024)
    ini, _ = until_established(p)
    for code in range(256):
        p.ea.receive_datagram(nack_packet(code, 12345, ini["dpdcid"], ini["pdcid"]), B,
                              p.link.now)
    c = p.ea.counters()
    keys = {k for k in c if k.startswith("rx_nack_")}
    assert len(keys) <= len(NACK_CODES) + 1 and c["rx_nack_other"] == 256 - len(NACK_CODES)
    p.link.run()
    ok(p.link.completions("a"), 1)  # none of them named a PSN we sent: nothing ended


def test_initiator_refuses_replies_about_what_it_never_sent():
    p = uet_pair(seed=26, ekw={"mtu": 1024})
    _, dst, data = write(p, 1, 128 * 1024)
    ini, tgt = until_established(p)
    far = (ini["next_psn"] + 1000) & 0xFFFFFFFF
    # a cumulative ACK beyond what was sent would release packets B never got
    p.ea.receive_datagram(bytes(encode_packet(PdsAckCcNscc(
        cack_psn=far, spdcid=tgt["pdcid"], dpdcid=ini["pdcid"], mpr=1))), B, p.link.now)
    # a closing NACK for a PSN not outstanding, and one from a PDC that is not our peer's
    p.ea.receive_datagram(nack_packet(0x0E, far, 0, ini["pdcid"]), B, p.link.now)
    p.ea.receive_datagram(nack_packet(0x0E, ini["start_psn"], tgt["pdcid"] + 1, ini["pdcid"]),
                          B, p.link.now)
    c = p.ea.counters()
    assert (c["rx_drop_ack_unsent"], c["rx_drop_nack_unsent"], c["rx_drop_reply_pdcid"]) == (
        1, 1, 1)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data


def test_roce_forged_requests_for_a_live_qp_are_dropped_not_fatal():
    rp = roce_pair(seed=27, pmtu=1024)
    size = 512 * 1024
    src, dst = register(rp.ma, size), register(rp.mb, size)
    data = random.Random(27).randbytes(size)
    src.view[:] = data
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    rng = random.Random(27)
    resp = rp.eb._qps[rp.qb].responder
    n = 0
    for _ in range(3000):
        op = rng.choice((*range(0x00, 0x15), 0x16, 0x17))
        psn = rng.randrange(1 << 24)
        if psn == resp.epsn & 0xFFFFFF:
            continue  # the one PSN the spec lets a forger err the QP with (2^-24)
        buf = P.build(op, rp.qb, psn, rng.randbytes(rng.choice((0, 4, 16, 28))),
                      rng.randbytes(rng.choice((0, 64, 1024))))
        P.seal(buf, P.pseudo_header_icrc)
        rp.eb.receive_datagram(buf, (rp.link.addr_a[0], 40000), rp.link.now)
        n += 1
        rp.link.step()
    rp.link.run()
    (wc,) = rp.link.completions("a")
    assert wc.status.name == "SUCCESS" and bytes(dst.view) == data
    assert rp.eb.qp_attr(rp.qb)[0] is QpState.RTS and rp.ea.qp_attr(rp.qa)[0] is QpState.RTS
    c = rp.eb.counters()
    assert c["rx_drop_psn_far"] > n // 4 and c.get("qp_errors", 0) == 0
    # every forged packet is accounted for (the real traffic adds its duplicate ACKs)
    assert n <= rejected(c, "roce") <= n + rp.ea.counters().get("tx_retransmits", 0)
    assert c.get("rx_drop_internal_error", 0) == 0

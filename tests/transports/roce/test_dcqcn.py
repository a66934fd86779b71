# SPDX-License-Identifier: GPL-2.0-only
"""DCQCN (notification and reaction point), pacing, and malformed input never raising."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lossy_link import register, roce_pair

from emu import cc
from emu.cc.dcqcn import STAGE_ADDITIVE, STAGE_CUT, STAGE_FAST, STAGE_HYPER, STAGE_LINE, Dcqcn
from emu.core.memory import MemoryTable
from emu.core.trace import Trace, select
from emu.transports.roce import RecvWR, RoceEngine, SendWR, Sge
from emu.transports.roce import packets as P

G = 1 / 256
T = 55e-6
LINE = 10e9

# -- reaction point, unit level -------------------------------------------------------


def test_registry():
    assert "dcqcn" in cc.available()
    assert isinstance(cc.create("dcqcn", LINE), Dcqcn)
    with pytest.raises(ValueError, match="unknown congestion control"):
        cc.create("nope", LINE)
    with pytest.raises(ValueError, match="dcqcn"):
        cc.create("dcqcn", LINE, bogus=1)


def test_cnp_cuts_by_alpha_over_two_and_raises_alpha():
    d = Dcqcn(LINE, 1e-3 - T)
    assert d.rate == LINE and d.get_timer() is None  # idle at line rate: no timer
    d.on_cnp(1e-3 - 1e-6)  # less than one α period after creation: α still 1
    assert d.rate == LINE / 2  # α starts at 1: the first cut halves
    assert d.target == LINE
    assert d.alpha == pytest.approx((1 - G) * 1 + G)
    assert d.get_timer() == pytest.approx(1e-3 - 1e-6 + T)
    assert d.stage == STAGE_CUT
    # α decays once per 55 µs period without CNP; the next cut uses the decayed α
    a10 = d.alpha_at(1e-3 - 1e-6 + 10 * T + 1e-9)
    assert a10 == pytest.approx(1.0 * (1 - G) ** 10)
    r = d.rate
    d.on_cnp(1e-3 - 1e-6 + 10 * T + 1e-9)
    assert d.rate == pytest.approx(r * (1 - a10 / 2))
    assert d.alpha == pytest.approx((1 - G) * a10 + G)


def test_alpha_starts_at_the_first_cnp_however_long_the_flow_ran_before():
    """A flow has no α until its first CNP (ConnectX's initial_alpha_value is "used
    when receiving the first CNP for a flow"): a QP that ran uncongested for a second
    still halves on its first CNP, whatever the α period."""
    for period in (55e-6, 1e-6):
        d = Dcqcn(LINE, 0.0, alpha_period=period)
        assert d.alpha_at(1.0) == 1.0
        d.on_cnp(1.0)
        assert d.rate == LINE / 2


def test_cuts_are_rate_limited_but_alpha_still_updates():
    d = Dcqcn(LINE, 0.0, min_cut_interval=4e-6)
    d.on_cnp(0.0)
    d.on_cnp(1e-6)
    assert d.counts[STAGE_CUT] == 1 and d.counts["cnp"] == 2
    assert d.rate == LINE / 2
    assert d.alpha == pytest.approx((1 - G) * ((1 - G) + G) + G)


def test_back_to_back_cuts_keep_the_target_of_the_first():
    """Cuts one CNP interval apart (50 µs, under the 55 µs timer: no increase between)
    keep the rate before the first cut as the target, as ConnectX does; recovery then
    climbs back towards it rather than towards the last, lowest rate."""
    d = Dcqcn(LINE, 0.0)
    for k in range(4):
        d.on_cnp(k * 50e-6)
    assert d.counts[STAGE_CUT] == 4 and d.rate < LINE / 8
    assert d.target == LINE
    low = d.rate
    d.handle_timer(3 * 50e-6 + T)  # one increase event: fast recovery halves the gap
    assert d.rate == pytest.approx((low + LINE) / 2)
    # once an increase happened, the next cut's target is the rate it cuts from
    r = d.rate
    d.on_cnp(3 * 50e-6 + T + 1e-6)
    assert d.target == pytest.approx(r)


def test_recovery_stages_fast_additive_hyper():
    r_ai, r_hai, bc = LINE / 1000, LINE / 200, 1 << 16
    d = Dcqcn(LINE, 0.0, byte_counter=bc)
    d.on_cnp(0.0)
    target = d.target
    rates = []
    for _ in range(4):  # timer events 1..4 (< F = 5): fast recovery towards the old rate
        d.handle_timer(d.get_timer())
        assert d.stage == STAGE_FAST and d.target == target
        rates.append(d.rate)
    assert rates[0] == pytest.approx((LINE / 2 + LINE) / 2)
    assert rates[1] == pytest.approx((rates[0] + LINE) / 2)
    # cut again below line rate so AI/HAI have room to move the target
    d.on_cnp(d.get_timer() - 1e-6)
    tgt = d.target
    for _ in range(5):
        d.handle_timer(d.get_timer())
    assert d.stage == STAGE_ADDITIVE  # t = 5 = F, b = 0: additive
    assert d.target == pytest.approx(tgt + r_ai)
    d.handle_timer(d.get_timer())  # t = 6 > F but b = 0: still additive
    assert d.stage == STAGE_ADDITIVE and d.target == pytest.approx(tgt + 2 * r_ai)
    for _ in range(5):  # b: 1..5 -> additive (t > F, b <= F)
        d.on_sent(bc, 1.0)
    assert d.stage == STAGE_ADDITIVE and d.target == pytest.approx(tgt + 7 * r_ai)
    d.on_sent(bc, 1.0)  # b = 6 > F and t = 6 > F: hyper increase
    assert d.stage == STAGE_HYPER
    assert d.target == pytest.approx(tgt + 7 * r_ai + r_hai)
    assert d.counts == {"cut": 2, "fast_recovery": 8, "additive_increase": 7,
                        "hyper_increase": 1, "cnp": 2}
    # and with time it is back at line rate, with nothing scheduled
    d.handle_timer(1.0)
    assert d.rate == LINE and d.stage == STAGE_LINE and d.get_timer() is None


def test_byte_counter_does_nothing_at_line_rate():
    d = Dcqcn(LINE, 0.0, byte_counter=1000)
    for _ in range(100):
        d.on_sent(1000, 0.0)
    assert d.rate == LINE and d.get_timer() is None


# -- notification point + reaction point through the engines ----------------------------


def test_ce_marks_draw_at_most_one_cnp_per_50us_and_the_rate_drops_then_recovers():
    trace = Trace.memory()
    rp = roce_pair(seed=30, pmtu=4096, line_rate=LINE, ce=1.0, tap=[],
                   cc_params={"byte_counter": 1 << 16}, engine_kw={"trace": trace})
    size = 4 << 20
    src, dst = register(rp.ma, 3 * size), register(rp.mb, 3 * size)
    src.view[:] = random.Random(30).randbytes(3 * size)
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    # more data queued behind it, sent while the rate recovers (the byte counter needs it)
    rp.ea.post_send(rp.qa, SendWR.write(2, [Sge(src.va + size, 2 * size, src.lkey)],
                                        dst.va + size, dst.rkey))
    rp.link.run(stop=lambda: bool(rp.link.completions("a")))
    assert rp.link.completions("a")[0].ok
    assert bytes(dst.view[:size]) == bytes(src.view[:size])
    t_done = rp.link.now
    cnps = [(t, P.parse(d)) for t, side, d, _ in rp.link.tap if side == "b" and d[0] == P.CNP]
    times = [t for t, _ in cnps]
    assert len(times) >= 5
    assert all(b - a >= 50e-6 - 1e-12 for a, b in zip(times, times[1:], strict=False))
    assert all(p.dqpn == rp.qa and p.becn == 1 for _, p in cnps)
    assert rp.ea.counters()["rx_cnps"] == rp.eb.counters()["tx_cnps"] == len(times)
    st = rp.ea.cc_state(rp.qa)
    assert st["rate"] < LINE and st["cut"] >= 1
    # paced to the reduced rate: far slower than 4 MiB at 10 Gb/s (3.4 ms)
    assert t_done > 2 * size * 8 / LINE
    # no more marks: the rate climbs back (fast recovery, additive, hyper) to line rate
    rp.link.ce = 0.0
    rp.link.run()
    assert [w.wr_id for w in rp.link.completions("a")] == [1, 2]
    assert bytes(dst.view) == bytes(src.view)
    st = rp.ea.cc_state(rp.qa)
    assert st["rate"] == LINE and st["stage"] == STAGE_LINE
    assert st["fast_recovery"] > 0 and st["additive_increase"] > 0 and st["hyper_increase"] > 0
    last_cnp = max(t for t, side, d, _ in rp.link.tap if side == "b" and d[0] == P.CNP)
    rates = [e["data"]["rate"] for e in select(trace.events, "rate_updated")
             if e["time"] > last_cnp + rp.link.delay]
    assert rates == sorted(rates) and rates[-1] == LINE
    assert rp.ea.get_timer() is None and rp.eb.get_timer() is None


def test_cnp_only_for_ce_and_not_for_ect_alone():
    rp = roce_pair(seed=31, ce=0.0, tap=[])
    src, dst = register(rp.ma, 100_000), register(rp.mb, 100_000)
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, 100_000, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    assert rp.eb.counters().get("tx_cnps", 0) == 0
    assert rp.ea.cc_state(rp.qa)["rate"] == 10e9
    data = [m for _, side, _, m in rp.link.tap if side == "a"]
    assert data and all(e == 2 for e in data)  # data is ECT(0), so a switch may mark it
    acks = [m for _, side, _, m in rp.link.tap if side == "b"]
    assert all(e == 0 for e in acks)


def test_pacing_without_cc_follows_line_rate():
    rate, size = 1e9, 200_000
    rp = roce_pair(seed=32, pmtu=1024, line_rate=rate, cc=None, tap=[],
                   engine_kw={"burst_bytes": 4096})
    src, dst = register(rp.ma, size), register(rp.mb, size)
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    sent = [(t, len(d)) for t, side, d, _ in rp.link.tap if side == "a"]
    span = sent[-1][0] - sent[0][0]
    total = sum(n for _, n in sent)
    assert span == pytest.approx((total - 4096 - sent[-1][1]) * 8 / rate, rel=0.05)
    assert rp.ea.cc_state(rp.qa) is None


# -- malformed input: counted, never raised ----------------------------------------------


def _engine(icrc=None) -> tuple[RoceEngine, int]:
    e = RoceEngine(MemoryTable(random.Random(1)), random.Random(2), icrc=icrc)
    q = e.create_qp()
    e.connect(q, {"qpn": 0x99, "psn": 0, "address": "10.0.0.2"})
    return e, q


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_are_counted_drops(data):
    e, _ = _engine()
    e.receive_datagram(data, ("10.0.0.2", 4791), 0.0)
    e.receive_datagram(memoryview(data), ("10.0.0.2", 4791), 0.0, ecn=3)
    c = e.counters()
    assert c["rx_packets"] == 2
    assert c.get("rx_drop_internal_error", 0) == 0
    e.datagrams_to_send(0.0)
    e.handle_timer(1.0)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), flips=st.integers(1, 8), cut=st.integers(0, 40))
def test_mutated_valid_packets_never_raise(seed, flips, cut):
    rng = random.Random(seed)
    rp = roce_pair(seed=seed % 100, pmtu=256, tap=[])
    src, dst = register(rp.ma, 2000), register(rp.mb, 2000)
    rp.eb.post_recv(rp.qb, RecvWR(1, [Sge(dst.va, 2000, dst.lkey)]))
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, 700, src.lkey)], dst.va, dst.rkey))
    rp.ea.post_send(rp.qa, SendWR.read(2, [Sge(src.va, 700, src.lkey)], dst.va, dst.rkey))
    rp.ea.post_send(rp.qa, SendWR.fetch_add(3, Sge(src.va + 8, 8, src.lkey), dst.va,
                                            dst.rkey, 1))
    rp.link.run()
    pkts = [(side, bytearray(d)) for _, side, d, _ in rp.link.tap]
    for eng, want in ((rp.ea, "b"), (rp.eb, "a")):
        eng.icrc = None  # let corrupted packets past the ICRC to reach the state machines
        for side, d in pkts:
            if side != want:
                continue
            for _ in range(flips):
                d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
            if cut:
                d = d[:max(0, len(d) - rng.randrange(cut))]
            eng.receive_datagram(bytes(d), rp.link.addr_b if want == "b" else rp.link.addr_a,
                                 rp.link.now, ecn=rng.randrange(4))
            eng.datagrams_to_send(rp.link.now)
        eng.handle_timer(rp.link.now + 1)
        assert eng.counters().get("rx_drop_internal_error", 0) == 0


def test_bad_icrc_unknown_qp_and_wrong_source_are_counted():
    e, q = _engine(icrc=P.pseudo_header_icrc)
    good = P.build(P.SEND_ONLY, q, 0, b"", b"hi")
    P.seal(good, P.pseudo_header_icrc)
    bad = bytearray(good)
    bad[-5] ^= 1
    e.receive_datagram(bytes(bad), ("10.0.0.2", 4791), 0.0)
    other = P.build(P.SEND_ONLY, q + 1, 0)
    P.seal(other, P.pseudo_header_icrc)
    e.receive_datagram(bytes(other), ("10.0.0.2", 4791), 0.0)
    e.receive_datagram(bytes(good), ("10.6.6.6", 4791), 0.0)
    e.receive_datagram(b"\x00" * 5, ("10.0.0.2", 4791), 0.0)
    e.receive_datagram(bytes([0x64]) + bytes(40), ("10.0.0.2", 4791), 0.0)  # UD: not RC
    c = e.counters()
    assert (c["rx_drop_bad_icrc"], c["rx_drop_unknown_qp"], c["rx_drop_wrong_source"],
            c["rx_drop_malformed"]) == (1, 1, 1, 2)

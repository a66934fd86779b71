# SPDX-License-Identifier: GPL-2.0-only
"""NSCC (emu.cc.nscc): each per-ACK case from hand-made ACKs, MD once per RTT, bounds,
quick adapt, trimming, and convergence of competing flows on a simulated bottleneck."""

from __future__ import annotations

import pytest
from nscc_sim import Bottleneck, Flow, jain, throughput

from emu import cc
from emu.cc.nscc import (
    CASE_FAIR,
    CASE_FAST,
    CASE_HOLD,
    CASE_IGNORED,
    CASE_MD,
    CASE_PROPORTIONAL,
    CASE_QUICK_ADAPT,
    Nscc,
)

LINE = 100e9  # the reference link: a = b = 1
RTT = 12e-6
MTU = 4096
US = 1e-6


def fresh(cwnd: int = 100_000, **kw) -> Nscc:
    return Nscc(LINE, 0.0, base_rtt=RTT, mtu=MTU, init_cwnd=cwnd, **kw)


def test_registry_and_bad_parameters():
    assert {"dcqcn", "nscc", "rccc"} <= set(cc.available())
    assert isinstance(cc.create("nscc", LINE), Nscc)
    with pytest.raises(ValueError, match="nscc"):
        cc.create("nscc", LINE, bogus=1)
    for bad in ({"base_rtt": 0}, {"mtu": 0}, {"gamma": 1.0}, {"delay_alpha": 0}):
        with pytest.raises(ValueError):
            Nscc(LINE, **bad)


def test_constants_at_the_reference_and_scaled():
    n = Nscc(LINE, base_rtt=RTT, mtu=MTU)
    assert n.bdp == pytest.approx(150_000)
    assert (n.min_cwnd, n.max_cwnd, n.cwnd) == (MTU, pytest.approx(225_000), 225_000)
    assert n.target == RTT and n.gamma == 0.8
    assert n.fi == pytest.approx(5 * MTU) and n.eta == pytest.approx(0.15 * MTU)
    assert n.alpha * n.target == pytest.approx(4 * MTU)
    assert n.qa_threshold == pytest.approx(4 * RTT)
    # a 10 Gb/s emulated link: a tenth of the BDP, the increases scale with it
    s = Nscc(10e9, base_rtt=RTT, mtu=MTU)
    assert s.max_cwnd == pytest.approx(22_500) and s.fi == pytest.approx(0.5 * MTU)
    # trimming: target 0.75 RTT
    assert Nscc(LINE, base_rtt=RTT, trimming=True).target == pytest.approx(0.75 * RTT)
    # pacing rate follows the window over the base RTT, capped at line rate
    assert n.rate == LINE
    assert fresh(60_000).rate == pytest.approx(60_000 * 8 / RTT)


def _acks(n: Nscc, count: int, t0: float, dt: float = 0.1 * US, **kw) -> float:
    t = t0
    for _ in range(count):
        n.on_ack(MTU, t, **kw)
        t += dt
    return t


def test_proportional_increase_grows_with_the_headroom():
    grown = {}
    for qd in (2 * US, 6 * US, 10 * US):
        n = fresh()
        _acks(n, 9, 1 * US, qdelay=qd)  # 9 × 4096 > adjust_bytes = 8 MTU: one adjustment
        assert n.last_case == CASE_PROPORTIONAL
        assert n.counts[CASE_PROPORTIONAL] == 9
        expect = 100_000 + 9 * n.alpha * MTU * (RTT - qd) / 100_000
        assert n.cwnd == int(expect)
        grown[qd] = n.cwnd - 100_000
    assert grown[2 * US] > grown[6 * US] > grown[10 * US] > 0


def test_rtt_sample_gives_the_same_delay_as_qdelay():
    a, b = fresh(), fresh()
    _acks(a, 9, 1 * US, qdelay=6 * US)
    _acks(b, 9, 1 * US, rtt=RTT + 6 * US)
    assert a.cwnd == b.cwnd and b.last_delay == pytest.approx(6 * US)


def test_fast_increase_after_a_window_with_an_empty_queue():
    n = fresh(cwnd=20_000)
    _acks(n, 5, 1 * US, qdelay=0.0)  # 20 480 bytes > cwnd: from the 5th ACK on, fast
    assert n.counts[CASE_PROPORTIONAL] == 4 and n.counts[CASE_FAST] == 1
    before = n.cwnd
    n.on_ack(MTU, 2 * US, qdelay=0.0)
    assert n.last_case == CASE_FAST and n.cwnd == int(before + 0.25 * MTU)
    n.on_ack(MTU, 2.1 * US, qdelay=5 * US)  # the queue is back: fast increase ends
    assert n.last_case == CASE_PROPORTIONAL


def test_fair_increase_when_delay_is_high_but_unmarked():
    n = fresh()
    _acks(n, 9, 1 * US, qdelay=20 * US)
    assert n.last_case == CASE_FAIR and n.counts[CASE_FAIR] == 9
    assert n.cwnd == int(100_000 + n.fi * 9 * MTU / 100_000)


def test_multiplicative_decrease_at_most_once_per_rtt():
    n = fresh(delay_alpha=1.0)  # average = the last sample, for exact numbers
    n.on_ack(MTU, 5 * US, ecn_echo=True, qdelay=24 * US)
    assert n.last_case == CASE_MD
    assert n._cwnd == pytest.approx(100_000 * (1 - 0.8 * (24 - 12) / 24))  # × 0.6
    c = n._cwnd
    n.on_ack(MTU, 10 * US, ecn_echo=True, qdelay=24 * US)  # same RTT: no second cut
    n.on_ack(MTU, 16.9 * US, ecn_echo=True, qdelay=24 * US)
    # no second cut; only the per-RTT eta (0.15 MTU, due after 12 µs) was added
    assert n._cwnd == pytest.approx(c + n.eta) and n.counts[CASE_MD] == 1
    n.on_ack(MTU, 17 * US, ecn_echo=True, qdelay=40 * US)  # one RTT on: cut again,
    assert n.counts[CASE_MD] == 2
    assert n._cwnd == pytest.approx((c + n.eta) * 0.5)  # 1 − 0.8·28/40 = 0.44 → floor 0.5


def test_md_needs_the_average_above_target():
    n = fresh()  # default EWMA gain 0.0125: one high sample barely moves the average
    n.on_ack(MTU, 5 * US, ecn_echo=True, qdelay=24 * US)
    assert n.counts[CASE_MD] == 0 and n.cwnd == 100_000
    t = 6 * US
    for _ in range(300):  # a persistent standing queue: the average climbs, MD happens
        n.on_ack(MTU, t, ecn_echo=True, qdelay=24 * US)
        t += 1 * US
    assert n.avg_delay > n.target
    assert 1 <= n.counts[CASE_MD] <= 300 * US / RTT + 1


def test_ecn_below_target_holds_and_asks_for_another_path():
    n = fresh()
    n.on_ack(MTU, 1 * US, ecn_echo=True, qdelay=3 * US)
    assert n.last_case == CASE_HOLD and n.change_path and n.cwnd == 100_000
    n.on_ack(MTU, 1.1 * US, qdelay=3 * US)
    assert not n.change_path


def test_bounds_min_mtu_and_max_one_and_a_half_bdp():
    n = fresh(delay_alpha=1.0)
    t = 20 * US
    for _ in range(50):
        n.on_ack(MTU, t, ecn_echo=True, qdelay=40 * US)
        t += RTT
        assert n.cwnd >= MTU
    # cut to the floor, then each RTT's eta creeps back up a little
    assert MTU <= n.cwnd <= MTU + n.eta and n.counts[CASE_MD] >= 5
    m = fresh(cwnd=200_000)
    _acks(m, 2000, 1 * US, dt=1 * US, qdelay=0.0)
    assert m.counts[CASE_FAST] > 0 and m.cwnd == int(1.5 * 150_000)
    assert Nscc(LINE, base_rtt=RTT, init_cwnd=10**9).cwnd == 225_000
    assert Nscc(LINE, base_rtt=RTT, init_cwnd=1).cwnd == MTU


def test_quick_adapt_on_loss_sets_cwnd_to_what_was_delivered():
    n = fresh(cwnd=225_000)
    period = RTT + n.target
    n.on_ack(MTU, 1 * US, qdelay=2 * US)
    n.on_ack(MTU, 2 * US, qdelay=2 * US)
    n.on_loss(3 * US)  # inside the period: shed one MTU now, quick adapt at its end
    assert n.cwnd == 225_000 - MTU and n.counts[CASE_QUICK_ADAPT] == 0
    n.on_ack(MTU, period + 1 * US, qdelay=2 * US)  # the period is over
    assert n.last_case == CASE_QUICK_ADAPT and n.cwnd == 3 * MTU
    # ECN echoes of the old window in flight are ignored, not cut on again
    n.on_ack(MTU, period + 2 * US, ecn_echo=True, qdelay=30 * US)
    assert n.last_case == CASE_IGNORED and n.cwnd == 3 * MTU


def test_quick_adapt_on_a_huge_delay_and_gated_by_delivery():
    n = fresh(cwnd=225_000)
    n.on_ack(MTU, 1 * US, qdelay=5 * n.target)  # > 4 × target: trigger
    n.on_ack(MTU, 30 * US, qdelay=2 * US)
    assert n.last_case == CASE_QUICK_ADAPT and n.cwnd == 2 * MTU
    # a flow that delivered more than max_cwnd/8 in the period is not quick-adapted
    g = fresh(cwnd=225_000)
    _acks(g, 8, 1 * US, qdelay=20 * US)  # 32 KiB > 225 000 / 8
    g.on_loss(5 * US)
    g.on_ack(MTU, 30 * US, qdelay=20 * US)
    assert g.counts[CASE_QUICK_ADAPT] == 0


def test_trim_sheds_the_trimmed_bytes_and_feeds_the_delay_average():
    n = fresh(cwnd=100_000)
    n.on_trim(MTU, 1 * US)
    assert n.cwnd == 100_000 - MTU and n.counts["trim"] == 1
    assert n.avg_delay == pytest.approx(0.0125 * n.target)
    # a trim also triggers quick adapt at the end of the period
    n.on_ack(MTU, 30 * US, qdelay=1 * US)
    assert n.last_case == CASE_QUICK_ADAPT


def test_learns_base_rtt_from_the_smallest_sample():
    n = Nscc(10e9, base_rtt=RTT, learn_base_rtt=True)
    n.on_ack(MTU, 1e-3, rtt=80 * US)  # the emulated path is slower than the reference
    assert n.base_rtt == 80 * US and n.bdp == pytest.approx(100_000)
    n.on_ack(MTU, 2e-3, rtt=100 * US)
    assert n.base_rtt == 80 * US and n.last_delay == pytest.approx(20 * US)
    n.on_ack(MTU, 3e-3, rtt=60 * US)
    assert n.base_rtt == 60 * US and n.max_cwnd == pytest.approx(1.5 * 75_000)


def test_bad_samples_never_raise():
    n = fresh()
    n.on_ack(-5, 1 * US, rtt=-1.0)
    n.on_ack(MTU, 2 * US, rtt=0.0, ecn_echo=True)
    n.on_ack(MTU, 3 * US, qdelay=-3.0)
    n.on_trim(-1, 4 * US)
    assert MTU <= n.cwnd <= n.max_cwnd and n.state()["acks"] == 3


# -- dynamics on a simulated bottleneck --------------------------------------------------


@pytest.mark.parametrize("nflows", [2, 3, 4])
def test_competing_flows_converge_to_a_fair_share_with_a_bounded_queue(nflows):
    svc = MTU * 8 / LINE
    # the first flow starts with the whole window, the others with one packet, later
    flows = [Flow(Nscc(LINE, 0.0, base_rtt=RTT + svc, mtu=MTU,
                       init_cwnd=None if i == 0 else MTU), start=i * 200 * US)
             for i in range(nflows)]
    b = Bottleneck(flows, rate=LINE, prop=RTT, mtu=MTU, ecn_k=30_000)
    end = 10e-3
    b.run(end)
    early = [throughput(f, 0.6e-3, 2e-3) for f in flows]
    late = [throughput(f, 8e-3, end) for f in flows]
    assert jain(early) < 0.9  # it really started unfair …
    assert jain(late) > 0.9, late  # … and converged
    assert sum(late) > 0.95 * LINE  # without giving up the link
    bdp = LINE / 8 * RTT
    assert max(q for t, q in b.qtrace if t >= end / 2) <= 1.5 * bdp  # bounded queue
    assert all(f.max_in_flight <= f.cc.max_cwnd + MTU for f in flows)
    assert sum(f.cc.counts[CASE_MD] for f in flows) > 0

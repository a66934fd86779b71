# SPDX-License-Identifier: GPL-2.0-only
"""The figures of a run: fairness, percentiles, stalls, and never a figure made from a
run whose flows did not all complete."""

from __future__ import annotations

import pytest

from emu.apps.workload import metrics
from emu.apps.workload.model import Flow
from emu.apps.workload.runner import FlowResult, WorkloadResult


def flow(src: str, start: float, times: list[float], size: int = 3000,
         verified: bool = True) -> FlowResult:
    r = FlowResult(Flow(src, "h9", size), "uet", start=start)
    per = size // len(times)
    r.completions = [(t, per) for t in times]
    r.sent = per * len(times)
    r.end = times[-1] if r.sent == size else None
    r.verified = verified
    return r


def test_jain_is_one_for_equal_shares_and_one_over_n_for_one_winner():
    assert metrics.jain([5, 5, 5, 5]) == pytest.approx(1.0)
    assert metrics.jain([1, 0, 0, 0]) == pytest.approx(0.25)
    assert metrics.jain([]) is None


def test_percentile_interpolates_between_order_statistics():
    xs = [1, 2, 3, 4]
    assert metrics.percentile(xs, 50) == pytest.approx(2.5)
    assert metrics.percentile(xs, 100) == 4
    assert metrics.percentile(xs, 0) == 1


def test_longest_stall_counts_from_the_start_to_each_completion():
    r = flow("h1", 0.0, [1e-6, 2e-6, 9e-6])
    assert metrics.longest_stall(r) == pytest.approx(7e-6)


def test_summary_of_a_complete_run():
    res = WorkloadResult("uet", 1.0, [flow("h1", 0.0, [1e-6, 2e-6, 3e-6]),
                                      flow("h2", 0.0, [2e-6, 4e-6, 6e-6])])
    s = metrics.summary(res)
    assert s["jct_us"] == pytest.approx(6.0)
    assert s["fct_max_us"] == pytest.approx(6.0)
    assert s["goodput_gbps"] == pytest.approx(6000 * 8 / 6e-6 / 1e9)
    assert s["jain"] == pytest.approx(0.9)  # 8 and 4 Gb/s
    assert s["verified"] == 2


def test_a_run_with_an_unfinished_flow_has_no_completion_figures():
    res = WorkloadResult("roce", 1.0, [flow("h1", 0.0, [1e-6, 2e-6, 3e-6]),
                                       flow("h2", 0.0, [1e-6], size=3000)])
    res.flows[1].sent = 1000
    res.flows[1].end = None
    s = metrics.summary(res)
    assert s["jct_us"] is None and s["fct_p99_us"] is None and s["goodput_gbps"] is None
    assert s["jain"] is None


def test_an_unverified_flow_makes_the_run_incomplete():
    res = WorkloadResult("roce", 1.0, [flow("h1", 0.0, [1e-6, 3e-6], verified=False)])
    assert not res.complete and res.jct is None


def test_bytes_at_joins_completions_by_straight_lines_from_the_start():
    r = flow("h1", 1e-6, [2e-6, 3e-6, 5e-6])  # 1000 bytes each
    assert metrics.bytes_at(r, 0.5e-6) == 0
    assert metrics.bytes_at(r, 1.5e-6) == pytest.approx(500)
    assert metrics.bytes_at(r, 3e-6) == pytest.approx(2000)
    assert metrics.bytes_at(r, 4e-6) == pytest.approx(2500)
    assert metrics.bytes_at(r, 9e-6) == pytest.approx(3000)


def test_steady_figures_leave_out_the_ramp_and_the_tail():
    """Two flows share a port at 8 Gb/s each (1 KB per µs) while both run; then the
    first finishes and the second, alone, crawls at 2 Gb/s while it recovers: the
    whole-run aggregate counts the crawl, the steady one does not."""
    us_ = 1e-6
    a = flow("h1", 0.0, [(k + 1) * us_ for k in range(8)], size=8000)
    b = flow("h2", 0.0, [(k + 1) * us_ for k in range(8)] + [12 * us_, 16 * us_],
             size=10000)
    s = metrics.summary(WorkloadResult("roce", 1.0, [a, b]))
    assert s["steady_goodput_gbps"] == pytest.approx(16.0)  # over [2, 8] µs
    assert s["steady_jain"] == pytest.approx(1.0)
    assert s["goodput_gbps"] == pytest.approx(18000 * 8 / 16e-6 / 1e9)  # 9 Gb/s
    assert s["jain"] < 0.95  # 8 against 5 Gb/s over each flow's life


def test_steady_figures_need_two_overlapping_complete_flows_of_a_few_messages():
    four = [1e-6, 2e-6, 3e-6, 4e-6]
    one = WorkloadResult("uet", 1.0, [flow("h1", 0.0, four)])
    assert metrics.steady(one)["steady_goodput_gbps"] is None
    apart = WorkloadResult("uet", 1.0, [flow("h1", 0.0, four),
                                        flow("h2", 5e-6, [t + 5e-6 for t in four])])
    assert metrics.steady(apart) == {"steady_goodput_gbps": None, "steady_jain": None}
    unverified = WorkloadResult("uet", 1.0, [flow("h1", 0.0, four),
                                             flow("h2", 0.0, four, verified=False)])
    assert metrics.steady(unverified)["steady_jain"] is None
    both = WorkloadResult("uet", 1.0, [flow("h1", 0.0, four), flow("h2", 0.0, four)])
    assert metrics.steady(both)["steady_jain"] == pytest.approx(1.0)
    single = WorkloadResult("uet", 1.0, [flow("h1", 0.0, [4e-6]), flow("h2", 0.0, [3e-6])])
    assert metrics.steady(single)["steady_goodput_gbps"] is None  # one message a flow

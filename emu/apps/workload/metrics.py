# SPDX-License-Identifier: GPL-2.0-only
"""The figures engineers compare workloads by, from a run's flows (pure functions).

Completion times are fabric seconds as the runner measured them (the applications' own
completions); goodputs are payload bits per fabric second. A figure over flows that did
not all complete is None, never a number made from the ones that did: a flow that
stalled must not make a transport look fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from emu.apps.workload.runner import FlowResult, WorkloadResult


def jain(xs: Sequence[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 when all are equal, 1/n when one has all."""
    if not xs:
        return None
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if sq > 0 else None


def percentile(xs: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0–100) by linear interpolation between order statistics."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def longest_stall(r: FlowResult) -> float | None:
    """The longest fabric time a flow went without a WRITE completing (from its start):
    how long a failure held it up."""
    if r.start is None or not r.completions:
        return None
    times = [r.start] + [t for t, _ in r.completions]
    return max(b - a for a, b in zip(times, times[1:], strict=False))


def series(r: FlowResult, bin_s: float) -> list[tuple[float, float]]:
    """Goodput of one flow over time: (bin start, bits per fabric second) per ``bin_s``."""
    if r.start is None or not r.completions or bin_s <= 0:
        return []
    end = r.completions[-1][0]
    n = max(1, math.ceil((end - r.start) / bin_s))
    bins = [0.0] * n
    for t, b in r.completions:
        bins[min(n - 1, int((t - r.start) / bin_s))] += b * 8
    return [(r.start + i * bin_s, v / bin_s) for i, v in enumerate(bins)]


#: the share of the time every flow is active that a steady-state figure leaves out as
#: convergence: DCQCN's fast recovery alone is 5 timer periods (275 µs) after a cut
#: (emu.cc.dcqcn), a tenth of the incast scenario's 2 -> 1 of 64 MiB flows at 400 Gb/s
SETTLE_SHARE = 0.25
#: … and the fewest WRITE completions each flow needs for one: a flow's bytes between
#: completions are drawn as a straight line, which says nothing of a flow of one message
#: (trimming's 8 -> 1 of single 1 MiB messages gave 406 Gb/s "after convergence" through
#: a 400 Gb/s port)
STEADY_MIN_MESSAGES = 4


def bytes_at(r: FlowResult, t: float) -> float:
    """Bytes a flow had completed by fabric time ``t``: its completions joined by
    straight lines from (start, 0) — a WRITE's bytes arrive over its time, not at once."""
    if r.start is None or t <= r.start:
        return 0.0
    prev_t, total = r.start, 0.0
    for ct, b in r.completions:
        if ct >= t:
            span = ct - prev_t
            return total + (b * (t - prev_t) / span if span > 0 else b)
        total += b
        prev_t = ct
    return total


def steady(res: WorkloadResult, settle: float = SETTLE_SHARE) -> dict[str, float | None]:
    """Aggregate goodput (Gb/s) and Jain's index of the flows' rates **after
    convergence**: over the time every flow was active (from the last start to the
    first finish), without its first ``settle`` share. What DCQCN's and NSCC's papers
    plot for N -> 1 incast; the whole-run figures (``goodput_gbps``, ``jain``) also
    count the ramp and the tail in which the last flow is alone, still recovering
    from its cuts — and whole-run fairness flatters, since the flows a winner starved
    speed up once it is done (NSCC's 4 -> 1 of 16 MiB: 0.94-0.96 over the run, 0.86-0.89
    while all four ran). None when fewer than two flows completed or they never overlapped."""
    none: dict[str, float | None] = {"steady_goodput_gbps": None, "steady_jain": None}
    flows = [r for r in res.flows if r.done and r.start is not None and r.end is not None]
    if len(flows) < 2 or not res.complete or any(
            len(r.completions) < STEADY_MIN_MESSAGES for r in flows):
        return none
    t0 = max(r.start for r in flows)  # type: ignore[type-var]
    t1 = min(r.end for r in flows)  # type: ignore[type-var]
    a = t0 + settle * (t1 - t0)
    if t1 <= a:
        return none
    rates = [(bytes_at(r, t1) - bytes_at(r, a)) * 8 / (t1 - a) for r in flows]
    return {"steady_goodput_gbps": sum(rates) / 1e9, "steady_jain": jain(rates)}


def summary(res: WorkloadResult) -> dict[str, Any]:
    """The per-run figures a scenario's checks and plots name (µs and Gb/s)."""
    done = [r for r in res.flows if r.done]
    complete = res.complete
    fcts = [r.fct for r in done if r.fct is not None]
    goodputs = [r.goodput for r in done if r.goodput is not None]
    stalls = [s for s in (longest_stall(r) for r in res.flows) if s is not None]
    jct = res.jct
    return {
        "flows": len(res.flows),
        "verified": sum(1 for r in res.flows if r.verified),
        "jct_us": us(jct),
        "fct_p50_us": us(percentile(fcts, 50)) if complete else None,
        "fct_p99_us": us(percentile(fcts, 99)) if complete else None,
        "fct_max_us": us(max(fcts)) if complete and fcts else None,
        "fct_mean_us": us(sum(fcts) / len(fcts)) if complete and fcts else None,
        "goodput_gbps": (res_bytes(res) * 8 / jct / 1e9) if jct else None,
        "flow_goodput_min_gbps": min(goodputs) / 1e9 if complete and goodputs else None,
        "flow_goodput_max_gbps": max(goodputs) / 1e9 if complete and goodputs else None,
        "jain": jain(goodputs) if complete else None,
        "stall_us": us(max(stalls)) if stalls else None,
        **steady(res),
    }


def us(x: float | None) -> float | None:
    """Seconds as microseconds (None stays None)."""
    return None if x is None else x * 1e6


def res_bytes(res: WorkloadResult) -> int:
    return sum(r.flow.size for r in res.flows)

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
    }


def us(x: float | None) -> float | None:
    """Seconds as microseconds (None stays None)."""
    return None if x is None else x * 1e6


def res_bytes(res: WorkloadResult) -> int:
    return sum(r.flow.size for r in res.flows)

# SPDX-License-Identifier: GPL-2.0-only
"""Result math, as perftest computes it (``print_report_bw``, ``print_report_lat``).

Bandwidth: ``size × messages / (last completion − first post)``; MB is 2^20
bytes (perftest's ``0x100000``), Gb is 10^9 bits. The peak is the best
per-message time over every window "post of message i … completion of
message j", ``(tc[j] − tp[i]) / (j − i + 1)``. Latency: the samples are
one-way times (round trip / 2) for WRITE and SEND ping-pong and the full
round trip for READ; the two largest samples are dropped (perftest's
``LAT_MEASURE_TAIL``), t_typical is the median, percentiles index the sorted
samples at ``ceil(m × p)``. One deviation: perftest accumulates the variance
in integers; we do not.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

MB = 0x100000  # perftest's MB/sec
GBIT = 125_000_000  # bytes per second in 1 Gb/s
LAT_MEASURE_TAIL = 2
PEAK_WORK_LIMIT = 4_000_000  # windows examined for the exact peak; beyond, the timeline's


def bw_unit(gbits: bool) -> tuple[str, int]:
    """(label, bytes per unit per second) of the report's bandwidth columns."""
    return ("Gb/sec", GBIT) if gbits else ("MB/sec", MB)


def bandwidth(nbytes: float, seconds: float, gbits: bool) -> float:
    """``nbytes`` in ``seconds`` in the report's unit (0 for an empty interval)."""
    return nbytes / seconds / bw_unit(gbits)[1] if seconds > 0 else 0.0


def gbps(nbytes: float, seconds: float) -> float:
    return bandwidth(nbytes, seconds, True)


def msg_rate(messages: int, seconds: float) -> float:
    """Millions of messages per second."""
    return messages / seconds / 1e6 if seconds > 0 else 0.0


def peak_message_time(tposted: Sequence[float], tcompleted: Sequence[float]) -> float | None:
    """perftest's ``opt_delta``: min over i ≤ j of ``(tc[j] − tp[i]) / (j − i + 1)``.

    ``tposted`` holds each message's post time in post order, ``tcompleted``
    each message's completion time in completion order (unsignaled messages
    take the time of the signaled completion that covered them). Only the
    first post of a batch (equal times) and the last message of a completion
    group matter, which keeps this quadratic in batches, not messages.
    None when there is nothing to measure or the work would be excessive.
    """
    n = min(len(tposted), len(tcompleted))
    if n == 0:
        return None
    starts = [i for i in range(n) if i == 0 or tposted[i] != tposted[i - 1]]
    ends = [j for j in range(n) if j == n - 1 or tcompleted[j] != tcompleted[j + 1]]
    if len(starts) * len(ends) > PEAK_WORK_LIMIT:
        return None
    best = math.inf
    for i in starts:
        ti = tposted[i]
        for j in ends[bisect.bisect_left(ends, i):]:
            dt = (tcompleted[j] - ti) / (j - i + 1)
            if 0 < dt < best:
                best = dt
    return best if best < math.inf else None


class Timeline:
    """Bytes completed over time, from the first post: the completions as they came, so a
    series can be cut at any interval afterwards (a fabric-time run lasts milliseconds,
    a real-time one minutes); the peak uses ``resolution`` seconds."""

    def __init__(self, start: float, resolution: float = 0.1) -> None:
        self.start, self.resolution = start, resolution
        self.events: list[tuple[float, int]] = []

    def add(self, t: float, nbytes: int) -> None:
        self.events.append((max(0.0, t - self.start), nbytes))

    def _buckets(self, width: float) -> list[int]:
        out: list[int] = []
        for t, n in self.events:
            k = int(t / width)
            if k >= len(out):
                out.extend([0] * (k + 1 - len(out)))
            out[k] += n
        return out

    def series(self, interval: float, end: float | None = None) -> list[tuple[float, float]]:
        """(seconds since start at the interval's end, Gb/s) per ``interval``.

        The last, partial interval is scaled by its real length (``end``)."""
        out = []
        for k, nbytes in enumerate(self._buckets(interval)):
            t0, t1 = k * interval, (k + 1) * interval
            if end is not None:
                t1 = min(t1, end - self.start)
            if t1 <= t0:
                continue
            out.append((round(t1, 9), gbps(nbytes, t1 - t0)))
        return out

    def peak_gbps(self) -> float:
        """Best full bucket (the last one may be partial and is left out when others exist)."""
        b = self._buckets(self.resolution)
        full = b[:-1] or b
        return max((gbps(n, self.resolution) for n in full), default=0.0)


def series_interval(elapsed: float, points: int = 50) -> float:
    """The 1-2-5 step that cuts ``elapsed`` seconds into at most ~``points`` intervals
    (1 s for a minute-long real-time run, 50 µs for a 2-ms fabric-time one)."""
    if elapsed <= 0:
        return 0.1
    raw = elapsed / points
    mag = 10.0 ** math.floor(math.log10(raw))
    for step in (1, 2, 5, 10):
        if step * mag >= raw:
            return step * mag
    return 10 * mag


@dataclass
class BwResult:
    """One row of a BW report (bandwidths in the report's unit, plus Gb/s for checks)."""

    size: int
    iterations: int  # messages (all QPs)
    seconds: float
    bw_peak: float
    bw_average: float
    msg_rate: float  # Mpps
    unit: str
    bytes_total: int
    gbps_average: float
    gbps_peak: float
    series: list[tuple[float, float]] = field(default_factory=list)  # (s, Gb/s)
    #: when the first message was posted, on the tool's clock (a cluster's: fabric seconds
    #: since its epoch, as the event log's ``fabric_t``): where ``series`` starts
    started: float | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["series"] = [{"t": t, "gbps": round(v, 6)} for t, v in self.series]
        return d


def bw_result(size: int, tposted: Sequence[float], tcompleted: Sequence[float], gbits: bool,
              *, peak: bool = True, timeline: Timeline | None = None,
              interval: float = 1.0) -> BwResult:
    """The BW row from per-message post/completion times (perftest's formulas)."""
    n = min(len(tposted), len(tcompleted))
    seconds = (tcompleted[n - 1] - tposted[0]) if n else 0.0
    unit, factor = bw_unit(gbits)
    nbytes = size * n
    avg = nbytes / seconds / factor if seconds > 0 else 0.0
    peak_g = 0.0
    if peak and n:
        best = peak_message_time(tposted[:n], tcompleted[:n])
        if best is not None:
            peak_g = size / best / GBIT
        elif timeline is not None:
            peak_g = timeline.peak_gbps()
    series = timeline.series(interval, tcompleted[n - 1] if n else None) if timeline else []
    return BwResult(size, n, seconds, peak_g * GBIT / factor, avg, msg_rate(n, seconds), unit,
                    nbytes, gbps(nbytes, seconds), peak_g, series,
                    started=tposted[0] if n else None)


@dataclass
class LatResult:
    """One row of a latency report, in microseconds."""

    size: int
    iterations: int
    t_min: float
    t_max: float
    t_typical: float
    t_avg: float
    t_stdev: float
    p99: float
    p99_9: float

    def to_json(self) -> dict:
        return asdict(self)


def _median(m: int, d: Sequence[float]) -> float:
    """perftest's ``get_median`` over the first ``m`` sorted samples."""
    if (m - 1) % 2:
        return (d[m // 2] + d[m // 2 - 1]) / 2
    return d[m // 2]


def latency_stats(samples_us: Sequence[float], size: int, iterations: int) -> LatResult:
    """perftest's latency row from per-iteration samples (µs)."""
    if not samples_us:
        raise ValueError("no latency samples")
    d = sorted(samples_us)
    n = len(d)
    m = n - LAT_MEASURE_TAIL if n > LAT_MEASURE_TAIL + 1 else n
    kept = d[:m]
    avg = sum(kept) / m
    stdev = math.sqrt(sum((x - avg) ** 2 for x in kept) / m)
    return LatResult(size, iterations, d[0], d[min(m, n - 1)], _median(m, d), avg, stdev,
                     d[min(math.ceil(m * 0.99), n - 1)], d[min(math.ceil(m * 0.999), n - 1)])


# SPDX-License-Identifier: GPL-2.0-only
"""Line charts as standalone SVG, without plotting libraries.

Queue depth over time, marks and trims per interval, bandwidth per second:
what a person would rather look at than read. No dependency (matplotlib is
not on our machines), deterministic output, opens in any browser.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22")


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = [round(start, 12)]
    while ticks[-1] < hi - step * 1e-9:  # the last tick is at or above hi
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def line_chart(series: dict[str, Sequence[tuple[float, float]]], *, title: str = "",
               xlabel: str = "", ylabel: str = "", width: int = 760, height: int = 360,
               step: bool = False) -> str:
    """An SVG document plotting each named series of (x, y) points.

    ``step`` draws a staircase (counters sampled at intervals). Empty input
    gives a chart saying "no data" rather than an error.
    """
    left, right, top, bottom = 70, 150, 40, 50
    pw, ph = width - left - right, height - top - bottom
    pts = [p for s in series.values() for p in s]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">'
           f'{html.escape(title)}</text>']
    if not pts:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>')
        return "\n".join(out + ["</svg>"])
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(0.0, min(p[1] for p in pts)), max(p[1] for p in pts)
    xt, yt = _nice_ticks(x0, x1), _nice_ticks(y0, y1 if y1 > y0 else y0 + 1)
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]

    def sx(x: float) -> float:
        return left + (x - x0) / ((x1 - x0) or 1) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / ((y1 - y0) or 1) * ph

    for t in xt:
        out.append(f'<line x1="{sx(t):.1f}" y1="{top}" x2="{sx(t):.1f}" y2="{top + ph}" '
                   f'stroke="#eee"/><text x="{sx(t):.1f}" y="{top + ph + 16}" '
                   f'text-anchor="middle">{_fmt(t)}</text>')
    for t in yt:
        out.append(f'<line x1="{left}" y1="{sy(t):.1f}" x2="{left + pw}" y2="{sy(t):.1f}" '
                   f'stroke="#eee"/><text x="{left - 6}" y="{sy(t) + 4:.1f}" '
                   f'text-anchor="end">{_fmt(t)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
               f'stroke="#444"/>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">'
               f'{html.escape(xlabel)}</text>')
    out.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {top + ph / 2})">{html.escape(ylabel)}</text>')
    for i, (name, s) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        coords: list[str] = []
        prev = None
        for x, y in sorted(s):
            if step and prev is not None:
                coords.append(f"{sx(x):.1f},{sy(prev):.1f}")
            coords.append(f"{sx(x):.1f},{sy(y):.1f}")
            prev = y
        if coords:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" '
                       f'points="{" ".join(coords)}"/>')
        ly = top + 14 + 18 * i
        out.append(f'<line x1="{left + pw + 12}" y1="{ly - 4}" x2="{left + pw + 32}" '
                   f'y2="{ly - 4}" stroke="{color}" stroke-width="3"/>'
                   f'<text x="{left + pw + 38}" y="{ly}">{html.escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)

# SPDX-License-Identifier: GPL-2.0-only
"""A scenario's plots (matplotlib, PNG and SVG): one idea per plot, axes with units,
a legend per series, and the points that were not credible or did not complete drawn
hollow and named in the caption, so a reader never takes them for results.
"""

from __future__ import annotations

import os
from typing import Any

from emu.apps.scenario.spec import Plot, Scenario

#: axis labels with units for the metrics and the usual sweep variables
LABELS = {
    "jct_us": "job completion time (fabric µs)",
    "fct_p50_us": "median flow completion time (fabric µs)",
    "fct_p99_us": "p99 flow completion time (fabric µs)",
    "fct_max_us": "slowest flow's completion time (fabric µs)",
    "fct_mean_us": "mean flow completion time (fabric µs)",
    "goodput_gbps": "aggregate goodput (Gb/s, fabric)",
    "flow_goodput_min_gbps": "slowest flow's goodput (Gb/s, fabric)",
    "flow_goodput_max_gbps": "fastest flow's goodput (Gb/s, fabric)",
    "jain": "Jain's fairness index",
    "steady_goodput_gbps": "aggregate goodput after convergence (Gb/s, fabric)",
    "steady_jain": "Jain's fairness index after convergence",
    "retransmits": "packets retransmitted",
    "retransmitted_fraction": "share of packets retransmitted",
    "rto_retransmits": "retransmissions on timeout",
    "marked": "packets ECN-marked by switches",
    "trimmed": "packets trimmed by switches",
    "dropped": "packets dropped by switches",
    "stall_us": "longest stall (fabric µs)",
    "loss": "random loss on the link",
    "n": "senders (N → 1)",
    "seed": "hash seed",
    "hash_seed": "ECMP hash seed (fib_multipath_hash_seed)",
    "transport": "transport",
    "case": "transport and path policy",
    "failure": "what fails at 50 µs",
    "h2_rate": "h2's link rate",
    "trim": "switch trimming",
    "spine_imbalance": "busiest uplink over the mean, minus 1",
}
TRANSPORT_NAMES = {"roce": "RoCEv2", "uet": "UET", "mrc": "MRC"}


def _label(k: str) -> str:
    return LABELS.get(k, k)


def _name(v: Any) -> str:
    return TRANSPORT_NAMES.get(v, str(v)) if isinstance(v, str) else f"{v:g}" \
        if isinstance(v, float) else str(v)


def draw(sc: Scenario, plot: Plot, rows: list[dict[str, Any]], out_dir: str) -> list[str]:
    """Draw ``plot`` from ``rows`` into ``out_dir``; the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if all(r.get(k) == v for k, v in plot.where.items())]
    series: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        series.setdefault(r.get(plot.series) if plot.series else None, []).append(r)
    fig, ax = plt.subplots(figsize=(7.2, 4.2), layout="constrained")
    suspect = []
    xs_all = sorted({r[plot.x] for r in rows}, key=lambda v: (isinstance(v, str), v))
    width = 0.8 / max(1, len(series))
    for si, (name, rs) in enumerate(series.items()):
        rs = sorted(rs, key=lambda r: xs_all.index(r[plot.x]))
        label = _name(name) if name is not None else None
        good = [(r[plot.x], r[plot.y]) for r in rs
                if r.get(plot.y) is not None and r["credible"]]
        bad = [(r[plot.x], r[plot.y]) for r in rs
               if r.get(plot.y) is not None and not r["credible"]]
        suspect += [f"{_name(name)} at {plot.x}={_name(x)}" for x, _ in bad]
        missing = [r[plot.x] for r in rs if r.get(plot.y) is None]
        suspect += [f"{_name(name)} at {plot.x}={_name(x)} (did not complete)"
                    for x in missing]
        if plot.kind == "bar":
            pos = [xs_all.index(x) + (si - (len(series) - 1) / 2) * width for x, _ in good]
            bars = ax.bar(pos, [y for _, y in good], width, label=label)
            color = bars.patches[0].get_facecolor() if bars.patches else None
            if bad:
                ax.bar([xs_all.index(x) + (si - (len(series) - 1) / 2) * width
                        for x, _ in bad], [y for _, y in bad], width, fill=False,
                       edgecolor=color, hatch="//")
        else:
            line, = ax.plot([x for x, _ in good], [y for _, y in good], marker="o",
                            label=label)
            if bad:
                ax.plot([x for x, _ in bad], [y for _, y in bad], linestyle="none",
                        marker="o", markerfacecolor="none", color=line.get_color())
    if plot.kind == "bar":
        ax.set_xticks(range(len(xs_all)), [_name(x) for x in xs_all])
    ax.set_xlabel(_label(plot.x))
    ax.set_ylabel(_label(plot.y))
    if plot.logy:
        ax.set_yscale("log")
    elif plot.kind == "line" or plot.kind == "bar":
        ax.set_ylim(bottom=0)
    ax.set_title(plot.title, fontsize=11)
    ax.grid(True, alpha=0.3)
    if plot.series:
        # beside the axes once there are more series than fit over the data
        out = len(series) > 3
        ax.legend(title=_label(plot.series), fontsize=8,
                  **({"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if out else {}))
    if suspect:
        more = f" and {len(suspect) - 3} more" if len(suspect) > 3 else ""
        fig.text(0.01, 0.005, "hollow/hatched: not credible or incomplete — "
                 + "; ".join(suspect[:3]) + more, fontsize=7, color="firebrick")
        fig.get_layout_engine().set(rect=(0, 0.04, 1, 0.96))
    os.makedirs(out_dir, exist_ok=True)
    files = []
    for ext in ("png", "svg"):
        path = os.path.join(out_dir, f"{plot.file}.{ext}")
        fig.savefig(path, dpi=110)
        files.append(path)
    plt.close(fig)
    return files

# SPDX-License-Identifier: GPL-2.0-only
"""Line charts over time, drawn with matplotlib: ``emu perf --plot`` (bandwidth per
message size) and ``emu switch --plot`` (a queue's depth, marks or trims per port).

Queue depth over time, marks and trims per interval, bandwidth per second: what a
person would rather look at than read. These charts were SVG written by hand while
matplotlib was not on our machines; it is a dependency now (a scenario's plots,
:mod:`emu.apps.scenario.plots`, are drawn with it), so every chart emu draws looks
alike and gets what a plotting library does well: readable ticks, a legend kept clear
of the data, PNG as well as SVG. The conventions are the scenario plots': axes with
units, a legend per series, one idea per chart.

Where the chart goes: the path's suffix names the format (``.svg``, ``.png``,
``.pdf`` … anything matplotlib writes), and a ``.svg`` chart gets a ``.png`` of the
same name beside it (as a scenario's plots come in both: SVG for a page, PNG for a
chat or an issue). A path with no suffix matplotlib knows (``/dev/stdout``) gets SVG
alone. The SVG's text stays text (searchable, and what a test reads), each series'
line is the group ``series-N`` (N: its place in the legend), and the output is the
same bytes for the same data (no date, fixed ids).

matplotlib is imported when a chart is drawn, not with this module, so the commands
that draw nothing start as fast as before; it draws on a figure of its own (the Agg
canvas, no pyplot), leaving the process's global matplotlib state alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

#: a series with at most this many points gets a marker per point (one point alone
#: would otherwise draw nothing)
MARKERS_UP_TO = 60


def _fmt(v: float, _pos: object = None) -> str:
    """A tick value: 12k, 1.5M, 0.25 (the unit is on the axis)."""
    if v == 0:
        return "0"
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def outputs(path: str) -> list[tuple[str, str]]:
    """The files :func:`line_chart` writes for ``path``: (file, format), ``path`` first."""
    from matplotlib.backend_bases import FigureCanvasBase

    stem, ext = os.path.splitext(path)
    fmt = ext[1:].lower()
    if fmt not in FigureCanvasBase.get_supported_filetypes():
        return [(path, "svg")]
    return [(path, fmt)] + ([(stem + ".png", "png")] if fmt == "svg" else [])


def line_chart(path: str, series: Mapping[str, Sequence[tuple[float, float]]], *,
               title: str, xlabel: str, ylabel: str, legend_title: str | None = None,
               step: bool = False) -> list[str]:
    """Draw each named series of (x, y) points into ``path`` (and the PNG beside a
    ``.svg``, see the module's docstring); the files written, ``path`` first.

    ``xlabel`` and ``ylabel`` should name their units. ``step`` draws a staircase for
    values that hold over an interval (a counter's rate sampled at intervals): each y
    covers the interval that ends at its x. Series without points are left out, and
    with none at all the chart says "no data" rather than failing.

    An :class:`OSError` is the file that could not be written (its ``filename``).
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    drawn = {name: sorted(pts) for name, pts in series.items() if pts}
    with matplotlib.rc_context({"svg.hashsalt": "emu.plot", "svg.fonttype": "none",
                                "text.parse_math": False}):
        fig = Figure(figsize=(7.2, 4.2), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for i, (name, pts) in enumerate(drawn.items()):
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            style = {"label": name, "gid": f"series-{i}", "linewidth": 1.6,
                     "marker": "o" if len(pts) <= MARKERS_UP_TO else None,
                     "markersize": 3}
            if step:
                ax.step(xs, ys, where="pre", **style)
            else:
                ax.plot(xs, ys, **style)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if drawn:
            ys = [p[1] for pts in drawn.values() for p in pts]
            if min(ys) >= 0:  # amounts: from zero, so the heights compare
                ax.set_ylim(0, None if max(ys) > 0 else 1)
            ax.yaxis.set_major_formatter(FuncFormatter(_fmt))
            ax.grid(True, alpha=0.3)
            # beside the axes once there are more series than fit over the data
            beside = len(drawn) > 3
            ax.legend(title=legend_title, fontsize=8,
                      **({"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if beside
                         else {}))
        else:
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center",
                    va="center", fontsize=14, color="0.4")
        files = []
        for out, fmt in outputs(path):
            metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(fmt)
            try:
                fig.savefig(out, format=fmt, dpi=110, metadata=metadata)
            except OSError as e:
                if e.filename is None:
                    e.filename = out
                raise
            files.append(out)
    return files

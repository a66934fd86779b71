# SPDX-License-Identifier: GPL-2.0-only
"""A picture of a topology: SVG drawn natively, PNG through Graphviz when present.

The SVG needs no dependency, so ``emu graph`` always works: a layered layout
with hosts at the bottom, leaf/rail switches above them and spines on top;
the switches of each plane sit side by side; links are coloured per plane (or
per rail) and down links are dashed. Hovering a node or link shows its
addresses and settings (SVG ``<title>``). PNG (and ``.dot``) go through
Graphviz's ``dot`` with the same layers as ranks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from xml.sax.saxutils import escape

from emu.topology.model import Link, Node, Topology, TopologyError
from emu.topology.units import format_rate

__all__ = ["render", "to_svg", "to_dot", "layers"]

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
           "#e377c2", "#bcbd22", "#7f7f7f"]
NEUTRAL = "#555555"
DX, DX_HOST, DY, MARGIN = 96, 64, 130, 40
BOX_W, BOX_H, HOST_W = 84, 26, 52


def _natural(name: str) -> list[object]:
    """``leaf10`` after ``leaf9``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def layers(topo: Topology) -> dict[str, int]:
    """Layer of each node: hosts 0, then hops from the nearest host (leaf 1, spine 2)."""
    layer = {n.name: 0 for n in topo.hosts()}
    adj: dict[str, set[str]] = {n: set() for n in topo.nodes}
    for lk in topo.links:
        adj[lk.a.node].add(lk.b.node)
        adj[lk.b.node].add(lk.a.node)
    queue = deque(layer)
    while queue:
        cur = queue.popleft()
        for nxt in adj[cur]:
            if nxt not in layer:
                layer[nxt] = layer[cur] + 1
                queue.append(nxt)
    for n in topo.nodes:
        layer.setdefault(n, 1)  # switches not reachable from any host
    return layer


def _color_key(topo: Topology, lk: Link) -> int | None:
    if lk.plane is not None:
        return lk.plane
    rails = sorted((n.name for n in topo.nodes.values() if n.role == "rail"), key=_natural)
    for i, n in enumerate(rails):
        if n in (lk.a.node, lk.b.node):
            return i
    return None


def _color(key: int | None) -> str:
    return NEUTRAL if key is None else PALETTE[key % len(PALETTE)]


def _positions(topo: Topology, min_width: float = 0) -> tuple[dict[str, tuple[float, float]],
                                                              float, float]:
    """Centre of every node, and the drawing's width and height."""
    layer = layers(topo)
    top = max(layer.values(), default=0)
    planes = sorted({n.plane for n in topo.switches()}, key=lambda p: (p is not None, p or 0))
    # width of each plane's block = its widest switch layer
    grid: dict[tuple[int | None, int], list[Node]] = {}
    for n in sorted(topo.switches(), key=lambda n: _natural(n.name)):
        grid.setdefault((n.plane, layer[n.name]), []).append(n)
    block = {p: max((len(v) for (q, _), v in grid.items() if q == p), default=0) for p in planes}
    sw_width = sum(block[p] * DX for p in planes) + DX * max(0, len(planes) - 1) / 2
    hosts = sorted(topo.hosts(), key=lambda n: _natural(n.name))
    host_width = len(hosts) * DX_HOST
    width = max(sw_width, host_width, 4 * DX, min_width) + 2 * MARGIN
    height = MARGIN + 40 + top * DY + 70
    pos: dict[str, tuple[float, float]] = {}

    def y(lay: int) -> float:
        return MARGIN + 40 + (top - lay) * DY

    for i, h in enumerate(hosts):
        pos[h.name] = ((width - host_width) / 2 + (i + 0.5) * DX_HOST, y(0))
    x0 = (width - sw_width) / 2
    for p in planes:
        bw = block[p] * DX
        for (q, lay), nodes in grid.items():
            if q != p:
                continue
            off = x0 + (bw - len(nodes) * DX) / 2
            for i, n in enumerate(nodes):
                pos[n.name] = (off + (i + 0.5) * DX, y(lay))
        x0 += bw + DX / 2
    return pos, width, height


def _link_title(lk: Link) -> str:
    def d(x: object) -> str:
        parts = [format_rate(x.rate_bps)]  # type: ignore[attr-defined]
        for key in ("loss", "ecn_ce", "duplicate"):
            if getattr(x, key):
                parts.append(f"{key} {getattr(x, key):.3%}")
        for key in ("delay_s", "jitter_s"):
            if getattr(x, key):
                parts.append(f"{key[:-2]} {getattr(x, key) * 1e3:g}ms")
        return ", ".join(parts)

    ends = "; ".join(f"{e.node}:{e.ifname} {e.ipv4 or ''} {e.ipv6 or ''}".strip()
                     for e in (lk.a, lk.b))
    state = "up" if lk.up else "DOWN"
    return (f"{lk.name} ({state}, mtu {lk.mtu})\n{ends}\n"
            f"{lk.a.node}→{lk.b.node}: {d(lk.a_to_b)}\n{lk.b.node}→{lk.a.node}: {d(lk.b_to_a)}")


def to_svg(topo: Topology, down: Iterable[str] = ()) -> str:
    """The SVG document as text; ``down`` adds link names to draw as down (live state)."""
    down = set(down)
    kind = topo.params and ", ".join(f"{k}={v}" for k, v in topo.params.items())
    title = (f"{topo.name}: {len(topo.hosts())} hosts, {len(topo.switches())} switches, "
             f"{len(topo.links)} links" + (f" ({kind})" if kind else ""))
    pos, width, height = _positions(topo, min_width=len(title) * 8)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>']
    out.append(f'<text x="{MARGIN}" y="{MARGIN}" font-size="14" font-weight="bold">'
               f"{escape(title)}</text>")
    groups: dict[frozenset[str], list[Link]] = {}
    for lk in topo.links:
        groups.setdefault(frozenset((lk.a.node, lk.b.node)), []).append(lk)
    out.append('<g id="links" stroke-width="1.6">')
    for lks in groups.values():
        for k, lk in enumerate(lks):
            (x1, y1), (x2, y2) = pos[lk.a.node], pos[lk.b.node]
            off = (k - (len(lks) - 1) / 2) * 5
            dash = "" if lk.up and lk.name not in down else ' stroke-dasharray="6,4"'
            out.append(f'<line x1="{x1 + off:.1f}" y1="{y1:.1f}" x2="{x2 + off:.1f}" '
                       f'y2="{y2:.1f}" stroke="{_color(_color_key(topo, lk))}"{dash}>'
                       f"<title>{escape(_link_title(lk))}</title></line>")
    out.append("</g>")
    out.append('<g id="nodes">')
    for n in topo.nodes.values():
        x, yy = pos[n.name]
        w = HOST_W if n.kind == "host" else BOX_W
        fill = "#fff8dc" if n.kind == "host" else "#e8f0fe"
        stroke = NEUTRAL if n.plane is None else _color(n.plane)
        tip = f"{n.name} ({n.role or n.kind})\nloopback {n.loopback4} {n.loopback6}"
        if n.locator6:
            tip += f"\nSRv6 locator {n.locator6} (uSID {n.usid:#06x})"
        out.append(f'<g><title>{escape(tip)}</title>'
                   f'<rect x="{x - w / 2:.1f}" y="{yy - BOX_H / 2:.1f}" width="{w}" '
                   f'height="{BOX_H}" rx="{BOX_H / 2 if n.kind == "host" else 4}" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="1.5"/>'
                   f'<text x="{x:.1f}" y="{yy + 4:.1f}" text-anchor="middle">{escape(n.name)}'
                   f"</text></g>")
    out.append("</g>")
    planes = sorted({k for lk in topo.links if (k := _color_key(topo, lk)) is not None})
    label = "rail" if any(n.role == "rail" for n in topo.nodes.values()) else "plane"
    for i, p in enumerate(planes):
        lx = MARGIN + i * 90
        name = f"rail{p + 1}" if label == "rail" else f"plane {p}"
        out.append(f'<line x1="{lx}" y1="{height - 18}" x2="{lx + 24}" y2="{height - 18}" '
                   f'stroke="{_color(p)}" stroke-width="3"/><text x="{lx + 30}" '
                   f'y="{height - 14}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def to_dot(topo: Topology, down: Iterable[str] = ()) -> str:
    """Graphviz source with one rank per layer (spines on top)."""
    down = set(down)
    layer = layers(topo)
    lines = [f'graph "{topo.name}" {{',
             '  rankdir=BT; splines=line; nodesep=0.25; fontname="sans-serif";',
             '  node [fontname="sans-serif" fontsize=10 style=filled];']
    planes = sorted({n.plane for n in topo.nodes.values() if n.plane is not None})
    for lay in sorted(set(layer.values())):
        for p in [None, *planes]:  # rank groups may not cross a plane's cluster
            names = sorted((n for n, v in layer.items() if v == lay and topo.nodes[n].plane == p),
                           key=_natural)
            if not names:
                continue
            group = "  { rank=same; " + " ".join(f'"{n}";' for n in names) + " }"
            if p is not None:
                group = (f'  subgraph "cluster_p{p}" {{ label="plane {p}"; color="{_color(p)}"; '
                         f"{group.strip()} }}")
            lines.append(group)
    for n in topo.nodes.values():
        shape = "box, style=\"rounded,filled\"" if n.kind == "host" else "box"
        fill = "#fff8dc" if n.kind == "host" else "#e8f0fe"
        color = NEUTRAL if n.plane is None else _color(n.plane)
        lines.append(f'  "{n.name}" [shape={shape}, fillcolor="{fill}", color="{color}"];')
    for lk in topo.links:
        style = "" if lk.up and lk.name not in down else ", style=dashed"
        lines.append(f'  "{lk.a.node}" -- "{lk.b.node}" '
                     f'[color="{_color(_color_key(topo, lk))}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(topo: Topology, path: str | Path, down: Iterable[str] = ()) -> Path:
    """Write ``path`` as .svg (native), .png (needs Graphviz ``dot``) or .dot/.gv."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".svg":
        path.write_text(to_svg(topo, down), encoding="utf-8")
    elif suffix in (".dot", ".gv"):
        path.write_text(to_dot(topo, down), encoding="utf-8")
    elif suffix == ".png":
        dot = shutil.which("dot")
        if dot is None:
            raise TopologyError(str(path), "PNG needs Graphviz's 'dot' (Debian package "
                                "'graphviz'); write an .svg instead, which needs nothing")
        proc = subprocess.run([dot, "-Tpng", "-o", str(path)], input=to_dot(topo, down),
                              text=True, capture_output=True, check=False)
        if proc.returncode != 0:
            msg = " ".join(proc.stderr.split()) or f"exit status {proc.returncode}"
            raise TopologyError(str(path), f"dot failed: {msg}")
    else:
        raise TopologyError(str(path), f"unknown picture format {suffix or '(none)'!r}: "
                            "use .svg, .png or .dot")
    return path

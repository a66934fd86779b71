# SPDX-License-Identifier: GPL-2.0-only
"""A plan as text for people (``emu up --dry-run``): what would run, at what rates, why.

Rates and delays are shown in fabric units with the wall units beside them, so
a reader sees both the network as written and what this machine will run.
"""

from __future__ import annotations

from emu.nic.topology import hosts_label
from emu.plan.model import Plan


def rate(bps: float | None) -> str:
    """``10G``, ``500M``, ``-`` (unlimited): short, for a table column."""
    if bps is None:
        return "-"
    for unit, m in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if bps >= m:
            return f"{bps / m:.4g}{unit}"
    return f"{bps:.0f}"


def delay(s: float) -> str:
    """``0``, ``1us``, ``2.5ms``."""
    if not s:
        return "0"
    for unit, m in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= m:
            return f"{s / m:.4g}{unit}"
    return f"{s / 1e-9:.4g}ns"


def render(plan: Plan) -> str:
    """The plan as a few tables: time, capacity, ports, NIC daemons, switches."""
    t = plan.time
    kind = f"{plan.kind}, " if plan.kind else ""
    lines = [f"plan of topology {plan.topology} ({kind}{plan.source})",
             f"time: scale {t.scale:g}: {t.why}; wall rate = fabric rate / scale, "
             f"wall delay = fabric delay x scale",
             f"machine: {plan.machine.get('costs', '?')} costs, "
             f"{plan.machine.get('cores', '?')} core(s), kernel switch datapath "
             f"{plan.machine.get('kernel_datapath', '?')}"]
    if plan.credible.get("line"):
        lines.append(f"capacity: {plan.credible['line']}")
    lines += ["", f"{'PORT':<20} {'TO':<20} {'MTU':>5} {'RATE':>8} {'WALL':>8} "
                  f"{'DELAY':>7} {'WALL':>7} {'PIPELINE':>8} {'WALL':>8}  RATE FROM"]
    for p in plan.ports:
        lines.append(f"{p.node + ':' + p.ifname:<20} {p.peer:<20} {p.mtu:>5} "
                     f"{rate(p.rate):>8} {rate(p.wall_rate):>8} {delay(p.delay):>7} "
                     f"{delay(p.wall_delay):>7} {rate(p.pipeline_rate):>8} "
                     f"{rate(p.wall_pipeline_rate):>8}  {p.rate_source or 'unlimited'}")
    if plan.nics:
        lines += ["", f"{'NIC DAEMON':<12} {'LINE RATES (fabric, wall, from)':<40} ARGUMENTS"]
        for h, n in plan.nics.items():
            ports = ", ".join(f"{q.ifname} {rate(q.rate)}/{rate(q.wall_rate)} {q.source}"
                              for q in n.ports) or "-"
            lines.append(f"{h:<12} {ports:<40} {' '.join(n.args)}")
        shared: dict[int, list[str]] = {}
        for h, n in plan.nics.items():
            if n.worker is not None:
                shared.setdefault(n.worker, []).append(h)
        if shared:  # emu nicd serve (emu.nic.worker)
            lines.append(f"NIC daemons in {len(shared)} worker process(es) ([nic] workers): "
                         + "; ".join(f"{w}: {hosts_label(hs)}" for w, hs in sorted(shared.items())))
        else:
            lines.append("NIC daemons: one process per host")
    if plan.switches:
        lines += ["", f"{'SWITCH':<12} {'DATAPATH':<9} WHY"]
        for s, w in plan.switches.items():
            lines.append(f"{s:<12} {w.datapath:<9} {w.why}")
        if t.scale != 1:  # the daemons convert themselves (emu.switch.daemon)
            lines.append(f"switch daemons: configuration in fabric units, on the fabric clock "
                         f"({' '.join(next(iter(plan.switches.values())).args)})")
    else:
        lines += ["", "switches: kernel forwarding only (no [switch] pipeline)"]
    return "\n".join(lines)

# SPDX-License-Identifier: GPL-2.0-only
"""What this machine can emulate credibly: per-packet costs → rates that fit.

Every emulated packet costs real CPU in the daemons that stand in for the
hardware: the sending NIC daemon, the receiving one and, with the switch
pipeline, one switch daemon per switch on the path. A rate "fits" when a
flow at that line rate over the fabric's longest path keeps

* every daemon under :data:`DAEMON_SHARE` of a core, and
* all of them together under :data:`MACHINE_SHARE` of the machine's cores,

so that queues and timers are the emulated ones, not the CPU's. The costs
come from ``emu doctor`` (measured on this machine, saved in
:data:`COSTS_FILE`) or, until it has run, from :data:`REFERENCE` (the 2-core
VM the project is developed on). The model is for **one flow at line rate**
on the longest path; N concurrent flows through the same daemons need N
times the budget — the overload counters say when a run exceeded it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from emu.topology.model import Topology

if TYPE_CHECKING:
    from emu.credible.rates import Switching

#: where ``emu doctor`` keeps what it measured (tmpfs: a machine's figures, until reboot);
#: a folder of its own, since every ``*.json`` in /run/emu is a cluster's state file
COSTS_FILE = "/run/emu/doctor/costs.json"
#: Why 0.35 and not more: a daemon or a machine busy 60 % of the time on average is late
#: at its peaks, since the work comes in bursts (a window's worth of packets, ACKs from
#: every direction at once, the kernel hops' softirqs). Measured on the 2-core VM: four
#: 400 Gb/s UET flows on the leaf-spine (scripts/bench-credible --part flows) sent ~200
#: packets late per daemon at the scale a 0.6 share gave (3500), one in two rounds at
#: 5200, none at 7000; one 64 MiB transfer across namespaces/two-sites.toml (a 1 ms round
#: trip, 64 WRITEs in flight) was late at 2200, the scale 0.6 gave a single flow there
DAEMON_SHARE = 0.35
MACHINE_SHARE = 0.35
#: rates proposed are 1, 2 or 5 × 10^k bits/s, never below this
MIN_RATE = 10e6


#: a kernel-datapath hop on the development VM where its tbf paces (``emu doctor --measure``:
#: 17–27 µs of the machine's CPU per packet per hop at 200 Mb/s; ~2.5 µs where it never waits)
KERNEL_HOP_REFERENCE = 20e-6


@dataclass(frozen=True)
class Costs:
    """Per-packet CPU (seconds, user + kernel) and the emulator's own delays."""

    nic_tx: float  # a sending NIC daemon, per full-size data packet
    nic_rx: float  # a receiving NIC daemon, per full-size data packet
    switch: float  # one switch daemon hop (NFQUEUE in, queue model, verdict), per packet
    nic_turnaround: float  # round trip two NIC daemons add to the wire's (s)
    switch_turnaround: float  # delay one switch daemon adds per pass, unloaded (s)
    cores: int
    source: str = "reference"
    #: one kernel-datapath switch hop (veth, forwarding, tbf, BPF in softirq), per packet,
    #: charged to the NIC daemons at the ends of the path (whose CPU it mostly runs on)
    kernel_hop: float = 0.0
    #: the machine's own stalls (every CPU stopped at once: a hypervisor's doing, not
    #: emu's; :mod:`emu.credible.stallwatch`) per minute longer than 1 ms, and the longest
    #: (s) — each can cost a run one late send that lower rates do not avoid
    stalls_per_min: float = 0.0
    stall_longest: float = 0.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Costs:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: the 2-core development VM, as ``emu doctor --measure`` measured it (docs/credibility.md)
REFERENCE = Costs(nic_tx=13.3e-6, nic_rx=12.8e-6, switch=101e-6, nic_turnaround=750e-6,
                  switch_turnaround=136e-6, cores=2, kernel_hop=KERNEL_HOP_REFERENCE)


def load(path: str = COSTS_FILE) -> Costs:
    """This machine's measured costs, else :data:`REFERENCE` scaled to its core count
    (a file measured before kernel hops were: the reference hop cost)."""
    try:
        with open(path) as f:
            d = json.load(f)["costs"]
            d.setdefault("kernel_hop", KERNEL_HOP_REFERENCE)
            return Costs.from_dict(d)
    except (OSError, ValueError, KeyError, TypeError):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
        return Costs(**{**REFERENCE.to_dict(), "cores": cores})


def save(costs: Costs, extra: dict[str, Any], path: str = COSTS_FILE) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"costs": costs.to_dict(), **extra}, f, indent=1)
    os.replace(tmp, path)


def frame_bytes(mtu: int) -> int:
    """The smallest full-size data frame any transport sends at this IP MTU (RoCE's: its
    PMTU payload + headers), the one that costs most per bit."""
    from emu.transports.roce.factory import pmtu_for

    return pmtu_for(mtu) + 12 + 16 + 4 + 8 + 40 + 14


def switches_on_path(topo: Topology, datapath: str = "user",
                     switches: Switching | None = None,
                     path: list[tuple[str, str]] | None = None) -> int:
    """Switches a packet passes on the longest path that cost ``datapath``'s CPU: ``user``,
    switch daemons (none without the pipeline); ``kernel``, the rest — the tc BPF datapath
    and a switch that only forwards alike. Why a forwarding switch counts: its egress tbf
    paces the port, so under load every packet leaves on the qdisc's timer in softirq,
    what :data:`KERNEL_HOP_REFERENCE` measured for the BPF datapath. Measured without the
    pipeline (the shipped leaf-spine, three hops): one 1 Gb/s write-bw in real time cost
    the machine 62 µs of CPU per packet end to end, eight flows at scale 2300 105 µs,
    where the NIC daemons alone account for 26 — and auto's scale for eight flows, made
    without the hops, left both CPUs busy and every flow with late sends. ``switches``,
    ``path``: as derived already (:func:`emu.credible.rates.switching`, ``longest_path``)."""
    from emu.credible.rates import longest_path, switching

    switches = switches or switching(topo)
    user = switches.user if switches.configs else set()
    path = longest_path(topo) if path is None else path
    return sum(1 for node, _ in path
               if topo.nodes[node].kind == "switch" and (node in user) == (datapath == "user"))


def max_rate(costs: Costs, hops: int, mtu: int, khops: int = 0, flows: int = 1,
             hosts_per_daemon: int = 1) -> float:
    """The highest line rate (bits/s) at which ``flows`` flows, each over ``hops`` switch
    daemons and ``khops`` kernel-datapath switches, fit (the kernel hops' softirq work
    shared by the two end daemons). With more than one flow every NIC daemon may be
    sending one and receiving another (all hosts busy), so each carries both costs.
    ``hosts_per_daemon``: hosts one NIC daemon process serves (``[nic] workers``): it
    carries up to that many hosts' work — a lone flow's both ends among them."""
    k = khops * costs.kernel_hop / 2
    both = costs.nic_tx + costs.nic_rx + 2 * k
    if hosts_per_daemon > 1:
        per_daemon = both * max(1, min(hosts_per_daemon, flows))
    else:
        per_daemon = max(costs.nic_tx + k, costs.nic_rx + k) if flows <= 1 else both
    pps_daemon = DAEMON_SHARE / max(per_daemon, costs.switch if hops else 0.0)
    pps_machine = MACHINE_SHARE * costs.cores / (flows * (costs.nic_tx + costs.nic_rx
                                                          + hops * costs.switch + 2 * k))
    return min(pps_daemon, pps_machine) * frame_bytes(mtu) * 8


def hosts_per_daemon(topo: Topology, costs: Costs) -> int:
    """Hosts one NIC daemon process serves at most (``[nic] workers``: one per core by
    default, :func:`emu.nic.topology.workers`)."""
    from emu.nic.topology import workers

    n = len(topo.hosts())
    return math.ceil(n / workers(topo.nic, n, costs.cores)) if n else 1


def nice_floor(rate: float) -> float:
    """The largest 1, 2 or 5 × 10^k at or below ``rate`` (never below :data:`MIN_RATE`)."""
    if rate <= MIN_RATE:
        return MIN_RATE
    k = math.floor(math.log10(rate))
    for m in (5, 2, 1):
        if m * 10 ** k <= rate * (1 + 1e-9):
            return float(m * 10 ** k)
    return float(10 ** k)


def mtu_of(topo: Topology) -> int:
    return min((lk.mtu for lk in topo.links), default=1500)


def propose(topo: Topology, costs: Costs | None = None) -> float:
    """The line rate to use on every port of ``topo`` on this machine (bits/s)."""
    costs = costs or load()
    return nice_floor(max_rate(costs, switches_on_path(topo), mtu_of(topo),
                               switches_on_path(topo, "kernel"),
                               hosts_per_daemon=hosts_per_daemon(topo, costs)))


def fit(topo: Topology, costs: Costs | None = None, switches: Switching | None = None,
        path: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Whether the topology's rates fit this machine: ``{"fits", "proposed", "max_rate",
    "ports": [...], "advice"}``; ``advice`` is the ``--set`` that would make them fit.
    ``switches``, ``path``: as derived already (:func:`emu.credible.rates.switching`,
    ``longest_path``), else derived here."""
    from emu.credible.rates import host_ports, longest_path, switching

    costs = costs or load()
    switches = switches or switching(topo)
    path = longest_path(topo) if path is None else path
    hops = switches_on_path(topo, "user", switches, path)
    mtu = mtu_of(topo)
    limit = max_rate(costs, hops, mtu, switches_on_path(topo, "kernel", switches, path),
                     hosts_per_daemon=hosts_per_daemon(topo, costs))
    proposed = nice_floor(limit)
    ports = host_ports(topo, proposed, switches)
    too_fast = [p for p in ports if p.rate > limit * 1.001]
    advice = []
    if too_fast:
        from emu.topology.units import format_rate

        r = format_rate(int(proposed))
        if switches.configs:
            advice.append(f"--set switch.port.rate={r}")
        if any(p.source == "link" for p in too_fast):
            advice.append(f"--set link.rate={r}")
        if any(p.source == "nic.line_rate" for p in too_fast):
            advice.append(f"--set nic.line_rate={r}")
    return {"fits": not too_fast, "proposed": proposed,
            "max_rate": limit, "switch_hops": hops, "frame_bytes": frame_bytes(mtu),
            "switch_datapaths": datapaths(topo, switches),
            "costs": costs.to_dict(),
            "ports": [{"host": p.host, "ifname": p.ifname, "rate": p.rate, "source": p.source}
                      for p in ports],
            "too_fast": [f"{p.host}:{p.ifname}" for p in too_fast], "advice": advice}


def datapaths(topo: Topology, switches: Switching | None = None) -> dict[str, int]:
    """How many switches will run each switch-pipeline datapath ({} without one)."""
    from emu.credible.rates import switching

    switches = switches or switching(topo)
    if not switches.configs:
        return {}
    user = switches.user
    n = len(topo.switches())
    return {k: v for k, v in (("kernel", n - len(user)), ("user", len(user))) if v}


def show_rate(bps: float) -> str:
    """A rate for people: ``1.51 Gb/s``, ``122 Mb/s``."""
    for unit, m in (("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if bps >= m:
            return f"{bps / m:.3g} {unit}"
    return f"{bps:.0f} b/s"


def describe(res: dict[str, Any]) -> str:
    """One line for ``emu up``: the rates in force, and a warning when they do not fit."""
    from emu.topology.units import format_rate

    rates = sorted({p["rate"] for p in res["ports"]})
    srcs = sorted({p["source"] for p in res["ports"]})
    shown = ", ".join(format_rate(int(r)) for r in rates)
    dp = res.get("switch_datapaths") or {}
    paths = (" with the switch pipeline's " + " and ".join(f"{k} datapath on {v} switch(es)"
                                                         for k, v in dp.items())) if dp else ""
    if res["fits"]:
        return (f"NIC line rate {shown} ({'/'.join(srcs)}); this machine sustains up to "
                f"{show_rate(res['max_rate'])} per flow here{paths} "
                f"({res['costs']['source']} costs)")
    return (f"warning: line rate {shown} exceeds what this machine emulates credibly "
            f"({show_rate(res['max_rate'])} per flow here{paths}, {res['costs']['source']} "
            f"costs): results will show overload and be marked not credible; "
            f"{' '.join(res['advice']) or 'lower the rates'} fits")

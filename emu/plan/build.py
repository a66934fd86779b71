# SPDX-License-Identifier: GPL-2.0-only
"""Resolve a loaded topology into a :class:`~emu.plan.model.Plan`, once.

Before the plan, ``emu up`` handed the topology to ``credible/``, ``switch/`` and
``nic/`` and each derived rates and per-node settings from it again (every switch's
configuration was rebuilt at each use, the host ports' line rates twice). Here the
derivations run once, in one order, and what they give is written down: per-port
rates and delays (fabric and wall units), the time scale and why, each NIC
daemon's arguments, each switch daemon's configuration and expected datapath,
and the capacity verdict. ``emu up`` and the tools read the plan, and nothing
downstream asks the topology again for a setting.

What this machine adds (its measured per-packet costs, whether the kernel
datapath can load here) is read here too, so a plan states what it was made for.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from emu.credible import capacity, rates
from emu.nic.topology import (
    NIC_TRANSPORTS,
    coalesce_arg,
    daemon_args,
    sched_arg,
    worker_of,
    workers,
)
from emu.plan import scale
from emu.plan.model import NicPlan, NicPort, Plan, PortPlan, SwitchPlan, TimePlan
from emu.switch import kernel
from emu.switch.config import SwitchConfig
from emu.topology.model import Topology

#: how far ahead of the wire a NIC daemon may feed a port whose line rate a kernel tbf
#: serializes (``emu nicd --tx-lead``): well inside the tbf's ~10 ms queue
#: (:func:`emu.fabric.linkctl.tbf_sizes`), longer than most of the daemons' stalls, and
#: short, since what waits there is queueing delay a UET sender's NSCC reads as
#: congestion. Measured (README default, fresh pair clusters): 4 ms left UET at
#: 0.77-0.84 of the line rate in 4 of 10 runs with no overload; 2 ms, 0.97-0.99 in 10 of 10.
#: This is the floor, in wall time: it covers the daemon's own stalls, which are wall.
TX_LEAD = 2e-3
#: Dilated, the lead is the port's transmit FIFO in fabric time (the same at every scale,
#: so a fabric result does not depend on it: DESIGN.md, Fabric time), this long — ~100 KB
#: at 400 Gb/s, two dozen 4 KiB frames: what a NIC's on-chip transmit buffer holds — and
#: never less than TX_LEAD of wall time nor more than TX_LEAD_MAX (the kernel tbf's queue
#: holds 20 ms of its rate: emu.fabric.linkctl.tbf_sizes). Why: at a scale of thousands,
#: 2 ms of wall is a fraction of a frame's fabric time per packet… and a hypervisor's steal
#: of a few ms left the port idle (tx_late) in one of two default UET write-bw runs. Why
#: 2 µs and not 1: the FIFO is also the time a RoCEv2 QP's pacer may be served late
#: (QueuePair.lead, BURST_SHARE_OF_FIFO), and a daemon serving three hosts of a 4 -> 1
#: incast (emu run incast) was late by more than 1 µs x 5900-8900 in 8 of 8 DCQCN points
#: (pacer_late 1-21 each), by more than 2 µs in 0 of 8 the same morning (later that day,
#: the machine stalling in bursts, in 4 of 8 longer ones: the FIFO covers a daemon's
#: ordinary lateness, not the hypervisor's); pair write-bw is the same with either
#: (RoCEv2 390.5-391.1 and UET 386.3-388.4 Gb/s, four runs of each, same session)
TX_FIFO = 2e-6
TX_LEAD_MAX = 16e-3


def tx_lead(time: TimePlan) -> float:
    """The NIC daemons' ``--tx-lead`` (wall seconds) at ``time``'s scale."""
    return min(TX_LEAD_MAX, max(TX_LEAD, time.wall_delay(TX_FIFO)))


def build(topology: Topology, costs: capacity.Costs | None = None,
          time: TimePlan | None = None) -> Plan:
    """The plan of ``topology`` (already loaded, ``--set`` applied) on this machine.

    ``costs``: this machine's per-packet costs (default: what ``emu doctor``
    measured, else the reference VM's); ``time``: the clock (default: what ``[time]``
    asks for, "auto" unless it says otherwise: :mod:`emu.plan.scale`).
    Reads files but changes nothing, so ``emu up --dry-run`` can call it freely."""
    costs = costs or capacity.load()
    # the switch pipeline (each switch's configuration, which run in user space) and
    # the fabric's longest path: derived here once, and handed to every use below
    switching = rates.switching(topology)
    path = rates.longest_path(topology)
    time = time or scale.time_plan(topology, costs, switching, path)
    cfgs = switching.configs
    switches = {n: _switch_plan(n, c, n in switching.user, time) for n, c in cfgs.items()}

    credible: dict[str, Any] = {}
    host_ports: list[rates.HostPort] = []
    serializers: dict[str, int] = {}
    line_args: dict[str, tuple[str, ...]] = {}
    if topology.hosts():
        line_args, credible, host_ports = _nic_rates(topology, fabric_costs(costs, time),
                                                     time, switching, path)
        serializers = rates.serializers(topology, host_ports)

    # what every daemon gets: the transports, the DSCPs these switches write on trimmed
    # packets (so the NICs recognise them), the [nic] section's engine options
    common: tuple[str, ...] = (*(a for t in NIC_TRANSPORTS for a in ("-t", t)),
                               "--optional-transports")
    dscps = sorted({int(s.config[k]) for s in switches.values()
                    for k in ("trimmed_dscp", "trimmed_lasthop")})
    common += tuple(a for d in dscps for a in ("--trimmed-dscp", str(d)))
    common += daemon_args(topology.nic)
    if time.scale != 1:  # the daemons' clock (emu.nic.clock); scale 1: trio's own, as always
        common += ("--time-scale", f"{time.scale:g}", "--time-epoch", f"{time.epoch:.9f}")
    by_host: dict[str, list[NicPort]] = {}
    for p in host_ports:
        wall = time.wall_rate(p.rate)
        assert wall is not None
        by_host.setdefault(p.host, []).append(NicPort(p.ifname, p.rate, wall, p.source))
    delays = path_delays(topology)
    names = [h.name for h in topology.hosts()]
    served_by = worker_of(names, workers(topology.nic, len(names), costs.cores))
    nics = {h: NicPlan(h, tuple(by_host.get(h, ())),
                       common + line_args.get(h, ()) + delays.get(h, ()), served_by[h])
            for h in names}

    sources = {(p.host, p.ifname): p.source for p in host_ports}
    ports = tuple(_ports(topology, serializers, sources, cfgs, time))
    if time.scale != 1:  # the state file's serializers are what the kernel goes back to
        serializers = {k: round(v / time.scale) for k, v in serializers.items()}
    return Plan(topology=topology.declared_name or topology.name, kind=topology.kind,
                source=topology.source, time=time, ports=ports, nics=nics,
                switches=switches, credible=credible, serializers=serializers,
                machine={"costs": costs.source, "cores": costs.cores,
                         "kernel_datapath": kernel.available() or "available"})


def fabric_costs(costs: capacity.Costs, time: TimePlan) -> capacity.Costs:
    """This machine's per-packet costs and own delays (wall seconds) in fabric time: a
    scale-th of them (what dilation is for). The capacity verdict, the rate proposed for
    ports with none of their own and the base round trip are then the fabric's."""
    if time.scale == 1:
        return costs
    return replace(costs, **{k: time.fabric_delay(getattr(costs, k))
                             for k in ("nic_tx", "nic_rx", "switch", "nic_turnaround",
                                       "switch_turnaround", "kernel_hop")})


def time_plan(topology: Topology) -> TimePlan:
    """The clock ``topology`` asks for on this machine (:func:`emu.plan.scale.time_plan`
    with the costs ``emu doctor`` measured); what :func:`build` uses unless given one."""
    switching = rates.switching(topology)
    return scale.time_plan(topology, capacity.load(), switching, rates.longest_path(topology))


def path_delays(topology: Topology) -> dict[str, tuple[str, ...]]:
    """Each host's ``emu nicd --path-delay`` arguments: for each peer address, the fabric
    seconds its packets are held after they arrive (:func:`emu.credible.rates.path_delay`:
    propagation, switch and NIC latency). The most common delay is given once as ``*``;
    none at all when the fabric has no fixed delays."""
    if not (topology.latency or any(lk.a_to_b.delay_s or lk.b_to_a.delay_s
                                    for lk in topology.links)):
        return {}
    addrs: dict[str, list[str]] = {}
    for lk in topology.links:
        for ep in (lk.a, lk.b):
            if topology.nodes[ep.node].kind == "host":
                addrs.setdefault(ep.node, []).extend(
                    str(i.ip) for i in (ep.ipv4, ep.ipv6) if i is not None)
    out: dict[str, tuple[str, ...]] = {}
    paths = rates.host_paths(topology)
    links = rates.link_delays(topology)
    for h in topology.hosts():
        # the path each peer's packets take to h
        by_peer = {o.name: rates.path_delay(topology, paths[(o.name, h.name)], links=links)
                   for o in topology.hosts() if (o.name, h.name) in paths}
        if not by_peer:
            continue
        vals = list(by_peer.values())
        common = max(set(vals), key=vals.count)
        args: list[str] = ["--path-delay", f"*={common:.6g}"]
        for peer, d in sorted(by_peer.items()):
            if d != common:
                for a in addrs.get(peer, ()):
                    args += ["--path-delay", f"{a}={d:.6g}"]
        out[h.name] = tuple(args)
    return out


def _nic_rates(topology: Topology, costs: capacity.Costs, time: TimePlan,
               switching: rates.Switching, path: list[tuple[str, str]]
               ) -> tuple[dict[str, tuple[str, ...]], dict[str, Any], list[rates.HostPort]]:
    """Each host's ``emu nicd`` arguments for its ports' line rates and the fabric's
    base round trip (:mod:`emu.credible`), the capacity verdict ``emu up`` records and
    prints, and the ports (:class:`emu.credible.rates.HostPort`)."""
    res = capacity.fit(topology, costs, switching, path)
    # the ports fit() found at the rate it proposes (not host_ports() a second time)
    ports = [rates.HostPort(**p) for p in res["ports"]]
    # the round trip is the fabric's (engines' timers are fabric time)
    rtt = rates.base_rtt(topology, ports, capacity.mtu_of(topology), costs.nic_turnaround,
                         costs.switch_turnaround, switching, path)
    uet = topology.nic.get("uet") or {}
    per_host: dict[str, tuple[str, ...]] = {}
    for p in ports:
        per_host[p.host] = per_host.get(p.host, ()) + (
            "--line-rate", f"{p.ifname}={time.wall_rate(p.rate):.0f}")
    common: tuple[str, ...] = ("--tx-lead", f"{tx_lead(time):g}",
                               *coalesce_arg(topology.nic), *sched_arg(topology.nic))
    if topology.nic.get("family") in (4, 6):
        common += ("--family", str(topology.nic["family"]))
    if "base_rtt" not in uet:
        common += ("--engine-opt", f"uet.base_rtt={rtt:.6g}")
    if "base_rtt" not in (topology.nic.get("mrc") or {}):  # NSCC's too
        common += ("--engine-opt", f"mrc.base_rtt={rtt:.6g}")
    if topology.routing == "srv6" and "ev_format" not in (topology.nic.get("mrc") or {}):
        # a source-routed fabric: MRC's EVs name whole paths (the path table emu up writes)
        common += ("--engine-opt", "mrc.ev_format=srv6")
    per_host = {h: a + common for h, a in per_host.items()}
    res["base_rtt"] = rtt
    res["line"] = capacity.describe(res) + f"; base RTT {rtt * 1e6:.0f} us"
    return per_host, res, ports


def _switch_plan(node: str, cfg: SwitchConfig, user: bool, time: TimePlan) -> SwitchPlan:
    """A switch's datapath as :func:`emu.switch.kernel.predict` expected it (``user``),
    the reason, its daemon's configuration and its clock.

    The configuration stays in fabric units, as the topology wrote it (rates, delays,
    the PFC quantum): the daemon runs its pipeline on the fabric clock it is given
    (``--time-scale``/``--time-epoch``), so its decisions, counters and ``emu switch
    set`` are all in the fabric's units, and it converts at its two wall boundaries
    itself (a release's wall time; the kernel datapath's tbf and BPF queue at
    ``rate / scale``). Handing it wall units instead would have put the wall in every
    counter it shows and every setting a user changes."""
    datapath = "user" if user else "kernel"
    if cfg.datapath == "user":
        why = "datapath = \"user\" configured"
    elif (needs := kernel.reasons(cfg, cfg.ports)):
        why = "the kernel path cannot serve " + "; ".join(needs)
    elif (missing := kernel.available()) is not None:
        why = f"the kernel path cannot load here: {missing}"
    else:
        why = ("datapath = \"kernel\" configured" if cfg.datapath == "kernel" else
               "auto: the kernel path serves this configuration (tc BPF + tbf)")
    args: tuple[str, ...] = ()
    if time.scale != 1:  # scale 1: the daemon's default clock, real time, as always
        args = ("--time-scale", f"{time.scale:g}", "--time-epoch", f"{time.epoch:.9f}")
    return SwitchPlan(node, datapath, why, cfg.to_dict(), args)


def _ports(topology: Topology, serializers: dict[str, int],
           sources: dict[tuple[str, str], str], cfgs: dict[str, SwitchConfig],
           time: TimePlan) -> list[PortPlan]:
    """Every link direction as the egress port it leaves by."""
    out = []
    for lk in topology.links:
        for label, here, there, d in (("a_to_b", lk.a, lk.b, lk.a_to_b),
                                      ("b_to_a", lk.b, lk.a, lk.b_to_a)):
            serial = serializers.get(f"{lk.name} {label}")
            rate: float | None
            if d.rate_bps:
                rate, src = float(d.rate_bps), "link"
            elif serial:
                rate, src = float(serial), f"line rate ({sources.get((here.node, here.ifname))})"
            else:
                rate, src = None, ""
            pr: float | None = None
            pdelay = 0.0
            if here.node in cfgs:
                pc = cfgs[here.node].ports.get(here.ifname)
                if pc is not None:
                    pr = float(pc.rate) if pc.rate else None
                    pdelay = pc.delay
            out.append(PortPlan(
                link=lk.name, direction=label, node=here.node, ifname=here.ifname,
                peer=f"{there.node}:{there.ifname}", mtu=lk.mtu, rate=rate,
                wall_rate=time.wall_rate(rate), rate_source=src, serializer=bool(serial),
                delay=d.delay_s, wall_delay=time.wall_delay(d.delay_s),
                pipeline_rate=pr, wall_pipeline_rate=time.wall_rate(pr),
                pipeline_delay=pdelay, wall_pipeline_delay=time.wall_delay(pdelay)))
    return out


def wall_model(topology: Topology, plan: Plan) -> Topology:
    """``topology`` as the kernel is to run it: each link direction at the plan's wall
    rate (a host port's line rate where the link has none of its own:
    :func:`emu.credible.rates.serialized`) — none where a switch pipeline's port
    serializes it — and jitter, and no propagation delay — the
    receiving NIC daemons hold each packet for its path's (:mod:`emu.nic.delayline`;
    this kernel may have no netem, and a fabric's nanoseconds are below what netem
    keeps). A copy; the caller's model is left alone."""
    by_dir = {(p.link, p.direction): p for p in plan.ports}
    scaled = plan.time.scale != 1
    links = []
    for lk in topology.links:
        for label in ("a_to_b", "b_to_a"):
            p = by_dir[(lk.name, label)]
            d = getattr(lk, label)
            new = d
            if p.pipeline_rate is not None:
                # the switch pipeline serializes this port (its tbf + BPF queue, or its
                # releases): a link tbf under it would queue unmarked, and the kernel
                # datapath cannot attach where a root qdisc is already
                if d.rate_bps is not None:
                    new = replace(new, rate_bps=None)
            elif p.wall_rate is not None and (p.serializer or scaled):
                new = replace(new, rate_bps=int(p.wall_rate))
            if d.delay_s:
                new = replace(new, delay_s=0.0)
            if scaled and d.jitter_s:  # at scale 1 the model's own values (its JSON too)
                new = replace(new, jitter_s=plan.time.wall_delay(d.jitter_s))
            if new is not d:
                lk = replace(lk, **{label: new})
        links.append(lk)
    return replace(topology, links=links)

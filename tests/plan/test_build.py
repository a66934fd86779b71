# SPDX-License-Identifier: GPL-2.0-only
"""The plan gives every daemon and the fabric exactly what ``emu up`` derived before it.

:func:`_before_the_plan` is a frozen copy of what ``emu.cluster.cluster.up`` (with
``nic_rates`` and ``switch_jobs``) derived from a topology before the plan
existed: the NIC daemons' arguments, the switch daemons' configuration files, the
link serializers, the capacity verdict and the model written to the state file. The
plan must give the same for every shipped topology, as shipped and with the
settings that change what is derived (switch pipeline, datapath, rates, trimming,
engine options). No root, no namespaces.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fabric_util import shipped_real_time

import emu.cluster  # noqa: F401  (registers the [nic]/[switch] checkers)
from emu import plan as P
from emu.credible import capacity, rates
from emu.nic.topology import NIC_TRANSPORTS, coalesce_arg, daemon_args, sched_arg
from emu.switch import topology as switch_topology
from emu.topology.loader import load, loads
from emu.topology.model import Topology
from emu.topology.serialize import to_dict

NS = Path(__file__).resolve().parents[2] / "namespaces"
SHIPPED = sorted(p.name for p in NS.glob("*.toml"))

#: --set lists that change what emu up derives (each also on every shipped file)
VARIANTS: dict[str, list[str]] = {
    "as shipped": [],
    "nic line rate": ["nic.line_rate=300mbit"],
    "link rate": ["link.rate=50mbit"],
    "engine options": ["nic.uet.cc=rccc", "nic.rx_coalesce=off", "nic.sched=slice",
                       "nic.family=6", "nic.roce.line_rate=25gbit"],
    "uet base_rtt given": ["nic.uet.base_rtt=0.001"],
    "switch pipeline": ["switch.pipeline=true"],
    "user datapath": ["switch.pipeline=true", "switch.datapath=user"],
    "switch rate, trim, own DSCPs": ["switch.pipeline=true", "switch.port.rate=1gbit",
                                     "switch.port.trim=true", "switch.trimmed_dscp=20",
                                     "switch.trimmed_lasthop=21", "switch.port.delay=10us"],
}

#: fixed costs, so both paths see the same machine whatever emu doctor measured here
COSTS = capacity.REFERENCE


def _before_the_plan(topology: Topology, costs: capacity.Costs) -> dict[str, Any]:
    """What emu up derived from ``topology`` before the plan (frozen copy, see above)."""
    credible: dict[str, Any] = {}
    per_host: dict[str, tuple[str, ...]] = {}
    serializers: dict[str, int] = {}
    if topology.hosts():
        # emu.cluster.cluster.nic_rates, as it was
        res = capacity.fit(topology, costs)
        ports = rates.host_ports(topology, res["proposed"])
        rtt = rates.base_rtt(topology, ports, capacity.mtu_of(topology),
                             costs.nic_turnaround, costs.switch_turnaround)
        uet = topology.nic.get("uet") or {}
        for p in ports:
            per_host[p.host] = per_host.get(p.host, ()) + ("--line-rate",
                                                           f"{p.ifname}={p.rate:.0f}")
        common: tuple[str, ...] = ("--tx-lead", f"{2e-3:g}", *coalesce_arg(topology.nic),
                                   *sched_arg(topology.nic))
        if topology.nic.get("family") in (4, 6):
            common += ("--family", str(topology.nic["family"]))
        if "base_rtt" not in uet:
            common += ("--engine-opt", f"uet.base_rtt={rtt:.6g}")
        if "base_rtt" not in (topology.nic.get("mrc") or {}):  # since MRC (issue #35)
            common += ("--engine-opt", f"mrc.base_rtt={rtt:.6g}")
        per_host = {h: a + common for h, a in per_host.items()}
        res["base_rtt"] = rtt
        res["line"] = capacity.describe(res) + f"; base RTT {rtt * 1e6:.0f} us"
        credible = res
        serializers = rates.serializers(topology, ports)
        topology = rates.serialized(topology, ports)
    enabled = switch_topology.enabled(topology)
    switch_cfgs = switch_topology.configs(topology) if enabled else {}
    links = []  # since switch ports serialize at their cable's rate: no link tbf under them
    for lk in topology.links:
        for label, end in (("a_to_b", lk.a), ("b_to_a", lk.b)):
            pc = switch_cfgs[end.node].ports.get(end.ifname) if end.node in switch_cfgs else None
            if pc is not None and pc.rate:
                lk = replace(lk, **{label: replace(getattr(lk, label), rate_bps=None)})
        links.append(lk)
    topology = replace(topology, links=links)
    extra: tuple[str, ...] = ("--optional-transports",)
    if switch_cfgs:
        dscps = sorted({d for c in switch_topology.configs(topology).values()
                        for d in (c.trimmed_dscp, c.trimmed_lasthop)})
        extra += tuple(a for d in dscps for a in ("--trimmed-dscp", str(d)))
    transports = [a for t in NIC_TRANSPORTS for a in ("-t", t)]
    nicd = {h.name: [*transports, *extra, *daemon_args(topology.nic), *per_host.get(h.name, ())]
            for h in topology.hosts()}
    return {"nicd": nicd,
            "switchd": {n: json.dumps(c.to_dict(), indent=1) for n, c in switch_cfgs.items()},
            "serializers": serializers, "credible": json.dumps(credible, sort_keys=True),
            "model": json.dumps(to_dict(topology), sort_keys=True)}


def _from_the_plan(topology: Topology, plan: P.Plan) -> dict[str, Any]:
    """The same things, as emu up now takes them from the plan."""
    return {"nicd": {h: list(n.args) for h, n in plan.nics.items()},
            "switchd": {n: json.dumps(s.config, indent=1) for n, s in plan.switches.items()},
            "serializers": plan.serializers,
            "credible": json.dumps(plan.credible, sort_keys=True),
            "model": json.dumps(to_dict(P.wall_model(topology, plan)), sort_keys=True)}


def _real_time(topo: Topology) -> Topology:
    """``topo`` as the world before the plan knew it: real time (``time.scale=1``), no
    ``[latency]`` and no propagation delays — what came with fabric time (the NICs hold
    the path's delay, the kernel none) is tested in test_fabric_plan.py."""
    bare = topo.bare()  # and the link rates the file states, kept
    return replace(bare, links=[replace(b, a_to_b=replace(b.a_to_b, rate_bps=t.a_to_b.rate_bps),
                                        b_to_a=replace(b.b_to_a, rate_bps=t.b_to_a.rate_bps))
                                for b, t in zip(bare.links, topo.links, strict=True)])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", SHIPPED)
def test_the_plan_gives_what_up_derived_before_it(name, variant):
    if name == "pair.toml" and variant.startswith(("switch", "user")):
        pytest.skip("a pair has no switch for a pipeline (the loader refuses it)")
    topo = _real_time(load(NS / name, ["time.scale=1", *VARIANTS[variant]]))
    old = _before_the_plan(topo, COSTS)
    plan = P.build(topo, COSTS)
    new = _from_the_plan(topo, plan)
    for key in old:
        assert new[key] == old[key], key
    # and a plan read back from the state file is the same plan
    assert P.Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_every_shipped_topology_is_covered():
    assert {"pair.toml", "leaf-spine.toml", "rail-optimized.toml",
            "multi-plane.toml"} <= set(SHIPPED)


def test_time_is_real_time_and_wall_units_equal_fabric_units():
    plan = P.build(load(NS / "leaf-spine.toml", ["link.rate=50mbit", "link.delay=1ms",
                                                 "time.scale=1"]), COSTS)
    assert plan.time.scale == 1 and "time scale 1 (real time)" in plan.time.why
    for p in plan.ports:
        assert p.wall_rate == p.rate and p.wall_delay == p.delay
    for n in plan.nics.values():
        assert all(q.wall_rate == q.rate for q in n.ports)


def test_a_scale_changes_wall_units_in_one_place():
    """What time dilation does, checked so the one place stays the one place: wall rate
    = fabric rate / scale, delay x scale, in the ports, the NIC arguments and the model
    the kernel is given. The switch daemons get the fabric's units and the clock (they
    convert at their own wall boundaries: emu.switch.daemon)."""
    topo = loads(shipped_real_time("leaf-spine.toml"), "ls", [
        "switch.pipeline=true", "switch.port.rate=1gbit", "switch.port.delay=10us",
        "link.delay=1ms"])
    plan = P.build(topo, COSTS, time=P.TimePlan(scale=4, why="test"))
    h1 = plan.port("h1", "eth0")
    assert h1 is not None and h1.rate == 1e9 and h1.wall_rate == 250e6
    assert h1.delay == 1e-3 and h1.wall_delay == 4e-3
    args = " ".join(plan.nics["h1"].args)
    assert "eth0=250000000" in args
    # the NIC's transmit lead covers the daemon's own (wall) stalls: wall at every scale
    assert "--tx-lead 0.002" in args
    # the path's delay is held by the receiving NIC, given in fabric seconds (the daemon
    # multiplies by its scale): h2 shares h1's leaf (2 links), h3 and h4 do not (4 links)
    assert "--path-delay *=0.004" in args and "--path-delay 10.0.1.12=0.002" in args
    sw = plan.switches["leaf1"]
    port = sw.config["ports"]["h1"]
    assert port["rate"] == 1_000_000_000 and port["delay"] == pytest.approx(10e-6)
    assert sw.config["pfc_quantum"] == pytest.approx(512e-9)
    assert sw.args == ("--time-scale", "4", "--time-epoch", "0.000000000")
    assert P.Plan.from_dict(plan.to_dict()).switches["leaf1"] == sw
    pp = plan.port("leaf1", "h1")
    assert pp is not None and pp.pipeline_rate == 1e9 and pp.wall_pipeline_rate == 250e6
    wall = P.wall_model(topo, plan)
    lk = next(lk for lk in wall.links if lk.a.node == "h1")
    # the kernel serializes at the wall rate and holds no propagation delay
    assert lk.a_to_b.rate_bps == 250_000_000 and lk.a_to_b.delay_s == 0


def test_a_switch_port_serializes_at_its_cables_rate_unless_told():
    """With the pipeline on and no port rate, every switch port queues (and marks) at its
    link direction's rate — the 400 Gb/s leaf-spine as written, where before the ports
    had no queue and congestion built in the link's tbf, unmarked; a port rate given
    wins, per port, and a link with no rate leaves its port without a queue."""
    plan = P.build(load(NS / "leaf-spine.toml", ["switch.pipeline=true"]), COSTS)
    switch_ports = [p for p in plan.ports if p.node in plan.switches]
    assert switch_ports and all(p.pipeline_rate == 400e9 for p in switch_ports)
    assert all(s.datapath == "kernel" for s in plan.switches.values())
    up = load(NS / "leaf-spine.toml", ["switch.pipeline=true", "switch.port.rate=100gbit",
                                       "link.a_to_b.rate=unlimited"])
    cfgs = switch_topology.configs(up)
    assert {p.rate for c in cfgs.values() for p in c.ports.values()} == {100_000_000_000}
    topo = load(NS / "leaf-spine.toml", ["switch.pipeline=true"])
    for lk in topo.links:
        if lk.a.node.startswith("leaf") and lk.b.node.startswith("spine"):
            lk.a_to_b = replace(lk.a_to_b, rate_bps=None)
    cfgs = switch_topology.configs(topo)
    assert cfgs["leaf1"].ports["spine1"].rate is None  # its cable has no rate either
    assert cfgs["spine1"].ports["leaf1"].rate == 400_000_000_000  # the other direction's


def test_the_plan_says_why_each_switch_takes_its_datapath():
    user = P.build(load(NS / "leaf-spine.toml", ["switch.pipeline=true",
                                                 "switch.datapath=user"]), COSTS)
    assert {s.datapath for s in user.switches.values()} == {"user"}
    assert all("configured" in s.why for s in user.switches.values())
    trim = P.build(load(NS / "leaf-spine.toml", ["switch.pipeline=true",
                                                 "switch.port.trim=true"]), COSTS)
    assert all(s.datapath == "kernel" for s in trim.switches.values())  # BPF trims
    delay = P.build(load(NS / "leaf-spine.toml", ["switch.pipeline=true",
                                                  "switch.port.delay=1us"]), COSTS)
    assert all(s.datapath == "user" and "delay" in s.why for s in delay.switches.values())
    assert P.build(load(NS / "pair.toml"), COSTS).switches == {}


def test_render_shows_every_port_nic_and_switch():
    plan = P.build(load(NS / "leaf-spine.toml", ["switch.pipeline=true", "time.scale=1"]),
                   COSTS)
    text = P.render(plan)
    assert "scale 1" in text and "time scale 1 (real time)" in text
    for p in plan.ports:
        assert f"{p.node}:{p.ifname}" in text
    for h in plan.nics:
        assert f"\n{h} " in text
    for s in plan.switches:
        assert f"\n{s} " in text


def test_the_switch_pipeline_runs_dilated():
    """The switch daemons run on the fabric clock (emu.switch.daemon): at real time their
    arguments are what they always were, dilated they get the plan's clock."""
    topo = load(NS / "leaf-spine.toml", ["switch.pipeline=true", "time.scale=1"])
    assert all(s.args == () for s in P.build(topo, COSTS).switches.values())
    auto = P.build(load(NS / "leaf-spine.toml", ["switch.pipeline=true"]), COSTS)
    assert all(s.args[:2] == ("--time-scale", f"{auto.time.scale:g}")
               for s in auto.switches.values())

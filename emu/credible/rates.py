# SPDX-License-Identifier: GPL-2.0-only
"""What the emulated fabric says each NIC port runs at, and its round trip.

A host port's **line rate**, first that applies:

1. its link's ``rate`` in the direction host → peer (``[defaults.link]`` /
   ``[[link]]``, the ``tbf`` on the wire);
2. the switch pipeline's ``rate`` on the switch port that faces the host
   (``[switch.port]`` / overrides): a NIC and its switch port run at one
   speed, as cables do;
3. ``[nic] line_rate`` (``--set nic.line_rate=1gbit``);
4. the default rate this machine sustains for this topology
   (:func:`emu.credible.capacity.propose`: measured by ``emu doctor``, or
   the built-in costs of the 2-core reference VM).

Each host port's line rate is then also the rate of its link's egress
direction (:func:`serialized`): ``emu up`` puts it in a kernel ``tbf`` on the
host's interface, as for a link ``rate``. The kernel serializes at the line
rate exactly and holds up to ~20 ms, so the NIC daemon may run a few
milliseconds ahead of the wire (``emu nicd --tx-lead``) and a stall of the
daemon shorter than that does not leave the emulated port idle — a NIC's
transmit ring keeps a port busy while its driver is descheduled.

The **base round trip** of a host pair is what the emulated hardware would
take unloaded: per hop, a full frame's serialization at that hop's rate and
the configured delay, there and back with a small ACK, plus the emulator's
own turnaround (two NIC daemons and each switch daemon on the path — the
software that stands in for the NICs' and switches' pipelines, measured by
``emu doctor``). NSCC, RCCC and DCQCN take their constants from it and from
the line rate instead of fixed numbers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from emu.topology.model import Topology

if TYPE_CHECKING:
    from emu.switch.config import SwitchConfig

#: bytes of a small control packet (ACK) on the wire, for the return half of a round trip
ACK_FRAME = 14 + 40 + 8 + 32


@dataclass(frozen=True)
class HostPort:
    """One NIC port: its host, interface, line rate (bits/s) and where that came from."""

    host: str
    ifname: str
    rate: float
    source: str  # "link", "switch", "nic.line_rate", "default"


@dataclass(frozen=True)
class Switching:
    """The switch pipeline as the capacity model needs it, derived from a topology once
    (:func:`switching`): each switch's configuration (empty without a pipeline) and the
    switches whose daemons do per-packet work in user space. Passed to the functions
    here so that one derivation serves them all (``emu.plan``); without it each derives
    its own."""

    configs: dict[str, SwitchConfig]
    user: frozenset[str]


def switching(topo: Topology) -> Switching:
    """``topo``'s switch pipeline (:class:`Switching`)."""
    from emu.switch import topology as sw
    from emu.switch.kernel import predict

    if not sw.enabled(topo):
        return Switching({}, frozenset())
    cfgs = sw.configs(topo)
    return Switching(cfgs, frozenset(n for n, c in cfgs.items() if predict(c) == "user"))


def _switch_port_rates(topo: Topology, switches: Switching | None = None
                       ) -> dict[tuple[str, str], float]:
    """(host, host ifname) → the pipeline rate of the switch port facing it."""
    cfgs = (switches or switching(topo)).configs
    if not cfgs:
        return {}
    out: dict[tuple[str, str], float] = {}
    for lk in topo.links:
        for here, there in ((lk.a, lk.b), (lk.b, lk.a)):
            if topo.nodes[here.node].kind == "host" and there.node in cfgs:
                r = cfgs[there.node].port(there.ifname).rate
                if r:
                    out[(here.node, here.ifname)] = float(r)
    return out


def host_ports(topo: Topology, default: float,
               switches: Switching | None = None) -> list[HostPort]:
    """Every host port with its line rate (rules in the module docstring)."""
    sw = _switch_port_rates(topo, switches)
    nic_rate = topo.nic.get("line_rate")  # bits/s (the loader parsed it)
    out = []
    for lk in topo.links:
        for here, dirn in ((lk.a, lk.a_to_b), (lk.b, lk.b_to_a)):
            if topo.nodes[here.node].kind != "host":
                continue
            if dirn.rate_bps:
                rate, src = float(dirn.rate_bps), "link"
            elif (here.node, here.ifname) in sw:
                rate, src = sw[(here.node, here.ifname)], "switch"
            elif nic_rate:
                rate, src = float(nic_rate), "nic.line_rate"
            else:
                rate, src = float(default), "default"
            out.append(HostPort(here.node, here.ifname, rate, src))
    return out


def serializers(topo: Topology, ports: list[HostPort]) -> dict[str, int]:
    """The line rates :func:`serialized` puts on links, as ``{"LINK a_to_b": bits/s}``:
    each host port's egress direction whose link has no rate of its own. ``emu up``
    records them so that ``emu impair --clear`` takes a link back to its port's
    serializer, not to an unlimited cable (the port is not an impairment)."""
    rate = {(p.host, p.ifname): p.rate for p in ports if p.source != "link"}
    out: dict[str, int] = {}
    for lk in topo.links:
        for label, end, d in (("a_to_b", lk.a, lk.a_to_b), ("b_to_a", lk.b, lk.b_to_a)):
            r = rate.get((end.node, end.ifname))
            if r and not d.rate_bps:
                out[f"{lk.name} {label}"] = int(r)
    return out


def serialized(topo: Topology, ports: list[HostPort]) -> Topology:
    """``topo`` with each host port's line rate on its link's egress direction where the
    link has no rate of its own (:func:`serializers`; a copy: the caller's model is left
    alone)."""
    rates = serializers(topo, ports)
    links = []
    for lk in topo.links:
        for label in ("a_to_b", "b_to_a"):
            r = rates.get(f"{lk.name} {label}")
            if r:
                lk = replace(lk, **{label: replace(getattr(lk, label), rate_bps=r)})
        links.append(lk)
    return replace(topo, links=links)


def longest_path(topo: Topology) -> list[tuple[str, str]]:
    """The host-to-host shortest path with the most hops (the fabric's diameter), as
    ``(node, ifname it leaves by)`` per hop; empty with fewer than two hosts. One BFS
    per host-facing attachment point, so big fabrics stay cheap."""
    adj: dict[str, list[tuple[str, str]]] = {n: [] for n in topo.nodes}
    for lk in topo.links:
        if lk.up:
            adj[lk.a.node].append((lk.b.node, lk.a.ifname))
            adj[lk.b.node].append((lk.a.node, lk.b.ifname))
    starts: dict[frozenset[str], str] = {}
    for h in topo.hosts():
        starts.setdefault(frozenset(n for n, _ in adj[h.name]), h.name)
    best: list[tuple[str, str]] = []
    for src in starts.values():
        prev: dict[str, tuple[str, str]] = {}
        seen = {src}
        q = deque([src])
        far = src
        while q:
            n = q.popleft()
            if topo.nodes[n].kind == "host" and n != src:
                far = n  # BFS order: the last host reached is the farthest
                continue  # hosts do not forward
            for m, ifname in adj[n]:
                if m not in seen:
                    seen.add(m)
                    prev[m] = (n, ifname)
                    q.append(m)
        path: list[tuple[str, str]] = []
        n = far
        while n != src:
            p, ifname = prev[n]
            path.append((p, ifname))
            n = p
        if len(path) > len(best):
            best = path[::-1]
    return best


def _hop_rate(topo: Topology, node: str, ifname: str, ports: dict[tuple[str, str], float],
              sw_rates: dict[tuple[str, str], float]) -> tuple[float, float]:
    """(rate bits/s, one-way delay s) of the hop leaving ``node`` by ``ifname``."""
    for lk in topo.links:
        for here, dirn in ((lk.a, lk.a_to_b), (lk.b, lk.b_to_a)):
            if here.node == node and here.ifname == ifname:
                rate = dirn.rate_bps or ports.get((node, ifname)) or sw_rates.get((node, ifname))
                return float(rate or 0.0), dirn.delay_s
    return 0.0, 0.0


def base_rtt(topo: Topology, ports: list[HostPort], mtu: int, nic_turnaround: float,
             switch_turnaround: float, switches: Switching | None = None,
             path: list[tuple[str, str]] | None = None) -> float:
    """The unloaded round trip (seconds) of the longest host-to-host path: a full frame
    there, an ACK back, serialization and delay per hop, the ``[latency]`` of each NIC
    and switch (:func:`path_delay`), plus the emulator's turnaround
    (``nic_turnaround`` for the two NIC daemons together, ``switch_turnaround`` per
    switch daemon on the path, there and back). ``switches``, ``path``: as derived
    already (:func:`switching`, :func:`longest_path`)."""
    switches = switches or switching(topo)
    path = longest_path(topo) if path is None else path
    by_port = {(p.host, p.ifname): p.rate for p in ports}
    sw_rates: dict[tuple[str, str], float] = {}
    for name, cfg in switches.configs.items():
        for ifname, pc in cfg.ports.items():
            if pc.rate:
                sw_rates[(name, ifname)] = float(pc.rate)
    t = nic_turnaround + 4 * topo.latency.get("nic", 0.0)  # each NIC, there and back
    frame = mtu + 14
    user = switches.user
    fwd = topo.latency.get("switch", 0.0)
    for node, ifname in path:
        rate, delay = _hop_rate(topo, node, ifname, by_port, sw_rates)
        if rate:
            t += (frame + ACK_FRAME) * 8 / rate
        t += 2 * delay
        if topo.nodes[node].kind == "switch":
            t += 2 * fwd
        if node in user:
            t += 2 * switch_turnaround
    return t


def path_delay(topo: Topology, path: list[str], latency: dict[str, float] | None = None,
               links: dict[tuple[str, str], float] | None = None) -> float:
    """The fixed one-way delay (seconds) of a host-to-host path given as its nodes in
    order: each link's propagation ``delay`` in the direction travelled, each switch's
    forwarding latency and each end NIC's (``[latency]``). What a receiving NIC daemon
    holds a packet for (:mod:`emu.nic.delayline`); serialization and queueing are the
    kernel's and the switches' doing and are not part of it. ``links``:
    :func:`link_delays` of ``topo``, made once by a caller asking for many paths."""
    lat = topo.latency if latency is None else latency
    links = link_delays(topo) if links is None else links
    t = 2 * lat.get("nic", 0.0)
    for i, (here, there) in enumerate(zip(path, path[1:], strict=False)):
        if i and topo.nodes[here].kind == "switch":
            t += lat.get("switch", 0.0)
        t += links.get((here, there), 0.0)
    return t


def link_delays(topo: Topology) -> dict[tuple[str, str], float]:
    """``(from, to)`` → the smallest propagation delay of an up link that way (parallel
    cables: the kernel may take any; they are built alike). One pass over the links: a
    scan per hop made the plan of a 256-host leaf-spine take 3 s."""
    out: dict[tuple[str, str], float] = {}
    for lk in topo.links:
        if not lk.up:
            continue
        for key, d in (((lk.a.node, lk.b.node), lk.a_to_b.delay_s),
                       ((lk.b.node, lk.a.node), lk.b_to_a.delay_s)):
            out[key] = min(out.get(key, d), d)
    return out


def host_paths(topo: Topology) -> dict[tuple[str, str], list[str]]:
    """(source host, destination host) → the nodes of one shortest path between them
    (BFS over up links; hosts do not forward). Equal-cost paths of a Clos have the same
    hops and, built alike, the same delays, so one stands for all."""
    adj: dict[str, list[str]] = {n: [] for n in topo.nodes}
    for lk in topo.links:
        if lk.up:
            adj[lk.a.node].append(lk.b.node)
            adj[lk.b.node].append(lk.a.node)
    out: dict[tuple[str, str], list[str]] = {}
    for src in (h.name for h in topo.hosts()):
        prev: dict[str, str] = {}
        seen = {src}
        q = deque([src])
        while q:
            n = q.popleft()
            if n != src and topo.nodes[n].kind == "host":
                continue
            for m in sorted(adj[n]):
                if m not in seen:
                    seen.add(m)
                    prev[m] = n
                    q.append(m)
        for dst in (h.name for h in topo.hosts()):
            if dst == src or dst not in prev:
                continue
            p = [dst]
            while p[-1] != src:
                p.append(prev[p[-1]])
            out[(src, dst)] = p[::-1]
    return out

# SPDX-License-Identifier: GPL-2.0-only
"""The in-memory model of a cluster: what the topology files produce and the fabric builds.

Pure data, no I/O. Everything the fabric needs is resolved here — node names,
interface names (≤ 15 characters, unique per node), addresses, per-direction
link settings — so that building is a mechanical walk and two builds of the
same file are identical.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass, field
from typing import Literal

NodeKind = Literal["host", "switch"]

#: Linux's IFNAMSIZ - 1
MAX_IFNAME = 15
#: the seed of every link direction's impairments unless a file or ``--set link.seed=N``
#: says otherwise (:class:`Direction`)
DEFAULT_SEED = 1


class TopologyError(ValueError):
    """A topology file or parameter that cannot describe a cluster.

    ``where`` names the file (and line or key) so the message reads
    ``"namespaces/leaf-spine.toml: links[3].b: unknown node 'leaf9'"``.
    """

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")


@dataclass
class Direction:
    """What one direction of a link does to packets (egress of the sending side).

    ``rate_bps`` None = unlimited. ``loss``, ``ecn_ce`` and ``duplicate`` are
    probabilities in [0, 1] (``duplicate``: each packet is sent twice with that
    probability; a duplicate is never duplicated again). ``delay_s``/``jitter_s``
    need netem (feature-detected by the fabric; refused with a clear error where
    the kernel lacks it).

    ``seed`` decides *which* packets those probabilities pick: a number picks them
    by their order on the link from a pseudo-random sequence of that seed (and the
    link's name and direction), so a run repeated — at another time scale, or
    tomorrow — loses, marks and duplicates the same ordinals, as a simulator's seeded
    run does (the same packets where the traffic is the same sequence; RoCEv2's, which
    follows time, is not: :mod:`emu.fabric.nftrules`); None ("random") leaves the draw
    to the kernel, different every run. Why seeded by default: the pattern, not the
    kernel's draw, is then part of the experiment, and one that varies the seed on
    purpose says so.
    """

    rate_bps: int | None = None
    loss: float = 0.0
    ecn_ce: float = 0.0
    delay_s: float = 0.0
    jitter_s: float = 0.0
    duplicate: float = 0.0
    seed: int | None = DEFAULT_SEED

    def is_default(self) -> bool:
        """No impairment: the seed alone changes nothing on the wire."""
        return dataclasses.replace(self, seed=DEFAULT_SEED) == Direction()


@dataclass
class Endpoint:
    """One end of a link: the node, its interface name there, and its addresses."""

    node: str
    ifname: str
    ipv4: ipaddress.IPv4Interface | None = None
    ipv6: ipaddress.IPv6Interface | None = None


@dataclass
class Link:
    """A cable: two endpoints, an MTU, and what each direction does.

    ``name`` is how users refer to it (``emu link h1:leaf1 down``, capture
    interface names): ``"<a.node>-<b.node>"`` plus ``#k`` for the k-th
    parallel link between the same pair.
    """

    name: str
    a: Endpoint
    b: Endpoint
    mtu: int = 9000
    a_to_b: Direction = field(default_factory=Direction)
    b_to_a: Direction = field(default_factory=Direction)
    plane: int | None = None
    up: bool = True

    def end(self, node: str) -> Endpoint:
        """The endpoint on ``node``."""
        if self.a.node == node:
            return self.a
        if self.b.node == node:
            return self.b
        raise KeyError(f"link {self.name} does not touch {node}")

    def peer(self, node: str) -> Endpoint:
        """The endpoint opposite ``node``."""
        return self.b if self.a.node == node else self.a


@dataclass
class Node:
    """A host (runs a NIC daemon) or a switch (forwards). ``role`` is leaf/spine/rail/…"""

    name: str
    kind: NodeKind
    role: str = ""
    plane: int | None = None
    #: loopback / router-id addresses (switches), used for SRv6 locators
    loopback4: ipaddress.IPv4Address | None = None
    loopback6: ipaddress.IPv6Address | None = None
    #: 16-bit SRv6 micro-SID (switches 0x0001.., hosts 0x8000+n); see emu/topology/addressing.py
    usid: int | None = None
    #: SRv6 uSID locator fc00:0:<usid>::/48 (32-bit block fc00:0000 + the 16-bit uSID)
    locator6: ipaddress.IPv6Network | None = None


@dataclass
class Event:
    """A scheduled change: ``at`` seconds after ``emu up`` finishes, do ``action`` on ``target``.

    ``action`` is ``down``/``up`` (a link, a switch, or ``plane:<n>``) or
    ``impair`` with ``settings`` ({"loss": 0.01, …}, optionally "direction").
    """

    at_s: float
    action: str
    target: str
    settings: dict[str, object] = field(default_factory=dict)


@dataclass
class Topology:
    """A whole cluster, resolved and validated."""

    name: str
    source: str
    nodes: dict[str, Node] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    params: dict[str, object] = field(default_factory=dict)
    #: ECMP hash seed (fib_multipath_hash_seed) where the kernel has it; None = kernel default
    hash_seed: int | None = None
    #: "ecmp" (kernel multipath routing) or "srv6" (source-routed planes)
    routing: str = "ecmp"
    #: which datapath serves SRv6 (``[routing] srv6``): "auto" (the kernel's seg6local
    #: where it has it, else tc BPF), "kernel" or "bpf" (emu.fabric.routes.Srv6Path)
    srv6: str = "auto"
    #: the file's ``[switch]`` table, validated (see :mod:`emu.switch.topology`)
    switch: dict[str, object] = field(default_factory=dict)
    #: the file's ``[nic]`` table: engine options per transport (see :mod:`emu.nic.topology`)
    nic: dict[str, dict[str, object]] = field(default_factory=dict)
    #: the file's ``[time]`` table (DESIGN.md, Fabric time): ``scale`` (wall seconds per
    #: fabric second: a number >= 1 or "auto", the default), ``senders``, ``overhead``
    #: (what "auto" aims for: :func:`emu.plan.scale.choose`)
    time: dict[str, object] = field(default_factory=dict)
    #: the file's ``[latency]`` table, seconds of fabric time: ``nic`` (one NIC's pipeline,
    #: per packet, at each end) and ``switch`` (one switch's port-to-port forwarding);
    #: the NIC daemons hold each packet for its path's total (emu.nic.delayline)
    latency: dict[str, float] = field(default_factory=dict)
    #: what the file asks for: a generator's kind (``leaf-spine`` …) or ``custom``; "" for a
    #: model built in code
    kind: str = ""
    #: the topology's own name: its file's ``[topology] name``, else the file's stem. ``name``
    #: is the cluster's, which ``emu up --name`` changes; this one it leaves alone
    declared_name: str = ""

    def bare(self) -> Topology:
        """This topology's shape alone: a copy whose links have no rate or propagation
        delay of their own and no ``[latency]`` (loss, ECN, MTU and the rest kept). For
        what measures emu itself rather than a fabric (the per-packet benchmarks, a bare
        build against Mininet's) and for tests of rules about rates left unstated."""
        links = [dataclasses.replace(
            lk, a_to_b=dataclasses.replace(lk.a_to_b, rate_bps=None, delay_s=0.0),
            b_to_a=dataclasses.replace(lk.b_to_a, rate_bps=None, delay_s=0.0))
            for lk in self.links]
        return dataclasses.replace(self, links=links, latency={})

    def hosts(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == "host"]

    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == "switch"]

    def links_of(self, node: str) -> list[Link]:
        return [lk for lk in self.links if node in (lk.a.node, lk.b.node)]

    def host_address(self, node: str, plane: int | None = None, family: int | None = None
                     ) -> str:
        """``node``'s first IPv4 address (IPv6 if it has none; ``family`` 6: IPv6 first),
        on ``plane``'s port when given; ValueError naming what is wrong (no such node, a
        switch, no address)."""
        if node not in self.nodes:
            raise ValueError(f"no node {node!r} in cluster {self.name!r}")
        if self.nodes[node].kind != "host":
            raise ValueError(f"{node} is a switch, not a host")
        ends = [lk.end(node) for lk in self.links_of(node)
                if plane is None or (lk.plane or 0) == plane]
        for fam in (("ipv6", "ipv4") if family == 6 else ("ipv4", "ipv6")):
            for e in ends:
                ip = getattr(e, fam)
                if ip is not None:
                    return str(ip.ip)
        where = "" if plane is None else f" on plane {plane}"
        raise ValueError(f"{node} has no address{where}")

    def link(self, spec: str) -> Link:
        """Find a link by name (``h1-leaf1``) or by ``A:B`` (either order; first of parallels)."""
        for lk in self.links:
            if lk.name == spec:
                return lk
        if ":" in spec:
            x, y = spec.split(":", 1)
            for lk in self.links:
                if {lk.a.node, lk.b.node} == {x, y}:
                    return lk
        raise KeyError(f"no link {spec!r} in cluster {self.name}")

# SPDX-License-Identifier: GPL-2.0-only
"""Generators: a few integers → the nodes and links of a standard fabric.

Naming (stable, so scripts and ``--set`` overrides can refer to things):

* hosts ``h1``..``hN`` (numbered across the cluster, leaf by leaf);
* leaf-spine: ``leaf1``.., ``spine1``..;
* rail-optimized: ``rail1``..``railR`` (one switch per NIC rail), ``spine1``..;
* multi-plane: plane-qualified switches ``p0-leaf1``, ``p0-spine1``,
  ``p1-leaf1``… (planes count from 0; hosts are shared by all planes);
* interfaces: a host's ports are ``eth0``, ``eth1``… in link order (on a
  multi-plane host ``eth<p>`` is its port in plane ``p``; on a rail host
  ``eth<r-1>`` is its port on rail ``r``); a switch's port is named after the
  peer node (on ``leaf1`` the port to ``spine1`` is ``spine1``);
* links ``"<a>-<b>"`` with the lower layer as ``a`` (host→leaf, leaf→spine),
  so ``a_to_b`` is the upward direction. Parallel links between the same two
  nodes are all suffixed: ``leaf1-spine1#1``, ``leaf1-spine1#2``, and their
  switch-side ports ``spine1_1``, ``spine1_2`` (``_`` never occurs in node
  names, so such a port name cannot collide with a peer's name).

Generators return an unaddressed :class:`Topology`; the loader applies link
settings and :mod:`emu.topology.addressing` resolves addresses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from emu.topology.model import Endpoint, Link, Node, Topology

__all__ = [
    "Builder", "Generator", "GENERATORS",
    "pair", "leaf_spine", "rail_optimized", "multi_plane",
]


@dataclass
class _PendingLink:
    a: str
    b: str
    plane: int | None
    a_if: str | None
    b_if: str | None


@dataclass
class Builder:
    """Collects nodes and links, then names interfaces and parallel links in one pass.

    Naming is deferred to :meth:`build` because a parallel link's suffix needs
    the final count of links between the same pair. Explicit interface names
    (custom topologies) are kept as given.
    """

    nodes: dict[str, Node] = field(default_factory=dict)
    pending: list[_PendingLink] = field(default_factory=list)

    def node(self, name: str, kind: str, role: str = "", plane: int | None = None) -> None:
        self.nodes[name] = Node(name=name, kind=kind, role=role, plane=plane)  # type: ignore[arg-type]

    def link(self, a: str, b: str, plane: int | None = None,
             a_if: str | None = None, b_if: str | None = None) -> None:
        self.pending.append(_PendingLink(a, b, plane, a_if, b_if))

    def build(self, name: str = "generated") -> Topology:
        counts: dict[frozenset[str], int] = {}
        for p in self.pending:
            key = frozenset((p.a, p.b))
            counts[key] = counts.get(key, 0) + 1
        seen: dict[frozenset[str], int] = {}
        host_ports: dict[str, int] = {}
        links: list[Link] = []
        for p in self.pending:
            key = frozenset((p.a, p.b))
            seen[key] = k = seen.get(key, 0) + 1
            parallel = counts[key] > 1
            ends = []
            for me, peer, given in ((p.a, p.b, p.a_if), (p.b, p.a, p.b_if)):
                ifname = given if given is not None else self._ifname(me, peer, host_ports)
                if given is None and parallel and not self._is_host(me):
                    ifname = f"{ifname}_{k}"
                ends.append(Endpoint(node=me, ifname=ifname))
            lname = f"{p.a}-{p.b}" + (f"#{k}" if parallel else "")
            links.append(Link(name=lname, a=ends[0], b=ends[1], plane=p.plane))
        return Topology(name=name, source="<generated>", nodes=dict(self.nodes), links=links)

    def _is_host(self, node: str) -> bool:
        n = self.nodes.get(node)
        return n is not None and n.kind == "host"

    def _ifname(self, me: str, peer: str, host_ports: dict[str, int]) -> str:
        """Hosts number their ports eth0, eth1…; switches name a port after the peer."""
        if self._is_host(me):
            n = host_ports.get(me, 0)
            host_ports[me] = n + 1
            return f"eth{n}"
        return peer


def pair(links: int = 1) -> Topology:
    """Two hosts back to back (``h1-h2``); ``links`` > 1 adds parallel cables."""
    b = Builder()
    b.node("h1", "host", "host")
    b.node("h2", "host", "host")
    for _ in range(links):
        b.link("h1", "h2")
    return b.build("pair")


def leaf_spine(spines: int = 2, leaves: int = 2, hosts_per_leaf: int = 2,
               uplinks: int = 1) -> Topology:
    """A two-tier Clos: every leaf to every spine (``uplinks`` cables each), hosts under leaves."""
    b = Builder()
    _plane(b, None, "", spines, leaves, hosts_per_leaf, uplinks, add_hosts=True)
    return b.build("leaf-spine")


def rail_optimized(hosts: int = 4, rails: int = 2, spines: int = 2, uplinks: int = 1) -> Topology:
    """Hosts with ``rails`` NICs; NIC ``r`` of every host goes to rail switch ``rail<r>``.

    Rail switches are the leaf layer; every rail switch connects to every spine,
    so traffic between different rails crosses a spine.
    """
    b = Builder()
    for h in range(1, hosts + 1):
        b.node(f"h{h}", "host", "host")
    for r in range(1, rails + 1):
        b.node(f"rail{r}", "switch", "rail")
    for s in range(1, spines + 1):
        b.node(f"spine{s}", "switch", "spine")
    for h in range(1, hosts + 1):
        for r in range(1, rails + 1):
            b.link(f"h{h}", f"rail{r}")
    for r in range(1, rails + 1):
        for s in range(1, spines + 1):
            for _ in range(uplinks):
                b.link(f"rail{r}", f"spine{s}")
    return b.build("rail-optimized")


def multi_plane(planes: int = 2, spines: int = 2, leaves: int = 2, hosts_per_leaf: int = 2,
                uplinks: int = 1) -> Topology:
    """``planes`` independent leaf-spines; host port ``eth<p>`` is in plane ``p``.

    Every host has one port per plane and sits under leaf ``p<p>-leaf<L>`` of
    the same index ``L`` in every plane, so planes are identical copies.
    """
    b = Builder()
    for h in range(1, leaves * hosts_per_leaf + 1):
        b.node(f"h{h}", "host", "host")
    for p in range(planes):
        _plane(b, p, f"p{p}-", spines, leaves, hosts_per_leaf, uplinks, add_hosts=False)
    # host links in host order so each host's eth<p> is its plane-p port
    b.pending.sort(key=lambda pl: 0 if b.nodes[pl.a].kind == "host" else 1)
    return b.build("multi-plane")


def _plane(b: Builder, plane: int | None, prefix: str, spines: int, leaves: int,
           hosts_per_leaf: int, uplinks: int, add_hosts: bool) -> None:
    """One leaf-spine (a whole fabric, or one plane of a multi-plane one)."""
    if add_hosts:
        for h in range(1, leaves * hosts_per_leaf + 1):
            b.node(f"h{h}", "host", "host")
    for leaf in range(1, leaves + 1):
        b.node(f"{prefix}leaf{leaf}", "switch", "leaf", plane)
    for s in range(1, spines + 1):
        b.node(f"{prefix}spine{s}", "switch", "spine", plane)
    for leaf in range(1, leaves + 1):
        for i in range(hosts_per_leaf):
            h = (leaf - 1) * hosts_per_leaf + i + 1
            b.link(f"h{h}", f"{prefix}leaf{leaf}", plane)
    for leaf in range(1, leaves + 1):
        for s in range(1, spines + 1):
            for _ in range(uplinks):
                b.link(f"{prefix}leaf{leaf}", f"{prefix}spine{s}", plane)


@dataclass(frozen=True)
class Param:
    """One generator parameter: default and inclusive range (checked by the loader)."""

    default: int
    lo: int
    hi: int
    doc: str


@dataclass(frozen=True)
class Size:
    """How big a topology is, known from its parameters before it is generated."""

    hosts: int
    switches: int
    links: int
    #: ``[nic] workers`` as written ("auto", "host" or a number; :mod:`emu.nic.topology`)
    nic_workers: object = "auto"


@dataclass(frozen=True)
class Generator:
    """A topology kind: its function, the ``[params]`` it accepts, and its size from them
    (so a topology too big for the machine is refused before it is generated)."""

    func: Callable[..., Topology]
    params: dict[str, Param]
    size: Callable[..., Size]


def _clos_size(spines: int, leaves: int, hosts_per_leaf: int, uplinks: int,
               planes: int = 1) -> Size:
    hosts = leaves * hosts_per_leaf
    return Size(hosts, planes * (leaves + spines),
                planes * (hosts + leaves * spines * uplinks))


_UPLINKS = Param(1, 1, 8, "parallel cables between each leaf/rail and each spine")
_SPINES = Param(2, 1, 64, "spine switches (per plane)")
_LEAVES = Param(2, 1, 255, "leaf switches (per plane): the address plan's 255 host subnets")
_HPL = Param(2, 1, 240, "hosts under each leaf")

GENERATORS: dict[str, Generator] = {
    "pair": Generator(pair, {"links": Param(1, 1, 8, "parallel cables between h1 and h2")},
                      lambda links: Size(2, 0, links)),
    "leaf-spine": Generator(leaf_spine, {
        "spines": _SPINES, "leaves": _LEAVES, "hosts_per_leaf": _HPL, "uplinks": _UPLINKS},
        _clos_size),
    "rail-optimized": Generator(rail_optimized, {
        "hosts": Param(4, 1, 240, "hosts (each with one NIC port per rail)"),
        "rails": Param(2, 1, 16, "NIC rails = rail switches"),
        "spines": _SPINES, "uplinks": _UPLINKS},
        lambda hosts, rails, spines, uplinks: Size(hosts, rails + spines,
                                                   hosts * rails + rails * spines * uplinks)),
    "multi-plane": Generator(multi_plane, {
        "planes": Param(2, 1, 16, "planes (host NIC ports)"),
        "spines": _SPINES, "leaves": _LEAVES, "hosts_per_leaf": _HPL, "uplinks": _UPLINKS},
        lambda planes, **kw: _clos_size(planes=planes, **kw)),
}

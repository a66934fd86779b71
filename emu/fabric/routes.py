# SPDX-License-Identifier: GPL-2.0-only
"""What every namespace gets: sysctls, addresses, ECMP routes, SRv6 SIDs, rules — as data.

The plan is computed from the :class:`Topology` graph alone, so it is the same
for leaf-spine, rail-optimized and multi-plane files and needs no knowledge of
the address plan beyond the endpoint addresses:

* **Destinations** are the subnets of every link (both families) and every
  node's loopbacks (``/32``, ``/128``; in SRv6 mode the ``loopback6/48``
  uSID locator instead of ``/128``).
* **Switches** route every destination they are not attached to along all
  shortest paths (BFS where only switches are transit nodes), as one
  RTA_MULTIPATH route per destination, so the kernel's ECMP hash (policy 1:
  5-tuple, i.e. the UDP source port) picks the path.
* **Hosts with one port** get a default route (IPv4 and IPv6) via the switch
  on that port. **Hosts with several ports** (rails, planes) get per-destination
  shortest-path routes in the main table (for unbound sockets) plus one table
  per port (``100 + i``: default via that port's switch) selected by a rule
  ``from <port address>`` — a socket bound to a port's address always leaves by
  that port, as a multi-rail NIC does, and never crosses to another plane.
* **Shared host subnets** (an anycast gateway: the same switch address and
  subnet on several host ports, as ``emu.topology.addressing`` plans them):
  those addresses get ``IFA_F_NOPREFIXROUTE`` on both sides; the switch
  reaches each host by a ``/32`` / ``/128`` route on its port and the host
  reaches the gateway by a ``/32`` / ``/128`` on its port, then everything
  else (its subnet neighbours too) via the gateway — no proxy ARP/NDP needed.
* **SRv6** (``topology.routing == "srv6"``): every node with ``loopback6``
  owns the locator ``loopback6/48`` (32-bit block + 16-bit uSID). Locators are
  routed like any destination, so a packet whose destination is
  ``fc00:0:<spine>:<leaf>:<host>::`` is steered hop by hop, and a classic SRH
  with one SID per hop works too. Two datapaths serve the SIDs
  (:class:`Srv6Path`, chosen by ``[routing] srv6`` and the kernel, see below):

  - **switches, kernel** (``srv6 = "kernel"``, or ``"auto"`` where
    :func:`emu.fabric.linkctl.features` finds ``seg6local``): ``seg6local End``
    with the NEXT-C-SID flavor (lblen 32, nflen 16), the kernel's uSID shift,
    on an internal veth ``sid0`` (see :data:`SID_DEV`); End falls back to SRH
    processing when the container is exhausted;
  - **switches, BPF** (``srv6 = "bpf"``, or ``"auto"`` on a kernel without
    ``CONFIG_IPV6_SEG6_LWTUNNEL``): no SIDs, no ``sid0``, no ``seg6`` sysctls;
    a tc program on every port's ingress hook (:mod:`emu.fabric.srv6bpf`,
    ``bpf/srv6.bpf.c``) shifts the uSIDs of a packet addressed to the switch's
    locator (IPv6-in-IPv6 or SRH packets only: a bare UDP packet's checksum
    covers the destination) or, the container exhausted, does classic SRH End
    (Segments Left − 1, destination = Segment List[SL]); the kernel routes the
    result;
  - **hosts, always BPF where it can run**: the decap program on every host
    port removes the outer header (and a Segments-Left-0 SRH) of a packet to
    the host's locator and hands the inner packet up, combining ECN per
    RFC 6040 (outer CE → inner CE; outer CE on a Not-ECT inner packet: drop).
    The kernel's ``End.DT6`` copies nothing from the outer header
    (``net/ipv6/seg6_local.c``, ``decap_and_validate``), so a CE mark a switch
    set on the outer header would never reach the receiver's transport;
    decapsulation is the NIC's job anyway. Only where the BPF path cannot run
    (no clang or tc) and the kernel has ``seg6local`` do hosts get
    ``End.DT6 table 255`` — with a warning that CE is lost.

  The BPF path approximates: the SRH must directly follow the IPv6 header, no
  HMAC is checked, only IPv6 payloads are decapsulated (single-segment SRH
  decap: Segments Left 0), no PSP/USP flavors.

  :func:`srv6_paths` is the controller's path table for one host: the uSID
  containers of every shortest path to every other host's port address.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass, field
from typing import TypedDict

from emu.topology.model import Link, Topology

Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Addr = ipaddress.IPv4Address | ipaddress.IPv6Address
#: (local ifname, gateway or None)
Hop = tuple[str, Addr | None]

HOST_PORT_TABLE = 100
#: SRv6 SIDs hang off an internal veth pair (both ends in the node's namespace, so its
#: carrier never drops). Not ``lo``: IPv6 turns routes via loopback into reject routes;
#: not a fabric port: a port set down would take its routes — the SIDs — with it; this
#: kernel has no dummy or vrf devices.
SID_DEV, SID_PEER = "sid0", "sid1"
USID_LBLEN, USID_NFLEN = 32, 16
#: uSIDs a container holds after the 32-bit block (96 bits / 16)
USID_MAX = (128 - USID_LBLEN) // USID_NFLEN
SRV6_SETTINGS = ("auto", "kernel", "bpf")


@dataclass(frozen=True)
class Srv6Path:
    """Which datapath serves SRv6 on switches and on hosts: ``kernel`` (seg6local SIDs:
    ``End`` + NEXT-C-SID, ``End.DT6``) or ``bpf`` (:mod:`emu.fabric.srv6bpf`). The
    default is what a kernel with seg6local gets: the kernel's uSID shift on switches,
    the BPF decap (ECN per RFC 6040) on hosts."""

    switch: str = "kernel"
    host: str = "bpf"

    @property
    def name(self) -> str:
        """What ``emu status`` calls it: the switches' datapath (``kernel`` | ``bpf``)."""
        return self.switch

    def uses_bpf(self) -> bool:
        return "bpf" in (self.switch, self.host)

    def describe(self) -> str:
        sw = ("kernel seg6local End (NEXT-C-SID)" if self.switch == "kernel"
              else "tc BPF uSID shift")
        host = ("tc BPF decap (ECN per RFC 6040)" if self.host == "bpf"
                else "kernel End.DT6 (outer CE not copied)")
        return f"{self.switch} datapath: switches {sw}, hosts {host}"


@dataclass
class NodePlan:
    """Everything to configure inside one namespace, in apply order."""

    name: str
    sysctls: dict[str, object] = field(default_factory=dict)
    #: (ifname, mtu, up)
    ifaces: list[tuple[str, int, bool]] = field(default_factory=list)
    #: (ifname or "lo", address, no prefix route)
    addresses: list[tuple[str, ipaddress.IPv4Interface | ipaddress.IPv6Interface, bool]] = \
        field(default_factory=list)
    #: (destination, nexthops, table)
    routes: list[tuple[Net, list[Hop], int]] = field(default_factory=list)
    #: (locator, action, table, next_csid)
    sids: list[tuple[ipaddress.IPv6Network, str, int | None, bool]] = field(default_factory=list)
    #: (source address, table, priority)
    rules: list[tuple[Addr, int, int]] = field(default_factory=list)


def sysctls_for(topology: Topology, is_switch: bool, seg6: bool | None = None
                ) -> dict[str, object]:
    """Per-namespace sysctls. Written before the veths exist, so ``default`` reaches them.

    rp_filter off (ECMP return paths differ from forward paths), linkdown
    nexthops ignored (a downed cable takes its ECMP member out at once), IPv6
    addresses kept across link down/up, L4 multipath hashing, forwarding on
    switches only; ``seg6_enabled`` where the node has kernel SRv6 SIDs (``seg6``;
    None: wherever ``routing`` is ``srv6``).
    """
    s: dict[str, object] = {
        "net.ipv4.conf.all.rp_filter": 0,
        "net.ipv4.conf.default.rp_filter": 0,
        "net.ipv4.fib_multipath_hash_policy": 1,
        "net.ipv6.fib_multipath_hash_policy": 1,
        "net.ipv4.conf.all.ignore_routes_with_linkdown": 1,
        "net.ipv4.conf.default.ignore_routes_with_linkdown": 1,
        "net.ipv6.conf.all.ignore_routes_with_linkdown": 1,
        "net.ipv6.conf.default.ignore_routes_with_linkdown": 1,
        "net.ipv6.conf.all.keep_addr_on_down": 1,
        "net.ipv6.conf.default.keep_addr_on_down": 1,
        "net.ipv6.conf.all.accept_dad": 0,
        "net.ipv6.conf.default.accept_dad": 0,
        "net.ipv4.ip_forward": 1 if is_switch else 0,
        "net.ipv6.conf.all.forwarding": 1 if is_switch else 0,
    }
    if topology.hash_seed is not None:
        s["net.ipv4.fib_multipath_hash_seed"] = topology.hash_seed
    if (topology.routing == "srv6") if seg6 is None else seg6:
        s["net.ipv6.conf.all.seg6_enabled"] = 1
        s["net.ipv6.conf.default.seg6_enabled"] = 1
    return s


@dataclass
class _Dest:
    net: Net
    attached: frozenset[str]
    #: nodes from which BFS may leave although they are hosts (a host's own loopback)
    owner_host: str | None = None
    #: the BFS cache key (switch attachments, owner), filled in by plan()
    key: tuple[frozenset[str], str | None] | None = None


def _destinations(topology: Topology) -> list[_Dest]:
    dests: dict[Net, set[str]] = {}
    owner: dict[Net, str] = {}
    for lk in topology.links:
        for ep in (lk.a, lk.b):
            for iface in (ep.ipv4, ep.ipv6):
                if iface is not None:
                    dests.setdefault(iface.network, set()).add(ep.node)
    srv6 = topology.routing == "srv6"
    for n in topology.nodes.values():
        nets: list[Net] = []
        if n.loopback4 is not None:
            nets.append(ipaddress.ip_network(n.loopback4))
        if n.loopback6 is not None:
            nets.append(ipaddress.ip_network((n.loopback6, USID_LBLEN + USID_NFLEN), strict=False)
                        if srv6 else ipaddress.ip_network(n.loopback6))
        for net in nets:
            dests.setdefault(net, set()).add(n.name)
            if n.kind == "host":
                owner[net] = n.name
    return [_Dest(net, frozenset(nodes), owner.get(net)) for net, nodes in dests.items()]


class _Graph:
    def __init__(self, topology: Topology, exclude: set[str]) -> None:
        self.t = topology
        self.adj: dict[str, list[Link]] = {n: [] for n in topology.nodes}
        #: node -> [(peer node, local ifname, {version: gateway}), …] for live links whose
        #: two ends both have an address of that version
        self.ports: dict[str, list[tuple[str, str, dict[int, Addr]]]] = {
            n: [] for n in topology.nodes}
        for lk in topology.links:
            if lk.up and lk.name not in exclude:
                self.adj[lk.a.node].append(lk)
                self.adj[lk.b.node].append(lk)
                for ep, peer in ((lk.a, lk.b), (lk.b, lk.a)):
                    gws: dict[int, Addr] = {}
                    for v in (4, 6):
                        mine = _addr(ep.ipv4 if v == 4 else ep.ipv6, v)
                        gw = _addr(peer.ipv4 if v == 4 else peer.ipv6, v)
                        if mine is not None and gw is not None:
                            gws[v] = gw
                    self.ports[ep.node].append((peer.node, ep.ifname, gws))
        self.switch = {n.name for n in topology.switches()}
        self._bfs: dict[tuple[frozenset[str], str | None], dict[str, int]] = {}
        self.hops: dict[tuple[object, str, int], list[Hop]] = {}

    def key(self, d: _Dest) -> tuple[frozenset[str], str | None]:
        """Destinations with the same switch attachments share one BFS (a leaf's hosts)."""
        if d.key is None:
            d.key = (frozenset(n for n in d.attached if n in self.switch), d.owner_host)
        return d.key

    def dist(self, d: _Dest) -> dict[str, int]:
        """Hops from every node to ``d``; only switches (and the owning host) are expanded.

        Hosts attached to ``d`` other than its owner are not sources: a route
        to a host's subnet goes to the host's switch, never through the host.
        """
        key = self.key(d)
        if key in self._bfs:
            return self._bfs[key]
        sw, owner = key
        dist = {n: 0 for n in sw}
        if owner is not None:
            dist[owner] = 0
        q = deque(dist)
        while q:
            n = q.popleft()
            for lk in self.adj[n]:
                m = lk.peer(n).node
                if m not in dist:
                    dist[m] = dist[n] + 1
                    if m in self.switch:
                        q.append(m)
        self._bfs[key] = dist
        return dist


def _addr(iface: ipaddress.IPv4Interface | ipaddress.IPv6Interface | None, version: int
          ) -> Addr | None:
    return iface.ip if iface is not None and iface.version == version else None


def _shared(topology: Topology) -> set[tuple[str, str, int]]:
    """(node, ifname, version) of ports in a subnet that a switch uses on several ports,
    and of the host ports facing them: these need host routes instead of a prefix route."""
    count: dict[tuple[str, Net], int] = {}
    for lk in topology.links:
        for ep in (lk.a, lk.b):
            if topology.nodes[ep.node].kind == "switch":
                for iface in (ep.ipv4, ep.ipv6):
                    if iface is not None:
                        count[(ep.node, iface.network)] = count.get((ep.node, iface.network),
                                                                    0) + 1
    out: set[tuple[str, str, int]] = set()
    for lk in topology.links:
        for ep, peer in ((lk.a, lk.b), (lk.b, lk.a)):
            if topology.nodes[ep.node].kind != "switch":
                continue
            for iface in (ep.ipv4, ep.ipv6):
                if iface is not None and count[(ep.node, iface.network)] > 1:
                    out.add((ep.node, ep.ifname, iface.version))
                    out.add((peer.node, peer.ifname, iface.version))
    return out


def _host_net(v: int, a: Addr) -> Net:
    return ipaddress.ip_network(f"{a}/{32 if v == 4 else 128}")


def plan(topology: Topology, exclude_links: set[str] | None = None,
         srv6_path: Srv6Path | None = None) -> dict[str, NodePlan]:
    """The configuration of every node. ``exclude_links`` recomputes routes as if those
    links were gone (what a converged routing protocol would install after a failure).
    ``srv6_path``: which nodes get kernel SIDs in SRv6 mode (default :class:`Srv6Path`);
    routes do not depend on it."""
    g = _Graph(topology, exclude_links or set())
    dests = _destinations(topology)
    srv6 = topology.routing == "srv6"
    path = srv6_path or Srv6Path()
    shared = _shared(topology)
    plans: dict[str, NodePlan] = {}
    for node in topology.nodes.values():
        is_sw = node.kind == "switch"
        sids = srv6 and node.loopback6 is not None and \
            (path.switch if is_sw else path.host) == "kernel"
        p = NodePlan(node.name, sysctls_for(topology, is_sw, sids))
        links = topology.links_of(node.name)
        gw_routes: list[tuple[str, Addr]] = []  # (port, gateway) of shared-subnet host ports
        for lk in links:
            ep, peer = lk.end(node.name), lk.peer(node.name)
            p.ifaces.append((ep.ifname, lk.mtu, lk.up))
            for iface in (ep.ipv4, ep.ipv6):
                if iface is None:
                    continue
                sh = (node.name, ep.ifname, iface.version) in shared
                p.addresses.append((ep.ifname, iface, sh))
                gw = _addr(peer.ipv4 if iface.version == 4 else peer.ipv6, iface.version)
                if sh and gw is not None and lk.up and lk.name not in (exclude_links or ()):
                    if is_sw:  # the switch reaches each host on its own port
                        p.routes.append((_host_net(iface.version, gw), [(ep.ifname, None)], 254))
                    else:  # the host reaches its gateway on-link, everything else via it
                        gw_routes.append((ep.ifname, gw))
                        p.routes.append((_host_net(iface.version, gw), [(ep.ifname, None)], 254))
        if node.loopback4 is not None:
            p.addresses.append(("lo", ipaddress.ip_interface(node.loopback4), False))
        lo6 = node.loopback6
        if lo6 is not None and not (sids and lo6 == ipaddress.ip_network(
                (lo6, USID_LBLEN + USID_NFLEN), strict=False).network_address):
            # with a kernel SID a loopback equal to the locator's first address would shadow
            # it (the local table wins); fc00:0:<u>::1 is fine. The BPF path acts before
            # the routing decision: nothing to shadow
            p.addresses.append(("lo", ipaddress.ip_interface(lo6), False))
        if sids and node.loopback6 is not None:
            loc = ipaddress.ip_network((node.loopback6, USID_LBLEN + USID_NFLEN), strict=False)
            if is_sw:
                p.sids.append((loc, "End", None, True))
            else:
                p.sids.append((loc, "End.DT6", 255, False))
            p.ifaces += [(SID_DEV, 9000, True), (SID_PEER, 9000, True)]
        live = g.adj[node.name]
        single_homed = not is_sw and len(live) == 1 and live[0].peer(node.name).node in g.switch
        if single_homed:
            lk = live[0]
            ep, peer = lk.end(node.name), lk.peer(node.name)
            for v in (4, 6):
                gw = _addr(peer.ipv4 if v == 4 else peer.ipv6, v)
                if gw is not None and _addr(ep.ipv4 if v == 4 else ep.ipv6, v) is not None:
                    p.routes.append((ipaddress.ip_network("0.0.0.0/0" if v == 4 else "::/0"),
                                     [(ep.ifname, gw)], 254))
            plans[node.name] = p  # the default routes cover everything, locators too
            continue
        gw_of = {(i, gw.version): gw for i, gw in gw_routes}
        for d in dests:
            if node.name in d.attached:
                # a multi-port host's own shared subnet: its neighbours are behind the gateway
                for i_, gw in gw_routes:
                    if gw in d.net:
                        p.routes.append((d.net, [(i_, gw)], 254))
                continue
            hops = _nexthops(g, d, node.name)
            if hops:
                p.routes.append((d.net, hops, 254))
        if not is_sw and len(live) > 1:
            _port_tables(p, node.name, live, gw_of)
        plans[node.name] = p
    return plans


def _nexthops(g: _Graph, d: _Dest, node: str) -> list[Hop]:
    ck = (d.key or g.key(d), node, d.net.version)
    hit = g.hops.get(ck)
    if hit is None:
        dist = g.dist(d)
        mine = dist.get(node)
        hit = g.hops[ck] = [] if mine is None else _compute_nexthops(g, d, node, dist, mine)
    return hit


def _compute_nexthops(g: _Graph, d: _Dest, node: str, dist: dict[str, int], mine: int
                      ) -> list[Hop]:
    v = d.net.version
    hops: list[Hop] = []
    for peer, ifname, gws in g.ports[node]:
        if dist.get(peer) != mine - 1 or not (peer in g.switch or peer == d.owner_host):
            continue
        gw = gws.get(v)
        if gw is not None:
            hops.append((ifname, gw))
    hops.sort(key=lambda h: h[0])
    return hops


def _port_tables(p: NodePlan, node: str, live: list[Link],
                 onlink_gw: dict[tuple[str, int], Addr]) -> None:
    """Source-based routing for multi-port hosts: ``from <port addr> lookup 100+i``.
    A gateway without a prefix route gets its /32 (/128) in the table too (the kernel
    resolves a gateway in the route's own table)."""
    for i, lk in enumerate(sorted(live, key=lambda lk: lk.end(node).ifname)):
        ep, peer = lk.end(node), lk.peer(node)
        table = HOST_PORT_TABLE + i
        for v in (4, 6):
            src = _addr(ep.ipv4 if v == 4 else ep.ipv6, v)
            gw = _addr(peer.ipv4 if v == 4 else peer.ipv6, v)
            if src is None or gw is None:
                continue
            if onlink_gw.get((ep.ifname, v)) is not None:
                p.routes.append((_host_net(v, gw), [(ep.ifname, None)], table))
            p.routes.append((ipaddress.ip_network("0.0.0.0/0" if v == 4 else "::/0"),
                             [(ep.ifname, gw)], table))
            p.rules.append((src, table, table))


# --------------------------------------------------------------------------- SRv6 paths


class Srv6Route(TypedDict):
    """One destination of :func:`srv6_paths`."""

    #: the local port (ifname) the packets leave by: the paths start at its switch
    port: str
    #: that port's IPv6 address (the outer and inner source a sender binds to)
    src: str
    #: the outer destinations, one uSID container per shortest path, sorted by uSIDs
    paths: list[str]


def _usid(topology: Topology, name: str) -> bytes:
    lo6 = topology.nodes[name].loopback6
    if lo6 is None:
        raise ValueError(f"{name} has no IPv6 loopback, so no uSID (SRv6 needs the "
                         "address plan's loopbacks)")
    return ipaddress.IPv6Address(lo6).packed[4:6]


def _container(topology: Topology, nodes: list[str]) -> str:
    if len(nodes) > USID_MAX:
        raise ValueError(f"path {' → '.join(nodes)} needs {len(nodes)} uSIDs; a container "
                         f"holds {USID_MAX} (a longer path needs an SRH of containers)")
    block = ipaddress.IPv6Address(topology.nodes[nodes[-1]].loopback6 or "::").packed[:4]
    packed = block + b"".join(_usid(topology, n) for n in nodes)
    return str(ipaddress.IPv6Address(packed.ljust(16, b"\0")))


def srv6_paths(topology: Topology, host: str) -> dict[str, Srv6Route]:
    """The controller's SRv6 path table for ``host`` (what its NIC daemon loads).

    For every IPv6 address of every *other* host's port that one of ``host``'s ports
    reaches, ``{address: {"port": local ifname, "src": its IPv6 address, "paths":
    [container, …]}}``: one uSID container (the outer destination, e.g.
    ``fc00:0:22:12:8003::``) per shortest path from that port's switch to the port that
    owns the address, transit nodes being switches over links that are up. A container
    lists the uSIDs of the path's nodes *after* the first switch, which routes it by
    its first uSID as an ordinary route: ``[h1, leaf1, spine2, leaf2, h3]`` →
    ``fc00:0:<spine2>:<leaf2>:<h3>::``; a destination under the same switch →
    ``fc00:0:<h2>::``; over a direct host-to-host cable → the peer's uSID alone.
    Parallel links give one path (the container names nodes, not cables). In a
    multi-plane fabric a port reaches its own plane only, so each plane address
    gets the local port of that plane; where several local ports reach an address,
    the one with the fewest hops serves it (ties: the first by name). Paths are
    sorted by their uSIDs (so by the first one first). A path of more than
    :data:`USID_MAX` uSIDs raises ValueError naming it.
    """
    t = topology
    if t.nodes.get(host) is None or t.nodes[host].kind != "host":
        raise ValueError(f"{host!r} is not a host of {t.name}")
    switches = {n.name for n in t.switches()}
    adj: dict[str, set[str]] = {s: set() for s in switches}
    for lk in t.links:
        if lk.up and lk.a.node in switches and lk.b.node in switches:
            adj[lk.a.node].add(lk.b.node)
            adj[lk.b.node].add(lk.a.node)
    dist_to: dict[str, dict[str, int]] = {}

    def dist(last: str) -> dict[str, int]:
        if last not in dist_to:
            d = {last: 0}
            q = deque([last])
            while q:
                n = q.popleft()
                for m in sorted(adj[n]):
                    if m not in d:
                        d[m] = d[n] + 1
                        q.append(m)
            dist_to[last] = d
        return dist_to[last]

    def walks(first: str, last: str) -> list[list[str]]:
        d = dist(last)
        if first not in d:
            return []
        out: list[list[str]] = []

        def go(path: list[str]) -> None:
            n = path[-1]
            if n == last:
                out.append(path)
                return
            for m in sorted(adj[n]):
                if d.get(m) == d[n] - 1:
                    go(path + [m])

        go([first])
        return out

    ports = sorted(((lk.end(host).ifname, lk) for lk in t.links_of(host)
                    if lk.up and lk.end(host).ipv6 is not None), key=lambda x: x[0])
    table: dict[str, Srv6Route] = {}
    for other in t.hosts():
        if other.name == host:
            continue
        for lk2 in t.links_of(other.name):
            end = lk2.end(other.name)
            if not lk2.up or end.ipv6 is None or end.ipv6.version != 6:
                continue
            last = lk2.peer(other.name).node
            best: tuple[int, str, str, list[list[str]]] | None = None
            for ifname, lk in ports:
                first = lk.peer(host).node
                if first in switches and last in switches:
                    found = [w[1:] + [other.name] for w in walks(first, last)]
                elif lk is lk2:  # a cable straight to the other host's port
                    found = [[other.name]]
                else:
                    continue
                if found and (best is None or len(found[0]) < best[0]):
                    src = lk.end(host).ipv6
                    best = (len(found[0]), ifname, str(src.ip) if src else "", found)
            if best is None:
                continue
            containers = sorted({tuple(_usid(t, n) for n in p): _container(t, p)
                                 for p in best[3]}.items())
            table[str(end.ipv6.ip)] = {"port": best[1], "src": best[2],
                                       "paths": [c for _k, c in containers]}
    return table

# SPDX-License-Identifier: GPL-2.0-only
"""The address plan: every port and loopback gets IPv4 and IPv6, deterministically.

Clusters live in separate namespaces, so every cluster uses the same plan; two
clusters never share a routing table. ``docs/addressing.md`` has the same plan
written for users.

Host subnets (one per host-facing switch, a "port group")
    For plane ``p`` (0 outside multi-plane) and the switch's ordinal ``L``
    among host-facing switches of that plane (``leaf3`` → 3, ``rail2`` → 2,
    ``p1-leaf4`` → 4): ``10.p.L.0/24`` and ``fd00:p:L::/64``. The switch is
    ``.1`` / ``::1`` on every host-facing port (one gateway address shared by
    the port group, like an anycast gateway: the fabric installs it on each port
    with a /32 or /128 route per host); the i-th host port under it
    (1-based, in link order) is ``.(10+i)`` / ``::(10+i)``, so at most 240
    hosts per switch. IPv6 groups repeat the IPv4 octets' decimal digits
    (``10.1.3.12`` ↔ ``fd00:1:3::12``) so the two read alike. A link between
    two hosts (``pair``) gets the next ordinal: ``h1`` .11, ``h2`` .12.

Fabric links (switch to switch)
    The k-th such link (0-based, file order) is ``172.16.0.0/12`` + 2k as a
    /31 (RFC 3021) and ``fd01::/48`` + 2k as a /127 (RFC 6164); ``a`` takes
    the even address, ``b`` the odd one.

Loopbacks and SRv6 locators
    Switch number s (1-based in node order) has uSID ``s`` and IPv4 loopback
    ``10.255.(s>>8).(s&255)/32``; host number n has uSID ``0x8000 + n`` and
    ``10.254.(n>>8).(n&255)/32``. A node with uSID u has the locator
    ``fc00:0:<u>::/48`` (a 32-bit uSID block ``fc00:0000`` followed by the
    16-bit uSID, so a uSID carrier such as ``fc00:0:1:3:8002::`` lists hops in
    order) and the IPv6 loopback ``fc00:0:<u>::1/128``.

Limits (checked): 240 hosts per switch, 255 host subnets per plane, 32767
switches and 32767 hosts.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from emu.topology.model import Link, Topology, TopologyError

__all__ = ["assign", "MAX_HOSTS_PER_SUBNET", "FABRIC4", "FABRIC6", "USID_BLOCK"]

MAX_HOSTS_PER_SUBNET = 240
FABRIC4 = ipaddress.IPv4Network("172.16.0.0/12")
FABRIC6 = ipaddress.IPv6Network("fd01::/48")
USID_BLOCK = ipaddress.IPv6Network("fc00::/32")
HOST_USID_BASE = 0x8000


def _vd(n: int) -> int:
    """``12`` → ``0x12``: an IPv6 group that shows the same digits as the IPv4 octet."""
    return int(str(n), 16)


def _host4(plane: int, ordinal: int, last: int, plen: int = 24) -> ipaddress.IPv4Interface:
    return ipaddress.IPv4Interface(f"10.{plane}.{ordinal}.{last}/{plen}")


def _host6(plane: int, ordinal: int, last: int) -> ipaddress.IPv6Interface:
    return ipaddress.IPv6Interface(f"fd00:{_vd(plane):x}:{_vd(ordinal):x}::{_vd(last):x}/64")


def assign(topo: Topology, where: Callable[[str], str] | None = None) -> None:
    """Fill in every endpoint's and node's addresses in place.

    ``where(node_name)`` locates a node for error messages (the loader passes
    e.g. ``"namespaces/x.toml: node[3]"``). Raises :class:`TopologyError` when
    the plan runs out of room (too many hosts on one switch, …).
    """
    loc = where or (lambda n: f"{topo.source}: node {n}")
    _loopbacks(topo, loc)
    _host_subnets(topo, loc)
    _fabric_links(topo)


def _loopbacks(topo: Topology, loc: Callable[[str], str]) -> None:
    counters = {"switch": 0, "host": 0}
    for node in topo.nodes.values():
        counters[node.kind] += 1
        n = counters[node.kind]
        if n >= HOST_USID_BASE:
            raise TopologyError(loc(node.name), f"more than {HOST_USID_BASE - 1} {node.kind}s")
        usid = n if node.kind == "switch" else HOST_USID_BASE + n
        second = 255 if node.kind == "switch" else 254
        node.usid = usid
        node.loopback4 = ipaddress.IPv4Address(f"10.{second}.{n >> 8}.{n & 255}")
        node.locator6 = ipaddress.IPv6Network(f"fc00:0:{usid:x}::/48")
        node.loopback6 = ipaddress.IPv6Address(f"fc00:0:{usid:x}::1")


def _host_subnets(topo: Topology, loc: Callable[[str], str]) -> None:
    by_switch: dict[str, list[Link]] = {}
    host_host: list[Link] = []
    for lk in topo.links:
        ka, kb = topo.nodes[lk.a.node].kind, topo.nodes[lk.b.node].kind
        if ka == "host" and kb == "host":
            host_host.append(lk)
        elif ka == "host" or kb == "host":
            sw = lk.b.node if ka == "host" else lk.a.node
            by_switch.setdefault(sw, []).append(lk)
    ordinals: dict[int, int] = {}

    def next_ordinal(plane: int, who: str) -> int:
        ordinals[plane] = ordinals.get(plane, 0) + 1
        if ordinals[plane] > 255:
            raise TopologyError(loc(who), f"more than 255 host subnets in plane {plane} "
                                          "(10.<plane>.<1..255>.0/24)")
        return ordinals[plane]

    for node in topo.nodes.values():  # node order, so leaf3 is ordinal 3
        links = by_switch.get(node.name)
        if not links:
            continue
        plane = node.plane or 0
        ordinal = next_ordinal(plane, node.name)
        if len(links) > MAX_HOSTS_PER_SUBNET:
            raise TopologyError(loc(node.name), f"{len(links)} host ports on one switch; the "
                                f"address plan has room for {MAX_HOSTS_PER_SUBNET} "
                                f"(10.{plane}.{ordinal}.11-250)")
        for i, lk in enumerate(links, start=1):
            sw_end, host_end = (lk.a, lk.b) if lk.a.node == node.name else (lk.b, lk.a)
            sw_end.ipv4 = _host4(plane, ordinal, 1)
            sw_end.ipv6 = _host6(plane, ordinal, 1)
            host_end.ipv4 = _host4(plane, ordinal, 10 + i)
            host_end.ipv6 = _host6(plane, ordinal, 10 + i)
    for lk in host_host:
        plane = lk.plane or 0
        ordinal = next_ordinal(plane, lk.a.node)
        for i, end in enumerate((lk.a, lk.b), start=1):
            end.ipv4 = _host4(plane, ordinal, 10 + i)
            end.ipv6 = _host6(plane, ordinal, 10 + i)


def _fabric_links(topo: Topology) -> None:
    k = 0
    for lk in topo.links:
        if topo.nodes[lk.a.node].kind == "switch" and topo.nodes[lk.b.node].kind == "switch":
            if 2 * k + 1 >= FABRIC4.num_addresses:
                raise TopologyError(f"{topo.source}: link {lk.name}", "fabric link /31s exhausted")
            base4 = FABRIC4.network_address + 2 * k
            base6 = FABRIC6.network_address + 2 * k
            lk.a.ipv4 = ipaddress.IPv4Interface(f"{base4}/31")
            lk.b.ipv4 = ipaddress.IPv4Interface(f"{base4 + 1}/31")
            lk.a.ipv6 = ipaddress.IPv6Interface(f"{base6}/127")
            lk.b.ipv6 = ipaddress.IPv6Interface(f"{base6 + 1}/127")
            k += 1

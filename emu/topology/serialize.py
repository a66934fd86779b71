# SPDX-License-Identifier: GPL-2.0-only
"""A resolved :class:`Topology` to JSON and back, exactly.

A running cluster keeps its model in its state file, so ``emu link``,
``emu impair``, ``emu capture`` and ``emu status`` act on the cluster as it
was built — not on whatever the topology file says now.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

from emu.topology.model import Direction, Endpoint, Event, Link, Node, Topology

_ADDR_TYPES = (ipaddress.IPv4Interface, ipaddress.IPv6Interface, ipaddress.IPv4Address,
               ipaddress.IPv6Address, ipaddress.IPv6Network, ipaddress.IPv4Network)


def _plain(v: Any) -> Any:
    if isinstance(v, _ADDR_TYPES):
        return str(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def to_dict(t: Topology) -> dict[str, Any]:
    """JSON-ready dict of a topology (addresses as strings)."""
    return _plain(dataclasses.asdict(t))


def _iface(v: str | None, v6: bool) -> Any:
    if v is None:
        return None
    return ipaddress.IPv6Interface(v) if v6 else ipaddress.IPv4Interface(v)


def _endpoint(d: dict[str, Any]) -> Endpoint:
    return Endpoint(d["node"], d["ifname"], _iface(d.get("ipv4"), False),
                    _iface(d.get("ipv6"), True))


def _node(d: dict[str, Any]) -> Node:
    d = dict(d)
    for key, typ in (("loopback4", ipaddress.IPv4Address), ("loopback6", ipaddress.IPv6Address),
                     ("locator6", ipaddress.IPv6Network)):
        if d.get(key) is not None:
            d[key] = typ(d[key])
    return Node(**d)


def from_dict(d: dict[str, Any]) -> Topology:
    """Inverse of :func:`to_dict`."""
    links = []
    for lk in d["links"]:
        lk = dict(lk)
        lk["a"] = _endpoint(lk["a"])
        lk["b"] = _endpoint(lk["b"])
        lk["a_to_b"] = Direction(**lk["a_to_b"])
        lk["b_to_a"] = Direction(**lk["b_to_a"])
        links.append(Link(**lk))
    return Topology(
        name=d["name"], source=d["source"],
        nodes={k: _node(v) for k, v in d["nodes"].items()},
        links=links, events=[Event(**e) for e in d["events"]],
        params=d["params"], hash_seed=d["hash_seed"], routing=d["routing"],
        srv6=d.get("srv6", "auto"),
        switch=d.get("switch", {}),
        nic=d.get("nic", {}),
        time=d.get("time", {}), latency=d.get("latency", {}),
        kind=d.get("kind", ""), declared_name=d.get("declared_name", ""),
    )

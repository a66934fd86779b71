# SPDX-License-Identifier: GPL-2.0-only
"""The routing plan as data (no root): ECMP next hops, multi-port hosts, SRv6 SIDs."""

from __future__ import annotations

import ipaddress as ip

from fabric_util import leaf_spine

from emu.fabric import routes
from emu.topology.model import Endpoint, Link, Node, Topology


def _net(s: str):
    return ip.ip_network(s)


def test_leaf_routes_remote_hosts_over_every_spine():
    p = routes.plan(leaf_spine(spines=3, leaves=2, hosts_per_leaf=1))["leaf1"]
    r = {d: hops for d, hops, _t in p.routes}
    assert [i for i, _ in r[_net("10.64.2.0/24")]] == ["spine1", "spine2", "spine3"]
    assert len(r[_net("fd00:1:2::/64")]) == 3
    assert _net("10.64.1.0/24") not in r  # connected
    assert p.sysctls["net.ipv4.ip_forward"] == 1 and p.sysctls["net.ipv4.conf.all.rp_filter"] == 0


def test_single_port_host_gets_default_routes_only():
    t = leaf_spine()
    p = routes.plan(t)["h1"]
    assert [(str(d), hops[0][0]) for d, hops, _ in p.routes] == [("0.0.0.0/0", "eth0"),
                                                                  ("::/0", "eth0")]
    assert p.sysctls["net.ipv4.ip_forward"] == 0 and not p.rules


def test_multi_plane_host_routes_per_plane_and_by_source():
    """Two hosts, each with one port in plane 0 (sw0) and one in plane 1 (sw1)."""
    t = Topology(name="mp", source="<test>")
    t.nodes = {"h1": Node("h1", "host"), "h2": Node("h2", "host"),
               "sw0": Node("sw0", "switch", plane=0), "sw1": Node("sw1", "switch", plane=1)}
    for h in (1, 2):
        for pl in (0, 1):
            t.links.append(Link(f"h{h}-sw{pl}",
                                Endpoint(f"h{h}", f"p{pl}", ip.ip_interface(f"10.{pl}.{h}.2/24")),
                                Endpoint(f"sw{pl}", f"h{h}", ip.ip_interface(f"10.{pl}.{h}.1/24")),
                                plane=pl))
    p = routes.plan(t)["h1"]
    main = {str(d): hops for d, hops, table in p.routes if table == 254}
    assert main["10.0.2.0/24"] == [("p0", ip.ip_address("10.0.1.1"))]
    assert main["10.1.2.0/24"] == [("p1", ip.ip_address("10.1.1.1"))]
    assert sorted((str(s), tb) for s, tb, _ in p.rules) == [("10.0.1.2", 100), ("10.1.1.2", 101)]
    tables = {tb: hops for d, hops, tb in p.routes if tb != 254}
    assert tables == {100: [("p0", ip.ip_address("10.0.1.1"))],
                      101: [("p1", ip.ip_address("10.1.1.1"))]}


def test_srv6_locators_and_sids():
    t = leaf_spine(routing="srv6")
    plans = routes.plan(t)
    assert plans["spine1"].sids == [(_net("fc00:0:21::/48"), "End", None, True)]
    assert plans["h3"].sids == [(_net("fc00:0:33::/48"), "End.DT6", 255, False)]
    r = {d: hops for d, hops, _ in plans["leaf1"].routes}
    assert [i for i, _ in r[_net("fc00:0:22::/48")]] == ["spine2"]
    assert [i for i, _ in r[_net("fc00:0:33::/48")]] == ["spine1", "spine2"]
    assert ("sid0", 9000, True) in plans["h3"].ifaces


def test_excluded_link_leaves_ecmp_group():
    t = leaf_spine()
    r = {d: hops for d, hops, _ in routes.plan(t, {"leaf2-spine1"})["leaf1"].routes}
    assert [i for i, _ in r[_net("10.64.3.0/24")]] == ["spine2"]

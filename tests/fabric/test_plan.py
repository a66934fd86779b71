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
    """Kernel switches get End (NEXT-C-SID) on sid0; hosts decap in BPF by default (no
    SID, their loopback on lo), End.DT6 only when asked; routes are the same."""
    t = leaf_spine(routing="srv6")
    plans = routes.plan(t)
    assert plans["spine1"].sids == [(_net("fc00:0:21::/48"), "End", None, True)]
    assert ("sid0", 9000, True) in plans["spine1"].ifaces
    assert plans["spine1"].sysctls["net.ipv6.conf.all.seg6_enabled"] == 1
    assert plans["h3"].sids == [] and ("sid0", 9000, True) not in plans["h3"].ifaces
    assert ("lo", ip.ip_interface("fc00:0:33::/128"), False) in plans["h3"].addresses
    r = {d: hops for d, hops, _ in plans["leaf1"].routes}
    assert [i for i, _ in r[_net("fc00:0:22::/48")]] == ["spine2"]
    assert [i for i, _ in r[_net("fc00:0:33::/48")]] == ["spine1", "spine2"]
    dt6 = routes.plan(t, srv6_path=routes.Srv6Path("kernel", "kernel"))
    assert dt6["h3"].sids == [(_net("fc00:0:33::/48"), "End.DT6", 255, False)]
    assert ("sid0", 9000, True) in dt6["h3"].ifaces
    bpf = routes.plan(t, srv6_path=routes.Srv6Path("bpf", "bpf"))
    for n in ("spine1", "h3"):
        assert bpf[n].sids == [] and ("sid0", 9000, True) not in bpf[n].ifaces
        assert "net.ipv6.conf.all.seg6_enabled" not in bpf[n].sysctls
    assert bpf["leaf1"].routes == plans["leaf1"].routes


def test_srv6_paths_leaf_spine():
    """One container per spine to a host under another leaf (the uSIDs after the first
    switch), one uSID under the same leaf; sorted; the local port and its address."""
    t = leaf_spine(spines=3, routing="srv6")
    table = routes.srv6_paths(t, "h1")
    assert set(table) == {"fd00:1:2::2", "fd00:1:3::2", "fd00:1:4::2"}
    assert table["fd00:1:3::2"] == {
        "port": "eth0", "src": "fd00:1:1::2",
        "paths": ["fc00:0:21:12:33::", "fc00:0:22:12:33::", "fc00:0:23:12:33::"]}
    assert table["fd00:1:2::2"]["paths"] == ["fc00:0:32::"]
    t.link("leaf1-spine2").up = False  # a path over a cable that is down is no path
    assert routes.srv6_paths(t, "h1")["fd00:1:3::2"]["paths"] == ["fc00:0:21:12:33::",
                                                                  "fc00:0:23:12:33::"]


def test_srv6_paths_multi_plane_port_per_plane():
    """A port reaches its own plane only: each plane's address of another host is served
    by the local port of that plane, through that plane's switches."""
    from pathlib import Path

    from emu.topology import load

    t = load(str(Path(__file__).resolve().parents[2] / "namespaces" / "multi-plane.toml"))
    table = routes.srv6_paths(t, "h1")
    planes = {lk.end("h1").ifname: lk.plane for lk in t.links_of("h1")}
    sw_plane = {n.name: n.plane for n in t.switches()}
    usid = {ip.ip_address(n.loopback6).packed[4:6]: n.name for n in t.nodes.values()}
    assert len({r["port"] for r in table.values()}) == len(planes) > 1
    for addr, r in table.items():
        (owner,) = [lk for lk in t.links if lk.up and any(
            e.ipv6 is not None and str(e.ipv6.ip) == addr for e in (lk.a, lk.b))]
        assert r["port"] in planes and planes[r["port"]] == owner.plane
        for c in r["paths"]:
            packed = ip.ip_address(c).packed
            hops = [usid[packed[i:i + 2]] for i in range(4, 16, 2) if packed[i:i + 2] != b"\0\0"]
            assert all(sw_plane[h] == owner.plane for h in hops[:-1]), (addr, hops)


def test_srv6_paths_too_long_for_one_container():
    """A path of more than six uSIDs does not fit 96 bits: a clear error naming it."""
    import pytest

    t = Topology(name="chain", source="<test>")
    names = [f"s{i}" for i in range(1, 8)]
    t.nodes = {n: Node(n, "switch", loopback6=ip.ip_address(f"fc00:0:{i}::"))
               for i, n in enumerate(names, start=1)}
    for h, sw, u in (("h1", "s1", 0x8001), ("h2", "s7", 0x8002)):
        t.nodes[h] = Node(h, "host", loopback6=ip.ip_address(f"fc00:0:{u:x}::"))
        t.links.append(Link(f"{h}-{sw}", Endpoint(h, "eth0", None, ip.ip_interface(
            f"fd00:{u:x}::2/64")), Endpoint(sw, h, None, ip.ip_interface(f"fd00:{u:x}::1/64"))))
    for i, (a, b) in enumerate(zip(names, names[1:], strict=False)):
        t.links.append(Link(f"{a}-{b}", Endpoint(a, b, None, ip.ip_interface(f"fd01::{2*i}/127")),
                            Endpoint(b, a, None, ip.ip_interface(f"fd01::{2*i+1}/127"))))
    with pytest.raises(ValueError, match="h2 needs 7 uSIDs; a container holds 6"):
        routes.srv6_paths(t, "h1")


def test_excluded_link_leaves_ecmp_group():
    t = leaf_spine()
    r = {d: hops for d, hops, _ in routes.plan(t, {"leaf2-spine1"})["leaf1"].routes}
    assert [i for i, _ in r[_net("10.64.3.0/24")]] == ["spine2"]

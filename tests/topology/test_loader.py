# SPDX-License-Identifier: GPL-2.0-only
"""Shipped topology files load; generators give the right shapes; the address plan holds."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from emu.topology import Topology, generators, load, loads
from emu.topology.model import MAX_IFNAME
from emu.topology.units import format_rate, parse_prob, parse_rate, parse_time

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "namespaces").glob("*.toml"))


def _check_invariants(t: Topology) -> None:
    """Interfaces unique and short; addresses unique, in the plan, hosts in their leaf's subnet."""
    seen_if: set[tuple[str, str]] = set()
    for lk in t.links:
        for end in (lk.a, lk.b):
            assert len(end.ifname) <= MAX_IFNAME
            assert (end.node, end.ifname) not in seen_if
            seen_if.add((end.node, end.ifname))
            assert end.ipv4 is not None and end.ipv6 is not None
    host_ports = [(lk, e) for lk in t.links for e in (lk.a, lk.b)
                  if t.nodes[e.node].kind == "host"]
    addrs4 = [e.ipv4.ip for _, e in host_ports]
    addrs6 = [e.ipv6.ip for _, e in host_ports]
    fabric = [e for lk in t.links for e in (lk.a, lk.b)
              if t.nodes[lk.a.node].kind == t.nodes[lk.b.node].kind == "switch"]
    addrs4 += [e.ipv4.ip for e in fabric]
    addrs6 += [e.ipv6.ip for e in fabric]
    addrs4 += [n.loopback4 for n in t.nodes.values()]
    addrs6 += [n.loopback6 for n in t.nodes.values()]
    assert len(set(addrs4)) == len(addrs4)
    assert len(set(addrs6)) == len(addrs6)
    for lk, e in host_ports:
        assert e.ipv4 in ipaddress.ip_network("10.0.0.0/8")
        assert e.ipv6 in ipaddress.ip_network("fd00::/16")
        peer = lk.peer(e.node)
        assert peer.ipv4.network == e.ipv4.network and peer.ipv6.network == e.ipv6.network
        if t.nodes[peer.node].kind == "switch":
            assert str(peer.ipv4.ip).endswith(".1") and int(peer.ipv6.ip) & 0xFFFF == 1
    for e in fabric:
        assert e.ipv4.network.prefixlen == 31 and e.ipv4 in ipaddress.ip_network("172.16.0.0/12")
        assert e.ipv6.network.prefixlen == 127 and e.ipv6 in ipaddress.ip_network("fd01::/48")
    for n in t.nodes.values():
        assert n.loopback6 in n.locator6 and n.locator6.prefixlen == 48
        assert n.locator6.network_address.packed[:4] == b"\xfc\x00\x00\x00"
        assert int.from_bytes(n.locator6.network_address.packed[4:6], "big") == n.usid
    # host subnets of switches never overlap
    gw = {lk.peer(e.node).ipv4.network: lk.peer(e.node).node for lk, e in host_ports
          if t.nodes[lk.peer(e.node).node].kind == "switch"}
    assert len(set(gw.values())) == len(gw)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_shipped_files_load(path: Path) -> None:
    t = load(path)
    assert t.nodes and t.links and t.source == str(path)
    assert len(t.name) <= 12
    _check_invariants(t)


def test_all_four_files_ship() -> None:
    assert {p.stem for p in FILES} >= {"pair", "leaf-spine", "rail-optimized", "multi-plane"}


@pytest.mark.parametrize("path,sets", [
    ("pair.toml", ["links=3"]),
    ("leaf-spine.toml", ["spines=4", "leaves=8", "hosts_per_leaf=8"]),
    ("leaf-spine.toml", {"hosts_per_leaf": "16", "uplinks": "2", "link.mtu": "1500"}),
    ("rail-optimized.toml", ["hosts=16", "rails=8", "spines=4"]),
    ("multi-plane.toml", ["planes=4", "leaves=4", "hosts_per_leaf=4"]),
])
def test_overrides(path: str, sets: list[str] | dict[str, str]) -> None:
    t = load(ROOT / "namespaces" / path, sets)
    _check_invariants(t)


def test_leaf_spine_64_hosts() -> None:
    t = load(ROOT / "namespaces/leaf-spine.toml",
             ["spines=4", "leaves=8", "hosts_per_leaf=8", "link.rate=10gbit", "link.mtu=1500"])
    assert len(t.hosts()) == 64 and len(t.switches()) == 12
    assert len(t.links) == 64 + 8 * 4
    assert all(lk.mtu == 1500 and lk.a_to_b.rate_bps == 10**10 for lk in t.links)
    assert t.params == {"spines": 4, "leaves": 8, "hosts_per_leaf": 8, "uplinks": 1}


def test_256_hosts() -> None:
    t = load(ROOT / "namespaces/leaf-spine.toml", ["leaves=16", "hosts_per_leaf=16"])
    assert len(t.hosts()) == 256
    _check_invariants(t)


@pytest.mark.parametrize("kw,hosts,switches,links", [
    ({}, 4, 4, 4 + 4),
    ({"spines": 3, "leaves": 5, "hosts_per_leaf": 7, "uplinks": 2}, 35, 8, 35 + 5 * 3 * 2),
])
def test_leaf_spine_counts(kw: dict, hosts: int, switches: int, links: int) -> None:
    t = generators.leaf_spine(**kw)
    assert (len(t.hosts()), len(t.switches()), len(t.links)) == (hosts, switches, links)


def test_generator_shapes() -> None:
    p = generators.pair(links=2)
    assert [lk.name for lk in p.links] == ["h1-h2#1", "h1-h2#2"]
    assert [lk.a.ifname for lk in p.links] == ["eth0", "eth1"]
    r = generators.rail_optimized(hosts=3, rails=4, spines=2)
    assert (len(r.hosts()), len(r.switches()), len(r.links)) == (3, 6, 3 * 4 + 4 * 2)
    assert r.link("h2:rail3").a.ifname == "eth2" and r.link("h2:rail3").b.ifname == "h2"
    m = generators.multi_plane(planes=3, spines=2, leaves=2, hosts_per_leaf=2)
    assert (len(m.hosts()), len(m.switches()), len(m.links)) == (4, 12, 3 * (4 + 4))
    assert {m.link(f"h1:p{p}-leaf1").a.ifname for p in range(3)} == {"eth0", "eth1", "eth2"}
    assert m.link("h1:p2-leaf1").a.ifname == "eth2" and m.link("h1:p2-leaf1").plane == 2
    assert m.nodes["p1-spine2"].plane == 1 and m.nodes["p1-spine2"].role == "spine"


def test_naming_and_parallel_links() -> None:
    t = load(ROOT / "namespaces/leaf-spine.toml", ["uplinks=2"])
    assert t.link("h1-leaf1").b.ifname == "h1"
    assert t.link("leaf1-spine1#2").a.ifname == "spine1_2"
    assert t.link("leaf1:spine1").name == "leaf1-spine1#1"
    assert t.link("leaf1-spine1#1").b.ifname == "leaf1_1"


def test_documented_addresses() -> None:
    t = load(ROOT / "namespaces/leaf-spine.toml")
    assert str(t.link("h1-leaf1").a.ipv4) == "10.0.1.11/24"
    assert str(t.link("h3-leaf2").a.ipv6) == "fd00:0:2::11/64"
    assert str(t.link("leaf1-spine1").a.ipv4) == "172.16.0.0/31"
    assert str(t.link("leaf1-spine1").b.ipv6) == "fd01::1/127"
    assert str(t.nodes["spine1"].loopback4) == "10.255.0.3"
    assert str(t.nodes["spine1"].locator6) == "fc00:0:3::/48"
    m = load(ROOT / "namespaces/multi-plane.toml")
    assert str(m.link("h2:p1-leaf1").a.ipv4) == "10.1.1.12/24"
    p = load(ROOT / "namespaces/pair.toml")
    assert [str(e.ipv4) for e in (p.links[0].a, p.links[0].b)] == ["10.0.1.11/24", "10.0.1.12/24"]


SETTINGS = """
[topology]
kind = "leaf-spine"
name = "t"
[defaults.link]
rate = "10gbit"
loss = "1%"
[defaults.link.b_to_a]
rate = "5gbit"
[[link]]
match = "spine1:leaf1"
a_to_b = { ecn_ce = 0.5 }
up = false
[[link]]
match = "h*:leaf2"
mtu = 1500
delay = "1ms"
[[link]]
match = "h1:leaf1"
b_to_a = { duplicate = "3%" }
[[event]]
at = "2s"
action = "impair"
target = "spine2:leaf1"
direction = "a_to_b"
loss = "5%"
[[event]]
at = "500ms"
action = "down"
target = "leaf2"
[[event]]
at = 1
action = "up"
target = "spine1"
[routing]
mode = "srv6"
hash_seed = 42
"""


def test_settings_overrides_and_events() -> None:
    t = loads(SETTINGS, "x.toml")
    h1 = t.link("h1-leaf1")
    assert h1.a_to_b.rate_bps == 10**10 and h1.b_to_a.rate_bps == 5 * 10**9
    assert h1.a_to_b.loss == pytest.approx(0.01)
    assert h1.b_to_a.duplicate == pytest.approx(0.03) and h1.a_to_b.duplicate == 0.0
    ls = t.link("leaf1-spine1")  # matched as spine1:leaf1, so the user's a_to_b is b_to_a
    assert ls.b_to_a.ecn_ce == 0.5 and ls.a_to_b.ecn_ce == 0.0 and not ls.up
    assert t.link("h3-leaf2").mtu == 1500 and t.link("h1-leaf1").mtu == 9000
    assert t.link("h4-leaf2").a_to_b.delay_s == pytest.approx(0.001)
    assert [e.at_s for e in t.events] == [0.5, 1.0, 2.0]
    ev = t.events[2]
    assert ev.target == "leaf1-spine2" and ev.settings == {"loss": 0.05, "direction": "b_to_a"}
    assert t.routing == "srv6" and t.hash_seed == 42
    assert t.srv6 == "auto"  # the kernel's seg6local where it has it, else tc BPF
    assert loads(SETTINGS, "x.toml", ["routing.srv6=bpf"]).srv6 == "bpf"


def test_custom_topology() -> None:
    text = """
[topology]
kind = "custom"
name = "tri"
[[node]]
name = "a"
kind = "host"
[[node]]
name = "b"
kind = "host"
[[node]]
name = "sw"
kind = "switch"
role = "leaf"
[[node]]
name = "core"
kind = "switch"
[[link]]
a = "a"
b = "sw"
rate = "1gbit"
[[link]]
a = "b"
b = "sw"
b_if = "down-b"
[[link]]
a = "sw"
b = "core"
[[link]]
a = "sw"
b = "core"
"""
    t = loads(text, "c.toml")
    assert t.name == "tri" and len(t.links) == 4
    assert t.link("a-sw").a_to_b.rate_bps == 10**9
    assert t.link("b-sw").b.ifname == "down-b"
    assert [lk.name for lk in t.links[2:]] == ["sw-core#1", "sw-core#2"]
    assert t.links[3].a.ifname == "core_2"
    _check_invariants(t)


def test_name_override_and_default_from_stem(tmp_path: Path) -> None:
    f = tmp_path / "small.toml"
    f.write_text('[topology]\nkind = "pair"\n')
    assert load(f).name == "small"
    assert load(f, name="c2").name == "c2"


@pytest.mark.parametrize("text,bps", [
    ("10gbit", 10**10), ("100mbit", 10**8), ("1.5gbit", 1_500_000_000), ("500kbit", 500_000),
    (1000, 1000), ("125mbps", 10**9), ("1mibit", 2**20), ("10Gbit", 10**10)])
def test_parse_rate(text: object, bps: int) -> None:
    assert parse_rate(text) == bps


def test_units_misc() -> None:
    assert parse_rate("unlimited") is None
    assert parse_prob("1%") == pytest.approx(0.01) and parse_prob(0.2) == 0.2
    assert parse_time("500ms") == pytest.approx(0.5) and parse_time("100us") == pytest.approx(1e-4)
    assert parse_time("2s") == 2 and parse_time(3) == 3
    assert format_rate(10**10) == "10gbit" and format_rate(1_500_000_000) == "1.5gbit"


def test_mtu_1280_is_enough_for_ipv6() -> None:
    """IPv6's minimum MTU is the smallest a link may have (every port has IPv6)."""
    t = loads('[topology]\nkind = "pair"\nname = "t"\n[defaults.link]\nmtu = 1280\n')
    assert [lk.mtu for lk in t.links] == [1280] and t.links[0].a.ipv6 is not None


def test_the_topology_keeps_its_own_name_and_kind_when_the_cluster_is_renamed(
        tmp_path: Path) -> None:
    t = load(ROOT / "namespaces/leaf-spine.toml", name="nu2")
    assert (t.name, t.declared_name, t.kind) == ("nu2", "ls", "leaf-spine")
    path = tmp_path / "mine.toml"
    path.write_text('[topology]\nkind = "pair"\n')
    assert (load(path).declared_name, load(path).kind) == ("mine", "pair")


def test_host_address_by_plane_and_what_is_not_a_host():
    """``Topology.host_address``: a host's address on each plane's port (what ``emu mrc
    probe --plane`` and ``emu perf --to`` send to), and one line for a switch or a name
    the cluster does not have."""
    t = load(ROOT / "namespaces" / "multi-plane.toml")
    assert t.host_address("h3") == t.host_address("h3", 0) == "10.0.2.11"
    assert t.host_address("h3", 1) == "10.1.2.11"
    with pytest.raises(ValueError, match="p0-leaf1 is a switch"):
        t.host_address("p0-leaf1")
    with pytest.raises(ValueError, match="no node 'h9' in cluster"):
        t.host_address("h9")
    with pytest.raises(ValueError, match="h3 has no address on plane 2"):
        t.host_address("h3", 2)

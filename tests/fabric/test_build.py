# SPDX-License-Identifier: GPL-2.0-only
"""The fabric on real namespaces (root): build, reach, ECMP spread, failover, SRv6, cleanup."""

from __future__ import annotations

import ipaddress
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fabric_util import host_addr, inside, leaf_spine, ns_of_cluster, pair, ping, rx_packets

from emu.fabric import Fabric, FabricError, clean, down, exec_argv, nl, render, state, status
from emu.fabric.naming import random_cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


@pytest.fixture
def make():
    """Build fabrics with fresh cluster names; ALWAYS tear down and check nothing remains."""
    made: list[str] = []

    def _make(topology, **kw) -> Fabric:
        name = random_cluster("t")
        made.append(name)
        return Fabric(topology, cluster=name, **kw).up()

    try:
        yield _make
    finally:
        for name in made:
            try:
                down(name)
            except KeyError:
                pass
        for name in made:
            assert ns_of_cluster(name) == [], f"namespaces of {name} left behind"
            assert state.load(name) is None


def _udp_flows(f: Fabric, src: str, dst: str, n: int, version: int = 4,
               base_port: int = 20000, per_flow: int = 1) -> int:
    """Send ``n`` flows (distinct source ports) from src to dst; return how many arrived."""
    fam = socket.AF_INET if version == 4 else socket.AF_INET6
    daddr = host_addr(f.topology, dst, version)
    with inside(f, dst):
        rx = socket.socket(fam, socket.SOCK_DGRAM)
    rx.bind((daddr, 9999))
    rx.setblocking(False)
    socks = []
    with inside(f, src):
        for i in range(n):
            s = socket.socket(fam, socket.SOCK_DGRAM)
            s.bind(("", base_port + i))
            socks.append(s)
    for _ in range(per_flow):
        for s in socks:
            s.sendto(b"x" * 64, (daddr, 9999))
    got, deadline = 0, time.monotonic() + 2
    while got < n * per_flow and time.monotonic() < deadline:
        if select.select([rx], [], [], 0.1)[0]:
            while True:
                try:
                    rx.recv(2048)
                    got += 1
                except BlockingIOError:
                    break
    for s in socks:
        s.close()
    rx.close()
    return got


def test_pair_pings_and_exec(make):
    f = make(pair())
    for a, b in (("h1", "h2"), ("h2", "h1")):
        for v in (4, 6):
            assert ping(f, a, host_addr(f.topology, b, v), v), (a, b, v)
    argv = exec_argv(f.cluster, "h1", ["cat", "/proc/net/dev"])
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert "eth0" in out and "lo" in out
    s = status(f.cluster)
    json.dumps(s)
    (lk,) = s["links"]
    assert lk["a"]["state"] == lk["b"]["state"] == "up"
    assert lk["a"]["mtu"] == 9000 and lk["a"]["alias"] == f"emu:{f.cluster}"
    assert "10.0.0.1/24" in lk["a"]["addresses"] and "fd00::2/64" in lk["b"]["addresses"]
    assert "h1-h2" in render(s)


def test_leaf_spine_all_hosts_ping(make):
    f = make(leaf_spine())
    hosts = [n.name for n in f.topology.hosts()]
    for v in (4, 6):
        for a in hosts:
            for b in hosts:
                if a != b:
                    assert ping(f, a, host_addr(f.topology, b, v), v), (a, b, v)


def test_ecmp_spreads_udp_source_ports_over_both_spines(make):
    f = make(leaf_spine(hash_seed=7))
    for v in (4, 6):
        before = {s: rx_packets(f, s, "leaf1") for s in ("spine1", "spine2")}
        assert _udp_flows(f, "h1", "h3", 200, v) == 200
        delta = {s: rx_packets(f, s, "leaf1") - before[s] for s in before}
        total = sum(delta.values())
        assert total >= 200, delta
        for d in delta.values():
            assert d >= 0.3 * 200, (v, delta)


def test_spine_link_down_reroutes(make):
    f = make(leaf_spine())
    with inside(f, "leaf1"):
        idx = socket.if_nametoindex("spine1")
        b = nl.Batch()
    with b:
        b.run([nl.link_set(idx, up=False)])
    before = {s: rx_packets(f, s, "leaf1") for s in ("spine1", "spine2")}
    assert _udp_flows(f, "h1", "h3", 100) == 100
    delta = {s: rx_packets(f, s, "leaf1") - before[s] for s in before}
    assert delta["spine1"] == 0 and delta["spine2"] >= 100, delta
    # the way back needs the far side to forget spine1 → leaf1 (a routing protocol's job)
    f.reconverge({"leaf1-spine1"})
    assert _udp_flows(f, "h3", "h1", 100, base_port=21000) == 100
    with inside(f, "leaf1"):
        b2 = nl.Batch()
    with b2:
        b2.run([nl.link_set(idx, up=True)])
    f.reconverge(set())
    assert _udp_flows(f, "h3", "h1", 100, base_port=22000) == 100


def test_captured_udp_has_correct_checksum(make):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    f = make(leaf_spine(spines=1, leaves=1, hosts_per_leaf=2))
    with inside(f, "leaf1"):
        cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    cap.bind(("h1", 0))
    cap.settimeout(2)
    assert _udp_flows(f, "h1", "h2", 2, 4) == 2
    assert _udp_flows(f, "h1", "h2", 2, 6) == 2
    seen = {4: 0, 6: 0}
    deadline = time.monotonic() + 2
    while min(seen.values()) == 0 and time.monotonic() < deadline:
        pkt = Ether(cap.recv(65535))
        for v, layer in ((4, IP), (6, IPv6)):
            if layer in pkt and UDP in pkt and pkt[UDP].dport == 9999:
                wire = pkt[UDP].chksum
                ref = pkt.__class__(bytes(pkt))
                del ref[UDP].chksum
                assert wire == layer(bytes(ref[layer]))[UDP].chksum, (v, hex(wire))
                seen[v] += 1
    cap.close()
    assert seen[4] and seen[6], seen


def _srv6_send(f: Fabric, segments: list[str] | None, segleft: int, outer_dst: str, n: int,
               *, outer_tc: int = 0, inner_tc: int = 0, src: str = "h1",
               dst: str = "h3") -> list[int]:
    """Send ``n`` IPv6-in-IPv6 packets from ``src`` (raw socket) with the outer destination
    ``outer_dst`` — with an SRH of ``segments`` (Segment List[0] last) or, ``segments``
    None, none — to a UDP socket on ``dst``; returns the traffic class each arrived with
    (``IPV6_RECVTCLASS``)."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting

    t = f.topology
    saddr, daddr = host_addr(t, src, 6), host_addr(t, dst, 6)
    inner = IPv6(src=saddr, dst=daddr, tc=inner_tc) / UDP(sport=4242, dport=7777) \
        / b"srv6-payload"
    if segments is None:
        pkt = IPv6(src=saddr, dst=outer_dst, nh=41, tc=outer_tc) / inner
    else:
        pkt = (IPv6(src=saddr, dst=outer_dst, nh=43, tc=outer_tc)
               / IPv6ExtHdrSegmentRouting(addresses=segments, segleft=segleft,
                                          lastentry=len(segments) - 1, nh=41)
               / inner)
    with inside(f, dst):
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    rx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
    rx.bind((daddr, 7777))
    rx.settimeout(1)
    with inside(f, src):
        tx = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
    got: list[int] = []
    with tx, rx:
        for _ in range(n):
            tx.sendto(bytes(pkt), (outer_dst, 0))
        try:
            while len(got) < n:
                data, anc, _flags, _addr = rx.recvmsg(100, socket.CMSG_SPACE(4))
                assert data == b"srv6-payload"
                tcs = [int.from_bytes(d[:4], sys.byteorder) for lvl, typ, d in anc
                       if lvl == socket.IPPROTO_IPV6 and typ == socket.IPV6_TCLASS]
                got.append(tcs[0] if tcs else -1)
        except TimeoutError:
            pass
    return got


def _kernel_srv6() -> bool:
    from emu.fabric import linkctl

    return linkctl.features().seg6local


def _srv6_fabric(make, datapath: str, **kw) -> Fabric:
    """An SRv6 leaf-spine on ``datapath`` (``kernel``: seg6local on switches; ``bpf``: tc
    BPF everywhere), skipped with the reason where this machine cannot have it."""
    from emu.fabric import srv6bpf

    if datapath == "kernel" and not _kernel_srv6():
        pytest.skip("this kernel has no SRv6 local SIDs (CONFIG_IPV6_SEG6_LWTUNNEL): "
                    "the bpf datapath serves it here")
    if datapath == "bpf" and (why := srv6bpf.available()) is not None:
        pytest.skip(f"the tc BPF SRv6 datapath cannot run here: {why}")
    t = leaf_spine(routing="srv6", **kw)
    t.srv6 = datapath
    f = make(t)
    assert f.srv6 is not None and f.srv6.name == datapath
    return f


def _srv6_counters(f: Fabric) -> dict[str, dict[str, int]]:
    s = status(f.cluster)
    assert s["srv6"]["datapath"] == f.srv6.name
    return s["srv6"]["counters"]


def _container(f: Fabric, nodes: list[str]) -> str:
    usid = b"".join(ipaddress.IPv6Address(f.topology.nodes[n].loopback6).packed[4:6]
                    for n in nodes)
    return str(ipaddress.IPv6Address(b"\xfc\x00\x00\x00" + usid.ljust(12, b"\0")))


@pytest.mark.parametrize("datapath", ["kernel", "bpf"])
@pytest.mark.parametrize("via", ["spine1", "spine2"])
def test_srv6_usid_steers_via_chosen_spine(make, via, datapath):
    f = _srv6_fabric(make, datapath)
    sid = {n.name: n.loopback6 for n in f.topology.nodes.values()}
    # uSID container: <block fc00:0> <spine> <leaf2> <h3>; each End(next-csid) shifts it left
    container = _container(f, [via, "leaf2", "h3"])
    other = "spine1" if via == "spine2" else "spine2"
    before = {s: rx_packets(f, s, "leaf1") for s in ("spine1", "spine2")}
    assert len(_srv6_send(f, [container], 0, container, 20)) == 20
    delta = {s: rx_packets(f, s, "leaf1") - before[s] for s in before}
    assert delta[via] >= 20 and delta[other] < 5, delta
    # classic SRH, one full SID per hop (End falls back to SRH processing): spine, then h3
    before = {s: rx_packets(f, s, "leaf1") for s in ("spine1", "spine2")}
    segs = [str(sid["h3"]), str(sid[via])]  # Segment List[0] is the last hop
    assert len(_srv6_send(f, segs, 1, str(sid[via]), 20)) == 20
    delta = {s: rx_packets(f, s, "leaf1") - before[s] for s in before}
    assert delta[via] >= 20 and delta[other] < 5, delta
    c = _srv6_counters(f)
    if f.srv6.host == "bpf":
        assert c["h3"]["decapped"] == 40 and c["h3"]["dropped_ecn"] == 0
    if datapath == "bpf":  # the switches' programs did the work, counted where it happened
        assert (c[via]["shifted"], c[via]["srh_end"]) == (20, 20), c[via]
        assert c["leaf2"]["shifted"] == 20 and c[other]["shifted"] == 0
        assert not any(c[n]["malformed"] or c[n]["failed"] for n in c), c
    else:
        assert set(c) == {"h1", "h2", "h3", "h4"}  # switches: the kernel's seg6local


@pytest.mark.parametrize("datapath", ["kernel", "bpf"])
def test_srv6_outer_ce_reaches_the_inner_packet(make, datapath):
    """A CE mark on the outer header (as a switch sets it) arrives on the inner packet
    (RFC 6040); an outer CE on a Not-ECT inner packet is dropped; ECT(0) stays ECT(0)."""
    f = _srv6_fabric(make, datapath)
    if f.srv6.host != "bpf":
        pytest.skip("hosts decap with End.DT6 here, which does not copy CE")
    container = _container(f, ["spine1", "leaf2", "h3"])
    CE, ECT0, NOT_ECT = 3, 2, 0
    got = _srv6_send(f, None, 0, container, 10, outer_tc=0x20 | CE, inner_tc=0x20 | ECT0)
    assert got == [0x20 | CE] * 10  # DSCP kept, ECN CE
    got = _srv6_send(f, [container], 0, container, 10, outer_tc=CE, inner_tc=ECT0)
    assert got == [CE] * 10
    assert _srv6_send(f, None, 0, container, 10, outer_tc=ECT0, inner_tc=ECT0) == [ECT0] * 10
    assert _srv6_send(f, None, 0, container, 5, outer_tc=CE, inner_tc=NOT_ECT) == []
    c = _srv6_counters(f)["h3"]
    assert (c["ce_copied"], c["dropped_ecn"], c["decapped"]) == (20, 5, 30), c


@pytest.mark.parametrize("datapath", ["kernel", "bpf"])
def test_srv6_paths_give_one_container_per_spine_and_each_delivers(make, datapath):
    from emu.fabric.routes import srv6_paths

    f = _srv6_fabric(make, datapath, spines=3)
    table = srv6_paths(f.topology, "h1")
    h3 = table[host_addr(f.topology, "h3", 6)]
    assert h3["port"] == "eth0" and h3["src"] == host_addr(f.topology, "h1", 6)
    spines = ["spine1", "spine2", "spine3"]
    assert h3["paths"] == [_container(f, [s, "leaf2", "h3"]) for s in spines]
    assert table[host_addr(f.topology, "h2", 6)]["paths"] == [_container(f, ["h2"])]
    for spine, container in zip(spines, h3["paths"], strict=True):
        before = {s: rx_packets(f, s, "leaf1") for s in spines}
        assert len(_srv6_send(f, None, 0, container, 10)) == 10  # no SRH: IPv6-in-IPv6
        delta = {s: rx_packets(f, s, "leaf1") - before[s] for s in spines}
        assert delta[spine] >= 10 and sum(delta.values()) - delta[spine] < 5, (spine, delta)
    container = table[host_addr(f.topology, "h2", 6)]["paths"][0]
    assert len(_srv6_send(f, None, 0, container, 5, dst="h2")) == 5


def test_srv6_without_kernel_support_falls_back_to_bpf_or_is_one_clear_error(make, monkeypatch):
    """On a kernel without seg6local routes (the probe says so, or is made to) ``auto``
    takes the tc BPF datapath: no SIDs, no sid0 devices; where that cannot run either,
    ``emu up`` of an SRv6 fabric stops before making anything, naming the kernel option
    and the way out — not a netlink error half-way through the routes."""
    from dataclasses import replace

    from emu.fabric import linkctl, srv6bpf

    monkeypatch.setattr(linkctl, "_features", replace(linkctl.features(), seg6local=False))
    if srv6bpf.available() is None:
        f = make(leaf_spine(routing="srv6"))
        assert f.srv6 is not None and (f.srv6.switch, f.srv6.host) == ("bpf", "bpf")
        assert state.load(f.cluster)["srv6"] == "bpf"
        for node in ("spine1", "h1"):
            with inside(f, node):
                assert "sid0" not in [n for _, n in socket.if_nameindex()]
    monkeypatch.setattr(srv6bpf, "available", lambda: "no clang (apt-get install clang)")
    with pytest.raises(FabricError, match="CONFIG_IPV6_SEG6_LWTUNNEL.*no clang.*ecmp") as e:
        make(leaf_spine(routing="srv6"))
    name = str(e.value).split()[1].rstrip(":")
    assert ns_of_cluster(name) == [] and state.load(name) is None


def test_srv6_settings_that_cannot_be_had_are_one_clear_error(make, monkeypatch):
    """``srv6 = "kernel"`` on a kernel without seg6local names the option and
    ``srv6 = "bpf"``; ``srv6 = "bpf"`` without clang says so. Nothing is made."""
    from dataclasses import replace

    from emu.fabric import linkctl, srv6bpf

    monkeypatch.setattr(linkctl, "_features", replace(linkctl.features(), seg6local=False))
    t = leaf_spine(routing="srv6")
    t.srv6 = "kernel"
    with pytest.raises(FabricError, match='srv6 = "kernel".*CONFIG_IPV6_SEG6_LWTUNNEL.*'
                                          'srv6 = "bpf"') as e:
        make(t)
    name = str(e.value).split()[1].rstrip(":")
    assert ns_of_cluster(name) == [] and state.load(name) is None
    monkeypatch.setattr(srv6bpf, "available", lambda: "no clang (apt-get install clang)")
    t.srv6 = "bpf"
    with pytest.raises(FabricError, match='srv6 = "bpf" needs clang and tc.*no clang'):
        make(t)


@pytest.mark.parametrize("setting,seg6,bpf,want", [
    ("auto", True, True, ("kernel", "bpf")),     # hosts decap in BPF: End.DT6 drops CE
    ("auto", True, False, ("kernel", "kernel")),  # no clang: End.DT6, with a warning
    ("auto", False, True, ("bpf", "bpf")),
    ("auto", False, False, "CONFIG_IPV6_SEG6_LWTUNNEL.*no clang.*ecmp"),
    ("kernel", True, True, ("kernel", "bpf")),
    ("kernel", False, True, 'srv6 = "kernel".*CONFIG_IPV6_SEG6_LWTUNNEL.*srv6 = "bpf"'),
    ("bpf", True, True, ("bpf", "bpf")),
    ("bpf", True, False, 'srv6 = "bpf" needs clang and tc.*no clang'),
])
def test_srv6_path_choice(monkeypatch, setting, seg6, bpf, want):
    """What ``[routing] srv6`` and the machine give (the kernel probe and the BPF check
    made to say so): a datapath per node kind, or one clear error."""
    from dataclasses import replace

    from emu.fabric import build, linkctl, srv6bpf

    monkeypatch.setattr(linkctl, "_features", replace(linkctl.features(), seg6local=seg6))
    monkeypatch.setattr(srv6bpf, "available", lambda: None if bpf else "no clang (apt-get)")
    t = leaf_spine(routing="srv6")
    t.srv6 = setting
    if isinstance(want, str):
        with pytest.raises(FabricError, match=want):
            build.srv6_path(t, "c1")
    else:
        p = build.srv6_path(t, "c1")
        assert (p.switch, p.host) == want and p.name == want[0]


def test_srv6_bpf_failure_half_way_rolls_back(make, monkeypatch):
    from emu.fabric import srv6bpf

    if (why := srv6bpf.available()) is not None:
        pytest.skip(f"the tc BPF SRv6 datapath cannot run here: {why}")
    real, calls = srv6bpf.attach, []

    def third_fails(*a, **kw):
        calls.append(a[0])
        if len(calls) == 3:
            raise srv6bpf.BpfError("injected")
        return real(*a, **kw)

    monkeypatch.setattr(srv6bpf, "attach", third_fails)
    name = random_cluster("t")
    t = leaf_spine(routing="srv6")
    t.srv6 = "bpf"
    with pytest.raises(FabricError, match="attaching the SRv6 BPF datapath.*injected.*removed"):
        Fabric(t, cluster=name).up()
    assert ns_of_cluster(name) == [] and state.load(name) is None


def test_failure_half_way_rolls_back(make, monkeypatch):
    name = random_cluster("t")

    def boom(self, node, p, replace=False):
        raise OSError(5, "injected")

    monkeypatch.setattr(Fabric, "_route_msgs", boom)
    with pytest.raises(FabricError, match="installing routes.*injected.*removed"):
        Fabric(leaf_spine(), cluster=name).up()
    assert ns_of_cluster(name) == [] and state.load(name) is None


def test_two_clusters_coexist(make):
    f1, f2 = make(pair()), make(pair())
    assert f1.cluster != f2.cluster
    assert ping(f1, "h1", "10.0.0.2", 4) and ping(f2, "h1", "10.0.0.2", 4)
    f1.down()
    assert ns_of_cluster(f1.cluster) == []
    assert ping(f2, "h2", "fd00::1", 6)


_KILL_CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
from fabric_util import leaf_spine
from emu.fabric import Fabric, netns
real = netns.create
def slow(name):
    time.sleep(0.01)
    return real(name)
netns.create = slow
Fabric(leaf_spine(4, 8, 8), cluster={name!r}).up()
time.sleep(30)
"""


@pytest.mark.parametrize("how", ["down", "clean"])
def test_down_after_sigkill_during_up(how):
    name = random_cluster("t")
    code = _KILL_CHILD.format(tests=str(Path(__file__).resolve().parents[1] / "support"), name=name)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 20
        while len(ns_of_cluster(name)) < 10 and time.monotonic() < deadline:
            time.sleep(0.005)
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert 10 <= len(ns_of_cluster(name)) < 76  # killed mid-way
        st = state.load(name)
        assert st is not None and st["phase"] == "creating"
        if how == "down":
            down(name)
        else:
            assert clean(only=[name]) == [name]  # named: never another engineer's clusters
        assert ns_of_cluster(name) == [] and state.load(name) is None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if state.load(name) is not None:
            down(name)


@pytest.mark.parametrize("name", ["pair", "leaf-spine", "rail-optimized", "multi-plane"])
def test_topology_files_every_port_reachable(make, name):
    """The shipped files (shared host subnets, /31 fabric links, planes, rails) all route."""
    load = pytest.importorskip("emu.topology").__dict__.get("load")
    if load is None:
        pytest.skip("topology loader not available")
    path = os.path.join(str(Path(__file__).resolve().parents[2]), "namespaces", f"{name}.toml")
    f = make(load(path))
    hosts = [n.name for n in f.topology.hosts()]
    for a in hosts:
        for b in hosts:
            for lk in f.topology.links_of(b) if a != b else ():
                ep = lk.end(b)
                for v, iface in ((4, ep.ipv4), (6, ep.ipv6)):
                    if iface is not None:
                        assert ping(f, a, str(iface.ip), v), (a, b, ep.ifname, v)


def test_a_kernel_that_refuses_the_veth_receive_ring_gets_a_warning_not_a_failure(monkeypatch):
    import errno

    from emu.fabric import build

    calls = []

    def refuse_gro(sock, ifname, name, on):
        calls.append((name, on))
        if name == "gro":
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(build, "set_feature", refuse_gro)
    why = build.cable_offloads(None, "eth0", checksum_offload=False)
    assert calls == [("tx", False), ("tso", False), ("gro", True)]
    assert "may reorder" in why and "Operation not supported" in why
    calls.clear()
    monkeypatch.setattr(build, "set_feature", lambda s, i, n, on: calls.append((n, on)))
    assert build.cable_offloads(None, "eth0", checksum_offload=True) is None
    assert calls == [("tso", False), ("gro", True)]  # checksum offload left as it is

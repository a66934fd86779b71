# SPDX-License-Identifier: GPL-2.0-only
"""``emu status``'s text table (emu.fabric.status.render), from a status record."""

from __future__ import annotations

from emu.fabric.status import render


def test_a_leafs_gateway_on_every_host_port_is_listed_once():
    gw = ["10.0.1.1/24", "fd00:0:1::1/64"]
    s = {"cluster": "c", "phase": "up", "created": "now", "links": [], "pids": [],
         "topology": {"name": "ls", "source": "namespaces/leaf-spine.toml", "routing": "ecmp"},
         "nodes": [{"name": "leaf1", "kind": "switch", "namespace": "c-leaf1", "present": True,
                    "interfaces": [{"addresses": gw}, {"addresses": gw},
                                   {"addresses": ["10.1.0.0/31"]}],
                    "loopback": ["127.0.0.1/8", "10.255.0.1/32"]}]}
    (row,) = [ln for ln in render(s).splitlines() if ln.startswith("leaf1")]
    assert row.split()[3:] == ["10.0.1.1/24", "fd00:0:1::1/64", "10.1.0.0/31", "10.255.0.1/32"]


def _header(topology: dict) -> str:
    s = {"cluster": "nu2", "phase": "up", "created": "now", "links": [], "pids": [],
         "nodes": [], "topology": topology}
    return render(s).splitlines()[0]


def test_the_header_names_the_topology_not_the_cluster_again():
    """``emu up namespaces/leaf-spine.toml --name nu2``: the cluster is nu2, the topology
    is the file's own (ls, a leaf-spine)."""
    head = _header({"name": "nu2", "declared_name": "ls", "kind": "leaf-spine",
                    "source": "namespaces/leaf-spine.toml", "routing": "ecmp"})
    assert head.startswith("cluster nu2  state up")
    assert "topology ls (leaf-spine, namespaces/leaf-spine.toml)  routing ecmp" in head
    # a state file from before the topology's own name was recorded: what it has
    old = _header({"name": "nu2", "source": "namespaces/leaf-spine.toml", "routing": "ecmp"})
    assert "topology nu2 (namespaces/leaf-spine.toml)" in old


def test_srv6_datapath_and_counters_are_shown():
    """``emu status`` names the SRv6 datapath in its header and, for the tc BPF path,
    lists each node's counters (drops summed)."""
    from emu.fabric.srv6bpf import STATS

    zero = dict.fromkeys(STATS, 0)
    s = {"cluster": "c", "phase": "up", "created": "now", "links": [], "pids": [], "nodes": [],
         "topology": {"name": "ls", "source": "x.toml", "routing": "srv6"},
         "srv6": {"datapath": "bpf", "decap": "bpf", "counters": {
             "spine1": {**zero, "shifted": 20, "srh_end": 3},
             "h3": {**zero, "decapped": 23, "ce_copied": 5, "dropped_ecn": 2, "malformed": 1}}}}
    lines = render(s).splitlines()
    assert lines[0].endswith("routing srv6 (bpf datapath, decap bpf)")
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines if ln.startswith(("spine1", "h3"))}
    assert rows["spine1"] == ["20", "3", "0", "0", "0", "0", "0"]
    assert rows["h3"] == ["0", "0", "23", "5", "3", "0", "0"]


def test_interfaces_reads_what_pyroute2_reads():
    """``interfaces`` decodes two rtnetlink dumps itself (speed); pyroute2, an independent
    decoder, must read the same state, MTU, MAC, alias, counters and addresses. (root)"""
    import os
    import subprocess

    import pytest

    if os.geteuid() != 0:
        pytest.skip("needs root (a namespace)")
    from pyroute2 import IPRoute

    from emu.fabric import netns
    from emu.fabric.naming import random_cluster
    from emu.fabric.status import interfaces

    ns = random_cluster("st")

    def ip(*a: str) -> None:
        subprocess.run(["ip", "-n", ns, *a], check=True, capture_output=True)

    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        ip("link", "add", "va", "type", "veth", "peer", "name", "vb")
        ip("link", "set", "va", "up", "mtu", "4200", "alias", "to b")
        ip("link", "set", "vb", "up")
        ip("link", "set", "lo", "up")
        ip("addr", "add", "10.9.9.1/24", "dev", "va")
        ip("addr", "add", "fd09::1/64", "dev", "va", "nodad")
        subprocess.run(["ip", "netns", "exec", ns, "ping", "-c", "2", "-i", "0.2", "-W", "1",
                        "10.9.9.1"], capture_output=True)
        got = interfaces(ns)
        with netns.entered(ns):
            ipr = IPRoute(groups=0)
        try:
            for msg in ipr.get_links():
                d = got[msg.get("ifname")]
                st = msg.get("stats64") or {}
                assert (d["index"], d["state"], d["mtu"], d["mac"], d["alias"]) == (
                    msg["index"], (msg.get("operstate") or "UNKNOWN").lower(), msg.get("mtu"),
                    msg.get("address"), msg.get("ifalias"))
                assert d["tx_packets"] == st.get("tx_packets")
            want = {}
            for m in ipr.get_addr():
                if m.get("scope", 0) != 253:
                    want.setdefault(m["index"], []).append(
                        f"{m.get('address')}/{m['prefixlen']}")
        finally:
            ipr.close()
        assert {d["index"]: d["addresses"] for d in got.values() if d["addresses"]} == want
        assert got["va"]["addresses"] == ["10.9.9.1/24", "fd09::1/64"]
        assert got["lo"]["tx_packets"] >= 2  # the pings went through lo
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)

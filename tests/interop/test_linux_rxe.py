# SPDX-License-Identifier: GPL-2.0-only
"""linux-rxe (issue #33 item 4): the Linux kernel's rdma_rxe in a QEMU guest as an interop
implementation.

Unit parts run everywhere: the recipe's hash, the contract's 127 without a boot, the
guest's QEMU command line. The port take-over (bridge, tap, MAC, addresses, routes) runs
in a namespace of its own (root) and must leave the port exactly as it found it. End to
end (root, qemu-system-x86 and debootstrap — installed by ``scripts/setup --rxe``, which
CI runs): the image is built or reused, and linux-rxe × linux-rxe runs ``handshake`` and
``transfer-1m`` through the runner — two guests, so the Linux kernel on both ends.
No wall-clock thresholds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from emu.fabric.naming import random_cluster
from emu.interop import contract as C
from emu.interop import impls as I
from emu.interop import runner
from emu.interop.rxe import image, vm
from emu.interop.testcases import select

root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")
TOOLS = [t for t in ("qemu-system-x86_64", "debootstrap", "mkfs.ext4")
         if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]
guest = pytest.mark.skipif(bool(TOOLS), reason=f"linux-rxe guest needs {', '.join(TOOLS)} "
                                               f"(scripts/setup --rxe installs them)")


def test_recipe_hash_names_the_packages_and_init():
    h = image.recipe_hash()
    assert len(h) == 12 and h == image.recipe_hash()
    assert "rdma-core" in image.recipe()["packages"] and "emu-init" in image.INIT


def test_unsupported_case_exits_127_without_a_guest(tmp_path):
    env = {**os.environ, "ROLE": "server", "TRANSPORT": "uet", "TESTCASE": "handshake",
           "PEER": "10.0.1.11", "DATA_DIR": str(tmp_path), "LOGDIR": str(tmp_path)}
    for transport, case in (("uet", "handshake"), ("roce", "compliance-123abc")):
        env.update(TRANSPORT=transport, TESTCASE=case)
        r = subprocess.run([sys.executable, "-m", "emu.interop.rxe", "endpoint"], env=env,
                           capture_output=True, text=True)
        assert r.returncode == C.EXIT_UNSUPPORTED, r.stderr
    assert not os.path.exists(tmp_path / "guest")


def test_registered_roce_only_with_its_own_daemon():
    impl = I.load()["linux-rxe"]
    assert impl.transports == ["roce"] and impl.daemon == "own" and impl.setup


def test_qemu_gets_the_ports_mac_and_no_offloads(tmp_path):
    img = image.Image(str(tmp_path), "K", "I", "R", {})
    port = vm.Port("eth0", "02:00:00:00:00:01", 9000, ["10.0.1.12/24"])
    g = vm.Guest(img, str(tmp_path), port, "true", mounts=["/data"], accel="tcg")
    argv = " ".join(g.qemu_argv())
    assert "mac=02:00:00:00:00:01" in argv and "csum=off" in argv and "guest_csum=off" in argv
    assert f"ifname={g.tap}" in argv and "path=/data" in argv and "snapshot=on" in argv


def _ns(ns: str, *cmd: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          check=True).stdout


def _port_state(ns: str) -> dict:
    link = json.loads(_ns(ns, "ip", "-j", "addr", "show", "dev", "p0"))[0]
    routes = json.loads(_ns(ns, "ip", "-j", "route", "show", "dev", "p0"))
    return {"mac": link["address"], "master": link.get("master"),
            "addrs": sorted(f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"]
                            if a["scope"] == "global"),
            "routes": sorted((r["dst"], r.get("gateway", "")) for r in routes),
            "links": sorted(x["ifname"] for x in json.loads(_ns(ns, "ip", "-j", "link")))}


@root
def test_port_take_over_is_undone_exactly(tmp_path):
    """A guest's run (without QEMU): the port is bridged with a tap, loses its addresses
    and MAC, and afterwards has them back — the same links, nothing left behind."""
    ns = random_cluster("rxp")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        _ns(ns, "ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        _ns(ns, "ip", "link", "set", "p0", "up")
        _ns(ns, "ip", "link", "set", "p1", "up")
        # as on a switch's host port: no connected route, the subnet via the gateway
        _ns(ns, "ip", "addr", "add", "10.9.1.12/24", "dev", "p0", "noprefixroute")
        _ns(ns, "ip", "addr", "add", "fd00:9:1::12/64", "dev", "p0", "nodad")
        _ns(ns, "ip", "route", "add", "10.9.1.1", "dev", "p0")
        _ns(ns, "ip", "route", "add", "default", "via", "10.9.1.1")
        before = _port_state(ns)
        code = ("import sys\nfrom emu.interop.rxe import vm, image\n"
                "p = vm.Port.holding('10.9.1.12')\n"
                "g = vm.Guest(image.Image('.', 'K', 'I', 'R', {}), sys.argv[1], p, 'true')\n"
                "g._take_port()\n"
                "import json, subprocess\n"
                "print(json.dumps([p.mac, subprocess.run(['ip', '-j', 'link', 'show', 'p0'],"
                " capture_output=True, text=True).stdout, p.addrs, p.routes]))\n"
                "assert g.stop() == []\n")
        out = _ns(ns, sys.executable, "-c", code, str(tmp_path))
        mac, during, addrs, routes = json.loads(out)
        # what the guest gets: the address flag, the on-link route before the gateway's
        assert "10.9.1.12/24,noprefixroute" in addrs and "fd00:9:1::12/64" in addrs
        assert routes.index(["10.9.1.1", ""]) < routes.index(["default", "10.9.1.1"])
        assert ["10.9.1.1", ""] in before["routes"] or ("10.9.1.1", "") in before["routes"]
        during = json.loads(during)[0]
        assert mac == before["mac"] and during["address"] != mac
        assert during.get("master", "").startswith("rxb")
        assert _port_state(ns) == before
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


@root
@guest
def test_linux_rxe_x_linux_rxe_transfer(tmp_path):
    """Two guests, the kernel's RoCEv2 on both ends, a 1 MiB transfer (its connection set
    up as in the handshake case, which .ci/run's matrices run against emu): ✓, ICRCs
    valid on the wire, and each side's rxe counters in its log directory."""
    image.build(progress=lambda s: None)
    known = I.load()
    log = str(tmp_path / "logs")
    res = runner.run([known["linux-rxe"]], [known["linux-rxe"]], ["roce"],
                     select("transfer-1m"), log, timeout=180,
                     prefix=random_cluster("rxe"), progress=lambda s: None)
    for r in res.results:
        assert r.result == "succeeded", (r.case, r.reason, r.wire)
        assert "0 bad ICRC" in r.wire
        for side in ("server", "client"):
            counters = os.path.join(log, "linux-rxe_linux-rxe", "roce", r.case, side, "log",
                                    "rxe-hw_counters.txt")
            sent = dict(line.split() for line in open(counters))
            assert int(sent["sent_pkts"]) > 0 and int(sent["rcvd_pkts"]) > 0


@root
def test_runner_ip6_and_pmtu_reach_both_sides(tmp_path):
    """``--ip 6 --pmtu 1024`` (emu × emu, the cheap pair): the endpoints get IPv6
    LOCAL/PEER and PMTU, the RoCEv2 packets on the wire are IPv6 with 1024-byte
    payloads — what the linux-rxe matrix over IPv6 GIDs and MTU 1024 relies on."""
    known = I.load()
    log = str(tmp_path / "logs")
    res = runner.run([known["emu"]], [known["emu"]], ["roce"], select("transfer-4k"), log,
                     timeout=60, prefix=random_cluster("rx6"), progress=lambda s: None,
                     family=6, pmtu=1024)
    [r] = res.results
    assert r.result == "succeeded", (r.reason, r.wire)
    text = open(os.path.join(log, "emu_emu", "roce", "transfer-4k", "dissect.txt")).read()
    writes = [ln for ln in text.splitlines() if "RC_WRITE" in ln]
    assert len(writes) == 4 and all("[fd00:0:1::11]" in ln and "len=1024" in ln
                                    for ln in writes), writes


def test_rate_sets_the_cables_but_not_trimmings_own(tmp_path):
    """``--rate``: the pair and reordering networks get it on every cable (the daemons
    pace to it); trimming keeps its own port rates."""
    import emu.switch.topology  # noqa: F401 - the [switch] checker, as the runner has it
    from emu.interop import networks
    from emu.topology import load

    # every network is real time: implementations keep their own clocks
    for net in networks.BY_NAME.values():
        t = load(net.topology_file(str(tmp_path), "x"), name="x")
        assert t.time == {"scale": 1.0} and t.links[0].a_to_b.rate_bps is None
    for net in (networks.PAIR, networks.REORDERING):
        text = open(net.topology_file(str(tmp_path), f"rx{net.name[0]}", "100mbit")).read()
        assert 'rate = "100mbit"' in text
        load(os.path.join(tmp_path, f"rx{net.name[0]}.toml"), name=f"rx{net.name[0]}")
    text = open(networks.TRIMMING.topology_file(str(tmp_path), "rxt", "100mbit")).read()
    assert 'rate = "100mbit"\n' not in text.split("[switch]")[0]

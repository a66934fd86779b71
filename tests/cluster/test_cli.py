# SPDX-License-Identifier: GPL-2.0-only
"""The cluster commands end to end, as a user runs them (root, real namespaces).

Every test uses its own cluster name and tears it down in a finalizer, then
checks that none of its namespaces remain — also when the test failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fabric_util import shipped_real_time

from emu.credible import capacity
from emu.fabric import state
from emu.fabric.naming import random_cluster
from emu.topology.loader import load
from emu.wire.pcapio import read_frames

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


def emu(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "emu", *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"emu {' '.join(args)} → {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def our_namespaces(cluster: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{cluster}-")]


@pytest.fixture
def cluster():
    """A fresh cluster name; whatever happens, the cluster is gone afterwards."""
    name = random_cluster("c")
    yield name
    if state.load(name) is not None:
        emu("down", name, check=False)
    assert our_namespaces(name) == [], "namespaces left behind"
    assert state.load(name) is None
    snapshots = Path("/run/emu/linkctl")
    assert not (snapshots.exists() and any(p.name.startswith(f"{name}-")
                                           for p in snapshots.iterdir())), "link snapshots left"


def test_leaf_spine_up_status_exec_link_impair_capture_down(cluster, tmp_path):
    # the leaf-spine with its rates unstated and in real time: each host port then runs
    # at the rate this machine sustains (its NIC's serializer, not the link's own rate)
    topo = tmp_path / "ls.toml"
    topo.write_text(shipped_real_time("leaf-spine.toml"))
    up = emu("up", str(topo), "--name", cluster, "--json")
    s = json.loads(up.stdout)
    assert {n["name"] for n in s["nodes"]} == {"h1", "h2", "h3", "h4", "leaf1", "leaf2",
                                                "spine1", "spine2"}
    assert all(lk["a"]["state"] == "up" for lk in s["links"])

    # every host reaches every other host, IPv4 and IPv6
    for src in ("h1", "h3"):
        for dst4, dst6 in (("10.0.1.12", "fd00:0:1::12"), ("10.0.2.12", "fd00:0:2::12")):
            emu("exec", f"{cluster}:{src}", "--", "ping", "-c1", "-W2", dst4)
            emu("exec", f"{cluster}:{src}", "--", "ping", "-6", "-c1", "-W2", dst6)

    # live impairment shows in status with its counters
    emu("impair", "-c", cluster, "leaf1:spine1", "--loss", "2%", "--ecn", "1%")
    st = json.loads(emu("status", cluster, "--json").stdout)
    lk = next(x for x in st["links"] if x["name"] == "leaf1-spine1")
    assert lk["a_to_b"]["loss"] == pytest.approx(0.02) and "counters" in lk["a_to_b"]
    assert lk["a_to_b"]["seed"] == 1  # seeded unless asked: the same packets every run
    out = emu("impair", "-c", cluster, "leaf1:spine1", "--seed", "random").stdout
    assert "loss 2.000%" in out and "seed random" in out, out
    r = emu("impair", "-c", cluster, "leaf1:spine1", "--seed", "lucky", check=False)
    assert r.returncode != 0 and "bad seed" in r.stderr
    emu("impair", "-c", cluster, "leaf1:spine1", "--clear")

    # clearing a host link's impairment keeps its port's line rate: the NIC's serializer
    # (a tbf that `emu up` put there) is not an impairment
    emu("impair", "-c", cluster, "h1:leaf1", "--loss", "1%")
    emu("impair", "-c", cluster, "h1:leaf1", "--clear")
    st = json.loads(emu("status", cluster, "--json").stdout)
    lk = next(x for x in st["links"] if x["name"] == "h1-leaf1")
    sustained = capacity.propose(load(topo))  # emu doctor's proposal for this machine
    assert lk["a_to_b"]["rate_bps"] == sustained and lk["a_to_b"]["loss"] == 0
    assert lk["b_to_a"]["rate_bps"] is None  # the leaf's side: no NIC, no serializer
    qd = emu("exec", f"{cluster}:h1", "--", "tc", "qdisc", "show", "dev", "eth0").stdout
    tc_rate = (f"{sustained / 1e9:g}Gbit" if sustained >= 1e9 else f"{sustained / 1e6:g}Mbit")
    assert " tbf " in qd and f"rate {tc_rate}" in qd, qd
    assert lk["a_to_b"]["line_rate"] is True  # status says it is the NIC's, not an impairment
    row = next(x for x in emu("status", cluster).stdout.splitlines()
               if x.startswith("h1-leaf1") and "a_to_b" in x)
    assert f"{sustained / 1e9:.4g}G (NIC)" in row, row

    # a spine link down: traffic still flows (via the other spine), and the change is logged
    emu("link", "-c", cluster, "leaf2-spine2", "down")
    emu("exec", f"{cluster}:h1", "--", "ping", "-c1", "-W2", "10.0.2.12")
    events = [json.loads(x) for x in Path(st["event_log"]).read_text().splitlines()]
    assert any(e["link"] == "leaf2-spine2" and e["action"] == "down" for e in events)
    emu("link", "-c", cluster, "leaf2-spine2", "up")

    # capture every link while h1 pings h4; the pcapng names its interfaces after links
    cap = tmp_path / "all.pcapng"
    proc = subprocess.Popen([sys.executable, "-m", "emu", "capture", "all", "-c", cluster,
                             "-w", str(cap), "--duration", "3"], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # let the capture open its sockets (correctness does not depend on it)
    emu("exec", f"{cluster}:h1", "--", "ping", "-c3", "-i0.2", "-W2", "10.0.2.12")
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    names = {f.interface for f in read_frames(cap)}
    assert {"h1-leaf1", "h4-leaf2"} <= names
    assert names <= {lk["name"] for lk in s["links"]}

    down = emu("down", cluster)
    assert "down" in down.stdout
    assert our_namespaces(cluster) == []


def test_scheduled_event_takes_a_link_down(cluster, tmp_path):
    topo = tmp_path / "sched.toml"
    topo.write_text(shipped_real_time("pair.toml").replace(
        'name = "pair"', f'name = "{cluster}"')
        + '\n[[event]]\nat = "300ms"\naction = "down"\ntarget = "h1-h2"\n')
    emu("up", str(topo))
    log = Path(state.load(cluster)["event_log"])
    for _ in range(200):  # poll: the schedule runs in the background
        if log.exists() and '"down"' in log.read_text():
            break
        time.sleep(0.05)
    assert '"down"' in log.read_text()
    st = json.loads(emu("status", cluster, "--json").stdout)
    assert st["links"][0]["a"]["state"] != "up"


def test_bad_topology_is_one_line_naming_file_and_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[topology]\nkind = "leaf-spine"\nname = "x"\n[params]\nspines = "two"\n')
    p = emu("up", str(bad), check=False)
    assert p.returncode == 2
    err = p.stderr.strip()
    assert "\n" not in err and "bad.toml" in err and "spines" in err
    p = emu("up", "namespaces/leaf-spine.toml", "--set", "bogus=1", check=False)
    assert p.returncode == 2 and "bogus" in p.stderr
    # an MTU IPv6 cannot use is refused when the file loads, before anything is built
    name = random_cluster("fb")
    p = emu("up", "namespaces/pair.toml", "--name", name, "--set", "link.mtu=500", check=False)
    assert p.returncode == 2 and p.stderr.strip() == (
        "emu up: namespaces/pair.toml: --set link.mtu=500: mtu 500 is too small for link "
        "h1-h2: its ports get IPv6 addresses (docs/addressing.md), and IPv6 needs an MTU of "
        "at least 1280")
    assert state.load(name) is None and our_namespaces(name) == []


def test_two_clusters_coexist_and_down_after_sigkill(cluster):
    other = cluster + "b"
    try:
        emu("up", "namespaces/pair.toml", "--name", cluster)
        # an `emu up` killed half way leaves a state file; `emu down` still removes everything
        proc = subprocess.Popen([sys.executable, "-m", "emu", "up", "namespaces/leaf-spine.toml",
                                 "--name", other, "--set", "hosts_per_leaf=16"], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(400):
            if our_namespaces(other):
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert state.load(cluster) is not None  # the first cluster is untouched
        emu("exec", f"{cluster}:h1", "--", "ping", "-c1", "-W2", "10.0.1.12")
        if state.load(other) is not None:
            emu("down", other)
        assert our_namespaces(other) == []
    finally:
        if state.load(other) is not None:
            emu("down", other, check=False)


def test_graph_of_a_file(tmp_path):
    out = tmp_path / "g.svg"
    emu("graph", "namespaces/multi-plane.toml", "-o", str(out))
    assert out.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_graph_of_a_running_cluster_named_with_c_as_with_other_commands(cluster, tmp_path):
    """``emu graph -c C -o out.svg`` (it said "unrecognized arguments: -c"); the cluster
    as the positional argument still works; a link that is down is drawn dashed."""
    emu("up", "namespaces/pair.toml", "--name", cluster, "--no-daemons", "--no-schedule")
    emu("link", "-c", cluster, "h1-h2", "down")
    for args in (["-c", cluster], ["--cluster", cluster], [cluster], [cluster, "-c", cluster]):
        out = tmp_path / "g.dot"
        p = emu("graph", *args, "-o", str(out))
        assert p.stdout == f"wrote {out}\n" and p.stderr == ""
        assert '"h1" -- "h2"' in out.read_text() and "dashed" in out.read_text()
        out.unlink()
    p = emu("graph", "namespaces/pair.toml", "-c", cluster, "-o", str(tmp_path / "g.svg"),
            check=False)
    assert (p.returncode, p.stderr) == (2, f"emu graph: 'namespaces/pair.toml' and --cluster "
                                           f"{cluster!r} disagree: name one topology file "
                                           "or running cluster\n")
    p = emu("graph", "-c", cluster + "x", "-o", str(tmp_path / "g.svg"), check=False)
    assert p.returncode == 2 and p.stderr.startswith(f"emu graph: no cluster '{cluster}x' is up")
    assert list(tmp_path.iterdir()) == []


def test_graph_to_a_path_that_cannot_be_written_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    for rel, why in (("nodir/g.svg", f"no directory {tmp_path}/nodir"),
                     ("file/g.svg", f"{tmp_path}/file is not a directory")):
        path = tmp_path / rel
        p = emu("graph", "namespaces/pair.toml", "-o", str(path), check=False)
        assert (p.returncode, p.stdout) == (2, "")
        assert p.stderr == f"emu graph: cannot write {path}: {why}\n"
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]


def test_capture_to_a_path_that_cannot_be_written_stops_before_capturing(cluster, tmp_path):
    """The path is checked first: one line naming it and why, exit 2, no "capturing …"
    and no file (it was a traceback once the capture had started). A write that fails
    while capturing (/dev/full: a full disk) is one line too."""
    emu("up", "namespaces/pair.toml", "--name", cluster, "--no-daemons", "--no-schedule")
    (tmp_path / "file").write_text("")
    for rel, why in (("nodir/sub/x.pcapng", f"no directory {tmp_path}/nodir/sub"),
                     ("file/x.pcapng", f"{tmp_path}/file is not a directory")):
        path = tmp_path / rel
        p = emu("capture", "all", "-c", cluster, "-w", str(path), "--duration", "1",
                check=False)
        assert (p.returncode, p.stdout) == (2, "")
        assert p.stderr == f"emu capture: cannot write {path}: {why}\n"
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]
    p = emu("capture", "all", "-c", cluster, "-w", "/dev/full", "--duration", "1", check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.splitlines()[-1] == ("emu capture: cannot write /dev/full: "
                                         "No space left on device")


@pytest.mark.parametrize("flag, value", [("--duration", "0"), ("--duration", "-1"),
                                         ("--duration", "nan"), ("--count", "0")])
def test_capture_refuses_a_duration_or_count_that_is_not_positive(tmp_path, flag, value):
    """A usage error (exit 2, argparse's lines), before any cluster is looked up: it
    captured nothing and said "stopped by duration", exit 0."""
    out = tmp_path / "x.pcapng"
    p = emu("capture", "-c", "nosuch-fa", "-w", str(out), flag, value, check=False)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.splitlines()[-1] == (f"emu capture: error: argument {flag}: "
                                         f"must be more than 0, got '{value}'")
    assert "capturing" not in p.stderr and not out.exists()


RECV = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
# generous: a passing run ends at the 200th flow; only a failing one waits it out (the
# sender is a whole `emu exec` + interpreter start, seconds on a loaded machine)
s.bind(("0.0.0.0", 9000)); s.settimeout(60)
print("ready", flush=True)
got = set()
try:
    while len(got) < 200:
        data, addr = s.recvfrom(100)
        got.add(addr[1])
except socket.timeout:
    pass
print(len(got), flush=True)
"""

SEND = """
import socket
for port in range(20000, 20200):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port)); s.sendto(b"x", ("10.0.2.12", 9000)); s.close()
"""


def _flows_delivered(cluster: str) -> int:
    rx = subprocess.Popen([sys.executable, "-m", "emu", "exec", f"{cluster}:h4", "--",
                           sys.executable, "-c", RECV], cwd=ROOT, stdout=subprocess.PIPE,
                          text=True)
    assert rx.stdout.readline().strip() == "ready"
    emu("exec", f"{cluster}:h1", "--", sys.executable, "-c", SEND)
    out, _ = rx.communicate(timeout=120)
    return int(out.strip())


def test_spine_link_down_reroutes_every_flow(cluster):
    """200 flows (different source ports, so different ECMP paths) all arrive with a
    leaf–spine link down, and again after it is back up."""
    emu("up", "namespaces/leaf-spine.toml", "--name", cluster)
    assert _flows_delivered(cluster) == 200
    emu("link", "-c", cluster, "leaf2:spine1", "down")
    assert _flows_delivered(cluster) == 200
    emu("link", "-c", cluster, "leaf2:spine1", "up")
    assert _flows_delivered(cluster) == 200


def test_whole_switch_failure_from_the_cli(cluster):
    emu("up", "namespaces/leaf-spine.toml", "--name", cluster)
    out = emu("link", "-c", cluster, "spine1", "down").stdout
    assert "leaf1-spine1" in out and "leaf2-spine1" in out
    st = json.loads(emu("status", cluster, "--json").stdout)
    states = {lk["name"]: lk["a"]["state"] for lk in st["links"]}
    assert states["leaf1-spine1"] != "up" and states["leaf1-spine2"] == "up"
    assert _flows_delivered(cluster) == 200  # everything through spine2
    emu("link", "-c", cluster, "spine1", "up")
    assert _flows_delivered(cluster) == 200


def _refused(p: subprocess.CompletedProcess) -> str:
    """The one line a refused command printed (exit 2, no traceback)."""
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    return p.stderr.strip()


def test_link_target_that_names_nothing_is_refused():
    """``emu link plane:7 down`` on a 2-plane cluster, ``plane:1`` where there are no
    planes: one line naming the planes there are, exit 2, no link touched; a real plane
    goes down and up."""
    mp, pair = random_cluster("fb"), random_cluster("fb")
    try:
        emu("up", "namespaces/multi-plane.toml", "--name", mp, "--no-daemons",
            "--set", "spines=1", "--set", "leaves=1", "--set", "hosts_per_leaf=1")
        err = _refused(emu("link", "-c", mp, "plane:7", "down", check=False))
        assert err == f"emu link: no plane 7 in cluster {mp} (its planes: 0, 1)"
        err = _refused(emu("link", "-c", mp, "spine9", "down", check=False))
        assert "unknown target 'spine9'" in err
        err = _refused(emu("link", "-c", mp, "h1:h9", "down", check=False))
        assert f"no link 'h1:h9' in cluster {mp}" in err
        st = json.loads(emu("status", mp, "--json").stdout)
        assert all(lk["a"]["state"] == "up" for lk in st["links"])
        out = emu("link", "-c", mp, "plane:1", "down").stdout
        assert "p1-leaf1-p1-spine1" in out and "p0-" not in out
        emu("link", "-c", mp, "plane:1", "up")

        emu("up", "namespaces/pair.toml", "--name", pair, "--no-daemons")
        err = _refused(emu("link", "-c", pair, "plane:1", "down", check=False))
        assert err.startswith(f"emu link: no plane 1 in cluster {pair}: it has no planes")
    finally:
        for c in (mp, pair):
            emu("down", c, check=False)
            assert our_namespaces(c) == []


def test_status_names_the_topology_apart_from_the_cluster():
    name = random_cluster("fb")
    try:
        emu("up", "namespaces/multi-plane.toml", "--name", name, "--no-daemons", "--set",
            "planes=1", "--set", "spines=1", "--set", "leaves=1", "--set", "hosts_per_leaf=1")
        head = emu("status", name).stdout.splitlines()[0]
        assert head.startswith(f"cluster {name}  state up")
        assert "topology mplane (multi-plane, namespaces/multi-plane.toml)" in head, head
    finally:
        emu("down", name, check=False)
        assert our_namespaces(name) == []


def test_impair_duplicate_counted_in_a_capture(tmp_path):
    """``emu impair --duplicate 25% -d a_to_b`` on a live pair: in a capture of the link,
    every datagram h1 sends appears once or twice (≈25 % twice, ±4σ), never three times;
    the status counter equals the duplicates seen; h2 → h1 is untouched; a bad value is
    one line."""
    import threading

    from emu.fabric.capture import capture, targets_for
    from emu.topology import load

    name = random_cluster("i2d")
    n, p = 2000, 0.25
    try:
        emu("up", "namespaces/pair.toml", "--name", name, "--no-daemons")
        bad = emu("impair", "-c", name, "h1-h2", "--duplicate", "150%", check=False)
        assert bad.returncode == 2 and "--duplicate" in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        out = emu("impair", "-c", name, "h1:h2", "--duplicate", "25%", "-d", "a_to_b").stdout
        fwd, rev = out.split(" a_to_b=", 1)[1].split(" b_to_a=")
        assert "duplicate 25.000%" in fwd and "duplicate" not in rev, out
        cap, stop, ready = tmp_path / "dup.pcapng", threading.Event(), threading.Event()
        topo = load(str(ROOT / "namespaces/pair.toml"), name=name)
        t = threading.Thread(target=capture, args=(targets_for(topo, "all", name), str(cap)),
                             kwargs={"stop": stop, "on_ready": ready.set,
                                     "handle_signals": False}, daemon=True)
        t.start()
        assert ready.wait(30)
        send = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"for i in range({n}):\n"
                "    s.sendto(b'DUPT' + i.to_bytes(4, 'big'), (TARGET, 7777))\n")
        emu("exec", f"{name}:h1", "--", sys.executable, "-c", send.replace("TARGET",
                                                                           "'10.0.1.12'"))
        emu("exec", f"{name}:h2", "--", sys.executable, "-c", send.replace("TARGET",
                                                                           "'10.0.1.11'"))
        # the rule's count now, while the capture still runs: every frame it has copied so far
        # must be in the capture (h1 keeps sending neighbour messages, copied too, after)
        counted = json.loads(emu("status", name, "--json").stdout)["links"][0]["a_to_b"][
            "counters"]["duplicated"]
        time.sleep(0.2)  # the last frames reach the capture socket
        stop.set()
        t.join(30)
        copies: dict[tuple[str, int], int] = {}
        frames = list(read_frames(cap))
        h1_mac = next(f.data[6:12] for f in frames if f.data.find(b"DUPT") >= 0
                      and f.data[30:34] == bytes([10, 0, 1, 12]))
        h1_frames: dict[bytes, int] = {}  # everything h1 sent (ICMP errors, ARP/ND too)
        for f in frames:
            if f.data[6:12] == h1_mac:
                h1_frames[f.data] = h1_frames.get(f.data, 0) + 1
        for f in frames:
            at = f.data.find(b"DUPT")
            # UDP only: h2's ICMP port-unreachable errors quote the datagrams too
            if at >= 0 and f.data[12:14] == b"\x08\x00" and f.data[23] == 17:
                dst = ".".join(str(b) for b in f.data[30:34])
                key = (dst, int.from_bytes(f.data[at + 4:at + 8], "big"))
                copies[key] = copies.get(key, 0) + 1
        fwd = [copies.get(("10.0.1.12", i), 0) for i in range(n)]
        rev = [copies.get(("10.0.1.11", i), 0) for i in range(n)]
        assert set(fwd) <= {1, 2} and rev == [1] * n, (sorted(set(fwd)), sorted(set(rev)))
        twice = fwd.count(2)
        sigma = (n * p * (1 - p)) ** 0.5
        assert abs(twice - n * p) <= 4 * sigma, (twice, n * p, sigma)
        st = json.loads(emu("status", name, "--json").stdout)
        c = st["links"][0]["a_to_b"]["counters"]
        # the rule copied the frames that appear twice (its own datagrams, and the ICMP
        # errors and neighbour messages h1 sent meanwhile): nothing appears twice that it did
        # not count, and what it had counted while the capture ran is there — but for the
        # odd frame the packet socket missed (seen in CI: 1 of ~500)
        seen_twice = sum(n - 1 for n in h1_frames.values())
        # … over IPv4 frames: h1 itself sends some neighbour messages twice, byte for byte
        # (an ARP or ND retry), which then look like a copy the rule never made (CI: 491
        # frames seen twice against 490 counted)
        ip_twice = sum(n - 1 for f, n in h1_frames.items() if f[12:14] == b"\x08\x00")
        assert ip_twice <= c["duplicated"], (ip_twice, seen_twice, c)
        assert counted - seen_twice <= max(2, counted // 100), (counted, seen_twice, c)
        # a copy is never copied again — over IPv4 frames: h1's kernel sends its IPv6 MLD
        # reports twice, byte for byte, so one the rule copied shows three times (CI)
        assert max(n for f, n in h1_frames.items() if f[12:14] == b"\x08\x00") == 2
        assert "DUP" in emu("status", name).stdout
    finally:
        if state.load(name) is not None:
            emu("down", name, check=False)
        assert our_namespaces(name) == []


def test_a_cluster_whose_daemons_all_died_is_abandoned_and_emu_clean_removes_it(cluster):
    """The hole a stop hook's cluster fell into: its daemons were killed with the session
    that started them, no ``emu down`` ran, and ``emu clean`` said "cleaned 0" while its
    namespaces lived on. A cluster with one daemon alive, or with none started
    (``--no-daemons``), is left alone."""
    emu("up", "namespaces/pair.toml", "--name", cluster)
    bare = cluster + "n"
    try:
        emu("up", "namespaces/pair.toml", "--name", bare, "--no-daemons")
        procs = json.loads(emu("status", cluster, "--json").stdout)["pids"]
        pids = [p["pid"] for p in procs if p["what"].startswith("nicd ")]
        # the machine-stall watcher ends with the daemons it serves (emu.credible.stallwatch)
        assert len(pids) == 2 and [p["what"] for p in procs].count("stallwatch") == 1
        os.kill(pids[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while json.loads(emu("status", cluster, "--json").stdout)["state"] != "degraded":
            assert time.monotonic() < deadline
        out = emu("clean", cluster).stdout  # one daemon still serves: not a leftover
        assert f"{cluster} left alone" in out and f"emu down {cluster}" in out, out
        assert "no cluster 'nosuch'" in emu("clean", "nosuch").stdout
        assert state.load(cluster) is not None and our_namespaces(cluster)
        os.kill(pids[1], signal.SIGKILL)
        while json.loads(emu("status", cluster, "--json").stdout)["state"] != "abandoned":
            assert time.monotonic() < deadline
        assert "emu clean removes it" in emu("status", cluster).stdout
        out = emu("clean", cluster, bare).stdout  # named: never another engineer's clusters
        cleaned = out.splitlines()[0]
        assert cluster in cleaned and bare not in cleaned, out
        assert f"{bare} left alone" in out, out
        assert state.load(cluster) is None and our_namespaces(cluster) == []
        assert state.load(bare) is not None and our_namespaces(bare)
    finally:
        if state.load(bare) is not None:
            emu("down", bare, check=False)
        assert our_namespaces(bare) == []

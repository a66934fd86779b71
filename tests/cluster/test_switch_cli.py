# SPDX-License-Identifier: GPL-2.0-only
"""The switch pipeline as users run it: a topology's [switch] section, emu up/switch/down."""

from __future__ import annotations

import json
import os
import time

import pytest
from fabric_util import ROOT
from fabric_util import emu_cli as emu
from fabric_util import ns_of_cluster as our_namespaces

from emu.fabric import state
from emu.fabric.naming import random_cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")

TOPOLOGY = """
[topology]
kind = "leaf-spine"
name = "{name}"
[switch.port]
rate = "1gbit"
kmin = "20KB"
kmax = "200KB"
[[switch.override]]
node = "leaf2"
port = "h4"
rate = "20mbit"
kmin = "3KB"
kmax = "30KB"
pmax = 1.0
"""

BLAST = """
import socket, struct
from emu.wire.codec import roce
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x02)          # ECT(0): markable
s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO: DF, as RoCE needs
other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
other.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x02)
payload = bytes(1024)
for psn in range(300):
    pkt = roce.encode_packet(roce.BTH(opcode=0x0A, dqpn=0x11, psn=psn),
                             (roce.RETH(0x1000, 7, len(payload)),), payload)
    s.sendto(pkt, ("10.0.2.12", 4791))
    other.sendto(payload, ("10.0.2.12", 9999))  # not transport traffic: never queued
"""


@pytest.fixture
def cluster(tmp_path):
    name = random_cluster("s")
    path = tmp_path / "switch.toml"
    path.write_text(TOPOLOGY.format(name=name))
    yield name, path
    if state.load(name) is not None:
        emu("down", name, check=False)
    assert our_namespaces(name) == []


def test_pipeline_from_topology_marks_and_is_controllable(cluster):
    name, path = cluster
    emu("up", str(path))
    pids = [p["pid"] for p in state.load(name)["pids"] if p["what"].startswith("switchd")]
    assert len(pids) == 4  # one per switch

    # three senders into one 20 Mbit/s port: the queue builds and CE marks appear
    for h in ("h1", "h2", "h3"):
        emu("exec", f"{name}:{h}", "--", "env", f"PYTHONPATH={ROOT}", os.sys.executable,
            "-c", BLAST)
    # emu status shows the counters each switch daemon last wrote (every series_interval
    # of fabric time: 1.5 s of wall at this topology's time scale, 15): wait for a file
    # written after the blast, as a user rerunning emu status would
    deadline = time.monotonic() + 60
    while True:
        st = json.loads(emu("status", name, "--json").stdout)
        port = st["switches"]["leaf2"]["ports"]["h4"]
        if port["enqueued"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert port["enqueued"] > 0 and port["marked"] > 0
    assert port["max_depth"] > 3000  # marks only once the queue passed Kmin
    # non-transport traffic never reached the pipeline: only 900 transport packets did
    assert port["enqueued"] + port["dropped_tail"] + port["dropped_random"] <= 900

    plot = ROOT / "out" / f"{name}-depth.svg"
    plot.parent.mkdir(exist_ok=True)
    out = emu("switch", f"{name}:leaf2", "--plot", str(plot), "--metric", "depth").stdout
    png = plot.with_suffix(".png")
    assert out.startswith(f"wrote {plot} and {png} (")
    svg = plot.read_text()  # a line per port, named in the legend (emu.plot)
    assert 'id="series-0"' in svg and ">h4</text>" in svg and "depth (bytes)" in svg
    assert png.read_bytes()[:4] == b"\x89PNG"
    plot.unlink()
    png.unlink()

    out = emu("switch", f"{name}:leaf2", "h4", "set", "rate=5mbit", "c3.xoff=100KB").stdout
    assert "rate=5mbit" in out
    cfg = json.loads(emu("switch", f"{name}:leaf2", "--config").stdout)
    assert cfg["config"]["ports"]["h4"]["rate"] == 5_000_000
    bad = emu("switch", f"{name}:leaf2", "h4", "set", "kmin=lots", check=False)
    assert bad.returncode == 2 and "kmin" in bad.stderr

    emu("down", name)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or \
            open(f"/proc/{pid}/stat").read().split()[2] == "Z"


@pytest.mark.parametrize("section,key", [
    ('[switch.port]\nkmin = "soon"\n', "kmin"),
    ('[switch]\nbogus = 1\n', "bogus"),
    ('[[switch.override]]\nnode = "leaf9"\nrate = "1gbit"\n', "node"),
])
def test_bad_switch_section_is_one_line(cluster, section, key):
    name, path = cluster
    path.write_text(f'[topology]\nkind = "leaf-spine"\nname = "{name}"\n{section}')
    p = emu("up", str(path), check=False)
    assert p.returncode == 2
    assert "\n" not in p.stderr.strip() and path.name in p.stderr and key in p.stderr


SMALL = """
[topology]
kind = "leaf-spine"
name = "{name}"
[params]
spines = 1
leaves = 1
hosts_per_leaf = 2
[switch.port]
rate = "1gbit"
"""


@pytest.fixture
def small(tmp_path):
    """A one-leaf cluster with a switch pipeline and no NIC daemons; gone afterwards."""
    name = random_cluster("fb")
    path = tmp_path / "small.toml"
    path.write_text(SMALL.format(name=name))
    emu("up", str(path), "--no-daemons")
    yield name
    emu("down", name, check=False)
    assert our_namespaces(name) == []


def _one_line_error(p) -> str:
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "\n" not in p.stderr.strip(), p.stderr
    return p.stderr.strip()


def test_switch_names_only_real_ports_and_nodes(small):
    name = small
    real = ["h1", "h2", "spine1"]

    def ports() -> list[str]:
        return list(json.loads(emu("switch", "-c", name, "leaf1", "--config").stdout)
                    ["config"]["ports"])

    # a port the switch lacks, a wildcard matching nothing: refused, naming the real ports
    for port in ("h9", "zz*"):
        err = _one_line_error(emu("switch", "-c", name, "leaf1", port, "set", "rate=1gbit",
                                  check=False))
        assert port in err and "h1, h2, spine1" in err
        err = _one_line_error(emu("switch", "-c", name, "leaf1", port, check=False))
        assert port in err and "h1, h2, spine1" in err
    assert ports() == real
    # '*' sets every real port and is not kept as a port of its own
    out = emu("switch", "-c", name, "leaf1", "*", "set", "rate=500mbit").stdout
    assert "h1, h2, spine1" in out
    cfg = json.loads(emu("switch", "-c", name, "leaf1", "--config").stdout)["config"]["ports"]
    assert list(cfg) == real and all(cfg[p]["rate"] == 500_000_000 for p in real)
    rows = [line.split()[0] for line in emu("switch", "-c", name, "leaf1").stdout.splitlines()
            if line.startswith(("h", "spine", "*", "zz"))]
    assert rows == real


def test_impair_a_pipeline_port_rate_says_where_the_rate_is_set(small):
    """The pipeline serializes its ports (its kernel datapath's tbf, no link tbf under it):
    a link rate there is refused with where to set it; loss still applies on the link."""
    name = small
    row = next(x for x in emu("status", name).stdout.splitlines()
               if x.startswith("h1-leaf1") and "b_to_a" in x)
    assert "1G (switch)" in row, row  # status says who serializes it
    p = emu("impair", "-c", name, "leaf1:h1", "--direction", "a_to_b", "--rate", "10mbit",
            check=False)
    err = _one_line_error(p)
    assert "switch pipeline serializes this port" in err and "emu switch" in err, err
    out = emu("impair", "-c", name, "leaf1:h1", "--direction", "a_to_b", "--loss", "1%").stdout
    assert "loss 1.000%" in out


def test_switch_says_a_node_is_missing_or_a_host(small):
    name = small
    # a node that is not there, or is a host: said so, with the switches listed
    err = _one_line_error(emu("switch", "-c", name, "leaf9", check=False))
    assert f"no node 'leaf9' in cluster {name}" in err and "leaf1, spine1" in err
    err = _one_line_error(emu("switch", "-c", name, "h1", check=False))
    assert "h1 is a host, not a switch" in err and "leaf1, spine1" in err
    err = _one_line_error(emu("switch", "-c", name, "h1", "--plot", "/dev/null", check=False))
    assert "h1 is a host" in err


def test_switch_of_a_cluster_without_pipeline_says_so(tmp_path):
    name = random_cluster("fb")
    path = tmp_path / "plain.toml"
    path.write_text(SMALL.format(name=name).split("[switch.port]")[0])
    emu("up", str(path), "--no-daemons")
    try:
        err = _one_line_error(emu("switch", "-c", name, "leaf1", check=False))
        assert err.endswith(f"no switch pipeline on leaf1 in cluster {name}: its topology "
                            "has no [switch] section (or pipeline = false)")
    finally:
        emu("down", name, check=False)
        assert our_namespaces(name) == []


def test_a_plot_that_cannot_be_written_is_one_line_before_the_switch_is_asked(tmp_path):
    """Checked first, so no cluster is needed to see it; the write itself, after the series
    is read, says the same (it said the switch daemon was not reachable)."""
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "q.svg"
    p = emu("switch", "leaf1", "-c", "nosuch-fa", "--plot", str(path), check=False)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == f"emu switch: cannot write {path}: {tmp_path}/file is not a directory\n"


def test_paused_time_is_seconds_on_the_user_datapath_too(tmp_path):
    """The kernel datapath counts paused_time as a float and printed 0.000; the user
    datapath's 0 printed as "0" in the same column."""
    name = random_cluster("fb")
    path = tmp_path / "user.toml"
    path.write_text(SMALL.format(name=name).replace("[switch.port]",
                                                    '[switch]\ndatapath = "user"\n[switch.port]'))
    emu("up", str(path), "--no-daemons")
    try:
        table = [line.split() for line in emu("switch", "-c", name, "leaf1").stdout.splitlines()
                 if line.startswith(("h", "spine"))]
        assert [r[0] for r in table] == ["h1", "h2", "spine1"]
        assert all(r[8] == "0.000" for r in table), table
    finally:
        emu("down", name, check=False)
        assert our_namespaces(name) == []

# SPDX-License-Identifier: GPL-2.0-only
"""The switch pipeline dilated, as users run it (root): a leaf-spine with ``[switch]`` ECN
marking brought up at ``--set time.scale=4``, one ``emu perf write-bw`` through a slow
switch port, on each datapath (the kernel's tc BPF + tbf, and the user-space daemon).

What shows the switch runs on fabric time, with no wall-clock threshold: the flow's
goodput in fabric Gb/s is bounded by the switch port's *fabric* rate (a daemon that
took the fabric figure for wall units would let four times as much through), the
port forwarded and CE-marked the flow, and ``emu switch`` states its configuration
in the topology's units and its times as fabric seconds with the scale beside them.
Clusters get fresh names and are removed also when a check fails.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from fabric_util import emu_cli, ns_of_cluster

from emu.fabric import state
from emu.fabric.naming import random_cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")

SCALE = 4
BOTTLENECK = 200e6  # leaf2's port to h4, fabric bits/s; the NICs send at 1 Gb/s

TOPOLOGY = """
[topology]
kind = "leaf-spine"
name = "{name}"
[params]
spines = 1
leaves = 2
hosts_per_leaf = 2
[nic]
line_rate = "1gbit"
[switch]
datapath = "{datapath}"
[switch.port]
rate = "1gbit"
[[switch.override]]
node = "leaf2"
port = "h4"
rate = "200mbit"
kmin = "5KB"
kmax = "40KB"
pmax = 1.0
"""


@pytest.fixture(params=["kernel", "user"])
def cluster(request, tmp_path) -> Iterator[str]:
    name = random_cluster("sft")
    path = tmp_path / "switch.toml"
    path.write_text(TOPOLOGY.format(name=name, datapath=request.param))
    try:
        emu_cli("up", str(path), "--set", f"time.scale={SCALE}", timeout=300)
        yield name
    finally:
        if state.load(name) is not None:
            emu_cli("down", name, check=False)
        assert ns_of_cluster(name) == [] and state.load(name) is None


def test_a_dilated_switch_forwards_marks_and_reports_in_fabric_time(cluster):
    name = cluster
    st = state.load(name)
    assert st is not None and st["plan"]["time"]["scale"] == SCALE
    sw = st["plan"]["switches"]["leaf2"]
    assert sw["args"][:2] == ["--time-scale", f"{SCALE}"]

    p = emu_cli("perf", "write-bw", "--from", "h1", "--to", "h4", "-c", name, "-s", "256K",
                "-n", "40", "--transport", "roce", "--json", timeout=300)
    doc = json.loads(p.stdout)
    assert doc["passed"], doc["errors"]
    assert doc["time"]["scale"] == SCALE and doc["units"]["time"] == "fabric"
    gbps = doc["results"][0]["gbps_average"]
    # the switch port's fabric rate bounds the fabric goodput (wall units taken for fabric
    # would have let 4x through, up to the NICs' 1 Gb/s)
    assert 0.3 * BOTTLENECK / 1e9 < gbps <= 1.05 * BOTTLENECK / 1e9, gbps

    counters = json.loads(emu_cli("switch", f"{name}:leaf2", "h4", "--json").stdout)
    assert counters["time_scale"] == SCALE
    port = counters["ports"]["h4"]
    assert port["enqueued"] > 0 and port["released"] > 0 and port["marked"] > 0, port
    assert port["max_depth"] >= 5000  # marks once the queue passed kmin: bytes at any scale

    text = emu_cli("switch", f"{name}:leaf2", "h4").stdout
    assert "times in fabric seconds" in text, text
    assert f"time scale {SCALE} (one fabric ms costs {SCALE} ms of wall time)" in text, text
    config = json.loads(emu_cli("switch", f"{name}:leaf2", "--config").stdout)["config"]
    assert config["ports"]["h4"]["rate"] == 200_000_000  # the topology's units, not wall
    if counters["datapath"] == "kernel":  # … and the kernel's tbf at the wall rate
        assert tbf_rate(name) == BOTTLENECK / SCALE
    # a setting is given in fabric units too, and the daemon keeps it so
    emu_cli("switch", f"{name}:leaf2", "h4", "set", "rate=100mbit")
    config = json.loads(emu_cli("switch", f"{name}:leaf2", "--config").stdout)["config"]
    assert config["ports"]["h4"]["rate"] == 100_000_000
    if counters["datapath"] == "kernel":
        assert tbf_rate(name) == 100e6 / SCALE


def tbf_rate(cluster: str) -> float:
    """The rate (bits/s) of the tbf the kernel datapath put on leaf2's port to h4."""
    out = emu_cli("exec", f"{cluster}:leaf2", "--", "tc", "-j", "qdisc", "show", "dev",
                  "h4").stdout
    tbf = [q for q in json.loads(out) if q.get("kind") == "tbf"]
    assert len(tbf) == 1, out
    return float(tbf[0]["options"]["rate"]) * 8  # tc's JSON gives bytes per second

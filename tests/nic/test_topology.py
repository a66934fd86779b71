# SPDX-License-Identifier: GPL-2.0-only
"""A topology file's ``[nic]`` section reaches every daemon ``emu up`` starts (root).

The point of the section is to rerun a fabric with another congestion
controller or path policy: here UET with RCCC and REPS, and a slower RoCE
port. Checked where it matters: the daemons report the options, and the UET
engine really ran receiver credit (CREDIT_REQ / CREDIT counted) while the
data arrived byte for byte.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fabric_util import ns_of_cluster
from uet_cluster import UetCluster

from emu.cluster import cluster as C
from emu.fabric import state
from emu.fabric.naming import random_cluster
from emu.topology import loader

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")

TOPOLOGY = """
[topology]
kind = "pair"
name = "{name}"
[nic]
rx_coalesce = "150us"
sched = "slice"
[nic.uet]
cc = "rccc"
paths = "reps"
[nic.roce]
line_rate = "2gbit"  # an engine rate spelled as a link's: bits/s to the daemon
"""


@pytest.fixture
def cluster(tmp_path: Path):
    name = random_cluster("nt")
    path = tmp_path / "nic.toml"
    path.write_text(TOPOLOGY.format(name=name))
    topo = loader.load(path, ["nic.uet.path_params={penalty = 0.0005}"])
    try:
        yield C.up(topo, name, schedule=False, progress=lambda m: None)
    finally:
        if state.load(name) is not None:
            C.down(name)
        for h in ("h1", "h2"):
            Path(C.trace_path(name, h)).with_name(f"{name}.nicd-{h}.log").unlink(
                missing_ok=True)
        Path(C.event_log(name)).unlink(missing_ok=True)
        assert ns_of_cluster(name) == [] and state.load(name) is None


def test_nic_section_configures_every_daemon(cluster):
    uc = UetCluster(cluster, ["h1", "h2"])  # the daemons are emu up's
    for h in ("h1", "h2"):
        t = uc.stats(h)["transports"]
        opts = dict(t["uet"]["engine_options"])
        # emu up adds the fabric's base round trip (emu.credible.rates), nothing else
        assert opts.pop("base_rtt") > 0
        assert opts == {"cc": "rccc", "paths": "reps", "path_params": {"penalty": 0.0005}}
        assert t["roce"]["engine_options"] == {"line_rate": 2e9}
        # … and what the engines run with, their factories' defaults included
        assert t["uet"]["options_in_force"]["cc"] == "rccc"
        assert t["uet"]["options_in_force"]["rto_max"] > 0  # a default nobody set
        assert t["roce"]["options_in_force"]["line_rate"] == 2e9
        assert t["roce"]["options_in_force"]["burst_bytes"] > 0
        assert uc.stats(h)["rx_coalesce"] == "150us"  # [nic] rx_coalesce → --rx-coalesce
        assert uc.stats(h)["sched"].startswith("slice")  # [nic] sched → --sched
    uc.write("h1", "h2", 1 << 20, 5, timeout=60)  # asserts byte-exact delivery
    tx, rx = uc.engine("h1"), uc.engine("h2")
    # receiver credit really ran: the sender asked, the receiver granted
    assert tx.get("tx_credit_req", 0) > 0 and tx.get("rx_credit", 0) > 0, tx
    assert rx.get("rx_credit_req", 0) > 0, rx


def test_nic_sched_is_checked_at_load_time():
    from emu.nic.topology import check_section, sched_arg

    assert sched_arg({"sched": "default"}) == ("--sched", "default") and sched_arg({}) == ()
    where, why = check_section({"sched": "fast"}, None)
    assert where == "nic.sched" and "rt, slice, default" in why

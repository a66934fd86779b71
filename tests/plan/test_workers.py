# SPDX-License-Identifier: GPL-2.0-only
"""``[nic] workers``: how many processes serve a cluster's hosts, which host each serves,
and what the capacity model charges a process serving several (no root)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import emu.cluster  # noqa: F401  (registers the [nic]/[switch] checkers)
from emu import plan as P
from emu.credible import capacity
from emu.nic.topology import check_section, worker_of, workers
from emu.plan.render import render
from emu.topology.loader import load
from emu.topology.model import TopologyError

NS = Path(__file__).resolve().parents[2] / "namespaces"


def test_workers_default_to_one_per_core_never_more_than_hosts():
    assert workers({}, hosts=4, cores=2) == 2
    assert workers({"workers": "auto"}, hosts=1, cores=8) == 1
    assert workers({"workers": "host"}, hosts=6, cores=2) == 6
    assert workers({"workers": 3}, hosts=8, cores=2) == 3
    assert workers({"workers": 16}, hosts=8, cores=2) == 8


def test_hosts_are_dealt_round_robin_or_each_has_its_own_process():
    assert worker_of(["h1", "h2", "h3", "h4", "h5"], 2) == {
        "h1": 0, "h2": 1, "h3": 0, "h4": 1, "h5": 0}
    assert worker_of(["h1", "h2"], 2) == {"h1": None, "h2": None}


@pytest.mark.parametrize("bad", [0, -1, True, "many", 1.5])
def test_a_bad_workers_value_is_refused_naming_the_key(bad):
    where, why = check_section({"workers": bad})
    assert where == "nic.workers" and "auto" in why and repr(bad) in why


def test_a_bad_workers_value_fails_the_load_as_a_set():
    with pytest.raises(TopologyError, match="nic.workers"):
        load(NS / "leaf-spine.toml", ["nic.workers=0"])


def test_the_plan_assigns_workers_and_dry_run_says_so():
    costs = replace(capacity.REFERENCE, cores=2)
    plan = P.build(load(NS / "leaf-spine.toml"), costs)
    assert {h: n.worker for h, n in plan.nics.items()} == {"h1": 0, "h2": 1, "h3": 0, "h4": 1}
    assert "NIC daemons in 2 worker process(es) ([nic] workers): 0: h1, h3; 1: h2, h4" \
        in render(plan)
    assert P.Plan.from_dict(plan.to_dict()) == plan
    own = P.build(load(NS / "leaf-spine.toml", ["nic.workers=host"]), costs)
    assert all(n.worker is None for n in own.nics.values())
    assert "NIC daemons: one process per host" in render(own)


def test_a_process_serving_several_hosts_is_charged_for_each():
    """One flow whose ends share a process costs that process both ends; all hosts busy,
    a process with k hosts carries k hosts' sending and receiving. With a worker per core
    and every host sending, the per-process bound is the machine's: the auto scale of the
    shipped fabrics is what it was with a process per host."""
    c = capacity.REFERENCE
    one = capacity.max_rate(c, 0, 4200)
    shared = capacity.max_rate(c, 0, 4200, hosts_per_daemon=2)
    assert shared < one
    assert shared == pytest.approx(min(
        capacity.DAEMON_SHARE / (c.nic_tx + c.nic_rx),
        capacity.MACHINE_SHARE * c.cores / (c.nic_tx + c.nic_rx)) * capacity.frame_bytes(4200) * 8)
    four = capacity.max_rate(c, 0, 4200, flows=4)
    assert capacity.max_rate(c, 0, 4200, flows=4, hosts_per_daemon=2) == pytest.approx(four)
    assert capacity.max_rate(c, 0, 4200, flows=4, hosts_per_daemon=4) < four


def test_a_workers_hosts_read_short_however_many():
    from emu.nic.topology import hosts_label

    assert hosts_label(["h1", "h3"]) == "h1, h3"
    assert hosts_label([f"h{i}" for i in range(1, 257, 2)]) == "h1, h3 … h255 (128 hosts)"
    costs = replace(capacity.REFERENCE, cores=2)
    big = P.build(load(NS / "leaf-spine.toml", ["leaves=16", "hosts_per_leaf=16"]), costs)
    line = next(ln for ln in render(big).splitlines() if ln.startswith("NIC daemons in"))
    assert line.endswith("0: h1, h3 … h255 (128 hosts); 1: h2, h4 … h256 (128 hosts)")

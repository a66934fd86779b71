# SPDX-License-Identifier: GPL-2.0-only
"""Topologies too big for this machine are refused before any work, naming the limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import emu.cluster  # noqa: F401  (registers the [nic]/[switch] checkers)
from emu import limits
from emu.topology import GENERATORS, load

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("kind,params", [
    ("pair", {"links": 3}),
    ("leaf-spine", {"spines": 3, "leaves": 4, "hosts_per_leaf": 5, "uplinks": 2}),
    ("rail-optimized", {"hosts": 6, "rails": 3, "spines": 2, "uplinks": 1}),
    ("multi-plane", {"planes": 3, "spines": 2, "leaves": 3, "hosts_per_leaf": 2, "uplinks": 2}),
])
def test_size_from_parameters_matches_the_generated_topology(kind, params):
    gen = GENERATORS[kind]
    topo = gen.func(**params)
    size = gen.size(**params)
    assert (size.hosts, size.switches, size.links) == \
        (len(topo.hosts()), len(topo.switches()), len(topo.links))


def test_the_size_check_runs_before_generation():
    seen = []

    def refuse(size, has_switch):
        seen.append((size.hosts, size.switches, size.links, has_switch))
        raise limits.LimitError("no")

    with pytest.raises(limits.LimitError):
        load(ROOT / "namespaces/leaf-spine.toml", ["leaves=50", "hosts_per_leaf=200"],
             check_size=refuse)
    assert seen == [(10000, 52, 10100, True)]  # the shipped file runs its switches' pipeline


def test_memory_limit_names_the_numbers():
    need = limits.Need(hosts=10000, switches=52, links=10100, nicd=10000, switchd=0)
    with pytest.raises(limits.LimitError) as e:
        limits.check(need)
    msg = str(e.value)
    assert msg.startswith("memory: 10052 namespaces, 10000 NIC") and "MiB are available" in msg
    limits.check(limits.Need(hosts=4, switches=4, links=8, nicd=4, switchd=0))  # fits


def test_nic_workers_reach_the_size_check_and_shrink_the_memory_estimate(monkeypatch, tmp_path):
    seen = []
    load(ROOT / "namespaces/leaf-spine.toml", ["nic.workers=host"],
         check_size=lambda size, _: seen.append(size.nic_workers))
    load(ROOT / "namespaces/leaf-spine.toml", check_size=lambda size, _: seen.append(
        size.nic_workers))
    assert seen == ["host", "auto"]
    monkeypatch.setattr(limits, "MEASURED", str(tmp_path / "none.json"))
    per_host = limits.Need(hosts=256, switches=20, links=300, nicd=256, switchd=0)
    workers = limits.Need(hosts=256, switches=20, links=300, nicd=256, switchd=0, nicd_procs=2)
    assert workers.daemons == 2 and per_host.daemons == 256
    d = limits.DEFAULT_DAEMON_MIB
    assert limits.memory_mib(per_host) - limits.memory_mib(workers) == pytest.approx(
        254 * (d["nicd"] - d["nicd_host"]))


def test_a_workers_memory_past_its_first_host_is_remembered_per_further_host(monkeypatch,
                                                                             tmp_path):
    """pids as the state file lists them: a worker's once per host it serves."""
    monkeypatch.setattr(limits, "MEASURED", str(tmp_path / "mem.json"))
    monkeypatch.setattr(limits, "_pss_mib", {11: 30.0, 12: 30.0, 21: 102.0}.get)
    limits.remember_daemon_memory("nicd", [11, 12])  # a daemon per host
    assert limits.daemon_mib()["nicd"] == 30.0
    limits.remember_daemon_memory("nicd", [21] * 33)  # one worker, 33 hosts
    got = limits.daemon_mib()
    assert got["nicd"] == 30.0 and got["nicd_host"] == pytest.approx((102 - 30) / 32, abs=0.01)


@pytest.mark.skipif(os.geteuid() != 0, reason="emu up needs root")
def test_emu_up_refuses_ten_thousand_hosts_in_one_line_and_force_is_named():
    p = subprocess.run([sys.executable, "-m", "emu", "up", "namespaces/leaf-spine.toml",
                        "--name", "hlbig", "--set", "leaves=50", "--set", "hosts_per_leaf=200"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "too big for this machine: memory:" in lines[0]
    assert "--force" in lines[0]
    assert not os.path.exists("/run/emu/hlbig.json")
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert not any(n.startswith("hlbig-") for n in netns)


def test_state_files_written_aside_by_a_dead_process_are_removed(tmp_path, monkeypatch):
    """``emu up`` SIGKILLed between writing its state file aside and renaming it leaves
    ``<cluster>.json.<pid>.tmp``: emu down/clean remove it when its writer is gone, and
    never a live writer's (nor another cluster's when one is named)."""
    from emu.fabric import state

    monkeypatch.setattr(state, "STATE_DIR", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for n in (f"c1.json.{dead}.tmp", f"c1.json.{os.getpid()}.tmp", f"c2.json.{dead}.tmp",
              "c1.json", "notes.tmp"):
        (tmp_path / n).write_text("{}")
    assert state.remove_stale_tmps("c1") == [f"c1.json.{dead}.tmp"]
    assert state.remove_stale_tmps() == [f"c2.json.{dead}.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["c1.json", f"c1.json.{os.getpid()}.tmp", "notes.tmp"])


def test_a_feature_probe_left_by_a_killed_prober_is_removed_and_a_live_ones_kept():
    """``emu up`` SIGKILLed inside linkctl.features() left ``emuprobe-…`` namespaces no
    state file names (found after a chaos run): emu down/clean remove those whose
    prober is dead, never a running prober's."""
    import subprocess
    import sys

    from pyroute2 import netns

    from emu.fabric import linkctl

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    mine, gone = f"emuprobe-{os.getpid()}-beef", f"emuprobe-{dead}-beef"
    for n in (mine, gone):
        netns.create(n)
    try:
        assert linkctl.remove_dead_probes() == [gone]
        assert mine in os.listdir("/run/netns") and gone not in os.listdir("/run/netns")
    finally:
        for n in (mine, gone):
            if n in os.listdir("/run/netns"):
                netns.remove(n)

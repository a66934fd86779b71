# SPDX-License-Identifier: GPL-2.0-only
"""``emu up --dry-run`` prints the plan of every shipped topology and makes nothing.

Each run is made as an unprivileged user (``nobody``) when the suite runs as root,
so it *cannot* make a namespace, a state file or a run directory; and then it is
checked that nothing bearing the run's fresh cluster name exists (namespaces,
files under /run/emu, processes). Nothing here creates anything to clean up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emu.fabric import naming, state

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.name for p in (ROOT / "namespaces").glob("*.toml"))
NOBODY = 65534


def _unprivileged() -> list[str]:
    """The command prefix that runs a child as ``nobody`` (none when we are not root, or
    without util-linux's setpriv)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return []
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def dry_run(name: str, *args: str) -> subprocess.CompletedProcess:
    """``emu up --dry-run --name NAME ARGS`` as a user would run it, unprivileged if we
    can drop privileges."""
    return subprocess.run([*_unprivileged(), sys.executable, "-m", "emu", "up", "--dry-run",
                           "--name", name, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def assert_nothing_made(name: str) -> None:
    """No namespace, file under the state directory or process bears ``name``."""
    from emu.fabric import netns

    try:
        spaces = [n for n in os.listdir(netns.NETNS_RUN_DIR) if n.startswith(name + "-")]
    except FileNotFoundError:
        spaces = []
    assert spaces == []
    assert state.load(name) is None
    made = [os.path.join(d, f) for d, dirs, files in os.walk(state.STATE_DIR)
            for f in (*dirs, *files) if f.startswith(name)]
    assert made == []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        assert name.encode() not in cmd, f"process {pid} runs for {name}: {cmd}"


SETS = {"as shipped": [], "scale 3": ["--set", "time.scale=3", "--set", "link.rate=300mbit"],
        "link rate": ["--set", "link.rate=50mbit", "--set", "link.delay=100us"]}


@pytest.mark.parametrize("sets", sorted(SETS))
@pytest.mark.parametrize("topology", SHIPPED)
def test_dry_run_of_every_shipped_topology_prints_a_plan_and_makes_nothing(topology, sets):
    name = naming.random_cluster("dry")
    r = dry_run(name, f"namespaces/{topology}", *SETS[sets])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("plan of topology ")
    assert "NIC DAEMON" in r.stdout and "--line-rate" in r.stdout
    # every shipped fabric states its rates and delays: held by the NICs, on fabric time
    assert "--path-delay" in r.stdout
    assert "nothing was made" in r.stderr
    if sets == "scale 3":  # a wall rate is the fabric's / the scale
        assert "time: scale 3: manual" in r.stdout
        assert "--line-rate eth0=100000000" in r.stdout and "--time-scale 3" in r.stdout
    else:  # "auto", the default, says what it weighed
        assert "auto: " in r.stdout and "to keep up" in r.stdout
    assert_nothing_made(name)


@pytest.mark.parametrize("topology", [t for t in SHIPPED if t != "pair.toml"])
def test_dry_run_with_a_switch_pipeline_names_each_switch_datapath(topology):
    name = naming.random_cluster("dry")
    r = dry_run(name, f"namespaces/{topology}", "--set", "switch.pipeline=true",
                "--set", "switch.port.trim=true", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["time"]["why"].startswith("auto: ") and plan["time"]["scale"] > 1
    # trimming runs in the kernel path (the tc BPF program trims), on every switch
    assert plan["switches"] and all(s["datapath"] == "kernel" and s["why"].startswith("auto")
                                    for s in plan["switches"].values())
    assert all("--trimmed-dscp" in n["args"] for n in plan["nics"].values())
    assert_nothing_made(name)


@pytest.mark.parametrize("args, says", [
    (["namespaces/pair.toml", "--set", "links=0"], "links"),
    (["namespaces/pair.toml", "--set", "bogus=1"], "bogus"),
    (["namespaces/leaf-spine.toml", "--set", "switch.port.rate=fast"], "switch.port.rate"),
    (["namespaces/no-such.toml"], "no-such.toml"),
])
def test_dry_run_of_a_bad_topology_is_one_line_and_exit_2(args, says):
    name = naming.random_cluster("dry")
    r = dry_run(name, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("emu up: ") and says in lines[0], r.stderr
    assert_nothing_made(name)

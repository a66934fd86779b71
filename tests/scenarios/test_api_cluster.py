# SPDX-License-Identifier: GPL-2.0-only
"""``emu up`` starts one NIC daemon per host (``--no-daemons`` skips them); ``emu down``
stops them; inside a host the client API finds its daemon by namespace (root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fabric_util import emu_cli

from emu.fabric import state
from emu.fabric.naming import random_cluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


def emu(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return emu_cli(*args, check=check, timeout=120)


@pytest.fixture
def cluster():
    name = random_cluster("a")
    yield name
    if state.load(name) is not None:
        emu("down", name, check=False)
    assert state.load(name) is None
    assert not os.path.exists(f"/run/emu/nic/{name}")


def _nicd(name: str) -> list[dict]:
    st = state.load(name)
    assert st is not None
    return [p for p in st["pids"] if p["what"].startswith("nicd ")]


def test_up_without_daemons_records_none(cluster):
    emu("up", "namespaces/pair.toml", "--name", cluster, "--no-daemons")
    assert _nicd(cluster) == []
    assert not os.path.exists(f"/run/emu/nic/{cluster}")
    emu("down", cluster)


def test_up_starts_one_daemon_per_host_and_down_stops_them(cluster):
    up = emu("up", "namespaces/pair.toml", "--name", cluster)
    assert "NIC daemon" in up.stderr
    procs = _nicd(cluster)
    assert sorted(p["what"] for p in procs) == ["nicd h1", "nicd h2"]
    assert all(state.alive(p["pid"], p["start"]) for p in procs)
    # inside h1, the API finds h1's daemon by namespace
    code = ("from emu.api import Device\n"
            "with Device.open() as d:\n"
            "    print(d.attrs['host'], d.attrs['ports'][0]['addresses'][0])\n")
    r = emu("exec", f"{cluster}:h1", "--", sys.executable, "-c", code)
    assert r.stdout.split()[0] == "h1"
    r = emu("nicd", "stats", "--cluster", cluster, "--json")
    stats = json.loads(r.stdout)
    assert sorted(s["host"] for s in stats) == ["h1", "h2"]
    assert all(s["rss_kib"] > 0 and s["ready_after_s"] is not None for s in stats)
    emu("down", cluster)
    assert not any(state.alive(p["pid"], p["start"]) for p in procs)

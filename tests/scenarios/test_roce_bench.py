# SPDX-License-Identifier: GPL-2.0-only
"""Smoke test of ``scripts/bench-roce`` (root): the harness runs end to end with tiny sizes,
prints its table with the daemons' CPU per packet and the emulator-losses line, and
``--json`` carries each run's overload as read from the daemons that ran it.

No numbers are judged (a few MiB measure start-up, not goodput); the bench builds and
removes its own cluster and stops its daemons.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")
TINY = ["--total", "4", "--msg", "1", "--depth", "2", "--runs", "1", "--blast-seconds", "0.2"]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_bench_roce_prints_its_table_and_reads_the_daemons_overload():
    out = _run([str(ROOT / "scripts/bench-roce"), *TINY]).stdout
    for row in ("RoCE WRITE goodput", "Python UDP blaster (4 KiB)", "ratio", "nicd h1: start",
                "CPU per data packet of 4096 B", "emulator losses"):
        assert row in out, out
    res = json.loads(_run([sys.executable, str(ROOT / "benchmarks/bench_roce.py"), "--json",
                           *TINY]).stdout)
    assert res["roce_gbps_median"] > 0 and len(res["roce_gbps"]) == 1
    # a run that moved 4 MiB in 4 KiB packets counted them in its overload snapshots
    run = res["overload"]["runs"][0]
    assert run["tx_packets"] >= 4 * 256 and set(run) >= {"causes", "expected", "retransmits"}
    assert res["overload"]["clean"] == (not run["causes"] and not run["unreachable"])
    cpu = res["cpu_per_packet"]
    assert all(cpu[h][k] >= 0 for h in ("h1", "h2") for k in ("user_us", "kernel_us"))


def test_frame_ring_micro_benchmark_runs_every_way_through_the_ring():
    res = json.loads(_run([sys.executable, str(ROOT / "benchmarks/frame_ring.py"), "--json",
                           "--rounds", "1"]).stdout)
    assert set(res) == {"gathers+seal", "gathers+seal_at", "runs+seal_at"}
    for v in res.values():  # every packet of every way left through the ring, CPU counted
        assert v["ring_frames"] == v["packets"] == 1400 and v["cpu_us_per_packet"] > 0
    assert res["gathers+seal"]["ratio"] == 1.0

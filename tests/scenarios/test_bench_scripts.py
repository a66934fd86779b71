# SPDX-License-Identifier: GPL-2.0-only
"""Smoke tests of the speed benchmarks (root): ``scripts/bench-uet``, ``scripts/bench-roce``
and ``scripts/bench-switch`` run end to end with tiny sizes (or ``--quick``), print their
tables — with the daemons' CPU per packet and the emulator-losses line — and ``--json`` is
one document with the keys tools read, each run's overload read from the daemons that ran
it; ``benchmarks/frame_ring.py`` runs every way through the ring.

No numbers are judged here (a 1 MiB run measures start-up, not goodput); the
bench builds and removes its own clusters (``random_cluster("b")``, ``down`` in
``finally``) and stops its daemons.
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
TINY = ["--total", "1", "--msg", "1", "--depth", "1", "--runs", "1", "--blast-seconds", "0.2"]
TINY_ROCE = ["--total", "4", "--msg", "1", "--depth", "2", "--runs", "1", "--blast-seconds",
             "0.2"]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_bench_uet_script_prints_the_pair_table():
    out = _run([str(ROOT / "scripts/bench-uet"), "--part", "pair", *TINY]).stdout
    assert out.startswith("bench-uet: 1 MiB WRITEs x 1 MiB, depth 1, 1 runs")
    for row in ("UET WRITE goodput", "Python UDP blaster", "ratio",
                "CPU per data packet of 8704 B", "the blaster's (per datagram): sender",
                "emulator losses"):
        assert row in out, out
    assert "leaf-spine" not in out  # --part pair only


def test_bench_uet_json_has_both_parts():
    p = _run([sys.executable, str(ROOT / "benchmarks/bench_uet.py"), "--json", *TINY])
    res = json.loads(p.stdout)
    assert res["msg_bytes"] == res["total_bytes"] == 1 << 20 and res["runs"] == 1
    pair = res["pair"]
    for k in ("family", "payload", "uet_gbps", "blaster_gbps", "uet_gbps_median",
              "blaster_gbps_median", "ratio", "retransmits", "goal_ratio"):
        assert k in pair, k
    assert pair["payload"] == 8704 and pair["uet_gbps_median"] > 0
    assert pair["blaster_gbps_median"] > 0 and len(pair["uet_gbps"]) == 1
    # per-packet CPU of each daemon (clock ticks: a 1 MiB run may show 0)
    cpu = pair["cpu_per_packet"]
    assert all(cpu[h][k] >= 0 for h in ("h1", "h2") for k in ("user_us", "kernel_us"))
    # and the blaster's, from its own rusage: a sender busy for seconds used CPU
    bc = pair["blaster_cpu_per_packet"]
    assert bc["tx_user_us"] + bc["tx_kernel_us"] > 0 and bc["rx_kernel_us"] >= 0
    # the emulator's own overload per run, read from the daemons that ran it: a run
    # that moved 1 MiB counted its packets (an empty snapshot would count none)
    ov = pair["overload"]
    assert len(ov["runs"]) == 1 and ov["runs"][0]["tx_packets"] >= (1 << 20) // 8704
    assert ov["clean"] == (not ov["runs"][0]["causes"] and not ov["runs"][0]["unreachable"])
    spray = res["spray"]
    assert len(spray["spines"]) == 2 and spray["goal_ratio"] == 0.9 and "ratio" in spray
    for label in ("sprayed", "pinned"):
        x = spray[label]
        assert x["gbps_median"] > 0 and set(x["packets_per_spine"]) == set(spray["spines"])
        assert x["overload"]["runs"][0]["tx_packets"] > 0
    # pinned to one entropy: the flow's data crossed one spine only (ACKs may take either
    # way back, but they are not counted on leaf1 → spine links)
    pinned = spray["pinned"]["packets_per_spine"]
    assert min(pinned.values()) < max(pinned.values())


def test_bench_roce_prints_its_table_and_reads_the_daemons_overload():
    out = _run([str(ROOT / "scripts/bench-roce"), *TINY_ROCE]).stdout
    for row in ("RoCE WRITE goodput", "Python UDP blaster (4 KiB)", "ratio", "nicd h1: start",
                "CPU per data packet of 4096 B", "emulator losses"):
        assert row in out, out
    res = json.loads(_run([sys.executable, str(ROOT / "benchmarks/bench_roce.py"), "--json",
                           *TINY_ROCE]).stdout)
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


def test_bench_rx_header_quick_reads_every_datagram_three_ways():
    """``scripts/bench-rx-header --quick``: each way reads every datagram with no bad
    ICRC (the script stops otherwise) and reports a ratio against the baseline."""
    out = _run([str(ROOT / "scripts/bench-rx-header"), "--quick"]).stdout
    for row in ("assumed", "stamped, ID 0", "stamped, IDs count up"):
        assert row in out, out
    res = json.loads(_run([sys.executable, str(ROOT / "benchmarks/bench_rx_header.py"),
                           "--quick", "--json"]).stdout)
    assert res["ratio"]["assumed"] == 1.0 and all(v > 0 for v in res["median_us"].values())


def test_bench_switch_quick_measures_both_datapaths_against_forwarding():
    """``scripts/bench-switch --quick``: kernel-only forwarding, the kernel datapath and the
    user-space datapath each carried packets through the switch namespace, and each
    daemon's own counters show its datapath took them (not bypassed)."""
    out = _run([str(ROOT / "scripts/bench-switch"), "--quick"]).stdout
    for row in ("packets/s through one switch", "kernel-only", "kernel path", "user path",
                "gso", "plain"):
        assert row in out, out
    res = json.loads(_run([sys.executable, "-m", "emu.switch.bench", "--quick",
                           "--json"]).stdout)
    paths = ["forward", "user"] + ([] if res["kernel_unavailable"] else ["kernel"])
    for mode in ("gso", "plain"):
        assert all(res["median"][mode][p] > 0 for p in paths), res["median"]
        assert set(res["ratio"][mode]) == set(paths) - {"forward"}
        for p in set(paths) - {"forward"}:
            assert len(res["through"][mode][p]) == 1 and res["through"][mode][p][0] > 0

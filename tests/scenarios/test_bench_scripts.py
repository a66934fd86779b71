# SPDX-License-Identifier: GPL-2.0-only
"""Every ``scripts/bench-*`` run as a user runs it with ``--quick`` (the same code path
with tiny sizes and one run) and ``--quick --json``, so a benchmark cannot rot unnoticed
(issue #34 item 6): bench-wire, bench-fabric,
bench-roce, bench-uet, bench-rx-header, bench-credible and bench-switch print their
tables' rows and their JSON has the keys tools read; ``benchmarks/frame_ring.py`` runs
every way through the ring.

No speed is judged here (a 1 MiB run measures start-up, not goodput; a loaded machine
is slower): the rows, the keys, the scale each case ran at and what must hold whatever
the speed (a run moved its packets, a wall figure is the fabric one over the scale). The
benches build and remove their own clusters (``random_cluster(...)``, ``down`` in
``finally``) and stop their daemons. All but bench-wire need root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: every bench but bench-wire builds namespaces
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@needs_root
def test_bench_uet_script_prints_the_pair_table():
    out = _run([str(ROOT / "scripts/bench-uet"), "--part", "pair", "--quick"]).stdout
    assert out.startswith("bench-uet: 1 MiB WRITEs x 1 MiB, depth 1, 1 runs")
    for row in ("UET WRITE goodput", "Python UDP blaster", "ratio",
                "CPU per data packet of 8704 B", "the blaster's (per datagram): sender",
                "emulator losses"):
        assert row in out, out
    assert "leaf-spine" not in out  # --part pair only


@needs_root
def test_bench_uet_json_has_both_parts():
    p = _run([str(ROOT / "scripts/bench-uet"), "--quick", "--json"])
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


@needs_root
def test_bench_roce_prints_its_table_and_reads_the_daemons_overload():
    out = _run([str(ROOT / "scripts/bench-roce"), "--quick"]).stdout
    for row in ("RoCE WRITE goodput", "Python UDP blaster (4 KiB)", "ratio", "nicd h1: start",
                "CPU per data packet of 4096 B", "emulator losses"):
        assert row in out, out
    res = json.loads(_run([str(ROOT / "scripts/bench-roce"), "--quick", "--json"]).stdout)
    assert res["roce_gbps_median"] > 0 and len(res["roce_gbps"]) == 1
    # a run that moved 4 MiB in 4 KiB packets counted them in its overload snapshots
    run = res["overload"]["runs"][0]
    assert run["tx_packets"] >= 4 * 256 and set(run) >= {"causes", "expected", "retransmits"}
    assert res["overload"]["clean"] == (not run["causes"] and not run["unreachable"])
    cpu = res["cpu_per_packet"]
    assert all(cpu[h][k] >= 0 for h in ("h1", "h2") for k in ("user_us", "kernel_us"))


@needs_root
def test_frame_ring_micro_benchmark_runs_every_way_through_the_ring():
    res = json.loads(_run([sys.executable, str(ROOT / "benchmarks/frame_ring.py"), "--json",
                           "--rounds", "1"]).stdout)
    assert set(res) == {"gathers+seal", "gathers+seal_at", "runs+seal_at"}
    for v in res.values():  # every packet of every way left through the ring, CPU counted
        assert v["ring_frames"] == v["packets"] == 1400 and v["cpu_us_per_packet"] > 0
    assert res["gathers+seal"]["ratio"] == 1.0


@needs_root
def test_bench_rx_header_quick_reads_every_datagram_three_ways():
    """``scripts/bench-rx-header --quick``: each way reads every datagram with no bad
    ICRC (the script stops otherwise) and reports a ratio against the baseline."""
    out = _run([str(ROOT / "scripts/bench-rx-header"), "--quick"]).stdout
    for row in ("assumed", "stamped, ID 0", "stamped, IDs count up"):
        assert row in out, out
    res = json.loads(_run([str(ROOT / "scripts/bench-rx-header"), "--quick", "--json"]).stdout)
    assert res["ratio"]["assumed"] == 1.0 and all(v > 0 for v in res["median_us"].values())


def test_bench_wire_quick_prints_codec_and_scapy_per_protocol():
    """``scripts/bench-wire --quick``: every protocol's packet is built and parsed both
    ways (each way asserts its own round trip) and the ratio is printed."""
    out = _run([str(ROOT / "scripts/bench-wire"), "--quick"]).stdout
    assert out.splitlines()[0].split()[:5] == ["protocol", "packet", "scapy", "µs", "codec"]
    assert [ln.split()[0] for ln in out.splitlines()[1:]] == ["roce", "uet", "mrc"]
    rows = json.loads(_run([str(ROOT / "scripts/bench-wire"), "--quick", "--json"]).stdout)
    assert [r["protocol"] for r in rows] == ["roce", "uet", "mrc"]
    for r in rows:
        assert set(r) == {"protocol", "packet", "scapy_us", "codec_us", "ratio", "goal"}
        assert r["scapy_us"] > 0 and r["codec_us"] > 0 and r["ratio"] > 0


@needs_root
def test_bench_fabric_quick_builds_and_removes_a_small_cluster():
    """``scripts/bench-fabric --quick``: one 4-host leaf-spine built and torn down through
    the benchmark's hook (which removes its namespaces itself), no Mininet."""
    out = _run([str(ROOT / "scripts/bench-fabric"), "--quick"]).stdout
    assert "emu leaf-spine 2 leaves × 2 hosts, 1 spine" in out, out
    assert "mininet: not compared (--quick" in out and "16 leaves" not in out
    res = json.loads(_run([str(ROOT / "scripts/bench-fabric"), "--quick", "--json"]).stdout)
    assert res["quick"] is True and res["emu_256"] is None and res["ratio"] is None
    e = res["emu_64"]
    assert e["hosts"] == 4 and e["switches"] == 3
    assert {"up", "down", "total", "netns", "veth"} <= set(e) and e["total"] > 0


@needs_root
def test_bench_credible_quick_prints_scale_fabric_results_and_slowdown():
    """``scripts/bench-credible --quick`` at the plan's scale (1 today): a bandwidth row
    per case and transport with the scale, the fabric figures and the wall seconds per
    fabric ms; the latency rows beside ping. The leaf-spine case (switch pipeline) runs
    or, at a scale its pipeline cannot run at yet, says so."""
    out = _run([str(ROOT / "scripts/bench-credible"), "--quick"]).stdout
    head = out.splitlines()[0].split()
    assert head[:4] == ["case", "transport", "scale", "rate"], out
    assert head[-2:] == ["wall", "s/ms"], out
    # rows: case (two words), transport, scale, ...
    rows = [ln.split() for ln in out.splitlines()[1:] if ln.startswith(("pair", "leaf-spine"))]
    not_run = [r for r in rows if r[2:4] == ["not", "run:"]]
    bw = [r for r in rows if not r[1].endswith("-lat") and r not in not_run]
    lat = [r for r in rows if r[1].endswith("-lat")]
    expect = [("pair", "roce"), ("pair", "uet")]
    if not not_run:
        expect += [("leaf-spine", "roce"), ("leaf-spine", "uet")]
    else:
        assert [r[0] for r in not_run] == ["leaf-spine"] and "time scale" in out, out
    assert [(r[0], r[2]) for r in bw] == expect, out
    assert [(r[1], r[2]) for r in lat] == [("write-lat", "roce"), ("send-lat", "roce"),
                                          ("write-lat", "uet"), ("send-lat", "uet")], out
    # one cluster, one plan: every row of the pair has its scale, a number >= 1
    pair = [r for r in bw + lat if r[0] == "pair"]
    assert len({r[3] for r in pair}) == 1 and float(pair[0][3]) >= 1, out
    assert "fabric time" in out


@needs_root
def test_bench_credible_quick_json_at_a_scale_reads_emu_perfs_clock():
    """``--quick --scale 2 --json``: every case ran at scale 2 as ``emu perf --json`` reported
    it, with fabric and wall figures and the slowdown; the leaf-spine case with the switch
    pipeline (not dilated yet) is reported as not run, with emu up's reason, not lost."""
    res = json.loads(_run([str(ROOT / "scripts/bench-credible"), "--quick", "--scale", "2",
                           "--json"]).stdout)
    assert res["scale_requested"] == 2.0 and res["quick"] is True
    assert [(c["case"], c["transport"]) for c in res["bandwidth"]] == [
        ("pair IPv4", "roce"), ("pair IPv4", "uet")]
    for c in res["bandwidth"]:
        assert c["scale"] == 2.0 and len(c["runs"]) == 1
        for k in ("line_rate", "median_gbps", "median_wall_gbps", "median_fraction",
                  "wall_s_per_fabric_ms", "overload", "machine_stall", "warned", "passed"):
            assert k in c, k
        run = c["runs"][0]
        assert run["scale"] == 2.0 and run["wall_s"] > 0
        if run["passed"]:  # the wall figure is emu perf's, the fabric one over the scale
            assert run["wall_gbps"] == pytest.approx(run["gbps"] / 2)
            assert run["wall_s_per_fabric_ms"] > 0
    assert [(c["case"], c["transport"]) for c in res["latency"]] == [
        ("pair write-lat", "roce"), ("pair send-lat", "roce"),
        ("pair write-lat", "uet"), ("pair send-lat", "uet")]
    for c in res["latency"]:
        assert c["scale"] == 2.0
        assert c["t_typical_wall_us"] == pytest.approx(2 * c["t_typical_us"])
        assert {"ping_rtt_us", "ratio", "wall_s_per_fabric_ms", "overload"} <= set(c)
    (refused,) = res["not_run"]
    assert refused["case"].startswith("leaf-spine") and refused["scale_requested"] == 2.0
    assert "time scale 2" in refused["reason"], refused


@needs_root
def test_bench_credible_quick_flows_at_a_scale():
    """``--part flows --quick --scale 2 --json``: one round of the four concurrent flows per
    transport on the (dilated) leaf-spine, each flow's outcome and the scale it ran at."""
    res = json.loads(_run([str(ROOT / "scripts/bench-credible"), "--part", "flows", "--quick",
                           "--scale", "2", "--json"]).stdout)
    assert [(r["transport"], r["round"]) for r in res["flows"]] == [("roce", 1), ("uet", 1)]
    for r in res["flows"]:
        assert [f["flow"] for f in r["flows"]] == ["h1->h3", "h2->h4", "h3->h1", "h4->h2"]
        for f in r["flows"]:
            assert {"rc", "gbps", "verified", "error"} <= set(f)
            # a flow that got as far as a result ran on the cluster's clock
            assert f["scale"] in (2.0, None) and (f["scale"] == 2.0) >= (f["rc"] == 0), f


@needs_root
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

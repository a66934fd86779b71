# SPDX-License-Identifier: GPL-2.0-only
"""Every ``scripts/bench-*`` run as a user runs it with ``--quick`` (the same code path
with tiny sizes and one run) and ``--quick --json``, so a benchmark cannot rot unnoticed
(issue #34 item 6): bench-wire, bench-fabric,
bench-roce, bench-uet, bench-rx-header, bench-credible and bench-switch print their
tables' rows and their JSON has the keys tools read; ``benchmarks/frame_ring.py`` runs
every way through the ring.

No speed is judged here (a 1 MiB run measures start-up, not goodput; a loaded machine
is slower): the rows, the keys, the scale each case ran at and what must hold whatever
the speed (a run moved its packets, a wall figure is the fabric one over the scale, goodput
within the line rate's payload share, latency no shorter than the fabric's). The
benches build and remove their own clusters (``random_cluster(...)``, ``down`` in
``finally``) and stop their daemons. All but bench-wire need root.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: every bench but bench-wire builds namespaces
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    """Run a bench; past the timeout (a hang), SIGTERM it so that its ``finally`` blocks
    bring its clusters down, then fail."""
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        out, err = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        pytest.fail(f"{argv} did not finish: {err[-3000:]}")
    assert p.returncode == 0, err[-3000:]
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


@needs_root
def test_bench_uet_script_prints_the_pair_table():
    out = _run([str(ROOT / "scripts/bench-uet"), "--part", "pair", "--quick"]).stdout
    assert out.startswith("bench-uet: 1 MiB WRITEs x 1 MiB, depth 1, 1 runs")
    for row in ("UET WRITE goodput", "Python UDP blaster", "ratio",
                "CPU per data packet of 8704 B", "the blaster's (per datagram): sender",
                "emulator losses"):
        assert row in out, out
    assert "leaf-spine" not in out  # --part pair only
    assert "NIC: a daemon per host" in out


@needs_root
def test_bench_uet_busy_compares_eight_daemons_with_one_worker():
    """``--part busy``: four flows among eight hosts, served by eight daemons, then by one
    worker; each configuration's CPU per data packet."""
    res = json.loads(_run([str(ROOT / "scripts/bench-uet"), "--part", "busy", "--quick",
                           "--json"]).stdout)["busy"]
    assert res["8 daemons"]["processes"] == 8 and res["1 worker"]["processes"] == 1
    for k in ("8 daemons", "1 worker"):
        assert res[k]["gbps"] > 0 and res[k]["user_us"] > 0
    assert res["ratio_user"] > 0


@needs_root
def test_bench_uet_pair_with_one_worker_serving_both_hosts():
    """``--worker``: one ``emu nicd serve`` for h1 and h2; its CPU is both ends'."""
    res = json.loads(_run([str(ROOT / "scripts/bench-uet"), "--part", "pair", "--quick",
                           "--worker", "--json"]).stdout)["pair"]
    assert res["nic"] == "one worker serving h1 and h2" and res["uet_gbps_median"] > 0
    assert set(res["cpu_per_packet"]) == {"worker"}


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
    """``scripts/bench-fabric --quick``: a 4-host leaf-spine up and down as whole commands,
    bare and with NIC daemons and the switch pipeline; no Mininet."""
    out = _run([str(ROOT / "scripts/bench-fabric"), "--quick"]).stdout
    assert "4 hosts, bare" in out and "4 hosts, NIC daemons + pipeline" in out, out
    assert "mininet: not compared (--quick" in out and "256 hosts" not in out
    res = json.loads(_run([str(ROOT / "scripts/bench-fabric"), "--quick", "--json"]).stdout)
    assert res["quick"] is True and res["mininet_over_emu"] is None
    bare, full = res["rows"]
    assert (bare["hosts"], bare["switches"], full["hosts"], full["switches"]) == (4, 3, 4, 3)
    assert bare["nicd_processes"] == 0 and full["nicd_processes"] >= 1
    assert full["nicd_pss_mib"] > 0 and full["switchd_pss_mib"] > 0
    for r in res["rows"]:
        assert r["up_s"] > 0 and r["down_s"] > 0


def _auto_scale(topology: str, *sets: str) -> float:
    """The time scale ``emu up`` picks for a shipped topology as written (its dry run)."""
    argv = [sys.executable, "-m", "emu", "up", str(ROOT / "namespaces" / topology),
            "--dry-run", "--json"]
    for s in sets:
        argv += ["--set", s]
    return float(json.loads(_run(argv).stdout)["time"]["scale"])


@needs_root
def test_bench_credible_quick_prints_the_fabrics_at_their_auto_scale():
    """``scripts/bench-credible --quick``: the pair over IPv4 and the leaf-spine with its
    pipeline as written, each at the scale ``emu up --dry-run`` gives it (auto): a write-bw
    row per case and transport with the fabric goodput against the line rate and its
    payload share, and a write-lat row against the fabric's analytic one way."""
    out = _run([str(ROOT / "scripts/bench-credible"), "--quick"]).stdout
    lines = out.splitlines()
    bw_head = lines[0].split()
    assert bw_head[:6] == ["write-bw", "1", "MiB", "transport", "scale", "rate"], out
    assert {"payload", "overload", "machine", "credible"} <= set(bw_head), out
    auto = {"pair IPv4": _auto_scale("pair.toml"),
            "leaf-spine pipeline": _auto_scale("leaf-spine.toml", "switch.pipeline=true")}
    # rows: the case (two words), transport, scale, ...; write-bw's table, then write-lat's
    split = next(i for i, ln in enumerate(lines) if ln.startswith("write-lat"))
    cases = ("pair IPv4", "leaf-spine pipeline")
    bw = [ln.split() for ln in lines[:split] if ln.startswith(cases)]
    lat = [ln.split() for ln in lines[split:] if ln.startswith(cases)]
    assert "not run" not in out, out
    want = [("pair IPv4", "roce"), ("pair IPv4", "uet"),
            ("leaf-spine pipeline", "roce"), ("leaf-spine pipeline", "uet")]
    assert [(" ".join(r[:2]), r[2]) for r in bw] == want, out
    assert [(" ".join(r[:2]), r[2]) for r in lat] == want, out
    for r in bw + lat:  # each case ran at its auto scale, not a forced one
        assert float(r[3]) == auto[" ".join(r[:2])], (r, auto)
    assert "fabric Gb/s" in out and "analytic one-way latency" in out


@needs_root
def test_bench_credible_quick_twice_json_reads_emu_perfs_clock():
    """``--quick --part pair --twice --json``: the pair over IPv4 at its auto scale and at
    twice it, as ``emu perf --json`` reported them; the fabric figures are the wall ones
    times the scale; what holds whatever the machine's speed: goodput within the line
    rate's payload share, t_typical no shorter than the fabric's one way; and a ratio
    row per transport and result."""
    auto = _auto_scale("pair.toml")
    res = json.loads(_run([str(ROOT / "scripts/bench-credible"), "--quick", "--part", "pair",
                           "--twice", "--json"]).stdout)
    assert res["scale_requested"] is None and res["quick"] is True and res["twice"] is True
    assert not res["not_run"], res["not_run"]
    assert [(c["case"], c["transport"], c["scale"]) for c in res["bandwidth"]] == [
        ("pair IPv4", "roce", auto), ("pair IPv4", "uet", auto),
        ("pair IPv4", "roce", 2 * auto), ("pair IPv4", "uet", 2 * auto)]
    # RoCEv2 over IPv4 at MTU 4200: 256 frames of 4096 B + BTH, ICRC, UDP, IP, Ethernet
    # (4154 B) and one RETH a 1 MiB WRITE
    assert res["bandwidth"][0]["payload_share"] == pytest.approx((1 << 20) / (256 * 4154 + 16))
    for c in res["bandwidth"]:
        assert c["line_rate"] == 400e9 and len(c["runs"]) == 1
        for k in ("median_gbps", "median_wall_gbps", "median_fraction", "median_of_payload",
                  "wall_s_per_fabric_ms", "overload", "machine_stall", "credible", "passed"):
            assert k in c, k
        run = c["runs"][0]
        assert run["scale"] == c["scale"] and run["wall_s"] > 0
        if run["passed"]:
            assert run["wall_gbps"] == pytest.approx(run["gbps"] / c["scale"])
            assert run["wall_s_per_fabric_ms"] > 0
            # the serializer carries no more than its payload share (and a FIFO's lead)
            assert 0 < run["of_payload"] <= 1.03, run
    assert [(c["case"], c["transport"], c["scale"]) for c in res["latency"]] == [
        ("pair IPv4", "roce", auto), ("pair IPv4", "uet", auto),
        ("pair IPv4", "roce", 2 * auto), ("pair IPv4", "uet", 2 * auto)]
    for c in res["latency"]:
        assert c["t_typical_wall_us"] == pytest.approx(c["scale"] * c["t_typical_us"])
        # two NICs' 500 ns and 15 ns of cable, and the frame's serialization at 400 Gb/s
        assert 1.015 < c["one_way_us"] < 1.02
        assert c["t_typical_us"] >= 0.97 * c["one_way_us"], c  # no faster than the fabric
        assert {"ratio", "wall_s_per_fabric_ms", "overload", "credible"} <= set(c)
    assert [(r["transport"], r["what"], r["scale"], r["twice"]) for r in res["twice_ratios"]] == [
        ("roce", "median_gbps", auto, 2 * auto), ("uet", "median_gbps", auto, 2 * auto),
        ("roce", "t_typical_us", auto, 2 * auto), ("uet", "t_typical_us", auto, 2 * auto)]
    for r in res["twice_ratios"]:
        assert r["ratio"] == pytest.approx(r["at_twice"] / r["base"])
        assert r["agree"] == (abs(r["ratio"] - 1) <= 0.05)


@needs_root
def test_bench_credible_quick_flows_at_a_scale():
    """``--part flows --quick --scale N --json`` (N the leaf-spine's auto scale, given as a
    number): one round of every transport's four flows at once on the leaf-spine as
    written (eight flows: each host sends two and receives two), each flow's outcome, the
    scale it ran at, its path's capacity and its fair share (two flows per 400 Gb/s NIC:
    200)."""
    n = _auto_scale("leaf-spine.toml")
    res = json.loads(_run([str(ROOT / "scripts/bench-credible"), "--part", "flows", "--quick",
                           "--scale", f"{n:g}", "--json"]).stdout)
    assert res["scale_requested"] == n
    fl = res["flows"]
    assert [r["round"] for r in fl["rounds"]] == [1]
    pairs = ["h1->h3", "h2->h4", "h3->h1", "h4->h2"]
    (rnd,) = fl["rounds"]
    assert [(f["transport"], f["flow"]) for f in rnd["flows"]] == [
        (t, p) for t in ("roce", "uet") for p in pairs]
    for f in rnd["flows"]:
        assert {"rc", "gbps", "verified", "credible", "causes", "error"} <= set(f)
        # a flow that got as far as a result ran on the cluster's clock
        assert f["scale"] in (n, None) and (f["scale"] == n) >= (f["rc"] == 0), f
        assert f["gbps"] <= 400, f  # fabric Gb/s: no more than the NIC's line rate
        assert f["verified"], f  # each flow's data arrived and was checked
    assert [(f["capacity_gbps"], f["share_gbps"]) for f in fl["flows"]] == [(400, 200)] * 8
    assert fl["median_total_gbps"] == pytest.approx(sum(f["gbps"] for f in rnd["flows"]))
    assert fl["all_verified"]


@needs_root
def test_bench_credible_quick_invariance_runs_each_case_at_its_scale_and_twice_it():
    """``--part invariance --quick --json``: the pair (its loss case, with no loss under
    --quick) and the 3 -> 1 incast through the pipeline each at its own auto scale and at
    twice it, every flow verified, and a ratio per median figure (goodput; each flow's
    completion time and Jain's fairness) that is at-2x over at-scale."""
    res = json.loads(_run([str(ROOT / "scripts/bench-credible"), "--part", "invariance",
                           "--quick", "--json"]).stdout)
    pair, ls = _auto_scale("pair.toml"), _auto_scale("leaf-spine.toml", "switch.pipeline=true")
    assert res["invariance_scales"] == {"loss": [pair, 2 * pair], "incast": [ls, 2 * ls]}
    for k in (0, 1):
        assert all(r["verified"] for r in res["invariance"][k]["loss"])
        for rnd in res["invariance"][k]["incast"]:
            assert [f["verified"] for f in rnd["flows"]] == [True] * 3, rnd
            assert 1 / 3 <= rnd["jain"] <= 1
    whats = {(r["case"], r["transport"], r["what"]) for r in res["invariance_ratios"]}
    for t in ("roce", "uet"):
        assert ("loss", t, "goodput Gb/s") in whats and ("incast 3->1", t, "Jain") in whats
        assert ("incast 3->1", t, "h3->h4 FCT us") in whats
    for r in res["invariance_ratios"]:
        assert r["ratio"] == pytest.approx(r["at_twice"] / r["at_scale"])


@needs_root
def test_bench_switch_quick_measures_both_datapaths_against_forwarding():
    """``scripts/bench-switch --quick``: kernel-only forwarding, the kernel datapath (plain
    and with trimming on) and the user-space datapath each carried packets through the
    switch namespace, and each
    daemon's own counters show its datapath took them (not bypassed). One run (the
    script, ``--json``); its table is the same document printed as text."""
    from emu.switch.bench import table

    res = json.loads(_run([str(ROOT / "scripts/bench-switch"), "--quick", "--json"]).stdout)
    out = table(res)
    for row in ("packets/s through one switch", "kernel-only", "kernel path", "+ trimming",
                "user path", "gso", "plain"):
        assert row in out, out
    paths = ["forward", "user"] + ([] if res["kernel_unavailable"] else
                                   ["kernel", "kernel-trim"])
    for mode in ("gso", "plain"):
        assert all(res["median"][mode][p] > 0 for p in paths), res["median"]
        assert set(res["ratio"][mode]) == set(paths) - {"forward"}
        for p in set(paths) - {"forward"}:
            assert len(res["through"][mode][p]) == 1 and res["through"][mode][p][0] > 0


def test_bench_mrc_engine_part_times_both_ends_sans_io():
    """``bench-mrc --part engine --quick --json`` (no root, no cluster): MRC's and UET's
    engine pairs moved their data, each end's CPU per data packet is there with the ratio,
    and the digest of every datagram is the same in every run (seeded: the check that a
    change kept the behaviour depends on it)."""
    p = _run([sys.executable, str(ROOT / "benchmarks/bench_mrc.py"), "--part", "engine",
              "--quick", "--json", "--runs", "2"])
    res = json.loads(p.stdout)["engine"]
    for tr in ("mrc", "uet"):
        r = res[tr]
        assert r["packets"] == 4 * 256 and r["datagrams"] > r["packets"]
        assert r["sender_us"]["best"] > 0 and r["receiver_us"]["best"] > 0
        assert len(r["digest"]) == 64
    assert set(res["ratio"]) == {"sender_us", "receiver_us"}
    assert "MRC / UET (medians)" in p.stderr


@needs_root
def test_bench_mrc_quick_compares_transports_and_times_a_plane_failure():
    """``scripts/bench-mrc --quick --json``: the three write-bw commands on the multi-plane
    fabric each verified its data, the ratios are against RoCEv2 of the same run, and the
    MRC write had plane 1 fail inside it: the series around the event log's failure time
    gives the figures, and what was in flight on plane 1 was resent at once."""
    p = _run([str(ROOT / "scripts/bench-mrc"), "--quick", "--json"])
    res = json.loads(p.stdout)
    tr = res["transports"]
    assert set(tr) == {"roce", "uet", "mrc"}
    for t in tr.values():
        assert t["passed"] is True and t["gbps"] > 0 and t["wall_s"] > 0
    assert tr["roce"]["vs_roce"] == 1.0 and tr["mrc"]["cpu_us_per_packet"] > 0
    fo = res["failover"]
    assert fo["passed"] is True
    # the plane failed while the write ran (the bench starts the write at a known time)
    assert 0 < fo["plane_down_fabric_s"] < fo["fabric_s"]
    assert fo["gbps_before"] > 0 and fo["gbps_dip"] >= 0 and fo["retx_plane"] > 0
    assert fo["rto"] == 0
    for k in ("recovery_us", "target_gbps", "interval_us", "gbps_after"):
        assert k in fo
    assert fo["stall_us"] >= 0 and fo["plane"] == 1
    assert "failover mrc : plane 1 down" in p.stderr

# SPDX-License-Identifier: GPL-2.0-only
"""Are the README's commands credible? write-bw 1 MiB as a user runs it, judged by overload.

For RoCEv2 and UET, with the README's commands and their defaults (``emu up``,
``emu perf write-bw --from … --to … -s 1M``, ``emu down``), unpinned:

* ``pair`` over IPv4 and over IPv6 (``--set nic.family=6``), ``--runs`` runs each;
* h1 → h4 on the leaf-spine with the switch pipeline, at the rate ``emu doctor``
  proposes for it and at 10gbit (where it must report overload and warn), with
  the datapath ``emu up`` chooses (the kernel one, where it serves); and, beside
  them, at 100mbit on the user-space datapath (``switch.datapath=user``: what
  trimming, PFC or delay need);

and, in the pair, ``write-lat`` and ``send-lat`` against the kernel's ping round
trip of the same cable, measured in the same run.

``--part flows`` (not in ``all``: ~7 minutes) runs the concurrency check of
issue #12 on the default leaf-spine: four ``emu perf write-bw -D 20`` flows
at once (h1 → h3, h2 → h4, h3 → h1, h4 → h2), per transport, ``--rounds``
rounds; every flow must exit 0 with its data verified.

Per case: the time scale the cluster ran at, the median goodput (fabric time)
as a fraction of the bottleneck (the fabric line rate in force), the
retransmitted fraction of the packets the daemons sent, the overload count
(every daemon, :mod:`emu.credible.overload`), whether ``emu perf`` printed its
not-credible warning, and the slowdown: wall seconds the ``emu perf`` command
took per fabric millisecond it measured (start-up and connection included, so
at least ``scale`` / 1000: what a fabric millisecond costs the user). The scale
and the fabric and wall figures are read from ``emu perf --json`` (its ``time``
and each result's ``wall``), not derived here. ``--scale N`` runs every case at
``time.scale=N``; without it the cluster's plan chooses (DESIGN.md, Fabric
time). A case ``emu up`` refuses at that scale (today the switch pipeline is
not dilated) is reported as not run, with emu's reason. ``--json`` prints one
document; progress goes to stderr. Goals (issue #12) are printed beside, never
asserted.

``--quick`` is the test suite's smoke run of the same code: one run of 10
WRITEs per case, latency over 100 iterations, the pair over IPv4 and the
leaf-spine at the proposed rate only; ``--part flows --quick`` one round of
1 s flows. Its numbers mean nothing; it keeps the benchmark from rotting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emu.fabric.naming import random_cluster  # noqa: E402 (after the path above)
from emu.fabricclock import check_scale  # noqa: E402

EMU = [sys.executable, "-m", "emu"]
NS = ROOT / "namespaces"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class EmuFailed(RuntimeError):
    """An ``emu`` command that exited non-zero; ``why`` is its last line on stderr (emu
    says why in one line, e.g. a setting it cannot run at this time scale)."""

    def __init__(self, args: tuple[str, ...], r: subprocess.CompletedProcess) -> None:
        super().__init__(f"emu {' '.join(args)}: rc {r.returncode}: {r.stderr.strip()[-400:]}")
        lines = r.stderr.strip().splitlines()
        self.why = lines[-1] if lines else f"rc {r.returncode}"


def emu(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run([*EMU, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise EmuFailed(args, r)
    return r


#: ``--set K=V`` given to the bench: added to every ``emu up`` (an A/B of a setting)
EXTRA_SETS: list[str] = []
#: ``time.scale=N`` from ``--scale``, for every ``emu up`` and ``emu doctor`` (empty: the
#: plan chooses)
TIME_SETS: list[str] = []


def up(topology: str, name: str, sets: list[str]) -> str:
    args = ["up", str(NS / topology), "--name", name]
    for s in [*sets, *EXTRA_SETS, *TIME_SETS]:
        args += ["--set", s]
    r = emu(*args)
    keep = ("line rate", "switch pipeline running")
    return "; ".join(ln.strip() for ln in (r.stdout + r.stderr).splitlines()
                     if any(k in ln for k in keep))


def line_rate(name: str, host: str) -> float:
    """``host``'s NIC line rate in fabric bits/s. The daemon paces its ports at the wall
    rate (fabric rate / scale: it stands for the dilated wire), so its stats give that
    and the scale it runs at."""
    r = emu("exec", f"{name}:{host}", "--", *EMU, "nicd", "stats", "--json")
    d = json.loads(r.stdout)
    scale = float((d.get("time") or {}).get("scale", 1.0))
    return min(p["line_rate"] for p in d["ports"].values()) * scale


def perf(name: str, test: str, src: str, dst: str, *extra: str) -> dict[str, Any]:
    """One ``emu perf --json`` run's document, with ``warned`` (its not-credible
    warning), ``rc`` and ``wall_s``: how long the command took on the wall clock."""
    t0 = time.monotonic()
    r = emu("perf", test, "--cluster", name, "--from", src, "--to", dst, "--json", *extra,
            check=False)
    wall_s = time.monotonic() - t0
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = {"passed": False, "errors": [r.stderr.strip()[-300:]]}
    doc["warned"] = "NOT CREDIBLE" in r.stderr
    doc["rc"] = r.returncode
    doc["wall_s"] = wall_s
    return doc


def scale_of(doc: dict[str, Any]) -> float | None:
    """The time scale ``emu perf`` measured on (its ``time`` key); None when it did not
    get as far as a run (its error document has no clock)."""
    t = doc.get("time")
    return float(t["scale"]) if t else None


def slowdown(doc: dict[str, Any]) -> float | None:
    """Wall seconds the ``emu perf`` command took per fabric millisecond it measured (a
    bandwidth result's ``seconds``; a latency result's iterations × ``t_avg``), or None
    without a result. Start-up and connection are in the wall time: this is what a
    fabric millisecond cost, not just the scale."""
    if not doc.get("results"):
        return None
    r = doc["results"][0]
    fabric_ms = (r["seconds"] * 1e3 if "seconds" in r
                 else r["iterations"] * r["t_avg"] / 1e3)
    return doc["wall_s"] / fabric_ms if fabric_ms > 0 else None


def _median(xs: list[float | None]) -> float | None:
    """The median of the figures that exist (None if none does)."""
    v = [x for x in xs if x is not None]
    return statistics.median(v) if v else None


def _one_scale(xs: list[float | None]) -> float | None:
    """A case's scale: its runs' (one cluster, one plan: they agree); None if no run
    reported one."""
    v = {x for x in xs if x is not None}
    return max(v) if v else None


def bw_case(label: str, name: str, src: str, dst: str, transport: str, runs: int,
            extra: list[str]) -> dict[str, Any]:
    rate = line_rate(name, src)
    res = []
    for i in range(runs):
        d = perf(name, "write-bw", src, dst, "-s", "1M", "--transport", transport,
                 "--report_gbits", *extra)
        gbps = d["results"][0]["bw_average"] if d.get("results") else 0.0
        wall = d["results"][0]["wall"]["bw_average"] if d.get("results") else 0.0
        o = d.get("overload") or {}
        m = o.get("machine") or {}
        # late sends a stall of the whole machine explains (emu.credible.stallwatch) apart
        # from the emulator's own overload: both make the run not credible
        stall = int((o.get("causes") or {}).get("machine_stall", 0))
        total = o.get("total")
        res.append({"gbps": gbps, "fraction": gbps * 1e9 / rate, "scale": scale_of(d),
                    "wall_gbps": wall, "wall_s": d["wall_s"],
                    "wall_s_per_fabric_ms": slowdown(d),
                    "overload": None if total is None else total - stall,
                    "machine_stall": stall, "machine_stalled_ms": 1e3 * m.get("stalled_s", 0),
                    "steal_ms": 1e3 * m.get("steal_s", 0),
                    "retx": o.get("retransmitted_fraction"), "warned": d["warned"],
                    "causes": o.get("causes") or {}, "passed": d.get("passed", False)})
        why = ", ".join(f"{k} {v:g}" for k, v in sorted(res[-1]["causes"].items()))
        say(f"  {label} {transport} run {i + 1}/{runs} (time scale {_fmt(res[-1]['scale'])}): "
            f"{gbps:.3f} Gb/s "
            f"({res[-1]['fraction']:.2f} of {rate / 1e9:g} Gb/s), overload "
            f"{res[-1]['overload']}, machine stalls {stall} "
            f"({res[-1]['machine_stalled_ms']:.1f} ms stalled, "
            f"steal {res[-1]['steal_ms']:.0f} ms), "
            f"retransmitted {100 * (o.get('retransmitted_fraction') or 0):.3f} %"
            f"{f'  WARNED ({why})' if d['warned'] else ''}")
    return {"case": label, "transport": transport, "line_rate": rate, "runs": res,
            "scale": _one_scale([r["scale"] for r in res]),
            "median_fraction": statistics.median(r["fraction"] for r in res),
            "median_gbps": statistics.median(r["gbps"] for r in res),
            "median_wall_gbps": statistics.median(r["wall_gbps"] for r in res),
            "wall_s_per_fabric_ms": _median([r["wall_s_per_fabric_ms"] for r in res]),
            "median_retx": statistics.median(r["retx"] or 0.0 for r in res),
            "overload": sum(r["overload"] or 0 for r in res),
            "machine_stall": sum(r["machine_stall"] for r in res),
            "warned": sum(1 for r in res if r["warned"]),
            "passed": all(r["passed"] for r in res)}


def lat_case(name: str, transport: str, iters: int) -> list[dict[str, Any]]:
    """write-lat and send-lat h1 → h2 against the kernel's ping of the same cable. The
    ping runs on the wall clock (emu cannot dilate it), so the ratio compares emu's
    t_typical in wall time (``emu perf``'s ``wall`` figures) with it; ``t_typical_us``
    is the fabric figure."""
    out = []
    size = "2" if transport == "roce" else "64"
    for test in ("write-lat", "send-lat"):
        # the latency tool pings the same path itself, in the same run
        d = perf(name, test, "h1", "h2", "-n", str(iters), "-s", size, "--transport",
                 transport)
        t = d["results"][0]["t_typical"] if d.get("results") else float("nan")
        tw = d["results"][0]["wall"]["t_typical"] if d.get("results") else float("nan")
        ping = (d.get("kernel_rtt") or {}).get("avg_us") or float("nan")
        out.append({"case": f"pair {test}", "transport": transport, "scale": scale_of(d),
                    "t_typical_us": t, "t_typical_wall_us": tw, "ping_rtt_us": ping,
                    "ratio": tw / ping if ping else float("nan"),
                    "wall_s_per_fabric_ms": slowdown(d),
                    "overload": (d.get("overload") or {}).get("total")})
        say(f"  {test} {transport} (time scale {_fmt(out[-1]['scale'])}): t_typical {t:.0f} us "
            f"fabric, {tw:.0f} us wall, ping RTT {ping:.0f} us, ratio {out[-1]['ratio']:.2f}"
            " (goal <= 2.5)")
    return out


#: the four concurrent flows of ``--part flows`` (each host both sends and receives)
FLOWS = (("h1", "h3"), ("h2", "h4"), ("h3", "h1"), ("h4", "h2"))


def flows_round(name: str, transport: str, seconds: float) -> list[dict[str, Any]]:
    """Four write-bw flows at once, each on its own perf port; their outcomes."""
    procs = []
    for i, (src, dst) in enumerate(FLOWS):
        cmd = [*EMU, "perf", "write-bw", "--cluster", name, "--from", src, "--to", dst,
               "-s", "1M", "-D", f"{seconds:g}", "-p", str(18600 + i), "--transport",
               transport, "--report_gbits", "--json"]
        procs.append((src, dst, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True)))
    out = []
    for src, dst, pr in procs:
        so, se = pr.communicate(timeout=seconds + 300)
        try:
            d = json.loads(so)
        except ValueError:
            d = {}
        gbps = d["results"][0]["bw_average"] if d.get("results") else 0.0
        out.append({"flow": f"{src}->{dst}", "rc": pr.returncode, "gbps": gbps,
                    "scale": scale_of(d),
                    "verified": pr.returncode == 0 and bool(d.get("passed")),
                    "error": "" if pr.returncode == 0 else se.strip()[-200:]})
    return out


def flows_part(name: str, transports: list[str], rounds: int, seconds: float
               ) -> list[dict[str, Any]]:
    res = []
    try:
        up("leaf-spine.toml", name, [])
        for t in transports:
            for r in range(rounds):
                fl = flows_round(name, t, seconds)
                ok = sum(f["verified"] for f in fl)
                say(f"  flows {t} round {r + 1}/{rounds}: {ok}/4 verified, "
                    + ", ".join(f"{f['flow']} {f['gbps']:.2f}" for f in fl)
                    + "".join(f"\n    {f['flow']}: rc {f['rc']} {f['error']}"
                              for f in fl if not f["verified"]))
                res.append({"transport": t, "round": r + 1, "flows": fl})
    finally:
        emu("down", name, check=False)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per pair case")
    ap.add_argument("--iters", type=int, default=200, help="1 MiB WRITEs per run (-n)")
    ap.add_argument("--lat-iters", type=int, default=1000,
                    help="iterations of each latency test (-n)")
    ap.add_argument("--scale", metavar="N",
                    help="run every case at time scale N (--set time.scale=N; fabric time "
                         "runs N times slower than the wall clock). Default: what the "
                         "cluster's plan chooses")
    ap.add_argument("--transports", default="roce,uet")
    ap.add_argument("--part", choices=("all", "pair", "leaf-spine", "lat", "flows"),
                    default="all")
    ap.add_argument("--leaf-spine-rate", metavar="RATE",
                    help="the leaf-spine case's port rate (default: what emu doctor proposes)")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of --part flows")
    ap.add_argument("--seconds", type=float, default=20.0, help="flow length in --part flows")
    ap.add_argument("--set", action="append", default=[], metavar="K=V", dest="sets",
                    help="passed to every emu up, e.g. --set nic.rx_coalesce=0 (repeatable)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run (the test suite's): one run of 10 WRITEs, 100 latency "
                         "iterations, one pair and one leaf-spine case; --part flows: one "
                         "round of 1 s flows")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    scale: float | str | None = a.scale  # None: the plan chooses; "auto": emu up says if it can
    if a.scale is not None and a.scale != "auto":
        try:
            scale = check_scale(a.scale)
        except ValueError as e:
            ap.error(str(e))
    if a.quick:  # the same code path with tiny sizes, so the benchmark cannot rot unnoticed
        a.runs, a.iters, a.lat_iters, a.rounds, a.seconds = 1, 10, 100, 1, 1.0
    EXTRA_SETS[:] = a.sets
    TIME_SETS[:] = [] if a.scale is None else [f"time.scale={a.scale}"]
    if os.geteuid() != 0:
        say("bench-credible needs root (namespaces)")
        return 2
    transports = a.transports.split(",")
    name = random_cluster("bc")
    extra = ["-n", str(a.iters)]
    doc: dict[str, Any] = {"started": time.time(), "scale_requested": scale,
                           "quick": a.quick, "bandwidth": [], "latency": [], "not_run": []}
    if a.part == "flows":
        say(f"bench-credible: {len(FLOWS)} concurrent write-bw flows on the leaf-spine, "
            f"{a.rounds} rounds of {a.seconds:g} s per transport")
        doc["flows"] = flows_part(name, transports, a.rounds, a.seconds)
        doc["ended"] = time.time()
        if a.json:
            print(json.dumps(doc, indent=1))
            return 0
        print(f"{'transport':9} {'scale':>5} {'rounds':>6} {'flows verified':>15} "
              f"{'failed':>6}")
        for t in transports:
            fl = [f for r in doc["flows"] if r["transport"] == t for f in r["flows"]]
            ok = sum(f["verified"] for f in fl)
            print(f"{t:9} {_fmt(_one_scale([f['scale'] for f in fl])):>5} {a.rounds:6d} "
                  f"{ok:>9d} of {len(fl):<3d} {len(fl) - ok:6d}")
        print("goal: every flow completes with its data verified")
        return 0
    # the rate for the leaf-spine *with* the pipeline (the datapath emu up will choose)
    prop = a.leaf_spine_rate
    if a.part in ("all", "leaf-spine") and not prop:
        try:
            r = emu("doctor", str(NS / "leaf-spine.toml"), "--set", "switch.pipeline=true",
                    *[x for t in TIME_SETS for x in ("--set", t)], "--json")
        except EmuFailed as e:  # e.g. a scale emu cannot run at: its one line says why
            say(f"bench-credible: {e.why}")
            return 2
        doc["proposed_leaf_spine"] = json.loads(r.stdout)["topology"]["proposed"]
        prop = f"{doc['proposed_leaf_spine'] / 1e6:.0f}mbit"
    cases = []
    if a.part in ("all", "pair", "lat"):
        cases += [("pair IPv4", "pair.toml", []), ("pair IPv6", "pair.toml", ["nic.family=6"])]
    if a.part in ("all", "leaf-spine"):
        cases += [(f"leaf-spine {prop}", "leaf-spine.toml", [f"switch.port.rate={prop}"]),
                  ("leaf-spine 10gbit", "leaf-spine.toml", ["switch.port.rate=10gbit"]),
                  # the user-space datapath (what trimming, PFC or delay need), beside it
                  ("leaf-spine 100mbit user", "leaf-spine.toml",
                   ["switch.port.rate=100mbit", "switch.datapath=user"])]
    if a.quick:  # one case of each kind: the pair (bandwidth, latency), the leaf-spine
        cases = [c for c in cases if c[0] in ("pair IPv4", f"leaf-spine {prop}")]
    for label, topo, sets in cases:
        say(f"bench-credible: {label}: emu up {topo} "
            f"{' '.join('--set ' + s for s in [*sets, *TIME_SETS])}")
        try:
            try:
                doc.setdefault("up_lines", {})[label] = up(topo, name, sets)
            except EmuFailed as e:  # e.g. a setting not on the fabric clock yet
                say(f"  {label}: not run: {e}")
                doc["not_run"].append({"case": label, "scale_requested": scale,
                                       "reason": e.why})
                continue
            pair = topo == "pair.toml"
            if a.part != "lat":
                for t in transports:
                    doc["bandwidth"].append(bw_case(
                        label, name, "h1", "h2" if pair else "h4", t,
                        a.runs if pair else max(1, a.runs // 2), extra))
            if pair and label.endswith("IPv4") and a.part in ("all", "lat"):
                for t in transports:
                    doc["latency"] += lat_case(name, t, a.lat_iters)
        finally:
            emu("down", name, check=False)
    doc["ended"] = time.time()
    # every case refused (e.g. a scale emu cannot run at): the bench measured nothing
    rc = 1 if doc["not_run"] and not (doc["bandwidth"] or doc["latency"]) else 0
    if a.json:
        print(json.dumps(doc, indent=1))
        return rc
    print(f"{'case':24} {'transport':9} {'scale':>5} {'rate':>8} {'goodput':>8} "
          f"{'of rate':>8} {'retx %':>7} {'overload':>8} {'machine':>7} {'warned':>6} "
          f"{'wall s/ms':>9}")
    for c in doc["bandwidth"]:
        print(f"{c['case']:24} {c['transport']:9} {_fmt(c['scale']):>5} "
              f"{c['line_rate'] / 1e9:7.3g}G {c['median_gbps']:7.3f}G "
              f"{c['median_fraction']:8.2f} {100 * c['median_retx']:7.3f} {c['overload']:8d} "
              f"{c['machine_stall']:7d} {c['warned']:>3}/{len(c['runs'])} "
              f"{_fmt(c['wall_s_per_fabric_ms'], '.3f'):>9}")
    for c in doc["not_run"]:
        print(f"{c['case']:24} not run: {c['reason']}")
    print("rate and goodput are fabric time (the clock the cluster ran at: scale wall ms per "
          "fabric ms); wall s/ms: wall seconds each emu perf run took per fabric ms it "
          "measured, start-up included")
    print("goals: at the proposed rate >= 0.90 of the rate, < 0.1 % retransmitted, 0 overload;"
          " at 10gbit overload > 0 and the warning. machine: late sends a stall of the whole"
          " machine explains (not credible either; emu.credible.stallwatch)")
    if doc["latency"]:
        print(f"\n{'latency':24} {'transport':9} {'scale':>5} {'t_typical':>10} "
              f"{'wall':>9} {'ping RTT':>9} {'ratio':>6} {'wall s/ms':>9}")
        for c in doc["latency"]:
            print(f"{c['case']:24} {c['transport']:9} {_fmt(c['scale']):>5} "
                  f"{c['t_typical_us']:9.0f}u {c['t_typical_wall_us']:8.0f}u "
                  f"{c['ping_rtt_us']:8.0f}u {c['ratio']:6.2f} "
                  f"{_fmt(c['wall_s_per_fabric_ms'], '.3f'):>9}")
        print("t_typical is fabric time, wall = t_typical x scale; the kernel's ping runs on "
              "the wall clock. goal: wall t_typical <= 2.5 x the ping round trip")
    return rc


def _fmt(x: float | None, spec: str = "g") -> str:
    """A table cell: ``-`` where there is no figure (no run got as far as a result)."""
    return "-" if x is None else format(x, spec)


if __name__ == "__main__":
    sys.exit(main())

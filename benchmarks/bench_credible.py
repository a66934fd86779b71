# SPDX-License-Identifier: GPL-2.0-only
"""Are the shipped fabrics credible as a user gets them? write-bw and write-lat at their auto scale.

Each case is a shipped topology **as written** (400 Gb/s links, MTU 4200, its
cable and ``[latency]`` delays) brought up with ``emu up`` and no time setting,
so it runs at the time scale ``[time] scale = "auto"`` picks on this machine
(``emu up --dry-run``; DESIGN.md, Fabric time):

* ``pair IPv4`` and ``pair IPv6`` (``--set nic.family=6``), h1 → h2;
* ``leaf-spine forwarding`` (``--set switch.pipeline=false``: the kernel forwards,
  no marks), ``leaf-spine pipeline`` (as shipped: the kernel datapath ``emu up``
  chooses; ``--set switch.pipeline=true`` says so) and
  ``leaf-spine user`` (the pipeline on the user-space datapath, what trimming, PFC
  or delay need), h1 → h4 across the spine.

Per case and transport (RoCEv2, UET): ``--runs`` runs of ``emu perf write-bw -s 1M
-n ITERS`` and one ``emu perf write-lat -n LAT_ITERS``, unpinned. Every run is sized
in fabric terms (iterations, never ``-D`` seconds: at scale 7100 one fabric second
is two hours of wall time). Printed per case: the scale it ran at (``emu perf
--json``'s ``time``), the median fabric goodput as a fraction of the line rate
and of the line rate's payload share (what the headers leave of a frame: 4096 B
in 4154 for RoCEv2 over IPv4), the retransmitted fraction, the overload count
(every daemon, :mod:`emu.credible.overload`) and machine stalls apart, how many
runs ``emu perf`` called credible, and the slowdown: wall seconds the ``emu perf``
command took per fabric millisecond it measured (start-up and connection
included, so at least ``scale`` / 1000). For write-lat: t_typical in fabric µs
against the fabric's analytic one-way latency — the path delay the plan gives the
sending NIC daemon (NICs, cables, switches: ``--path-delay``) plus the frame's
serialization on each link of the path — and their ratio.

``--scale N`` runs every case at ``time.scale=N`` instead. ``--twice`` runs each
case again at twice its scale (2 × auto, or 2 × N) and prints the ratio of the
fabric results (goodput, t_typical): issue #34 asks that they agree within 5 %,
or the result is the emulator's, not the fabric's. A case ``emu up`` refuses is
reported as not run, with emu's reason. ``--json`` prints one document; progress
goes to stderr. Goals are printed beside, never asserted.

``--part flows`` (not in ``all``) runs the concurrency check of issue #34 on the
leaf-spine as written (:mod:`credible_flows`): every transport's four flows at once (h1 →
h3, h2 → h4, h3 → h1, h4 → h2 each; eight flows with RoCEv2 and UET), ``--rounds`` rounds
(10) of ``-s FLOW_SIZE -n FLOW_ITERS`` (64 × 1 MiB) a flow; every flow must exit 0 with its
data verified and credible; each flow's goodput beside its path's capacity and its fair
share; ``--twice`` compares the total at twice the scale (within 10 %).

``--part invariance`` (not in ``all``; :mod:`credible_invariance`) runs the pair with 1 %
loss on its cable (write-bw 1 MiB) and a 3 -> 1 incast through ECN-marking switches
(leaf-spine with the pipeline, flows started together), each at its auto scale and at
twice it, and prints the ratio of each median (goodput; each flow's completion time and
Jain's fairness). A RoCEv2 QP that loses a message's last packet waits its local ACK
timeout, 67 fabric ms — 8 wall minutes at 7100 — so the full run is long; ``--quick``
runs it without loss and with flows that fit a port's queue.

``--quick`` is the test suite's smoke run of the same code: one run of 5 WRITEs
and 20 write-lat iterations per transport, the pair over IPv4 and the leaf-spine
with the pipeline only; ``--part flows --quick`` one round of 5 16 KiB WRITEs a flow.
Its numbers mean little; it keeps the benchmark from rotting.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# noqa: E402 below: after the path above
from emu.fabric.naming import random_cluster  # noqa: E402
from emu.fabricclock import check_scale  # noqa: E402
from emu.nic.pacer import FRAME_OVERHEAD  # noqa: E402
from emu.transports.roce.factory import pmtu_for  # noqa: E402
from emu.transports.roce.packets import BTH_SIZE, ICRC_SIZE  # noqa: E402
from emu.transports.uet.factory import payload_for  # noqa: E402
from emu.transports.uet.fastpath import REQ_SIZE  # noqa: E402

EMU = [sys.executable, "-m", "emu"]
NS = ROOT / "namespaces"
#: a RoCEv2 WRITE's first packet carries a RETH (its address and length)
RETH_SIZE = 16

#: label, topology, --set of the case, sender, receiver, links on the path (each
#: serializes the frame once: the analytic latency's serialization term)
CASES: tuple[tuple[str, str, tuple[str, ...], str, str, int], ...] = (
    ("pair IPv4", "pair.toml", (), "h1", "h2", 1),
    ("pair IPv6", "pair.toml", ("nic.family=6",), "h1", "h2", 1),
    ("leaf-spine forwarding", "leaf-spine.toml", ("switch.pipeline=false",), "h1", "h4", 4),
    ("leaf-spine pipeline", "leaf-spine.toml", ("switch.pipeline=true",), "h1", "h4", 4),
    ("leaf-spine user", "leaf-spine.toml",
     ("switch.pipeline=true", "switch.datapath=user"), "h1", "h4", 4),
)
#: write-lat message size per transport (perftest's default for RoCE; UET's smallest)
LAT_SIZE = {"roce": 2, "uet": 64}
#: the largest |ratio - 1| of 2x-scale to 1x-scale fabric results that counts as agreeing
TWICE_TOLERANCE = 0.05


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class EmuFailed(RuntimeError):
    """An ``emu`` command that exited non-zero; ``why`` is its last line on stderr (emu
    says why in one line, e.g. a setting it cannot run at this time scale)."""

    def __init__(self, args: tuple[str, ...], r: subprocess.CompletedProcess) -> None:
        super().__init__(f"emu {' '.join(args)}: rc {r.returncode}: {r.stderr.strip()[-400:]}")
        lines = r.stderr.strip().splitlines()
        self.why = lines[-1] if lines else f"rc {r.returncode}"


def emu(*args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    r = subprocess.run([*EMU, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise EmuFailed(args, r)
    return r


#: ``--set K=V`` given to the bench: added to every ``emu up`` (an A/B of a setting)
EXTRA_SETS: list[str] = []


def _set_args(sets: list[str]) -> list[str]:
    return [x for s in [*sets, *EXTRA_SETS] for x in ("--set", s)]


def plan(topology: str, sets: list[str]) -> dict[str, Any]:
    """``emu up --dry-run --json``: the plan ``emu up`` would make (its time scale, each
    port's rate and MTU, each NIC daemon's arguments), building nothing."""
    return json.loads(emu("up", str(NS / topology), "--dry-run", "--json",
                          *_set_args(sets)).stdout)


def up(topology: str, name: str, sets: list[str]) -> None:
    emu("up", str(NS / topology), "--name", name, *_set_args(sets))


def path_delays(pl: dict[str, Any], host: str) -> dict[str, float]:
    """The one-way fabric delays (NICs, cables, switches; no serialization) the plan
    gives ``host``'s NIC daemon, per destination address (``*``: every other one)."""
    args = pl["nics"][host]["args"]
    out = {}
    for flag, val in zip(args, args[1:], strict=False):
        if flag == "--path-delay":
            addr, _, sec = val.rpartition("=")
            out[addr] = float(sec)
    return out


def port_of(pl: dict[str, Any], host: str) -> dict[str, Any]:
    """``host``'s first port in the plan (rate, MTU)."""
    return next(p for p in pl["ports"] if p["node"] == host)


def frame_bytes(transport: str, family: int, mtu: int, size: int) -> tuple[int, int]:
    """(packets, bytes on the wire) of one ``size``-byte WRITE at IP MTU ``mtu``: what the
    line rate serializes (Ethernet header + IP + UDP + the transport's headers)."""
    if transport == "roce":
        seg = pmtu_for(mtu)
        per = BTH_SIZE + ICRC_SIZE + FRAME_OVERHEAD[family]
        extra = RETH_SIZE
    else:
        seg = payload_for(mtu)
        per = REQ_SIZE + FRAME_OVERHEAD[family]
        extra = 0
    n = max(1, math.ceil(size / seg))
    return n, size + n * per + extra


def payload_share(transport: str, family: int, mtu: int, size: int) -> float:
    """The most goodput a line rate can carry of ``size``-byte WRITEs: payload / wire."""
    return size / frame_bytes(transport, family, mtu, size)[1]


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


def _overload(d: dict[str, Any]) -> dict[str, Any]:
    """A run's overload figures: the emulator's own overload apart from the late sends a
    stall of the whole machine explains (:mod:`emu.credible.stallwatch`); both make
    the run not credible."""
    o = d.get("overload") or {}
    m = o.get("machine") or {}
    stall = int((o.get("causes") or {}).get("machine_stall", 0))
    total = o.get("total")
    return {"overload": None if total is None else total - stall, "machine_stall": stall,
            "machine_stalled_ms": 1e3 * m.get("stalled_s", 0),
            "steal_ms": 1e3 * m.get("steal_s", 0), "retx": o.get("retransmitted_fraction"),
            "causes": o.get("causes") or {},
            "credible": bool(d.get("credible")) and d.get("rc") == 0}


def bw_case(label: str, name: str, src: str, dst: str, transport: str, runs: int,
            iters: int, rate: float, share: float) -> dict[str, Any]:
    res = []
    for i in range(runs):
        d = perf(name, "write-bw", src, dst, "-s", "1M", "-n", str(iters),
                 "--transport", transport, "--report_gbits")
        gbps = d["results"][0]["bw_average"] if d.get("results") else 0.0
        wall = d["results"][0]["wall"]["bw_average"] if d.get("results") else 0.0
        res.append({"gbps": gbps, "fraction": gbps * 1e9 / rate,
                    "of_payload": gbps * 1e9 / rate / share, "scale": scale_of(d),
                    "wall_gbps": wall, "wall_s": d["wall_s"],
                    "wall_s_per_fabric_ms": slowdown(d), **_overload(d),
                    "warned": d["warned"], "passed": d.get("passed", False)})
        r = res[-1]
        why = ", ".join(f"{k} {v:g}" for k, v in sorted(r["causes"].items()))
        say(f"  {label} {transport} write-bw {i + 1}/{runs} (scale {_fmt(r['scale'])}): "
            f"{gbps:.1f} Gb/s fabric = {r['fraction']:.3f} of {rate / 1e9:g} Gb/s, "
            f"{r['of_payload']:.3f} of its payload share {share:.3f}; overload "
            f"{r['overload']}, machine stalls {r['machine_stall']} "
            f"({r['machine_stalled_ms']:.1f} ms, steal {r['steal_ms']:.0f} ms), "
            f"retransmitted {100 * (r['retx'] or 0):.3f} %, "
            f"{_fmt(r['wall_s_per_fabric_ms'], '.2f')} wall s per fabric ms"
            f"{f'  NOT CREDIBLE ({why})' if not r['credible'] else ''}")
    return {"case": label, "transport": transport, "line_rate": rate,
            "payload_share": share, "runs": res,
            "scale": _one_scale([r["scale"] for r in res]),
            "median_fraction": statistics.median(r["fraction"] for r in res),
            "median_of_payload": statistics.median(r["of_payload"] for r in res),
            "median_gbps": statistics.median(r["gbps"] for r in res),
            "median_wall_gbps": statistics.median(r["wall_gbps"] for r in res),
            "wall_s_per_fabric_ms": _median([r["wall_s_per_fabric_ms"] for r in res]),
            "median_retx": statistics.median(r["retx"] or 0.0 for r in res),
            "overload": sum(r["overload"] or 0 for r in res),
            "machine_stall": sum(r["machine_stall"] for r in res),
            "warned": sum(1 for r in res if r["warned"]),
            "credible": sum(1 for r in res if r["credible"]),
            "passed": all(r["passed"] for r in res)}


def lat_case(label: str, name: str, src: str, dst: str, transport: str, iters: int,
             pl: dict[str, Any], family: int, links: int) -> dict[str, Any]:
    """write-lat ``src`` → ``dst``: t_typical (fabric µs) against the fabric's analytic one
    way: the plan's path delay to the address perf used, plus the frame's serialization
    on each of the path's ``links`` at the sender's line rate."""
    size = LAT_SIZE[transport]
    d = perf(name, "write-lat", src, dst, "-n", str(iters), "-s", str(size),
             "--transport", transport)
    res = (d.get("results") or [{}])[0]
    t = res.get("t_typical", float("nan"))
    tw = (res.get("wall") or {}).get("t_typical", float("nan"))
    delays = path_delays(pl, src)
    addr = ((d.get("remote") or [{}])[0]).get("address")
    port = port_of(pl, src)
    _, wire = frame_bytes(transport, family, int(port["mtu"]), size)
    one_way = delays.get(addr, delays.get("*", 0.0)) + links * wire * 8 / port["rate"]
    out = {"case": label, "transport": transport, "scale": scale_of(d), "size": size,
           "t_typical_us": t, "t_typical_wall_us": tw, "one_way_us": one_way * 1e6,
           "ratio": t / (one_way * 1e6) if one_way else float("nan"),
           "wall_s_per_fabric_ms": slowdown(d), **_overload(d),
           "passed": d.get("passed", False)}
    say(f"  {label} {transport} write-lat (scale {_fmt(out['scale'])}): t_typical {t:.3f} us "
        f"fabric ({tw / 1e3:.1f} ms wall), analytic one way {out['one_way_us']:.3f} us, "
        f"ratio {out['ratio']:.2f}; overload {out['overload']}"
        f"{'' if out['credible'] else '  NOT CREDIBLE'}")
    return out


def run_case(case: tuple, name: str, a: argparse.Namespace, transports: list[str],
             scale: float | None, doc: dict[str, Any]) -> bool:
    """Up, measure, down one case at ``scale`` (None: as written, auto); False if emu
    refused it (recorded in ``doc["not_run"]``)."""
    label, topo, csets, src, dst, links = case
    sets = [*csets, *([] if scale is None else [f"time.scale={scale:g}"])]
    say(f"bench-credible: {label}: emu up {topo} {' '.join('--set ' + s for s in sets)}")
    try:
        pl = plan(topo, sets)
        up(topo, name, sets)
    except EmuFailed as e:
        emu("down", name, check=False)
        say(f"  {label}: not run: {e}")
        doc["not_run"].append({"case": label, "scale_requested": scale, "reason": e.why})
        return False
    try:
        family = 6 if "nic.family=6" in [*csets, *EXTRA_SETS] else 4
        port = port_of(pl, src)
        rate, mtu = float(port["rate"]), int(port["mtu"])
        doc["plans"].append({"case": label, "scale": pl["time"]["scale"],
                             "why": pl["time"]["why"], "rate": rate, "mtu": mtu,
                             "path_delays": path_delays(pl, src)})
        for t in transports:
            if a.part != "lat":
                doc["bandwidth"].append(bw_case(
                    label, name, src, dst, t, a.runs, a.iters, rate,
                    payload_share(t, family, mtu, 1 << 20)))
            doc["latency"].append(lat_case(label, name, src, dst, t, a.lat_iters, pl,
                                           family, links))
    finally:
        emu("down", name, check=False)
    return True


def twice_ratios(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per case and transport, the fabric results at twice the scale over those at the
    scale (goodput, t_typical): a credible emulation gives the same fabric answer."""
    out = []
    for kind, key in (("bandwidth", "median_gbps"), ("latency", "t_typical_us")):
        rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for c in doc[kind]:
            rows.setdefault((c["case"], c["transport"]), []).append(c)
        for (case, t), cs in rows.items():
            if len(cs) != 2 or not cs[0][key] or cs[1]["scale"] is None:
                continue
            ratio = cs[1][key] / cs[0][key]
            out.append({"case": case, "transport": t, "what": key,
                        "scale": cs[0]["scale"], "twice": cs[1]["scale"],
                        "base": cs[0][key], "at_twice": cs[1][key], "ratio": ratio,
                        "agree": abs(ratio - 1) <= TWICE_TOLERANCE})
    return out


def flows_part(name: str, transports: list[str], rounds: int, iters: int, size: str,
               scale: float | None) -> dict[str, Any]:
    """Every transport's flows at once on the leaf-spine, ``rounds`` times
    (:mod:`credible_flows`); the rounds, each flow's capacity and share, the summary."""
    import credible_flows as cf

    from emu.cluster.cluster import plan_of

    flows = cf.flow_set(transports)
    rounds_out: list[dict[str, Any]] = []
    try:
        up("leaf-spine.toml", name, [] if scale is None else [f"time.scale={scale:g}"])
        p = plan_of(name)
        share = cf.shares(flows, {h: min(pt.rate for pt in n.ports)
                                  for h, n in p.nics.items()})
        for r in range(rounds):
            fl = cf.run_round(EMU, name, flows, iters, size, scale_of, p.time.clock())
            ok = sum(f["verified"] for f in fl)
            say(f"  flows round {r + 1}/{rounds} (scale "
                f"{_fmt(_one_scale([f['scale'] for f in fl]))}): {ok}/{len(fl)} verified, "
                + ", ".join(f"{f['transport']} {f['flow']} {f['gbps']:.1f}" for f in fl)
                + " Gb/s"
                + "".join(f"\n    {f['transport']} {f['flow']}: rc {f['rc']} {f['error']}"
                          for f in fl if not f["verified"])
                + "".join(f"\n    {f['transport']} {f['flow']}: not credible: {f['causes']}"
                          for f in fl if f["verified"] and not f["credible"])
                + "".join(f"\n    {f['transport']} {f['flow']}: started "
                          f"{f['start_missed_s'] * 1e6:.1f} fabric us after the others "
                          "(--start-at missed)"
                          for f in fl if (f.get("start_missed_s") or 0) > 0))
            rounds_out.append({"round": r + 1, "flows": fl})
    finally:
        emu("down", name, check=False)
    return {"scale": _one_scale([f["scale"] for r in rounds_out for f in r["flows"]]),
            "rounds": rounds_out, **cf.summary(rounds_out, flows, share)}


def flows_main(a: argparse.Namespace, name: str, transports: list[str],
               scale: float | None, doc: dict[str, Any]) -> int:
    import credible_flows as cf

    say(f"bench-credible: {len(transports) * len(cf.FLOWS)} concurrent write-bw flows on "
        f"the leaf-spine ({', '.join(transports)} at once), {a.rounds} rounds of "
        f"{a.flow_iters} x {a.flow_size} a flow")
    doc["flows"] = flows_part(name, transports, a.rounds, a.flow_iters, a.flow_size, scale)
    runs = [("at the scale", doc["flows"])]
    if a.twice and doc["flows"]["scale"]:
        say("  again at twice the scale")
        doc["flows_twice"] = flows_part(name, transports, a.rounds, a.flow_iters,
                                        a.flow_size, 2 * doc["flows"]["scale"])
        runs.append(("at twice the scale", doc["flows_twice"]))
        t0, t1 = doc["flows"]["median_total_gbps"], doc["flows_twice"]["median_total_gbps"]
        doc["flows_twice_ratio"] = (t1 / t0) if t0 and t1 else None
    doc["ended"] = time.time()
    if a.json:
        print(json.dumps(doc, indent=1))
        return 0
    for label, res in runs:
        print_summary_flows(label, res)
    if "flows_twice_ratio" in doc:
        r = doc["flows_twice_ratio"]
        print(f"total at twice the scale / at the scale: {_fmt(r, '.3f')} (goal: within "
              f"{100 * cf.TWICE_TOTAL_TOLERANCE:g} %)")
    print("goal: every flow verified and credible in every round, each near its share")
    return 0


def invariance_main(a: argparse.Namespace, name: str, transports: list[str],
                   scale: float | None, doc: dict[str, Any]) -> int:
    """Pair with 1 % loss and a 3 -> 1 incast through ECN-marking switches, at the auto
    scale (or ``--scale``) and at twice it (:mod:`credible_invariance`)."""
    import credible_invariance as ci

    from emu.cluster.cluster import plan_of

    def down(n: str) -> None:
        emu("down", n, check=False)

    runs = 1 if a.quick else a.runs
    # --quick: the same code with no loss and incast flows that fit a port's queue, so it
    # never waits out a retransmission timeout (a lost last packet: RoCEv2's at -u 8 is
    # 1 fabric ms, 7 wall seconds at 7100; UET's RTO 5 fabric ms, 35 s)
    loss, size, loss_iters, incast_iters = (("0%", "16K", 5, 5) if a.quick
                                            else ("1%", "1M", a.iters, 16))
    clock_of = (lambda n: plan_of(n).time.clock())  # noqa: E731
    cases = {  # each case at its own scale, then at twice that
        "loss": lambda sc: ci.loss_case(EMU, name, up, down, transports, runs, loss_iters,
                                        sc, say, loss=loss, size=size),
        "incast": lambda sc: ci.incast_case(EMU, name, up, down, clock_of, transports, runs,
                                            incast_iters, sc, say, size=size,
                                            extra=tuple(a.incast_set)),
    }
    results: list[dict[str, Any]] = [{}, {}]
    scales: dict[str, list[float | None]] = {}
    for case, run in cases.items():
        say(f"bench-credible invariance: {case} at scale "
            f"{'auto' if scale is None else f'{scale:g}'}")
        first = run(scale)
        ran = _one_scale([r["scale"] for r in first] if case == "loss"
                         else [f["scale"] for r in first for f in r["flows"]])
        results[0][case] = first
        scales[case] = [ran, 2 * ran if ran else None]
        if ran is None:
            continue
        say(f"bench-credible invariance: {case} at twice the scale, {2 * ran:g}")
        results[1][case] = run(2 * ran)
    doc["invariance"] = results
    doc["invariance_scales"] = scales
    rows: list[dict[str, Any]] = []
    if all(results[1].get(c) for c in cases):
        rows = ci.ratios(ci.medians(**results[0]), ci.medians(**results[1]))
    doc["invariance_ratios"] = rows
    doc["ended"] = time.time()
    if a.json:
        print(json.dumps(doc, indent=1))
        return 0
    if rows:
        ci.print_ratios(rows, scales)
    return 0


def print_summary_flows(label: str, res: dict[str, Any]) -> None:
    import credible_flows as cf

    cf.print_summary(label, res["scale"], res)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="write-bw runs per case and transport")
    ap.add_argument("--iters", type=int, default=20,
                    help="1 MiB WRITEs per write-bw run (-n; 20 MiB is 0.42 fabric ms at "
                         "400 Gb/s)")
    ap.add_argument("--lat-iters", type=int, default=200,
                    help="iterations of each write-lat run (-n)")
    ap.add_argument("--scale", metavar="N",
                    help="run every case at time scale N (--set time.scale=N) instead of "
                         "the auto scale of the fabric as written")
    ap.add_argument("--twice", action="store_true",
                    help="also run each case at twice its scale and print the ratio of the "
                         "fabric results (issue #34: within 5 %%)")
    ap.add_argument("--transports", default="roce,uet")
    ap.add_argument("--part", choices=("all", "pair", "leaf-spine", "lat", "flows", "invariance"),
                    default="all")
    ap.add_argument("--incast-set", action="append", default=[], metavar="K=V",
                    help="--part invariance: passed to the incast case's emu up only, e.g. "
                         "--incast-set switch.port.lossless=true (PFC; the user-space "
                         "datapath) (repeatable)")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of --part flows")
    ap.add_argument("--flow-iters", type=int, default=64,
                    help="WRITEs per flow in --part flows (-n)")
    ap.add_argument("--flow-size", default="1M", help="WRITE size in --part flows (-s)")
    ap.add_argument("--set", action="append", default=[], metavar="K=V", dest="sets",
                    help="passed to every emu up, e.g. --set nic.rx_coalesce=0 (repeatable)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run (the test suite's): one run of 5 WRITEs, 20 write-lat "
                         "iterations, the pair over IPv4 and the leaf-spine with the "
                         "pipeline; --part flows: one round of 5 16 KiB WRITEs a flow")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    scale: float | None = None
    if a.scale is not None:
        try:
            scale = float(check_scale(a.scale))
        except ValueError as e:
            ap.error(str(e))
    if a.quick:  # the same code path with tiny sizes, so the benchmark cannot rot unnoticed
        a.runs, a.iters, a.lat_iters, a.rounds = 1, 5, 20, 1
        # two flows that meet on one 400 Gb/s link queue at most 80 KiB: less than a
        # kernel-forwarding port's queue (its tbf) at any scale this machine runs at
        a.flow_iters, a.flow_size = 5, "16K"
    EXTRA_SETS[:] = a.sets
    # a SIGTERM (a test's timeout) unwinds: every cluster comes down in its ``finally``
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.geteuid() != 0:
        say("bench-credible needs root (namespaces)")
        return 2
    transports = a.transports.split(",")
    name = random_cluster("bc")
    doc: dict[str, Any] = {"started": time.time(), "scale_requested": scale,
                           "twice": a.twice, "quick": a.quick, "plans": [],
                           "bandwidth": [], "latency": [], "not_run": []}
    if a.part == "flows":
        return flows_main(a, name, transports, scale, doc)
    if a.part == "invariance":
        return invariance_main(a, name, transports, scale, doc)
    cases = [c for c in CASES
             if a.part in ("all", "lat") or c[1].startswith(a.part)]
    if a.quick:  # one case of each kind: the pair, the leaf-spine with its pipeline
        cases = [c for c in cases if c[0] in ("pair IPv4", "leaf-spine pipeline")]
    for case in cases:
        if not run_case(case, name, a, transports, scale, doc) or not a.twice:
            continue
        ran = ([c["scale"] for c in doc["bandwidth"] + doc["latency"]
                if c["case"] == case[0] and c["scale"]] or [None])[-1]
        if ran is None:
            continue
        run_case(case, name, a, transports, 2 * ran, doc)
    doc["twice_ratios"] = twice_ratios(doc) if a.twice else []
    doc["ended"] = time.time()
    # every case refused: the bench measured nothing
    rc = 1 if doc["not_run"] and not (doc["bandwidth"] or doc["latency"]) else 0
    if a.json:
        print(json.dumps(doc, indent=1))
        return rc
    print_tables(doc)
    return rc


def print_tables(doc: dict[str, Any]) -> None:
    if doc["bandwidth"]:
        print(f"{'write-bw 1 MiB':20} {'transport':9} {'scale':>6} {'rate':>6} "
              f"{'goodput':>8} {'of rate':>7} {'payload':>7} {'of payl':>7} {'retx %':>6} "
              f"{'overload':>8} {'machine':>7} {'credible':>8} {'wall s/ms':>9}")
        for c in doc["bandwidth"]:
            print(f"{c['case']:20} {c['transport']:9} {_fmt(c['scale']):>6} "
                  f"{c['line_rate'] / 1e9:5.0f}G {c['median_gbps']:7.1f}G "
                  f"{c['median_fraction']:7.3f} {c['payload_share']:7.3f} "
                  f"{c['median_of_payload']:7.3f} {100 * c['median_retx']:6.3f} "
                  f"{c['overload']:8d} {c['machine_stall']:7d} "
                  f"{c['credible']:>4d}/{len(c['runs']):<3d} "
                  f"{_fmt(c['wall_s_per_fabric_ms'], '.2f'):>9}")
        print("rate, goodput: fabric Gb/s; of rate: goodput / line rate; payload: the line "
              "rate's payload share (payload / frame on the wire); of payl: goodput / "
              "(rate x payload share); wall s/ms: wall seconds per fabric ms, start-up "
              "included. goals: of payl >= 0.95, 0 retx, 0 overload, every run credible")
    if doc["latency"]:
        print(f"\n{'write-lat':20} {'transport':9} {'scale':>6} {'size':>4} "
              f"{'t_typical':>10} {'one way':>9} {'ratio':>6} {'overload':>8} "
              f"{'machine':>7} {'credible':>8} {'wall s/ms':>9}")
        for c in doc["latency"]:
            print(f"{c['case']:20} {c['transport']:9} {_fmt(c['scale']):>6} {c['size']:4d} "
                  f"{c['t_typical_us']:8.3f}us {c['one_way_us']:7.3f}us {c['ratio']:6.2f} "
                  f"{_fmt(c['overload']):>8} {c['machine_stall']:7d} "
                  f"{'yes' if c['credible'] else 'no':>8} "
                  f"{_fmt(c['wall_s_per_fabric_ms'], '.2f'):>9}")
        print("t_typical: fabric us; one way: the fabric's analytic one-way latency (the "
              "plan's path delay: NICs, cables, switches; plus serialization on each link)."
              " goal: ratio close to 1 (emu's own time hidden by the scale)")
    for c in doc["not_run"]:
        print(f"{c['case']:20} not run (scale {_fmt(c['scale_requested'])}): {c['reason']}")
    if doc.get("twice_ratios"):
        print(f"\n{'2x scale':20} {'transport':9} {'result':12} {'scale':>6} {'2x':>6} "
              f"{'at scale':>9} {'at 2x':>9} {'ratio':>6} {'agree':>5}")
        for c in doc["twice_ratios"]:
            what = "goodput Gb/s" if c["what"] == "median_gbps" else "t_typical us"
            print(f"{c['case']:20} {c['transport']:9} {what:12} {_fmt(c['scale']):>6} "
                  f"{_fmt(c['twice']):>6} {c['base']:9.3f} {c['at_twice']:9.3f} "
                  f"{c['ratio']:6.3f} {'yes' if c['agree'] else 'NO':>5}")
        print(f"ratio: the fabric result at twice the scale over it at the scale; goal "
              f"(issue #34): within {100 * TWICE_TOLERANCE:g} %")


def _fmt(x: float | None, spec: str = "g") -> str:
    """A table cell: ``-`` where there is no figure (no run got as far as a result)."""
    return "-" if x is None else format(x, spec)


if __name__ == "__main__":
    sys.exit(main())

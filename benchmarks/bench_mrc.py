# SPDX-License-Identifier: GPL-2.0-only
"""MRC on the multi-plane fabric as a user runs it (root): beside RoCEv2 and UET, and a
plane failing under it.

Everything is whole ``emu`` commands at their defaults on ``namespaces/multi-plane.toml``
(2 planes of 400 Gb/s per host, auto time scale), timed as commands:

* **transports** — ``emu perf write-bw --from h1 --to h3 --transport T -s 1M -n N`` for
  RoCEv2, UET and MRC in the same cluster, one after the other: fabric goodput, wall
  time of the command, resent packets, credibility. The baseline is RoCEv2 in the same
  run (one QP, one path: one plane's rate); MRC sprays one QP over both planes.
* **failover** — the MRC write again (256 KiB messages, a completion each), started at
  a known fabric time (``--start-at``), with ``emu link plane:1 down`` issued a third of
  the way in and ``up`` a third later. From the cluster's event log (the fabric times
  the plane went down and up) and the write's goodput series (fabric time): goodput
  before, the dip, goodput after, the recovery time — from the failure to the end of
  the first interval whose goodput is ≥ 90 % of one plane's rate (the RoCEv2 line of
  the same run) — and, once the plane is back, how long until both planes carry the
  write again (≥ 90 % of the goodput before the failure; its EVs come back by probes).
* **CPU per packet** — the two NIC daemons' CPU time (``/proc/PID/stat``) over the
  transports part's MRC command, per data packet, as ``bench-uet`` reports it.
* **engine** (no root, no cluster: :mod:`engine_cpu`) — the CPU the MRC engines spend per
  data packet at each end, sans-IO, beside UET's engines moving the same data in the
  same run, built as the daemons build them; and a digest of every datagram either
  sent, to tell whether a change kept the behaviour. ``--mib``, ``--evs``, ``--runs``.

``--routing srv6`` runs it all on the SRv6 fabric (``--set routing.mode=srv6``: MRC's
EVs name whole paths in an outer IPv6 header; RoCEv2 and UET ride the same fabric's
ECMP routes). ``--json`` prints one document; ``--quick`` (the test suite's run) moves
less. No thresholds: the figures are what the emulated fabric gave, with their
credibility.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import engine_cpu  # noqa: E402

from emu.cluster import cluster as C  # noqa: E402
from emu.fabric import state  # noqa: E402
from emu.fabric.naming import random_cluster  # noqa: E402

EMU = [sys.executable, "-m", "emu"]
TOPOLOGY = ROOT / "namespaces" / "multi-plane.toml"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def emu(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    p = subprocess.run([*EMU, *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if p.returncode:
        raise RuntimeError(f"emu {' '.join(args)}: exit {p.returncode}: "
                           f"{(p.stderr or p.stdout).strip()[-800:]}")
    return p


def cpu_s(pid: int) -> float:
    """utime + stime of a process, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def nicd_pid(cluster: str, host: str) -> int:
    rec = state.recorded(state.load(cluster) or {}, f"nicd {host}")
    if rec is None:
        raise RuntimeError(f"no emu nicd recorded for {host}")
    return int(rec["pid"])


def write_bw(cluster: str, transport: str, size: str, n: int, *extra: str
             ) -> tuple[dict[str, Any], float]:
    """One whole ``emu perf write-bw`` h1 → h3; its JSON and the command's wall time."""
    t = time.monotonic()
    doc = json.loads(emu("perf", "write-bw", "--from", "h1", "--to", "h3", "--cluster",
                         cluster, "--json", "--transport", transport, "-s", size, "-n",
                         str(n), *extra).stdout)
    return doc, time.monotonic() - t


def summary(doc: dict[str, Any], wall: float) -> dict[str, Any]:
    r = doc["results"][0]
    ov = doc.get("overload") or {}
    return {"gbps": round(r["gbps_average"], 2), "fabric_s": r["seconds"],
            "wall_s": round(wall, 2),
            "tx_packets": ov.get("tx_packets"), "retransmits": ov.get("retransmits"),
            "credible": doc.get("credible"), "passed": doc.get("passed"),
            "overload": ov.get("total"), "overload_causes": ov.get("causes") or {},
            "scale": doc["time"]["scale"]}


def transports(cluster: str, n: int, log: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pids = [nicd_pid(cluster, h) for h in ("h1", "h3")]
    for tr in ("roce", "uet", "mrc"):
        before = sum(cpu_s(p) for p in pids)
        doc, wall = write_bw(cluster, tr, "1M", n, "--report_gbits")
        out[tr] = summary(doc, wall)
        if tr == "mrc":
            pk = out[tr]["tx_packets"] or 0
            used = sum(cpu_s(p) for p in pids) - before
            # wall CPU: at time scale N it includes the daemons' waits for their fabric
            # schedule, so it is emu's cost per packet, not a NIC's
            out[tr]["cpu_us_per_packet"] = round(used / pk * 1e6, 2) if pk else None
            out[tr]["cpu_share"] = round(used / (2 * out[tr]["wall_s"]), 3)
        cpu = out[tr].get("cpu_us_per_packet")
        log(f"  {tr:4s} {out[tr]['gbps']:8.2f} Gb/s  {out[tr]['wall_s']:6.1f} s wall  "
            f"resent {out[tr]['retransmits']} of the {out[tr]['tx_packets']} packets both "
            f"NICs sent"
            + ("  credible" if out[tr]["credible"] else
               f"  NOT CREDIBLE (emulator overload: {out[tr]['overload_causes']})")
            + (f"\n       the two NIC daemons: {cpu} us of CPU per data packet, "
               f"{out[tr]['cpu_share']:.0%} of two CPUs (at time scale {out[tr]['scale']:g}: "
               f"emu's cost, waits for the fabric schedule included)"
               if cpu is not None else ""))
    base = out["roce"]["gbps"]
    for tr in out:
        out[tr]["vs_roce"] = round(out[tr]["gbps"] / base, 3) if base else None
    log(f"  ratio to RoCEv2 (one QP, one plane) in this run: UET {out['uet']['vs_roce']}, "
        f"MRC {out['mrc']['vs_roce']} (over both planes)")
    return out


def plane_event_at(cluster: str, plane: int, action: str, since: float) -> float | None:
    """The fabric time the first link of ``plane`` went ``action`` after ``since``
    (the cluster's event log)."""
    first = None
    try:
        with open(C.event_log(cluster)) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                t = e.get("fabric_t")
                if (e.get("action") == action and f"p{plane}-" in str(e.get("link", ""))
                        and isinstance(t, int | float) and t >= since):
                    first = t if first is None else min(first, t)
    except OSError:
        return None
    return first


def _engine(cluster: str, transport: str) -> dict[str, Any]:
    """h1's engine counters for ``transport`` (``emu nicd stats``)."""
    doc = json.loads(emu("nicd", "stats", f"{cluster}:h1", "--json").stdout)
    return dict(doc["transports"][transport]["engine"])


#: what each transport's failover run adds to ``emu perf`` (RoCEv2: a 1-fabric-ms local ACK
#: timeout, -u 8, instead of perftest's 67 ms — 7.7 minutes of wall time at scale 6900)
FAILOVER_ARGS = {"mrc": (), "uet": (), "roce": ("-u", "8")}


def failover(cluster: str, transport: str, mib: int, plane_gbps: float, plane: int,
             outage: float | None, log: Any) -> dict[str, Any]:
    """One write h1 → h3 of ``mib`` MiB in 256 KiB messages with ``plane`` failing a third
    of the way in and, ``outage`` fabric seconds later, repaired (None: at the end)."""
    from emu.fabricclock import FabricClock

    fc: FabricClock = C.plan_of(cluster).time.clock()
    n = mib * 4                                   # 256 KiB messages
    before_eng = _engine(cluster, transport)      # h1's counters are the NIC's, all runs
    rate = plane_gbps * (2 if transport == "mrc" else 1)
    expect = mib * 8 * (1 << 20) / (rate * 1e9) if rate else 1e-3
    start = fc.now() + 4.0 / fc.scale             # 4 s of wall for the command to set up
    fail_at = start + expect / 3
    p = subprocess.Popen([*EMU, "perf", "write-bw", "--from", "h1", "--to", "h3",
                          "--cluster", cluster, "--json", "--transport", transport, "-s",
                          "256K", "-n", str(n), "-Q", "1", "--start-at", f"{start:.9f}",
                          *FAILOVER_ARGS[transport]],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    t0 = time.monotonic()
    repaired = False
    try:
        time.sleep(max(0.0, fc.wall_at(fail_at) - time.monotonic()))
        emu("link", f"plane:{plane}", "down", "--cluster", cluster)
        if outage is not None:
            time.sleep(max(0.0, fc.wall_at(fail_at + outage) - time.monotonic()))
            emu("link", f"plane:{plane}", "up", "--cluster", cluster)
            repaired = True
        out, err = p.communicate(timeout=3600)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if not repaired:
            emu("link", f"plane:{plane}", "up", "--cluster", cluster)
    wall = time.monotonic() - t0
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
    if doc is None or not doc.get("results"):
        # the transfer itself failed (a RoCEv2 QP whose retries ran out during the
        # outage, say): that is the result
        why = (err.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        log(f"  failover {transport:4s}: plane {plane} down, the write FAILED: {why}")
        return {"passed": False, "error": why, "wall_s": round(wall, 2), "plane": plane,
                "mib": mib}
    r = doc["results"][0]
    # this run's own events: the failure comes after the write's start (an earlier run's
    # failure of the same plane is in the log too)
    down = plane_event_at(cluster, plane, "down", start)
    up = (plane_event_at(cluster, plane, "up", down) if outage is not None and down
          is not None else None)
    began = r.get("started") or start
    series = [(began + pt["t"], pt["gbps"]) for pt in r["series"]]
    res: dict[str, Any] = {**summary(doc, wall), "mib": mib, "plane": plane,
                           "plane_down_fabric_s": None if down is None else down - began,
                           "outage_us": None if up is None or down is None
                           else round((up - down) * 1e6, 2)}
    if down is None or not series:
        res["note"] = "the plane's failure is not in the event log"
        return res
    step = series[1][0] - series[0][0] if len(series) > 1 else 0.0
    before = [g for t, g in series if t <= down]
    after = [(t, g) for t, g in series if t - step > down]
    target = 0.9 * plane_gbps
    rec = next((t for t, g in after if g >= target), None)
    stall = run = 0
    for _, g in after:  # the longest run of intervals with nothing completed
        run = run + 1 if g == 0 else 0
        stall = max(stall, run)
    if up is not None and transport == "mrc":
        # both planes again: the plane's EVs probed back into the rotation, the goodput
        # back at 90 % of what it was before the failure
        pre = [g for t, g in series if t <= down]
        again = 0.9 * sum(pre) / len(pre) if pre else 0.9 * rate
        both = next((t for t, g in series if t - step > up and g >= again), None)
        res["both_planes_again_us"] = None if both is None else round((both - up) * 1e6, 2)
    # the goodput series around the events, fabric µs from the failure (for a plot)
    res["series_us_gbps"] = [(round((t - down) * 1e6, 1), round(g, 1)) for t, g in series]
    res.update({
        "interval_us": round(step * 1e6, 3),
        "gbps_before": round(sum(before) / len(before), 1) if before else None,
        "gbps_dip": round(min((g for _, g in after), default=0.0), 1),
        "gbps_after": round(sum(g for _, g in after[len(after) // 2:])
                            / max(1, len(after[len(after) // 2:])), 1) if after else None,
        "target_gbps": round(target, 1),
        "recovery_us": None if rec is None else round((rec - down) * 1e6, 2),
        "stall_us": round(stall * step * 1e6, 2),
    })
    e = _engine(cluster, transport)
    if transport == "mrc":
        for k in ("retx_plane", "rto", "evs_port_down", "tx_probes", "probe_ok"):
            res[k] = e.get(k, 0) - before_eng.get(k, 0)
    log(f"  failover {transport:4s}: plane {plane} down {res['plane_down_fabric_s'] * 1e6:.1f} "
        f"us in" + (f" for {res['outage_us']} us" if res["outage_us"] is not None else "")
        + f"; {res['gbps_before']} Gb/s before, dip {res['gbps_dip']}, {res['gbps_after']} "
        f"after; longest stall {res['stall_us']} us; >= {target:.0f} Gb/s again "
        f"{res['recovery_us']} us after the failure (series every {res['interval_us']} us)"
        + (f"; resent at once {res['retx_plane']}, timeouts {res['rto']}, EVs assumed bad "
           f"{res['evs_port_down']}, probes answered {res['probe_ok']}"
           + (f"; both planes again {res['both_planes_again_us']} us after the repair"
              if "both_planes_again_us" in res else "")
           if transport == "mrc" else f"; resent {res['retransmits']}"))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small transfers (the test suite)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--part", choices=("all", "engine", "transports", "failover"),
                    default="all")
    ap.add_argument("--mib", type=int, default=None,
                    help="engine part: MiB written (default 64, --quick 4)")
    ap.add_argument("--evs", type=int, default=256, help="engine part: EVs per MRC QP")
    ap.add_argument("--runs", type=int, default=None,
                    help="engine part: rounds of MRC then UET (default 3, --quick 1)")
    ap.add_argument("--routing", choices=("ecmp", "srv6"), default="ecmp",
                    help="the fabric's routing (default ecmp, as the topology file says; srv6: "
                         "MRC's EVs name whole paths)")
    a = ap.parse_args(argv)
    log = (lambda s: print(s, file=sys.stderr)) if a.json else print
    doc: dict[str, Any] = {"topology": "namespaces/multi-plane.toml", "quick": a.quick,
                           "routing": a.routing}
    if a.part in ("all", "engine"):
        doc["engine"] = engine_cpu.run(a.mib or (4 if a.quick else 64), evs=a.evs,
                                       runs=a.runs or (1 if a.quick else 3), log=log)
        if a.part == "engine":
            if a.json:
                print(json.dumps(doc, indent=2))
            return 0
    name = random_cluster("bm")
    n, mib = (16, 32) if a.quick else (128, 256)
    t = time.monotonic()
    try:
        emu("up", str(TOPOLOGY), "--name", name,
            *(("--set", "routing.mode=srv6") if a.routing == "srv6" else ()))
        doc["up_s"] = round(time.monotonic() - t, 2)
        log(f"emu up multi-plane ({a.routing}): {doc['up_s']} s; write-bw h1 -> h3, -s 1M "
            f"-n {n}:")
        plane = None
        if a.part in ("all", "transports"):
            doc["transports"] = transports(name, n, log)
            plane = doc["transports"]["roce"]["gbps"]
        if a.part in ("all", "failover"):
            if plane is None:
                d, w = write_bw(name, "roce", "1M", n)
                plane = summary(d, w)["gbps"]
            # MRC loses a plane and keeps going, and gets it back a third of the write
            # later; then the plane the one-path transports use fails for a while under
            # each of them (repaired after half the time the write takes on one plane:
            # within RoCEv2's 7 retries of 1 ms)
            third = mib * 8 * (1 << 20) / (plane * 1e9) / 3 if plane else None
            doc["failover"] = failover(name, "mrc", mib, plane, 1, third, log)
            if not a.quick:
                expect = mib * 8 * (1 << 20) / (plane * 1e9)
                doc["failover_plane0"] = {
                    tr: failover(name, tr, mib, plane, 0, expect / 2, log)
                    for tr in ("mrc", "roce", "uet")}
    finally:
        if state.load(name) is not None:
            subprocess.run([*EMU, "down", name], capture_output=True, cwd=ROOT)
    if a.json:
        print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

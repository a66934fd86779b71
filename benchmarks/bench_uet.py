# SPDX-License-Identifier: GPL-2.0-only
"""UET goodput through NIC daemons (root): a RUD PDC vs the UDP blaster, sprayed vs pinned.

Part ``pair`` (``namespaces/pair.toml``, h1 — h2, MTU 9000): one UET endpoint
pair, so one RUD PDC, back-to-back WRITEs (``--msg`` MiB, ``--depth``
outstanding) through the endpoint API. Goodput = bytes written / time from
first post to last completion, data checked afterwards. In the same run the
plain-Python UDP blaster of ``bench_roce`` sends datagrams of UET's payload
per packet from h1 to h2; the ratio is UET / blaster.

Part ``spray`` (``namespaces/leaf-spine.toml``, 2 spines, h1 → h4 under the
other leaf): the same WRITE loop twice — with the engine's default entropy
set (a new UDP source port per packet: ECMP spreads one PDC over both
spines) and with ``entropies=[one port]`` (the whole flow on one path) —
and per spine how many packets of the flow each carried (the spines'
receive counters on their links from leaf1). Ratio = sprayed / pinned.

``--json`` prints one document; the text form a table. No thresholds here:
the issue's goals (≥ 1.0× and ≥ 0.9×) are printed beside the numbers.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_roce  # noqa: E402
from bench_roce import (  # noqa: E402
    RECV_CPU,
    SEND_CPU,
    blast,
    cpu_ticks,
    measured,
    overload_line,
    overload_runs,
    pin,
    pipelined_writes,
)

import emu.switch.topology  # noqa: E402,F401 - the shipped leaf-spine's [switch] section
from emu.api import Device  # noqa: E402
from emu.fabric import Fabric, down, linkctl  # noqa: E402
from emu.fabric.naming import random_cluster  # noqa: E402
from emu.fabric.status import interfaces  # noqa: E402
from emu.nic.protocol import call_once, sock_path  # noqa: E402
from emu.proc import stop  # noqa: E402
from emu.topology import load  # noqa: E402
from emu.topology.units import format_rate, parse_rate  # noqa: E402

MiB = 1 << 20
PINNED = 49152  # the one entropy of the pinned run (the first of the engine's default set)


def start_daemons(cluster: str, hosts: dict[str, str], opts: list[str],
                  extra: tuple[str, ...] = ()) -> list[Any]:
    """One ``emu nicd -t uet`` per host on the given address (``extra``: more daemon
    arguments); returns the processes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs: list[Any] = []
    try:
        for h, addr in hosts.items():
            argv = [sys.executable, "-m", "emu.nic.daemon", "--cluster", cluster, "--host", h,
                    "-t", "uet", "--addr", addr, *extra]
            for o in opts:
                argv += ["--engine-opt", o]
            pr = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
            procs.append(pr)
            pin(pr.pid, SEND_CPU if h == "h1" else RECV_CPU)  # as the blaster (bench_roce.pin)
            if not pr.stdout.readline().startswith("ready "):
                raise RuntimeError(f"nicd {h} did not start")
    except BaseException:
        stop_daemons(procs)
        raise
    return procs


def start_worker(cluster: str, hosts: dict[str, str], opts: list[str],
                 extra: tuple[str, ...] = ()) -> list[Any]:
    """One ``emu nicd serve`` process serving every host (``-t uet`` on the given
    address each), pinned to the sender's CPU; returns it as a one-process list."""
    import tempfile

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = {h: ["-t", "uet", "--addr", addr, *extra,
                *(x for o in opts for x in ("--engine-opt", o))] for h, addr in hosts.items()}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"cluster": cluster, "hosts": args}, f)
    try:
        pr = subprocess.Popen([sys.executable, "-m", "emu.nic.worker", f.name],
                              stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        pin(pr.pid, SEND_CPU)
        if not pr.stdout.readline().startswith("ready "):
            stop_daemons([pr])
            raise RuntimeError("the NIC worker did not start")
    finally:
        os.unlink(f.name)
    return [pr]


def stop_daemons(procs: list[Any]) -> None:
    for pr in procs:
        stop(pr, 20)
        pr.stdout.close()
    procs.clear()


def uet_write(cluster: str, src: str, dst: str, total: int, msg: int, depth: int
              ) -> dict[str, Any]:
    """``total`` bytes as ``msg``-byte UET WRITEs ``src`` → ``dst``, ``depth`` in flight;
    goodput and the engine's payload per packet; raises if the data differ."""
    a = Device.open(cluster=cluster, host=src)
    b = Device.open(cluster=cluster, host=dst)
    ba, bb = a.alloc_buffer(msg * depth), b.alloc_buffer(msg * depth)
    try:
        ma, mb = a.reg_mr(ba), b.reg_mr(bb)
        ea, eb = a.endpoint(), b.endpoint()
        ea.connect(eb.getname())
        ba.view[:] = os.urandom(msg * depth)
        bb.view[:] = bytes(msg * depth)  # touch the pages before timing
        n = max(1, total // msg)
        dt = pipelined_writes(
            lambda i, off: ea.write(ma.sge(off, msg), mb.va + off, mb.rkey, context=i,
                                    wait=False),
            lambda: ea.tx_cq.wait(1, timeout=120), n, msg, depth)
        if bytes(bb.view) != bytes(ba.view[:len(bb.view)]):
            raise RuntimeError("data differ in the receiver's memory")
        return {"gbps": n * msg * 8 / dt / 1e9, "seconds": dt,
                "payload": int(ea.getname().get("pmtu", 0))}
    finally:
        for x in (a, b, ba, bb):
            x.close()


def _addr(topo: Any, host: str, fam: int) -> str:
    return str(getattr(topo.links_of(host)[0].end(host), f"ipv{fam}").ip)


def spine_counts(f: Fabric, spines: list[str], from_leaf: str) -> dict[str, int]:
    """Packets each spine has received on its link from ``from_leaf`` so far."""
    return {s: int(interfaces(f.ns(s))[from_leaf]["rx_packets"]) for s in spines}


def _nicd_args(a: argparse.Namespace) -> tuple[str, ...]:
    return () if a.frame_ring else ("--no-frame-ring",)


def bench_pair(a: argparse.Namespace) -> dict[str, Any]:
    topo = bench_roce.bench_topology("pair.toml")
    name = random_cluster(a.cluster_prefix)
    f = Fabric(topo, cluster=name, checksum_offload=True).up()
    procs: list[Any] = []
    try:
        fam = 4 if a.ipv4 else 6
        addr = {h: _addr(topo, h, fam) for h in ("h1", "h2")}
        procs = (start_worker if a.worker else start_daemons)(name, addr, a.engine_opt,
                                                              _nicd_args(a))
        who = ("worker",) if a.worker else ("h1", "h2")
        # the application (this process) off the sending NIC's core: its wake-ups per
        # completion preempted the sending daemon (~9 % of it, py-spy)
        pin(os.getpid(), RECV_CPU)
        uet, blasts, payload = [], [], 0
        cpu = {h: [0, 0] for h in who}
        deltas = []
        for _ in range(a.runs):
            before = [cpu_ticks(pr.pid) for pr in procs]
            r, d = measured(name, lambda: uet_write(name, "h1", "h2", a.total * MiB,
                                                    a.msg * MiB, a.depth))
            deltas.append(d)
            for h, pr, b in zip(who, procs, before, strict=True):
                after = cpu_ticks(pr.pid)
                cpu[h][0] += after[0] - b[0]
                cpu[h][1] += after[1] - b[1]
            uet.append(r["gbps"])
            payload = r["payload"]
            blasts.append(blast(f, addr["h2"], a.blast_seconds, payload + 56))
        stats = {h: call_once(sock_path(name, h), "stats") for h in ("h1", "h2")}
        eng = stats["h1"]["transports"]["uet"]["engine"]
        # CPU per data packet of each daemon while UET ran: where the time goes
        npk = max(1, eng.get("tx_data_packets", 0))
        hz = os.sysconf("SC_CLK_TCK")
        per_pkt = {h: {"user_us": u / hz / npk * 1e6, "kernel_us": k / hz / npk * 1e6}
                   for h, (u, k) in cpu.items()}
        bgbps = [b["gbps"] for b in blasts]
        g, bl = statistics.median(uet), statistics.median(bgbps)
        # the blaster's own CPU per packet: the budget each daemon must fit in to match it
        bcpu = {k: statistics.median(b[k] for b in blasts)
                for k in ("tx_user_us", "tx_kernel_us", "rx_user_us", "rx_kernel_us")}
        return {"family": f"IPv{fam}", "payload": payload, "uet_gbps": uet,
                "nic": "one worker serving h1 and h2" if a.worker else "a daemon per host",
                "blaster_gbps": bgbps, "uet_gbps_median": g, "blaster_gbps_median": bl,
                "ratio": g / bl if bl else None,
                "retransmits": eng.get("tx_retransmits", 0), "goal_ratio": 1.0,
                "overload": overload_runs(deltas),
                "cpu_per_packet": per_pkt, "blaster_cpu_per_packet": bcpu,
                "daemons": {h: {"totals": st.get("totals", {}),
                                "uet": st["transports"]["uet"]} for h, st in stats.items()}}
    finally:
        stop_daemons(procs)
        down(name)


def bench_spray(a: argparse.Namespace) -> dict[str, Any]:
    topo = bench_roce.bench_topology("leaf-spine.toml")
    name = random_cluster(a.cluster_prefix)
    f = Fabric(topo, cluster=name, checksum_offload=True).up()
    spines = sorted(n for n, nd in topo.nodes.items() if nd.role == "spine")
    fam = 4 if a.ipv4 else 6
    addr = {h: _addr(topo, h, fam) for h in ("h1", "h4")}
    out: dict[str, Any] = {"family": f"IPv{fam}", "spines": spines,
                           "spine_rate_bps": a.spine_rate}
    try:
        if a.spine_rate:
            # the fabric, not the daemons' CPU, is the bottleneck, as in a real cluster:
            # each leaf1 → spine link carries at most spine_rate
            for s in spines:
                linkctl.apply_direction(f.ns("leaf1"), s, linkctl.Direction(
                    rate_bps=int(a.spine_rate)))
        for label, opts in (("sprayed", []), ("pinned", [f"uet.entropies=[{PINNED}]"])):
            procs = start_daemons(name, addr, a.engine_opt + opts, _nicd_args(a))
            try:
                runs, spread, deltas = [], {s: 0 for s in spines}, []
                for _ in range(a.runs):
                    c0 = spine_counts(f, spines, "leaf1")
                    r, d = measured(name, lambda: uet_write(name, "h1", "h4", a.total * MiB,
                                                            a.msg * MiB, a.depth))
                    runs.append(r["gbps"])
                    deltas.append(d)
                    c1 = spine_counts(f, spines, "leaf1")
                    for s in spines:
                        spread[s] += c1[s] - c0[s]
                out[label] = {"gbps": runs, "gbps_median": statistics.median(runs),
                              "packets_per_spine": spread, "overload": overload_runs(deltas)}
            finally:
                stop_daemons(procs)
        p = out["pinned"]["gbps_median"]
        out["ratio"] = out["sprayed"]["gbps_median"] / p if p else None
        out["goal_ratio"] = 0.9
        return out
    finally:
        down(name)


#: the busy-hosts part: 8 hosts in 4 leaves, a flow between the two hosts of each leaf
BUSY_PAIRS = (("h1", "h2"), ("h3", "h4"), ("h5", "h6"), ("h7", "h8"))


def _busy_round(name: str, procs: list[Any], a: argparse.Namespace) -> dict[str, float]:
    """The four flows of :data:`BUSY_PAIRS` at once; the NIC processes' CPU and the data
    packets sent while they ran."""
    import threading

    hosts = [h for p in BUSY_PAIRS for h in p]
    sent = lambda: sum(call_once(sock_path(name, s), "stats")["transports"]["uet"]  # noqa: E731
                       ["engine"].get("tx_data_packets", 0) for s, _ in BUSY_PAIRS)
    p0, c0 = sent(), [cpu_ticks(pr.pid) for pr in procs]
    errors: list[BaseException] = []

    def flow(src: str, dst: str) -> None:
        try:
            uet_write(name, src, dst, a.total * MiB, a.msg * MiB, a.depth)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=flow, args=p) for p in BUSY_PAIRS]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"a flow failed: {errors[0]}")
    c1 = [cpu_ticks(pr.pid) for pr in procs]
    npk = max(1, sent() - p0)
    hz = os.sysconf("SC_CLK_TCK")
    return {"hosts": len(hosts), "gbps": len(BUSY_PAIRS) * a.total * MiB * 8 / dt / 1e9,
            "packets": npk,
            "user_us": sum(b[0] - x[0] for x, b in zip(c0, c1, strict=True)) / hz / npk * 1e6,
            "kernel_us": sum(b[1] - x[1] for x, b in zip(c0, c1, strict=True)) / hz / npk * 1e6}


def bench_busy(a: argparse.Namespace) -> dict[str, Any]:
    """Eight busy hosts (four flows at once, one per leaf) served by eight daemons, then
    by one worker, in the same run: the NIC processes' CPU per data packet (issue #36: one
    worker for 8 busy hosts should cost less than 8 daemons). Nothing pinned: the
    scheduler places them, as ``emu up``'s are."""
    topo = load(str(ROOT / "namespaces" / "leaf-spine.toml"),
                ["time.scale=1", "link.mtu=9000", "leaves=4", "hosts_per_leaf=2"]).bare()
    name = random_cluster(a.cluster_prefix)
    Fabric(topo, cluster=name, checksum_offload=True).up()
    fam = 4 if a.ipv4 else 6
    addr = {h: _addr(topo, h, fam) for p in BUSY_PAIRS for h in p}
    out: dict[str, Any] = {"family": f"IPv{fam}", "flows": [f"{s}->{d}" for s, d in BUSY_PAIRS]}
    pinned, bench_roce.PIN = bench_roce.PIN, False
    try:
        for label, start in (("8 daemons", start_daemons), ("1 worker", start_worker)):
            procs = start(name, addr, a.engine_opt, _nicd_args(a))
            n = len(procs)
            try:
                rounds = [_busy_round(name, procs, a) for _ in range(a.runs)]
            finally:
                stop_daemons(procs)
            out[label] = {k: statistics.median(r[k] for r in rounds)
                          for k in ("gbps", "user_us", "kernel_us")}
            out[label]["processes"] = n
        d, w = out["8 daemons"], out["1 worker"]
        out["ratio_user"] = w["user_us"] / d["user_us"] if d["user_us"] else None
        return out
    finally:
        bench_roce.PIN = pinned
        down(name)


def _table(res: dict[str, Any], a: argparse.Namespace) -> None:
    print(f"bench-uet: {a.msg} MiB WRITEs x {a.total} MiB, depth {a.depth}, {a.runs} runs "
          f"(median)")
    if "pair" in res:
        r = res["pair"]
        print(f"\npair (h1 - h2, MTU 9000, {r['family']}), one RUD PDC, "
              f"{r['payload']} B payload per packet; NIC: {r['nic']}")
        print(f"{'':34}{'Gb/s':>10}")
        print(f"{'UET WRITE goodput':34}{r['uet_gbps_median']:>10.2f}   runs: "
              + ", ".join(f"{x:.2f}" for x in r["uet_gbps"]))
        print(f"{'Python UDP blaster':34}{r['blaster_gbps_median']:>10.2f}   runs: "
              + ", ".join(f"{x:.2f}" for x in r["blaster_gbps"]))
        ratio = r["ratio"]
        print(f"{'ratio':34}{ratio if ratio is not None else float('nan'):>10.2f}x  "
              f"(goal >= {r['goal_ratio']}x); {r['retransmits']} retransmitted packets")
        c = r["cpu_per_packet"]
        if "worker" in c:
            print(f"CPU per data packet of {r['payload']} B (µs, user + kernel): the worker "
                  f"(both ends) {c['worker']['user_us']:.1f} + {c['worker']['kernel_us']:.1f}")
        else:
            print(f"CPU per data packet of {r['payload']} B (µs, user + kernel): sender h1 "
                  f"{c['h1']['user_us']:.1f} + {c['h1']['kernel_us']:.1f}, receiver h2 "
                  f"{c['h2']['user_us']:.1f} + {c['h2']['kernel_us']:.1f}")
        b = r["blaster_cpu_per_packet"]
        print(f"{'':23}the blaster's (per datagram): sender {b['tx_user_us']:.1f} + "
              f"{b['tx_kernel_us']:.1f}, receiver {b['rx_user_us']:.1f} + "
              f"{b['rx_kernel_us']:.1f}")
        print(overload_line(r["overload"]))
    if "busy" in res:
        r = res["busy"]
        print(f"\n8 busy hosts (leaf-spine, 4 leaves x 2 hosts, {r['family']}): "
              f"{', '.join(r['flows'])} at once")
        print(f"{'NIC':14}{'processes':>10}{'Gb/s (all)':>12}{'user µs/pkt':>13}"
              f"{'kernel µs/pkt':>15}")
        for label in ("8 daemons", "1 worker"):
            x = r[label]
            print(f"{label:14}{x['processes']:>10}{x['gbps']:>12.2f}{x['user_us']:>13.1f}"
                  f"{x['kernel_us']:>15.1f}")
        ratio = r["ratio_user"]
        print(f"user CPU per data packet, one worker / eight daemons: "
              f"{ratio if ratio is not None else float('nan'):.2f} (goal < 1)")
    if "spray" in res:
        r = res["spray"]
        sp = r["spines"]
        print(f"\nleaf-spine (2 spines, h1 -> h4, {r['family']}, leaf1 -> spine links at "
              f"{format_rate(r['spine_rate_bps'])}): one PDC sprayed vs pinned to entropy "
              f"{PINNED}")
        print(f"{'':20}{'Gb/s':>10}" + "".join(f"{s + ' pkts':>16}" for s in sp))
        for label in ("sprayed", "pinned"):
            x = r[label]
            print(f"{label:20}{x['gbps_median']:>10.2f}"
                  + "".join(f"{x['packets_per_spine'][s]:>16}" for s in sp))
        ratio = r["ratio"]
        print(f"{'ratio sprayed/pinned':20}{ratio if ratio is not None else float('nan'):>10.2f}x"
              f"  (goal >= {r['goal_ratio']}x)")
        for label in ("sprayed", "pinned"):
            print(f"{label}: {overload_line(r[label]['overload'])}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("pair", "spray", "busy", "all"), default="all",
                   help="busy: eight hosts served by eight daemons, then by one worker "
                        "(all runs the others only)")
    p.add_argument("--total", type=int, default=512,
                   help="MiB written per run (default 512: ~1 s at the pair's rate, nearer the "
                        "blaster's 2 s; runs of 128 MiB swung by ±15 %%)")
    p.add_argument("--msg", type=int, default=1, help="MiB per WRITE (default 1)")
    p.add_argument("--depth", type=int, default=8, help="outstanding WRITEs (default 8)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--blast-seconds", type=float, default=2.0)
    p.add_argument("--engine-opt", action="append", default=[], metavar="uet.KEY=JSON",
                   help="passed to both daemons (emu nicd --engine-opt)")
    p.add_argument("--spine-rate", type=parse_rate, default=parse_rate("1gbit"),
                   help="rate of each leaf1 → spine link in the spray part, so the fabric is "
                        "the bottleneck (default 1gbit; 'unlimited' to compare CPU costs only)")
    p.add_argument("--no-frame-ring", dest="frame_ring", action="store_false",
                   help="daemons send sprayed packets by socket, one sendmsg each, instead "
                        "of through their packet TX ring (emu.nic.frames)")
    p.add_argument("--ipv4", action="store_true", help="IPv4 (no GSO) instead of IPv6")
    p.add_argument("--worker", action="store_true",
                   help="pair: one NIC worker process serves both hosts (emu nicd serve, "
                        "what emu up starts per core) instead of a daemon per host; its CPU "
                        "per packet is both ends'")
    p.add_argument("--no-pin", action="store_true",
                   help="let the scheduler place the processes (default: sender side on "
                        "CPU 0, receiver side on CPU 1, for every measurement)")
    p.add_argument("--cluster-prefix", default="b", metavar="PREFIX",
                   help="start of the temporary cluster's name (default b), so runs on a "
                        "shared machine are told apart")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run (the test suite's): --total 1 --msg 1 --depth 1 --runs 1 "
                        "--blast-seconds 0.2; it measures start-up, not goodput")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.quick:  # the same code path with tiny sizes, so the benchmark cannot rot unnoticed
        a.total, a.msg, a.depth, a.runs, a.blast_seconds = (1, 1, 1, 1, 0.2)
    bench_roce.PIN = not a.no_pin
    if os.geteuid() != 0:
        print("bench-uet needs root (namespaces)", file=sys.stderr)
        return 2
    res: dict[str, Any] = {"msg_bytes": a.msg * MiB, "total_bytes": a.total * MiB,
                           "depth": a.depth, "runs": a.runs}
    if a.part in ("pair", "all"):
        res["pair"] = bench_pair(a)
    if a.part in ("spray", "all"):
        res["spray"] = bench_spray(a)
    if a.part == "busy":
        res["busy"] = bench_busy(a)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        _table(res, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: GPL-2.0-only
"""RoCEv2 goodput through two NIC daemons vs a plain-Python UDP blaster, same run (root).

``namespaces/pair.toml`` (h1 — h2, MTU 9000), one ``emu nicd`` per host, one
QP, back-to-back 1 MiB RDMA WRITEs (``--depth`` outstanding), path MTU 4096.
Goodput = bytes written / time from first post to last completion. The
blaster is a ``sendto`` loop of 4096-byte UDP payloads (the RoCE payload per
packet) from h1 to h2 while a ``recv_into`` loop in h2 counts the bytes that
arrive; its goodput is received bytes / time. Both run over IPv6 by default:
the daemons GSO over IPv6 (IPv4 GSO numbers IP IDs per segment, which breaks
the ICRC, so IPv4 sends one datagram per ``sendto``); ``--ipv4`` compares
over IPv4. Also printed: each daemon's start time (process start → ready,
interpreter and imports included) and its idle RSS.
"""

from __future__ import annotations

import argparse
import contextlib
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

from emu.api import Device  # noqa: E402
from emu.credible import overload as ovl  # noqa: E402
from emu.fabric import Fabric, down  # noqa: E402
from emu.fabric.naming import random_cluster  # noqa: E402
from emu.nic.protocol import call_once, sock_path  # noqa: E402
from emu.proc import stop  # noqa: E402
from emu.topology import load  # noqa: E402

MiB = 1 << 20

_BLAST_RX = r"""
import resource, socket, sys, time
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)
s.bind((sys.argv[1], 9999)); s.settimeout(1.0)
print("ready", flush=True)
buf = bytearray(65536); n = pkts = 0; t0 = t1 = None
while True:
    try:
        k = s.recv_into(buf)
    except TimeoutError:
        if t0 is not None:
            break
        continue
    t1 = time.monotonic()
    pkts += 1
    if t0 is None:
        t0 = t1
    else:
        n += k
r = resource.getrusage(resource.RUSAGE_SELF)
print(n, t1 - t0 if t0 else 0.0, pkts, r.ru_utime, r.ru_stime, flush=True)
"""

_BLAST_TX = r"""
import resource, socket, sys, time
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 32, 4 << 20)
payload = bytes(int(sys.argv[3])); dst = (sys.argv[1], 9999)
end = time.monotonic() + float(sys.argv[2])
sent = 0
while time.monotonic() < end:
    for _ in range(64):
        try:
            s.sendto(payload, dst); sent += 1
        except BlockingIOError:
            pass
r = resource.getrusage(resource.RUSAGE_SELF)
print(sent, r.ru_utime, r.ru_stime, flush=True)
"""


def bench_topology(name: str) -> Any:
    """A shipped topology (``namespaces/NAME``) as these benchmarks run it: its shape, in
    real time, jumbo links with no rate or delay of their own and no ``[latency]`` — they
    measure what emu's daemons cost per packet on this machine, not a fabric (the
    benchmarks that take the shipped fabric as a user gets it are bench-credible's)."""
    return load(str(ROOT / "namespaces" / name), ["time.scale=1", "link.mtu=9000"]).bare()


def _in_ns(ns: str, argv: list[str]) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{ns}", "--", *argv]


#: CPU for the sending side's process and for the receiving side's (pin() below)
SEND_CPU, RECV_CPU = 0, 1


def pin(pid: int, cpu: int) -> None:
    """Keep ``pid`` on ``cpu`` when the machine has it.

    Why: on two cores the scheduler now and then put both daemons (or both
    blaster loops) on one core for a while, and a run's goodput swung between
    ~4.3 and ~5.9 Gb/s. Both measurements pin the same way — the sending side on
    one core, the receiving side on the other — so the ratio compares like with
    like (``--no-pin`` turns it off)."""
    if PIN and cpu < (os.cpu_count() or 1):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, {cpu})


PIN = True


def blaster(f: Fabric, dst: str, seconds: float, size: int) -> float:
    """Gb/s received by a Python recv loop in h2 from a Python sendto loop in h1."""
    return blast(f, dst, seconds, size)["gbps"]


def blast(f: Fabric, dst: str, seconds: float, size: int) -> dict[str, float]:
    """:func:`blaster`'s run with each side's CPU time per packet (µs, user and kernel:
    ``tx_user_us``/``tx_kernel_us`` per packet sent, ``rx_…`` per packet received) — the
    budget a NIC daemon's side must fit in to keep up."""
    rx = subprocess.Popen(_in_ns(f.ns("h2"), [sys.executable, "-c", _BLAST_RX, dst]),
                          stdout=subprocess.PIPE, text=True)
    pin(rx.pid, RECV_CPU)
    try:
        assert rx.stdout.readline().strip() == "ready"
        tx = subprocess.Popen(_in_ns(f.ns("h1"), [sys.executable, "-c", _BLAST_TX, dst,
                                                  str(seconds), str(size)]),
                              stdout=subprocess.PIPE, text=True)
        pin(tx.pid, SEND_CPU)
        out, _ = tx.communicate(timeout=seconds + 60)
        if tx.returncode != 0:
            raise RuntimeError("the UDP blaster's sender failed")
        sent, tu, ts = out.split()
        n, dt, pkts, ru, rs = rx.stdout.readline().split()
        rx.wait(10)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
        rx.stdout.close()
    ns, nr = max(1, int(sent)), max(1, int(pkts))
    return {"gbps": int(n) * 8 / float(dt) / 1e9 if float(dt) > 0 else 0.0,
            "tx_user_us": float(tu) / ns * 1e6, "tx_kernel_us": float(ts) / ns * 1e6,
            "rx_user_us": float(ru) / nr * 1e6, "rx_kernel_us": float(rs) / nr * 1e6}


def pipelined_writes(post: Any, wait: Any, n: int, msg: int, depth: int) -> float:
    """``n`` WRITEs of ``msg`` bytes, ``depth`` outstanding, cycling through ``depth``
    slots of the buffers: ``post(i, offset)`` posts one, ``wait()`` returns the next
    completions. Seconds from the first post to the last completion; raises on an
    error completion or none within the wait's timeout."""
    t0 = time.monotonic()
    posted = done = 0
    while done < n:
        while posted < n and posted - done < depth:
            post(posted, (posted % depth) * msg)
            posted += 1
        wcs = wait()
        if not wcs or not all(w.ok for w in wcs):
            raise RuntimeError(f"write failed: {wcs or 'no completion in time'}")
        done += len(wcs)
    return time.monotonic() - t0


def cpu_ticks(pid: int) -> tuple[int, int]:
    """(user, kernel) CPU time of a process so far, in clock ticks (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


#: the causes a top-speed benchmark expects: nothing paces the daemons below their CPU's
#: speed, so they run flat out (cpu_bound), their pacers and ports fall behind a line rate
#: they cannot reach (pacer_late, tx_late, ack_late), and on a small machine they wait
#: for a CPU the other processes hold (cpu_wait) — the daemons' speed, what these
#: benchmarks measure. The other causes lose packets or fire timers the emulated NIC
#: would not (socket and backlog drops, rto_held): retransmissions in the figures.
EXPECTED = ("cpu_bound", "cpu_wait", "pacer_late", "tx_late", "ack_late")


def measured(cluster: str, run: Any) -> tuple[Any, dict[str, Any]]:
    """``run()``'s result and the cluster's emulator overload while it ran
    (:func:`emu.credible.overload.delta`: every daemon's counters before and after)."""
    before = ovl.snapshot(cluster)
    out = run()
    return out, ovl.delta(before, ovl.snapshot(cluster))


def overload_runs(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """Per run, the overload causes other than :data:`EXPECTED` and the retransmissions;
    ``clean``: whether every run's figures are the protocol's alone."""
    runs = [{"causes": {k: v for k, v in d["causes"].items() if k not in EXPECTED},
             "expected": {k: v for k, v in d["causes"].items() if k in EXPECTED},
             "retransmits": d["retransmits"], "tx_packets": d["tx_packets"],
             "unreachable": d["unreachable"]} for d in deltas]
    return {"runs": runs, "clean": not any(r["causes"] or r["unreachable"] for r in runs)}


def overload_line(o: dict[str, Any]) -> str:
    """The lines a person reads after the table: which runs the emulator's own losses
    touched (a retransmission a late daemon caused is not the protocol's), and the
    expected signs of daemons running flat out."""
    def causes(c: dict[str, Any]) -> str:
        return ", ".join(f"{k} {v:g}" for k, v in sorted(c.items()))

    bad = [f"run {i + 1}: {causes(r['causes'])}"
           + (f" ({r['retransmits']} retransmitted)" if r["retransmits"] else "")
           for i, r in enumerate(o["runs"]) if r["causes"] or r["unreachable"]]
    flat: dict[str, float] = {}
    for r in o["runs"]:
        for k, v in r["expected"].items():
            flat[k] = flat.get(k, 0) + v
    tail = (f"\n  daemons ran flat out, as this benchmark means them to: {causes(flat)} "
            "in all runs" if flat else "")
    if not bad:
        return "emulator losses: none (every retransmission is the protocol's)" + tail
    return ("emulator losses (NOT the protocol's: these runs' goodput and retransmissions "
            "include them): " + "; ".join(bad) + tail)


def roce(cluster: str, v6: bool, total: int, msg: int, depth: int) -> dict:
    a = Device.open(cluster=cluster, host="h1")
    b = Device.open(cluster=cluster, host="h2")
    ba, bb = a.alloc_buffer(msg * depth), b.alloc_buffer(msg * depth)
    try:
        ma, mb = a.reg_mr(ba), b.reg_mr(bb)
        ca, cb = a.create_cq(), b.create_cq()
        qa, qb = a.create_qp(ca), b.create_qp(cb)
        qa.connect(qb.local_info())
        qb.connect(qa.local_info())
        ba.view[:] = os.urandom(msg * depth)
        bb.view[:] = bytes(msg * depth)  # touch the pages before timing
        dt = pipelined_writes(
            lambda i, off: qa.post_write(ma.sge(off, msg), mb.va + off, mb.rkey, wr_id=i,
                                         wait=False),
            lambda: ca.wait(1, timeout=120), total // msg, msg, depth)
        if bytes(bb.view) != bytes(ba.view):
            raise RuntimeError("data differs")
        return {"gbps": total * 8 / dt / 1e9, "seconds": dt, "info": qa.info}
    finally:
        for x in (a, b, ba, bb):
            x.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--total", type=int, default=256, help="MiB written per run (default 256)")
    p.add_argument("--msg", type=int, default=1, help="MiB per WRITE (default 1)")
    p.add_argument("--depth", type=int, default=8, help="outstanding WRITEs (default 8)")
    p.add_argument("--runs", type=int, default=5,
                   help="measurements of each kind, alternating; the medians are compared "
                        "(default 5: single runs on a small VM have outliers both ways)")
    p.add_argument("--blast-seconds", type=float, default=2.0)
    p.add_argument("--line-rate", type=float, default=10e9,
                   help="engine line rate, bits/s (the pacer's ceiling; default 10e9)")
    p.add_argument("--ipv4", action="store_true", help="IPv4 (no GSO) instead of IPv6")
    p.add_argument("--no-pin", action="store_true",
                   help="let the scheduler place the processes (default: sender side on "
                        "CPU 0, receiver side on CPU 1, for both measurements)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run (the test suite's): --total 4 --msg 1 --depth 2 --runs 1 "
                        "--blast-seconds 0.2; it measures start-up, not goodput")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.quick:  # the same code path with tiny sizes, so the benchmark cannot rot unnoticed
        a.total, a.msg, a.depth, a.runs, a.blast_seconds = (4, 1, 2, 1, 0.2)
    global PIN
    PIN = not a.no_pin
    if os.geteuid() != 0:
        print("bench-roce needs root (namespaces)", file=sys.stderr)
        return 2
    topo = bench_topology("pair.toml")
    name = random_cluster("b")
    f = Fabric(topo, cluster=name, checksum_offload=True).up()
    procs: list[subprocess.Popen] = []
    res: dict = {}
    try:
        fam = 4 if a.ipv4 else 6
        addr = {h: str(getattr(topo.links_of(h)[0].end(h), f"ipv{fam}").ip) for h in ("h1", "h2")}
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        ready = {}
        for h in ("h1", "h2"):
            pr = subprocess.Popen([sys.executable, "-m", "emu.nic.daemon", "--cluster", name,
                                   "--host", h, "--addr", addr[h], "--engine-opt",
                                   f"roce.line_rate={a.line_rate:g}"],
                                  stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
            procs.append(pr)
            pin(pr.pid, SEND_CPU if h == "h1" else RECV_CPU)
            line = pr.stdout.readline()
            if not line.startswith("ready "):
                raise RuntimeError(f"nicd {h} did not start")
            ready[h] = json.loads(line[6:])["ready_after_s"]
        time.sleep(0.3)
        rss = {h: call_once(sock_path(name, h), "stats")["rss_kib"] / 1024 for h in ready}
        gput, blast, deltas = [], [], []
        cpu = {h: [0, 0] for h in ("h1", "h2")}
        for _ in range(a.runs):
            before = [cpu_ticks(pr.pid) for pr in procs]
            r, d = measured(name, lambda: roce(name, not a.ipv4, a.total * MiB, a.msg * MiB,
                                               a.depth))
            for h, pr, b in zip(("h1", "h2"), procs, before, strict=True):
                after = cpu_ticks(pr.pid)
                cpu[h][0] += after[0] - b[0]
                cpu[h][1] += after[1] - b[1]
            gput.append(r["gbps"])
            deltas.append(d)
            blast.append(blaster(f, addr["h2"], a.blast_seconds, 4096))
        s1 = call_once(sock_path(name, "h1"), "stats")
        eng = s1["transports"]["roce"]["engine"]
        g, bl = statistics.median(gput), statistics.median(blast)
        # CPU per data packet of each daemon while RoCEv2 ran (h1 sends only the WRITEs)
        npk = max(1, eng.get("tx_packets", 0))
        hz = os.sysconf("SC_CLK_TCK")
        per_pkt = {h: {"user_us": u / hz / npk * 1e6, "kernel_us": k / hz / npk * 1e6}
                   for h, (u, k) in cpu.items()}
        res = {"family": f"IPv{fam}", "msg_bytes": a.msg * MiB, "pmtu": 4096,
               "link_mtu": 9000, "line_rate": a.line_rate, "runs": a.runs,
               "roce_gbps": gput, "blaster_gbps": blast, "roce_gbps_median": g,
               "blaster_gbps_median": bl, "ratio": g / bl if bl else None,
               "start_s": ready, "idle_rss_mib": rss,
               "tx_gso_sends": s1["totals"].get("tx_gso_sends", 0),
               "retransmits": eng.get("tx_retransmits", 0),
               "overload": overload_runs(deltas), "cpu_per_packet": per_pkt,
               "goals": {"ratio": 1.0, "stretch": 3.0, "start_s": 0.5, "rss_mib": 40}}
    finally:
        for pr in procs:
            stop(pr, 20)
            pr.stdout.close()
        down(name)
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"bench-roce: pair, one QP, {a.msg} MiB WRITEs x {a.total} MiB, depth {a.depth}, "
          f"PMTU 4096 / link MTU 9000, {res['family']}, {a.runs} runs (median)")
    print(f"{'':28}{'Gb/s':>10}")
    print(f"{'RoCE WRITE goodput':28}{res['roce_gbps_median']:>10.2f}   runs: "
          + ", ".join(f"{x:.2f}" for x in gput))
    print(f"{'Python UDP blaster (4 KiB)':28}{res['blaster_gbps_median']:>10.2f}   runs: "
          + ", ".join(f"{x:.2f}" for x in blast))
    print(f"{'ratio':28}{res['ratio']:>10.2f}x  (goal >= 1.0x, stretch >= 3x)")
    for h in ("h1", "h2"):
        print(f"nicd {h}: start {ready[h]:.2f} s (goal <= 0.5), idle RSS {rss[h]:.1f} MiB "
              f"(goal <= 40)")
    print(f"sender: {res['tx_gso_sends']} GSO sends, {res['retransmits']} retransmitted packets")
    c = res["cpu_per_packet"]
    print(f"CPU per data packet of 4096 B (µs, user + kernel): sender h1 "
          f"{c['h1']['user_us']:.1f} + {c['h1']['kernel_us']:.1f}, receiver h2 "
          f"{c['h2']['user_us']:.1f} + {c['h2']['kernel_us']:.1f}")
    print(overload_line(res["overload"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: GPL-2.0-only
"""Packets/s through one switch namespace: kernel-only forwarding vs each switch datapath.

``python -m emu.switch.bench [--quick] [--seconds 3] [--size 4096] [--repeat 3]``
(root; ``scripts/bench-switch``). Builds ``h1 — sw — h2`` (MTU 9000, veth
checksum offload on, as for any throughput run), then in the same run, alternating:

* ``forward``: the switch forwards with no rules (kernel-only forwarding, the
  baseline every ratio is against);
* ``kernel``: the switch daemon with ``datapath = "kernel"`` — tbf and the tc BPF
  virtual queue (:mod:`emu.switch.kernel`) on every port at 100 Gbit/s;
* ``kernel-trim``: the same with every class trimming (threshold 64 KB) beside its ECN
  marking: what the program's trimming costs every packet it looks at (at 100 Gbit/s
  the queue stays short, so this is the look-up, not the cut), and the htb under tbf
  a trimming port gets;
* ``user``: the switch daemon with ``datapath = "user"`` — NFQUEUE rules, every
  packet through the Python queue model (:mod:`emu.switch.queue`) on a 100 Gbit/s
  port, so the full path (receive, classify, RED, serialize, timer, verdict) runs
  without throttling;

each with two sender modes: ``gso`` (UDP GSO, 15 × ``size`` per send; the user
path queues the super-packet whole thanks to ``NFQA_CFG_F_GSO``) and ``plain`` (one
``sendto`` per packet). Sender and receiver are separate processes (UDP GRO on
receive); the figure is received ``size``-byte datagrams per second between the
first and last arrival (this machine's wall clock: the bench measures the machine,
at time scale 1); the median of ``--repeat`` runs is printed with each datapath's
ratio to kernel-only forwarding (goal for the user path ≥ 0.5). Each daemon's
counters say how many packets its datapath saw, so a datapath that was bypassed
cannot pass for a fast one. ``--quick``: one short run of each (the test suite's
smoke run: it checks that the bench works, not the numbers). ``--json`` prints the
raw numbers.
"""

from __future__ import annotations

import argparse
import ipaddress as ip
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from emu.fabric import Fabric, netns
from emu.fabric.naming import random_cluster
from emu.fabricclock import wall
from emu.proc import stop
from emu.switch import kernel
from emu.topology.model import Endpoint, Link, Node, Topology

UDP_SEGMENT = 103
UDP_GRO = 104
PORT = 4791
#: what is measured: no daemon, then each datapath of the switch daemon
DATAPATHS = ("forward", "kernel", "kernel-trim", "user")
SENDERS = ("gso", "plain")
GOAL_USER = 0.5
#: the kernel path with marking and trimming on, against kernel-only forwarding (#36)
GOAL_TRIM = 0.9


def topology() -> Topology:
    """h1 — sw — h2, each host in its own /24 behind the switch."""
    t = Topology(name="bench-switch", source="<emu.switch.bench>")
    t.nodes = {"sw": Node("sw", "switch", "leaf", loopback4=ip.ip_address("10.255.0.1"),
                          loopback6=ip.ip_address("fc00:0:1::")),
               "h1": Node("h1", "host", "host"), "h2": Node("h2", "host", "host")}
    for i, h in ((1, "h1"), (2, "h2")):
        t.links.append(Link(f"{h}-sw",
                            Endpoint(h, "eth0", ip.ip_interface(f"10.64.{i}.2/24"),
                                     ip.ip_interface(f"fd00:1:{i}::2/64")),
                            Endpoint("sw", h, ip.ip_interface(f"10.64.{i}.1/24"),
                                     ip.ip_interface(f"fd00:1:{i}::1/64"))))
    return t


def _send(ns: str, dst: str, seconds: float, size: int, gso: bool) -> None:
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 2)        # ECT(0), DSCP 0
    s.connect((dst, PORT))
    payload = bytes([0x0A, 0, 0xFF, 0xFF, 0, 0, 0, 5, 0, 0, 0, 1]) + bytes(size - 12)
    if gso:
        s.setsockopt(socket.SOL_UDP, UDP_SEGMENT, size)
        payload = payload * 15
    end = wall() + seconds
    n = 0
    while True:
        for _ in range(64):
            try:
                s.send(payload)
            except (BlockingIOError, ConnectionRefusedError):
                pass
        n += 64
        if wall() >= end:
            break
    s.close()


def _recv(ns: str, addr: str, seconds: float, size: int) -> None:
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)
    s.setsockopt(socket.SOL_UDP, UDP_GRO, 1)
    s.bind((addr, PORT))
    s.settimeout(0.5)
    print("listening", flush=True)
    buf = bytearray(65536)
    total = 0
    first = last = None
    deadline = wall() + seconds + 5
    while wall() < deadline:
        try:
            n = s.recv_into(buf)
        except TimeoutError:
            if first is not None:
                break
            continue
        now = wall()
        if first is None:
            first = now
        last = now
        total += max(1, n // size)
    pps = total / (last - first) if first is not None and last > first else 0.0
    print(json.dumps({"packets": total, "pps": pps}), flush=True)


def _one(f: Fabric, seconds: float, size: int, gso: bool) -> tuple[float, int]:
    py = [sys.executable, "-m", "emu.switch.bench"]
    rx = subprocess.Popen([*py, "--role", "recv", "--ns", f.ns("h2"), "--addr", "10.64.2.2",
                           "--seconds", str(seconds), "--size", str(size)],
                          stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None
    rx.stdout.readline()
    tx = subprocess.run([*py, "--role", "send", "--ns", f.ns("h1"), "--addr", "10.64.2.2",
                         "--seconds", str(seconds), "--size", str(size)]
                        + (["--gso"] if gso else []), check=True)
    del tx
    out = json.loads(rx.stdout.readline())
    rx.wait(10)
    return float(out["pps"]), int(out["packets"])


def _daemon(f: Fabric, state: Path, datapath: str, copy_range: int) -> subprocess.Popen[str]:
    """The switch daemon on ``sw`` with ``datapath`` on every port at 100 Gbit/s; waits
    for its ``ready datapath=…`` line (RuntimeError with its error output if it does not
    come up on that datapath)."""
    state.mkdir(parents=True, exist_ok=True)
    cfg = state / "switch.json"
    port: dict[str, Any] = {"rate": "100gbit", "depth": "64MB"}
    if datapath == "kernel-trim":
        port["default_class"] = {"trim": True, "trim_threshold": "64KB"}
    cfg.write_text(json.dumps({"ports": {"*": port}, "copy_range": copy_range,
                               "fail_open": False, "datapath": datapath.split("-")[0]}))
    err = state / "daemon.err"
    with open(err, "w") as ef:
        p = subprocess.Popen([sys.executable, "-m", "emu.switch.daemon", "--netns", f.ns("sw"),
                              "--state-dir", str(state / "state"), "--config", str(cfg)],
                             stdout=subprocess.PIPE, stderr=ef, text=True)
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    if line != f"ready datapath={datapath.split('-')[0]}":
        stop(p, 30)
        why = err.read_text().strip().splitlines()[-1:] or [line or "no output"]
        raise RuntimeError(f"switch daemon did not start on the {datapath} datapath: {why[0]}")
    return p


def _through(state: Path, datapath: str) -> int:
    """How many packets the daemon's datapath took (its final counters): the user path's
    NFQUEUE packets, the kernel path's packets its BPF program saw."""
    c = json.loads((state / "state" / "counters.json").read_text())
    if datapath == "user":
        return int(c["switch"]["received"])
    # (kernel, kernel-trim: every port's program)
    return int(sum(p.get("seen", 0) for p in c["ports"].values()))


def run(seconds: float, size: int, repeat: int, copy_range: int) -> dict[str, Any]:
    """Every datapath × sender mode, ``repeat`` times, alternating in one fabric."""
    paths = list(DATAPATHS)
    res: dict[str, Any] = {"size": size, "seconds": seconds, "repeat": repeat,
                           "copy_range": copy_range, "kernel_unavailable": kernel.available(),
                           "pps": {m: {d: [] for d in paths} for m in SENDERS},
                           "through": {m: {d: [] for d in paths[1:]} for m in SENDERS}}
    if res["kernel_unavailable"]:
        paths.remove("kernel")
        paths.remove("kernel-trim")
    with tempfile.TemporaryDirectory() as tmp, \
            Fabric(topology(), cluster=random_cluster("bsw"), checksum_offload=True) as f:
        n = 0
        for _ in range(repeat):
            for mode in SENDERS:
                for dp in paths:
                    if dp == "forward":
                        res["pps"][mode][dp].append(_one(f, seconds, size, mode == "gso")[0])
                        continue
                    n += 1
                    state = Path(tmp) / f"{dp}-{n}"
                    d = _daemon(f, state, dp, copy_range)
                    try:
                        pps = _one(f, seconds, size, mode == "gso")[0]
                    finally:
                        if stop(d, 30) != 0:
                            raise RuntimeError(f"the {dp} switch daemon did not exit cleanly")
                    res["pps"][mode][dp].append(pps)
                    res["through"][mode][dp].append(_through(state, dp))
    res["median"] = {m: {d: statistics.median(v) for d, v in r.items() if v}
                     for m, r in res["pps"].items()}
    res["ratio"] = {m: {d: (v / r["forward"] if r.get("forward") else 0.0)
                        for d, v in r.items() if d != "forward"}
                    for m, r in res["median"].items()}
    return res


def table(res: dict[str, Any]) -> str:
    """The medians, each datapath's ratio to kernel-only forwarding, for people."""
    out = [f"packets/s through one switch, {res['size']}-byte UDP datagrams, median of "
           f"{res['repeat']} × {res['seconds']:g} s (wall clock: the machine's cost), "
           f"copy_range {res['copy_range']}",
           f"{'sender':8} {'kernel-only':>12} {'kernel path':>12} {'ratio':>7} "
           f"{'+ trimming':>12} {'ratio':>7} "
           f"{'user path':>12} {'ratio':>7}  goal user ≥{GOAL_USER}×, kernel+trim ≥{GOAL_TRIM}×"]
    for mode in SENDERS:
        med, ratio = res["median"][mode], res["ratio"][mode]
        k = "".join(f"{med[d]:12.0f} {ratio[d]:6.2f}× " if d in med else f"{'-':>12} {'-':>7} "
                    for d in ("kernel", "kernel-trim"))
        ok = "✓" if ratio.get("user", 0) >= GOAL_USER else "✕"
        ok_t = "" if "kernel-trim" not in ratio else \
            (" ✓" if ratio["kernel-trim"] >= GOAL_TRIM else " ✕")
        out.append(f"{mode:8} {med['forward']:12.0f} {k}{med['user']:12.0f} "
                   f"{ratio['user']:6.2f}×  {ok}{ok_t}")
    if res["kernel_unavailable"]:
        out.append(f"kernel datapath not measured: {res['kernel_unavailable']}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one short run of each (--seconds 0.5 --repeat 1): does the bench work")
    ap.add_argument("--seconds", type=float, default=None, help="per run (default 3)")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=None, help="runs of each (default 3)")
    ap.add_argument("--copy-range", type=int, default=256,
                    help="bytes copied to user space per packet (65535: whole packet)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--role", choices=("send", "recv"), help=argparse.SUPPRESS)
    ap.add_argument("--ns", help=argparse.SUPPRESS)
    ap.add_argument("--addr", help=argparse.SUPPRESS)
    ap.add_argument("--gso", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    seconds = a.seconds if a.seconds is not None else (0.5 if a.quick else 3.0)
    repeat = a.repeat if a.repeat is not None else (1 if a.quick else 3)
    if a.role == "send":
        _send(a.ns, a.addr, seconds, a.size, a.gso)
        return 0
    if a.role == "recv":
        _recv(a.ns, a.addr, seconds, a.size)
        return 0
    if os.geteuid() != 0:
        print("bench-switch needs root (namespaces)", file=sys.stderr)
        return 1
    try:
        res = run(seconds, a.size, repeat, a.copy_range)
    except RuntimeError as e:
        print(f"bench-switch: {e}", file=sys.stderr)
        return 1
    print(json.dumps(res, indent=1) if a.json else table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

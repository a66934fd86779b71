# SPDX-License-Identifier: GPL-2.0-only
"""Packets/s through one switch namespace: kernel-only forwarding vs the switch pipeline.

``python -m emu.switch.bench [--seconds 3] [--size 4096] [--repeat 3]`` (root;
``scripts/bench-switch``). Builds ``h1 — sw — h2`` (MTU 9000, veth checksum
offload on, as for any throughput run), then in the same run, alternating:

* ``kernel``: the switch forwards with no rules;
* ``pipeline``: the switch daemon runs (NFQUEUE rules installed, every
  packet through the queue model on a 100 Gbit/s port, so the full path —
  receive, classify, RED, serialize, timer, verdict — runs without throttling);

each with two senders modes: ``gso`` (UDP GSO, 15 × ``size`` per send; the
switch queues the super-packet whole thanks to ``NFQA_CFG_F_GSO``) and
``plain`` (one ``sendto`` per packet). Sender and receiver are separate
processes (UDP GRO on receive); the figure is received ``size``-byte
datagrams per second between the first and last arrival; the median of
``--repeat`` runs is printed with the ratio pipeline / kernel (goal ≥ 0.5).
``--json`` prints the raw numbers.
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
import time
from pathlib import Path

from emu.fabric import Fabric, netns
from emu.fabric.naming import random_cluster
from emu.proc import stop
from emu.topology.model import Endpoint, Link, Node, Topology

UDP_SEGMENT = 103
UDP_GRO = 104
PORT = 4791


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
    end = time.monotonic() + seconds
    n = 0
    while True:
        for _ in range(64):
            try:
                s.send(payload)
            except (BlockingIOError, ConnectionRefusedError):
                pass
        n += 64
        if time.monotonic() >= end:
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
    deadline = time.monotonic() + seconds + 5
    while time.monotonic() < deadline:
        try:
            n = s.recv_into(buf)
        except TimeoutError:
            if first is not None:
                break
            continue
        now = time.monotonic()
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


def _daemon(f: Fabric, state: Path, copy_range: int) -> subprocess.Popen[str]:
    cfg = state / "config.json"
    cfg.write_text(json.dumps({"ports": {"*": {"rate": "100gbit", "depth": "64MB"}},
                               "copy_range": copy_range, "fail_open": False}))
    p = subprocess.Popen([sys.executable, "-m", "emu.switch.daemon", "--netns", f.ns("sw"),
                          "--state-dir", str(state), "--config", str(cfg)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    if p.stdout.readline().strip() != "ready":
        p.kill()
        raise RuntimeError("switch daemon did not start")
    return p


def run(seconds: float, size: int, repeat: int, copy_range: int) -> dict[str, dict[str, list]]:
    res: dict[str, dict[str, list]] = {m: {"kernel": [], "pipeline": []} for m in ("gso", "plain")}
    with tempfile.TemporaryDirectory() as tmp, \
            Fabric(topology(), cluster=random_cluster("bsw"), checksum_offload=True) as f:
        for _ in range(repeat):
            for mode in ("gso", "plain"):
                res[mode]["kernel"].append(_one(f, seconds, size, mode == "gso")[0])
                d = _daemon(f, Path(tmp), copy_range)
                try:
                    pps, got = _one(f, seconds, size, mode == "gso")
                    res[mode]["pipeline"].append(pps)
                    res[mode].setdefault("received", []).append(got)
                finally:
                    stop(d, 30)
                c = json.loads((Path(tmp) / "counters.json").read_text())
                res[mode].setdefault("switch", []).append(c["switch"])
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--copy-range", type=int, default=256,
                    help="bytes copied to user space per packet (65535: whole packet)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--role", choices=("send", "recv"), help=argparse.SUPPRESS)
    ap.add_argument("--ns", help=argparse.SUPPRESS)
    ap.add_argument("--addr", help=argparse.SUPPRESS)
    ap.add_argument("--gso", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.role == "send":
        _send(a.ns, a.addr, a.seconds, a.size, a.gso)
        return 0
    if a.role == "recv":
        _recv(a.ns, a.addr, a.seconds, a.size)
        return 0
    if os.geteuid() != 0:
        print("bench-switch needs root (namespaces)", file=sys.stderr)
        return 1
    res = run(a.seconds, a.size, a.repeat, a.copy_range)
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"packets/s through one switch, {a.size}-byte UDP datagrams, median of {a.repeat}"
          f" × {a.seconds:g} s, copy_range {a.copy_range}")
    print(f"{'sender':8} {'kernel-only':>12} {'pipeline':>12} {'ratio':>7}  goal ≥0.5×")
    for mode, r in res.items():
        k, p = statistics.median(r["kernel"]), statistics.median(r["pipeline"])
        ratio = p / k if k else 0.0
        print(f"{mode:8} {k:12.0f} {p:12.0f} {ratio:6.2f}×  {'✓' if ratio >= 0.5 else '✕'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

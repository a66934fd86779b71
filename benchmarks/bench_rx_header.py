# SPDX-License-Identifier: GPL-2.0-only
"""What checking the RoCEv2 ICRC over the IPv4 header as received costs the NIC daemon.

The daemon's own receive loop (:meth:`emu.nic.udp.PortSocket.recv_batch` with
:class:`emu.nic.framing.RoceIcrc`) reads the same 4 KiB RoCEv2 datagrams three
ways, alternating, in one throw-away namespace:

* ``assumed`` — the baseline: no header word, ID 0 and DF assumed (emu before #33);
* ``stamped, ID 0`` — the nftables rule and ``SO_RCVMARK`` on, emu's own senders'
  packets (ID 0, DF: the cached fast path);
* ``stamped, IDs count up`` — as Linux rxe sends them: a new ID every packet.

Each datagram is sent by a raw socket with the exact IPv4 header (so the IDs are the
ones chosen) and its ICRC computed by :mod:`emu.wire.icrc` over the real header — an
independent check: a run with a bad ICRC stops the benchmark. The figure is the
reading process's CPU time per datagram (recv + check); the ratio against the
baseline measured in the same run is what matters on a shared machine.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import secrets
import socket
import statistics
import struct
import sys
import time
from typing import Any

from emu.nic import rxheader
from emu.nic.framing import RoceIcrc
from emu.nic.udp import PortSocket
from emu.wire import icrc

ADDR = "127.0.0.1"
SPORT = 49152
#: datagrams sent before each timed read (4 KiB each: well inside the 64 MiB buffer)
BATCH = 4000
CASES = ("assumed", "stamped, ID 0", "stamped, IDs count up")


def _datagrams(n: int, count_up: bool, payload: int) -> list[bytes]:
    body = bytearray(12 + payload + 4)
    body[0] = 0x0A  # RDMA WRITE ONLY; the rest of the BTH and the payload as zeros
    out = []
    for i in range(n):
        ident = (0x1234 + i) & 0xFFFF if count_up else 0
        udp = struct.pack("!HHHH", SPORT, 4791, 8 + len(body), 0) + body
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), ident, 0x4000, 64, 17, 0,
                         socket.inet_aton(ADDR), socket.inet_aton(ADDR))
        pkt = bytearray(ip + udp)
        pkt[-4:] = icrc.pack_icrc(icrc.compute_icrc(bytes(pkt)))
        out.append(bytes(pkt))
    return out


def _one(case: str, pkts: list[bytes]) -> float:
    """CPU µs per datagram for reading and checking ``pkts`` the daemon's way."""
    framer = RoceIcrc()
    rx = PortSocket(ADDR, 4791, gro=False, rcvbuf=64 << 20)
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    try:
        if case != "assumed" and not rx.enable_ip_word():
            raise SystemExit("bench-rx-header: this kernel has no SO_RCVMARK")
        c: collections.Counter = collections.Counter()
        out: collections.deque = collections.deque()
        spent = 0.0
        for at in range(0, len(pkts), BATCH):  # a batch fits the socket's buffer
            for p in pkts[at:at + BATCH]:
                raw.sendto(p, (ADDR, 0))
            t = time.process_time()
            with contextlib.suppress(BlockingIOError):
                while True:
                    rx.recv_batch(out, 64, 1 << 30, c, framer.check, framer.check_buf)
                    if len(out) > 4096:
                        out.clear()
            spent += time.process_time() - t
        if c["rx_packets"] != len(pkts) or c["rx_bad_icrc"]:
            raise SystemExit(f"bench-rx-header: {case}: read {c['rx_packets']} of "
                             f"{len(pkts)}, {c['rx_bad_icrc']} bad ICRC")
        return spent / len(pkts) * 1e6
    finally:
        rx.close()
        raw.close()


def measure(n: int, rounds: int, payload: int) -> dict[str, Any]:
    if rxheader.install(4791) is not None:
        raise SystemExit("bench-rx-header: nft could not install the stamping rule")
    try:
        own, rxe = _datagrams(n, False, payload), _datagrams(n, True, payload)
        runs: dict[str, list[float]] = {c: [] for c in CASES}
        for r in range(rounds):
            for case in CASES:
                runs[case].append(_one(case, rxe if case.endswith("up") else own))
            print(f"bench-rx-header: round {r + 1}/{rounds}", file=sys.stderr)
    finally:
        rxheader.remove(4791)
    base = statistics.median(runs["assumed"])
    return {"datagrams": n, "payload": payload, "rounds": rounds,
            "us_per_datagram": {c: [round(v, 3) for v in runs[c]] for c in CASES},
            "median_us": {c: round(statistics.median(runs[c]), 3) for c in CASES},
            "ratio": {c: round(statistics.median(runs[c]) / base, 3) for c in CASES}}


def _in_scratch_ns(fn: Any) -> Any:
    """Run ``fn`` in a namespace of our own (the rule must not touch the caller's)."""
    from pyroute2 import IPRoute, netns

    from emu.fabric.capture import in_netns

    ns = "emubrh" + secrets.token_hex(3)
    netns.create(ns)
    try:
        with IPRoute(netns=ns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        return in_netns(ns, fn)
    finally:
        netns.remove(ns)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/bench-rx-header", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--datagrams", type=int, default=40_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--payload", type=int, default=4096)
    ap.add_argument("--quick", action="store_true", help="a smoke run (the test suite's)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.datagrams, a.rounds = 2000, 1
    res = _in_scratch_ns(lambda: measure(a.datagrams, a.rounds, a.payload))
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"bench-rx-header: {a.datagrams} RoCEv2 datagrams of {a.payload} B payload, "
          f"{a.rounds} rounds, CPU per datagram (recv + ICRC check), medians")
    print(f"{'case':<24}{'µs/datagram':>12}{'ratio':>8}")
    for c in CASES:
        print(f"{c:<24}{res['median_us'][c]:>12.3f}{res['ratio'][c]:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

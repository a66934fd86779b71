# SPDX-License-Identifier: GPL-2.0-only
"""CPU per RoCEv2 middle through a NIC port's frame ring, three ways, interleaved (root).

A routed a – r – b triple of namespaces (MTU 9000); in a, three ``TxPath``s with frame
rings send bursts of 14 WRITE middles of 4 KiB to b (nothing reads them: drops are
b's kernel's). Per burst the engine's side is included — building the packets — and
the daemon's: queueing, placing frames, sealing the ICRC, the kick. The three ways:

* ``gathers+seal``: one ``Gather`` per packet, sealed piece by piece before it is
  written (the daemon before RoCEv2 runs);
* ``gathers+seal_at``: the same, sealed in the frame once written;
* ``runs+seal_at``: one ``Run`` per burst (``packets.middle_heads``), each frame
  sealed in place — the daemon's way now.

The ways alternate in chunks of 100 bursts, so drift on a shared machine falls on all
three; CPU is this thread's (user + kernel, ``CLOCK_THREAD_CPUTIME_ID``). The ratio is
against ``gathers+seal`` in the same run. ``--json`` for machine-readable output.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from pyroute2 import IPRoute  # noqa: E402
from routed_ns import RoutedTriple  # noqa: E402

from emu.core.datagram import Run  # noqa: E402
from emu.fabric.capture import in_netns  # noqa: E402
from emu.nic.frames import FrameTx  # noqa: E402
from emu.nic.framing import RoceIcrc  # noqa: E402
from emu.nic.txpath import TxPath  # noqa: E402
from emu.nic.udp import PortSocket  # noqa: E402
from emu.transports.base import TxMeta  # noqa: E402
from emu.transports.roce import packets as P  # noqa: E402

BURST, SEG, CHUNK = 14, 4096, 100


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=40, help="chunks of 100 bursts per way")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        print("frame_ring needs root (namespaces)", file=sys.stderr)
        return 2
    net = RoutedTriple("fb", 93, 4791)
    txs: dict[str, tuple[PortSocket, TxPath]] = {}
    try:
        for ns, ifs in ((net.a, ["a0"]), (net.r, ["r0", "r1"]), (net.b, ["b0"])):
            with IPRoute(netns=ns) as ipr:
                for i in ifs:
                    ipr.link("set", index=ipr.link_lookup(ifname=i)[0], mtu=9000)
        src, dst = "10.93.1.2", "10.93.2.2"
        sink = in_netns(net.b, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        sink.bind((dst, 4791))
        framer = RoceIcrc()
        mem = memoryview(bytearray(os.urandom(SEG * BURST)))
        addr = (dst, 4791)

        def gathers(meta: TxMeta, psn: int) -> list:
            return [(P.build_gather(P.WRITE_MIDDLE, 0x11, (psn + j) & 0xFFFFFF,
                                    mem[j * SEG:(j + 1) * SEG]), addr, meta)
                    for j in range(BURST)]

        def runs(meta: TxMeta, psn: int) -> list:
            heads = P.middle_heads(P.WRITE_MIDDLE, 0x11, psn, [0] * BURST)
            return [(Run(heads, P.BTH_SIZE, mem, SEG, [meta] * BURST, P.ICRC_SIZE), addr, None)]

        ways = (("gathers+seal", gathers, False), ("gathers+seal_at", gathers, True),
                ("runs+seal_at", runs, True))
        metas = {}
        for i, (name, _, in_place) in enumerate(ways):
            def make(in_place: bool = in_place, port: int = 4800 + i) -> tuple:
                m = PortSocket(src, port, ifname="a0", mtu=9000)
                tx = TxPath([m], defaultdict(int), max_queue=100000, seal=framer.seal,
                            seal_many=framer.seal_many,
                            seal_at=framer.seal_at if in_place else None)
                tx.use_rings(lambda mm: FrameTx(mm.ifname, mm.address, mm.mtu))
                return m, tx
            m, tx = in_netns(net.a, make)
            tx.netns_fd = os.open(f"/run/netns/{net.a}", os.O_RDONLY)
            metas[name] = TxMeta(49200 + i, 26, 2)
            txs[name] = (m, tx)
            for _ in range(100):  # the next hop resolves through the socket path first
                tx.put(gathers(metas[name], 0))
                tx.flush()
                if tx.c["tx_frames"]:
                    break
                time.sleep(0.02)
        cpu = dict.fromkeys(txs, 0.0)
        frames0 = {n: t.c["tx_frames"] for n, (_, t) in txs.items()}
        psn = 0
        for r in range(a.rounds):
            for name, build, _ in ways:
                tx = txs[name][1]
                t0 = time.thread_time()
                for _ in range(CHUNK):
                    tx.put(build(metas[name], psn))
                    psn += BURST
                    while tx.queue:
                        try:
                            tx.flush()
                        except BlockingIOError:
                            time.sleep(0.0001)  # the ring is full: the kernel drains it
                cpu[name] += time.thread_time() - t0
            if not a.json and (r + 1) % 10 == 0:
                print(f"  {r + 1}/{a.rounds} rounds", file=sys.stderr)
        n = a.rounds * CHUNK * BURST
        res = {name: {"cpu_us_per_packet": cpu[name] / n * 1e6,
                      "ring_frames": txs[name][1].c["tx_frames"] - frames0[name],
                      "packets": n} for name in txs}
        base = res["gathers+seal"]["cpu_us_per_packet"]
        for v in res.values():
            v["ratio"] = v["cpu_us_per_packet"] / base
    finally:
        for m, tx in txs.values():
            tx.close()
            m.close()
            if tx.netns_fd is not None:
                os.close(tx.netns_fd)
        net.close()
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"RoCEv2 WRITE middles of {SEG} B through a frame ring, bursts of {BURST}, "
          f"{a.rounds} x {CHUNK} bursts per way, interleaved")
    print(f"{'way':18}{'CPU µs/packet':>15}{'vs gathers+seal':>17}{'by the ring':>13}")
    for name, v in res.items():
        print(f"{name:18}{v['cpu_us_per_packet']:>15.2f}{v['ratio']:>16.2f}x"
              f"{v['ring_frames']:>8}/{v['packets']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

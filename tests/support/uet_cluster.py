# SPDX-License-Identifier: GPL-2.0-only
"""UET end-to-end helpers: NIC daemons in a running Fabric, endpoint transfers, captures.

Daemons are ``python -m emu.nic.daemon`` subprocesses (what ``emu up`` starts)
serving RoCE and UET; the test process talks to their control sockets with the
client API. :meth:`UetCluster.close` stops every daemon it started, whatever
happened before; the fabric is the caller's (``down`` in its finalizer).
"""

from __future__ import annotations

import random
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rdma_util import start_nicd, stop_nicds

from emu.api import Device
from emu.fabric import Fabric
from emu.fabric.capture import Target, capture
from emu.nic.protocol import call_once, sock_path
from emu.wire.pcapio import read_frames

ROOT = Path(__file__).resolve().parents[2]


class UetCluster:
    def __init__(self, f: Fabric, hosts: list[str],
                 transports: tuple[str, ...] = ("roce", "uet")) -> None:
        self.f = f
        self.transports = transports
        self.name = f.cluster
        self.hosts = hosts
        self.procs: list[subprocess.Popen] = []

    def start(self, *extra: str) -> None:
        for i, h in enumerate(self.hosts, 1):
            self.procs.append(start_nicd(self.name, h,
                                         *[a for t in self.transports for a in ("-t", t)],
                                         "--seed", str(i), *extra))

    def stop(self) -> list[int]:
        return stop_nicds(self.procs)

    def stats(self, host: str) -> dict:
        return call_once(sock_path(self.name, host), "stats")

    def engine(self, host: str) -> dict:
        return self.stats(host)["transports"]["uet"]["engine"]

    def write(self, src: str, dst: str, n: int, seed: int, *, timeout: float = 300) -> None:
        """One UET WRITE of ``n`` random bytes ``src`` → ``dst`` through the endpoint API;
        the receiver's registered memory must match byte for byte."""
        self.incast([src], dst, n, [seed], timeout=timeout)

    def incast(self, srcs: list[str], dst: str, n: int, seeds: list[int], *,
               timeout: float = 300) -> None:
        """One UET WRITE of ``n`` random bytes from each of ``srcs`` to ``dst`` at once
        (:meth:`write` is the one-sender case):
        every device, region and connection is set up first, then the WRITEs are
        posted back to back, so the bursts meet at ``dst``'s port and no control-plane
        work (opening, registering, connecting) competes with them for the CPUs. Each
        region of ``dst`` must match its sender's bytes."""
        data = [random.Random(s).randbytes(n) for s in seeds]
        b = Device.open(cluster=self.name, host=dst)
        opened: list[Any] = [b]
        try:
            posts = []
            for src, d in zip(srcs, data, strict=True):
                a = Device.open(cluster=self.name, host=src)
                opened.append(a)
                ba, bb = a.alloc_buffer(n), b.alloc_buffer(n)
                opened += [ba, bb]
                ma, mb = a.reg_mr(ba), b.reg_mr(bb)
                ea, eb = a.endpoint(), b.endpoint()
                assert ea.transport == "uet"
                ea.connect(eb.getname())
                ba.view[:] = d
                posts.append((ea, ma, mb, bb))
            for (ea, ma, mb, _), seed in zip(posts, seeds, strict=True):
                ea.write(ma.sge(0, n), mb.va, mb.rkey, context=seed)
            for (ea, _, _, bb), seed, d in zip(posts, seeds, data, strict=True):
                wcs = ea.tx_cq.wait(1, timeout=timeout)
                assert len(wcs) == 1, "no completion"
                assert wcs[0].ok and wcs[0].wr_id == seed, wcs[0]
                assert bytes(bb.view[:n]) == d, "data differs in the receiver's memory"
        finally:
            for x in reversed(opened):
                x.close()

    @contextmanager
    def capturing(self, targets: list[tuple[str, str, str]], pcap: Path
                  ) -> Iterator[dict[str, Any]]:
        """Capture ``(node, ifname, label)`` interfaces into ``pcap`` around the body;
        yields a dict whose ``result`` is the capture's result once the body is done."""
        stop, ready = threading.Event(), threading.Event()
        res: dict[str, Any] = {}

        def run() -> None:
            res["result"] = capture([Target(self.f.ns(n), i, lbl) for n, i, lbl in targets],
                                    str(pcap), stop=stop, on_ready=ready.set,
                                    handle_signals=False)

        t = threading.Thread(target=run)
        t.start()
        try:
            assert ready.wait(10), "capture did not start"
            yield res
        finally:
            stop.set()
            t.join(60)


def uet_frames(pcap: Path) -> list[tuple[str, str, int, int, bytes]]:
    """(source IP, destination IP, UDP source port, UDP destination port, UDP payload) of
    every IPv4/IPv6 frame to or from UDP port 4793 (UET), in capture order."""
    out = []
    for fr in read_frames(str(pcap)):
        raw = bytes(fr.data)
        et = raw[12:14]
        if et == b"\x08\x00" and raw[23] == 17:
            ip = raw[14:]
            ihl = (ip[0] & 15) * 4
            src, dst = ".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20]))
            udp = ip[ihl:]
        elif et == b"\x86\xdd" and raw[20] == 17:
            import ipaddress

            ip = raw[14:]
            src = str(ipaddress.IPv6Address(ip[8:24]))
            dst = str(ipaddress.IPv6Address(ip[24:40]))
            udp = ip[40:]
        else:
            continue
        sp, dp = int.from_bytes(udp[0:2], "big"), int.from_bytes(udp[2:4], "big")
        if 4793 in (sp, dp):
            out.append((src, dst, sp, dp, udp[8:]))
    return out

# SPDX-License-Identifier: GPL-2.0-only
"""RDMA operations through the client API, checked byte for byte, for end-to-end tests."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from emu.api import Device

ROOT = Path(__file__).resolve().parents[2]


def start_nicd(cluster: str, host: str, *args: str) -> subprocess.Popen:
    """``emu nicd`` for ``host`` of ``cluster`` (extra ``args``), returned once it is ready;
    fails the test with the daemon's stderr if it is not."""
    p = subprocess.Popen([sys.executable, "-m", "emu.nic.daemon", "--cluster", cluster,
                          "--host", host, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    line = p.stdout.readline()  # type: ignore[union-attr]
    if not line.startswith("ready "):
        p.kill()
        err = p.communicate()[1]
        raise AssertionError(f"nicd {host} did not start: {err}")
    return p


def stop_nicds(procs: list[subprocess.Popen]) -> list[int]:
    """SIGTERM each daemon (kill after 20 s) and return the exit codes, pipes closed."""
    rcs = []
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        rcs.append(p.wait())
        for s in (p.stdout, p.stderr):
            if s is not None:
                s.close()
    procs.clear()
    return rcs


def write_and_verify(cluster: str, src: str, dst: str, n: int, seed: int, *, wr_id: int = 7,
                     timeout: float = 300) -> None:
    """One RDMA WRITE of ``n`` random bytes ``src`` → ``dst``; the receiver's memory must match.

    Uses both hosts' daemons from the test process (their control sockets), a
    QP pair connected directly, one signalled write.
    """
    write_and_verify_devices(Device.open(cluster=cluster, host=src),
                             Device.open(cluster=cluster, host=dst), n, seed, wr_id=wr_id,
                             timeout=timeout)


def write_and_verify_devices(a: Device, b: Device, n: int, seed: int, *, wr_id: int = 7,
                             timeout: float = 300) -> None:
    """:func:`write_and_verify` between two opened devices (closed afterwards)."""
    data = random.Random(seed).randbytes(n)
    ba, bb = a.alloc_buffer(n), b.alloc_buffer(n)
    try:
        ma, mb = a.reg_mr(ba), b.reg_mr(bb)
        ca, cb = a.create_cq(), b.create_cq()
        qa, qb = a.create_qp(ca), b.create_qp(cb)
        qa.connect(qb.local_info())
        qb.connect(qa.local_info())
        ba.view[:] = data
        qa.post_write(ma.sge(0, n), mb.va, mb.rkey, wr_id=wr_id)
        wcs = ca.wait(1, timeout=timeout)
        assert len(wcs) == 1, "no completion"
        assert wcs[0].ok and wcs[0].byte_len == n and wcs[0].wr_id == wr_id, wcs[0]
        assert bytes(bb.view[:n]) == data, "data differs in the receiver's memory"
    finally:
        for x in (a, b, ba, bb):
            x.close()

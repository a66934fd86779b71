# SPDX-License-Identifier: GPL-2.0-only
"""RDMA operations through the client API, checked byte for byte, for end-to-end tests."""

from __future__ import annotations

import random

from emu.api import Device


def write_and_verify(cluster: str, src: str, dst: str, n: int, seed: int, *, wr_id: int = 7,
                     timeout: float = 300) -> None:
    """One RDMA WRITE of ``n`` random bytes ``src`` → ``dst``; the receiver's memory must match.

    Uses both hosts' daemons from the test process (their control sockets), a
    QP pair connected directly, one signalled write.
    """
    data = random.Random(seed).randbytes(n)
    a = Device.open(cluster=cluster, host=src)
    b = Device.open(cluster=cluster, host=dst)
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

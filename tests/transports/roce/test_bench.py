# SPDX-License-Identifier: GPL-2.0-only
"""Per-packet cost of the RoCE engine in pure Python (requester + responder, no sockets).

Run as a script for the numbers (``PYTHONPATH=. python tests/transports/roce/test_bench.py``);
under pytest only a small smoke run checks the harness still works. Two
engines are wired back to back: no link, no loss, pacing out of the way
(``line_rate`` 1 Pb/s), so the time is the engines' own: building, parsing,
placing, ACKing.
"""

from __future__ import annotations

import random
import time

from lossy_link import register

from emu.core.memory import MemoryTable
from emu.transports.roce import RoceEngine, SendWR, Sge
from emu.transports.roce.packets import pseudo_header_icrc


def bench(size: int = 64 << 20, pmtu: int = 4096, kind: str = "write", icrc: bool = False,
          cc: str | None = None) -> float:
    """Seconds per PMTU-sized data packet, its share of ACKs included."""
    ma, mb = MemoryTable(random.Random(1)), MemoryTable(random.Random(2))
    kw = {"icrc": pseudo_header_icrc if icrc else None, "cc": cc, "line_rate": 1e15}
    ea, eb = RoceEngine(ma, random.Random(3), **kw), RoceEngine(mb, random.Random(4), **kw)
    qa, qb = ea.create_qp(pmtu=pmtu), eb.create_qp(pmtu=pmtu)
    a, b = ("10.0.0.1", 4791), ("10.0.0.2", 4791)
    ea.connect(qa, {**eb.query_qp(qb), "address": b[0]})
    eb.connect(qb, {**ea.query_qp(qa), "address": a[0]})
    src, dst = register(ma, size), register(mb, size)
    src.view[:] = random.Random(5).randbytes(size)
    op = SendWR.write if kind == "write" else SendWR.read
    ea.post_send(qa, op(1, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    now = 0.0
    t0 = time.perf_counter()
    while ea.next_event() is None:
        now += 1e-6
        out = ea.datagrams_to_send(now)
        for d, _, _ in out:
            eb.receive_datagram(d, a, now)
        back = eb.datagrams_to_send(now)
        for d, _, _ in back:
            ea.receive_datagram(d, b, now)
        if not out and not back:
            ea.handle_timer(now)
            eb.handle_timer(now)
    dt = time.perf_counter() - t0
    if kind == "write":
        assert bytes(dst.view) == bytes(src.view)
    else:
        assert bytes(src.view) == bytes(dst.view)
    return dt / (size // pmtu)


def test_bench_harness_smoke():
    assert bench(size=1 << 20) > 0
    assert bench(size=1 << 20, kind="read", icrc=True, cc="dcqcn") > 0


if __name__ == "__main__":
    for kind, icrc, cc in (("write", False, None), ("write", True, None), ("read", False, None),
                           ("write", False, "dcqcn")):
        us = bench(kind=kind, icrc=icrc, cc=cc) * 1e6
        print(f"{kind:5} icrc={'pseudo' if icrc else 'off':6} cc={cc or '-':5} "
              f"{us:6.2f} µs per 4 KiB data packet  ({4096 * 8 / us / 1e3:.2f} Gb/s)")

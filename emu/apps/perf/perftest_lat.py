# SPDX-License-Identifier: GPL-2.0-only
"""write-lat and read-lat with perftest's loops, for ``--oob perftest``.

Why not emu's own latency loops (:mod:`.lat`): against ``ib_write_lat`` the
bytes in memory are the protocol. perftest's ``run_iter_lat_write``: each
side WRITEs ``size`` bytes from the start of its buffer to the peer's
published VA (no cycle buffer in latency tests), the message's last byte
set to the iteration number as a C ``char`` (``(char)++scnt``), and waits
until the last byte of its own receive area reads ``(char)rcnt``; the server
waits before its first WRITE, the client writes first; every WRITE is
signaled and its completion taken before the next turn. ``run_iter_lat``
(read-lat): the client READs ``size`` bytes from the peer's VA, one at a
time; the server only waits in ``ctx_close_connection``. Samples are the
differences of consecutive post times, halved for write-lat (perftest's
``print_report_lat``).

emu × emu, the receiver also checks the rest of each message: both sides
fill their send area once with their stream's pattern before the run.
"""

from __future__ import annotations

import time
from typing import Any

from emu.apps.perf.endpoint import Endpoint, TransportError
from emu.apps.perf.lat import Waiter
from emu.apps.perf.pattern import Pattern
from emu.core.cq import WcStatus


def _take_completion(ep: Endpoint, wait: Waiter, what: str) -> None:
    wait.until(lambda: len(ep.send_cq) > 0, what, poll_every=1)
    for wc in ep.send_cq.poll(1):
        if wc.status != WcStatus.SUCCESS:
            st = WcStatus(wc.status)
            raise TransportError(f"{what}: work completion error: {st.describe()} "
                                 f"({st.name})")


def write_lat(ep: Endpoint, remote: dict[str, Any], recv_off: int, size: int, iters: int,
              server: bool, timeout: float, check: tuple[Pattern, int] | None) -> list[float]:
    """One size of ``run_iter_lat_write``; the post times (s). ``check`` = (pattern, the
    peer's stream): the received bytes before the stamp must be its message 0."""
    mr, qp = ep.mrs[0], ep.qps[0]
    view = mr.view
    send_last = size - 1
    recv = view[recv_off:recv_off + size]
    wait = Waiter(ep, None, timeout)
    tposted: list[float] = []
    scnt = ccnt = rcnt = 0
    sge = [mr.va, size, mr.lkey]
    with ep.dev.conn.busy_poll():
        while scnt < iters or ccnt < iters or rcnt < iters:
            if rcnt < iters and not (scnt < 1 and server):
                rcnt += 1
                wait.until(lambda want=rcnt & 0xFF: recv[send_last] == want,  # type: ignore[misc]
                           f"WRITE {rcnt} from the peer")
                if check is not None and size > 1:
                    check[0].check(recv[:send_last], check[1], 0,
                                   f"write-lat message {rcnt} (before its last byte)")
            if scnt < iters:
                tposted.append(time.perf_counter())
                scnt += 1
                view[send_last] = scnt & 0xFF
                qp.post_write(sge, remote["va"], remote["rkey"], wr_id=scnt, wait=False)
            if ccnt < iters:
                _take_completion(ep, wait, f"completion of WRITE {ccnt + 1}")
                ccnt += 1
            ep.check()
    return tposted


def read_lat(ep: Endpoint, remote: dict[str, Any], size: int, iters: int, timeout: float,
             check: tuple[Pattern, int] | None) -> list[float]:
    """One size of ``run_iter_lat`` (READ): the post times (s)."""
    mr, qp = ep.mrs[0], ep.qps[0]
    wait = Waiter(ep, None, timeout)
    tposted: list[float] = []
    sge = [mr.va, size, mr.lkey]
    with ep.dev.conn.busy_poll():
        for k in range(iters):
            tposted.append(time.perf_counter())
            qp.post_read(sge, remote["va"], remote["rkey"], wr_id=k, wait=False)
            _take_completion(ep, wait, f"completion of READ {k + 1}")
            if check is not None:
                check[0].check(mr.view[:size], check[1], 0, f"read-lat READ {k + 1}")
            ep.check()
    return tposted


def samples(tposted: list[float], factor: int) -> list[float]:
    """perftest's latency samples: consecutive post times' differences (µs) / factor."""
    return [(b - a) * 1e6 / factor for a, b in zip(tposted, tposted[1:], strict=False)]


def post_receives(ep: Endpoint, recv_off: int, size: int, n: int) -> None:
    """``ctx_set_recv_wqes`` for send-lat: ``n`` receives, all into the receive area."""
    mr, qp = ep.mrs[0], ep.qps[0]
    sge = [[mr.va + recv_off, size, mr.lkey]]
    qp.post_many([{"wr_id": k, "sg_list": sge} for k in range(n)], recv=True)


def send_lat(ep: Endpoint, recv_off: int, size: int, iters: int, posted: int, server: bool,
             timeout: float, check: tuple[Pattern, int] | None) -> list[float]:
    """One size of ``run_iter_lat_send`` (receives already posted: ``posted`` of them):
    the server receives first, the client sends first; each received message is answered
    by a send; a receive is reposted while more messages are due. The post times (s)."""
    mr, qp = ep.mrs[0], ep.qps[0]
    recv = mr.view[recv_off:recv_off + size]
    sge = [mr.va, size, mr.lkey]
    rsge = [[mr.va + recv_off, size, mr.lkey]]
    wait = Waiter(ep, None, timeout)
    tposted: list[float] = []
    scnt = rcnt = 0
    with ep.dev.conn.busy_poll():
        while scnt < iters or rcnt < iters:
            if rcnt < iters and not (scnt < 1 and not server):
                wait.until(lambda: len(ep.recv_cq) > 0, f"SEND {rcnt + 1} from the peer",
                           poll_every=1)
                for wc in ep.recv_cq.poll(1):
                    if wc.status != WcStatus.SUCCESS or wc.byte_len != size:
                        raise TransportError(f"receive {rcnt + 1}: {WcStatus(wc.status).name}, "
                                             f"{wc.byte_len} of {size} bytes")
                rcnt += 1
                if check is not None:
                    check[0].check(recv, check[1], 0, f"send-lat message {rcnt}")
                if posted < iters:
                    qp.post_recv(rsge, wr_id=posted, wait=False)
                    posted += 1
            if scnt < iters:
                tposted.append(time.perf_counter())
                scnt += 1
                qp.post_send(sge, wr_id=scnt, wait=False)
            for wc in ep.send_cq.poll(1 << 10):
                if wc.status != WcStatus.SUCCESS:
                    raise TransportError(f"send: work completion error: "
                                         f"{WcStatus(wc.status).describe()}")
            ep.check()
    return tposted

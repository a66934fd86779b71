# SPDX-License-Identifier: GPL-2.0-only
"""Bandwidth loops: the client keeps up to ``tx_depth`` posts in flight per QP.

Posts go out in batches (one ``post_send`` message with several work
requests, not waiting for the reply), every ``cq_mod``-th one signaled, as
perftest's CQ moderation; RC completes in order, so one completion covers
every earlier post of its QP. The server's part depends on the verb: WRITE
and READ servers only wait (and check or provide data), a SEND server keeps
receive buffers posted and checks every message.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emu.apps.perf.channel import Channel, check
from emu.apps.perf.endpoint import Endpoint, TransportError, slot_count
from emu.apps.perf.pattern import Pattern, client_stream, server_stream
from emu.apps.perf.stats import Timeline, gbps
from emu.core.cq import WcStatus

OPCODES = {"write": "RDMA_WRITE", "read": "RDMA_READ", "send": "SEND"}
PROGRESS_AFTER = 2.0  # seconds: runs longer than this report progress on stderr


def effective_cq_mod(cq_mod: int, depth: int) -> int:
    """Signal often enough that half the window can be refilled while half is in flight."""
    return max(1, min(cq_mod, depth // 2 or 1))


@dataclass
class BwRun:
    size: int
    tposted: list[float] = field(default_factory=list)
    tcompleted: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    timeline: Timeline | None = None
    end: float = 0.0


class Progress:
    """One stderr line per second for long runs: elapsed time, rate, iterations."""

    def __init__(self, start: float, enabled: bool, out: Any = None) -> None:
        self.start, self.enabled = start, enabled
        self.out = out or sys.stderr
        self.next = start + PROGRESS_AFTER
        self.last_t, self.last_bytes = start, 0

    def tick(self, now: float, nbytes: int, messages: int) -> None:
        if not self.enabled or now < self.next:
            return
        rate = gbps(nbytes - self.last_bytes, now - self.last_t)
        print(f" progress: {now - self.start:6.1f} s  {rate:9.3f} Gb/s  {messages} iterations",
              file=self.out, flush=True)
        self.last_t, self.last_bytes = now, nbytes
        self.next = now + 1.0


def _peer_check(chan: Channel | None) -> None:
    """Raise if the peer aborted (e.g. it found corrupted data)."""
    if chan is not None:
        msg = chan.poll()
        if msg is not None:
            check(msg, ())


def _wc_error(wc: Any) -> TransportError:
    return TransportError(f"work completion error on QPN {wc.qp_num:#x} (wr_id {wc.wr_id}): "
                          f"{WcStatus(wc.status).describe()} ({WcStatus(wc.status).name}, "
                          f"vendor_err {wc.vendor_err:#x})")


def run_client(ep: Endpoint, remote: list[dict[str, Any]], verb: str, size: int, *,
               iters: int, duration: float | None, tx_depth: int, cq_mod: int,
               pattern: Pattern | None, chan: Channel | None, timeout: float,
               progress: bool = True, clock: Callable[[], float] = time.perf_counter,
               remote_at: tuple[int, int] | None = None) -> BwRun:
    """Post ``iters`` messages per QP (or for ``duration`` s) and time every completion.

    ``pattern`` set: WRITE/SEND sources are filled per iteration, READ
    results are checked as they complete (:class:`DataError` on a mismatch).
    ``remote_at`` = ``(slots, stride)``: iteration ``k`` targets the peer's
    ``va + (k % slots) * stride`` (perftest's cycle buffer, whose addresses are on
    the wire), not emu's slot of the same size as ours; a READ then expects the
    bytes at that offset of the peer's region, which holds message 0 of the peer's
    stream from its start (:func:`fill_region`: one fill serves every size of ``-a``).
    """
    nq = len(ep.qps)
    slots = slot_count(size, tx_depth)
    depth = min(tx_depth, slots)
    cqm = effective_cq_mod(cq_mod, depth)
    opcode = OPCODES[verb]
    posted, completed, last_signaled = [0] * nq, [0] * nq, [-1] * nq
    views = [mr.view for mr in ep.mrs]
    rslots, rstride = remote_at or (slots, size)
    run = BwRun(size)
    tp, tc = run.tposted, run.tcompleted
    t0 = clock()
    timeline = run.timeline = Timeline(t0)
    deadline = t0 + duration if duration else None
    prog = Progress(t0, progress)
    stopping = False
    # the stall check and the peer check run on the wall clock: ``timeout`` is wall
    # seconds (:mod:`emu.apps.perf.stall`), ``clock`` (fabric time) times the results
    last_progress = last_peer_check = time.monotonic()
    done_bytes = 0

    def post(q: int, first: int, n: int, force_signal_last: bool) -> None:
        mr, rem, view = ep.mrs[q], remote[q], views[q]
        wrs = []
        for k in range(first, first + n):
            off = (k % slots) * size
            if pattern is not None and verb != "read":
                pattern.fill(view[off:off + size], client_stream(q), k)
            sig = (k + 1) % cqm == 0 or (deadline is None and k == iters - 1) or \
                (force_signal_last and k == first + n - 1)
            wr: dict[str, Any] = {"wr_id": k, "opcode": opcode, "signaled": sig,
                                  "sg_list": [[mr.va + off, size, mr.lkey]]}
            if verb != "send":
                wr["remote_addr"] = rem["va"] + (k % rslots) * rstride
                wr["rkey"] = rem["rkey"]
            wrs.append(wr)
            if sig:
                last_signaled[q] = k
        tp.extend([clock()] * n)
        ep.qps[q].post_many(wrs, wait=False)
        posted[q] += n

    while True:
        now = clock()
        if deadline is not None and not stopping and now >= deadline:
            stopping = True
            for q in range(nq):  # the tail must end in a signaled post, or it never completes
                if posted[q] and last_signaled[q] != posted[q] - 1:
                    post(q, posted[q], 1, True)
        if not stopping:
            for q in range(nq):
                room = depth - (posted[q] - completed[q])
                if deadline is None:
                    room = min(room, iters - posted[q])
                if room > 0:
                    post(q, posted[q], room, False)
            if deadline is None and all(p >= iters for p in posted):
                stopping = True
        if stopping and completed == posted:
            break
        wcs = ep.send_cq.wait(1, timeout=0.2)
        if wcs:
            wcs += ep.send_cq.poll(1 << 16)
        now, wall = clock(), time.monotonic()
        if not wcs:
            ep.check()
            if wall - last_progress > timeout:
                raise TransportError(f"no completion for {timeout:g} wall s ({sum(completed)} "
                                     f"of {sum(posted)} posts completed)")
        for wc in wcs:
            if wc.status != WcStatus.SUCCESS:
                raise _wc_error(wc)
            q = ep.by_qpn[wc.qp_num]
            k = wc.wr_id
            n = k + 1 - completed[q]
            if n <= 0:
                continue
            if pattern is not None and verb == "read":
                view = views[q]
                for j in range(completed[q], k + 1):
                    off = (j % slots) * size
                    what = f"QP {q} iteration {j} (READ into slot {j % slots})"
                    if remote_at is None:
                        pattern.check(view[off:off + size], server_stream(q), j % slots, what)
                    else:  # the peer's region is one message of its stream, from its VA
                        roff = (j % rslots) * rstride
                        pattern.check_at(view[off:off + size], server_stream(q), roff, what)
            completed[q] = k + 1
            tc.extend([now] * n)
            timeline.add(now, n * size)
            done_bytes += n * size
            last_progress = wall
        if wall - last_peer_check > 0.2:
            _peer_check(chan)
            last_peer_check = wall
        prog.tick(now, done_bytes, len(tc))
    ep.check()
    run.counts = completed
    run.end = tc[-1] if tc else clock()
    return run


# -- server side -----------------------------------------------------------------------


def prepare_read_source(ep: Endpoint, size: int, tx_depth: int, pattern: Pattern | None
                        ) -> None:
    """Fill every slot the client will READ with its stream's pattern for that slot."""
    if pattern is None:
        return
    slots = slot_count(size, tx_depth)
    for q, mr in enumerate(ep.mrs):
        view = mr.view
        for s in range(slots):
            pattern.fill(view[s * size:(s + 1) * size], server_stream(q), s)


def fill_region(ep: Endpoint, length: int, pattern: Pattern) -> None:
    """The READ source in perftest's layout: each QP's first ``length`` bytes are message 0
    of its server stream, whatever the size and slot a READ then takes from it."""
    for q, mr in enumerate(ep.mrs):
        pattern.fill(mr.view[:length], server_stream(q), 0)


def verify_writes(ep: Endpoint, size: int, tx_depth: int, counts: list[int],
                  pattern: Pattern, at: tuple[int, int] | None = None) -> None:
    """After a WRITE run: each slot holds the last iteration that targeted it (``at`` =
    ``(slots, stride)`` of perftest's layout, else emu's: ``size`` apart)."""
    slots, stride = at or (slot_count(size, tx_depth), size)
    for q, mr in enumerate(ep.mrs):
        n = counts[q]
        view = mr.view
        for s in range(min(slots, n)):
            k = s + ((n - 1 - s) // slots) * slots
            pattern.check(view[s * stride:s * stride + size], client_stream(q), k,
                          f"QP {q} iteration {k} (WRITE into slot {s}, checked after the run)")


class SendReceiver:
    """The send-bw server: keeps receives posted, checks each message, reposts.

    Receive ``j`` of a QP uses slot ``j % slots``. Receives need not complete in
    the order they were posted: UET's RUD delivers unordered, so a message whose
    packet was resent completes after the next one, and a receive is matched to
    whichever message's first packet arrives first. So each completion is checked
    by its ``wr_id`` (its slot) against the iterations still outstanding, each
    iteration must arrive once, and a slot is reposted only once every receive
    before it has completed. With a known iteration count no receive is posted
    beyond it, so nothing is left over for the next size.
    """

    def __init__(self, ep: Endpoint, size: int, rx_depth: int, iters: int | None,
                 pattern: Pattern | None) -> None:
        self.ep, self.size, self.iters, self.pattern = ep, size, iters, pattern
        self.slots = slot_count(size, rx_depth)
        nq = len(ep.qps)
        self.posted = [0] * nq
        self.low = [0] * nq  # per QP: the first receive not yet completed
        self.done_rx: list[set[int]] = [set() for _ in range(nq)]  # completed above low
        self.seen: list[set[int]] = [set() for _ in range(nq)]  # iterations checked, recent
        self.done: dict[str, Any] | None = None  # the client's "done" message

    def _post(self, q: int, upto: int) -> None:
        mr = self.ep.mrs[q]
        if self.iters is not None:
            upto = min(upto, self.iters)
        if upto <= self.posted[q]:
            return
        wrs = [{"wr_id": j, "sg_list": [[mr.va + (j % self.slots) * self.size, self.size,
                                          mr.lkey]]}
               for j in range(self.posted[q], upto)]
        self.ep.qps[q].post_many(wrs, recv=True, wait=False)
        self.posted[q] = upto

    def prepost(self) -> None:
        for q in range(len(self.ep.qps)):
            self._post(q, self.slots)
        self.ep.dev.conn.call("ping")  # every post above is in the daemon before "go"

    def received(self) -> list[int]:
        """Receives completed so far, per QP."""
        return [lo + len(d) for lo, d in zip(self.low, self.done_rx, strict=True)]

    def _check(self, q: int, j: int) -> None:
        """Receive ``j`` holds one outstanding iteration, seen for the first time: ``j``
        itself (messages matched in order), else one of the others the window allows."""
        if self.pattern is None:
            return
        seen = self.seen[q]
        off = (j % self.slots) * self.size
        got = self.ep.mrs[q].view[off:off + self.size]
        what = f"QP {q} iteration {j} (SEND into receive slot {j % self.slots})"
        stream = client_stream(q)
        lo = self.low[q]
        others = (k for k in range(max(0, lo - self.slots), lo + self.slots) if k != j)
        for k in (j, *others):
            if self.pattern.mismatch(got, stream, k) is None:
                if k in seen:
                    raise TransportError(f"{what}: holds iteration {k}, which had arrived "
                                         f"already")
                seen.add(k)  # a later (or earlier) message matched this receive first
                return
        self.pattern.check(got, stream, j, what)  # raises, naming the first wrong byte

    def serve(self, chan: Channel, timeout: float) -> list[int]:
        """Receive until the client's ``done`` says how many were sent; return the counts."""
        ep, size = self.ep, self.size
        target: list[int] | None = None
        last_progress = time.monotonic()
        while target is None or any(r < t for r, t in zip(self.received(), target, strict=True)):
            wcs = ep.recv_cq.wait(1, timeout=0.05)
            if wcs:
                wcs += ep.recv_cq.poll(1 << 16)
                last_progress = time.monotonic()
            touched = set()
            for wc in wcs:
                if wc.status != WcStatus.SUCCESS:
                    raise _wc_error(wc)
                q = ep.by_qpn[wc.qp_num]
                j = wc.wr_id
                if not self.low[q] <= j < self.posted[q] or j in self.done_rx[q]:
                    raise TransportError(f"QP {q}: a completion for receive {j}, which is "
                                         f"not outstanding")
                if wc.byte_len != size:
                    raise TransportError(f"QP {q} receive {j}: {wc.byte_len} bytes, "
                                         f"expected {size}")
                self._check(q, j)
                self.done_rx[q].add(j)
                while self.low[q] in self.done_rx[q]:
                    self.done_rx[q].discard(self.low[q])
                    self.seen[q].discard(self.low[q] - self.slots)  # beyond any receive
                    self.low[q] += 1
                touched.add(q)
            for q in touched:
                self._post(q, self.low[q] + self.slots)
            msg = chan.poll()
            if msg is not None:
                msg = check(msg, "done")
                target = list(msg["counts"])
                self.done = msg
            if not wcs:
                ep.check()
                if time.monotonic() - last_progress > timeout and target is not None:
                    raise TransportError(f"received {sum(self.received())} of {sum(target)} "
                                         f"messages; nothing for {timeout:g} wall s")
        return self.received()

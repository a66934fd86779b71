# SPDX-License-Identifier: GPL-2.0-only
"""Run a :class:`~emu.apps.workload.model.Workload` on a running cluster, through the
client API, and time it in fabric time from the applications' own completions.

Why one process in the root namespace and not a program per host: the NIC daemons'
control sockets are files (``emu.api``), so one process can hold every host's device
and drive all the flows — which a synchronized collective needs anyway (step *k* starts
when every flow of step *k − 1* has completed). Each (src, dst) pair gets one QP pair
and a buffer of ``depth`` message slots at each end; every flow between the pair
writes its messages into those slots in turn, ``depth`` WRITEs in flight. The source
buffer holds random bytes, the target starts zeroed, and a flow counts as
**verified** only when the target's slots hold exactly the source's once it completed.

A flow is timed by the fabric clock the NIC daemons run on (``time`` in the device
info: ``emu.fabricclock``): its start is the fabric time of its first post, its end
that of its last WRITE's completion (the responder's acknowledgement reached the
requester: what an application sees). Independent flows start at one common fabric
time plus their own ``start``, so a sweep's runs all begin alike.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emu.api import QP, DaemonDown, Device, NicError, exchange
from emu.api.client import CQ, MR
from emu.apps.perf.run import device_clock
from emu.apps.workload.model import Flow, Workload
from emu.fabricclock import FabricClock

#: buffer bytes per connection end at most (a message larger than this gets one slot)
SLOT_BYTES_MAX = 4 << 20
#: wall seconds between a workload's set-up and its flows' common start: every flow
#: thread is waiting by then, so none starts late
START_MARGIN = 0.2


class WorkloadError(Exception):
    """The workload could not be set up (a daemon down, a host without a NIC daemon)."""


@dataclass
class FlowResult:
    """One flow's outcome, in fabric seconds and bytes."""

    flow: Flow
    transport: str
    start: float | None = None
    end: float | None = None
    sent: int = 0  # bytes whose WRITE completed successfully
    verified: bool = False
    error: str | None = None
    #: (fabric s, bytes) per completed WRITE: the goodput series
    completions: list[tuple[float, int]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.end is not None and self.error is None and self.sent == self.flow.size

    @property
    def fct(self) -> float | None:
        """Flow completion time (fabric s), or None for a flow that did not complete."""
        return self.end - self.start if self.done and self.start is not None else None

    @property
    def goodput(self) -> float | None:
        """Payload bits per fabric second over the flow's life."""
        fct = self.fct
        return self.flow.size * 8 / fct if fct else None

    def to_dict(self) -> dict[str, Any]:
        f = self.flow
        return {"flow": f.name, "src": f.src, "dst": f.dst, "size": f.size, "step": f.step,
                "transport": self.transport, "start_s": self.start, "end_s": self.end,
                "fct_s": self.fct, "goodput_bps": self.goodput, "bytes_done": self.sent,
                "verified": self.verified, "error": self.error}


@dataclass
class WorkloadResult:
    """A whole run: every flow, each collective step's span, and the job's."""

    transport: str
    scale: float
    flows: list[FlowResult]
    steps: list[tuple[float, float]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return all(r.done and r.verified for r in self.flows)

    @property
    def jct(self) -> float | None:
        """Job completion time (fabric s): the first start to the last end, or None when a
        flow did not complete."""
        if not self.flows or not self.complete:
            return None
        return max(r.end for r in self.flows) - min(r.start for r in self.flows)  # type: ignore[type-var,operator]

    def to_dict(self) -> dict[str, Any]:
        return {"transport": self.transport, "time_scale": self.scale,
                "complete": self.complete, "jct_s": self.jct,
                "steps": [{"start_s": a, "end_s": b} for a, b in self.steps],
                "flows": [r.to_dict() for r in self.flows]}


class _End:
    """One end of a connection: its QP, CQ, MR and buffer on one host's device."""

    def __init__(self, dev: Device, transport: str, size: int, attrs: dict[str, Any]) -> None:
        self.buf = dev.alloc_buffer(size)
        self.mr: MR = dev.reg_mr(self.buf)
        self.cq: CQ = dev.create_cq(4096)
        self.qp: QP = dev.create_qp(self.cq, self.cq, transport=transport, **attrs)

    def close(self) -> None:
        self.buf.close()


class _Pair:
    """The connection a (src, dst) pair's flows share."""

    def __init__(self, src: Device, dst: Device, transport: str, slots: int, message: int,
                 attrs: dict[str, Any], rng: random.Random) -> None:
        self.slots, self.message = slots, message
        size = slots * message
        self.a = _End(src, transport, size, attrs)
        self.b = _End(dst, transport, size, attrs)
        self.a.buf.view[:size] = rng.randbytes(size)
        ia = exchange.conn_info(self.a.qp, self.a.mr)
        ib = exchange.conn_info(self.b.qp, self.b.mr)
        self.a.qp.connect(ib)
        self.b.qp.connect(ia)
        self.rkey, self.va = self.b.mr.rkey, self.b.mr.va
        self.used = 0  # bytes of the slots written so far (what verification compares)

    def verify(self) -> bool:
        n = self.used
        return self.a.buf.view[:n] == self.b.buf.view[:n]

    def close(self) -> None:
        self.a.close()
        self.b.close()


def _run_flow(pair: _Pair, res: FlowResult, clock: FabricClock, start_wall: float,
              depth: int, deadline_wall: float) -> None:
    """Post ``res.flow``'s WRITEs, ``depth`` in flight, and record their completions."""
    size, msg = res.flow.size, pair.message
    n = math.ceil(size / msg)
    qp, cq = pair.a.qp, pair.a.cq
    lengths = [min(msg, size - k * msg) for k in range(n)]
    try:
        delay = start_wall - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        res.start = clock.now()
        posted = done = 0
        while done < n:
            while posted < n and posted - done < depth:
                slot = posted % pair.slots
                qp.post_write(pair.a.mr.sge(slot * msg, lengths[posted]),
                              pair.va + slot * msg, pair.rkey, wr_id=posted, wait=False)
                pair.used = max(pair.used, slot * msg + lengths[posted])
                posted += 1
            left = deadline_wall - time.monotonic()
            if left <= 0:
                res.error = (f"did not complete in time: {res.sent} of {size} bytes "
                             f"acknowledged")
                return
            for wc in cq.wait(1, timeout=min(left, 1.0)):
                if not wc.ok:
                    res.error = f"WRITE {wc.wr_id} completed with {wc.status.name}"
                    return
                done += 1
                res.sent += lengths[wc.wr_id]
                res.completions.append((clock.now(), lengths[wc.wr_id]))
        res.end = res.completions[-1][0]
        res.verified = pair.verify()
        if not res.verified:
            res.error = "the target's memory does not hold what was written"
    except (NicError, DaemonDown, OSError) as e:
        res.error = f"{type(e).__name__}: {e}"


def run(cluster: str, workload: Workload, transport: str, *, depth: int = 4,
        timeout: float = 600.0, qp_attrs: dict[str, Any] | None = None, seed: int = 0,
        progress: Callable[[str], None] | None = None) -> WorkloadResult:
    """Run ``workload`` over ``transport`` on ``cluster`` (up, with NIC daemons).
    ``timeout``: wall seconds the whole workload may take before its unfinished flows
    are reported as not completed."""
    hosts = sorted({h for f in workload.flows for h in (f.src, f.dst)})
    devs: dict[str, Device] = {}
    pairs: dict[object, _Pair] = {}
    rng = random.Random(seed)
    try:
        for h in hosts:
            try:
                devs[h] = Device.open(cluster, h)
            except (DaemonDown, NicError, OSError) as e:
                raise WorkloadError(f"{h}: cannot open its NIC daemon: {e}") from None
        clock = device_clock(devs[hosts[0]].attrs)
        slots = max(1, min(depth, SLOT_BYTES_MAX // workload.message))
        try:
            for i, f in enumerate(workload.flows):
                key = _key(workload, i, f)
                if key not in pairs:
                    pairs[key] = _Pair(devs[f.src], devs[f.dst], transport, slots,
                                       workload.message, dict(qp_attrs or {}), rng)
        except NicError as e:
            raise WorkloadError(f"cannot set up {transport} connections: {e}") from None
        results = [FlowResult(f, transport) for f in workload.flows]
        deadline = time.monotonic() + timeout
        out = WorkloadResult(transport, clock.scale, results)
        if workload.collective:
            for k in range(workload.steps):
                step = [r for r in results if r.flow.step == k]
                t0 = clock.now()
                _launch(step, [pairs[(r.flow.src, r.flow.dst)] for r in step], clock,
                        time.monotonic(), depth, deadline)
                ends = [r.end for r in step if r.end is not None]
                out.steps.append((t0, max(ends) if ends else clock.now()))
                if progress:
                    progress(f"step {k + 1}/{workload.steps}")
                if not all(r.done for r in step):
                    break  # a step that did not complete: the job stops there
        else:
            _launch(results, [pairs[_key(workload, i, r.flow)] for i, r in enumerate(results)],
                    clock, time.monotonic() + START_MARGIN, depth, deadline)
        return out
    finally:
        for p in pairs.values():
            p.close()
        for d in devs.values():
            try:
                d.close()
            except (OSError, NicError):
                pass


def _key(workload: Workload, i: int, f: Flow) -> object:
    """Which connection flow ``i`` uses: a collective's flows between one pair share one
    (its steps follow each other), independent flows have one each (two flows between
    one pair at once are two QPs, as two applications' would be)."""
    return (f.src, f.dst) if workload.collective else i


def _launch(results: list[FlowResult], pairs: list[_Pair], clock: FabricClock,
            start_wall: float, depth: int, deadline: float) -> None:
    threads = []
    for r, pair in zip(results, pairs, strict=True):
        f = r.flow
        t = threading.Thread(target=_run_flow, name=f"flow {f.name}", daemon=True,
                             args=(pair, r, clock,
                                   start_wall + clock.to_wall(f.start), depth, deadline))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


# SPDX-License-Identifier: GPL-2.0-only
"""A NIC daemon's overload, by cause: what its counters say the emulated NIC would not
have caused (moved out of :mod:`emu.nic.daemon`; :mod:`emu.nic.daemonstats` reports it)."""

from __future__ import annotations

import math
import os
from typing import Any

from emu.proc import cpu_wait

#: the overload causes an engine counts itself (its counters, summed over the daemon's
#: engines into its totals): UET's retransmission timeouts only a late daemon caused — the
#: original had reached the target, whose ACK was late by the target's holding alone —
#: and RoCEv2 QPs whose pacer the daemon served later than its saved credit covers
ENGINE_OVERLOAD = ("rto_held", "pacer_late")
#: … and the time an engine counts (µs, judged against a run's length, not in ``total``):
#: UET's port idle while its controller waited for an ACK that a daemon held
ENGINE_OVERLOAD_TIME = ("ack_late_us", "pacer_late_us")
#: what the daemon counts as its own overload, by cause → the totals key behind it
OVERLOAD_CAUSES = {
    "rx_socket": "rx_kernel_drops",    # a socket's receive buffer overflowed (kernel drop)
    "rx_backlog": "rx_backlog_drops",  # the daemon's receive backlog was full
    "tx_backlog": "tx_backlog_drops",  # the engine's output found the transmit queue full
    **{k: k for k in ENGINE_OVERLOAD},
}


def overload(totals: dict[str, Any], ports: dict[str, dict[str, Any]],
             scale: float = 1.0) -> dict[str, Any]:
    """Losses and delays the emulated NIC would not have caused, by cause.

    Drops at the daemon's own queues (socket buffers, backlogs) and sends
    later than the port's serializer schedule (``tx_late``: the daemon was
    behind; ``tx_late_s`` link time lost). ``total`` > 0 makes any result
    measured through this daemon not credible. ``ack_late_s`` (cumulative, not in
    ``total``): port time a UET sender's window idled behind ACKs the daemons held
    (``emu.transports.uet.flowctl``). ``cpu_wait_s`` (cumulative, not in
    ``total``): time the daemon waited for a CPU; ``cpu_s``: CPU time it used (a run
    during which it used nearly a whole core was limited by the daemon, not the port:
    :data:`emu.credible.overload.CPU_BUSY_MAX`). Late times are fabric seconds
    (``scale``: the daemon's time scale; ``late_events`` stay ``CLOCK_MONOTONIC``, to be
    matched with the machine's stalls); ``cpu_*`` are wall (what the machine spent)."""
    out: dict[str, Any] = {k: int(totals.get(v, 0)) for k, v in OVERLOAD_CAUSES.items()}
    out["tx_late"] = sum(int(p.get("late", 0)) for p in ports.values())
    out["total"] = sum(out.values())
    # the port serializer runs on the wall clock (it stands for the dilated wire): the
    # link time it lost is stated in fabric seconds, as everything a user reads
    out["tx_late_s"] = round(sum(float(p.get("late_s", 0.0)) for p in ports.values()) / scale,
                             6 + math.ceil(math.log10(scale)))
    out["time_scale"] = scale
    # each late send's times, so a stall of the whole machine can explain it
    out["late_events"] = sorted(e for p in ports.values() for e in p.get("late_events", ()))
    out["ack_late_s"] = round(int(totals.get("ack_late_us", 0)) / 1e6, 6)
    out["pacer_late_s"] = round(int(totals.get("pacer_late_us", 0)) / 1e6, 6)
    out["cpu_wait_s"], out["cpu_runs"] = cpu_wait()
    t = os.times()
    out["cpu_s"] = round(t.user + t.system, 6)  # the daemon's CPU time, every thread
    # whether its ports were the limit: frames that waited for a serializer, the frame
    # bytes sent and the bytes taken in, against the line rate — a busy daemon whose
    # port made frames wait kept up; one whose port idled was the limit
    # (emu.credible.overload.delta)
    out["port_waits"] = sum(int(p.get("waits", 0)) for p in ports.values())
    out["tx_bytes"] = sum(int(p.get("bytes", 0)) for p in ports.values())
    out["rx_bytes"] = int(totals.get("rx_bytes", 0))
    out["line_rate"] = max((float(p.get("line_rate") or 0) for p in ports.values()), default=0.0)
    return out

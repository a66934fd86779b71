# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's way to build a :class:`RoceEngine` (``emu.nic.engines`` looks for
``create_engine`` in ``emu.transports.roce``).

Kept apart from the engine so the engine's constructor stays the one explicit
API (tests build engines directly) and the mapping from daemon configuration
— IP MTU, addresses, free-form options — lives in one place.
"""

from __future__ import annotations

import math
from typing import Any

from emu.transports.roce import packets as P
from emu.transports.roce.engine import RoceEngine
from emu.transports.roce.qp import PMTU_VALUES

#: RoceEngine keyword arguments a daemon may pass through its engine options.
ENGINE_OPTIONS = ("line_rate", "cc", "cc_params", "ack_every", "ack_req_every", "burst_bytes",
                  "lead_bytes", "frame_overhead", "cnp_interval", "cnp_dscp", "default_pmtu",
                  "gather", "runs", "paths", "path_params")
#: line rate (bits/s) of engines built for daemons unless ``--engine-opt roce.line_rate=…``
DEFAULT_DAEMON_LINE_RATE = 10e9
#: bytes a daemon's pacer may send ahead of its rate per wake-up. Each wake-up costs a
#: trio timer round; 64 KiB (16 packets) made the sender's pacer the bottleneck
#: (bench-roce 0.65x → 0.84–1.0x at 256 KiB). Larger bursts outran a switch port's
#: default 1 MB buffer before PFC could pause the sender (tail drops in a lossless
#: class at 512 KiB and 1 MiB in tests/nic/test_pause.py).
DEFAULT_DAEMON_BURST = 256 << 10
#: … but behind a paced port (the daemon passes ``tx_hold``: how far ahead of the wire its
#: port's FIFO runs) a QP produces at most this share of that FIFO per turn. Why: the
#: port paces; the QP's own burst only sets how much one pump builds at once. 256 KiB
#: at 1 Gb/s is 2 ms of wire — one pump built ~64 packets in ~1 ms of Python, and that
#: step plus a collector pause or a preemption outlasted the 2 ms FIFO: the port went
#: idle with frames queued (``tx_late`` in 4 of 5 IPv6 write-bw runs; 1 of 6 at 64 KiB).
#: A quarter (0.5 ms at 1 Gb/s) was too little the other way: the burst is also the credit
#: a QP's pacer saves, and a daemon late by more loses rate (``pacer_late``). Half, in
#: alternating pair write-bw runs against a quarter: 1 MiB pacer_late 49-272 -> 2-30 a run
#: over IPv4, 14-41 -> 2-13 over IPv6 (one tx_late in ten runs); 64 KiB 0.82-0.87 ->
#: 0.90-0.92 Gb/s (docs/measurements.md)
BURST_SHARE_OF_FIFO = 0.5
#: … and a QP at the line rate behind a paced port may fill that FIFO ahead of its
#: schedule (``QueuePair.lead``): served once per half of it, not once per packet, with
#: the other half still on its way to the wire
LEAD_SHARE_OF_FIFO = 1.0
#: the smallest burst whatever the rate: a few full packets
MIN_DAEMON_BURST = 16 << 10
#: bytes around a PMTU-sized payload: IPv6 40 + UDP 8 + BTH 12 + RETH 16 + ImmDt 4 + ICRC 4
PMTU_OVERHEAD = 84


def pmtu_for(ip_mtu: int) -> int:
    """The largest IB path MTU whose packets fit an IP MTU (1500 → 1024, 9000 → 4096)."""
    fit = [p for p in PMTU_VALUES if p + PMTU_OVERHEAD <= ip_mtu]
    return fit[-1] if fit else PMTU_VALUES[0]


def create_engine(ctx: Any) -> RoceEngine:
    """The daemon's factory hook (``emu.nic.engines``): an engine from an EngineContext.

    Uses ``ctx.memory``, ``ctx.rng``, ``ctx.addresses[0]``/``ctx.port`` (what
    :meth:`RoceEngine.query_qp` reports), ``ctx.mtu`` (→ the default PMTU) and
    the :data:`ENGINE_OPTIONS` found in ``ctx.options``. No ICRC function: the
    daemon computes ICRCs over the IP/UDP headers it really sends.
    """
    opts = {k: v for k, v in dict(getattr(ctx, "options", {}) or {}).items()
            if k in ENGINE_OPTIONS}
    if opts.get("cc") in (False, "none"):  # TOML has no null: cc = "none" / false
        opts["cc"] = None
    opts.setdefault("default_pmtu", pmtu_for(int(getattr(ctx, "mtu", 1500))))
    # The emulated port speed. A daemon's receive path tops out at a few Gb/s on
    # a small VM; a sender paced at 100 Gb/s overruns it and go-back-N turns the
    # overrun into a retransmit storm (31k of 47k packets resent for 64 MiB).
    # 10 Gb/s keeps the pacer from being the limit while bursts stay absorbable.
    opts.setdefault("line_rate", DEFAULT_DAEMON_LINE_RATE)
    hold = float((getattr(ctx, "options", {}) or {}).get("tx_hold") or 0.0)
    fifo = opts["line_rate"] * hold / 8 if hold > 0 else math.inf
    opts.setdefault("burst_bytes", max(MIN_DAEMON_BURST,
                                       min(DEFAULT_DAEMON_BURST, int(BURST_SHARE_OF_FIFO * fifo))
                                       if fifo != math.inf else DEFAULT_DAEMON_BURST))
    if fifo != math.inf:
        opts.setdefault("lead_bytes", max(MIN_DAEMON_BURST, int(LEAD_SHARE_OF_FIFO * fifo)))
    opts.setdefault("gather", True)  # the daemon sends Gather pieces by scatter-gather
    opts.setdefault("runs", True)  # … and a burst of middles as one Run (emu.nic.frames)
    addrs = list(getattr(ctx, "addresses", []) or [])
    local = (addrs[0], int(getattr(ctx, "port", P.UDP_PORT))) if addrs else None
    trace = getattr(ctx, "trace", None)  # the daemon's --trace (disabled: not passed)
    if hasattr(ctx, "in_force"):  # the daemon's context: emu nicd stats shows them
        ctx.in_force(opts)
    if trace is not None and trace.enabled:
        opts["trace"] = trace
    return RoceEngine(ctx.memory, ctx.rng, local_addr=local, **opts)

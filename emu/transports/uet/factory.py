# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's way to build a :class:`UetEngine` (``emu.nic.engines`` looks for
``create_engine`` in ``emu.transports.uet``).

Kept apart from the engine so the constructor stays the one explicit API
(tests build engines directly) and the mapping from daemon configuration —
IP MTU, addresses, free-form options — lives in one place, as for RoCE.
:func:`create_engine` hands the daemon the engine behind its verbs adapter
(:class:`~emu.transports.uet.verbs.UetVerbs`); :func:`build_engine` is the
bare engine from the same context.
"""

from __future__ import annotations

import math
from typing import Any

from emu.transports.uet.engine import UetEngine
from emu.transports.uet.pdc import MPR_UNIT, UDP_PORT
from emu.transports.uet.verbs import UetVerbs

#: UetEngine keyword arguments a daemon may pass through its engine options.
ENGINE_OPTIONS = ("mtu", "mpr", "rto", "max_retries", "nack_retx_delay", "ack_bytes",
                  "entropies", "entropy_count", "job_id", "dscp", "ctrl_dscp", "ecn", "cc",
                  "cc_params", "paths", "path_params", "line_rate", "gather", "runs",
                  "ack_coalesce", "idle_timeout", "rto_max", "base_rtt", "tx_hold",
                  "loss_threshold", "loss_probes")
#: RTO of engines built for daemons: the spec's upper bound (uet.md: Retransmit, 1–5 ms).
#: A daemon pair's unloaded round trip is a few hundred µs on a small VM, not the
#: fabric's ~10 µs, so the shortest RTOs would fire on data that is merely queued.
DEFAULT_DAEMON_RTO = 5e-3
#: ceiling of a daemon PDC's adaptive RTO (engine option ``rto_max``): the RTO follows the
#: measured round trip from ``DEFAULT_DAEMON_RTO`` up to this. Measured (bench-uet pair):
#: a busy receiving daemon's ACKs took 1–20 ms, and a fixed 5 ms RTO resent whole windows
#: that had arrived (200–2000 duplicate packets per 128 MiB, each ACKed on its own).
DEFAULT_DAEMON_RTO_MAX = 0.1
#: retries before a daemon's PDC closes in error: 200 × 5 ms = a peer silent for 1 s.
#: Without a congestion window the spec's 5 gave up on every 16 MiB WRITE in a pair
#: topology (a sender outran the Python receiver; a full MP_RANGE window queued longer
#: than any RTO). NSCC (below) removed those storms; the margin stays because two
#: busy daemons on two cores can stall each other for tens of ms.
DEFAULT_DAEMON_RETRIES = 200
#: congestion control of daemon engines: NSCC with the daemons' own unloaded RTT as its
#: base. Measured (bench-uet pair, 8 KiB packets): no CC → 4 RTO retransmissions per data
#: packet and ~0.2 Gb/s; NSCC with base_rtt 100 µs (a 21-packet window) → no
#: retransmissions but stop-and-go at ~1.5 Gb/s; 500 µs → ~3.3 Gb/s with 0.3 % RTO
#: retransmissions; 1 ms → more RTOs and no gain. Re-measured with the adaptive RTO
#: (``rto_max``): 0.5, 1 and 2 ms all gave 3.3–3.5 Gb/s and no retransmissions — the
#: daemons' CPU, not the window, is the limit there.
#: seconds a daemon's target PDC may stay silent before it is asked to close: without it,
#: SYNs from a vanished initiator (or random bytes that parse as one) kept state forever
DEFAULT_DAEMON_IDLE = 2.0
DEFAULT_DAEMON_CC = "nscc"
DEFAULT_DAEMON_BASE_RTT = 500e-6
#: bytes around a payload: IPv6 40 + UDP 8 + PDS 12 + SES standard 44 (no TSS)
UET_OVERHEAD = 104
#: MP_RANGE of a daemon's PDCs (engine option ``mpr``, advertised in every ACK) when the
#: fabric's base round trip and the port's line rate are known: at least this many base
#: round trips of packets. Why: a hole pins the window's bottom for about two round trips
#: (the SACKs show it one round trip after it left, its resend is ACKed one later), and
#: NSCC lets a round trip grow to twice the base (its target queuing delay is one base
#: RTT). Measured (sans-IO, ``tests/transports/uet/test_loss_recovery.py``: 400 Gb/s, 6.6
#: µs, 2 % loss, 4 KiB packets — ~80 packets a round trip): the spec's default 128 PSNs
#: kept 0.59-0.69 of the loss-free goodput, 256 0.92-0.98, 384 (what 4 round trips
#: give) 0.99. NSCC's window (at most 1.5 BDP of bytes) still bounds what is in flight;
#: MP_RANGE only lets it keep sending past a hole.
WINDOW_RTTS = 4
#: the largest ``mpr`` (the engine's: MP_RANGE within a SYN's 4096-PSN span)
MPR_MAX = 32


def mpr_for(line_rate: float, base_rtt: float, mtu: int) -> int:
    """``mpr`` (MP_RANGE = ``mpr`` × 128 PSNs) for :data:`WINDOW_RTTS` round trips of
    ``mtu``-byte packets at ``line_rate`` bits/s over ``base_rtt`` seconds, 1..32."""
    pkts = WINDOW_RTTS * line_rate * base_rtt / 8 / mtu
    return max(1, min(MPR_MAX, math.ceil(pkts / MPR_UNIT)))


def payload_for(ip_mtu: int) -> int:
    """The SES payload per packet that fits an IP MTU, rounded down to 256 B
    (1500 → 1280, 9000 → 8704), at most the 14-bit payload_length limit."""
    return max(256, min((ip_mtu - UET_OVERHEAD) // 256 * 256, 16128))


def create_engine(ctx: Any) -> UetVerbs:
    """The daemon's factory hook: :func:`build_engine` behind the daemon's verbs protocol."""
    return UetVerbs(build_engine(ctx))


def build_engine(ctx: Any) -> UetEngine:
    """A bare engine from an ``EngineContext``.

    Uses ``ctx.memory``, ``ctx.rng``, ``ctx.addresses[0]``/``ctx.port`` (what
    :meth:`UetEngine.query_ep` reports), ``ctx.mtu`` (→ the payload per packet)
    and the :data:`ENGINE_OPTIONS` found in ``ctx.options``; ``ctx.trace`` when enabled.
    """
    opts = {k: v for k, v in dict(getattr(ctx, "options", {}) or {}).items()
            if k in ENGINE_OPTIONS}
    if opts.get("cc") in (False, "none"):  # TOML has no null: cc = "none" / false
        opts["cc"] = None
    opts.setdefault("mtu", payload_for(int(getattr(ctx, "mtu", 1500))))
    opts.setdefault("gather", True)  # data requests leave by scatter-gather, no copy
    opts.setdefault("runs", True)  # a message's middles as one Run for the frame ring
    opts.setdefault("idle_timeout", DEFAULT_DAEMON_IDLE)
    # the emulated fabric's unloaded round trip (``emu up`` computes it: emu.credible.rates)
    base = opts.pop("base_rtt", None)
    if base is not None and not (isinstance(base, int | float) and base > 0):
        raise ValueError(f"base_rtt must be > 0 seconds, got {base!r}")
    if "cc" not in opts:
        opts["cc"] = DEFAULT_DAEMON_CC
    if opts["cc"] == "nscc":
        params = dict(opts.get("cc_params") or {})
        params.setdefault("base_rtt", base or DEFAULT_DAEMON_BASE_RTT)
        opts["cc_params"] = params
    opts.setdefault("ack_coalesce", True)  # one 16 KiB-rule ACK per PDC per receive batch
    rate = opts.get("line_rate")
    if base is not None and isinstance(rate, int | float) and rate > 0:
        opts.setdefault("mpr", mpr_for(rate, base, int(opts["mtu"])))  # (WINDOW_RTTS)
    opts.setdefault("rto", DEFAULT_DAEMON_RTO)
    opts.setdefault("rto_max", max(DEFAULT_DAEMON_RTO_MAX, opts["rto"]))
    opts.setdefault("max_retries", DEFAULT_DAEMON_RETRIES)
    addrs = list(getattr(ctx, "addresses", []) or [])
    port = int(getattr(ctx, "port", UDP_PORT) or UDP_PORT)
    local = (addrs[0], port) if addrs else None
    trace = getattr(ctx, "trace", None)  # the daemon's --trace (disabled: not passed)
    if hasattr(ctx, "in_force"):  # the daemon's context: emu nicd stats shows them
        ctx.in_force(opts)
    if trace is not None and trace.enabled:
        opts["trace"] = trace
    return UetEngine(ctx.memory, ctx.rng, local_addr=local, port=port, **opts)

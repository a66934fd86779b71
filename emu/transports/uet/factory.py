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

from typing import Any

from emu.transports.uet.engine import UetEngine
from emu.transports.uet.pdc import UDP_PORT
from emu.transports.uet.verbs import UetVerbs

#: UetEngine keyword arguments a daemon may pass through its engine options.
ENGINE_OPTIONS = ("mtu", "mpr", "rto", "max_retries", "nack_retx_delay", "ack_bytes",
                  "entropies", "job_id", "dscp", "ctrl_dscp", "ecn", "cc", "cc_params", "paths",
                  "path_params", "line_rate")
#: RTO of engines built for daemons: the spec's upper bound (uet.md: Retransmit, 1–5 ms).
#: A daemon's receive path handles a packet in ~100 µs on a small VM, so a full
#: MP_RANGE window (128 packets) takes longer than any RTO in the spec's range to be
#: ACKed: spurious retransmissions are expected until a congestion window or pacer
#: keeps less in flight.
DEFAULT_DAEMON_RTO = 5e-3
#: retries before a daemon's PDC closes in error: 200 × 5 ms = a peer silent for 1 s.
#: The spec's 5 gave up on every 16 MiB WRITE in a pair topology, and 40 on some,
#: while the receiving daemon was still working through the retransmissions: with
#: no congestion window yet in the engine, a sender outruns a Python receiver.
DEFAULT_DAEMON_RETRIES = 200
#: bytes around a payload: IPv6 40 + UDP 8 + PDS 12 + SES standard 44 (no TSS)
UET_OVERHEAD = 104


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
    opts.setdefault("mtu", payload_for(int(getattr(ctx, "mtu", 1500))))
    opts.setdefault("rto", DEFAULT_DAEMON_RTO)
    opts.setdefault("max_retries", DEFAULT_DAEMON_RETRIES)
    addrs = list(getattr(ctx, "addresses", []) or [])
    port = int(getattr(ctx, "port", UDP_PORT) or UDP_PORT)
    local = (addrs[0], port) if addrs else None
    trace = getattr(ctx, "trace", None)  # the daemon's --trace (disabled: not passed)
    if trace is not None and trace.enabled:
        opts["trace"] = trace
    return UetEngine(ctx.memory, ctx.rng, local_addr=local, port=port, **opts)

# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's way to build a :class:`UetEngine` (``emu.nic.engines`` looks for
``create_engine`` in ``emu.transports.uet``).

Kept apart from the engine so the constructor stays the one explicit API
(tests build engines directly) and the mapping from daemon configuration —
IP MTU, addresses, free-form options — lives in one place, as for RoCE.
"""

from __future__ import annotations

from typing import Any

from emu.transports.uet.engine import UetEngine
from emu.transports.uet.pdc import UDP_PORT

#: UetEngine keyword arguments a daemon may pass through its engine options.
ENGINE_OPTIONS = ("mtu", "mpr", "rto", "max_retries", "nack_retx_delay", "ack_bytes",
                  "entropies", "job_id", "dscp", "ctrl_dscp", "ecn")
#: bytes around a payload: IPv6 40 + UDP 8 + PDS 12 + SES standard 44 (no TSS)
UET_OVERHEAD = 104


def payload_for(ip_mtu: int) -> int:
    """The SES payload per packet that fits an IP MTU, rounded down to 256 B
    (1500 → 1280, 9000 → 8704), at most the 14-bit payload_length limit."""
    return max(256, min((ip_mtu - UET_OVERHEAD) // 256 * 256, 16128))


def create_engine(ctx: Any) -> UetEngine:
    """The daemon's factory hook: an engine from an ``EngineContext``.

    Uses ``ctx.memory``, ``ctx.rng``, ``ctx.addresses[0]``/``ctx.port`` (what
    :meth:`UetEngine.query_ep` reports), ``ctx.mtu`` (→ the payload per packet)
    and the :data:`ENGINE_OPTIONS` found in ``ctx.options``.
    """
    opts = {k: v for k, v in dict(getattr(ctx, "options", {}) or {}).items()
            if k in ENGINE_OPTIONS}
    opts.setdefault("mtu", payload_for(int(getattr(ctx, "mtu", 1500))))
    addrs = list(getattr(ctx, "addresses", []) or [])
    port = int(getattr(ctx, "port", UDP_PORT) or UDP_PORT)
    local = (addrs[0], port) if addrs else None
    return UetEngine(ctx.memory, ctx.rng, local_addr=local, port=port, **opts)

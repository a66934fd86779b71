# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's way to build an :class:`MrcEngine` (``emu.nic.engines`` looks for
``create_engine`` in ``emu.transports.mrc``): addresses, MTU and options from the
daemon's context, mapped in one place, as for RoCEv2 and UET."""

from __future__ import annotations

from typing import Any

from emu.transports.mrc.engine import UDP_PORT, MrcEngine

#: MrcEngine keyword arguments a daemon may pass through ``--engine-opt mrc.K=V`` (the
#: daemon itself passes ``line_rate``, ``tx_hold`` and ``frame_overhead`` for a paced port)
ENGINE_OPTIONS = ("line_rate", "base_rtt", "cc", "pmtu", "ev_set", "planes", "mpr", "timeout",
                  "retry_linear", "retry_exp", "loss_threshold", "ev_min_active", "ev_format",
                  "ev_split", "tx_hold", "frame_overhead")
#: SRv6's outer IPv6 header: what the srv6 EV format adds to every packet
SRV6_OVERHEAD = 40
#: IPv6's header is this much longer than IPv4's
IPV6_EXTRA = 40 - 20
#: IP + UDP + BTH + METH + RETH + ImmDt + ICRC around a PMTU-sized payload (IPv6)
PMTU_OVERHEAD = 40 + 8 + 12 + 4 + 16 + 4 + 4
PMTUS = (256, 512, 1024, 2048, 4096)


def pmtu_for(ip_mtu: int) -> int:
    """The largest path MTU whose MRC packets fit an IP MTU (1500 → 1024, 4200 → 4096)."""
    fit = [p for p in PMTUS if p + PMTU_OVERHEAD <= ip_mtu]
    return fit[-1] if fit else PMTUS[0]


def create_engine(ctx: Any) -> MrcEngine:
    """An engine from an EngineContext (``memory``, ``rng``, ``addresses``, ``port``,
    ``mtu``, ``options``)."""
    raw = dict(getattr(ctx, "options", {}) or {})
    opts = {k: v for k, v in raw.items() if k in ENGINE_OPTIONS}
    if opts.get("cc") in (False, "none"):
        opts["cc"] = None
    fmt = str(opts.get("ev_format", "udp")).lower()
    mtu = int(getattr(ctx, "mtu", 1500))
    # the srv6 format's outer header comes out of the packet's room
    opts.setdefault("pmtu", pmtu_for(mtu - SRV6_OVERHEAD if fmt == "srv6" else mtu))
    addrs = list(getattr(ctx, "addresses", []) or [])
    if fmt != "udp":  # the flow label carries part of every EV: IPv6 only
        addrs = [a for a in addrs if ":" in a] + [a for a in addrs if ":" not in a]
    local = (addrs[0], int(getattr(ctx, "port", UDP_PORT))) if addrs else None
    if "frame_overhead" in raw and local is not None:
        # the daemon's bytes per frame are for its first address's family; the STEV and
        # SRv6 formats send over IPv6 whatever that is, SRv6 in an outer header too —
        # the engine's schedule of the port (txlead) must be the port's own
        first = str((getattr(ctx, "addresses", None) or [local[0]])[0])
        opts["frame_overhead"] = int(raw["frame_overhead"]) + IPV6_EXTRA * (
            (":" in local[0]) - (":" in first)) + (SRV6_OVERHEAD if fmt == "srv6" else 0)
    # one plane per NIC port: each port's address of the family the QPs use (the first's)
    v6 = bool(addrs) and ":" in addrs[0]
    planes = [next((a for a in p if (":" in a) == v6), None)
              for p in getattr(ctx, "port_addresses", []) or []]
    plane_addrs = [a for a in planes if a is not None]
    if local is not None and plane_addrs and plane_addrs[0] != local[0]:
        plane_addrs = [local[0]] + [a for a in plane_addrs if a != local[0]]
    opts.setdefault("planes", max(1, len(plane_addrs)))
    if hasattr(ctx, "in_force"):
        ctx.in_force(opts)
    trace = getattr(ctx, "trace", None)
    return MrcEngine(ctx.memory, ctx.rng, local_addr=local, local_addrs=plane_addrs or None,
                     srv6_paths=getattr(ctx, "srv6_paths", None),
                     **opts, **({"trace": trace} if trace is not None else {}))

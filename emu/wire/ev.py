# SPDX-License-Identifier: GPL-2.0-only
"""MRC's EV in a scapy packet: :func:`apply_ev` writes it, :func:`packet_ev` reads it.

Where the EV sits and the two pure functions both sides call live in
:mod:`emu.wire.codec.ev` (scapy-free: the daemons and the sans-IO transports use
them); they are re-exported here for the scapy layers and tests. scapy is
imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from emu.wire.codec.ev import (
    DEFAULT_SPLIT,
    EV_BITS,
    FLOW_LABEL_BITS,
    SPORT_BITS,
    EVMode,
    EVSplit,
    _mode,
    ev_from_fields,
    ev_to_fields,
)

if TYPE_CHECKING:
    from scapy.packet import Packet

__all__ = ["DEFAULT_SPLIT", "EV_BITS", "FLOW_LABEL_BITS", "SPORT_BITS", "EVMode", "EVSplit",
           "apply_ev", "ev_from_fields", "ev_to_fields", "packet_ev"]


# --------------------------------------------------------------------------
# scapy helpers (lazy scapy import)
# --------------------------------------------------------------------------

def _udp_and_ip(pkt: Packet) -> tuple[Packet, Packet | None]:
    """The innermost UDP layer of ``pkt`` and the IP header right above it."""
    from scapy.layers.inet import UDP

    udp = None
    layer: Packet | None = pkt
    while layer is not None and layer.name != "NoPayload":
        if isinstance(layer, UDP):
            udp = layer
        layer = layer.payload if layer.payload else None
    if udp is None:
        raise ValueError("packet has no UDP header to carry the EV")
    return udp, udp.underlayer


def apply_ev(pkt: Packet, ev: int, mode: EVMode | str = EVMode.STEV,
             split: EVSplit = DEFAULT_SPLIT, *, reseal: bool = True) -> Packet:
    """Write ``ev`` into ``pkt`` in place (UDP sport, and IPv6 ``fl`` unless UDP mode).

    Acts on the innermost UDP header and the IP header carrying it (the inner
    packet of an SRv6 encapsulation). The source port is covered by the ICRC
    and the UDP checksum, so with ``reseal`` both are reset to be recomputed
    when the packet is built. Returns ``pkt``.
    """
    from scapy.layers.inet6 import IPv6

    sport, fl = ev_to_fields(ev, mode, split)
    udp, ip = _udp_and_ip(pkt)
    if fl is not None and not isinstance(ip, IPv6):
        raise ValueError(f"{_mode(mode).name} mode needs IPv6: the flow label carries the EV")
    udp.sport = sport
    if fl is not None:
        ip.fl = fl
    if reseal:
        udp.chksum = None
        payload = udp.payload
        if payload and any(f.name == "icrc" for f in payload.fields_desc):
            payload.icrc = None
    return pkt


def packet_ev(pkt: Packet, mode: EVMode | str = EVMode.STEV,
              split: EVSplit = DEFAULT_SPLIT) -> int:
    """The EV a scapy packet carries (innermost UDP sport and its IPv6 flow label)."""
    from scapy.layers.inet6 import IPv6

    udp, ip = _udp_and_ip(pkt)
    fl = ip.fl if isinstance(ip, IPv6) else None
    return ev_from_fields(udp.sport, fl, mode, split)

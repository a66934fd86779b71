# SPDX-License-Identifier: GPL-2.0-only
"""scapy layers for OCP MRC: extension headers, opcodes, packet builders.

MRC is RoCEv2 with its own opcodes (0xC6-0xDE) and extension headers
(``specs/mrc.md``). It shares :class:`emu.wire.roce.BTH` (whose byte 8 already
has MRC's RTX and TS bits), the ICRC trailer and :class:`~emu.wire.roce.RETH`,
:class:`~emu.wire.roce.ImmDt`, :class:`~emu.wire.roce.AETH`.

The layouts are provisional. Every ``fields_desc`` here is generated from the
one table :data:`emu.wire.codec.mrc.LAYOUTS` (scapy-free, so the daemons can
share it), which also feeds the struct codecs; :data:`MRC_WIRE_VERSION` names
its revision. Importing this module registers the MRC opcodes with
:func:`emu.wire.roce.register_opcode`, so a UDP/4791 packet carrying an MRC
opcode dissects into these layers.

Header chains after the BTH:

* writes 0xC6-0xCB: METH, TSETH only if ``bth.ts``, RETH, ImmDt for the _IMM ones
* 0xD1 TRANSPORT_ACK: AETH
* 0xD8 ENDPOINT_REQUEST: ERTH; 0xD9 ENDPOINT_RESPONSE: EETH (emu-defined)
* 0xDC RELIABILITY_SACK: SETH, CC_STATE
* 0xDD RELIABILITY_NACK: NETH
* 0xDE RELIABILITY_PROBE: PETH
"""

from __future__ import annotations

from collections.abc import Sequence

from scapy.fields import BitField, Field, SignedShortField, XBitField
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.packet import Packet, Raw

from emu.wire.codec.mrc import (
    EETH_STATUS,
    ENDPOINT_QP,
    ERTH_OPS,
    FIXED_CHAINS,
    LAYOUTS,
    MRC_ENDPOINT_REQUEST,
    MRC_ENDPOINT_RESPONSE,
    MRC_OPCODES,
    MRC_RELIABILITY_NACK,
    MRC_RELIABILITY_PROBE,
    MRC_RELIABILITY_SACK,
    MRC_TRANSPORT_ACK,
    MRC_WIRE_VERSION,
    NACK_REASONS,
    SACK_M,
    WRITE_IMM_OPCODES,
    WRITE_OPCODES,
    pack_port_states,
    port_state,
    sack_bitmap_from_psns,
    sack_bitmap_psns,
)
from emu.wire.ev import DEFAULT_SPLIT, EVMode, EVSplit, apply_ev
from emu.wire.roce import AETH, BTH, RETH, ROCE_UDP_PORT, ImmDt, _AfterBTH, register_opcode

__all__ = [
    "BTH", "METH", "TSETH", "SETH", "CC_STATE", "NETH", "PETH", "ERTH", "EETH",
    "LAYOUTS", "MRC_WIRE_VERSION", "MRC_OPCODES", "NACK_REASONS", "SACK_M", "ERTH_OPS",
    "EETH_STATUS", "sack_bitmap_psns", "sack_bitmap_from_psns", "port_state",
    "pack_port_states", "header_classes", "write", "transport_ack", "sack", "nack",
    "probe", "endpoint_request", "endpoint_response", "ip6_udp", "srv6_encap",
]


class _EnumBitField(BitField):
    """A BitField that shows a name for known values (scapy's BitEnumField is not a
    BitField subclass, and the codec ≡ scapy harness reads widths from BitFields)."""

    __slots__ = ["enum"]

    def __init__(self, name: str, default: int, size: int, enum: dict[int, str]) -> None:
        super().__init__(name, default, size)
        self.enum = enum

    def i2repr(self, pkt: Packet | None, x: int) -> str:
        return self.enum.get(x, str(x)) if isinstance(x, int) else repr(x)


#: (header, field) -> value names shown by scapy (display only)
_ENUMS: dict[tuple[str, str], dict[int, str]] = {
    ("SETH", "m"): SACK_M,
    ("NETH", "nack_reason"): NACK_REASONS,
    ("ERTH", "op"): ERTH_OPS,
    ("EETH", "op"): ERTH_OPS,
    ("EETH", "status"): EETH_STATUS,
}
#: fields shown in hex
_HEX = {"ev", "sack_bitmap", "port_status_mask", "port_states", "vendor_info"}


def _fields(header: str) -> list[Field]:
    """scapy ``fields_desc`` for ``header`` from :data:`LAYOUTS` (integer fields only)."""
    out: list[Field] = []
    for entry in LAYOUTS[header]:
        name, bits = entry[0], entry[1]
        default = entry[2] if len(entry) > 2 else 0  # type: ignore[misc]
        enum = _ENUMS.get((header, name))
        if bits < 0:
            if bits != -16:
                raise ValueError(f"{header}.{name}: only signed 16-bit fields are supported")
            out.append(SignedShortField(name, default))
        elif enum is not None:
            out.append(_EnumBitField(name, default, bits, enum))
        elif name in _HEX:
            out.append(XBitField(name, default, bits))
        else:
            out.append(BitField(name, default, bits))
    return out


class METH(_AfterBTH):
    """MRC Extended Transport Header (4 B): RQMSN and MSN, in every write packet.

    Writes complete in order by message number although their packets land out
    of order, so each packet names its message.
    """

    name = "METH"
    fields_desc = _fields("METH")


class TSETH(_AfterBTH):
    """Timestamp Extended Transport Header (4 B), only when ``BTH.ts`` is set (128 ns units)."""

    name = "TSETH"
    fields_desc = _fields("TSETH")


class SETH(_AfterBTH):
    """Selective-ACK Extended Transport Header (28 B).

    ``cack_psn`` is the last in-order PSN (inclusive); bit i of ``sack_bitmap``
    (LSB first) acknowledges PSN ``cack_psn + sack_offset + i``. ``ev`` echoes
    the EV of the packet that triggered the SACK and ``m`` tells the sender
    what to do with it (ECN-CE echoed per EV).
    """

    name = "SETH"
    fields_desc = _fields("SETH")

    def psns(self) -> list[int]:
        """PSNs the bitmap acknowledges."""
        return sack_bitmap_psns(self.cack_psn, self.sack_offset, self.sack_bitmap)


class CC_STATE(_AfterBTH):
    """Receiver congestion state (8 B) that follows SETH in every SACK."""

    name = "CC_STATE"
    fields_desc = _fields("CC_STATE")


class NETH(_AfterBTH):
    """NACK Extended Transport Header (20 B): reason (:data:`NACK_REASONS`), PSN, EV echo."""

    name = "NETH"
    fields_desc = _fields("NETH")


class PETH(_AfterBTH):
    """Probe Extended Transport Header (16 B): a background path probe, consumes no PSN."""

    name = "PETH"
    fields_desc = _fields("PETH")


class ERTH(_AfterBTH):
    """Endpoint Request Transport Header (16 B): PORT_STATUS_UPDATE or EV_PROBE.

    Sent to BTH.DestQP 2 with the request id in BTH.PSN[15:0].
    """

    name = "ERTH"
    fields_desc = _fields("ERTH")


class EETH(_AfterBTH):
    """Endpoint response Extended Transport Header (36 B). **emu-defined** layout.

    The spec's contents are not public; see the EETH entry of
    :data:`LAYOUTS` for the field meanings.
    """

    name = "EETH"
    fields_desc = _fields("EETH")

    def port_state(self, port: int) -> int:
        """State of ``port`` (``emu.wire.codec.mrc.PORT_STATES``)."""
        return port_state(self.port_states, port)


#: header name -> scapy class
HEADERS: dict[str, type[Packet]] = {
    c.__name__: c for c in (METH, TSETH, SETH, CC_STATE, NETH, PETH, ERTH, EETH)
}

# --------------------------------------------------------------------------
# Opcode registration (mirrors the codec's FIXED_CHAINS and write chain)
# --------------------------------------------------------------------------

_SCAPY_OF = {"AETH": AETH, **HEADERS}


def header_classes(opcode: int, ts: int = 0) -> tuple[type[Packet], ...]:
    """The scapy headers that follow the BTH of an MRC ``opcode`` (``ts`` = BTH.ts)."""
    if opcode in WRITE_OPCODES:
        chain: list[type[Packet]] = [METH, TSETH, RETH] if ts else [METH, RETH]
        if opcode in WRITE_IMM_OPCODES:
            chain.append(ImmDt)
        return tuple(chain)
    if opcode in FIXED_CHAINS:
        return tuple(_SCAPY_OF[c.NAME] for c in FIXED_CHAINS[opcode])
    raise ValueError(f"0x{opcode:02x} is not an MRC opcode")


for _op, _name in MRC_OPCODES.items():
    if _op in WRITE_OPCODES:
        register_opcode(_op, _name, lambda bth, op=_op: header_classes(op, bth.ts))
    else:
        register_opcode(_op, _name, header_classes(_op))

# --------------------------------------------------------------------------
# Builders (tests, pcaps, ``emu`` tools; the daemons use the codecs)
# --------------------------------------------------------------------------


def _pad(payload: bytes) -> tuple[int, bytes]:
    """(padcount, payload + pad) so the payload ends on a 4-byte boundary."""
    pad = -len(payload) % 4
    return pad, payload + b"\0" * pad


def write(opcode: int, *, dqpn: int, psn: int, rqmsn: int = 0, msn: int = 0, va: int = 0,
          rkey: int = 0, dmalen: int = 0, payload: bytes = b"", imm: int | None = None,
          tx_timestamp: int | None = None, rtx: int = 0, ackreq: int = 0,
          **bth_fields: int) -> Packet:
    """An MRC write packet (BTH … payload, pad, ICRC slot).

    ``tx_timestamp`` given → TS bit set and a TSETH added. ``imm`` is required
    for the _IMM opcodes and refused otherwise.
    """
    if opcode not in WRITE_OPCODES:
        raise ValueError(f"0x{opcode:02x} is not an MRC write opcode")
    if (imm is not None) != (opcode in WRITE_IMM_OPCODES):
        what = "required" if imm is None else "not allowed"
        raise ValueError(f"{MRC_OPCODES[opcode]}: imm {what}")
    padcount, body = _pad(payload)
    ts = 0 if tx_timestamp is None else 1
    pkt = BTH(opcode=opcode, dqpn=dqpn, psn=psn, rtx=rtx, ts=ts, ackreq=ackreq,
              padcount=padcount, **bth_fields) / METH(rqmsn=rqmsn, msn=msn)
    if ts:
        pkt = pkt / TSETH(tx_timestamp=tx_timestamp)
    pkt = pkt / RETH(va=va, rkey=rkey, dmalen=dmalen)
    if imm is not None:
        pkt = pkt / ImmDt(imm=imm)
    return pkt / Raw(body) if body else pkt


def transport_ack(*, dqpn: int, psn: int, syndrome: int = 0, msn: int = 0,
                  **bth_fields: int) -> Packet:
    """An MRC TRANSPORT_ACK (AETH: semantic ACK/NAK, separate from the SACK)."""
    return BTH(opcode=MRC_TRANSPORT_ACK, dqpn=dqpn, psn=psn, **bth_fields) / AETH(
        syndrome=syndrome, msn=msn)


def sack(*, dqpn: int, psn: int = 0, cc: dict[str, int] | None = None,
         bth_fields: dict[str, int] | None = None, **seth: int) -> Packet:
    """A RELIABILITY_SACK: SETH fields as keywords, CC_STATE fields in ``cc``."""
    return (BTH(opcode=MRC_RELIABILITY_SACK, dqpn=dqpn, psn=psn, **(bth_fields or {}))
            / SETH(**seth) / CC_STATE(**(cc or {})))


def nack(*, dqpn: int, psn: int = 0, bth_fields: dict[str, int] | None = None,
         **neth: int) -> Packet:
    """A RELIABILITY_NACK with NETH fields as keywords."""
    return BTH(opcode=MRC_RELIABILITY_NACK, dqpn=dqpn, psn=psn, **(bth_fields or {})) / NETH(**neth)


def probe(*, dqpn: int, psn: int = 0, bth_fields: dict[str, int] | None = None,
          **peth: int) -> Packet:
    """A RELIABILITY_PROBE with PETH fields as keywords (consumes no PSN)."""
    return BTH(opcode=MRC_RELIABILITY_PROBE, dqpn=dqpn, psn=psn,
               **(bth_fields or {})) / PETH(**peth)


def endpoint_request(*, request_id: int, bth_fields: dict[str, int] | None = None,
                     **erth: int) -> Packet:
    """An ENDPOINT_REQUEST to the peer NIC (DestQP 2, PSN[15:0] = request id)."""
    if not 0 <= request_id < 1 << 16:
        raise ValueError(f"request id {request_id} is not 16-bit")
    return (BTH(opcode=MRC_ENDPOINT_REQUEST, dqpn=ENDPOINT_QP, psn=request_id,
                **(bth_fields or {})) / ERTH(**erth))


def endpoint_response(*, request_id: int, bth_fields: dict[str, int] | None = None,
                      **eeth: int) -> Packet:
    """An ENDPOINT_RESPONSE echoing ``request_id`` in BTH.PSN[15:0] and in the EETH."""
    if not 0 <= request_id < 1 << 16:
        raise ValueError(f"request id {request_id} is not 16-bit")
    return (BTH(opcode=MRC_ENDPOINT_RESPONSE, dqpn=ENDPOINT_QP, psn=request_id,
                **(bth_fields or {})) / EETH(request_id=request_id, **eeth))


def ip6_udp(src: str, dst: str, ev: int = 0, mode: EVMode | str = EVMode.STEV,
            split: EVSplit = DEFAULT_SPLIT, *, dport: int = ROCE_UDP_PORT,
            hlim: int = 64) -> Packet:
    """IPv6/UDP headers for an MRC packet with ``ev`` placed per ``mode``/``split``."""
    pkt = IPv6(src=src, dst=dst, hlim=hlim) / UDP(dport=dport)
    return apply_ev(pkt, ev, mode, split, reseal=False)


def srv6_encap(inner: Packet, *, outer_src: str, outer_dst: str,
               segments: Sequence[str] | None = None, hlim: int = 64) -> Packet:
    """Wrap an inner IPv6 MRC packet for SRv6: outer IPv6 [+ SRH] + inner.

    ``outer_dst`` carries the uSID path; ``segments`` (optional) adds a
    single SRH listing them (last hop first, as on the wire). The ICRC stays
    computed over the inner packet only, so it survives per-hop rewrites of
    the outer header.
    """
    outer = IPv6(src=outer_src, dst=outer_dst, hlim=hlim)
    if segments:
        segs = list(segments)
        outer = outer / IPv6ExtHdrSegmentRouting(addresses=segs, segleft=len(segs) - 1,
                                                 lastentry=len(segs) - 1, nh=41)
    else:
        outer.nh = 41
    return outer / inner

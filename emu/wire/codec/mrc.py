# SPDX-License-Identifier: GPL-2.0-only
"""MRC wire layouts (the one table) and their struct codecs.

The MRC 1.0 spec text is not reachable; the layouts come from two third-party
reconstructions that agree (``specs/mrc.md``). They are **provisional**, so
every bit of every MRC extension header is declared once, in :data:`LAYOUTS`,
with :data:`MRC_WIRE_VERSION` naming the revision of that table. The scapy
layers (:mod:`emu.wire.mrc`) are *generated* from it; the codec classes below
take their ``WIDTHS`` from it and pack by hand (a generic interpreter costs
several times the ``struct`` call, ``_base.py``). The tests hold codec and
scapy against each other field by field, so correcting a layout means: edit
:data:`LAYOUTS`, bump :data:`MRC_WIRE_VERSION`, fix the one ``pack_into`` /
``decode`` pair the tests point at.

The table lives here and not in :mod:`emu.wire.mrc` because the daemons and the
sans-IO transports import this module and must not import scapy.

Importing this module registers the MRC opcodes with
:func:`emu.wire.codec.roce.register_chain`, so
:func:`emu.wire.codec.roce.decode_packet` decodes MRC packets too (the package
``emu.wire.codec`` imports it for that reason).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from emu.wire.codec._base import Header
from emu.wire.codec.roce import AETH, BTH, RETH, ImmDt, register_chain
from emu.wire.errors import need

#: Revision of :data:`LAYOUTS`. Bump on any layout change; daemons put it in
#: their config and refuse a peer whose version differs.
MRC_WIRE_VERSION = 1

#: header -> ((field, bits[, default]), ...) in wire order, MSB first.
#: Negative bits = signed two's complement of that width. ``rsvd*`` fields are
#: reserved: sent as zero, ignored on receipt, but kept so that every bit is
#: named and the codec ≡ scapy check covers the whole header.
LAYOUTS: dict[str, tuple[tuple[str, int] | tuple[str, int, int], ...]] = {
    # METH (4 B): message sequence numbers of the write this packet belongs to.
    "METH": (("rqmsn", 16), ("msn", 16)),
    # TSETH (4 B): sender timestamp, 128 ns units; ftype 1 = this format.
    "TSETH": (("tx_timestamp", 16), ("tsr", 1), ("rsvd", 11), ("ftype", 4, 1)),
    # SETH (28 B): selective ACK. Flags word: M in bits 6:5, PR in bit 1.
    "SETH": (
        ("rsvd0", 9), ("m", 2), ("rsvd1", 3), ("pr", 1), ("rsvd2", 1),
        ("ack_psn_offset", -16),
        ("ev", 32),
        ("spdcid", 16), ("dpdcid", 16),
        ("rsvd3", 8), ("cack_psn", 24),
        ("cc_type", 4), ("cc_flags", 4), ("mpr", 8), ("sack_offset", -16),
        ("sack_bitmap", 64),
    ),
    # CC_STATE (8 B): receiver congestion state, follows SETH in a SACK.
    "CC_STATE": (
        ("tx_timestamp", 16),
        ("rsvd", 1), ("ooo_count", 15),
        ("r_c", 1), ("rcv_cwnd_pen", 7), ("rcvd_bytes", 24),
    ),
    # NETH (20 B): reliability NACK.
    "NETH": (
        ("flags", 16), ("nack_reason", 8), ("vendor_info", 8),
        ("ev", 32),
        ("spdcid", 16), ("dpdcid", 16),
        ("rsvd0", 8), ("nack_psn", 24),
        ("cc_type", 4), ("cc_flags", 4), ("rsvd1", 8), ("tx_timestamp", 16),
    ),
    # PETH (16 B): reliability probe (consumes no PSN; answered by SACK PR=1).
    "PETH": (
        ("rsvd0", 24), ("vendor_info", 8),
        ("probe_id", 16), ("rsvd1", 16),
        ("spdcid", 16), ("dpdcid", 16),
        ("tx_timestamp", 16), ("tsr", 1), ("rsvd2", 11), ("ftype", 4, 1),
    ),
    # ERTH (16 B): endpoint request. The page puts op in the low 2 bits of
    # byte 1 and lists vendor_info next without an offset; we place it at
    # byte 3 as in PETH and NETH (byte 2 reserved). BTH.DestQP = 2 and
    # BTH.PSN[15:0] = request id.
    "ERTH": (
        ("rsvd0", 8), ("rsvd1", 6), ("op", 2), ("rsvd2", 8), ("vendor_info", 8),
        ("port_status_mask", 32),
        ("rsvd3", 32),
        ("tx_timestamp", 16), ("tsr", 1), ("rsvd4", 11), ("ftype", 4, 1),
    ),
    # EETH (36 B): endpoint response. Contents are not public: emu-defined.
    #   0  rsvd0 u8 | rsvd1:6 op:2 (echo of ERTH.op) | status u8 | vendor_info u8
    #   4  request_id u16 (echo of the request's BTH.PSN[15:0])
    #   6  num_ports u8 (responder's NIC ports, 0 = not reported) | rsvd2 u8
    #   8  port_status_mask u32 (responder's ports that are up, bit i = port i)
    #   12 ev u32 (EV the request arrived on, from its sport/flow label: an
    #      EV_PROBE answer tells the sender this path works, as SACK/NACK do)
    #   16 tx_timestamp u16 (ERTH.tx_timestamp reflected, for RTT) | rsvd3 u16
    #   20 port_states u128: 4 bits per port, port i in bits 4i+3..4i
    #      (PORT_STATES); up to 32 ports like port_status_mask
    "EETH": (
        ("rsvd0", 8), ("rsvd1", 6), ("op", 2), ("status", 8), ("vendor_info", 8),
        ("request_id", 16), ("num_ports", 8), ("rsvd2", 8),
        ("port_status_mask", 32),
        ("ev", 32),
        ("tx_timestamp", 16), ("rsvd3", 16),
        ("port_states", 128),
    ),
}

# --------------------------------------------------------------------------
# Opcodes and code points
# --------------------------------------------------------------------------

#: opcode -> name (BTH opcode byte, manufacturer-specific range 0xC0-0xDF)
MRC_OPCODES: dict[int, str] = {
    0xC6: "MRC_WRITE_FIRST",
    0xC7: "MRC_WRITE_MIDDLE",
    0xC8: "MRC_WRITE_LAST",
    0xC9: "MRC_WRITE_LAST_IMM",
    0xCA: "MRC_WRITE_ONLY",
    0xCB: "MRC_WRITE_ONLY_IMM",
    0xD1: "MRC_TRANSPORT_ACK",
    0xD8: "MRC_ENDPOINT_REQUEST",
    0xD9: "MRC_ENDPOINT_RESPONSE",
    0xDC: "MRC_RELIABILITY_SACK",
    0xDD: "MRC_RELIABILITY_NACK",
    0xDE: "MRC_RELIABILITY_PROBE",
}
#: name -> opcode, e.g. ``OPCODES["MRC_WRITE_ONLY"] == 0xCA``
OPCODES: dict[str, int] = {v: k for k, v in MRC_OPCODES.items()}
MRC_WRITE_FIRST, MRC_WRITE_MIDDLE, MRC_WRITE_LAST = 0xC6, 0xC7, 0xC8
MRC_WRITE_LAST_IMM, MRC_WRITE_ONLY, MRC_WRITE_ONLY_IMM = 0xC9, 0xCA, 0xCB
MRC_TRANSPORT_ACK = 0xD1
MRC_ENDPOINT_REQUEST, MRC_ENDPOINT_RESPONSE = 0xD8, 0xD9
MRC_RELIABILITY_SACK, MRC_RELIABILITY_NACK, MRC_RELIABILITY_PROBE = 0xDC, 0xDD, 0xDE
#: write opcodes that carry an ImmDt after the RETH
WRITE_IMM_OPCODES = frozenset({MRC_WRITE_LAST_IMM, MRC_WRITE_ONLY_IMM})
WRITE_OPCODES = frozenset(range(0xC6, 0xCC))

#: BTH.DestQP of endpoint requests/responses (they address the NIC, not a QP)
ENDPOINT_QP = 2

#: NETH.nack_reason (same code points as UET)
NACK_REASONS: dict[int, str] = {
    0x01: "TRIMMED",
    0x02: "TRIMMED_LASTHOP",
    0x06: "NO_BITMAP",
    0x07: "NO_PKT_BUFFER",
    0x0A: "NO_RESOURCE",
    0x0B: "PSN_OOR_WINDOW",
    0x19: "UNEXP_EVENT",
}
NACK_TRIMMED, NACK_TRIMMED_LASTHOP, NACK_NO_BITMAP, NACK_NO_PKT_BUFFER = 0x01, 0x02, 0x06, 0x07
NACK_NO_RESOURCE, NACK_PSN_OOR_WINDOW, NACK_UNEXP_EVENT = 0x0A, 0x0B, 0x19

#: SETH.m: what the sender should do with the echoed EV
SACK_M: dict[int, str] = {0: "NONE", 1: "SKIP_ONCE", 2: "ALWAYS_SKIP"}
SACK_M_NONE, SACK_M_SKIP_ONCE, SACK_M_ALWAYS_SKIP = 0, 1, 2

#: ERTH.op / EETH.op
ERTH_OPS: dict[int, str] = {0: "PORT_STATUS_UPDATE", 1: "EV_PROBE"}
ERTH_PORT_STATUS_UPDATE, ERTH_EV_PROBE = 0, 1

#: EETH.status (emu-defined)
EETH_STATUS: dict[int, str] = {0: "OK", 1: "UNSUPPORTED_OP", 2: "REJECTED", 3: "NO_RESOURCE"}
EETH_OK, EETH_UNSUPPORTED_OP, EETH_REJECTED, EETH_NO_RESOURCE = 0, 1, 2, 3

#: EETH.port_states nibble values (emu-defined)
PORT_STATES: dict[int, str] = {0: "ABSENT", 1: "UP", 2: "DOWN", 3: "DEGRADED"}
PORT_ABSENT, PORT_UP, PORT_DOWN, PORT_DEGRADED = 0, 1, 2, 3
MAX_PORTS = 32

#: TSETH/PETH/ERTH ftype of the 16-bit 128 ns timestamp format
TS_FTYPE = 1
#: TSETH timestamp unit
TS_UNIT_NS = 128
#: SETH.mpr unit (PSNs)
MPR_UNIT = 128
#: CC_STATE.rcvd_bytes unit (bytes)
RCVD_BYTES_UNIT = 256

PSN_MOD = 1 << 24
SACK_BITMAP_BITS = 64


def layout_widths(header: str) -> tuple[int, ...]:
    """Bits per field of ``header`` in wire order (negative = signed)."""
    return tuple(f[1] for f in LAYOUTS[header])


def layout_names(header: str) -> tuple[str, ...]:
    """Field names of ``header`` in wire order."""
    return tuple(f[0] for f in LAYOUTS[header])


def layout_defaults(header: str) -> dict[str, int]:
    """Non-zero field defaults of ``header`` (e.g. ``ftype=1``)."""
    return {f[0]: f[2] for f in LAYOUTS[header] if len(f) > 2}  # type: ignore[misc]


# --------------------------------------------------------------------------
# SACK bitmap and EETH helpers (pure: the transports use them)
# --------------------------------------------------------------------------

def sack_bitmap_psns(cack: int, offset: int, bitmap: int) -> list[int]:
    """PSNs a SACK bitmap acknowledges, ascending from its base.

    Bit i (LSB first) stands for PSN ``cack + offset + i`` modulo 2^24; the
    cumulative ack itself (``cack``, inclusive) is not listed. Why a function:
    the LSB-first, signed-offset, wrap-around rule is easy to get subtly wrong
    in two places (sender and receiver) — both use this one.
    """
    if not 0 <= cack < PSN_MOD:
        raise ValueError(f"cack_psn {cack} is not a 24-bit PSN")
    if not -(1 << 15) <= offset < (1 << 15):
        raise ValueError(f"sack_offset {offset} does not fit in a signed 16-bit field")
    if not 0 <= bitmap < (1 << SACK_BITMAP_BITS):
        raise ValueError(f"sack_bitmap {bitmap:#x} is not a 64-bit value")
    base = cack + offset
    out = []
    i = 0
    while bitmap:
        if bitmap & 1:
            out.append((base + i) % PSN_MOD)
        bitmap >>= 1
        i += 1
    return out


def sack_bitmap_from_psns(cack: int, offset: int, psns: Iterable[int]) -> int:
    """The 64-bit bitmap for ``psns`` relative to base ``cack + offset`` (inverse of above).

    Raises ValueError for a PSN outside the 64-PSN window the bitmap covers.
    """
    base = (cack + offset) % PSN_MOD
    bitmap = 0
    for psn in psns:
        i = (psn - base) % PSN_MOD
        if i >= SACK_BITMAP_BITS:
            raise ValueError(f"PSN {psn} is outside the SACK window [{base}, {base}+64)")
        bitmap |= 1 << i
    return bitmap


def port_state(port_states: int, port: int) -> int:
    """State nibble of ``port`` in an EETH ``port_states`` value (see :data:`PORT_STATES`)."""
    if not 0 <= port < MAX_PORTS:
        raise ValueError(f"port {port} outside 0..{MAX_PORTS - 1}")
    return (port_states >> (4 * port)) & 0xF


def pack_port_states(states: dict[int, int] | Iterable[int]) -> int:
    """Build EETH ``port_states`` from {port: state} or a per-port sequence."""
    items = states.items() if isinstance(states, dict) else enumerate(states)
    out = 0
    for port, state in items:
        if not 0 <= port < MAX_PORTS:
            raise ValueError(f"port {port} outside 0..{MAX_PORTS - 1}")
        if not 0 <= state < 16:
            raise ValueError(f"port state {state} does not fit in 4 bits")
        out |= state << (4 * port)
    return out


# --------------------------------------------------------------------------
# Codec headers
# --------------------------------------------------------------------------

_HH = struct.Struct("!HH")
_SETH = struct.Struct("!HhIHHIBBhQ")
_CC = struct.Struct("!HHI")
_NETH = struct.Struct("!HBBIHHIBBH")
_PETH = struct.Struct("!IHHHHHH")
_ERTH = struct.Struct("!BBBBIIHH")
_EETH = struct.Struct("!BBBBHBBIIHHQQ")
_M64 = (1 << 64) - 1


@dataclass(slots=True)
class METH(Header):
    """MRC Extended Transport Header (4 B): RQMSN and MSN of the message."""

    NAME: ClassVar[str] = "METH"
    SIZE: ClassVar[int] = 4
    WIDTHS: ClassVar[tuple[int, ...]] = layout_widths("METH")

    rqmsn: int = 0
    msn: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _HH.pack_into(buf, offset, self.rqmsn, self.msn)
        return offset + 4

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> METH:
        need("METH", buf, offset, 4)
        return cls._trusted(*_HH.unpack_from(buf, offset))


@dataclass(slots=True)
class TSETH(Header):
    """Timestamp Extended Transport Header (4 B), present when ``BTH.ts`` is set."""

    NAME: ClassVar[str] = "TSETH"
    SIZE: ClassVar[int] = 4
    WIDTHS: ClassVar[tuple[int, ...]] = layout_widths("TSETH")

    tx_timestamp: int = 0
    tsr: int = 0
    rsvd: int = 0
    ftype: int = TS_FTYPE

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _HH.pack_into(buf, offset, self.tx_timestamp,
                      (self.tsr << 15) | (self.rsvd << 4) | self.ftype)
        return offset + 4

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> TSETH:
        need("TSETH", buf, offset, 4)
        ts, w = _HH.unpack_from(buf, offset)
        return cls._trusted(ts, w >> 15, (w >> 4) & 0x7FF, w & 0xF)


@dataclass(slots=True)
class SETH(Header):
    """Selective-ACK Extended Transport Header (28 B): cumulative ack, bitmap, EV echo."""

    NAME: ClassVar[str] = "SETH"
    SIZE: ClassVar[int] = 28
    WIDTHS: ClassVar[tuple[int, ...]] = layout_widths("SETH")

    rsvd0: int = 0
    m: int = 0
    rsvd1: int = 0
    pr: int = 0
    rsvd2: int = 0
    ack_psn_offset: int = 0
    ev: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    rsvd3: int = 0
    cack_psn: int = 0
    cc_type: int = 0
    cc_flags: int = 0
    mpr: int = 0
    sack_offset: int = 0
    sack_bitmap: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _SETH.pack_into(
            buf, offset,
            (self.rsvd0 << 7) | (self.m << 5) | (self.rsvd1 << 2) | (self.pr << 1) | self.rsvd2,
            self.ack_psn_offset, self.ev, self.spdcid, self.dpdcid,
            (self.rsvd3 << 24) | self.cack_psn,
            (self.cc_type << 4) | self.cc_flags, self.mpr, self.sack_offset, self.sack_bitmap,
        )
        return offset + 28

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> SETH:
        need("SETH", buf, offset, 28)
        fl, apo, ev, sp, dp, w, cc, mpr, so, bm = _SETH.unpack_from(buf, offset)
        return cls._trusted(fl >> 7, (fl >> 5) & 3, (fl >> 2) & 7, (fl >> 1) & 1, fl & 1,
                   apo, ev, sp, dp, w >> 24, w & 0xFFFFFF, cc >> 4, cc & 0xF, mpr, so, bm)

    def psns(self) -> list[int]:
        """PSNs this SACK's bitmap acknowledges (:func:`sack_bitmap_psns`)."""
        return sack_bitmap_psns(self.cack_psn, self.sack_offset, self.sack_bitmap)


@dataclass(slots=True)
class CC_STATE(Header):
    """Congestion-control state (8 B) that follows SETH in every SACK."""

    NAME: ClassVar[str] = "CC_STATE"
    SIZE: ClassVar[int] = 8
    WIDTHS: ClassVar[tuple[int, ...]] = layout_widths("CC_STATE")

    tx_timestamp: int = 0
    rsvd: int = 0
    ooo_count: int = 0
    r_c: int = 0
    rcv_cwnd_pen: int = 0
    rcvd_bytes: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _CC.pack_into(buf, offset, self.tx_timestamp, (self.rsvd << 15) | self.ooo_count,
                      (self.r_c << 31) | (self.rcv_cwnd_pen << 24) | self.rcvd_bytes)
        return offset + 8

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> CC_STATE:
        need("CC_STATE", buf, offset, 8)
        ts, w1, w2 = _CC.unpack_from(buf, offset)
        return cls._trusted(ts, w1 >> 15, w1 & 0x7FFF, w2 >> 31, (w2 >> 24) & 0x7F, w2 & 0xFFFFFF)


@dataclass(slots=True)
class NETH(Header):
    """NACK Extended Transport Header (20 B): reason, NACKed PSN, EV echo."""

    NAME: ClassVar[str] = "NETH"
    SIZE: ClassVar[int] = 20
    WIDTHS: ClassVar[tuple[int, ...]] = layout_widths("NETH")

    flags: int = 0
    nack_reason: int = 0
    vendor_info: int = 0
    ev: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    rsvd0: int = 0
    nack_psn: int = 0
    cc_type: int = 0
    cc_flags: int = 0
    rsvd1: int = 0
    tx_timestamp: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _NETH.pack_into(
            buf, offset, self.flags, self.nack_reason, self.vendor_info, self.ev,
            self.spdcid, self.dpdcid, (self.rsvd0 << 24) | self.nack_psn,
            (self.cc_type << 4) | self.cc_flags, self.rsvd1, self.tx_timestamp,
        )
        return offset + 20

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> NETH:
        need("NETH", buf, offset, 20)
        fl, reason, vi, ev, sp, dp, w, cc, r1, ts = _NETH.unpack_from(buf, offset)
        return cls._trusted(
            fl, reason, vi, ev, sp, dp, w >> 24, w & 0xFFFFFF, cc >> 4, cc & 0xF, r1, ts)


@dataclass(slots=True)
class PETH(Header):
    """Probe Extended Transport Header (16 B)."""

    NAME: ClassVar[str] = "PETH"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = layout_widths("PETH")

    rsvd0: int = 0
    vendor_info: int = 0
    probe_id: int = 0
    rsvd1: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    tx_timestamp: int = 0
    tsr: int = 0
    rsvd2: int = 0
    ftype: int = TS_FTYPE

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _PETH.pack_into(
            buf, offset, (self.rsvd0 << 8) | self.vendor_info, self.probe_id, self.rsvd1,
            self.spdcid, self.dpdcid, self.tx_timestamp,
            (self.tsr << 15) | (self.rsvd2 << 4) | self.ftype,
        )
        return offset + 16

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> PETH:
        need("PETH", buf, offset, 16)
        w0, pid, r1, sp, dp, ts, w = _PETH.unpack_from(buf, offset)
        return cls._trusted(
            w0 >> 8, w0 & 0xFF, pid, r1, sp, dp, ts, w >> 15, (w >> 4) & 0x7FF, w & 0xF)


@dataclass(slots=True)
class ERTH(Header):
    """Endpoint Request Transport Header (16 B): port status update or EV probe."""

    NAME: ClassVar[str] = "ERTH"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = layout_widths("ERTH")

    rsvd0: int = 0
    rsvd1: int = 0
    op: int = 0
    rsvd2: int = 0
    vendor_info: int = 0
    port_status_mask: int = 0
    rsvd3: int = 0
    tx_timestamp: int = 0
    tsr: int = 0
    rsvd4: int = 0
    ftype: int = TS_FTYPE

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _ERTH.pack_into(
            buf, offset, self.rsvd0, (self.rsvd1 << 2) | self.op, self.rsvd2, self.vendor_info,
            self.port_status_mask, self.rsvd3, self.tx_timestamp,
            (self.tsr << 15) | (self.rsvd4 << 4) | self.ftype,
        )
        return offset + 16

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> ERTH:
        need("ERTH", buf, offset, 16)
        r0, b1, r2, vi, psm, r3, ts, w = _ERTH.unpack_from(buf, offset)
        return cls._trusted(
            r0, b1 >> 2, b1 & 3, r2, vi, psm, r3, ts, w >> 15, (w >> 4) & 0x7FF, w & 0xF)


@dataclass(slots=True)
class EETH(Header):
    """Endpoint response Extended Transport Header (36 B), emu-defined (see LAYOUTS)."""

    NAME: ClassVar[str] = "EETH"
    SIZE: ClassVar[int] = 36
    WIDTHS: ClassVar[tuple[int, ...]] = layout_widths("EETH")

    rsvd0: int = 0
    rsvd1: int = 0
    op: int = 0
    status: int = 0
    vendor_info: int = 0
    request_id: int = 0
    num_ports: int = 0
    rsvd2: int = 0
    port_status_mask: int = 0
    ev: int = 0
    tx_timestamp: int = 0
    rsvd3: int = 0
    port_states: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _EETH.pack_into(
            buf, offset, self.rsvd0, (self.rsvd1 << 2) | self.op, self.status, self.vendor_info,
            self.request_id, self.num_ports, self.rsvd2, self.port_status_mask, self.ev,
            self.tx_timestamp, self.rsvd3, self.port_states >> 64, self.port_states & _M64,
        )
        return offset + 36

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> EETH:
        need("EETH", buf, offset, 36)
        r0, b1, st, vi, rid, n, r2, psm, ev, ts, r3, hi, lo = _EETH.unpack_from(buf, offset)
        return cls._trusted(
            r0, b1 >> 2, b1 & 3, st, vi, rid, n, r2, psm, ev, ts, r3, (hi << 64) | lo)

    def port_state(self, port: int) -> int:
        """State of ``port`` (:data:`PORT_STATES`)."""
        return port_state(self.port_states, port)


#: header name -> codec class (for ``emu dissect`` and the tests)
HEADERS: dict[str, type[Header]] = {
    c.NAME: c for c in (METH, TSETH, SETH, CC_STATE, NETH, PETH, ERTH, EETH)
}


# --------------------------------------------------------------------------
# Opcode -> header chain (mirrors emu.wire.mrc)
# --------------------------------------------------------------------------

_WRITE = (METH, RETH)
_WRITE_TS = (METH, TSETH, RETH)
_WRITE_IMM = (METH, RETH, ImmDt)
_WRITE_IMM_TS = (METH, TSETH, RETH, ImmDt)


def _write_chain(bth: BTH) -> tuple[type[Header], ...]:
    """Writes: METH, TSETH only when ``bth.ts``, RETH, ImmDt for the _IMM opcodes."""
    if bth.opcode in WRITE_IMM_OPCODES:
        return _WRITE_IMM_TS if bth.ts else _WRITE_IMM
    return _WRITE_TS if bth.ts else _WRITE


#: opcode -> fixed chain, for the non-write opcodes
FIXED_CHAINS: dict[int, tuple[type[Header], ...]] = {
    MRC_TRANSPORT_ACK: (AETH,),
    MRC_ENDPOINT_REQUEST: (ERTH,),
    MRC_ENDPOINT_RESPONSE: (EETH,),
    MRC_RELIABILITY_SACK: (SETH, CC_STATE),
    MRC_RELIABILITY_NACK: (NETH,),
    MRC_RELIABILITY_PROBE: (PETH,),
}

for _op in sorted(WRITE_OPCODES):
    register_chain(_op, _write_chain, MRC_OPCODES[_op])
for _op, _chain in FIXED_CHAINS.items():
    register_chain(_op, _chain, MRC_OPCODES[_op])

# SPDX-License-Identifier: GPL-2.0-only
"""struct codecs for RoCEv2 headers and whole RoCEv2 UDP payloads.

Mirrors :mod:`emu.wire.roce` (the scapy reference) field for field. MRC shares
the :class:`BTH`; its headers live in :mod:`emu.wire.codec.mrc`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from emu.wire.codec._base import Header
from emu.wire.errors import DecodeError, need

_BTH = struct.Struct("!BBHII")
_RETH = struct.Struct("!QII")
_U32 = struct.Struct("!I")
_ATOMIC = struct.Struct("!QIQQ")
_U64 = struct.Struct("!Q")
_DETH = struct.Struct("!II")
_CNP = struct.Struct("!QQ")

ICRC_SIZE = 4

TRANSPORT_PREFIX = {"RC": 0x00, "UC": 0x20, "UD": 0x60}

#: operation (low 5 bits) -> name, as in ``specs/rocev2.md``
OPERATIONS = {
    0x00: "SEND_FIRST",
    0x01: "SEND_MIDDLE",
    0x02: "SEND_LAST",
    0x03: "SEND_LAST_IMM",
    0x04: "SEND_ONLY",
    0x05: "SEND_ONLY_IMM",
    0x06: "WRITE_FIRST",
    0x07: "WRITE_MIDDLE",
    0x08: "WRITE_LAST",
    0x09: "WRITE_LAST_IMM",
    0x0A: "WRITE_ONLY",
    0x0B: "WRITE_ONLY_IMM",
    0x0C: "READ_REQUEST",
    0x0D: "READ_RESP_FIRST",
    0x0E: "READ_RESP_MIDDLE",
    0x0F: "READ_RESP_LAST",
    0x10: "READ_RESP_ONLY",
    0x11: "ACKNOWLEDGE",
    0x12: "ATOMIC_ACK",
    0x13: "CMP_SWAP",
    0x14: "FETCH_ADD",
    0x16: "SEND_LAST_INV",
    0x17: "SEND_ONLY_INV",
}

#: which operations each transport has (IBTA 9.2: UC has sends and writes, UD only SEND_ONLY[_IMM])
TRANSPORT_OPERATIONS = {
    "RC": tuple(OPERATIONS),
    "UC": tuple(range(0x00, 0x0C)),
    "UD": (0x04, 0x05),
}

CNP_OPCODE = 0x81

# AETH syndrome (specs/rocev2.md)
AETH_ACK, AETH_RNR_NAK, AETH_NAK = 0, 1, 3
NAK_CODES = {
    0: "PSN_SEQUENCE_ERROR",
    1: "INVALID_REQUEST",
    2: "REMOTE_ACCESS_ERROR",
    3: "REMOTE_OPERATIONAL_ERROR",
    4: "INVALID_RD_REQUEST",
}


def aeth_syndrome(kind: int, value: int) -> int:
    """Build an AETH syndrome byte: ``kind`` (ACK/RNR_NAK/NAK) in bits 6:5, ``value`` in 4:0."""
    return ((kind & 0x3) << 5) | (value & 0x1F)


def aeth_kind(syndrome: int) -> tuple[int, int]:
    """Split an AETH syndrome into (kind, value): ACK credit, RNR timer code or NAK code."""
    return (syndrome >> 5) & 0x3, syndrome & 0x1F


def opcode_name(opcode: int) -> str:
    """``RC_WRITE_ONLY``, ``CNP``, an MRC name once registered, else ``0xNN``."""
    return OPCODE_NAMES.get(opcode, f"0x{opcode:02x}")


def aeth_meaning(syndrome: int) -> str:
    """Read an AETH syndrome: ``ACK``, ``RNR_NAK(timer=14)``, ``NAK(REMOTE_ACCESS_ERROR)``."""
    kind, value = aeth_kind(syndrome)
    if kind == AETH_ACK:
        return "ACK"
    if kind == AETH_RNR_NAK:
        return f"RNR_NAK(timer={value})"
    if kind == AETH_NAK:
        return f"NAK({NAK_CODES.get(value, value)})"
    return f"RESERVED(0x{syndrome:02x})"



@dataclass(slots=True)
class BTH(Header):
    """Base Transport Header (12 B); byte 8 carries MRC's RTX and TS bits."""

    NAME: ClassVar[str] = "BTH"
    SIZE: ClassVar[int] = 12
    WIDTHS: ClassVar[tuple[int, ...]] = (8, 1, 1, 2, 4, 16, 1, 1, 6, 24, 1, 1, 1, 1, 4, 24)

    opcode: int = 0
    solicited: int = 0
    migreq: int = 0
    padcount: int = 0
    version: int = 0
    pkey: int = 0xFFFF
    fecn: int = 0
    becn: int = 0
    resv6: int = 0
    dqpn: int = 0
    ackreq: int = 0
    resv1: int = 0
    rtx: int = 0
    ts: int = 0
    resv4: int = 0
    psn: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _BTH.pack_into(
            buf, offset, self.opcode,
            (self.solicited << 7) | (self.migreq << 6) | (self.padcount << 4) | self.version,
            self.pkey,
            (self.fecn << 31) | (self.becn << 30) | (self.resv6 << 24) | self.dqpn,
            (self.ackreq << 31) | (self.resv1 << 30) | (self.rtx << 29) | (self.ts << 28)
            | (self.resv4 << 24) | self.psn,
        )
        return offset + 12

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> BTH:
        need("BTH", buf, offset, 12)
        op, b1, pkey, w2, w3 = _BTH.unpack_from(buf, offset)
        return cls._trusted(op, b1 >> 7, (b1 >> 6) & 1, (b1 >> 4) & 3, b1 & 0xF, pkey,
                   w2 >> 31, (w2 >> 30) & 1, (w2 >> 24) & 0x3F, w2 & 0xFFFFFF,
                   w3 >> 31, (w3 >> 30) & 1, (w3 >> 29) & 1, (w3 >> 28) & 1, (w3 >> 24) & 0xF,
                   w3 & 0xFFFFFF)


@dataclass(slots=True)
class RETH(Header):
    """RDMA Extended Transport Header (16 B)."""

    NAME: ClassVar[str] = "RETH"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = (64, 32, 32)

    va: int = 0
    rkey: int = 0
    dmalen: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _RETH.pack_into(buf, offset, self.va, self.rkey, self.dmalen)
        return offset + 16

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> RETH:
        need("RETH", buf, offset, 16)
        return cls._trusted(*_RETH.unpack_from(buf, offset))


@dataclass(slots=True)
class AETH(Header):
    """ACK Extended Transport Header (4 B)."""

    NAME: ClassVar[str] = "AETH"
    SIZE: ClassVar[int] = 4
    WIDTHS: ClassVar[tuple[int, ...]] = (8, 24)

    syndrome: int = 0
    msn: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _U32.pack_into(buf, offset, (self.syndrome << 24) | self.msn)
        return offset + 4

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> AETH:
        need("AETH", buf, offset, 4)
        (w,) = _U32.unpack_from(buf, offset)
        return cls._trusted(w >> 24, w & 0xFFFFFF)


@dataclass(slots=True)
class ImmDt(Header):
    """Immediate data (4 B)."""

    NAME: ClassVar[str] = "ImmDt"
    SIZE: ClassVar[int] = 4
    WIDTHS: ClassVar[tuple[int, ...]] = (32,)

    imm: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _U32.pack_into(buf, offset, self.imm)
        return offset + 4

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> ImmDt:
        need("ImmDt", buf, offset, 4)
        return cls._trusted(*_U32.unpack_from(buf, offset))


@dataclass(slots=True)
class IETH(Header):
    """Invalidate Extended Transport Header (4 B)."""

    NAME: ClassVar[str] = "IETH"
    SIZE: ClassVar[int] = 4
    WIDTHS: ClassVar[tuple[int, ...]] = (32,)

    rkey: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _U32.pack_into(buf, offset, self.rkey)
        return offset + 4

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> IETH:
        need("IETH", buf, offset, 4)
        return cls._trusted(*_U32.unpack_from(buf, offset))


@dataclass(slots=True)
class AtomicETH(Header):
    """Atomic Extended Transport Header (28 B)."""

    NAME: ClassVar[str] = "AtomicETH"
    SIZE: ClassVar[int] = 28
    WIDTHS: ClassVar[tuple[int, ...]] = (64, 32, 64, 64)

    va: int = 0
    rkey: int = 0
    swap_add: int = 0
    compare: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _ATOMIC.pack_into(buf, offset, self.va, self.rkey, self.swap_add, self.compare)
        return offset + 28

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> AtomicETH:
        need("AtomicETH", buf, offset, 28)
        return cls._trusted(*_ATOMIC.unpack_from(buf, offset))


@dataclass(slots=True)
class AtomicAckETH(Header):
    """Atomic ACK Extended Transport Header (8 B)."""

    NAME: ClassVar[str] = "AtomicAckETH"
    SIZE: ClassVar[int] = 8
    WIDTHS: ClassVar[tuple[int, ...]] = (64,)

    orig_data: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _U64.pack_into(buf, offset, self.orig_data)
        return offset + 8

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> AtomicAckETH:
        need("AtomicAckETH", buf, offset, 8)
        return cls._trusted(*_U64.unpack_from(buf, offset))


@dataclass(slots=True)
class DETH(Header):
    """Datagram Extended Transport Header (8 B)."""

    NAME: ClassVar[str] = "DETH"
    SIZE: ClassVar[int] = 8
    WIDTHS: ClassVar[tuple[int, ...]] = (32, 8, 24)

    qkey: int = 0
    resv8: int = 0
    src_qp: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _DETH.pack_into(buf, offset, self.qkey, (self.resv8 << 24) | self.src_qp)
        return offset + 8

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> DETH:
        need("DETH", buf, offset, 8)
        qkey, w = _DETH.unpack_from(buf, offset)
        return cls._trusted(qkey, w >> 24, w & 0xFFFFFF)


@dataclass(slots=True)
class CNPPadding(Header):
    """The 16 reserved bytes of a CNP."""

    NAME: ClassVar[str] = "CNPPadding"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = (64, 64)

    reserved1: int = 0
    reserved2: int = 0

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        _CNP.pack_into(buf, offset, self.reserved1, self.reserved2)
        return offset + 16

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> CNPPadding:
        need("CNPPadding", buf, offset, 16)
        return cls._trusted(*_CNP.unpack_from(buf, offset))


# --------------------------------------------------------------------------
# Opcode -> header chain (mirrors emu.wire.roce.OPCODE_CHAINS)
# --------------------------------------------------------------------------

#: operation (low 5 bits) -> headers after the BTH (RC/UC); UD puts a DETH first.
#: The one table: the scapy layers derive theirs from it by header name.
OPERATION_CHAINS: dict[int, tuple[type[Header], ...]] = {
    0x00: (), 0x01: (), 0x02: (), 0x03: (ImmDt,), 0x04: (), 0x05: (ImmDt,),
    0x06: (RETH,), 0x07: (), 0x08: (), 0x09: (ImmDt,), 0x0A: (RETH,), 0x0B: (RETH, ImmDt),
    0x0C: (RETH,),
    0x0D: (AETH,), 0x0E: (), 0x0F: (AETH,), 0x10: (AETH,),
    0x11: (AETH,), 0x12: (AETH, AtomicAckETH),
    0x13: (AtomicETH,), 0x14: (AtomicETH,),
    0x16: (IETH,), 0x17: (IETH,),
}

#: opcode -> name; MRC adds its opcodes (:func:`register_chain`)
OPCODE_NAMES: dict[int, str] = {
    TRANSPORT_PREFIX[t] | op: f"{t}_{OPERATIONS[op]}"
    for t, ops in TRANSPORT_OPERATIONS.items() for op in ops
}
OPCODE_NAMES[CNP_OPCODE] = "CNP"

#: opcode -> headers after the BTH. MRC registers its opcodes here too
#: (:func:`register_chain`); a function of the BTH where a flag decides.
CHAINS: dict[int, tuple[type[Header], ...] | object] = {}
for _t, _ops in TRANSPORT_OPERATIONS.items():
    for _op in _ops:
        _c = OPERATION_CHAINS[_op]
        CHAINS[TRANSPORT_PREFIX[_t] | _op] = (DETH, *_c) if _t == "UD" else _c
CHAINS[CNP_OPCODE] = (CNPPadding,)


def register_chain(opcode: int, chain: object, name: str | None = None) -> None:
    """Declare the headers after the BTH for ``opcode`` (a tuple, or ``fn(bth) -> tuple``)."""
    CHAINS[opcode] = chain
    if name is not None:
        OPCODE_NAMES[opcode] = name


def chain_for(bth: BTH) -> tuple[type[Header], ...]:
    """The header classes that follow ``bth``; DecodeError for an opcode we do not know."""
    c = CHAINS.get(bth.opcode)
    if c is None:
        raise DecodeError("BTH", 0, f"unknown opcode 0x{bth.opcode:02x}")
    return c if isinstance(c, tuple) else c(bth)  # type: ignore[operator]


@dataclass(slots=True)
class RocePacket:
    """A decoded RoCEv2/MRC UDP payload: BTH, its extension headers, payload, ICRC."""

    bth: BTH
    headers: list[Header] = field(default_factory=list)
    payload: bytes | memoryview = b""
    icrc: int = 0

    def header(self, cls: type[Header]) -> Header | None:
        """The first extension header of class ``cls``, or None."""
        for h in self.headers:
            if isinstance(h, cls):
                return h
        return None


def decode_packet(data: bytes | bytearray | memoryview) -> RocePacket:
    """Decode a UDP payload on port 4791: BTH, extension headers, payload, ICRC.

    The payload is a memoryview into ``data`` (no copy) and excludes the pad
    bytes counted by ``BTH.padcount`` and the ICRC. Raises DecodeError on
    truncation, an unknown opcode, or a pad count longer than the payload.
    """
    mv = memoryview(data)
    bth = BTH.decode(mv, 0)
    off = 12
    headers: list[Header] = []
    for cls in chain_for(bth):
        h = cls.decode(mv, off)
        headers.append(h)
        off += cls.SIZE
    need("ICRC", mv, off, ICRC_SIZE)
    end = len(mv) - ICRC_SIZE
    if end - off < bth.padcount:
        raise DecodeError("BTH", 0,
                          f"pad count {bth.padcount} exceeds payload of {end - off} bytes")
    (icrc,) = struct.unpack_from("<I", mv, end)
    return RocePacket(bth, headers, mv[off:end - bth.padcount], icrc)


def encode_packet(bth: BTH, headers: list[Header] | tuple[Header, ...] = (),
                  payload: bytes | bytearray | memoryview = b"", icrc: int = 0) -> bytearray:
    """Build a UDP payload: BTH, headers, payload, pad (per ``bth.padcount``), ICRC slot.

    The ICRC depends on the IP and UDP headers, which the kernel writes; the
    sender fills it with :func:`emu.wire.icrc.icrc_parts` (or passes ``icrc``).
    """
    size = 12 + sum(h.SIZE for h in headers) + len(payload) + bth.padcount + ICRC_SIZE
    buf = bytearray(size)
    off = bth.pack_into(buf, 0)
    for h in headers:
        off = h.pack_into(buf, off)
    buf[off:off + len(payload)] = payload
    struct.pack_into("<I", buf, size - ICRC_SIZE, icrc)
    return buf

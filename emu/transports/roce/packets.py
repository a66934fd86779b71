# SPDX-License-Identifier: GPL-2.0-only
"""RoCEv2 RC packets on the hot path: build and parse with precompiled structs.

Why not :mod:`emu.wire.codec.roce`'s header objects: constructing a checked
``BTH`` dataclass costs more than the whole packet build here, and the
receive side needs a handful of fields, not objects. The opcode numbers and
layouts are derived from the codec's tables (``OPERATIONS``, ``CHAINS``), so
captures decode the same in both; ``tests/transports/roce/test_engine.py`` parses
every opcode the codec encodes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from emu.core.datagram import Gather
from emu.core.psn import PSN24
from emu.wire.codec.roce import (
    AETH,
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    CHAINS,
    CNP_OPCODE,
    IETH,
    OPERATIONS,
    RETH,
    TRANSPORT_PREFIX,
    AtomicAckETH,
    AtomicETH,
    CNPPadding,
    ImmDt,
)
from emu.wire.icrc import icrc_parts

# RC opcodes: the codec's numbers (specs/rocev2.md), named here for the state machines
_OP = {name: TRANSPORT_PREFIX["RC"] | op for op, name in OPERATIONS.items()}
SEND_FIRST, SEND_MIDDLE = _OP["SEND_FIRST"], _OP["SEND_MIDDLE"]
SEND_LAST, SEND_LAST_IMM = _OP["SEND_LAST"], _OP["SEND_LAST_IMM"]
SEND_ONLY, SEND_ONLY_IMM = _OP["SEND_ONLY"], _OP["SEND_ONLY_IMM"]
WRITE_FIRST, WRITE_MIDDLE = _OP["WRITE_FIRST"], _OP["WRITE_MIDDLE"]
WRITE_LAST, WRITE_LAST_IMM = _OP["WRITE_LAST"], _OP["WRITE_LAST_IMM"]
WRITE_ONLY, WRITE_ONLY_IMM = _OP["WRITE_ONLY"], _OP["WRITE_ONLY_IMM"]
READ_REQUEST, READ_RESP_FIRST = _OP["READ_REQUEST"], _OP["READ_RESP_FIRST"]
READ_RESP_MIDDLE, READ_RESP_LAST = _OP["READ_RESP_MIDDLE"], _OP["READ_RESP_LAST"]
READ_RESP_ONLY, ACKNOWLEDGE = _OP["READ_RESP_ONLY"], _OP["ACKNOWLEDGE"]
ATOMIC_ACK, CMP_SWAP = _OP["ATOMIC_ACK"], _OP["CMP_SWAP"]
FETCH_ADD, SEND_LAST_INV = _OP["FETCH_ADD"], _OP["SEND_LAST_INV"]
SEND_ONLY_INV = _OP["SEND_ONLY_INV"]
CNP = CNP_OPCODE

NAK_PSN_SEQ, NAK_INVALID_REQUEST, NAK_REMOTE_ACCESS, NAK_REMOTE_OP = 0, 1, 2, 3
CREDITS_INVALID = 0x1F  # AETH credit field "no end-to-end credits" (we do not do credits)

BTH_SIZE = 12
ICRC_SIZE = 4
UDP_PORT = 4791

_BTH = struct.Struct("!BBHII")
_RETH = struct.Struct("!QII")
_U32 = struct.Struct("!I")
_ATOMIC = struct.Struct("!QIQQ")
_U64 = struct.Struct("!Q")
_ICRC = struct.Struct("<I")

# opcode -> (ext header bytes, flags), derived from the codec's one table (CHAINS): the
# parser reads fields straight from the bytes, so it needs offsets, not header objects.
# flags: R=RETH A=AETH I=ImmDt/IETH T=AtomicETH K=AtomicAckETH
HAS_RETH, HAS_AETH, HAS_IMM, HAS_ATOMIC, HAS_ATOMIC_ACK, HAS_IETH = 1, 2, 4, 8, 16, 32
_FLAG = {RETH: HAS_RETH, AETH: HAS_AETH, ImmDt: HAS_IMM, AtomicETH: HAS_ATOMIC,
         AtomicAckETH: HAS_ATOMIC_ACK, IETH: HAS_IETH, CNPPadding: 0}
_LAYOUT: dict[int, tuple[int, int]] = {
    op: (sum(h.SIZE for h in chain), sum(_FLAG[h] for h in chain))
    for op, chain in ((op, CHAINS[op]) for op in (*_OP.values(), CNP_OPCODE))
}

#: A function of the UDP payload (ICRC slot included, its value ignored) -> ICRC.
IcrcFn = Callable[[bytes | bytearray | memoryview], int]


class Pkt:
    """The fields of one received packet the state machines use (no header objects)."""

    __slots__ = ("opcode", "se", "becn", "dqpn", "ackreq", "psn", "va", "rkey", "dmalen",
                 "syndrome", "msn", "imm", "swap_add", "compare", "orig", "payload")

    opcode: int
    se: int
    becn: int
    dqpn: int
    ackreq: int
    psn: int
    va: int
    rkey: int
    dmalen: int
    syndrome: int
    msn: int
    imm: int | None
    swap_add: int
    compare: int
    orig: int
    payload: memoryview


class Malformed(Exception):
    """Raised by :func:`parse` only; the engine turns it into a counted drop."""


def parse(data: bytes | bytearray | memoryview) -> Pkt:
    """Split a UDP payload into :class:`Pkt` fields; :class:`Malformed` if it cannot be.

    Unknown and non-RC opcodes, truncation, a pad count larger than the
    payload and a non-zero transport version are all malformed. The payload
    is a memoryview into ``data`` (valid while ``data`` is).
    """
    n = len(data)
    if n < BTH_SIZE + ICRC_SIZE:
        raise Malformed("short")
    op, b1, _pkey, w2, w3 = _BTH.unpack_from(data, 0)
    lay = _LAYOUT.get(op)
    if lay is None:
        raise Malformed(f"opcode 0x{op:02x}")
    if b1 & 0x0F:
        raise Malformed("transport version")
    ext, flags = lay
    end = n - ICRC_SIZE
    off = BTH_SIZE + ext
    pad = (b1 >> 4) & 3
    if end - off < pad:
        raise Malformed("truncated")
    p = Pkt()
    p.opcode = op
    p.se = b1 >> 7
    p.becn = (w2 >> 30) & 1
    p.dqpn = w2 & 0xFFFFFF
    p.ackreq = w3 >> 31
    p.psn = w3 & 0xFFFFFF
    p.imm = None
    o = BTH_SIZE
    if flags & HAS_RETH:
        p.va, p.rkey, p.dmalen = _RETH.unpack_from(data, o)
        o += 16
    if flags & HAS_AETH:
        (w,) = _U32.unpack_from(data, o)
        p.syndrome, p.msn = w >> 24, w & 0xFFFFFF
        o += 4
    if flags & HAS_IMM:
        (p.imm,) = _U32.unpack_from(data, o)
    elif flags & HAS_ATOMIC:
        p.va, p.rkey, p.swap_add, p.compare = _ATOMIC.unpack_from(data, o)
    elif flags & HAS_ATOMIC_ACK:
        (p.orig,) = _U64.unpack_from(data, o)
    p.payload = memoryview(data)[off:end - pad]
    return p


def build(opcode: int, dqpn: int, psn: int, ext: bytes = b"",
          payload: bytes | bytearray | memoryview = b"", *, ackreq: int = 0, se: int = 0,
          pkey: int = 0xFFFF, becn: int = 0) -> bytearray:
    """One packet: BTH, extension header bytes ``ext``, payload, pad, ICRC slot (zero)."""
    plen = len(payload)
    pad = -plen & 3
    hdr = _BTH.pack(opcode, (se << 7) | (pad << 4), pkey, (becn << 30) | dqpn,
                    (ackreq << 31) | psn)
    # one allocation of the exact size, no zero-fill of the payload area
    return _EMPTY.join((hdr, ext, payload, _TAILS[pad]))


_EMPTY = bytearray()
_TAILS = tuple(bytes(pad + ICRC_SIZE) for pad in range(4))


def build_gather(opcode: int, dqpn: int, psn: int, payload: memoryview, *, ackreq: int = 0,
                 se: int = 0, pkey: int = 0xFFFF) -> Gather:
    """:func:`build` without copying ``payload``: BTH, the payload view, pad + ICRC slot.

    For packets without extension headers (SEND/WRITE middles, the bulk of a
    transfer); the daemon seals the ICRC into the tail and sends the pieces
    with one scatter-gather ``sendmsg`` (:class:`emu.core.datagram.Gather`).
    """
    n = len(payload)
    pad = -n & 3
    hdr = bytearray(_BTH.pack(opcode, (se << 7) | (pad << 4), pkey, dqpn, (ackreq << 31) | psn))
    return Gather(hdr, payload, bytearray(pad + ICRC_SIZE), BTH_SIZE + n + pad + ICRC_SIZE)


def middle_heads(opcode: int, dqpn: int, psn0: int, ackreqs: list[int], *,
                 pkey: int = 0xFFFF) -> bytearray:
    """The BTHs of ``len(ackreqs)`` consecutive full-size packets from ``psn0`` (PSNs
    wrap at 2^24), packet ``i`` with AckReq ``ackreqs[i]`` — the headers of a
    :class:`~emu.core.datagram.Run` of SEND/WRITE middles, laid out as
    :func:`build_gather` lays one out (SE clear, no pad: middles are full)."""
    out = bytearray(BTH_SIZE * len(ackreqs))
    pack = _BTH.pack_into
    mask = PSN24.mask
    for i, ar in enumerate(ackreqs):
        pack(out, i * BTH_SIZE, opcode, 0, pkey, dqpn, (ar << 31) | ((psn0 + i) & mask))
    return out


def reth(va: int, rkey: int, length: int) -> bytes:
    return _RETH.pack(va, rkey, length)


def aeth(syndrome: int, msn: int) -> bytes:
    return _U32.pack((syndrome << 24) | (msn & 0xFFFFFF))


def u32(v: int) -> bytes:
    return _U32.pack(v)


def atomic_eth(va: int, rkey: int, swap_add: int, compare: int) -> bytes:
    return _ATOMIC.pack(va, rkey, swap_add, compare)


def atomic_ack_eth(orig: int) -> bytes:
    return _U64.pack(orig)


def ack_syndrome() -> int:
    return (AETH_ACK << 5) | CREDITS_INVALID


def rnr_syndrome(timer_code: int) -> int:
    return (AETH_RNR_NAK << 5) | (timer_code & 0x1F)


def nak_syndrome(code: int) -> int:
    return (AETH_NAK << 5) | (code & 0x1F)


def cnp(dqpn: int) -> bytearray:
    """A CNP (opcode 0x81, BECN set, 16 reserved zero bytes), PSN 0 as NICs send it."""
    return build(CNP, dqpn, 0, bytes(16), becn=1)


def seal(buf: bytearray, icrc: IcrcFn) -> None:
    """Write ``icrc(buf)`` into the last four bytes, in place."""
    _ICRC.pack_into(buf, len(buf) - ICRC_SIZE, icrc(buf) & 0xFFFFFFFF)


def icrc_ok(data: bytes | bytearray | memoryview, icrc: IcrcFn) -> bool:
    return _ICRC.unpack_from(data, len(data) - ICRC_SIZE)[0] == icrc(data) & 0xFFFFFFFF


_PSEUDO_SRC = bytes(15) + b"\x01"
_PSEUDO_DST = bytes(15) + b"\x02"


def pseudo_header_icrc(payload: bytes | bytearray | memoryview) -> int:
    """ICRC over ``payload`` behind a *fixed* IPv6/UDP header (``::1 → ::2``, port 4791).

    For sans-IO tests and in-memory links, where no kernel writes real
    headers: both ends compute the same value, so corruption is caught and
    the real code path (:func:`emu.wire.icrc.icrc_parts`) is exercised. The
    daemon instead computes the ICRC over the headers it actually sends.
    """
    n = len(payload)
    udp_len = 8 + n
    ip = struct.pack("!IHBB", 6 << 28, udp_len, 17, 64) + _PSEUDO_SRC + _PSEUDO_DST
    udp = struct.pack("!HHHH", 0xC000, UDP_PORT, udp_len, 0)
    mv = memoryview(payload)
    return icrc_parts(ip, udp, mv[:BTH_SIZE], mv[BTH_SIZE:n - ICRC_SIZE])

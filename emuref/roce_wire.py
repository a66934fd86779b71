# SPDX-License-Identifier: GPL-2.0-only
"""RoCEv2 wire format for emu-ref, from ``specs/rocev2.md`` with ``struct`` only.

A packet is IP / UDP (dport 4791) / BTH / [RETH | AETH] / payload / pad / ICRC.
This module builds and parses the part after UDP (what a UDP socket carries)
and computes the ICRC over the IP and UDP headers the *kernel* will write or
wrote, which the caller describes by addresses and ports: with an unconnected
IPv4 socket and DF set, the kernel writes IP ID 0 and flags DF, and every other
variant field is masked (spec: ICRC, kernel pitfall).

Only what RC WRITE / SEND / READ need is here: BTH, RETH, AETH (and
AtomicETH/AtomicAckETH lengths, so such packets parse as "unsupported" rather
than garbage).
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass

UDP_PORT = 4791
PSN_MASK = 0xFFFFFF

# RC opcodes (spec: RC opcodes)
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = range(0, 6)
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = range(6, 12)
READ_REQUEST = 0x0C
READ_RESP_FIRST, READ_RESP_MIDDLE, READ_RESP_LAST, READ_RESP_ONLY = 0x0D, 0x0E, 0x0F, 0x10
ACKNOWLEDGE = 0x11
ATOMIC_ACK = 0x12
CMP_SWAP, FETCH_ADD = 0x13, 0x14
CNP = 0x81

# AETH syndromes (spec: AETH syndrome): top bits 0 ACK, 1 RNR NAK, 3 NAK
NAK_PSN_SEQ_ERR = 0x60
NAK_INVALID_REQ = 0x61
NAK_REMOTE_ACCESS = 0x62
NAK_REMOTE_OP = 0x63
ACK_CREDIT_INVALID = 0x1F  # an ACK whose credit field says "no credit information"

_BTH = struct.Struct("!BBHII")  # opcode, SE|M|Pad|TVer, P_Key, FECN|BECN|rsvd|DestQP, A|PSN
_RETH = struct.Struct("!QII")
_AETH = struct.Struct("!I")  # syndrome:8 | MSN:24
_ATOMIC_ETH_LEN = 28
_ATOMIC_ACK_LEN = 8

#: opcodes carrying a RETH right after the BTH
RETH_OPS = frozenset({WRITE_FIRST, WRITE_ONLY, WRITE_ONLY_IMM, READ_REQUEST})
#: opcodes carrying an AETH right after the BTH
AETH_OPS = frozenset({READ_RESP_FIRST, READ_RESP_LAST, READ_RESP_ONLY, ACKNOWLEDGE,
                      ATOMIC_ACK})
IMM_OPS = frozenset({SEND_LAST_IMM, SEND_ONLY_IMM, WRITE_LAST_IMM, WRITE_ONLY_IMM})


class WireError(ValueError):
    """Bytes that are not a RoCEv2 packet we can read (one line, names the problem)."""


@dataclass
class Packet:
    """One decoded RoCEv2 packet (after UDP, ICRC already checked and stripped)."""

    opcode: int
    dqpn: int
    psn: int
    ackreq: bool = False
    se: bool = False
    pkey: int = 0xFFFF
    becn: bool = False
    # RETH
    va: int = 0
    rkey: int = 0
    dma_len: int = 0
    # AETH
    syndrome: int = 0
    msn: int = 0
    imm: int | None = None
    payload: bytes = b""


def _ip_pseudo(src: str, dst: str, udp_len: int, ip_id: int = 0) -> bytes:
    """The IP header with its variant fields set to ones (spec: ICRC). IPv4's ID is
    not masked: 0 is what the kernel writes for an unconnected socket with DF."""
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if s.version == 4:
        # ver/IHL, TOS(1s), total length, ID 0, flags DF, TTL(1s), proto 17, csum(1s)
        return struct.pack("!BBHHHBBH4s4s", 0x45, 0xFF, 20 + udp_len, ip_id, 0x4000, 0xFF, 17,
                           0xFFFF, s.packed, d.packed)
    # version 6, traffic class and flow label ones, payload length, next 17, hop limit ones
    return struct.pack("!IHBB16s16s", 0x6FFFFFFF, udp_len, 17, 0xFF, s.packed, d.packed)


def icrc(src: str, dst: str, sport: int, dport: int, body: bytes | bytearray,
         ip_id: int = 0) -> bytes:
    """The 4 ICRC bytes (as they go on the wire) for UDP payload ``body`` without ICRC."""
    udp_len = 8 + len(body) + 4
    udp = struct.pack("!HHHH", sport, dport, udp_len, 0xFFFF)
    bth = bytearray(body[:12])
    bth[4] = 0xFF  # FECN, BECN and the reserved bits
    crc = zlib.crc32(b"\xff" * 8)
    crc = zlib.crc32(_ip_pseudo(src, dst, udp_len, ip_id), crc)
    crc = zlib.crc32(udp, crc)
    crc = zlib.crc32(bytes(bth), crc)
    crc = zlib.crc32(bytes(body[12:]), crc)
    return struct.pack("<I", crc)


def encode(p: Packet, src: str, dst: str, sport: int = UDP_PORT, dport: int = UDP_PORT) -> bytes:
    """The UDP payload for ``p``: BTH, extension headers, payload, pad and ICRC."""
    pad = (-len(p.payload)) % 4
    b1 = (int(p.se) << 7) | (pad << 4)  # M = 0, TVer = 0
    out = bytearray(_BTH.pack(p.opcode, b1, p.pkey, (int(p.becn) << 30) | (p.dqpn & 0xFFFFFF),
                              (int(p.ackreq) << 31) | (p.psn & PSN_MASK)))
    if p.opcode in RETH_OPS:
        out += _RETH.pack(p.va, p.rkey, p.dma_len)
    if p.opcode in AETH_OPS:
        out += _AETH.pack((p.syndrome << 24) | (p.msn & 0xFFFFFF))
    if p.opcode in IMM_OPS:
        out += struct.pack("!I", p.imm or 0)
    out += p.payload
    out += b"\x00" * pad
    out += icrc(src, dst, sport, dport, out)
    return bytes(out)


def decode(data: bytes, src: str, dst: str, sport: int = UDP_PORT,
           dport: int = UDP_PORT) -> Packet:
    """Parse one UDP payload; :class:`WireError` for short packets or a bad ICRC."""
    if len(data) < 16:
        raise WireError(f"RoCEv2 packet of {len(data)} bytes is shorter than BTH+ICRC")
    body, crc = data[:-4], data[-4:]
    if icrc(src, dst, sport, dport, body) != crc:
        raise WireError("bad ICRC")
    op, b1, pkey, w2, w3 = _BTH.unpack_from(body, 0)
    p = Packet(op, w2 & 0xFFFFFF, w3 & PSN_MASK, ackreq=bool(w3 >> 31), se=bool(b1 >> 7),
               pkey=pkey, becn=bool((w2 >> 30) & 1))
    pad = (b1 >> 4) & 3
    off = 12
    try:
        if op in RETH_OPS:
            p.va, p.rkey, p.dma_len = _RETH.unpack_from(body, off)
            off += _RETH.size
        if op in AETH_OPS:
            (a,) = _AETH.unpack_from(body, off)
            p.syndrome, p.msn = a >> 24, a & 0xFFFFFF
            off += _AETH.size
        if op in IMM_OPS:
            (p.imm,) = struct.unpack_from("!I", body, off)
            off += 4
        if op in (CMP_SWAP, FETCH_ADD):
            off += _ATOMIC_ETH_LEN
        if op == ATOMIC_ACK:
            off += _ATOMIC_ACK_LEN
    except struct.error:
        raise WireError(f"opcode {op:#04x}: headers cut short at byte {off}") from None
    end = len(body) - pad
    if end < off:
        raise WireError(f"opcode {op:#04x}: pad count {pad} longer than the payload")
    p.payload = bytes(body[off:end])
    return p

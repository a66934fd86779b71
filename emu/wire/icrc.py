# SPDX-License-Identifier: GPL-2.0-only
"""RoCEv2 invariant CRC (ICRC), our own implementation.

The ICRC is CRC-32 (the Ethernet polynomial, i.e. :func:`zlib.crc32`) over

    8 × 0xFF (stand-in for the InfiniBand LRH)
    + the IP header with its variant fields set to all-ones
      (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label, hop limit)
    + the UDP header with its checksum set to all-ones
    + the BTH with byte 4 (FECN, BECN, reserved) set to all-ones
    + everything after the BTH up to, not including, the ICRC,

and sits little-endian in the last four bytes of the UDP payload
(``specs/rocev2.md``). MRC uses the same rule over the *inner* packet.

This works on plain bytes so the daemons, the scapy layers and ``emu dissect``
share one implementation; scapy's ``contrib.roce`` computes the same value by a
different route and the tests hold the two against each other and against a
ConnectX-4 Lx capture.
"""

from __future__ import annotations

import struct

from emu.wire.crc32 import crc32
from emu.wire.errors import DecodeError

_LRH_STANDIN = b"\xff" * 8
#: CRC of the 8-byte stand-in, so we can continue from it instead of concatenating.
_CRC_AFTER_LRH = crc32(_LRH_STANDIN)

IPV4_HEADER_MIN = 20
IPV6_HEADER = 40
UDP_HEADER = 8
BTH_SIZE = 12
ICRC_SIZE = 4


def _masked_ip_udp_bth(ip_header: bytes | memoryview, udp_header: bytes | memoryview,
                       bth: bytes | memoryview) -> bytearray:
    """Return IP header + UDP header + BTH with every variant field set to ones."""
    version = ip_header[0] >> 4
    out = bytearray(ip_header)
    if version == 4:
        out[1] = 0xFF  # TOS (DSCP + ECN)
        out[8] = 0xFF  # TTL
        out[10:12] = b"\xff\xff"  # header checksum
    elif version == 6:
        # version:4 | traffic class:8 | flow label:20 -> keep the version nibble
        out[0] = (version << 4) | 0x0F
        out[1:4] = b"\xff\xff\xff"
        out[7] = 0xFF  # hop limit
    else:
        raise DecodeError("IP", 0, f"ICRC needs IPv4 or IPv6, got IP version {version}")
    udp = bytearray(udp_header)
    udp[6:8] = b"\xff\xff"
    b = bytearray(bth)
    b[4] = 0xFF
    return out + udp + b


def icrc_parts(ip_header: bytes | memoryview, udp_header: bytes | memoryview,
               bth: bytes | memoryview, rest: bytes | memoryview) -> int:
    """ICRC from the pieces of a packet, ``rest`` being what follows the BTH up to the ICRC.

    ``ip_header`` is the whole IP header of the packet that carries the UDP
    datagram (for IPv6 only the fixed 40-byte header: extension headers are
    not part of RoCEv2's invariant fields and emu never puts any between the
    inner IPv6 header and UDP). Lengths in the headers must already count the
    ICRC. This is the daemon's path: no concatenation of the payload.
    """
    crc = crc32(_masked_ip_udp_bth(ip_header, udp_header, bth), _CRC_AFTER_LRH)
    return crc32(rest, crc)


def _split(packet: bytes | memoryview) -> tuple[memoryview, memoryview, memoryview, memoryview]:
    mv = memoryview(packet)
    if len(mv) < 1:
        raise DecodeError("IP", 0, "truncated: empty packet")
    version = mv[0] >> 4
    if version == 4:
        ihl = (mv[0] & 0x0F) * 4
        if ihl < IPV4_HEADER_MIN:
            raise DecodeError("IPv4", 0, f"bad IHL {ihl // 4}")
        iphl = ihl
    elif version == 6:
        iphl = IPV6_HEADER
    else:
        raise DecodeError("IP", 0, f"not an IP packet (version {version})")
    need = iphl + UDP_HEADER + BTH_SIZE + ICRC_SIZE
    if len(mv) < need:
        raise DecodeError("RoCEv2", 0,
                          f"truncated: need {need} bytes for IP+UDP+BTH+ICRC, have {len(mv)}")
    u = iphl
    b = u + UDP_HEADER
    r = b + BTH_SIZE
    return mv[:u], mv[u:b], mv[b:r], mv[r:-ICRC_SIZE]


def compute_icrc(packet: bytes | memoryview) -> int:
    """ICRC of a whole IP packet (IP header first, ICRC slot last: its value is ignored)."""
    return icrc_parts(*_split(packet))


def wire_icrc(packet: bytes | memoryview) -> int:
    """The ICRC value carried in the last four bytes of ``packet`` (little-endian)."""
    if len(packet) < ICRC_SIZE:
        raise DecodeError("ICRC", 0, f"truncated: need 4 bytes, have {len(packet)}")
    return struct.unpack_from("<I", packet, len(packet) - ICRC_SIZE)[0]


def verify_icrc(packet: bytes | memoryview) -> bool:
    """True when the ICRC in the last four bytes of the IP packet is correct."""
    return compute_icrc(packet) == wire_icrc(packet)


def pack_icrc(value: int) -> bytes:
    """The four wire bytes of an ICRC value."""
    return struct.pack("<I", value & 0xFFFFFFFF)


def seal(packet: bytearray) -> bytearray:
    """Write the correct ICRC into the last four bytes of an IP packet, in place."""
    packet[-ICRC_SIZE:] = pack_icrc(compute_icrc(packet))
    return packet

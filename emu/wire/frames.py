# SPDX-License-Identifier: GPL-2.0-only
"""Find the transport datagram inside a captured frame, without scapy.

Walks link layer (Ethernet with VLAN tags, raw IP, Linux cooked v1/v2, BSD
loopback) → IPv4 / IPv6 (extension headers, SRv6 routing header, IP-in-IP
tunnels as used by SRv6 encapsulation) → UDP, or stops at an IP protocol
(UET native-IP mode). Everything is bounds-checked and reported as
:class:`~emu.wire.errors.DecodeError`.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field

from emu.wire import pcapio
from emu.wire.errors import DecodeError, need

IPPROTO_UDP = 17
IPPROTO_IPIP = 4
IPPROTO_IPV6 = 41
IPPROTO_ROUTING = 43
_IPV6_EXT = {0, 43, 44, 60, 51, 135, 139, 140}
_ETH_VLAN = {0x8100, 0x88A8, 0x9100}


@dataclass(slots=True)
class Datagram:
    """The innermost IP packet of a frame and what it carries.

    ``ip`` is that IP packet (header first), trimmed to its own length so
    Ethernet padding never reaches the ICRC; ``l4`` is what follows the IP
    header chain (the UDP payload when ``proto`` is UDP, else the IP payload).
    """

    version: int
    src: str
    dst: str
    proto: int
    dscp: int
    ecn: int
    flow_label: int
    ip: memoryview
    l4: memoryview
    sport: int | None = None
    dport: int | None = None
    encap: list[str] = field(default_factory=list)
    segments: list[str] = field(default_factory=list)


def ip_start(frame: bytes | memoryview, linktype: int) -> int:
    """Offset of the IP header in a frame of the given pcap link type."""
    mv = memoryview(frame)
    if linktype == pcapio.LINKTYPE_ETHERNET:
        need("Ethernet", mv, 0, 14)
        off = 12
        ethertype = struct.unpack_from("!H", mv, off)[0]
        while ethertype in _ETH_VLAN:
            off += 4
            need("VLAN", mv, off, 2)
            ethertype = struct.unpack_from("!H", mv, off)[0]
        if ethertype not in (0x0800, 0x86DD):
            raise DecodeError("Ethernet", 0, f"not IP (ethertype 0x{ethertype:04x})")
        return off + 2
    if linktype in (pcapio.LINKTYPE_RAW, pcapio.LINKTYPE_IPV4, pcapio.LINKTYPE_IPV6):
        return 0
    if linktype == pcapio.LINKTYPE_LINUX_SLL:
        need("SLL", mv, 0, 16)
        return 16
    if linktype == pcapio.LINKTYPE_LINUX_SLL2:
        need("SLL2", mv, 0, 20)
        return 20
    if linktype == pcapio.LINKTYPE_NULL:
        need("Loopback", mv, 0, 4)
        return 4
    raise DecodeError("frame", 0, f"unsupported link type {linktype}")


def parse_ip(packet: bytes | memoryview, udp_ports: frozenset[int] | None = None) -> Datagram:
    """Parse an IP packet down to the innermost IP header and its UDP (or other) payload.

    Tunnels (IPv6/IPv4-in-IPv6, SRv6 encapsulation) are followed; ``encap``
    records each outer layer so a user sees that a packet was source-routed.
    """
    mv = memoryview(packet)
    encap: list[str] = []
    segments: list[str] = []
    base = 0
    for _depth in range(8):
        need("IP", mv, base, 1)
        version = mv[base] >> 4
        if version == 4:
            need("IPv4", mv, base, 20)
            ihl = (mv[base] & 0x0F) * 4
            total = struct.unpack_from("!H", mv, base + 2)[0]
            if ihl < 20 or total < ihl:
                raise DecodeError("IPv4", base, f"bad header length {ihl} / total length {total}")
            need("IPv4", mv, base, total)
            tos = mv[base + 1]
            proto = mv[base + 9]
            src = str(ipaddress.IPv4Address(bytes(mv[base + 12:base + 16])))
            dst = str(ipaddress.IPv4Address(bytes(mv[base + 16:base + 20])))
            flow = 0
            end = base + total
            off = base + ihl
        elif version == 6:
            need("IPv6", mv, base, 40)
            w0, plen, nh = struct.unpack_from("!IHB", mv, base)
            tos = (w0 >> 20) & 0xFF
            flow = w0 & 0xFFFFF
            src = str(ipaddress.IPv6Address(bytes(mv[base + 8:base + 24])))
            dst = str(ipaddress.IPv6Address(bytes(mv[base + 24:base + 40])))
            end = base + 40 + plen
            need("IPv6", mv, base, 40 + plen)
            proto = nh
            off = base + 40
            while proto in _IPV6_EXT:
                need("IPv6 extension header", mv, off, 8)
                nxt, hlen = mv[off], mv[off + 1]
                size = (hlen + 2) * 4 if proto == 51 else (hlen + 1) * 8
                need("IPv6 extension header", mv, off, size)
                if proto == IPPROTO_ROUTING and mv[off + 2] == 4:  # SRH
                    last = mv[off + 4]
                    for i in range(last + 1):
                        s = off + 8 + 16 * i
                        if s + 16 <= off + size:
                            segments.append(str(ipaddress.IPv6Address(bytes(mv[s:s + 16]))))
                proto = nxt
                off += size
        else:
            raise DecodeError("IP", base, f"not an IP packet (version {version})")
        if proto in (IPPROTO_IPV6, IPPROTO_IPIP):
            encap.append(f"IPv{version} {src} > {dst}")
            base = off
            continue
        dg = Datagram(version, src, dst, proto, tos >> 2, tos & 3, flow,
                      mv[base:end], mv[off:end], encap=encap, segments=segments)
        if proto == IPPROTO_UDP:
            need("UDP", mv, off, 8)
            sport, dport, ulen = struct.unpack_from("!HHH", mv, off)
            if ulen < 8 or off + ulen > end:
                raise DecodeError("UDP", off - base, f"bad length {ulen}")
            dg.sport, dg.dport = sport, dport
            dg.l4 = mv[off + 8:off + ulen]
        return dg
    raise DecodeError("IP", base, "more than 8 nested IP headers")

# SPDX-License-Identifier: GPL-2.0-only
"""Packet trimming: cut a transport packet after its headers and make it a valid packet again.

Pure bytes in, bytes out (no sockets), so the daemon and the tests share it.
Input is an IP packet as the kernel hands it to NFQUEUE — possibly only a
prefix of it (``copy_range``); the original lengths come from the IP headers.

What is kept (protocol-aware, decided with emu's own codecs so a trimmed
packet decodes to the same headers):

* RoCEv2 and MRC (UDP 4791, and 4971 where emu's daemons serve MRC): BTH and
  the opcode's extension headers (:func:`emu.wire.codec.roce.chain_for`, where
  MRC registers METH, TSETH, RETH … ), ``BTH.padcount`` pad bytes (so the BTH
  needs no change and the codec's pad check holds) and a 4-byte ICRC,
  **recomputed** over the trimmed packet. Why recompute: a RoCE NIC discards a
  packet with a bad ICRC in hardware, so a trimmed packet with a stale ICRC
  would never reach the transport that must NACK it; the DSCP says it was
  trimmed. (Hence Wireshark's ICRC check passes on trimmed packets;
  ``roce.lua`` is unchanged.)
* UET over UDP 4793 and native IP (protocol 253): entropy header (native),
  PDS, SES and the SES extension header (:func:`emu.wire.codec.uet.decode_packet`);
  with TSS only the TSS header (the ciphertext is the payload).
* ``size``: cut at this many bytes of the outermost IP packet instead — but
  never inside the transport headers (a larger cut is used then); for RoCE the
  last 4 bytes are the recomputed ICRC. For UDP ports emu does not know, a
  ``size`` is the only way to trim.

Fix-ups, on every IP header of the packet (tunnels: outer and inner): DSCP
set to the trimmed code point (the ECN bits are kept), IPv4 total length and
header checksum, IPv6 payload length; then the innermost UDP length and
checksum (a zero IPv4 UDP checksum stays zero). A verdict payload shorter
than the packet makes the kernel truncate it (``nfqnl_mangle`` → ``pskb_trim``)
and mark its checksum as computed, which is why we compute all of them here.
"""

from __future__ import annotations

import struct

from emu.wire import icrc as ICRC
from emu.wire.codec import roce as RC
from emu.wire.codec import uet as UC
from emu.wire.errors import DecodeError, need

ROCE_PORT = 4791
#: MRC's port in emu (RoCEv2's frames: emu.transports.mrc.engine.UDP_PORT)
MRC_PORT = 4971
UET_PORT = 4793
UET_PROTO = 253
_IPV6_EXT = {0, 43, 44, 60, 51, 135, 139, 140}


def checksum(data: bytes | bytearray | memoryview, start: int = 0) -> int:
    """Internet checksum (RFC 1071) of ``data``, continuing from the 32-bit sum ``start``."""
    b = bytes(data)
    if len(b) % 2:
        b += b"\0"
    s = start + sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


class Layout:
    """Where the headers of an IP packet are: every IP header, the innermost L4."""

    __slots__ = ("ips", "proto", "l4", "end", "final_dst")

    def __init__(self) -> None:
        self.ips: list[tuple[int, int]] = []   # (offset, version), outermost first
        self.proto = 0
        self.l4 = 0
        self.end = 0                            # original length of the outermost packet
        self.final_dst: bytes | None = None     # IPv6 SRH final destination of the inner header


def parse(packet: bytes | bytearray | memoryview) -> Layout:
    """Walk IPv4/IPv6 (extension headers, SRH, IP-in-IP tunnels) to the innermost L4 header."""
    mv = memoryview(packet)
    lay = Layout()
    base = 0
    for _ in range(8):
        need("IP", mv, base, 1)
        version = mv[base] >> 4
        lay.final_dst = None
        if version == 4:
            need("IPv4", mv, base, 20)
            ihl = (mv[base] & 0x0F) * 4
            total = struct.unpack_from("!H", mv, base + 2)[0]
            if ihl < 20 or total < ihl:
                raise DecodeError("IPv4", base, f"bad header length {ihl} / total {total}")
            proto = mv[base + 9]
            off = base + ihl
            end = base + total
        elif version == 6:
            need("IPv6", mv, base, 40)
            plen, proto = struct.unpack_from("!HB", mv, base + 4)
            off = base + 40
            end = off + plen
            while proto in _IPV6_EXT:
                need("IPv6 extension header", mv, off, 8)
                nxt, hlen = mv[off], mv[off + 1]
                size = (hlen + 2) * 4 if proto == 51 else (hlen + 1) * 8
                if proto == 43 and mv[off + 2] == 4:        # SRH: segments[0] = final dst
                    need("SRH", mv, off, 24)
                    lay.final_dst = bytes(mv[off + 8:off + 24])
                proto, off = nxt, off + size
        else:
            raise DecodeError("IP", base, f"not an IP packet (version {version})")
        if not lay.ips:
            lay.end = end
        elif end > lay.end:
            raise DecodeError("IP", base, "inner packet longer than the outer one")
        lay.ips.append((base, version))
        if proto in (4, 41):
            base = off
            continue
        lay.proto, lay.l4 = proto, off
        return lay
    raise DecodeError("IP", base, "more than 8 nested IP headers")


def header_end(packet: bytes | bytearray | memoryview, lay: Layout) -> tuple[int, bool] | None:
    """(offset after the transport headers — plus pad and ICRC slot for RoCE —, is_roce).

    None: not a transport emu knows. DecodeError: a known transport with bad headers.
    """
    mv = memoryview(packet)
    if lay.proto == 17:
        need("UDP", mv, lay.l4, 8)
        dport = struct.unpack_from("!H", mv, lay.l4 + 2)[0]
        body = lay.l4 + 8
        if dport == ROCE_PORT or dport == MRC_PORT:
            rp = RC.decode_packet(mv[body:])
            hl = 12 + sum(h.SIZE for h in rp.headers)
            return body + hl + rp.bth.padcount + ICRC.ICRC_SIZE, True
        if dport == UET_PORT:
            up = UC.decode_packet(mv[body:])
            return body + (len(mv) - body - len(up.payload)), False
        return None
    if lay.proto == UET_PROTO:
        up = UC.decode_packet(mv[lay.l4:], native_ip=True)
        return lay.l4 + (len(mv) - lay.l4 - len(up.payload)), False
    return None


def trim(packet: bytes | bytearray | memoryview, dscp: int,
         size: int | None = None) -> bytearray | None:
    """The trimmed IP packet (DSCP ``dscp``), or None when there is nothing to cut.

    ``packet`` may be a prefix of the real packet (at least up to the cut).
    DecodeError when the headers are malformed (the caller forwards such a
    packet untouched and counts it).
    """
    lay = parse(packet)
    he = header_end(packet, lay)
    if he is None:
        if size is None:
            return None
        cut, roce = max(size, lay.l4 + (8 if lay.proto == 17 else 0)), False
    else:
        cut, roce = he
        if size is not None:
            cut = max(cut, size)
    if cut >= lay.end:
        return None                       # headers only (ACKs, reads): nothing to trim
    if cut > len(packet):
        raise DecodeError("trim", len(packet), f"copied {len(packet)} bytes, cut needs {cut}")
    out = bytearray(packet[:cut])
    for off, version in lay.ips:
        if version == 4:
            out[off + 1] = (dscp << 2) | (out[off + 1] & 3)
            struct.pack_into("!H", out, off + 2, cut - off)
        else:
            w0 = struct.unpack_from("!I", out, off)[0]
            w0 = (w0 & ~(0xFC << 20)) | (dscp << 22)
            struct.pack_into("!IH", out, off, w0 & 0xFFFFFFFF, cut - off - 40)
    inner, iv = lay.ips[-1]
    if lay.proto == 17:
        u = lay.l4
        struct.pack_into("!H", out, u + 4, cut - u)
        if roce:
            ihl = (out[inner] & 0x0F) * 4 if iv == 4 else 40
            val = ICRC.icrc_parts(out[inner:inner + ihl], out[u:u + 8], out[u + 8:u + 20],
                                  out[u + 20:cut - 4])
            out[cut - 4:cut] = ICRC.pack_icrc(val)
        old = struct.unpack_from("!H", out, u + 6)[0]
        if iv == 6 or old != 0:
            struct.pack_into("!H", out, u + 6, 0)
            c = checksum(out[u:cut], _pseudo(out, inner, iv, cut - u, lay.final_dst))
            struct.pack_into("!H", out, u + 6, c or 0xFFFF)
    for off, version in lay.ips:
        if version == 4:
            ihl = (out[off] & 0x0F) * 4
            struct.pack_into("!H", out, off + 10, 0)
            struct.pack_into("!H", out, off + 10, checksum(out[off:off + ihl]))
    return out


def _pseudo(buf: bytearray, off: int, version: int, l4len: int, final_dst: bytes | None) -> int:
    """The 32-bit sum of the UDP pseudo-header."""
    if version == 4:
        hdr = bytes(buf[off + 12:off + 20]) + struct.pack("!BBH", 0, 17, l4len)
    else:
        dst = final_dst if final_dst is not None else bytes(buf[off + 24:off + 40])
        hdr = bytes(buf[off + 8:off + 24]) + dst + struct.pack("!IxxxB", l4len, 17)
    return sum(struct.unpack(f"!{len(hdr) // 2}H", hdr))

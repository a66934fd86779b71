# SPDX-License-Identifier: GPL-2.0-only
"""Per-transport finishing of datagrams against the real IP/UDP headers (RoCE's ICRC).

Why in the daemon: the RoCEv2 ICRC covers the IP and UDP headers, which only
the sending side's socket layer knows — the source address (which port), the
source port (the entropy socket chosen), the lengths. The engine leaves the
ICRC slot empty (``emu.transports.roce.engine.create_engine``: no ICRC
function); the daemon seals each datagram just before ``sendto`` with the
headers the kernel will write, and checks received ones against the headers
they arrived with: our bound address and port, the lengths, and — over IPv4 —
the identification and flags *as received* (:mod:`emu.nic.rxheader`: the kernel
stamps that header word on each datagram), since the ICRC covers them and other
senders (Linux rxe) count their IDs up where emu's own send ID 0 with DF. A bad
ICRC is a counted drop (``rx_bad_icrc``), as a NIC drops it. The registry is by
transport name; MRC's frames are RoCEv2's and take the same ICRC; UET has none.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from typing import Any

from emu.core.datagram import Gather
from emu.wire.crc32 import crc32

_IP4 = struct.Struct("!BBHHHBBH4s4s")
_IP6 = struct.Struct("!IHBB16s16s")
_UDP = struct.Struct("!HHHH")
_LE32 = struct.Struct("<I")
_WORD = struct.Struct("!I")

#: IPv4 header bytes 4..7 (identification, flags, fragment offset) of what emu's own
#: senders send: ID 0 with DF (an unconnected socket with PMTU discovery "do")
DF_ID0 = b"\x00\x00\x40\x00"
#: of that word, what the sender's ICRC covered: the ID, the reserved bit and DF. MF and
#: the fragment offset describe a fragment, and a datagram reaches the socket whole
#: (reassembled: its sender computed the ICRC over the unfragmented header, MF 0, offset 0)
_WORD_KEEP = 0xFFFFC000


class RoceIcrc:
    """Seal and check RoCEv2 ICRCs over the headers the kernel writes/wrote.

    Hot path: the masked IP and UDP headers of a flow are the same for every
    packet of one length, so the CRC state after them is cached per (source,
    source port, destination, destination port, length); a packet then costs
    three short ``crc32`` calls over its masked BTH and one over its payload —
    no header building and no copies (profiled: the ICRC was ~20 % of a
    receiving daemon's time, half of it building headers).
    """

    def __init__(self) -> None:
        from emu.wire.icrc import _CRC_AFTER_LRH, _masked_ip_udp_bth

        self._seed = _CRC_AFTER_LRH
        self._mask = _masked_ip_udp_bth
        self._raw: dict[str, tuple[int, bytes]] = {}
        self._prefix: dict[tuple[str, int, str, int, int], int] = {}
        #: masked headers of flows whose IPv4 IDs change per packet (:meth:`_prefix_word`)
        self._masked: dict[tuple[str, int, str, int, int], bytearray] = {}

    def _addr(self, a: str) -> tuple[int, bytes]:
        r = self._raw.get(a)
        if r is None:
            fam = socket.AF_INET6 if ":" in a else socket.AF_INET
            r = self._raw[a] = (fam, socket.inet_pton(fam, a))
            if len(self._raw) > 8192:
                self._raw.clear()
        return r

    #: needs each IPv4 datagram's header word (identification, flags) as received
    needs_ip_word = True

    def _header(self, src: str, sport: int, dst: str, dport: int, n: int) -> bytearray:
        """The masked IP and UDP headers of an ``n``-byte datagram (IPv4: ID 0 and DF)."""
        fam, s = self._addr(src)
        _, d = self._addr(dst)
        ulen = 8 + n
        if fam == socket.AF_INET:
            ip = _IP4.pack(0x45, 0, 20 + ulen, 0, 0x4000, 64, 17, 0, s, d)
        else:
            ip = _IP6.pack(6 << 28, ulen, 17, 64, s, d)
        return self._mask(ip, _UDP.pack(sport, dport, ulen, 0), bytes(12))[:-12]

    def _prefix_crc(self, key: tuple[str, int, str, int, int]) -> int:
        crc = crc32(self._header(*key), self._seed)
        if len(self._prefix) > 65536:
            self._prefix.clear()
        self._prefix[key] = crc
        return crc

    def _prefix_word(self, key: tuple[str, int, str, int, int], word: Any) -> int:
        """The prefix CRC for a datagram that arrived with IPv4 header word ``word``
        (4 bytes, wire order) other than emu's own ID 0 + DF. Not cached: such a peer's
        IDs change with every packet (docs/measurements.md has its cost)."""
        w = int.from_bytes(word, "big") & _WORD_KEEP
        if w == 0x4000:
            crc = self._prefix.get(key)
            return crc if crc is not None else self._prefix_crc(key)
        hdr = self._masked.get(key)
        if hdr is None:  # the flow's masked IP + UDP header, its word patched per packet
            if len(self._masked) > 4096:
                self._masked.clear()
            hdr = self._masked[key] = self._header(*key)
        hdr[4:8] = _WORD.pack(w)
        return crc32(hdr, self._seed)

    def _icrc(self, data: Any, src: str, sport: int, dst: str, dport: int) -> int | None:
        n = len(data)
        if n < 16:
            return None
        key = (src, sport, dst, dport, n)
        crc = self._prefix.get(key)
        if crc is None:
            crc = self._prefix_crc(key)
        if type(data) is bytearray:
            # mask BTH byte 4 (FECN, BECN, reserved) in place: one crc32 over the packet
            b4 = data[4]
            data[4] = 0xFF
            try:
                return crc32(memoryview(data)[:n - 4], crc)
            finally:
                data[4] = b4
        mv = memoryview(data)
        crc = crc32(mv[:4], crc)
        crc = crc32(b"\xff", crc)  # BTH byte 4 (FECN, BECN, reserved) masked
        return crc32(mv[5:n - 4], crc)

    def seal(self, buf: bytearray | Gather, src: str, sport: int, dst: str,
             dport: int) -> None:
        if type(buf) is Gather:
            self._seal_gather(buf, src, sport, dst, dport)
            return
        v = self._icrc(buf, src, sport, dst, dport)
        if v is not None:
            _LE32.pack_into(buf, len(buf) - 4, v)

    def _seal_gather(self, g: Gather, src: str, sport: int, dst: str, dport: int,
                     start: int | None = None) -> None:
        """The ICRC of a datagram in pieces, chained piece by piece into its tail."""
        if start is None:
            key = (src, sport, dst, dport, g.size)
            start = self._prefix.get(key)
            if start is None:
                start = self._prefix_crc(key)
        head, tail = g.head, g.tail
        b4 = head[4]
        head[4] = 0xFF  # BTH byte 4 (FECN, BECN, reserved) masked
        crc = crc32(head, start)
        head[4] = b4
        crc = crc32(g.body, crc)
        n = len(tail)
        if n > 4:
            crc = crc32(memoryview(tail)[:n - 4], crc)
        _LE32.pack_into(tail, n - 4, crc)

    def seal_many(self, bufs: list[bytearray | Gather], src: str, sport: int, dst: str,
                  dport: int) -> None:
        """:meth:`seal` for a GSO batch (one flow): one cache lookup per length."""
        prefix = self._prefix
        pack = _LE32.pack_into
        last_n = -1
        start = 0
        for buf in bufs:
            n = buf.size if type(buf) is Gather else len(buf)
            if n < 16:
                continue
            if n != last_n:
                key = (src, sport, dst, dport, n)
                start = prefix.get(key)
                if start is None:
                    start = self._prefix_crc(key)
                last_n = n
            if type(buf) is Gather:  # _seal_gather inlined: the bulk of a daemon's sends
                head, tail = buf.head, buf.tail
                b4 = head[4]
                head[4] = 0xFF
                crc = crc32(head, start)
                head[4] = b4
                crc = crc32(buf.body, crc)
                t = len(tail)
                if t > 4:
                    crc = crc32(memoryview(tail)[:t - 4], crc)
                pack(tail, t - 4, crc)
                continue
            b4 = buf[4]
            buf[4] = 0xFF
            v = crc32(memoryview(buf)[:n - 4], start)
            buf[4] = b4
            pack(buf, n - 4, v)

    def _icrc_at(self, buf: Any, off: int, end: int, src: str, sport: int, dst: str,
                 dport: int, word: Any = None) -> int:
        """The ICRC of the datagram lying in ``buf[off:end]`` (16 bytes or more), computed
        in place: BTH byte 4 is masked for the CRC and put back. ``word``: the IPv4
        header's bytes 4..7 as received (None: emu's own, ID 0 and DF)."""
        key = (src, sport, dst, dport, end - off)
        if word is None or word == DF_ID0:
            crc = self._prefix.get(key)
            if crc is None:
                crc = self._prefix_crc(key)
        else:
            crc = self._prefix_word(key, word)
        b4 = buf[off + 4]
        buf[off + 4] = 0xFF
        crc = crc32(memoryview(buf)[off:end - 4], crc)
        buf[off + 4] = b4
        return crc

    def check_buf(self, buf: bytearray, off: int, end: int, src: str, sport: int, dst: str,
                  dport: int, word: Any = None) -> bool:
        """:meth:`check` of ``buf[off:end]`` in place (a receive buffer; no copy)."""
        if end - off < 16:
            return False
        return _LE32.unpack_from(buf, end - 4)[0] == self._icrc_at(buf, off, end, src, sport,
                                                                    dst, dport, word)

    def seal_at(self, buf: Any, off: int, end: int, src: str, sport: int, dst: str,
                dport: int) -> None:
        """:meth:`seal` of the datagram already written to ``buf[off:end]`` (a frame in a
        packet ring, :mod:`emu.nic.frames`): one CRC over contiguous memory instead of
        one per piece, and nothing copied afterwards."""
        if end - off >= 16:
            _LE32.pack_into(buf, end - 4, self._icrc_at(buf, off, end, src, sport, dst, dport))

    def check(self, data: Any, src: str, sport: int, dst: str, dport: int,
              word: Any = None) -> bool:
        """Whether ``data`` (a UDP payload) carries the ICRC of the headers it arrived
        with; ``word``: the IPv4 header's bytes 4..7 as received (None: ID 0 and DF)."""
        if word is not None and word != DF_ID0:
            n = len(data)
            if n < 16:
                return False
            return _LE32.unpack_from(data, n - 4)[0] == self._icrc_at(
                bytearray(data), 0, n, src, sport, dst, dport, word)
        v = self._icrc(data, src, sport, dst, dport)
        return v is not None and _LE32.unpack_from(data, len(data) - 4)[0] == v


#: transport name → framer factory (None: the transport needs no finishing)
#: MRC frames are RoCEv2's (BTH first, ICRC last, specs/mrc.md): the same seal and check
FRAMING: dict[str, Callable[[], Any]] = {"roce": RoceIcrc, "mrc": RoceIcrc}


def framer_for(name: str) -> Any:
    f = FRAMING.get(name)
    return f() if f is not None else None

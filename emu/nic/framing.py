# SPDX-License-Identifier: GPL-2.0-only
"""Per-transport finishing of datagrams against the real IP/UDP headers (RoCE's ICRC).

Why in the daemon: the RoCEv2 ICRC covers the IP and UDP headers, which only
the sending side's socket layer knows — the source address (which port), the
source port (the entropy socket chosen), the lengths. The engine leaves the
ICRC slot empty (``emu.transports.roce.engine.create_engine``: no ICRC
function); the daemon seals each datagram just before ``sendto`` with the
headers the kernel will write, and checks received ones against the headers
they must have arrived with (our bound address and port; IPv4 ID 0, as every
emu sender sets DF). A bad ICRC is a counted drop (``rx_bad_icrc``), as a NIC
drops it. The registry is by transport name; UET/MRC have no ICRC and need none.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from typing import Any

_IP4 = struct.Struct("!BBHHHBBH4s4s")
_IP6 = struct.Struct("!IHBB16s16s")
_UDP = struct.Struct("!HHHH")
_LE32 = struct.Struct("<I")


class RoceIcrc:
    """Seal and check RoCEv2 ICRCs over the headers the kernel writes/wrote."""

    def __init__(self) -> None:
        from emu.wire.icrc import icrc_parts

        self._parts = icrc_parts
        self._raw: dict[str, tuple[int, bytes]] = {}

    def _addr(self, a: str) -> tuple[int, bytes]:
        r = self._raw.get(a)
        if r is None:
            fam = socket.AF_INET6 if ":" in a else socket.AF_INET
            r = self._raw[a] = (fam, socket.inet_pton(fam, a))
            if len(self._raw) > 8192:
                self._raw.clear()
        return r

    def _icrc(self, data: Any, src: str, sport: int, dst: str, dport: int) -> int | None:
        n = len(data)
        if n < 16:
            return None
        fam, s = self._addr(src)
        _, d = self._addr(dst)
        ulen = 8 + n
        if fam == socket.AF_INET:
            ip = _IP4.pack(0x45, 0, 20 + ulen, 0, 0x4000, 64, 17, 0, s, d)
        else:
            ip = _IP6.pack(6 << 28, ulen, 17, 64, s, d)
        mv = memoryview(data)
        return self._parts(ip, _UDP.pack(sport, dport, ulen, 0), mv[:12], mv[12:n - 4])

    def seal(self, buf: bytearray, src: str, sport: int, dst: str, dport: int) -> None:
        v = self._icrc(buf, src, sport, dst, dport)
        if v is not None:
            _LE32.pack_into(buf, len(buf) - 4, v)

    def check(self, data: Any, src: str, sport: int, dst: str, dport: int) -> bool:
        v = self._icrc(data, src, sport, dst, dport)
        return v is not None and _LE32.unpack_from(data, len(data) - 4)[0] == v


#: transport name → framer factory (None: the transport needs no finishing)
FRAMING: dict[str, Callable[[], Any]] = {"roce": RoceIcrc}


def framer_for(name: str) -> Any:
    f = FRAMING.get(name)
    return f() if f is not None else None

# SPDX-License-Identifier: GPL-2.0-only
"""Two questions to the kernel over rtnetlink: which next hop for this flow, and its MAC.

Why not pyroute2: the NIC daemon avoids it (its import alone costs ~100 ms
and MiBs of RSS, see :mod:`emu.nic.udp`), and it needs exactly two requests:

* ``RTM_GETROUTE`` for one destination *with the flow's UDP ports*: the
  kernel answers with the next hop its own ECMP hash would choose for that
  flow (``fib_multipath_hash_policy`` 1 hashes the ports), so frames built
  here leave by the path a UDP socket's datagram would have taken;
* an ``RTM_GETNEIGH`` dump of one interface: the link-layer address of every
  neighbour the kernel has resolved (ARP / ND);
* and, to ask the first one rarely, ``RTM_GETROUTE`` with ``RTM_F_FIB_MATCH``
  (``ip route get fibmatch``): the route entry that matches a destination, whose
  ``RTA_MULTIPATH`` says whether the ports can change the answer at all.

Message layouts are ``linux/netlink.h``, ``linux/rtnetlink.h`` and
``linux/neighbour.h``; every reply is parsed defensively (a short or odd
attribute ends the parse, it never raises past :class:`NetlinkError`).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct

NETLINK_ROUTE = 0
RTM_NEWROUTE, RTM_GETROUTE = 24, 26
RTM_NEWNEIGH, RTM_GETNEIGH = 28, 30
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_MULTIPATH, RTA_VIA = 1, 4, 5, 9, 18
RTA_IP_PROTO, RTA_SPORT, RTA_DPORT, RTA_NH_ID = 27, 28, 29, 30
#: rtm_flags: answer with the matching FIB entry, not the route resolved for one flow
RTM_F_FIB_MATCH = 0x2000
NDA_DST, NDA_LLADDR = 1, 2
#: neighbour states with a usable link-layer address (INCOMPLETE and FAILED have none)
NUD_USABLE = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80

_NLH = struct.Struct("=IHHII")
_RTMSG = struct.Struct("=BBBBBBBBI")
_NDMSG = struct.Struct("=BBHiHBB")
_RTA = struct.Struct("=HH")
_seq = itertools.count(1)


class NetlinkError(OSError):
    """The kernel refused a request, or answered with something we cannot read."""


def _attr(typ: int, data: bytes) -> bytes:
    n = _RTA.size + len(data)
    return _RTA.pack(n, typ) + data + bytes(-n % 4)


def _attrs(buf: bytes | memoryview, off: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while off + _RTA.size <= end:
        n, typ = _RTA.unpack_from(buf, off)
        if n < _RTA.size or off + n > end:
            break
        out[typ & 0x3FFF] = bytes(buf[off + _RTA.size:off + n])
        off += (n + 3) & ~3
    return out


class Rtnl:
    """One rtnetlink socket (open it in the namespace you ask about)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.sock.settimeout(1.0)

    def close(self) -> None:
        self.sock.close()

    def _ask(self, typ: int, flags: int, body: bytes) -> list[tuple[int, memoryview]]:
        """Send one request; its replies as (type, payload) until DONE or the last part."""
        seq = next(_seq)
        self.sock.send(_NLH.pack(_NLH.size + len(body), typ, NLM_F_REQUEST | flags, seq,
                                 0) + body)
        out: list[tuple[int, memoryview]] = []
        while True:
            data = memoryview(self.sock.recv(1 << 16))
            off = 0
            multi = False
            while off + _NLH.size <= len(data):
                n, t, f, s, _pid = _NLH.unpack_from(data, off)
                if n < _NLH.size or off + n > len(data):
                    raise NetlinkError(0, "truncated netlink reply")
                payload = data[off + _NLH.size:off + n]
                off += (n + 3) & ~3
                if s != seq:
                    continue  # a late answer to an earlier request
                multi = bool(f & 0x2)  # NLM_F_MULTI
                if t == NLMSG_DONE:
                    return out
                if t == NLMSG_ERROR:
                    err = struct.unpack_from("=i", payload)[0] if len(payload) >= 4 else 0
                    if err:
                        raise NetlinkError(-err, os.strerror(-err))
                    return out
                out.append((t, payload))
            if not multi:
                return out

    def route(self, dst: str, *, sport: int | None = None, dport: int | None = None
              ) -> tuple[int, str | None]:
        """(output ifindex, gateway or None when ``dst`` is on-link) for UDP ``sport →
        dport`` to ``dst``, as the kernel's FIB (and its ECMP hash) decides."""
        fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
        raw = socket.inet_pton(fam, dst)
        body = _RTMSG.pack(fam, len(raw) * 8, 0, 0, 0, 0, 0, 0, 0) + _attr(RTA_DST, raw)
        if sport is not None and dport is not None:
            body += (_attr(RTA_IP_PROTO, bytes([socket.IPPROTO_UDP]))
                     + _attr(RTA_SPORT, struct.pack("!H", sport))
                     + _attr(RTA_DPORT, struct.pack("!H", dport)))
        for t, p in self._ask(RTM_GETROUTE, 0, body):
            if t != RTM_NEWROUTE or len(p) < _RTMSG.size:
                continue
            a = _attrs(p, _RTMSG.size, len(p))
            if RTA_OIF not in a:
                break
            oif = struct.unpack("=i", a[RTA_OIF][:4])[0]
            gw = a.get(RTA_GATEWAY)
            if gw is not None:
                return oif, socket.inet_ntop(fam, gw)
            via = a.get(RTA_VIA)  # IPv4 route via an IPv6 next hop (RFC 5549)
            if via is not None and len(via) >= 2:
                vf = struct.unpack_from("=H", via)[0]
                return oif, socket.inet_ntop(vf, via[2:])
            return oif, None
        raise NetlinkError(0, f"no route to {dst}")

    def multipath(self, dst: str) -> bool:
        """Whether the route entry matching ``dst`` may send flows to it by more than one
        next hop (an ``RTA_MULTIPATH`` route, or a nexthop object, which may be a
        group): then :meth:`route` answers per flow; else its answer is the same for
        every UDP port pair. Raises :class:`NetlinkError` when the kernel will not say
        (before Linux 4.13: no ``RTM_F_FIB_MATCH``)."""
        fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
        raw = socket.inet_pton(fam, dst)
        body = _RTMSG.pack(fam, len(raw) * 8, 0, 0, 0, 0, 0, 0, RTM_F_FIB_MATCH) + _attr(
            RTA_DST, raw)
        for t, p in self._ask(RTM_GETROUTE, 0, body):
            if t != RTM_NEWROUTE or len(p) < _RTMSG.size:
                continue
            a = _attrs(p, _RTMSG.size, len(p))
            return RTA_MULTIPATH in a or RTA_NH_ID in a
        raise NetlinkError(0, f"no route to {dst}")

    def neighbours(self, ifindex: int, family: int) -> dict[str, bytes]:
        """Resolved neighbours of one interface: address text → MAC."""
        body = _NDMSG.pack(family, 0, 0, ifindex, 0, 0, 0)
        out: dict[str, bytes] = {}
        for t, p in self._ask(RTM_GETNEIGH, NLM_F_DUMP, body):
            if t != RTM_NEWNEIGH or len(p) < _NDMSG.size:
                continue
            fam, _, _, idx, state, _, _ = _NDMSG.unpack_from(p)
            if idx != ifindex or not state & NUD_USABLE:
                continue
            a = _attrs(p, _NDMSG.size, len(p))
            dst, ll = a.get(NDA_DST), a.get(NDA_LLADDR)
            if dst is None or ll is None or len(ll) != 6:
                continue
            if fam in (socket.AF_INET, socket.AF_INET6) and len(dst) in (4, 16):
                out[socket.inet_ntop(fam, dst)] = ll
        return out

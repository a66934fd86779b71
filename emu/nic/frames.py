# SPDX-License-Identifier: GPL-2.0-only
"""Datagrams from a flow's own source port as whole Ethernet frames, many per syscall,
through a packet TX ring.

Why: a sprayed transport (UET) gives every packet its own UDP source port —
its entropy, which picks the ECMP path — and a RoCEv2 QP sends from its own
source port too. A UDP socket's source port is the port it is bound to, so
through sockets every such packet is its own ``sendmsg`` on its own socket,
and (UET's sprays always; RoCEv2 over IPv4, where GSO would break the ICRC)
GSO cannot batch them. That syscall and the kernel's UDP/IP output path were
~40 % of a sending UET daemon (py-spy, ``scripts/bench-uet``). A NIC writes
frames into a descriptor ring and rings a doorbell; so does
:class:`FrameTx`: an ``AF_PACKET`` socket with a ``PACKET_TX_RING``
(TPACKET_V2) mapped into the daemon, frames written with slice assignment,
one ``send()`` (the doorbell) for all that are ready.

A transport with framing over the IP and UDP headers (the RoCEv2 ICRC) hands
:meth:`FrameTx.drain` its ``seal``; each datagram is sealed for the headers
the frame will carry (source address and port, destination) just before it is
written, as the socket path seals it for the headers the kernel will write.

What stays the kernel's, so the frames are what a socket would have sent:

* **the path**: the next hop comes from the kernel's FIB for *this flow*
  (destination and UDP ports, so a multi-homed host's ECMP choice is the
  kernel's), its MAC from the neighbour table (:mod:`emu.nic.netlink`);
  both are re-read every ``refresh`` seconds and after a send error. A
  destination whose neighbour is not resolved yet is refused (``put``
  returns None): the caller sends that datagram through its UDP socket,
  which makes the kernel resolve it.
* **the checksum**: a ``virtio_net_hdr`` (``PACKET_VNET_HDR``) asks for the
  UDP checksum as an offload (``NEEDS_CSUM``, pseudo-header sum in the
  field), exactly as the kernel's UDP output does for a device with
  checksum offload; where the fabric turned offload off
  (``Fabric(checksum_offload=False)``, the default), the kernel completes it
  in software before the frame leaves, so captures show valid checksums.
* **the qdisc**: frames go through the interface's queueing discipline (no
  ``PACKET_QDISC_BYPASS``), so rate limits and shaping on the host's link
  apply as they do to socket traffic.

IPv4 frames carry DF and IP ID 0, like the daemon's unconnected UDP sockets (the
RoCEv2 ICRC covers the IP ID: the framer assumes 0, as for those sockets);
IPv6 frames a flow label hashed from the ports, like the kernel's automatic
flow labels — or the one the transport gave (``TxMeta.label``: MRC's STEV and
SRv6 EVs), and, for SRv6, the datagram inside an outer IPv6 header to the
uSID container ``TxMeta.outer`` names (:func:`ip_udp`; the next hop is the
outer destination's). Such a datagram must not go by a UDP socket, which can
set neither: while its next hop is unresolved it leaves by :class:`RawTx`.
Headers are cached per (destination, length, TOS, label, outer), for any
source port: each frame gets its own source port (and the flow label hashed
from it) written into its copy (:func:`_set_sport`). Why not per port too: a
UET engine sprays over 4096 source ports, and a cache per port made every
(destination, port) pair cost a header build and an ``RTM_GETROUTE`` on first
use, again after every ``refresh``, and churned past the cache's bound. The
next hop depends on the port only where the route to the destination is
multipath (:meth:`~emu.nic.netlink.Rtnl.multipath`, asked once per
destination): only then are headers kept per port as well.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import mmap
import socket
import struct
from typing import Any

from emu.core.datagram import Gather, Run
from emu.fabricclock import wall
from emu.nic.netlink import Rtnl
from emu.transports.base import TxMeta

SOL_PACKET = 263
#: the ring socket's send buffer (bytes; the kernel caps it at net.core.wmem_max), as the
#: daemon's UDP sockets' (NicConfig.sndbuf)
SNDBUF = 4 << 20
PACKET_VNET_HDR, PACKET_VERSION, PACKET_TX_RING, PACKET_LOSS = 15, 10, 13, 14
TPACKET_V2 = 1
TP_STATUS_SEND_REQUEST, TP_STATUS_WRONG_FORMAT = 1, 4
#: frame data starts after the tpacket2_hdr (TPACKET2_HDRLEN - sizeof(sockaddr_ll))
DATA = 32
VNET_LEN = 10
SIOCGIFHWADDR = 0x8927
_STATUS = struct.Struct("=II")  # tp_status, tp_len
_UDP = struct.Struct("!HHHH")
_IP4 = struct.Struct("!BBHHHBBH4s4s")
_IP6 = struct.Struct("!IHBB16s16s")
_MAX_CACHE = 8192
_PORT = struct.Struct("!H")
_WORD = struct.Struct("!I")
#: a header cache entry meaning: this destination's route is multipath, the next hop
#: depends on the ports — look the headers up by source port as well
_BY_PORT: tuple[bytes, int, tuple[int, ...]] = (b"", 0, ())


def _fold(s: int) -> int:
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def _sum16(b: bytes) -> int:
    return sum(struct.unpack(f"!{len(b) // 2}H", b))


_VNET = struct.Struct("=BBHHHH")
#: an SRv6 outer header's next header: the inner IPv6 packet (RFC 8986 encapsulation)
IPPROTO_IPV6 = 41


def port_label(sport: int, dport: int) -> int:
    """The IPv6 flow label hashed from the UDP ports (never 0), like the kernel's
    automatic labels: one rule for a header built whole (:func:`ip_udp`) and for a
    cached one given its frame's own source port (:func:`_set_sport`)."""
    return ((sport * 2654435761) ^ (dport << 4)) & 0xFFFFF or 1


def _ip6_word(tos: int, label: int) -> int:
    """An IPv6 header's first word: version 6, traffic class, flow label."""
    return (6 << 28) | (tos << 20) | (label & 0xFFFFF)


def ip_udp(src: bytes, dst: bytes, sport: int, dport: int, n: int, tos: int,
           label: int | None, outer: bytes | None, ttl: int,
           pseudo_base: int | None = None) -> tuple[bytes, bytes]:
    """The IP header(s) and the UDP header of an ``n``-byte datagram, the UDP checksum
    field holding the pseudo-header's sum (what a checksum offload completes).

    ``label``: the IPv6 flow label (None: one hashed from the ports, like the
    kernel's automatic labels). ``outer``: SRv6 — an outer IPv6 header to that
    destination (a uSID container) from ``src``, next header IPv6, carrying the
    inner packet's traffic class (so switches classify and ECN-mark it, RFC 6040's
    normal mode) and flow label."""
    ulen = 8 + n
    if pseudo_base is None:
        pseudo_base = _sum16(src) + socket.IPPROTO_UDP
    udp = _UDP.pack(sport, dport, ulen, _fold(pseudo_base + _sum16(dst) + ulen))
    if len(src) == 16:
        word = _ip6_word(tos, port_label(sport, dport) if label is None else label)
        ip = _IP6.pack(word, ulen, socket.IPPROTO_UDP, ttl, src, dst)
        if outer is not None:
            ip = _IP6.pack(word, 40 + ulen, IPPROTO_IPV6, ttl, src, outer) + ip
        return ip, udp
    if outer is not None or label is not None:
        raise ValueError("a flow label or an SRv6 outer header needs IPv6")
    h = _IP4.pack(0x45, tos, 20 + ulen, 0, 0x4000, ttl, socket.IPPROTO_UDP, 0, src, dst)
    return h[:10] + struct.pack("!H", 0xFFFF ^ _fold(_sum16(h))) + h[12:], udp


def _set_sport(mv: Any, o: int, e: int, hdr: tuple[bytes, int, tuple[int, ...]], sport: int,
               dport: int) -> None:
    """Write ``sport`` into the frame whose prefix ``hdr`` was copied to ``mv[o:e]``: the
    UDP source port, and where the prefix carries a flow label hashed from the ports
    (IPv6, no ``TxMeta.label``) that label, in every IPv6 header at ``hdr[2]`` (the one
    :func:`ip_udp` would have made for this port; the checksum field holds the
    pseudo-header's sum, which has no ports, so it stays)."""
    _PORT.pack_into(mv, e - 8, sport)
    word = hdr[1]
    if word:
        word |= port_label(sport, dport)
        for at in hdr[2]:
            _WORD.pack_into(mv, o + at, word)


def hwaddr(sock: socket.socket, ifname: str) -> bytes:
    """The interface's MAC (SIOCGIFHWADDR answers for the socket's namespace)."""
    req = struct.pack("16s16x", ifname.encode())
    return fcntl.ioctl(sock, SIOCGIFHWADDR, req)[18:24]


#: slots of an unpaced port's ring, and the most any ring gets (2 MiB at a 4 KiB MTU) …
RING_FRAMES = 256
#: … and the fewest a paced port's ring gets
RING_FRAMES_MIN = 64


def ring_frames(rate: float, burst_s: float, mtu: int) -> int:
    """The slots a paced port's ring needs: a frame's slot stays the kernel's until the
    frame has left through the link's tbf, so the ring holds the port's FIFO — ``burst_s``
    of line rate (``rate``, bits/s), counted in full frames — four times over (smaller
    frames, a kick's batch); a power of two in :data:`RING_FRAMES_MIN` ..
    :data:`RING_FRAMES`. A full ring costs no data: the transmit path waits for a slot
    (``ring_full``). Why not always the most: a ring is 2 MiB of locked kernel memory, and
    a port has one per transport and address family — 12 MiB a host, 384 of a 64-host
    worker's 477 MiB."""
    full = rate * burst_s / 8 / (mtu + 14)
    n = RING_FRAMES_MIN
    while n < min(RING_FRAMES, 4 * full):
        n <<= 1
    return n


#: destinations whose next hop did not resolve, remembered 10 ms each (bounded: they
#: come from the wire, a spoofing peer could name any number)
RETRY_TABLE_MAX = 1024

class Ring:
    """A port's ``PACKET_TX_RING``: the socket, its mapped slots, and where the next frame
    goes and what the kernel has taken. Open it in the port's network namespace.

    Shared by every :class:`FrameTx` of the port — its address families and its
    transports (:attr:`refs`; closed with the last) — so a port has one ring, not one per
    address and transport. Why: each ring is locked kernel memory, and making one and
    closing it each wait for an RCU grace period in the kernel (``synchronize_net``: 8–24 ms
    here, with the interpreter's lock held), six of each per host made a 32-host worker
    take 5.6 s to start and longer to stop."""

    def __init__(self, ifname: str, mtu: int, frames: int = RING_FRAMES) -> None:
        self.ifname = ifname
        self.mtu = mtu
        need = DATA + VNET_LEN + 14 + mtu
        fs = 4096
        while fs < need:
            fs <<= 1
        if fs > 1 << 16:
            raise ValueError(f"{ifname}: MTU {mtu} too large for a frame ring")
        self.frame_size = fs
        self.frames = frames
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: receives nothing
        try:
            s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
            s.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
            # a frame the kernel rejects is skipped and its slot freed, not left stuck
            s.setsockopt(SOL_PACKET, PACKET_LOSS, 1)
            # room in the kernel for a port's whole transmit FIFO (the pacer's burst):
            # with the default ~208 KiB a kick sent only part of it when the link's tbf
            # drained slowly (a small tbf burst: low rates, dilated time), the rest
            # waiting for the next kick (FrameTx.kick)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
            s.setsockopt(SOL_PACKET, PACKET_TX_RING, struct.pack("IIII", fs, frames, fs, frames))
            s.bind((ifname, 0))
            s.setblocking(False)
            self.ifindex = socket.if_nametoindex(ifname)
            self.mac = hwaddr(s, ifname)
            self.ring = mmap.mmap(s.fileno(), fs * frames)
        except BaseException:
            s.close()
            raise
        self.sock = s
        self.mv = memoryview(self.ring)
        self.head = 0  # next slot to fill
        self.khead = 0  # where the kernel's own head should be (after the last clean kick)
        self.pending = 0  # filled, not yet kicked
        self.refs = 0  # FrameTx using it

    def fileno(self) -> int:
        return self.sock.fileno()

    def release(self) -> None:
        """One user less; the last one closes it."""
        self.refs -= 1
        if self.refs > 0:
            return
        self.mv.release()
        with contextlib.suppress(BufferError):
            self.ring.close()
        self.sock.close()


class FrameTx:
    """Frames from ``address`` on interface ``ifname``, through the port's :class:`Ring`.

    Open it in the port's network namespace. :meth:`drain` places queued datagrams
    until one must go another way or the ring is full (then :meth:`kick` and
    retry, or wait for :attr:`sock` to be writable); :meth:`kick` hands every
    placed frame to the kernel in one syscall. ``ring``: the port's ring, shared
    (default: a ring of its own, ``frames`` slots).
    """

    def __init__(self, ifname: str, address: str, mtu: int, *, frames: int = RING_FRAMES,
                 refresh: float = 1.0, ttl: int = 64, ring: Ring | None = None) -> None:
        self.family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.ifname = ifname
        self.src = socket.inet_pton(self.family, address)
        self.mtu = mtu
        self.refresh = refresh
        self.ttl = ttl
        self.iphdr = 40 if self.family == socket.AF_INET6 else 20
        r = Ring(ifname, mtu, frames) if ring is None else ring
        if r.ifname != ifname or mtu > r.mtu:
            raise ValueError(f"{ifname} (MTU {mtu}) cannot share the ring of {r.ifname} "
                             f"(MTU {r.mtu})")
        r.refs += 1
        try:
            self.rtnl: Rtnl | None = Rtnl()
        except BaseException:
            r.release()
            raise
        self.r = r
        self.sock, self.ring, self.mv = r.sock, r.ring, r.mv
        self.frame_size, self.frames = r.frame_size, r.frames
        self.ifindex, self.mac = r.ifindex, r.mac
        #: (prefix, flow label word without the label, where it goes): see _prefix_for
        self._prefix: dict[tuple[Any, ...], tuple[bytes, int, tuple[int, ...]]] = {}
        self._multi: dict[str, bool] = {}  # next-hop address → its route is multipath
        self._dests: dict[str, bool] = {}  # destination → leaves by this port
        self._neigh: dict[str, bytes] = {}
        self._retry: dict[str, float] = {}
        self._stamp = wall()
        #: pseudo-header sum of the fixed part (source address, protocol)
        self._pseudo = _sum16(self.src) + socket.IPPROTO_UDP
        self.c = {"frames": 0, "kicks": 0, "unresolved": 0, "ring_full": 0, "send_errors": 0,
                  "resolves": 0, "wrong_format": 0, "dropped": 0, "kick_again": 0}

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def pending(self) -> int:
        """Frames placed in the port's ring, not yet kicked (by any of its users)."""
        return self.r.pending

    def close(self) -> None:
        if self.rtnl is not None:
            self.rtnl.close()
            self.rtnl = None
            self.r.release()

    # -- headers ----------------------------------------------------------------------

    def invalidate(self) -> None:
        """Forget next hops and headers (read again on next use)."""
        self._prefix.clear()
        self._multi.clear()
        self._neigh.clear()
        self._dests.clear()
        self._stamp = wall()

    def _next_hop_mac(self, dst: str, sport: int, dport: int) -> bytes | None:
        assert self.rtnl is not None
        oif, gw = self.rtnl.route(dst, sport=sport, dport=dport)
        if oif != self.ifindex:
            return None  # the kernel would send this flow out of another port
        hop = gw or dst
        mac = self._neigh.get(hop)
        if mac is None:
            fam = socket.AF_INET6 if ":" in hop else socket.AF_INET
            self._neigh.update(self.rtnl.neighbours(self.ifindex, fam))
            self.c["resolves"] += 1
            mac = self._neigh.get(hop)
        return mac

    def _build(self, key: tuple[Any, ...]) -> bytes | None:
        """The frame's prefix: the virtio header (the UDP checksum from the UDP header
        on, as an offload), Ethernet, [the outer IPv6 header], IP, UDP."""
        dst, dport, sport, n, tos, label, outer = key
        now = wall()
        if self._retry.get(dst, 0.0) > now:
            return None
        try:
            draw = socket.inet_pton(self.family, dst)
            hop = draw if outer is None else outer  # SRv6: the path's first uSID
            mac = self._next_hop_mac(socket.inet_ntop(self.family, hop), sport, dport)
        except (OSError, ValueError):
            mac = None
        if mac is None:
            if len(self._retry) >= RETRY_TABLE_MAX:  # keyed by wire addresses: bounded
                self._retry = {d: t for d, t in self._retry.items() if t > now}
                if len(self._retry) >= RETRY_TABLE_MAX:
                    self._retry.clear()
            self._retry[dst] = now + 0.01  # the socket path resolves it meanwhile
            return None
        self._retry.pop(dst, None)
        ip, udp = ip_udp(self.src, draw, sport, dport, n, tos, label, outer, self.ttl,
                         self._pseudo)
        eth = mac + self.mac + (b"\x86\xdd" if self.family == socket.AF_INET6 else b"\x08\x00")
        # checksum from the UDP header on: NEEDS_CSUM, no GSO, start, offset
        vnet = _VNET.pack(1, 0, 0, 0, 14 + len(ip), 6)
        return vnet + eth + ip + udp

    # -- the ring ---------------------------------------------------------------------

    def drain(self, q: Any, main: Any, main_for: Any, budget: float = math.inf,
              seal: Any = None, seal_at: Any = None) -> tuple[int, int, bool]:
        """Place datagrams from the head of ``q`` (a TX queue of ``(data, addr, meta)``)
        while each leaves port ``main`` from a source port of its own and the ring has
        room. The transport's framing (:mod:`emu.nic.framing`), if it has one, finishes
        each: ``seal_at(buf, off, end, src, sport, dst, dport)`` in the frame once it is
        written (one pass over contiguous memory), else ``seal(buf, src, sport, dst,
        dport)`` before — then a :class:`Run` is not taken (the socket path opens it
        into datagrams and seals each).

        Stops at the first that is not a :class:`TxMeta` with an entropy other than
        ``main.port``, whose destination ``main_for`` routes to another port, that is
        followed by one of the same flow while ``main`` does GSO (the socket batches
        those), or whose next hop is unresolved — the caller sends that one by socket.
        Returns ``(frames placed, their bytes, ring full)``."""
        now = wall()
        if now - self._stamp > self.refresh:
            self.invalidate()
        ring, mv, fs, nf = self.ring, self.mv, self.frame_size, self.frames
        c = self.c
        port, gso, room = main.port, main.gso, self.mtu - 8 - self.iphdr
        base = DATA
        r = self.r
        head = r.head
        placed = nbytes = 0
        full = False
        try:
            while q and nbytes < budget:
                data, addr, meta = q[0]
                if type(data) is Run:
                    if seal is not None and seal_at is None:
                        break  # the socket path opens it and seals each datagram
                    k, nb, full = self._place_run(data, addr, main, main_for, head,
                                                  budget - nbytes, seal_at)
                    head = (head + k) % nf
                    placed += k
                    nbytes += nb
                    if data.done < data.count:
                        break  # ring full, or the rest goes by socket
                    q.popleft()
                    continue
                if type(meta) is not TxMeta or (meta.entropy == port and meta.label is None
                                                and meta.outer is None):
                    break  # the socket sends from the port's own source port
                if gso and len(q) > 1 and q[1][2] is meta:
                    break
                if not self._leaves_here(addr, main, main_for):
                    break
                off = head * fs
                if ring[off] and not self._slot_ready(off):
                    full = True
                    break
                g = type(data) is Gather
                n = data.size if g else len(data)
                if n > (room if meta.outer is None else room - 40):
                    break  # the socket path reports EMSGSIZE
                hdr = self._prefix_for(addr, n, meta)
                if hdr is None:
                    break
                pre = hdr[0]
                if seal is not None and seal_at is None:
                    if not g and type(data) is not bytearray:
                        data = bytearray(data)
                    seal(data, main.address, meta.entropy, addr[0], addr[1])
                o = off + base
                e = o + len(pre)
                mv[o:e] = pre
                _set_sport(mv, o, e, hdr, meta.entropy, addr[1])
                d0 = e
                if g:
                    k = len(data.head)
                    mv[e:e + k] = data.head
                    e += k
                    k = len(data.body)
                    mv[e:e + k] = data.body
                    e += k
                    k = len(data.tail)
                    if k:
                        mv[e:e + k] = data.tail
                        e += k
                else:
                    mv[e:e + n] = data
                    e += n
                if seal_at is not None:
                    seal_at(mv, d0, e, main.address, meta.entropy, addr[0], addr[1])
                _STATUS.pack_into(ring, off, TP_STATUS_SEND_REQUEST, e - off - DATA)
                head = head + 1 if head + 1 < nf else 0
                q.popleft()
                placed += 1
                nbytes += n
        finally:
            r.head = head
            r.pending += placed
            c["frames"] += placed
        return placed, nbytes, full

    def _slot_ready(self, off: int) -> bool:
        """Whether the used slot at ``off`` may be written: no while it is still the
        kernel's (the ring is full: counted), yes when the kernel skipped it as malformed
        (``PACKET_LOSS``: counted)."""
        if not self.ring[off] & TP_STATUS_WRONG_FORMAT:
            self.c["ring_full"] += 1
            return False
        self.c["wrong_format"] += 1
        return True

    def _prefix_for(self, addr: Any, n: int, meta: Any
                    ) -> tuple[bytes, int, tuple[int, ...]] | None:
        """The Ethernet + IP + UDP headers of a datagram of ``n`` bytes to ``addr`` sent
        with ``meta``, for *some* source port — the caller writes the packet's own with
        :func:`_set_sport` — as ``(prefix, flow label word less the label or 0, offsets
        of that word)`` (cached); None while its next hop is unresolved (counted).

        The cache is keyed by the fields the headers take from ``meta``, not by ``meta``
        itself: TxMeta's hash is a dataclass method, a Python call that cost ~0.5 µs per
        sprayed packet (a UET sender draws a new entropy for almost every one). The
        source port is in the key only where the route to the next hop is multipath
        (the module docstring: why)."""
        key = (addr, n, meta.dscp, meta.ecn, meta.label, meta.outer)
        hdr = self._prefix.get(key)
        if hdr is not None and hdr is not _BY_PORT:
            return hdr
        if hdr is None and self._multipath(addr[0], meta.outer):
            self._keep(key, _BY_PORT)
            hdr = _BY_PORT
        if hdr is _BY_PORT:
            key += (meta.entropy,)
            hdr = self._prefix.get(key)
            if hdr is not None:
                return hdr
        pre = self._build((addr[0], addr[1], meta.entropy, n, meta.tos, meta.label,
                           meta.outer))
        if pre is None:
            self.c["unresolved"] += 1
            return None
        word, at = 0, ()
        if self.family == socket.AF_INET6 and meta.label is None:
            word = _ip6_word(meta.tos, 0)
            at = (VNET_LEN + 14,) if meta.outer is None else (VNET_LEN + 14, VNET_LEN + 54)
        hdr = (pre, word, at)
        self._keep(key, hdr)
        return hdr

    def _keep(self, key: tuple[Any, ...], hdr: tuple[bytes, int, tuple[int, ...]]) -> None:
        if len(self._prefix) >= _MAX_CACHE:
            self._prefix.clear()
        self._prefix[key] = hdr

    def _multipath(self, dst: str, outer: bytes | None) -> bool:
        """Whether the route to the frame's next-hop address (``dst``, or the SRv6 outer
        destination) is multipath, so its next hop depends on the ports (asked once per
        address per ``refresh``; a kernel that will not say counts as multipath)."""
        hop = dst if outer is None else socket.inet_ntop(self.family, outer)
        m = self._multi.get(hop)
        if m is None:
            try:
                assert self.rtnl is not None
                m = self.rtnl.multipath(hop)
            except (OSError, ValueError):
                m = True
            if len(self._multi) >= _MAX_CACHE:
                self._multi.clear()
            self._multi[hop] = m
        return m

    def _leaves_here(self, addr: Any, main: Any, main_for: Any) -> bool:
        ok = self._dests.get(addr[0])
        if ok is None:
            try:
                ok = main_for(addr[0]) is main
            except OSError:
                ok = False
            if len(self._dests) >= _MAX_CACHE:
                self._dests.clear()
            self._dests[addr[0]] = ok
        return ok

    def _place_run(self, run: Run, addr: Any, main: Any, main_for: Any, head: int,
                   budget: float = math.inf, seal_at: Any = None) -> tuple[int, int, bool]:
        """Write the frames of ``run`` from its cursor on, starting at slot ``head``: the
        prefix for the packet's entropy, its header, its payload slice, its zero tail
        sealed by ``seal_at`` (see :meth:`drain`). Stops when the
        ring is full, or for good (the rest goes by socket) at an entropy that is the
        port's own or has no next hop, or when the socket could send the whole run as
        one GSO batch (one entropy), or (for now) once ``budget`` bytes are placed.
        Returns ``(placed, bytes, full)``."""
        i, count = run.done, run.count
        metas = run.metas
        if not self._leaves_here(addr, main, main_for) or (
                main.gso and count - i > 1 and metas[i] is metas[-1]
                and all(m is metas[i] for m in metas[i:])):
            return 0, 0, False
        hl, seg, tl = run.hlen, run.seg, run.tlen
        n = hl + seg + tl
        zeros = bytes(tl)
        src = main.address
        dst, dport = addr[0], addr[1]
        if n > self.mtu - 8 - self.iphdr:
            return 0, 0, False  # the socket path reports EMSGSIZE
        ring, mv, fs, nf = self.ring, self.mv, self.frame_size, self.frames
        heads, pay = memoryview(run.heads), run.payload
        port = main.port
        # id(meta) → frame prefix, for this run (the run holds its metas): TxMeta's own
        # hash is a dataclass method, a Python call per packet (~1 % of a sending daemon)
        pres: dict[int, tuple[bytes, int, tuple[int, ...]]] = {}
        base = DATA
        start = i
        full = False
        stop = count if budget == math.inf else min(count, i + max(1, math.ceil(budget / n)))
        while i < stop:
            off = head * fs
            if ring[off] and not self._slot_ready(off):
                full = True
                break
            meta = metas[i]
            hdr = pres.get(id(meta))
            if hdr is None:
                if (meta.entropy == port and meta.label is None and meta.outer is None) or (
                        meta.outer is not None and n > self.mtu - 48 - self.iphdr):
                    break
                hdr = self._prefix_for(addr, n, meta)
                if hdr is None:
                    break
                pres[id(meta)] = hdr
            pre = hdr[0]
            o = off + base
            e = o + len(pre)
            mv[o:e] = pre
            _set_sport(mv, o, e, hdr, meta.entropy, dport)
            h = e + hl
            mv[e:h] = heads[i * hl:i * hl + hl]
            p = i * seg
            t = h + seg
            mv[h:t] = pay[p:p + seg]
            if tl:
                mv[t:t + tl] = zeros
                t += tl
            if seal_at is not None:
                seal_at(mv, e, t, src, meta.entropy, dst, dport)
            _STATUS.pack_into(ring, off, TP_STATUS_SEND_REQUEST, t - off - DATA)
            head = head + 1 if head + 1 < nf else 0
            i += 1
        heads.release()
        run.done = i
        k = i - start
        return k, k * n, full

    def kick(self) -> None:
        """Hand every placed frame to the kernel (non-blocking: a full device queue leaves
        them in the ring for the next kick). Raises OSError for a send error.

        A frame dropped on its way out — by the egress hook that emulates loss
        (``emu.fabric.linkctl``) or by a full qdisc — makes ``send()`` fail
        with ENOBUFS after the kernel has consumed it, and stop there: that is a
        loss on the wire (counted as ``dropped``), and the kick goes on with
        the frames behind it rather than leave them waiting for the next one."""
        r = self.r
        n = r.pending
        if not n:
            return
        r.pending = 0
        self.c["kicks"] += 1
        for _ in range(n + 1):
            try:
                self.sock.send(b"", socket.MSG_DONTWAIT)
                last = (r.head - 1 if r.head else self.frames - 1) * self.frame_size
                if self.ring[last] == TP_STATUS_SEND_REQUEST:
                    # out of socket memory part-way: the kernel sent the first frames,
                    # left the rest marked to send and said nothing (tpacket_snd returns
                    # what it sent). The next kick sends them: TxPath comes back for it
                    r.pending = n
                    self.c["kick_again"] += 1
                    return
                r.khead = r.head
                return
            except BlockingIOError:
                r.pending = n  # no socket memory now: the next flush kicks again
                self.c["kick_again"] += 1
                return
            except OSError as e:
                if e.errno == errno.ENOBUFS and self._skip_dropped():
                    self.c["dropped"] += 1
                    continue
                self.c["send_errors"] += 1
                self.invalidate()
                raise

    def _skip_dropped(self) -> bool:
        """The kernel hands a frame that was dropped on its way out back to the ring as
        still to send (it treats the drop as congestion) and would send it again on the
        next kick — so emulated loss would never lose anything. Make that frame (the
        first one still marked SEND_REQUEST) malformed, ``tp_len`` 0: the next ``send()``
        skips it (``PACKET_LOSS``) and the drop stands."""
        r = self.r
        ring, fs, nf = self.ring, self.frame_size, self.frames
        i = r.khead
        for _ in range(nf):
            off = i * fs
            if ring[off] == TP_STATUS_SEND_REQUEST:
                _STATUS.pack_into(ring, off, TP_STATUS_SEND_REQUEST, 0)
                r.khead = i + 1 if i + 1 < nf else 0
                return True
            if i == r.head:
                return False
            i = i + 1 if i + 1 < nf else 0
        return False

    def counters(self) -> dict[str, int]:
        return dict(self.c)


def _csum(*parts: Any) -> int:
    """The Internet checksum of the concatenated ``parts`` (each of even length but the
    last): a number's value mod 2^16 − 1 is the ones'-complement sum of its 16-bit
    words, so one big-integer remainder per part does it in C."""
    v = 0
    for p in parts:
        b = bytes(p)
        if len(b) & 1:
            b += b"\0"
        v += int.from_bytes(b, "big") % 0xFFFF
    s = v % 0xFFFF or 0xFFFF
    return (0xFFFF - s) or 0xFFFF


class RawTx:
    """One NIC port's raw IPv6 socket (``IPPROTO_RAW``: the daemon writes the IP
    headers), for a datagram that must carry its own flow label or SRv6 outer header
    (:class:`~emu.core.datagram.TxMeta` ``label``/``outer``) while its frame cannot be
    built — the next hop not resolved yet, or no frame ring on the port. A UDP socket
    could send it, but without them: the peer would read another EV, and an SRv6 packet
    would take the ECMP route instead of its path. The kernel resolves the next hop
    for it, as for a socket's; the UDP checksum is computed here (:func:`_csum`)."""

    def __init__(self, ifname: str, address: str, *, ttl: int = 64,
                 sndbuf: int = SNDBUF) -> None:
        if ":" not in address:
            raise ValueError("flow labels and SRv6 headers are IPv6's")
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            s.setblocking(False)
        except BaseException:
            s.close()
            raise
        self.sock = s
        self.src = socket.inet_pton(socket.AF_INET6, address)
        self.ttl = ttl
        self.c = {"raw_sends": 0}

    def packet(self, data: Any, dst: str, dport: int, meta: Any) -> tuple[bytes, str]:
        """The IP packet of ``data`` to ``(dst, dport)`` sent with ``meta``, and the
        address the kernel routes it by (the outer destination under SRv6)."""
        body = bytes(data)
        ip, udp = ip_udp(self.src, socket.inet_pton(socket.AF_INET6, dst), meta.entropy,
                         dport, len(body), meta.tos, meta.label, meta.outer, self.ttl)
        # the field holds the pseudo-header's sum (folded); the header's other words and
        # the payload complete it
        csum = _csum(udp[6:8], udp[:6], body)
        first = dst if meta.outer is None else socket.inet_ntop(socket.AF_INET6, meta.outer)
        return ip + udp[:6] + struct.pack("!H", csum) + body, first

    def send(self, data: Any, dst: str, dport: int, meta: Any) -> int:
        pkt, first = self.packet(data, dst, dport, meta)
        self.sock.sendto(pkt, (first, 0))
        self.c["raw_sends"] += 1
        return len(pkt)

    def close(self) -> None:
        self.sock.close()

# SPDX-License-Identifier: GPL-2.0-only
"""The NIC's ports: UDP sockets, interface discovery, drain-until-EAGAIN receive, GSO send.

Why each socket option (see ``/work/shared/perf-notes.md`` and ``specs/rocev2.md``):

* IPv4 sockets are **unconnected** with ``IP_MTU_DISCOVER=IP_PMTUDISC_DO``: DF is
  set, so the kernel writes IP ID 0 — the RoCE ICRC covers the IPv4 ID, and a
  connected socket (or fragmentation) would randomise it.
* **GSO on IPv4 is off by default**: measured on this kernel, a GSO send with DF
  gets IP IDs 0, 1, 2, … across its segments, which breaks the ICRC of every
  segment but the first. IPv6 has no ID, so GSO is used there when detected.
* ``UDP_GRO`` on receive keeps the kernel's cost per super-packet; segments
  are split here using the segment size from the cmsg.
* ``SO_RXQ_OVFL`` reports the kernel's own receive-queue drops (the socket
  buffer is the first bounded queue: counted, not hidden).
* ``IP_RECVTOS``/``IPV6_RECVTCLASS``: the ECN bits, which a congestion-controlled
  transport needs (CE → CNP).
* ``IP_FREEBIND``: bind to an address that is still being configured.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from emu.fabricclock import FabricClock
from emu.ifinfo import feature, if_mtu
from emu.nic import rxheader

SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
#: accept IPv6 datagrams whose UDP checksum is 0: Linux rdma_rxe sends RoCEv2 over IPv6
#: so (the ICRC covers the packet; RFC 6936 allows it for tunnels), and without this
#: option the kernel drops every one of them before the daemon could read it
UDP_NO_CHECK6_RX = 102
#: a plain int: ``socket.MSG_TRUNC`` is an IntFlag, whose ``&`` runs in Python (per read)
_MSG_TRUNC = int(socket.MSG_TRUNC)
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO = 23, 2
IP_FREEBIND, IPV6_FREEBIND = 15, 78
SO_RXQ_OVFL = 40
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
IPV6_RECVTCLASS = getattr(socket, "IPV6_RECVTCLASS", 66)
IPV6_TCLASS = getattr(socket, "IPV6_TCLASS", 67)
SIOCGIFADDR = 0x8915
GSO_MAX_SEGS = 64
#: reads land in chunks this big and are lent out (_next_chunk); at most RX_SPARE chunks
#: wait to be reused
RX_CHUNK = 256 * 1024
RX_SPARE = 8
GSO_MAX_BYTES = 65000
#: sends at another TOS than the socket's (by cmsg) before that TOS becomes the socket's
TOS_ADOPT = 8
#: SO_TIMESTAMPNS (= its control message's type): each datagram's kernel receive time
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("qq")
_STAMP_CMSG = (socket.SOL_SOCKET, SO_TIMESTAMPNS)
#: IPV6_FLOWINFO: as a socket option, "give me each datagram's flow info"; as a control
#: message, its traffic class and flow label (network order), present only when non-zero
IPV6_FLOWINFO = 11
_FLOW_CMSG = (socket.IPPROTO_IPV6, IPV6_FLOWINFO)
_FLOW_LABEL = 0xFFFFF
_OVFL_CMSG = (socket.SOL_SOCKET, SO_RXQ_OVFL)
#: SO_RCVMARK's control message: the IPv4 header word :mod:`emu.nic.rxheader` stamps
_MARK_CMSG = (socket.SOL_SOCKET, rxheader.SO_MARK)
_SO_MARK = rxheader.SO_MARK


def stamp_seconds(raw: bytes) -> float:
    """An ``SO_TIMESTAMPNS`` control message's time (``time.time()`` seconds).

    Reads keep the message's raw bytes (:meth:`PortSocket.recv_batch`) and the daemon
    converts only the stamps an engine asks for: a UET target uses one per run of
    packets, and converting every datagram's cost ~0.3 µs each at 8 KiB line rate."""
    sec, nsec = _TIMESPEC.unpack_from(raw)
    return sec + nsec * 1e-9


def arrival(raw: bytes | float | None, skew: float, clock: FabricClock | None = None,
            real: float = 0.0) -> float | None:
    """A raw receive stamp (or None) as a time on the engine's clock: ``skew`` is the
    stamps' clock (``time.time()``) minus the engine's, read together at ``real`` (the
    stamps' clock). ``clock``: the daemon's fabric clock, which shrinks the stamp's age
    by its scale (:meth:`emu.fabricclock.FabricClock.stamp`); None: real time. A float
    is a time on the stamps' clock already (a delay line's release time)."""
    if not raw:
        return None
    t = raw if raw.__class__ is float else stamp_seconds(raw)  # type: ignore[arg-type]
    if clock is None:
        return t - skew
    return clock.stamp(t, real, real - skew)


class ArrivalTimes(Sequence):  # type: ignore[type-arg]
    """A batch's receive times for an engine's ``receive_batch(arrived=…)``, converted
    from the raw stamps when the engine reads one (:func:`stamp_seconds`)."""

    __slots__ = ("raw", "skew", "clock", "real")

    def __init__(self, raw: list[bytes | float | None], skew: float,
                 clock: FabricClock | None = None,
                 real: float = 0.0) -> None:
        self.raw = raw
        self.skew = skew
        self.clock = clock  # see arrival()
        self.real = real

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i: int) -> float | None:  # type: ignore[override]
        return arrival(self.raw[i], self.skew, self.clock, self.real)

_ANC = socket.CMSG_SPACE(4) * 5 + socket.CMSG_SPACE(_TIMESPEC.size)
_U16 = struct.Struct("=H")
_I32 = struct.Struct("=i")
_U32 = struct.Struct("=I")
_U32BE = struct.Struct("!I")
#: an IPv6 traffic-class cmsg is an int (4 bytes, native order): its low byte is the TOS
_TOS_BYTE = 0 if sys.byteorder == "little" else 3


@dataclass
class Iface:
    """One NIC port as the namespace shows it."""

    name: str
    mtu: int
    ipv4: list[str] = field(default_factory=list)
    ipv6: list[str] = field(default_factory=list)


def interfaces() -> list[Iface]:
    """Non-loopback interfaces of this thread's namespace with their global addresses.

    No pyroute2 (its import alone costs ~100 ms and MiBs): one ioctl per
    interface for IPv4 and MTU, ``/proc/thread-self/net/if_inet6`` for IPv6.
    """
    out: list[Iface] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _idx, name in sorted(socket.if_nameindex()):
            if name == "lo":
                continue
            req = struct.pack("16s16x", name.encode())
            try:
                mtu = if_mtu(name, s)
            except OSError:
                continue
            ifc = Iface(name, mtu)
            with contextlib.suppress(OSError):
                ifc.ipv4.append(socket.inet_ntoa(fcntl.ioctl(s, SIOCGIFADDR, req)[20:24]))
            out.append(ifc)
    by_name = {i.name: i for i in out}
    with contextlib.suppress(OSError), open("/proc/thread-self/net/if_inet6") as f:
        for line in f:
            hexaddr, _ix, _plen, scope, _flags, name = line.split()
            if name in by_name and int(scope, 16) == 0:
                by_name[name].ipv6.append(str(socket.inet_ntop(socket.AF_INET6,
                                                               bytes.fromhex(hexaddr))))
    return out


@contextlib.contextmanager
def in_netns(fd: int | None) -> Iterator[None]:
    """Run the body in the network namespace ``fd`` refers to (this thread only).

    Sockets made later (entropy source ports) must live in the NIC's namespace
    even when the daemon runs in-process in a test whose thread is elsewhere.
    """
    if fd is None or os.fstat(fd).st_ino == os.stat("/proc/thread-self/ns/net").st_ino:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, 0x40000000) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        try:
            yield
        finally:
            libc.setns(home, 0x40000000)
    finally:
        os.close(home)


def family_of(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def gid_of(address: str) -> str:
    """The RoCEv2 GID of an address: IPv4-mapped IPv6 for IPv4, the address for IPv6."""
    return f"::ffff:{address}" if family_of(address) == socket.AF_INET else address


class PortSocket:
    """One bound, non-blocking UDP socket of one NIC port and address family."""

    def __init__(self, address: str, port: int, *, ifname: str = "", mtu: int = 1500,
                 gso: bool | None = None, gro: bool = True, rcvbuf: int = 4 << 20,
                 sndbuf: int = 4 << 20, tos: int | None = None, sport: int | None = None) -> None:
        fam = family_of(address)
        s = socket.socket(fam, socket.SOCK_DGRAM)
        try:
            if fam == socket.AF_INET:
                s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
                with contextlib.suppress(OSError):
                    s.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
                s.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
                if tos is not None:
                    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            else:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)
                with contextlib.suppress(OSError):
                    s.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
                s.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVTCLASS, 1)
                if tos is not None:
                    s.setsockopt(socket.IPPROTO_IPV6, IPV6_TCLASS, tos)
            for opt, force, size in ((socket.SO_RCVBUF, 33, rcvbuf), (socket.SO_SNDBUF, 32,
                                                                        sndbuf)):
                try:
                    s.setsockopt(socket.SOL_SOCKET, force, size)  # *BUFFORCE: root only
                except OSError:
                    s.setsockopt(socket.SOL_SOCKET, opt, size)
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
            self.gro = False
            if gro and ifname:
                # only where a sender's GSO batch crosses the cable unsplit (TX checksum
                # offload on, as in benchmark clusters). Elsewhere the cable carries single
                # frames, and a veth in NAPI mode (emu.fabric.build.cable_offloads) would
                # merge them for a socket that asks: the capture would show super-frames
                # that no wire carried
                with contextlib.suppress(OSError):
                    gro = feature(ifname, "tx")
            if gro:
                try:
                    s.setsockopt(SOL_UDP, UDP_GRO, 1)
                    self.gro = True
                except OSError:
                    pass
            can_gso = True
            try:
                s.setsockopt(SOL_UDP, UDP_SEGMENT, 0)
            except OSError:
                can_gso = False
            # None = auto: IPv6 only (IPv4 GSO numbers IP IDs per segment → bad ICRC)
            self.gso = can_gso and (fam == socket.AF_INET6 if gso is None else gso)
            s.bind((address, port if sport is None else sport))
            s.setblocking(False)
            self.sport = s.getsockname()[1]  # the UDP source port of what it sends
        except BaseException:
            s.close()
            raise
        self.sock = s
        self.stamps = False  # reads carry each datagram's receive time (enable_stamps)
        #: reads carry each IPv4 datagram's header word as received (enable_ip_word): 1/0
        self.ip_word = 0
        #: reads carry the IPv6 flow label, in the address tuple (enable_flowinfo)
        self.flowinfo = 0
        self.family = fam
        self.address = address
        self.port = port
        self.ifname = ifname
        self.mtu = mtu
        self.kernel_drops = 0  # SO_RXQ_OVFL: cumulative, as the kernel reports it
        self.tos = 0
        self._tos_other: dict[int, int] = {}  # TOS → datagrams sent at it by cmsg (see tos_anc)
        self._tos_anc: dict[int, list[tuple[int, int, bytes]]] = {}
        self.sndbuf = sndbuf
        self._read_size = 65536 if self.gro else 16384  # room a read is given in a chunk
        self._chunk: bytearray | None = None  # made on the first read (entropy sockets get none)
        self._cmv: Any = None
        self._coff = RX_CHUNK
        self._spare: list[bytearray] = []
        self.hdr = 28 if fam == socket.AF_INET else 48
        #: the port's line-rate serializer (:mod:`emu.nic.pacer`), shared by every socket
        #: and transport on the port; None: unpaced
        self.pacer: Any = None
        #: the cmsg (level, type) that carries the TOS / traffic class of a read
        self._tos_cmsg = ((socket.IPPROTO_IP, socket.IP_TOS) if fam == socket.AF_INET
                          else (socket.IPPROTO_IPV6, IPV6_TCLASS))

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def describe(self) -> dict[str, Any]:
        return {"address": self.address, "port": self.port, "ifname": self.ifname,
                "mtu": self.mtu, "gso": self.gso, "gro": self.gro}

    # -- receive ------------------------------------------------------------------

    def recv_batch(self, out: deque[tuple[bytes | memoryview, Any, int]], limit: int,
                   maxlen: int, c: dict[str, int], check: Any = None,
                   check_buf: Any = None, times: deque[bytes | None] | None = None) -> int:
        """Move up to ``limit`` socket reads into ``out``; raise BlockingIOError when empty.

        Each read may be a GRO super-packet of several datagrams. ``out`` is the
        caller's bounded backlog: past ``maxlen`` items, datagrams
        are dropped and counted (``rx_backlog_drops``) — draining the socket
        anyway keeps the kernel from dropping silently behind our back.
        ``check`` (the transport's framing, e.g. the RoCE ICRC) drops and
        counts (``rx_bad_icrc``) datagrams that fail it; ``check_buf`` is its in-place
        form, ``check_buf(buf, off, end, src, sport, dst, dport)``, used instead when given
        (checks in the receive buffer before the copy).

        Items are ``(datagram, addr, tos)`` with ``tos`` the whole IPv4 TOS / IPv6
        traffic-class byte (DSCP << 2 | ECN) the read arrived with: the engine loop
        splits it (ECN for congestion notification, DSCP for trimming) only when
        it hands the datagram over, so the read loop does no extra work per packet.
        A datagram is a ``memoryview`` of a receive chunk that no later read reuses
        while the view lives (:meth:`_next_chunk`): never copied, checked in place.

        ``times``: each item's kernel receive stamp is appended to it, always in step
        with ``out``: the raw ``SO_TIMESTAMPNS`` data (:func:`stamp_seconds` makes it a
        time), None for a read without one (:meth:`enable_stamps` not on, or
        refused) — when the NIC got the packet, which a daemon that reads late must
        not pass off as later.
        """
        # each read lands in a receive chunk and is lent out as a view of it, never
        # copied (a framing check runs in the chunk first); the common read — one
        # datagram, only its TOS in the ancillary data — takes a short path, its counts
        # added up once at the end
        sock = self.sock
        n_reads = 0
        tos_level, tos_type = self._tos_cmsg
        stamped = times is not None and self.stamps
        mk = self.ip_word  # 1: the IPv4 header word comes before the TOS
        fl = self.flowinfo  # 1: the flow info comes after the TOS
        # the common read's control messages: a stamp first, the header word, the TOS,
        # the flow info
        want = (2 if stamped else 1) + mk + fl
        word = None
        quick = quick_bytes = quick_dropped = bad = 0
        me, sport = self.address, self.sport
        size = self._read_size
        cmv, off = self._cmv, self._coff
        try:
            while n_reads < limit:
                if off + size > RX_CHUNK:
                    cmv, off = self._next_chunk(), 0
                # BlockingIOError ends it
                n, anc, flags, addr = sock.recvmsg_into([cmv[off:off + size]], _ANC)
                n_reads += 1
                na = len(anc)
                # after a kernel drop reads also carry the drop count (SO_RXQ_OVFL, before
                # the TOS): still the common read, or an overloaded daemon gets slower
                if not flags and (na == want or (na == want + 1
                                                 and anc[-2 - mk - fl][:2] == _OVFL_CMSG)):
                    if fl:
                        if anc[-1][:2] != _FLOW_CMSG:
                            self._read_general(cmv[off:off + n], n, anc, flags, addr, out,
                                               maxlen, c, check, check_buf, times=times)
                            off += (n + 63) & ~63
                            continue
                        addr = (addr[0], addr[1],
                                _U32BE.unpack_from(anc[-1][2])[0] & _FLOW_LABEL, addr[3])
                        level, typ, data = anc[-2]  # the TOS
                    else:
                        level, typ, data = anc[-1]  # the TOS
                    if typ == tos_type and level == tos_level and (
                            not stamped or anc[0][:2] == _STAMP_CMSG) and (
                            not mk or anc[-2][1] == _SO_MARK):  # the level is SOL_SOCKET
                        if na != want:
                            self.kernel_drops = _U32.unpack_from(anc[-2 - mk - fl][2])[0]
                        if mk:
                            word = anc[-2][2]
                        quick += 1
                        quick_bytes += n
                        if check_buf is not None:
                            if not check_buf(cmv, off, off + n, addr[0], addr[1], me, sport,
                                             word):
                                bad += 1
                                continue  # its place in the chunk is taken by the next
                        elif check is not None and not check(cmv[off:off + n], addr[0],
                                                             addr[1], me, sport, word):
                            bad += 1
                            continue
                        if len(out) < maxlen:
                            out.append((cmv[off:off + n], addr,
                                        data[_TOS_BYTE] if len(data) == 4 else data[0]))
                            off += (n + 63) & ~63
                            if times is not None:
                                times.append(anc[0][2] if stamped else None)
                        else:
                            quick_dropped += 1
                        continue
                self._read_general(cmv[off:off + n], n, anc, flags, addr, out, maxlen, c,
                                   check, check_buf, times=times)
                off += (n + 63) & ~63
        finally:
            self._coff = off
            if quick:
                c["rx_packets"] += quick
                c["rx_bytes"] += quick_bytes
            if quick_dropped:
                c["rx_backlog_drops"] += quick_dropped
            if bad:
                c["rx_bad_icrc"] += bad
        return n_reads

    def enable_ip_word(self) -> bool:
        """Have every read carry its IPv4 header's bytes 4..7 (identification, flags) as
        received, for a framing check that covers them (RoCEv2's ICRC); the namespace's
        stamping rule must be in place first (:func:`emu.nic.rxheader.install`).

        UDP_GRO goes off: a super-packet carries one mark, its first segment's, and the
        others' identifications would be lost. emu's IPv4 senders send no GSO batches,
        so nothing merged is given up. False for IPv6 (its ICRC masks every field the
        socket hides) or a kernel without ``SO_RCVMARK``."""
        if self.family != socket.AF_INET or not rxheader.enable(self.sock):
            return False
        if self.gro:
            self.sock.setsockopt(SOL_UDP, UDP_GRO, 0)
            self.gro = False
        self.ip_word = 1
        return True

    def accept_zero_checksum(self) -> bool:
        """Take IPv6 datagrams whose UDP checksum is 0 (``UDP_NO_CHECK6_RX``), for a
        transport whose own end-to-end check covers the whole datagram (RoCEv2's ICRC):
        Linux rdma_rxe sends RoCEv2 over IPv6 so (RFC 6936 allows it for such tunnels),
        and without it the kernel drops every one before the daemon could read it. Not
        for UET, whose datagrams the UDP checksum alone protects. False on IPv4 (where
        0 means "no checksum" anyway) or if the kernel refuses."""
        if self.family != socket.AF_INET6:
            return False
        try:
            self.sock.setsockopt(SOL_UDP, UDP_NO_CHECK6_RX, 1)
        except OSError:
            return False
        return True

    def enable_flowinfo(self) -> bool:
        """Have every read carry its datagram's IPv6 flow label, as the flow-info field
        of the address tuple ``(host, port, flowinfo, scope)`` the engine gets (the
        kernel leaves it 0 there for UDP): MRC's STEV and SRv6 EV formats put part of
        the entropy value in it. False for IPv4 or if the kernel refuses."""
        if self.family != socket.AF_INET6:
            return False
        try:
            self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWINFO, 1)
        except OSError:
            return False
        self.flowinfo = 1
        return True

    def enable_stamps(self) -> bool:
        """Have every read carry its datagram's kernel receive time (``SO_TIMESTAMPNS``,
        ``time.time()`` seconds): :meth:`recv_batch` then fills ``times``. False if the
        kernel refuses (reads then carry none)."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            return False
        self.stamps = True
        return True

    def _next_chunk(self) -> memoryview:
        """A receive chunk none of whose datagrams is still lent out, else a new one.

        Why chunks: copying each 8 KiB datagram out of one reused buffer was ~15 %
        of a receiving daemon (py-spy), as much as the ``recvmsg`` itself. Reads
        now land in a chunk and go to the engine as views of it. A chunk is
        reused only when no view of it is alive — a bytearray with views cannot
        be resized, so a trial ``append`` tells — so a datagram an engine keeps
        is never overwritten; a kept one pins at most its chunk."""
        spare = self._spare
        if self._chunk is not None:
            spare.append(self._chunk)
        for i, ch in enumerate(spare):
            try:
                ch.append(0)  # BufferError while any datagram of it is lent out
            except BufferError:
                continue
            ch.pop()
            del spare[i]
            break
        else:
            ch = bytearray(RX_CHUNK)
            if len(spare) > RX_SPARE:
                del spare[0]  # still lent out: freed when its last view goes
        self._chunk = ch
        self._cmv = memoryview(ch)
        return self._cmv

    def _read_general(self, mv: memoryview, n: int, anc: Any, flags: int, addr: Any,
                      out: deque[tuple[bytes | memoryview, Any, int]], maxlen: int,
                      c: dict[str, int], check: Any, check_buf: Any,
                      times: deque[bytes | None] | None = None) -> None:
        """One read of any kind — GRO super-packets, framing checks, truncation, drops —
        in ``mv``, the read's own slice of a receive chunk, lent out as views of it;
        ``times``: the read's receive time for each item it appends (see recv_batch)."""
        seg = n
        tos = 0
        stamp = word = None
        for level, typ, data in anc:
            if (level, typ) == _STAMP_CMSG:
                stamp = data
            elif (level, typ) == _MARK_CMSG:
                word = data if self.ip_word else None
            elif (level, typ) == _FLOW_CMSG and self.flowinfo:
                addr = (addr[0], addr[1], _U32BE.unpack_from(data)[0] & _FLOW_LABEL, addr[3])
            elif level == SOL_UDP and typ == UDP_GRO:
                seg = _U16.unpack_from(data)[0] if len(data) == 2 else \
                    _I32.unpack_from(data)[0]
            elif level == socket.SOL_SOCKET and typ == SO_RXQ_OVFL:
                self.kernel_drops = _U32.unpack_from(data)[0]
            elif (level, typ) in ((socket.IPPROTO_IP, socket.IP_TOS),
                                  (socket.IPPROTO_IPV6, IPV6_TCLASS)):
                tos = data[0] if len(data) == 1 else _I32.unpack_from(data)[0] & 0xFF
        if flags & _MSG_TRUNC:
            c["rx_truncated"] += 1
            return
        if seg <= 0:
            seg = n or 1
        src, sport = addr[0], addr[1]
        npk = nbytes = bad = dropped = 0
        room = maxlen - len(out)
        append = out.append
        for off in range(0, max(n, 1), seg):
            end = min(off + seg, n)
            npk += 1
            nbytes += end - off
            chunk = mv[off:end]
            if (not check_buf(mv, off, end, src, sport, self.address, self.sport, word)
                    if check_buf is not None else
                    check is not None and not check(chunk, src, sport, self.address,
                                                    self.sport, word)):
                bad += 1
                continue
            if room <= 0:
                dropped += 1
            else:
                room -= 1
                append((chunk, addr, tos))
                if times is not None:
                    times.append(stamp)
        c["rx_packets"] += npk
        c["rx_bytes"] += nbytes
        if bad:
            c["rx_bad_icrc"] += bad
        if dropped:
            c["rx_backlog_drops"] += dropped

    # -- send ---------------------------------------------------------------------

    def tos_anc(self, tos: int) -> list[tuple[int, int, bytes]] | None:
        """How one datagram goes out at ``tos`` (not the socket's TOS): a ``sendmsg``
        control message (``IP_TOS``/``IPV6_TCLASS``), or None once this TOS has gone
        out :data:`TOS_ADOPT` times that way and has become the socket's own.

        Why: a ping-pong alternates the data's TOS and the ACKs'; a ``setsockopt``
        per change was two extra syscalls per round trip in each daemon. A steady
        stream (a bandwidth test's data, a receiver's ACKs) still moves the socket's
        TOS once and then sends with plain ``sendto``."""
        n = self._tos_other.get(tos, 0) + 1
        if n >= TOS_ADOPT:
            self._tos_other.clear()
            self.set_tos(tos)
            return None
        self._tos_other[tos] = n
        anc = self._tos_anc.get(tos)
        if anc is None:
            level, typ = self._tos_cmsg
            anc = self._tos_anc[tos] = [(level, typ, _I32.pack(tos))]
        return anc

    def set_tos(self, tos: int) -> None:
        """The IP TOS (DSCP | ECN) of what this socket sends next; a syscall only on change."""
        if tos != self.tos:
            if self.family == socket.AF_INET:
                self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            else:
                self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_TCLASS, tos)
            self.tos = tos

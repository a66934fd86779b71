# SPDX-License-Identifier: GPL-2.0-only
"""An engine's way out of the NIC: one bounded FIFO, sent in order through the ports'
sockets (GSO batches where a socket does GSO), sockets per UDP source port (the
entropy), and the ports' frame rings (:mod:`emu.nic.frames`).

Apart from :mod:`emu.nic.udp`, which holds the ports' sockets and their receive side:
this module decides *which* socket or ring a datagram leaves by and *when* (the
port's serializer, :mod:`emu.nic.pacer`); a socket only sends and receives.
"""

from __future__ import annotations

import errno
import math
import socket
import struct
from collections import deque
from typing import Any

from emu.core.datagram import Gather, Run, TxMeta
from emu.fabricclock import wall
from emu.nic.frames import RawTx
from emu.nic.udp import (
    GSO_MAX_BYTES,
    GSO_MAX_SEGS,
    SOL_UDP,
    UDP_SEGMENT,
    PortSocket,
    family_of,
    in_netns,
)

#: how soon a kick the kernel refused for want of socket memory is tried again (seconds,
#: wall): a few frames' time at the rates emu runs, a wake-up per retry while it lasts
KICK_RETRY = 100e-6
#: UDP_SEGMENT's control message: the GSO segment size (native u16)
_U16 = struct.Struct("=H")
#: bytes of frames placed in a port's ring before it is kicked, at most: the kernel starts
#: on the first while the daemon places the rest. Why: kicked once at the end, a refill
#: of ~60 frames took ~1.2 ms to place while the port's FIFO drained, and the port ran
#: dry (``tx_late``) with no scheduler wait behind it (a trio instrument timing each
#: task step: a control session's post and pump of 1.2–2 ms at each late send)
KICK_BYTES = 64 << 10
#: entropy sockets :meth:`TxPath.preopen` opens per port, at most (see there why)
PREOPEN_MAX = 64


class TxPath:
    """An engine's way out: one bounded FIFO, the ports' sockets, and source-port sockets.

    Why a socket per source port: the engine picks the UDP source port (the
    ECMP entropy, ``TxMeta.entropy``) and a UDP socket's source port is the
    port it is bound to. Sockets for entropy values are made on first use,
    bound to the port's address, up to ``max_entropy`` (past that, and when a
    port is taken, the port's main socket is used and ``tx_entropy_fallback``
    counts it) — except the members of a spraying engine's set that
    :meth:`preopen` did not open: those share its sockets (``tx_entropy_folded``).

    :meth:`flush` sends from the head of the queue in order; consecutive
    datagrams with the same destination and the same ``meta`` object (so one
    source port and TOS) and one size (the last may be shorter) go out as one
    GSO send where the socket does GSO. EAGAIN leaves the rest queued and sets
    :attr:`blocked` to the socket to wait on; per-datagram errors (EMSGSIZE,
    unreachable) drop that datagram and count.
    """

    def __init__(self, mains: list[PortSocket], c: dict[str, int], *, max_queue: int,
                 max_entropy: int = 512, netns_fd: int | None = None, seal: Any = None,
                 seal_many: Any = None, seal_at: Any = None) -> None:
        self.mains = mains
        self.seal = seal  # the transport's framing: seal(buf, src, sport, dst, dport)
        # optional batch form for one flow: seal_many(bufs, src, sport, dst, dport)
        self.seal_many = seal_many if seal is not None else None
        # optional in-place form for frame rings: seal_at(buf, off, end, src, sport, dst,
        # dport) seals the datagram already written to buf[off:end]
        self.seal_at = seal_at if seal is not None else None
        self.netns_fd = netns_fd
        self.c = c
        self.queue: deque[tuple[bytes, Any, Any]] = deque()
        self.max_queue = max_queue
        self.max_entropy = max_entropy
        self.blocked: PortSocket | None = None
        self._route: dict[str, PortSocket] = {}
        self._entropy: dict[tuple[str, int], PortSocket] = {}
        #: address → (a spraying engine's set, the sockets preopen opened for it there):
        #: what the set's other members leave by (:meth:`preopen`)
        self._fold: dict[str, tuple[Any, list[PortSocket]]] = {}
        #: main socket → its port's frame ring (:mod:`emu.nic.frames`), see :meth:`use_rings`
        self.rings: dict[PortSocket, Any] = {}
        #: main socket → its raw IPv6 socket (made on first use, :meth:`_send_raw`)
        self._raw: dict[PortSocket, RawTx | None] = {}
        #: the head of the queue waits for its port's serializer until this time
        #: (``wall()``); None: not waiting for a port
        self.paced_until: float | None = None
        self._waited = False  # the next send had waited for its port (lateness counts)

    def sockets(self) -> list[PortSocket]:
        return self.mains + list(self._entropy.values())

    def put(self, items: list[tuple[bytes, Any, Any]]) -> None:
        """Queue the engine's output (dropping and counting past ``max_queue``; a
        :class:`~emu.core.datagram.Run` counts as its datagrams and is taken whole or
        dropped whole)."""
        q = self.queue
        room = self.max_queue - len(q)
        n = len(items)
        for d, _, _ in items:
            if type(d) is Run:
                n += d.count - 1
        if n > room:
            keep = 0
            for d, _, _ in items:
                k = d.count if type(d) is Run else 1
                if k > room:
                    break
                room -= k
                keep += 1
            dropped = items[keep:]
            self.c["tx_backlog_drops"] += sum(d.count if type(d) is Run else 1
                                              for d, _, _ in dropped)
            items = items[:keep]
        q.extend(items)

    def _main_for(self, ip: str) -> PortSocket:
        ps = self._route.get(ip)
        if ps is None:
            fam = family_of(ip)
            cands = [m for m in self.mains if m.family == fam] or self.mains
            if not cands:
                raise OSError(errno.EADDRNOTAVAIL, "no socket for this address family")
            dst = socket.inet_pton(fam, ip) if cands[0].family == fam else b""
            ps = max(cands, key=lambda m: _common_prefix(socket.inet_pton(m.family, m.address),
                                                         dst))
            if len(self._route) > 4096:
                self._route.clear()
            self._route[ip] = ps
        return ps

    def _socket_for(self, ip: str, meta: Any) -> PortSocket:
        main = self._main_for(ip)
        sport = getattr(meta, "entropy", None)
        if sport is None or sport == main.port:
            return main
        ps = self._entropy.get((main.address, sport))
        if ps is None:
            fold = self._fold.get(main.address)
            if fold is not None and sport in fold[0]:
                self.c["tx_entropy_folded"] = self.c.get("tx_entropy_folded", 0) + 1
                socks = fold[1]
                return socks[sport % len(socks)]
            ps = self._open_entropy(main, sport) or main
        return ps

    def _open_entropy(self, main: PortSocket, sport: int) -> PortSocket | None:
        """The socket sending from ``sport`` on ``main``'s address (None: use main)."""
        if len(self._entropy) >= self.max_entropy:
            self.c["tx_entropy_fallback"] += 1
            return None
        try:
            with in_netns(self.netns_fd):
                ps = PortSocket(main.address, main.port, ifname=main.ifname, mtu=main.mtu,
                                gso=main.gso, gro=False, rcvbuf=4096, sndbuf=main.sndbuf,
                                sport=sport)
        except OSError:
            self.c["tx_entropy_fallback"] += 1
            return None
        ps.pacer = main.pacer
        self._entropy[(main.address, sport)] = ps
        return ps

    def preopen(self, entropies: Any, limit: int = PREOPEN_MAX) -> int:
        """Open sockets for a spraying engine's entropy set now, not on first use: for
        its first ``limit`` members on each port that sends by socket; the set's other
        members then leave by one of those (``sport`` modulo their number), counted
        ``tx_entropy_folded``, and never open a socket of their own.

        Why now: a socket costs ~0.1 ms to make; made lazily, a sprayed burst's first
        packets (and the peer's echoing replies) paid it one by one, which delayed
        the first feedback of a transfer by milliseconds — past the RTO. Why at most
        ``limit`` (64, the whole set UET once had): UET's set is 4096 ports by default
        (:data:`emu.transports.uet.engine.ENTROPY_COUNT`), and a socket each would take
        ~0.4 s per port to open, 4096 file descriptors per address (a worker serving
        dozens of hosts would pass its limit), and — opened lazily instead — a socket
        made mid-burst for most of a transfer's first thousands of packets. Folded, the
        socket path sprays over ``limit`` source ports, as it always did; the wide
        spread is the frame ring's, which writes any source port into a frame and is
        the daemons' default. The engine sees the port a reply echoes, a member of its
        set, so its path policy still learns about a path it may choose. Not on a port
        with a frame ring (:meth:`use_rings` first): there a datagram takes a socket
        only while its next hop is unresolved, the first few of a destination.
        Returns how many were opened."""
        n = 0
        ents = entropies if isinstance(entropies, range) else tuple(entropies)
        known = ents if isinstance(ents, range) else frozenset(int(e) for e in ents)
        for main in self.mains:
            if main in self.rings:
                continue
            socks: list[PortSocket] = []
            for e in ents[:limit]:
                e = int(e)
                if e == main.port:
                    continue
                ps = self._entropy.get((main.address, e))
                if ps is None:
                    ps = self._open_entropy(main, e)
                    n += 0 if ps is None else 1
                if ps is not None:
                    socks.append(ps)
            if socks and len(ents) > limit:
                self._fold[main.address] = (known, socks)
        return n

    def use_rings(self, make: Any) -> int:
        """Give each main socket a frame ring, ``make(main)`` (None or OSError: that port
        goes without); datagrams from a source port other than the port's own (a
        sprayed entropy, a RoCEv2 QP's port) then leave through it, sealed there by
        the transport's framing. Returns how many."""
        for m in self.mains:
            try:
                with in_netns(self.netns_fd):
                    fx = make(m)
            except (OSError, ValueError):
                fx = None
            if fx is not None:
                self.rings[m] = fx
        return len(self.rings)

    def flush(self) -> None:
        """Send what is queued; raise BlockingIOError (with :attr:`blocked` set) on EAGAIN."""
        try:
            self._flush()
        finally:
            if self.rings:
                self._kick()

    def _kick(self) -> None:
        for fx in self.rings.values():
            if fx.pending:
                try:
                    fx.kick()
                except OSError as e:
                    self.c["tx_errors"] += 1
                    self.c["tx_last_errno"] = e.errno or 0
                if fx.pending and self.paced_until is None:
                    # the kernel had no socket memory for them (EAGAIN): they wait in the
                    # ring for the next kick — and with the queue empty nothing else would
                    # flush, so the transmit task comes back shortly. Without it the last
                    # frames of a message sat there until a retransmission timeout (pair
                    # RoCEv2 write-bw, a 67 ms RTO in ~1 of 3 runs; more often dilated,
                    # where the tbf's 1 ms burst is fewer bytes)
                    self.paced_until = wall() + KICK_RETRY

    def _drain_ring(self) -> bool:
        """Datagrams at the head of the queue into their port's frame ring; True
        if any went or the head waits for the port (:attr:`paced_until`). Raises
        BlockingIOError (:attr:`blocked` = the ring) when it stays full."""
        q = self.queue
        try:
            main = self._main_for(q[0][1][0])
        except OSError:
            return False
        fx = self.rings.get(main)
        if fx is None:
            return False
        pacer = main.pacer
        now, budget = self._budget(pacer)
        if budget <= 0:
            return True
        budget = min(budget, KICK_BYTES)
        k, nb, full = fx.drain(q, main, self._main_for, budget, self.seal, self.seal_at)
        if not k and full:
            self._kick()
            k, nb, full = fx.drain(q, main, self._main_for, budget, self.seal, self.seal_at)
            if not k and full:
                self.blocked = fx
                raise BlockingIOError
        if k:
            if pacer is not None:
                pacer.charge(now, nb + k * (main.hdr + 14), k, self._waited)
                self._waited = False
            c = self.c
            c["tx_packets"] += k
            c["tx_bytes"] += nb
            c["tx_frames"] += k
            if nb >= KICK_BYTES:
                self._kick()  # the kernel takes these while the rest is placed
            return True
        return False

    def _flush(self) -> None:
        q = self.queue
        c = self.c
        seal = self.seal
        seal_many = self.seal_many
        rings = self.rings
        self.blocked = None
        self.paced_until = None
        while q:
            if rings:
                if self._drain_ring():
                    if self.paced_until is not None:
                        return
                    continue
                self._kick()  # frames first: a socket send must not overtake them
            data, addr, meta = q[0]
            if type(data) is Run:  # not for a frame ring: its datagrams one by one
                q.popleft()
                q.extendleft(reversed(data.rest(addr)))
                continue
            if type(meta) is TxMeta and (meta.label is not None or meta.outer is not None):
                if not self._send_raw(data, addr, meta):
                    return  # the port is busy: the head waits for it
                q.popleft()
                continue
            try:
                ps = self._socket_for(addr[0], meta)
            except OSError:
                q.popleft()
                c["tx_errors"] += 1
                continue
            if seal is not None and type(data) is not bytearray and type(data) is not Gather:
                data = bytearray(data)
                q[0] = (data, addr, meta)
            pacer = ps.pacer
            now, budget = self._budget(pacer)
            if budget <= 0:
                return
            tos = getattr(meta, "tos", None)
            anc = ps.tos_anc(tos) if tos is not None and tos != ps.tos else None
            seg = total = len(data)
            batch = [data]
            if ps.gso and seg + ps.hdr <= ps.mtu and len(q) > 1 and seg < budget:
                for i in range(1, min(len(q), GSO_MAX_SEGS)):
                    nxt, naddr, nmeta = q[i]
                    if nmeta is not meta or (naddr is not addr and naddr != addr):
                        break
                    tn = type(nxt)
                    n = nxt.size if tn is Gather else len(nxt)
                    if n > seg or total + n > GSO_MAX_BYTES:
                        break
                    if seal is not None and tn is not bytearray and tn is not Gather:
                        nxt = bytearray(nxt)
                        q[i] = (nxt, naddr, nmeta)
                    batch.append(nxt)
                    total += n
                    if n < seg or total >= budget:
                        break
            k = len(batch)
            if seal_many is not None:
                seal_many(batch, ps.address, ps.sport, addr[0], addr[1])
            elif seal is not None:
                for b in batch:
                    seal(b, ps.address, ps.sport, addr[0], addr[1])
            iov = _iovec(batch)
            try:
                if k == 1:
                    if anc is not None:
                        ps.sock.sendmsg(iov, anc, 0, addr)
                    elif iov is batch:
                        ps.sock.sendto(data, addr)
                    else:
                        ps.sock.sendmsg(iov, (), 0, addr)
                else:
                    gso = [(SOL_UDP, UDP_SEGMENT, _U16.pack(seg))]
                    ps.sock.sendmsg(iov, gso if anc is None else gso + anc, 0, addr)
                    c["tx_gso_sends"] += 1
            except BlockingIOError:
                self.blocked = ps
                raise
            except OSError as e:
                if k > 1 and e.errno in (errno.EINVAL, errno.EIO, errno.EOPNOTSUPP):
                    ps.gso = False  # this path refuses GSO: fall back for good
                    c["tx_gso_disabled"] += 1
                    continue
                c["tx_errors"] += k
                c["tx_last_errno"] = e.errno or 0
                for _ in range(k):
                    q.popleft()
                continue
            c["tx_packets"] += k
            c["tx_bytes"] += total
            if pacer is not None:
                pacer.charge(now, total + k * (ps.hdr + 14), k, self._waited)
                self._waited = False
            for _ in range(k):
                q.popleft()

    def _send_raw(self, data: Any, addr: Any, meta: TxMeta) -> bool:
        """Send the head of the queue, which carries a flow label or an SRv6 header, by
        the port's raw socket (:class:`~emu.nic.frames.RawTx`); False when the port's
        serializer has no room now (nothing sent). Errors drop it and count."""
        c = self.c
        try:
            main = self._main_for(addr[0])
        except OSError:
            c["tx_errors"] += 1
            return True
        pacer = main.pacer
        now, budget = self._budget(pacer)
        if budget <= 0:
            return False
        raw = self._raw.get(main, False)
        if raw is False:
            try:
                with in_netns(self.netns_fd):
                    raw = RawTx(main.ifname, main.address)
            except (OSError, ValueError):
                raw = None
            self._raw[main] = raw
        if raw is None:
            c["tx_errors"] += 1
            c["tx_last_errno"] = errno.EAFNOSUPPORT
            return True
        if self.seal is not None:
            data = bytearray(bytes(data))
            self.seal(data, main.address, meta.entropy, addr[0], addr[1])
        try:
            n = raw.send(data, addr[0], addr[1], meta)
        except OSError as e:
            c["tx_errors"] += 1
            c["tx_last_errno"] = e.errno or 0
            return True
        c["tx_packets"] += 1
        c["tx_bytes"] += len(data)
        c["tx_raw"] += 1
        if pacer is not None:
            pacer.charge(now, n + 14, 1, self._waited)
            self._waited = False
        return True

    def ports_busy(self) -> bool:
        """Every paced port still has frames to serialize (its FIFO is not empty): what an
        engine holds back now costs no link time yet."""
        now = wall()
        return all(ps.pacer is not None and ps.pacer.t_free > now for ps in self.mains)

    def _budget(self, pacer: Any) -> tuple[float, float]:
        """``(now, bytes the port may take now)``; when that is none, the head of the queue
        waits for the port (:attr:`paced_until`: the daemon sleeps, then flushes again)."""
        if pacer is None:
            return 0.0, math.inf
        now = wall()
        budget = pacer.room(now)
        if budget <= 0:
            self.paced_until = pacer.due()
            self._waited = True
            pacer.c["waits"] += 1
        return now, budget

    def close(self) -> None:
        for ps in self._entropy.values():
            ps.close()
        self._entropy.clear()
        self._fold.clear()
        for fx in self.rings.values():
            fx.close()
        self.rings.clear()
        for raw in self._raw.values():
            if raw is not None:
                raw.close()
        self._raw.clear()


def _iovec(batch: list[Any]) -> list[Any]:
    """The buffers of a send: ``batch`` itself, or with each :class:`Gather` opened into
    its pieces (the kernel gathers them; GSO cuts segments by size, not by iovec)."""
    for b in batch:
        if type(b) is Gather:
            break
    else:
        return batch
    iov: list[Any] = []
    for b in batch:
        if type(b) is Gather:
            iov += (b.head, b.body, b.tail)
        else:
            iov.append(b)
    return iov


def _common_prefix(a: bytes, b: bytes) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            return n * 8 + (8 - (x ^ y).bit_length())
        n += 1
    return n * 8

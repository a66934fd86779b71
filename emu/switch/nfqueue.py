# SPDX-License-Identifier: GPL-2.0-only
"""A pure-Python nfnetlink_queue client: bind, receive packets, send verdicts.

Why our own: the NetfilterQueue/python-nfqueue packages are compiled (C/
Cython, libnetfilter_queue) and hide what we need to control — batching
verdicts into one ``send``, GSO-aware queueing, fail-open, reading the
egress interface. The protocol is small and stable (``linux/netfilter/
nfnetlink_queue.h``); everything here is ``struct`` over a raw
``AF_NETLINK``/``NETLINK_NETFILTER`` socket.

* Configuration (NFQNL_MSG_CONFIG, acked): ``BIND`` the queue number, copy
  mode PACKET with ``copy_range`` bytes (headers only: the kernel copies no
  payload, the verdict never carries one unless we trim), ``QUEUE_MAXLEN``,
  flags ``FAIL_OPEN`` (queue or socket full → the kernel accepts instead of
  dropping: a slow user space degrades to plain forwarding) and ``GSO`` (GSO
  super-packets are queued whole instead of being segmented first — one
  verdict per super-packet).
* Packets (NFQNL_MSG_PACKET): id, in/out interface indexes, mark, original
  length (``NFQA_CAP_LEN`` when the copy is shorter), ``NFQA_SKB_INFO`` (GSO,
  checksum not ready) and the copied bytes, starting at the IP header.
* Verdicts (NFQNL_MSG_VERDICT): ``NF_ACCEPT``/``NF_DROP`` with an optional new
  mark and optional replacement bytes (shorter than the packet → the kernel
  trims it). Many verdicts are concatenated and sent with **one** ``send``;
  the kernel walks every message in the buffer. ``NFQNL_MSG_VERDICT_BATCH``
  (all ids ≤ N) is not used: our releases are not in arrival order.
* Errors the kernel reports for verdicts (e.g. ENOENT for an id it no longer
  holds) arrive as NLMSG_ERROR on the same socket and are counted, not raised.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSG_ERROR = 0x2
NLMSG_DONE = 0x3

NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3

NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_PACKET = 2

NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_CFG_F_CONNTRACK = 2
NFQA_CFG_F_GSO = 4

NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_MARK = 3
NFQA_TIMESTAMP = 4
NFQA_IFINDEX_INDEV = 5
NFQA_IFINDEX_OUTDEV = 6
NFQA_PAYLOAD = 10
NFQA_CAP_LEN = 13
NFQA_SKB_INFO = 14
NFQA_SKB_CSUMNOTREADY = 1
NFQA_SKB_GSO = 2

NF_DROP = 0
NF_ACCEPT = 1

_NLMSG = struct.Struct("=IHHII")
_NFGEN = struct.Struct("!BBH")
_NLA = struct.Struct("=HH")
_BE32 = struct.Struct("!I")
_VERDICT = struct.Struct("=IHHII" "BBH" "HH" "II")  # nlmsg + nfgen (be res_id) + nla + hdr
_MARK = struct.Struct("=HHI")
_PKT_TYPE = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
_VERDICT_TYPE = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT
_CONFIG_TYPE = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_CONFIG
_SEND_LIMIT = 48 * 1024


class NfQueueError(OSError):
    """Binding or configuring the queue failed (the message says which step)."""


class QPacket:
    """One queued packet: ``data`` = copied prefix (IP header first), ``length`` = full size."""

    __slots__ = ("id", "indev", "outdev", "mark", "data", "length", "skb_info", "hw_proto", "out")

    def __init__(self) -> None:
        self.id = 0
        self.indev = 0
        self.outdev = 0
        self.mark = 0
        self.data = b""
        self.length = 0
        self.skb_info = 0
        self.hw_proto = 0
        self.out: bytes | bytearray | None = None   # replacement bytes for the verdict

    @property
    def gso(self) -> bool:
        return bool(self.skb_info & NFQA_SKB_GSO)


def _attr(kind: int, value: bytes) -> bytes:
    n = 4 + len(value)
    return _NLA.pack(n, kind) + value + b"\0" * (-n % 4)


class NfQueue:
    """One bound NFQUEUE. Non-blocking: :meth:`receive` drains, :meth:`flush` sends verdicts."""

    def __init__(self, queue_num: int, copy_range: int = 256, maxlen: int = 16384,
                 flags: int = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO,
                 rcvbuf: int = 16 << 20) -> None:
        self.queue_num = queue_num
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        for opt, val in ((SO_RCVBUFFORCE, rcvbuf), (SO_SNDBUFFORCE, 4 << 20)):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, val)
            except OSError:
                pass
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self._seq = 0
        self._out = bytearray()
        self._buf = bytearray(256 * 1024)
        self.errors: dict[int, int] = {}
        self.sent_verdicts = 0
        try:
            self._config(_attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)), "bind")
            self._config(_attr(NFQA_CFG_PARAMS, struct.pack("!IB", copy_range,
                                                            NFQNL_COPY_PACKET)), "copy range")
            self._config(_attr(NFQA_CFG_QUEUE_MAXLEN, _BE32.pack(maxlen)), "queue maxlen")
            if flags:
                self._config(_attr(NFQA_CFG_FLAGS, _BE32.pack(flags))
                             + _attr(NFQA_CFG_MASK, _BE32.pack(flags)), "flags")
        except BaseException:
            self.sock.close()
            raise
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    # ---------------------------------------------------------------- config

    def _config(self, attrs: bytes, what: str) -> None:
        self._seq += 1
        body = _NFGEN.pack(socket.AF_UNSPEC, 0, self.queue_num) + attrs
        msg = _NLMSG.pack(16 + len(body), _CONFIG_TYPE, NLM_F_REQUEST | NLM_F_ACK, self._seq,
                          0) + body
        self.sock.send(msg)
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                n, typ, _flags, seq, _pid = _NLMSG.unpack_from(data, off)
                if typ == NLMSG_ERROR and seq == self._seq:
                    err = -struct.unpack_from("=i", data, off + 16)[0]
                    if err:
                        raise NfQueueError(err, f"NFQUEUE {self.queue_num}: {what}: "
                                                f"{os.strerror(err)}")
                    return
                off += (n + 3) & ~3 if n else len(data)

    # ---------------------------------------------------------------- receive

    def receive(self, limit: int = 1024) -> list[QPacket]:
        """Queued packets, until the socket is empty or ``limit``; never blocks."""
        out: list[QPacket] = []
        buf = self._buf
        sock = self.sock
        unpack_nlmsg = _NLMSG.unpack_from
        unpack_nla = _NLA.unpack_from
        be32 = _BE32.unpack_from
        while len(out) < limit:
            try:
                size = sock.recv_into(buf)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    self.errors[errno.ENOBUFS] = self.errors.get(errno.ENOBUFS, 0) + 1
                    continue
                raise
            off = 0
            while off + 16 <= size:
                n, typ = unpack_nlmsg(buf, off)[:2]
                if n < 16:
                    break
                if typ == _PKT_TYPE:
                    p = QPacket()
                    a = off + 20
                    end = off + n
                    cap = 0
                    while a + 4 <= end:
                        alen, kind = unpack_nla(buf, a)
                        if alen < 4:
                            break
                        kind &= 0x3FFF
                        if kind == NFQA_PAYLOAD:
                            p.data = bytes(buf[a + 4:a + alen])
                        elif kind == NFQA_PACKET_HDR:
                            p.id, p.hw_proto = struct.unpack_from("!IH", buf, a + 4)
                        elif kind == NFQA_IFINDEX_OUTDEV:
                            p.outdev = be32(buf, a + 4)[0]
                        elif kind == NFQA_IFINDEX_INDEV:
                            p.indev = be32(buf, a + 4)[0]
                        elif kind == NFQA_MARK:
                            p.mark = be32(buf, a + 4)[0]
                        elif kind == NFQA_CAP_LEN:
                            cap = be32(buf, a + 4)[0]
                        elif kind == NFQA_SKB_INFO:
                            p.skb_info = be32(buf, a + 4)[0]
                        a += (alen + 3) & ~3
                    p.length = cap or len(p.data)
                    out.append(p)
                elif typ == NLMSG_ERROR:
                    err = -struct.unpack_from("=i", buf, off + 16)[0]
                    if err:
                        self.errors[err] = self.errors.get(err, 0) + 1
                off += (n + 3) & ~3
        return out

    # ---------------------------------------------------------------- verdicts

    def verdict(self, packet_id: int, verdict: int = NF_ACCEPT, mark: int | None = None,
                payload: bytes | bytearray | None = None) -> None:
        """Queue a verdict; sent with the others at :meth:`flush` (or when the buffer fills)."""
        extra = b""
        if mark is not None:
            extra = _MARK.pack(8, NFQA_MARK, socket.htonl(mark))
        if payload is not None:
            extra += _attr(NFQA_PAYLOAD, bytes(payload))
        self._seq += 1
        self._out += _VERDICT.pack(32 + len(extra), _VERDICT_TYPE, NLM_F_REQUEST, self._seq, 0,
                                   socket.AF_UNSPEC, 0, socket.htons(self.queue_num),
                                   12, NFQA_VERDICT_HDR, socket.htonl(verdict),
                                   socket.htonl(packet_id))
        if extra:
            self._out += extra
        self.sent_verdicts += 1
        if len(self._out) >= _SEND_LIMIT:
            self.flush()

    def flush(self) -> None:
        """Send every queued verdict in one ``send`` (blocking briefly if the socket is full)."""
        if not self._out:
            return
        data, self._out = bytes(self._out), bytearray()
        while True:
            try:
                self.sock.send(data)
                return
            except BlockingIOError:
                select.select([], [self.sock], [], 0.01)

    def close(self) -> None:
        """Send what is pending, unbind (the kernel then accepts nothing more for us), close."""
        try:
            self.flush()
            self.sock.setblocking(True)
            self._config(_attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_UNBIND, 0)),
                         "unbind")
        except OSError:
            pass
        finally:
            self.sock.close()

# SPDX-License-Identifier: GPL-2.0-only
"""Compact binary records on the control socket: the hot verbs without JSON.

Why: a latency test pays, per message, a post (client → daemon) and often a
completion (daemon → client). As JSON those cost ~10 µs to build and encode
in the client and ~8 µs to decode and turn into a work request in the daemon
on the 2-core VM, on the path of every message (``docs/measurements.md``,
"Latency"). A fixed ``struct`` record costs well under 1 µs at each end.
Everything else stays JSON: it is rare, and ``socat`` can still speak it.

A record starts with :data:`MARK` (0xFE), a byte UTF-8 never contains, so it
cannot be mistaken for the start of a JSON line; the second byte is its
kind, and the kind fixes its length (no newline framing: binary fields may
hold ``\\n``). Records and JSON lines mix freely on one stream, in order.

* ``POST_SEND`` / ``POST_RECV`` (client → daemon), 40 bytes + 16 per SGE,
  little-endian: mark, kind, flags (1 quiet, 2 signaled, 4 solicited,
  8 has immediate), opcode (``ibv_wr_opcode`` number; 0 for a receive),
  SGE count, 3 pad, request id u32, QP handle u32, wr_id u64, remote_addr u64,
  rkey u32, imm u32; then per SGE addr u64, length u32, lkey u32. Any daemon
  accepts them; a client sends them only to a daemon whose ``hello`` result
  says ``compact: true``. Replies (a non-quiet post's, any error) are JSON, as
  for a JSON request with the same id.
* ``WC`` (daemon → client), 8 bytes + 32 per completion: mark, kind, count
  u16, CQ handle u32; then per completion wr_id u64, status u8, opcode u8,
  flags u8 (1: has immediate), pad, qp_num u32, byte_len u32, imm u32,
  src_qp u32, vendor_err u32. Sent only to a client that asked in its
  ``hello`` (``compact: true``); others get the JSON ``wc`` event.

A field that does not fit (a wr_id past 64 bits, an SGE list longer than 255)
makes the sender use JSON for that message: nothing is truncated.

Standard library only, like :mod:`emu.nic.protocol` (the client API loads it).
"""

from __future__ import annotations

import struct
from typing import Any

from emu.nic.protocol import MAX_LINE, ProtocolError

MARK = 0xFE
POST_SEND, POST_RECV, WC = 1, 2, 3
F_QUIET, F_SIGNALED, F_SOLICITED, F_IMM = 1, 2, 4, 8
WC_IMM = 1

POST = struct.Struct("<BBBBB3xIIQQII")
SGE = struct.Struct("<QII")
WC_HEAD = struct.Struct("<BBHI")
WC_ENTRY = struct.Struct("<QBBBxIIIII")
MAX_SGES = 255
MAX_WCS = 0xFFFF

_HEAD = {POST_SEND: 5, POST_RECV: 5, WC: 4}  # bytes needed to know a record's length


def record_size(buf: Any, pos: int, n: int) -> int | None:
    """The length of the record at ``buf[pos]`` (which is :data:`MARK`); None until
    enough of it is there to tell. An unknown kind is a :class:`ProtocolError`: the
    stream cannot be followed past it."""
    if n - pos < 2:
        return None
    kind = buf[pos + 1]
    need = _HEAD.get(kind)
    if need is None:
        raise ProtocolError(f"unknown compact record kind {kind}")
    if n - pos < need:
        return None
    if kind == WC:
        return WC_HEAD.size + WC_ENTRY.size * (buf[pos + 2] | buf[pos + 3] << 8)
    return POST.size + SGE.size * buf[pos + 4]


class RecordBuffer:
    """Stream bytes in, complete messages out: JSON lines (``bytes``, without the
    newline; blank lines skipped) and compact records (``bytes`` starting with
    :data:`MARK`), in stream order. A JSON line is bounded by ``max_line``, as
    :class:`emu.nic.protocol.LineBuffer` bounds it."""

    __slots__ = ("_buf", "max_line")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buf = bytearray()
        self.max_line = max_line

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        n = len(buf)
        out: list[bytes] = []
        pos = 0
        try:
            while pos < n:
                if buf[pos] == MARK:
                    size = record_size(buf, pos, n)
                    if size is None or n - pos < size:
                        break
                    out.append(bytes(buf[pos:pos + size]))
                    pos += size
                    continue
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    if n - pos > self.max_line:
                        raise ProtocolError(f"message longer than {self.max_line} bytes")
                    break
                if nl - pos > self.max_line:
                    raise ProtocolError(f"message longer than {self.max_line} bytes")
                line = bytes(buf[pos:nl])
                pos = nl + 1
                if line.strip():
                    out.append(line)
        finally:
            del buf[:pos]
        return out


def pack_post(kind: int, rid: int, qp: int, wr_id: int, opcode: int,
              sges: list[list[int]], remote_addr: int = 0, rkey: int = 0,
              imm: int | None = None, *, quiet: bool, signaled: bool = True,
              solicited: bool = False) -> bytes | None:
    """One post as a compact record; None if a field does not fit (send JSON then)."""
    if len(sges) > MAX_SGES:
        return None
    flags = (F_QUIET if quiet else 0) | (F_SIGNALED if signaled else 0) | \
        (F_SOLICITED if solicited else 0) | (0 if imm is None else F_IMM)
    try:
        head = POST.pack(MARK, kind, flags, opcode, len(sges), rid, qp, wr_id, remote_addr,
                         rkey, 0 if imm is None else imm)
        if len(sges) == 1:
            a, n, k = sges[0]
            return head + SGE.pack(a, n, k)
        return head + b"".join(SGE.pack(a, n, k) for a, n, k in sges)
    except (struct.error, TypeError, ValueError):
        return None


def unpack_post(rec: bytes) -> tuple[int, int, int, int, int, int, int, int, int | None,
                                     list[tuple[int, int, int]]]:
    """``(kind, flags, opcode, rid, qp, wr_id, remote_addr, rkey, imm, sges)``."""
    _, kind, flags, opcode, nsge, rid, qp, wr_id, raddr, rkey, imm = POST.unpack_from(rec)
    sges = [SGE.unpack_from(rec, POST.size + SGE.size * i) for i in range(nsge)]
    return (kind, flags, opcode, rid, qp, wr_id, raddr, rkey,
            imm if flags & F_IMM else None, sges)


def pack_wcs(cq: int, wcs: list[Any]) -> bytes | None:
    """Completions of one CQ as a compact record; None if one does not fit."""
    if len(wcs) > MAX_WCS:
        return None
    try:
        parts = [WC_HEAD.pack(MARK, WC, len(wcs), cq)]
        pack = WC_ENTRY.pack
        for w in wcs:
            imm = w.imm
            parts.append(pack(w.wr_id, w.status, w.opcode, 0 if imm is None else WC_IMM,
                              w.qp_num, w.byte_len, 0 if imm is None else imm, w.src_qp,
                              w.vendor_err))
    except (struct.error, TypeError, ValueError):
        return None
    return b"".join(parts)


def unpack_wcs(rec: bytes) -> tuple[int, list[tuple[int, int, int, int, int, int | None,
                                                    int, int]]]:
    """``(cq, [(wr_id, status, opcode, qp_num, byte_len, imm, src_qp, vendor_err)])``."""
    _, _, n, cq = WC_HEAD.unpack_from(rec)
    out = []
    for i in range(n):
        wr_id, st, op, fl, qpn, blen, imm, src, verr = WC_ENTRY.unpack_from(
            rec, WC_HEAD.size + WC_ENTRY.size * i)
        out.append((wr_id, st, op, qpn, blen, imm if fl & WC_IMM else None, src, verr))
    return cq, out

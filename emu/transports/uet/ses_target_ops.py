# SPDX-License-Identifier: GPL-2.0-only
"""Target side of READ, ATOMIC and FETCHING_ATOMIC, and the response packets that carry data.

**How READ data comes back, and why this way.** The data of a READ travels
target → initiator as SES *responses with data* (RSP_DATA: read_req_message_id,
message_offset, payload_length) riding on ACK_CC packets that answer the
READ request's PSN (next_hdr 5, uet.md: PDS prologue — an ACK may carry an
SES response). The target keeps **no send state**: no PSN space of its own,
no retransmission buffer, no timer. Reliability comes from the initiator,
which already owns the timers: a READ request stays "waiting for its
response" until every byte is in; when data is lost, the initiator's RTO
sends CP ACK_REQ (or retransmits the request itself if that was lost) and
the target answers again by *re-executing* the READ from memory — safe
because a READ is idempotent (RoCE responders re-execute duplicate READs
for the same reason). The initiator splits a large READ into pieces of a
few packets (:mod:`.ses_initiator`) so a loss costs a piece, not the whole
READ, and the response burst to one request stays small.

**Atomics run once.** The outcome of an (fetching) atomic is kept by message
key with the message's response (``TargetPdc.responses``; the fetched bytes
here), so a duplicate — same PSN, or the same message resent after a
NEW_START_PSN — is answered from the stored result and never applied again.

Checks before anything moves: key, bounds and access (REMOTE_READ /
REMOTE_ATOMIC) over the whole range, alignment and supported AMO/datatype;
a failure is a return code in a plain response, and no byte beyond the
region is ever read.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from emu.core.memory import Access, MemError, MemoryAccessError, MemoryTable
from emu.transports.uet import ses_amo as AMO
from emu.transports.uet import ses_shape as SH
from emu.transports.uet.pdc import TargetPdc
from emu.transports.uet.ses_shape import (
    RC_BAD_ADDR,
    RC_BAD_MKEY,
    RC_OK,
    RC_PERM_VIOLATION,
    RC_UNSUPPORTED_OP,
    RC_UNSUPPORTED_SIZE,
)
from emu.wire.codec.uet import SesResponse, SesResponseData

#: memory check failure → SES return code (uet.md: Responses)
MEM_RC = {MemError.INVALID_KEY: RC_BAD_MKEY, MemError.OUT_OF_BOUNDS: RC_BAD_ADDR,
          MemError.ACCESS_VIOLATION: RC_PERM_VIOLATION, MemError.WRONG_PD: RC_PERM_VIOLATION,
          MemError.MISALIGNED: RC_BAD_ADDR}
NH_RSP_DATA = 5
RSP_OPCODE_WITH_DATA = 2
#: largest READ one request may ask for (request_length is 32 bits; pieces are far smaller)
MAX_READ = 1 << 31
_KEEP = 4096


@dataclass(slots=True)
class ReadJob:
    """An executed READ: re-read on every answer (a READ is idempotent)."""

    rkey: int
    addr: int
    length: int


class TargetOps:
    """READ and atomics against ``memory``; ``mtu`` bounds an RSP_DATA's payload.

    ``exposed`` resolves keys the local initiator handed out for rendezvous
    pulls before the registration table is asked (set by the engine)."""

    def __init__(self, memory: MemoryTable, mtu: int) -> None:
        self.memory = memory
        self.mtu = mtu
        self.exposed: Any = None  # (key, addr, length) -> memoryview | None, or None
        self._kept: weakref.WeakKeyDictionary[TargetPdc, OrderedDict[int, Any]] = (
            weakref.WeakKeyDictionary())

    def _keep(self, t: TargetPdc, key: int, what: Any) -> None:
        d = self._kept.get(t)
        if d is None:
            d = self._kept[t] = OrderedDict()
        d[key] = what
        while len(d) > _KEEP:
            d.popitem(last=False)

    def kept(self, t: TargetPdc, key: int) -> Any:
        d = self._kept.get(t)
        return None if d is None else d.get(key)

    # -- requests ------------------------------------------------------------------

    def _source(self, rkey: int, addr: int, length: int) -> memoryview:
        """The bytes a READ returns (an exposed rendezvous buffer, else a region)."""
        if self.exposed is not None:
            v = self.exposed(rkey, addr, length)
            if v is not None:
                return v
        return self.memory.remote_read(rkey, addr, length)

    def read(self, t: TargetPdc, v: SH.ReqView) -> tuple[int, int]:
        """Validate a READ of ``request_length`` bytes at ``buffer_offset`` (rkey =
        mem_key); ``(rc, length)``. Nothing is read here: the answer reads."""
        n = v.request_length
        if n > MAX_READ:
            return RC_UNSUPPORTED_SIZE, 0
        if n:
            try:
                self._source(v.mem_key_match_bits, v.buffer_offset, n)
            except MemoryAccessError as e:
                return MEM_RC[e.kind], 0
        self._keep(t, v.message_id, ReadJob(v.mem_key_match_bits, v.buffer_offset, n))
        return RC_OK, n

    def atomic(self, t: TargetPdc, v: SH.ReqView, payload: memoryview) -> tuple[int, int]:
        """Apply one AMO (exactly once: the caller answers repeats from the stored
        response) and keep a fetching atomic's old value for its RSP_DATA."""
        ext = v.ext
        if ext is None:
            return RC_UNSUPPORTED_OP, 0  # an atomic opcode without its extension header
        addr = v.buffer_offset
        rc = AMO.check(ext.amo_opcode, ext.datatype, addr)
        if rc is not None:
            return rc, 0
        cas = ext.amo_opcode == AMO.AMO_CSWAP
        if not cas and len(payload) < AMO.SIZE:
            return RC_UNSUPPORTED_SIZE, 0
        if not hasattr(ext, "compare") and cas:
            return RC_UNSUPPORTED_OP, 0
        try:
            mr = self.memory.check_remote(v.mem_key_match_bits, addr, AMO.SIZE,
                                          Access.REMOTE_ATOMIC)
        except MemoryAccessError as e:
            return MEM_RC[e.kind], 0
        if cas:
            old = AMO.apply(mr.view, addr - mr.va, ext.amo_opcode, ext.datatype, ext.swap,
                            ext.compare)
        else:
            old = AMO.apply(mr.view, addr - mr.va, ext.amo_opcode, ext.datatype,
                            AMO.from_wire(payload))
        if v.opcode == SH.OP_FETCHING_ATOMIC:
            self._keep(t, v.message_id, AMO.to_wire(old))
        return RC_OK, AMO.SIZE

    # -- answers ------------------------------------------------------------------

    def response_parts(self, t: TargetPdc, rsp: tuple[int, int, int], job_id: int
                       ) -> list[tuple[int, Any, Any]]:
        """RSP_DATA packets for a READ / fetching atomic ``rsp`` = (key, rc, length), or
        [] when the message has no data to return (the caller sends a plain response)."""
        key, rc, _n = rsp
        if rc != RC_OK:
            return []
        what = self.kept(t, key)
        if what is None:
            return []
        mid = SH.wire_message_id(key)
        if isinstance(what, ReadJob):
            if what.length == 0:
                return []
            try:
                data = self._source(what.rkey, what.addr, what.length)
            except MemoryAccessError as e:  # deregistered since: say so, send nothing
                return [(4, SesResponse(return_code=MEM_RC[e.kind], message_id=mid,
                                        job_id=job_id), b"")]
        else:
            data = memoryview(what)
        total = len(data)
        out = []
        step = self.mtu
        for off in range(0, total, step):
            k = min(step, total - off)
            out.append((NH_RSP_DATA, SesResponseData(
                opcode=RSP_OPCODE_WITH_DATA, return_code=RC_OK, message_id=mid, job_id=job_id,
                read_req_message_id=mid, payload_length=k, modified_length=total,
                message_offset=off), data[off:off + k]))
        return out

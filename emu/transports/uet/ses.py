# SPDX-License-Identifier: GPL-2.0-only
"""SES for RUD: WRITE and SEND, standard request headers, placement and responses.

Initiator side: :func:`request_header` builds the 44-byte standard request for
one packet of a message (uet.md: SES request headers — SOM carries
header_data, the others payload_length + message_offset; every packet carries
message_id, buffer_offset, mem_key and request_length), which is what lets a
target place any packet on its own, in any order.

Target side: :class:`SesTarget` places each packet's bytes at
``buffer_offset + message_offset`` — into registered memory by
(mem_key → rkey) for a WRITE, into a posted receive buffer for a SEND — and
says when a message is complete (:class:`emu.core.reorder.PlacementTracker`).
Bounds and keys are checked against the *whole* message before the first
byte moves, so a bad WRITE writes nothing (:mod:`emu.core.memory`) and the
response carries the return code (uet.md: Responses).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.memory import Access, MemError, MemoryAccessError, MemoryTable
from emu.core.reorder import PlaceStatus
from emu.transports.uet.pdc import NACK_NO_SES_MSG_AVAIL, RecvAssign, TargetPdc, TxMessage
from emu.wire.codec.uet import SesResponse, SesStandardRequest, SesStandardRequestSom
from emu.wire.uet_defs import RETURN_CODE

OP_WRITE = 0x01
OP_SEND = 0x05
RSP_OPCODE_RESPONSE = 1

RC_OK = RETURN_CODE["OK"]
RC_BAD_MKEY = RETURN_CODE["BAD_MKEY"]
RC_BAD_ADDR = RETURN_CODE["BAD_ADDR"]
RC_PERM_VIOLATION = RETURN_CODE["PERM_VIOLATION"]
RC_TOO_LONG = RETURN_CODE["TOO_LONG"]
RC_UNSUPPORTED_OP = RETURN_CODE["UNSUPPORTED_OP"]
RC_BAD_PID = RETURN_CODE["BAD_PID"]

_MEM_RC = {MemError.INVALID_KEY: RC_BAD_MKEY, MemError.OUT_OF_BOUNDS: RC_BAD_ADDR,
           MemError.ACCESS_VIOLATION: RC_PERM_VIOLATION, MemError.WRONG_PD: RC_PERM_VIOLATION,
           MemError.MISALIGNED: RC_BAD_ADDR}
_WC_OF_RC = {RC_BAD_MKEY: WcStatus.REM_ACCESS_ERR, RC_BAD_ADDR: WcStatus.REM_ACCESS_ERR,
             RC_PERM_VIOLATION: WcStatus.REM_ACCESS_ERR, RC_TOO_LONG: WcStatus.REM_INV_REQ_ERR,
             RC_UNSUPPORTED_OP: WcStatus.REM_INV_REQ_ERR, RC_BAD_PID: WcStatus.REM_INV_REQ_ERR}
WC_OPCODE = {OP_WRITE: WcOpcode.RDMA_WRITE, OP_SEND: WcOpcode.SEND}


def wc_status(rc: int) -> WcStatus:
    """The verbs status an initiator reports for a failed SES return code."""
    return _WC_OF_RC.get(rc, WcStatus.REM_OP_ERR)


def request_header(msg: TxMessage, offset: int, length: int, job_id: int
                   ) -> SesStandardRequest | SesStandardRequestSom:
    """The standard request for bytes ``[offset, offset+length)`` of ``msg``.

    buffer_offset is the message's remote start address (a WRITE's VA; 0 for a
    SEND, which lands at the start of the posted buffer); placement adds
    message_offset, which the SOM packet implies as 0.
    """
    eom = int(offset + length >= msg.length)
    common = {"opcode": msg.opcode, "eom": eom, "message_id": msg.message_id,
              "job_id": job_id, "pid_on_fep": msg.dest_ep, "buffer_offset": msg.remote_addr,
              "initiator": msg.ep, "mem_key_match_bits": msg.rkey,
              "request_length": msg.length}
    if offset == 0:
        return SesStandardRequestSom(som=1, **common)
    return SesStandardRequest(som=0, payload_length=length, message_offset=offset, **common)


def response_header(message_id: int, rc: int, length: int, job_id: int) -> SesResponse:
    return SesResponse(opcode=RSP_OPCODE_RESPONSE, return_code=rc, message_id=message_id,
                       job_id=job_id, modified_length=length)


def payload_offset(ses: Any) -> tuple[int, int | None]:
    """(message_offset, declared payload length or None) of a standard request."""
    if ses.som:
        return 0, None
    return ses.message_offset, ses.payload_length


def looks_trimmed(ses: Any, payload_len: int) -> bool:
    """A request cut after its headers by a switch (uet.md: Trimming): bytes are
    missing that the SES header says were sent. A SOM packet declares no payload
    length, so there only an empty payload of a non-empty message counts."""
    if ses.som:
        return payload_len == 0 and ses.request_length > 0
    return payload_len < ses.payload_length


@dataclass(slots=True)
class RecvWqe:
    """A posted receive: gather views into the application's buffers."""

    wr_id: int
    views: list[memoryview]
    capacity: int


@dataclass(eq=False)
class Endpoint:
    """A local UET endpoint (libfabric ``fi_endpoint``): its CQs and receive queue;
    its id is the PIDonFEP peers address SENDs to."""

    ep: int
    send_cq: Any
    recv_cq: Any
    pd: Any = None
    rq: deque[RecvWqe] = field(default_factory=deque)


class SesTarget:
    """Places incoming requests and decides responses (see the module docstring)."""

    def __init__(self, memory: MemoryTable, endpoints: dict[int, Endpoint],
                 complete: Any) -> None:
        self.memory = memory
        self.endpoints = endpoints
        self.complete = complete  # (cq, WorkCompletion) -> None

    def on_request(self, t: TargetPdc, ses: Any, payload: memoryview
                   ) -> tuple[tuple[int, int] | None, int | None]:
        """Place one packet. Returns ``(response, nack)``: response ``(rc, length)`` when the
        message just completed or has failed (sent with the ACK), or a NACK code when the
        packet cannot be taken now (it is then not marked received)."""
        mid = ses.message_id
        done = t.responses.get(mid)
        if done is not None and mid not in t.placement:
            return done, None  # a failed (or finished) message: repeat its response
        off, _ = payload_offset(ses)
        n = len(payload)
        total = ses.request_length
        if off + n > total:
            return self._fail(t, mid, RC_TOO_LONG), None
        if ses.opcode == OP_WRITE:
            try:
                self.memory.check_remote(ses.mem_key_match_bits, ses.buffer_offset, total,
                                         Access.REMOTE_WRITE) if total else None
            except MemoryAccessError as e:
                return self._fail(t, mid, _MEM_RC[e.kind]), None
            res = t.placement.place(mid, off, n, total=total)
            if res.new_bytes:
                self.memory.remote_write(ses.mem_key_match_bits, ses.buffer_offset + off,
                                         payload)
            if res.status is PlaceStatus.COMPLETED:
                t.remember_response(mid, RC_OK, total)
                return (RC_OK, total), None
            return None, None
        if ses.opcode == OP_SEND:
            return self._send(t, ses, mid, off, payload, total)
        return self._fail(t, mid, RC_UNSUPPORTED_OP), None

    def _send(self, t: TargetPdc, ses: Any, mid: int, off: int, payload: memoryview,
              total: int) -> tuple[tuple[int, int] | None, int | None]:
        a = t.sends.get(mid)
        if a is None:
            ep = self.endpoints.get(ses.pid_on_fep)
            if ep is None:
                return self._fail(t, mid, RC_BAD_PID), None
            if not ep.rq:
                return None, NACK_NO_SES_MSG_AVAIL  # no buffer yet: sender retries later
            w = ep.rq.popleft()
            a = t.sends[mid] = RecvAssign(w.wr_id, ep.ep, w.views, w.capacity, total,
                                          ses.initiator)
            if total > w.capacity:
                del t.sends[mid]
                self.complete(ep.recv_cq, WorkCompletion(w.wr_id, WcStatus.LOC_LEN_ERR,
                                                         WcOpcode.RECV, ep.ep, total))
                return self._fail(t, mid, RC_TOO_LONG), None
        res = t.placement.place(mid, off, len(payload), total=total)
        if res.new_bytes:
            _scatter(a.views, off, payload)
        if res.status is PlaceStatus.COMPLETED:
            del t.sends[mid]
            ep = self.endpoints.get(a.ep)
            if ep is not None:
                self.complete(ep.recv_cq, WorkCompletion(a.wr_id, WcStatus.SUCCESS,
                                                         WcOpcode.RECV, a.ep, total,
                                                         src_qp=a.src_ep))
            t.remember_response(mid, RC_OK, total)
            return (RC_OK, total), None
        return None, None

    def _fail(self, t: TargetPdc, mid: int, rc: int) -> tuple[int, int]:
        t.placement.forget(mid)
        t.sends.pop(mid, None)
        t.remember_response(mid, rc, 0)
        return rc, 0


def _scatter(views: list[memoryview], off: int, data: memoryview) -> None:
    """Copy ``data`` to byte ``off`` of the concatenation of ``views``."""
    pos = 0
    i = 0
    n = len(data)
    cur = off
    for v in views:
        lv = len(v)
        if cur < pos + lv:
            start = cur - pos
            k = min(lv - start, n - i)
            v[start:start + k] = data[i:i + k]
            i += k
            cur += k
            if i >= n:
                return
        pos += lv

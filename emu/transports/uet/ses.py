# SPDX-License-Identifier: GPL-2.0-only
"""SES for RUD: WRITE and SEND placement, the target's dispatch of every SES operation,
and responses.

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

The other operations live in their own modules and are dispatched from
:meth:`SesTarget.on_request`: READ and (fetching) atomics in
:mod:`.ses_target_ops`, tag matching in :mod:`.ses_tagged`, header shapes in
:mod:`.ses_shape`. Requests reach the target as a :class:`~.ses_shape.ReqView`,
so small, medium and standard headers are handled alike.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.memory import Access, MemoryAccessError, MemoryTable, scatter
from emu.core.reorder import PlaceStatus
from emu.transports.uet import ses_shape as SH
from emu.transports.uet import ses_tagged as TG
from emu.transports.uet.pdc import NACK_NO_SES_MSG_AVAIL, RecvAssign, TargetPdc, TxMessage
from emu.transports.uet.ses_shape import ReqView
from emu.transports.uet.ses_target_ops import MEM_RC, TargetOps
from emu.wire.codec.uet import SesResponse, SesStandardRequest, SesStandardRequestSom

OP_WRITE = SH.OP_WRITE
OP_READ = SH.OP_READ
OP_ATOMIC = SH.OP_ATOMIC
OP_FETCHING_ATOMIC = SH.OP_FETCHING_ATOMIC
OP_SEND = SH.OP_SEND
OP_RENDEZVOUS_SEND = SH.OP_RENDEZVOUS_SEND
OP_TAGGED_SEND = SH.OP_TAGGED_SEND
RSP_OPCODE_RESPONSE = 1
_SEND_OPS = frozenset({OP_SEND, OP_TAGGED_SEND, OP_RENDEZVOUS_SEND, SH.OP_RENDEZVOUS_TSEND})
SEND_OPS = _SEND_OPS  # (public: the target's SYN check names what SES serves)

RC_OK, RC_BAD_MKEY, RC_BAD_ADDR = SH.RC_OK, SH.RC_BAD_MKEY, SH.RC_BAD_ADDR
RC_PERM_VIOLATION, RC_TOO_LONG = SH.RC_PERM_VIOLATION, SH.RC_TOO_LONG
RC_UNSUPPORTED_OP, RC_BAD_PID = SH.RC_UNSUPPORTED_OP, SH.RC_BAD_PID

_NH_RSP = 4
_WC_OF_RC = {RC_BAD_MKEY: WcStatus.REM_ACCESS_ERR, RC_BAD_ADDR: WcStatus.REM_ACCESS_ERR,
             RC_PERM_VIOLATION: WcStatus.REM_ACCESS_ERR, RC_TOO_LONG: WcStatus.REM_INV_REQ_ERR,
             RC_UNSUPPORTED_OP: WcStatus.REM_INV_REQ_ERR, RC_BAD_PID: WcStatus.REM_INV_REQ_ERR}
WC_OPCODE = {OP_WRITE: WcOpcode.RDMA_WRITE, OP_SEND: WcOpcode.SEND, OP_READ: WcOpcode.RDMA_READ,
             OP_ATOMIC: WcOpcode.FETCH_ADD, OP_FETCHING_ATOMIC: WcOpcode.FETCH_ADD,
             OP_TAGGED_SEND: WcOpcode.SEND, OP_RENDEZVOUS_SEND: WcOpcode.SEND,
             SH.OP_RENDEZVOUS_TSEND: WcOpcode.SEND}


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
    length, so there only an empty payload of a message that must carry bytes counts
    (a READ or a compare-and-swap carries none: :func:`~.ses_shape.expected_payload`)."""
    if isinstance(ses, ReqView):
        if ses.payload_length is None:
            return payload_len < SH.expected_payload(ses)
        return payload_len < ses.payload_length
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
    trq: list[TG.TaggedRecv] = field(default_factory=list)  # posted tagged receives


class SesTarget:
    """Places incoming requests and decides responses (see the module docstring)."""

    def __init__(self, memory: MemoryTable, endpoints: dict[int, Endpoint],
                 complete: Any, *, mtu: int = 4096) -> None:
        self.memory = memory
        self.endpoints = endpoints
        self.complete = complete  # (cq, WorkCompletion) -> None
        self.ops = TargetOps(memory, mtu)
        #: (t, message key, RecvAssign, ReqView) -> None: start a rendezvous pull
        self.pull: Any = None

    def on_request(self, t: TargetPdc, ses: Any, payload: memoryview
                   ) -> tuple[tuple[int, int] | None, int | None]:
        """Place one packet. Returns ``(response, nack)``: response ``(rc, length)`` when the
        message just completed or has failed (sent with the ACK), or a NACK code when the
        packet cannot be taken now (it is then not marked received).

        ``ses`` is a :class:`~.ses_shape.ReqView` (a raw standard header is accepted too).
        A message whose response is stored is answered from it, never executed again:
        that is what makes a retransmitted atomic run once (uet.md: SES; as RoCE keeps
        atomic replies by PSN, here by message id)."""
        if not isinstance(ses, ReqView):
            ses = SH.request_view(_Raw(ses), 0)
        mid = ses.message_id
        done = t.responses.get(mid)
        if done is not None and mid not in t.placement:
            return done, None  # a failed (or finished) message: repeat its response
        off, _ = payload_offset(ses)
        n = len(payload)
        total = ses.request_length
        op = ses.opcode
        if op == OP_READ:
            return self._done(t, mid, self.ops.read(t, ses)), None
        if op in SH.ATOMIC_OPS:
            return self._done(t, mid, self.ops.atomic(t, ses, payload)), None
        if off + n > total:
            return self._fail(t, mid, RC_TOO_LONG), None
        if op == OP_WRITE:
            try:
                self.memory.check_remote(ses.mem_key_match_bits, ses.buffer_offset, total,
                                         Access.REMOTE_WRITE) if total else None
            except MemoryAccessError as e:
                return self._fail(t, mid, MEM_RC[e.kind]), None
            res = t.placement.place(mid, off, n, total=total)
            if res.new_bytes:
                self.memory.remote_write(ses.mem_key_match_bits, ses.buffer_offset + off,
                                         payload)
            if res.status is PlaceStatus.COMPLETED:
                t.remember_response(mid, RC_OK, total)
                return (RC_OK, total), None
            return None, None
        if op in _SEND_OPS:
            return self._send(t, ses, mid, off, payload, total)
        return self._fail(t, mid, RC_UNSUPPORTED_OP), None

    def _done(self, t: TargetPdc, mid: int, r: tuple[int, int]) -> tuple[int, int]:
        if r[0] != RC_OK:
            return self._fail(t, mid, r[0])
        t.remember_response(mid, *r)
        return r

    def response_parts(self, t: TargetPdc, rsp: tuple[int, int, int], job_id: int
                       ) -> list[tuple[int, Any, Any]]:
        """``(next_hdr, SES response header, data)`` packets answering message ``rsp`` =
        (key, rc, length): data for a READ or a fetching atomic, else one plain response."""
        parts = self.ops.response_parts(t, rsp, job_id)
        if parts:
            return parts
        key, rc, n = rsp
        return [(_NH_RSP, response_header(SH.wire_message_id(key), rc, n, job_id), b"")]

    def _send(self, t: TargetPdc, ses: Any, mid: int, off: int, payload: memoryview,
              total: int) -> tuple[tuple[int, int] | None, int | None]:
        a = t.sends.get(mid)
        if a is None:
            ep = self.endpoints.get(ses.pid_on_fep)
            if ep is None:
                return self._fail(t, mid, RC_BAD_PID), None
            if ses.opcode in SH.TAGGED_OPS:
                w = TG.match(ep.trq, ses.mem_key_match_bits)
            else:
                w = ep.rq.popleft() if ep.rq else None
            if w is None:
                # no (matching) buffer yet: "receiver not ready", the sender retries
                # later (uet.md: NACK codes — NO_SES_MSG_AVAIL → retransmit)
                return None, NACK_NO_SES_MSG_AVAIL
            a = t.sends[mid] = RecvAssign(w.wr_id, ep.ep, w.views, w.capacity, total,
                                          ses.initiator)
            if total > w.capacity:
                del t.sends[mid]
                self.complete(ep.recv_cq, WorkCompletion(w.wr_id, WcStatus.LOC_LEN_ERR,
                                                         WcOpcode.RECV, ep.ep, total))
                return self._fail(t, mid, RC_TOO_LONG), None
        rdv = ses.opcode in SH.RENDEZVOUS_OPS and ses.ext is not None
        eager = min(ses.ext.eager_length, total) if rdv else total
        if off + len(payload) > eager:
            return self._fail(t, mid, RC_TOO_LONG), None
        res = t.placement.place(mid, off, len(payload), total=eager)
        if res.new_bytes:
            scatter(a.views, off, payload)
        if res.status is PlaceStatus.COMPLETED and eager < total:
            if self.pull is None:
                return self._fail(t, mid, RC_UNSUPPORTED_OP), None
            self.pull(t, mid, a, ses)  # the rest comes by READ (.ses_rdv); respond after
            return None, None
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


@dataclass(slots=True)
class _Raw:
    """A bare decoded header seen as a packet (for :func:`~.ses_shape.request_view`)."""

    ses: Any
    ext: Any = None

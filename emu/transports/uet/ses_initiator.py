# SPDX-License-Identifier: GPL-2.0-only
"""Initiator side of READ, (fetching) atomics and tagged sends: the verbs, the
response-data sinks, and the mapping of responses back to their messages.

A READ of ``n`` bytes becomes pieces of at most :data:`READ_PIECE_PKTS`
packets, each one READ request (one PSN, no payload) — so the target's
answer to one request is a short burst, and a loss costs one piece's
re-read (see :mod:`.ses_target_ops` for why data comes back as RSP_DATA on
ACKs and is recovered by the initiator). Every piece is an
:class:`~.pdc.TxMessage` whose ``sink`` is the :class:`ReadOp`: the
RSP_DATA bytes go straight to the application's SGEs at
``piece offset + message_offset``, in any order, duplicates ignored
(:class:`emu.core.reorder.MessageAssembly` per piece). A piece counts as
answered only when all its bytes are in; the READ completes (RDMA_READ) when
every piece has.

An atomic is one request with the atomic (or compare-and-swap) extension
header; a fetching one has an :class:`AtomicOp` sink that writes the old
value (host order) into the 8-byte result SGE before the completion.

Small/medium requests carry no message_id, so the target names their
response by the PSN (:func:`~.ses_shape.compact_key`); :meth:`SesInitiator.on_response`
turns that back into our message id through the ACK's ACK_PSN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.memory import scatter
from emu.core.reorder import MessageAssembly, PlaceStatus
from emu.transports.base import VerbsError
from emu.transports.uet import ses_amo as AMO
from emu.transports.uet import ses_shape as SH
from emu.transports.uet.pdc import InitiatorPdc, TxMessage
from emu.transports.uet.ses_tagged import TaggedRecv
from emu.wire.codec.uet import SesAtomic, SesCompareSwap, SesResponse, SesResponseData

#: packets of READ data one READ request asks for
READ_PIECE_PKTS = 16
#: READ data a PDC may have asked for and not yet received, in seconds of the port's
#: line rate (at least one piece): see :func:`read_room`
READ_INFLIGHT_S = 3e-3


def read_room(pdc: InitiatorPdc, msg: TxMessage, line_rate: float) -> bool:
    """May ``msg`` go now, as far as READ data is concerned? (Anything but a READ may.)

    Why: the target answers a READ request with its whole piece at once, and its
    port sends those answers one after another. Asked for without a limit — a
    perftest read-bw keeps 16 READs of 1 MiB outstanding, 128 requests — the
    answers queued ~16 MiB at the target, ~130 ms at 1 Gb/s: far past the RTO,
    so the initiator re-asked for pieces still on their way, the target read and
    sent them again, and the PDC collapsed (UET read-bw 0.19 Gb/s on a 1 Gb/s pair,
    ~4x the data on the wire, RETRY_EXC_ERR). The NIC's own answer is a read
    window: what is asked for and not yet in stays within what the port moves in
    ``READ_INFLIGHT_S`` — the initiator's line rate stands in for the target's,
    as NICs of one fabric share it — so a piece's data waits at most about that
    long behind the others, well inside the RTO (>= 1 ms; 5 ms by default)."""
    if msg.opcode != SH.OP_READ:
        return True
    budget = line_rate * READ_INFLIGHT_S / 8
    out = 0
    for m in pdc.msgs.values():
        if m.opcode == SH.OP_READ:
            out += m.req_length or 0
    return out == 0 or out + (msg.req_length or 0) <= budget
RC_OK = SH.RC_OK


@dataclass(eq=False)
class ReadOp:
    """One posted READ (or fetching atomic): where its data goes and how many requests
    are still open; the completion is reported when the last one finishes."""

    eng: Any
    wr_id: int
    ep: int
    views: list[memoryview]
    length: int
    signaled: bool
    wc_opcode: WcOpcode
    pending: int = 0
    status: WcStatus = WcStatus.SUCCESS
    vendor: int = 0
    asm: dict[int, MessageAssembly] = field(default_factory=dict)  # piece offset → bytes in

    def place(self, msg: TxMessage, rsp: Any, payload: memoryview) -> bool | None:
        """Take one RSP_DATA for piece ``msg``; True when the piece is complete, None when
        the packet is malformed (counted and dropped by the caller)."""
        want = msg.req_length or 0
        off, n = rsp.message_offset, len(payload)
        if n != rsp.payload_length or off + n > want:
            return None
        asm = self.asm.get(msg.sink_off)
        if asm is None:
            asm = self.asm[msg.sink_off] = MessageAssembly(want)
        res = asm.place(off, n)
        if res.new_bytes:
            self.write(msg.sink_off + off, payload)
        return asm.complete or res.status is PlaceStatus.COMPLETED

    def write(self, off: int, data: memoryview) -> None:
        scatter(self.views, off, data)

    def complete(self, msg: TxMessage) -> bool:
        want = msg.req_length or 0
        a = self.asm.get(msg.sink_off)
        return want == 0 or (a is not None and a.complete)

    def done(self, msg: TxMessage, status: WcStatus, rc: int, vendor: int) -> None:
        """One request of this op finished (PDS/SES outcome); complete the op after the last."""
        if status is not WcStatus.SUCCESS and self.status is WcStatus.SUCCESS:
            self.status = status
            self.vendor = vendor or rc
        self.pending -= 1
        if self.pending > 0:
            return
        e = self.eng
        e.stats["msgs_completed" if self.status is WcStatus.SUCCESS else "msgs_failed"] += 1
        ep = e.eps.get(self.ep)
        if ep is None or (self.status is WcStatus.SUCCESS and not self.signaled):
            return
        e._complete(ep.send_cq, WorkCompletion(self.wr_id, self.status, self.wc_opcode,
                                               self.ep, self.length, vendor_err=self.vendor))


class AtomicOp(ReadOp):
    """A fetching atomic: the 8-byte old value arrives big-endian and is stored in host
    order (what the application reads, as with RDMA atomics)."""

    def write(self, off: int, data: memoryview) -> None:
        pass

    def place(self, msg: TxMessage, rsp: Any, payload: memoryview) -> bool | None:
        if not self.views:  # non-fetching: no data expected
            return None
        if rsp.message_offset != 0 or len(payload) != AMO.SIZE:
            return None
        scatter(self.views, 0, AMO.to_host(AMO.from_wire(payload)))
        self.asm[0] = MessageAssembly(0)
        return True

    def complete(self, msg: TxMessage) -> bool:
        return not self.views or 0 in self.asm


class SesInitiator:
    """The engine's SES verbs beyond WRITE/SEND and its response routing."""

    def __init__(self, eng: Any) -> None:
        self.e = eng
        self._compact: dict[tuple[int, int], TxMessage] = {}  # (pdcid, ext PSN) → msg

    # -- verbs -----------------------------------------------------------------------

    def _prep(self, ep: int, sges: Any, dest: Any, write: bool
              ) -> tuple[Any, list[memoryview], Any, int]:
        e = self.e
        endpoint = e._ep(ep)
        views = e._views(endpoint, sges, write)
        addr, dest_ep = e._dest(dest)
        return endpoint, views, addr, dest_ep

    def post_read(self, ep: int, wr_id: int, sges: Any, dest: Any, remote_addr: int,
                  rkey: int, signaled: bool) -> None:
        e = self.e
        _, views, addr, dest_ep = self._prep(ep, sges, dest, True)
        total = sum(len(v) for v in views)
        if total >= 1 << 32:
            raise VerbsError("READ larger than 4 GiB")
        op = ReadOp(e, wr_id, ep, views, total, signaled, WcOpcode.RDMA_READ)
        self.queue_read(op, e._pdc_for(addr), dest_ep, remote_addr, rkey)
        e.stats["reads_posted"] += 1

    def queue_read(self, op: ReadOp, pdc: InitiatorPdc, dest_ep: int, remote_addr: int,
                   rkey: int) -> None:
        """Queue the READ requests (pieces) that fetch ``op.length`` bytes."""
        e = self.e
        total = op.length
        piece = e.mtu * READ_PIECE_PKTS
        offs = list(range(0, total, piece)) or [0]
        op.pending = len(offs)
        for off in offs:
            n = min(piece, total - off)
            shape = SH.choose_shape(SH.OP_READ, 0, n, e.mtu)
            e._enqueue(pdc, TxMessage(op.wr_id, op.ep, SH.OP_READ, memoryview(b""), 0,
                                            dest_ep, remote_addr + off, rkey, op.signaled,
                                            shape=shape, req_length=n, sink=op, sink_off=off))

    def post_atomic(self, ep: int, wr_id: int, sges: Any, dest: Any, remote_addr: int,
                    rkey: int, op: str | int, operand: int, swap: int, signaled: bool,
                    datatype: str | int, fetch: bool | None) -> None:
        e = self.e
        try:
            amo = AMO.parse_op(op)
            dt = AMO.parse_datatype(datatype)
        except ValueError as ex:
            raise VerbsError(str(ex)) from None
        _, views, addr, dest_ep = self._prep(ep, sges, dest, True)
        fetching = bool(views) if fetch is None else fetch
        if fetching and sum(len(v) for v in views) < AMO.SIZE:
            raise VerbsError("a fetching atomic needs an 8-byte result buffer")
        if remote_addr % AMO.SIZE:
            raise VerbsError(f"atomic address {remote_addr:#x} is not 8-byte aligned")
        if amo == AMO.AMO_CSWAP:
            # verbs order: compare first, then the value to store
            ext: Any = SesCompareSwap(amo_opcode=amo, datatype=dt, compare=operand & AMO._M64,
                                      swap=swap & AMO._M64)
            data = memoryview(b"")
        else:
            ext = SesAtomic(amo_opcode=amo, datatype=dt)
            data = memoryview(AMO.to_wire(operand))
        wc = WcOpcode.COMP_SWAP if amo == AMO.AMO_CSWAP else WcOpcode.FETCH_ADD
        sink = AtomicOp(e, wr_id, ep, views if fetching else [], AMO.SIZE, signaled, wc)
        sink.pending = 1
        opcode = SH.OP_FETCHING_ATOMIC if fetching else SH.OP_ATOMIC
        pdc = e._pdc_for(addr)
        e._enqueue(pdc, TxMessage(wr_id, ep, opcode, data, len(data), dest_ep,
                                        remote_addr, rkey, signaled,
                                        shape=SH.choose_shape(opcode, len(data), AMO.SIZE, e.mtu),
                                        req_length=AMO.SIZE, ext=ext, sink=sink))
        e.stats["atomics_posted"] += 1

    def post_trecv(self, ep: int, wr_id: int, sges: Any, tag: int, ignore: int) -> None:
        e = self.e
        endpoint = e._ep(ep)
        if not 0 <= tag < 1 << 64 or not 0 <= ignore < 1 << 64:
            raise VerbsError("tag and ignore are 64-bit unsigned")
        views = e._views(endpoint, sges, True)
        endpoint.trq.append(TaggedRecv(wr_id, views, sum(len(v) for v in views), tag, ignore))

    # -- responses ------------------------------------------------------------------

    def on_response(self, pdc: InitiatorPdc, ack: Any, rsp: Any, payload: memoryview,
                    now: float) -> Any:
        """Route the SES part of an ACK: map a compact request's PSN-named response to
        its message, place RSP_DATA; return what the PDS should see as the message's
        response (None while data is still missing)."""
        if rsp is None:
            return None
        st = self.e.stats
        if not ack.p:
            psn = pdc.ext(ack.cack_psn) + ack.ack_psn_offset
            m = self._compact_msg(pdc, psn)
            if m is not None and rsp.message_id == psn & 0xFFFF:
                rsp.message_id = m.message_id
        msg = pdc.msgs.get(rsp.message_id)
        sink = None if msg is None else msg.sink  # a response to a message long finished
        if isinstance(rsp, SesResponseData):
            if msg is None or sink is None:
                st["rx_rsp_data_unmatched"] += 1
                return None
            if rsp.return_code != RC_OK:
                return rsp
            got = sink.place(msg, rsp, payload)
            if got is None:
                st["rx_rsp_data_bad"] += 1
                return None
            st["rx_rsp_data"] += 1
            if msg.waiting_since is not None:
                # its data is coming in: the piece is being answered, not lost — the
                # re-ask waits a whole RTO from here (as an RNIC's transport timer
                # restarts on every READ response packet)
                msg.waiting_since = now
                msg.retries = 0
            return SesResponse(return_code=RC_OK, message_id=msg.message_id) if got else None
        if sink is not None and rsp.return_code == RC_OK and not sink.complete(msg):
            st["rx_rsp_without_data"] += 1  # OK without the data: keep waiting, re-ask
            return None
        return rsp

    def _compact_msg(self, pdc: InitiatorPdc, psn: int) -> TxMessage | None:
        """The small/medium message whose (only) packet had PSN ``psn``, if any."""
        key = (pdc.pdcid, psn)
        m = self._compact.get(key)
        if m is not None and m.eom_psn == psn and m.message_id in pdc.msgs:
            return m
        pkt = pdc.unacked.get(psn)
        cand = pkt.msg if pkt is not None else None
        if cand is None:
            for x in pdc.msgs.values():
                if x.eom_psn == psn:
                    cand = x
                    break
        if cand is None or cand.shape == SH.NH_STANDARD:
            return None
        if len(self._compact) > 65536:
            self._compact.clear()
        self._compact[key] = cand  # type: ignore[assignment]
        return cand  # type: ignore[return-value]

    def finished(self, pdc: InitiatorPdc | None, msg: Any, status: WcStatus, rc: int,
                 vendor: int) -> bool:
        """Hand a finished request to its sink; False when it has none (plain message)."""
        if pdc is not None and msg.eom_psn is not None:
            self._compact.pop((pdc.pdcid, msg.eom_psn), None)
        sink = msg.sink
        if sink is None:
            return False
        sink.done(msg, status, rc, vendor)
        return True

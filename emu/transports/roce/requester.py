# SPDX-License-Identifier: GPL-2.0-only
"""The RC requester: send queue, segmentation, go-back-N, ACK/NAK and timeouts.

Packets are never stored: a WQE remembers its first PSN and packet count,
and :meth:`Requester.next_packet` regenerates packet ``k`` from the
application's registered memory whenever the transmit pointer passes it —
the first time or after a go-back-N rewind — as an HCA re-reads host memory
on retransmission. That keeps memory per QP at one small object per WQE,
however large the message.

PSNs are kept *extended* (unbounded ints, :meth:`PsnSpace.unwrap` against
the oldest unacknowledged PSN) so ordinary comparisons work across the
24-bit wrap. Rules (IBTA ch. 9.7, ``specs/rocev2.md``):

* an ACK for PSN ``p`` completes every SEND/WRITE up to ``p``; when it covers
  a READ/atomic whose response has not arrived, that response was lost
  (*implied NAK*) and everything from it is re-requested;
* READ responses and atomic ACKs are accepted only at the next expected PSN;
  a later one means loss → rewind (once per episode);
* NAK PSN-sequence-error ``p`` acks below ``p`` and rewinds to ``p``; RNR NAK
  acks below ``p`` and waits the responder's RNR timer before resending ``p``;
  invalid-request / remote-access / remote-operational NAKs fail the WQE
  and move the QP to ERR;
* the local ACK timer (4.096 µs × 2^timeout) restarts on every forward
  progress; on expiry the retry counter drops and the requester rewinds to the
  oldest unacked PSN; the counter (``retry_cnt``) refills on progress, and a
  sequence-error NAK that acks nothing new also spends a retry.

The transmit pointer (``tx``, ``tx_pkt``) is never behind ``una`` (so never
behind the oldest outstanding WQE, ``head``): whenever ``una`` moves forward
— an ACK, a READ response, an atomic ACK — :meth:`Requester._catch_up` moves
the pointer with it. A rewind puts it *at* ``una``; the ACKs of the
original packets can still arrive afterwards (the timeout was spurious, the
NAK raced them) and complete WQEs the pointer had gone back into. Without
the rule the pointer lagged behind ``head``, and compacting the send queue
(``del sq[:head]; tx -= head``) made it negative: packets were then built
from another WQE at another offset (issue #12: WRITE_MIDDLEs of 0 or 16
bytes, ``REM_INV_REQ_ERR`` at the peer). ``rd_out`` counts the READ/atomics
in ``sq[head:tx]``, so a completing head WQE leaves it only if it was there.
"""

from __future__ import annotations

import enum
import struct
from typing import Any

from emu.core.cq import WcStatus, WorkCompletion
from emu.core.datagram import Run
from emu.core.memory import gather, scatter
from emu.core.psn import PSN24
from emu.core.verbs import WrOpcode
from emu.transports.roce import packets as P
from emu.transports.roce.qp import (
    RNR_RETRY_INFINITE,
    EngineCtx,
    QpState,
    QueuePair,
    ack_timeout,
    rnr_delay,
)
from emu.wire.codec.roce import NAK_CODES

_unwrap = PSN24.unwrap
_MASK = PSN24.mask
_NAK_STATUS = {P.NAK_INVALID_REQUEST: WcStatus.REM_INV_REQ_ERR,
               P.NAK_REMOTE_ACCESS: WcStatus.REM_ACCESS_ERR,
               P.NAK_REMOTE_OP: WcStatus.REM_OP_ERR}
_OPS = {  # (opcode if 1 packet, first, middle, last) for SEND/WRITE, imm variants last
    WrOpcode.SEND: (P.SEND_ONLY, P.SEND_FIRST, P.SEND_MIDDLE, P.SEND_LAST),
    WrOpcode.SEND_WITH_IMM: (P.SEND_ONLY_IMM, P.SEND_FIRST, P.SEND_MIDDLE, P.SEND_LAST_IMM),
    WrOpcode.RDMA_WRITE: (P.WRITE_ONLY, P.WRITE_FIRST, P.WRITE_MIDDLE, P.WRITE_LAST),
    WrOpcode.RDMA_WRITE_WITH_IMM: (P.WRITE_ONLY_IMM, P.WRITE_FIRST, P.WRITE_MIDDLE,
                                   P.WRITE_LAST_IMM),
}
#: the middle-packet opcode of each SEND/WRITE verb (the requester's fast path)
_MIDDLE = {op: v[2] for op, v in _OPS.items()}
_U64_NATIVE = struct.Struct("=Q")


class Resp(enum.Enum):
    """Where a response's PSN lies (:meth:`Requester.classify`): the one verdict that
    ACKs, NAKs, READ responses and atomic ACKs are all judged by."""

    OLD = "old"  # below the oldest unacknowledged PSN: acknowledged already
    NEXT = "next"  # the oldest unacknowledged PSN
    LATER = "later"  # above it and sent: an ACK/NAK covers what is below it; a READ
    #                  response or atomic ACK there means the earlier one was lost
    UNSENT = "unsent"  # never sent: a stray or a forgery, dropped


class SendWqe:
    """One posted send WR and its transmit bookkeeping."""

    __slots__ = ("wr_id", "op", "signaled", "solicited", "imm", "views", "length", "raddr",
                 "rkey", "compare_add", "swap", "psn", "npkts")

    def __init__(self, wr_id: int, op: WrOpcode, signaled: bool, solicited: bool,
                 imm: int | None, views: list[memoryview], length: int, raddr: int, rkey: int,
                 compare_add: int, swap: int) -> None:
        self.wr_id = wr_id
        self.op = op
        self.signaled = signaled
        self.solicited = solicited
        self.imm = imm
        self.views = views
        self.length = length
        self.raddr = raddr
        self.rkey = rkey
        self.compare_add = compare_add
        self.swap = swap
        self.psn: int | None = None  # extended first PSN, assigned when first transmitted
        self.npkts = 0


class Requester:
    """The send half of one QP (see the module docstring)."""

    #: completed WQEs are dropped from the front of ``sq`` once there are more than this
    #: many and they are the larger part (a class attribute: tests lower it to reach it)
    compact_after = 256

    def __init__(self, qp: QueuePair, eng: EngineCtx) -> None:
        self.qp = qp
        self.eng = eng
        self.sq: list[SendWqe] = []
        self.reset(0)

    def reset(self, start_psn: int) -> None:
        """Forget everything (RESET, or RTS with a new ``sq_psn``) without completions."""
        self.sq.clear()
        self.head = 0  # oldest incomplete WQE
        self.tx = 0  # WQE the transmit pointer is in
        self.tx_pkt = 0  # packet index within it
        self.next_psn = start_psn  # extended PSN the next new WQE gets
        self.una = start_psn  # oldest unacknowledged PSN
        self.sent_high = start_psn  # one past the highest PSN sent
        self.rd_out = 0  # READ/atomic requests sent and not complete
        self.retry_left = self.qp.attr.retry_cnt
        self.rnr_left = self.qp.attr.rnr_retry
        self.rnr_wait = False
        self.episode = False  # an implied-NAK rewind happened; no repeat until progress
        self.since_ackreq = 0

    # -- posting ------------------------------------------------------------

    def outstanding(self) -> int:
        return len(self.sq) - self.head

    def post(self, w: SendWqe) -> None:
        self.sq.append(w)

    def has_work(self) -> bool:
        if self.rnr_wait or self.tx >= len(self.sq):
            return False
        st = self.qp.state
        return st is QpState.RTS or (st is QpState.SQD and self.sq[self.tx].psn is not None)

    def drained(self) -> bool:
        """Every WQE this QP started is complete (SQD: the send queue has drained; the
        rest wait, unstarted, for RTS)."""
        return self.head >= len(self.sq) or self.sq[self.head].psn is None

    # -- transmit -----------------------------------------------------------

    def _arm_retx(self, now: float) -> None:
        """Start the local ACK timeout if it is not running (a send keeps it armed)."""
        qp = self.qp
        if "retx" not in qp.timers:
            to = ack_timeout(qp.attr.timeout)
            if to is not None:
                qp.timers.set("retx", now + to)

    def middles(self, now: float, out: list, dst: Any, meta: Any) -> int:
        """Append as many full-size middle packets of the current SEND/WRITE as the pacer
        allows now — one :class:`~emu.core.datagram.Run` when the engine emits runs, else
        :class:`~emu.core.datagram.Gather` pieces each; returns how many.

        The daemon's bulk path: what :meth:`next_packet` and
        :meth:`QueuePair.on_paced_send` do per packet, done once per burst (the
        per-packet bookkeeping was the sending daemon's bottleneck). 0 when the
        next packet is not such a middle (first/last packets, several SGEs,
        RNR wait, not RTS): the caller then takes the general path.
        """
        qp = self.qp
        if self.rnr_wait or self.tx >= len(self.sq) or not qp.sending_allowed:
            return 0
        w = self.sq[self.tx]
        k = self.tx_pkt
        if not k or k >= w.npkts - 1 or len(w.views) != 1:  # type: ignore[operator]
            return 0
        mid = _MIDDLE.get(w.op)
        if mid is None:
            return 0
        a = qp.attr
        pmtu = a.pmtu
        size = pmtu + P.BTH_SIZE + P.ICRC_SIZE  # middles are full: no pad
        cnt = qp.paced_count(size, now, w.npkts - 1 - k)  # type: ignore[operator]
        if not cnt:
            return 0
        v = w.views[0]
        dqpn, pkey = a.dest_qp_num, a.pkey
        psn0 = w.psn + k  # type: ignore[operator]
        ackreq = self._ackreq
        off = k * pmtu
        if self.eng.runs:  # one Run: the headers in one buffer, the payload one view
            heads = P.middle_heads(mid, dqpn, psn0, [ackreq(False) for _ in range(cnt)],
                                   pkey=pkey)
            out.append((Run(heads, P.BTH_SIZE, v[off:off + cnt * pmtu], pmtu, [meta] * cnt,
                            P.ICRC_SIZE), dst, None))
        else:
            build = P.build_gather
            append = out.append
            for psn in range(psn0, psn0 + cnt):
                append((build(mid, dqpn, psn & _MASK, v[off:off + pmtu], ackreq=ackreq(False),
                              pkey=pkey), dst, meta))
                off += pmtu
        self.tx_pkt = k + cnt
        self._sent(psn0, psn0 + cnt, now)
        qp.on_paced_send(size, now, cnt)
        return cnt

    def _ackreq(self, last: bool) -> int:
        """AckReq on a message's last packet and on every ``ack_req_every``-th packet —
        the one rule of bursts, middles and other packets."""
        self.since_ackreq += 1
        if last or self.since_ackreq >= self.eng.ack_req_every:
            self.since_ackreq = 0
            return 1
        return 0

    def _sent(self, first: int, end: int, now: float, high: int | None = None) -> None:
        """PSNs ``first`` … ``end`` - 1 went out: those below the highest sent so far are
        retransmissions (counted); the highest moves up (to ``high`` when given: a READ
        reserves the PSNs of all its responses); the ACK timeout runs."""
        sh = self.sent_high
        if first < sh:
            self.eng.stats["tx_retransmits"] += min(end, sh) - first
        top = end if high is None else high
        if top > sh:
            self.sent_high = top
        self._arm_retx(now)

    def next_packet(self, now: float) -> bytearray | None:
        """The next request packet to send (new or retransmitted), or None if blocked."""
        qp = self.qp
        if self.rnr_wait or self.tx >= len(self.sq) or not qp.sending_allowed:
            return None
        w = self.sq[self.tx]
        a = qp.attr
        pmtu = a.pmtu
        k = self.tx_pkt
        if k and k < w.npkts - 1:
            mid = _MIDDLE.get(w.op)
            if mid is not None:
                # fast path: a full-size middle packet of a SEND/WRITE (the bulk of the bytes)
                psn_ext = w.psn + k  # type: ignore[operator]
                ackreq = self._ackreq(False)
                off = k * pmtu
                views = w.views
                if len(views) == 1:
                    payload = views[0][off:off + pmtu]
                    if self.eng.gather:  # daemon: no copy, sent by scatter-gather
                        buf = P.build_gather(mid, a.dest_qp_num, psn_ext & _MASK, payload,
                                             ackreq=ackreq, pkey=a.pkey)
                    else:
                        buf = P.build(mid, a.dest_qp_num, psn_ext & _MASK, b"", payload,
                                      ackreq=ackreq, pkey=a.pkey)
                else:
                    buf = P.build(mid, a.dest_qp_num, psn_ext & _MASK, b"",
                                  gather(views, off, pmtu), ackreq=ackreq, pkey=a.pkey)
                self.tx_pkt = k + 1
                self._sent(psn_ext, psn_ext + 1, now)
                return buf
        if w.psn is None:
            if qp.state is QpState.SQD:
                return None  # draining: finish what was started, start nothing new
            w.psn = self.next_psn
            w.npkts = max(1, -(-w.length // pmtu)) if not w.op.is_atomic else 1
            self.next_psn += w.npkts
        k = self.tx_pkt
        psn_ext = w.psn + k
        op = w.op
        dqpn = a.dest_qp_num
        psn = psn_ext & _MASK
        if op.is_read_or_atomic:
            if self.rd_out >= a.max_rd_atomic:
                return None
            if op is WrOpcode.RDMA_READ:
                off = k * pmtu
                buf = P.build(P.READ_REQUEST, dqpn, psn, P.reth(w.raddr + off, w.rkey,
                                                                 w.length - off),
                              ackreq=1, pkey=a.pkey)
            else:
                opc = P.CMP_SWAP if op is WrOpcode.ATOMIC_CMP_AND_SWP else P.FETCH_ADD
                if opc == P.CMP_SWAP:
                    ext = P.atomic_eth(w.raddr, w.rkey, w.swap, w.compare_add)
                else:
                    ext = P.atomic_eth(w.raddr, w.rkey, w.compare_add, 0)
                buf = P.build(opc, dqpn, psn, ext, ackreq=1, pkey=a.pkey)
            self.rd_out += 1
            self.tx += 1
            self.tx_pkt = 0
            self.since_ackreq = 0
        else:
            n = w.npkts
            only, first, middle, last = _OPS[op]
            off = k * pmtu
            chunk = min(pmtu, w.length - off)
            ext = b""
            if n == 1:
                opc = only
                if op is WrOpcode.RDMA_WRITE or op is WrOpcode.RDMA_WRITE_WITH_IMM:
                    ext = P.reth(w.raddr, w.rkey, w.length)
            elif k == 0:
                opc = first
                if op is WrOpcode.RDMA_WRITE or op is WrOpcode.RDMA_WRITE_WITH_IMM:
                    ext = P.reth(w.raddr, w.rkey, w.length)
            elif k == n - 1:
                opc = last
            else:
                opc = middle
            is_last = k == n - 1
            if is_last and w.imm is not None:
                ext += P.u32(w.imm)
            ackreq = self._ackreq(is_last)
            payload = gather(w.views, off, chunk) if chunk > 0 else b""
            buf = P.build(opc, dqpn, psn, ext, payload, ackreq=ackreq,
                          se=1 if is_last and w.solicited else 0, pkey=a.pkey)
            if is_last:
                self.tx += 1
                self.tx_pkt = 0
            else:
                self.tx_pkt = k + 1
        # a READ request reserves the PSNs of all its responses
        self._sent(psn_ext, psn_ext + 1, now,
                   w.psn + w.npkts if op is WrOpcode.RDMA_READ else None)
        return buf

    # -- responses ----------------------------------------------------------

    def classify(self, psn: int) -> Resp:
        """Where the response at extended ``psn`` lies against ``una`` and ``sent_high``."""
        if psn >= self.sent_high:
            return Resp.UNSENT
        if psn < self.una:
            return Resp.OLD
        return Resp.NEXT if psn == self.una else Resp.LATER

    def on_response(self, p: P.Pkt, now: float) -> None:
        """An ACK/NAK, READ response or atomic ACK for this QP, judged by :meth:`classify`."""
        op = p.opcode
        psn = _unwrap(p.psn, self.una)
        v = self.classify(psn)
        st = self.eng.stats
        if op == P.ACKNOWLEDGE:
            kind = (p.syndrome >> 5) & 3
            if v is Resp.UNSENT or (kind and v is Resp.OLD):
                st["rx_drop_stale_ack"] += 1
            elif kind == 0:
                if not self._acked_through(psn, now):
                    st["rx_ack_old"] += 1  # acknowledges nothing new (a duplicate or stray)
            elif kind == 2:
                st["rx_drop_bad_syndrome"] += 1
            else:
                before = self.una
                if v is Resp.LATER:  # an RNR NAK or NAK for psn acknowledges what is below
                    self._acked_through(psn - 1, now)
                if kind == 1:
                    self._rnr(p.syndrome & 0x1F, now)
                else:
                    self._nak(p.syndrome, before, now)
            return
        if not self.qp.sending_allowed:
            st["rx_drop_state"] += 1
            return
        if v is Resp.OLD:
            st["rx_duplicate_responses"] += 1
            return
        w = self.sq[self.head] if self.head < len(self.sq) else None
        if v is Resp.UNSENT or w is None or w.psn is None:
            st["rx_drop_unexpected_response"] += 1
            return
        if v is Resp.LATER:
            self._implied_nak(now)
            return
        if op == P.ATOMIC_ACK:
            if not w.op.is_atomic or w.psn != psn:
                st["rx_drop_unexpected_response"] += 1
                return
            _U64_NATIVE.pack_into(w.views[0], 0, p.orig)
            self._progress(psn + 1, now)
            self._complete_head(8)
            return
        if w.op is not WrOpcode.RDMA_READ or not w.psn <= psn < w.psn + w.npkts:
            st["rx_drop_unexpected_response"] += 1
            return
        k = psn - w.psn
        pmtu = self.qp.attr.pmtu
        off = k * pmtu
        data = p.payload
        want = min(pmtu, w.length - off) if w.length else 0
        if len(data) != want:
            st["rx_drop_bad_length"] += 1
            return
        if data:
            scatter(w.views, off, data)
        self._progress(psn + 1, now)
        if k == w.npkts - 1:
            self._complete_head(w.length)

    def _complete_head(self, byte_len: int) -> None:
        """The oldest WQE is done: complete it, keep the transmit-pointer rule, compact."""
        w = self.sq[self.head]
        if w.op.is_read_or_atomic and self.tx > self.head:
            self.rd_out -= 1  # counted only while in sq[head:tx] (not since a rewind to it)
        self.head += 1
        self._catch_up()
        if w.signaled:
            qp = self.qp
            self.eng.complete(qp.send_cq, WorkCompletion(w.wr_id, WcStatus.SUCCESS,
                                                         w.op.wc_opcode, qp.qpn, byte_len))
        if self.head > self.compact_after and self.head * 2 > len(self.sq):
            del self.sq[:self.head]
            self.tx -= self.head  # >= 0: _catch_up keeps tx >= head
            self.head = 0

    def _catch_up(self) -> None:
        """The rule of the module docstring: move the transmit pointer up to ``una`` if a
        rewind left it behind (what is acknowledged is never sent again)."""
        h = self.head
        if self.tx < h:
            self.tx, self.tx_pkt = h, 0
        if self.tx == h < len(self.sq):
            w = self.sq[h]
            if w.psn is not None and w.psn + self.tx_pkt < self.una < w.psn + w.npkts:
                self.tx_pkt = self.una - w.psn

    def _progress(self, una: int, now: float) -> None:
        """The oldest unacked PSN moved forward to ``una``: refill retries, restart the timer."""
        self.una = una
        self._catch_up()
        a = self.qp.attr
        self.retry_left = a.retry_cnt
        self.rnr_left = a.rnr_retry
        self.episode = False
        timers = self.qp.timers
        if una < self.sent_high:
            to = ack_timeout(a.timeout)
            if to is not None:
                timers.set("retx", now + to)
        else:
            timers.cancel("retx")

    def _acked_through(self, last: int, now: float) -> bool:
        """Apply a cumulative ACK of every PSN up to ``last``; True on forward progress."""
        start = self.una
        if last < start:
            return False
        sq = self.sq
        una = start
        implied = False
        while self.head < len(sq):
            w = sq[self.head]
            if w.psn is None:
                break
            if w.op.is_read_or_atomic:
                # the responder went past a READ/atomic whose response we lack
                implied = last >= una
                break
            end = w.psn + w.npkts
            if end - 1 <= last:
                una = end
                self.una = una
                self._complete_head(w.length)
                continue
            una = last + 1
            break
        if una > start:
            self._progress(una, now)
        if implied:
            self._implied_nak(now)
        return una > start

    def _implied_nak(self, now: float) -> None:
        """A later response or ACK shows an earlier response was lost: resend from ``una``."""
        if self.episode:
            return
        self.episode = True
        self.eng.stats["implied_naks"] += 1
        self.rewind(self.una)

    def _nak(self, syndrome: int, before: int, now: float) -> None:
        """A NAK whose implicit ACK is applied (``una`` was ``before`` it)."""
        code = syndrome & 0x1F
        st = self.eng.stats
        if code == P.NAK_PSN_SEQ:
            st["rx_seq_naks"] += 1
            if self.una == before:
                self.retry_left -= 1
                if self.retry_left < 0:
                    self._fail(WcStatus.RETRY_EXC_ERR, syndrome, "retries exhausted (NAK)", now)
                    return
            # una < psn when a READ/atomic before psn still lacks its response: resend it too
            self.rewind(self.una)
            return
        st["rx_error_naks"] += 1
        status = _NAK_STATUS.get(code, WcStatus.REM_INV_RD_REQ_ERR)
        self._fail(status, syndrome, f"NAK {NAK_CODES.get(code, code)}", now)

    def _rnr(self, code: int, now: float) -> None:
        """An RNR NAK whose implicit ACK is applied: wait the responder's timer, resend."""
        self.eng.stats["rx_rnr_naks"] += 1
        if self.qp.attr.rnr_retry != RNR_RETRY_INFINITE:
            self.rnr_left -= 1
            if self.rnr_left < 0:
                self._fail(WcStatus.RNR_RETRY_EXC_ERR, P.rnr_syndrome(code),
                           "RNR retries exhausted", now)
                return
        self.rewind(self.una)  # == psn unless an earlier READ/atomic lacks its response
        self.rnr_wait = True
        self.qp.timers.cancel("retx")
        self.qp.timers.set("rnr", now + rnr_delay(code))

    def _fail(self, status: WcStatus, vendor_err: int, reason: str, now: float) -> None:
        """Complete the oldest WQE with ``status`` (always signaled) and error the QP."""
        qp = self.qp
        if self.head < len(self.sq):
            w = self.sq[self.head]
            self.head += 1
            self.eng.complete(qp.send_cq, WorkCompletion(w.wr_id, status, w.op.wc_opcode,
                                                         qp.qpn, vendor_err=vendor_err))
        self.eng.qp_error(qp, status, reason, now)

    def rewind(self, psn: int) -> None:
        """Go back N: the next packet sent is ``psn`` (extended) and everything after it."""
        i = self.head
        sq = self.sq
        while i < len(sq) and sq[i].psn is not None and sq[i].psn + sq[i].npkts <= psn:
            i += 1
        if i >= len(sq) or sq[i].psn is None:
            if i > self.tx:
                return
            self.tx, self.tx_pkt = i, 0
        else:
            self.tx, self.tx_pkt = i, psn - sq[i].psn
        self.rd_out = sum(1 for w in sq[self.head:self.tx] if w.op.is_read_or_atomic)
        self.since_ackreq = 0
        self.eng.stats["rewinds"] += 1

    # -- timers and teardown ------------------------------------------------

    def on_timer(self, name: str, now: float) -> None:
        st = self.eng.stats
        if name == "retx":
            if self.una >= self.sent_high:
                return
            st["timeouts"] += 1
            if self.qp.cc is not None:
                self.qp.cc.on_loss(now)
            self.retry_left -= 1
            if self.retry_left < 0:
                self._fail(WcStatus.RETRY_EXC_ERR, 0, "retries exhausted (timeout)", now)
                return
            self.episode = False
            self.rewind(self.una)
        elif name == "rnr":
            self.rnr_wait = False

    def flush(self) -> None:
        """QP entered ERR: every WQE still queued completes with WR_FLUSH_ERR."""
        qp = self.qp
        for w in self.sq[self.head:]:
            self.eng.complete(qp.send_cq, WorkCompletion.flushed(w.wr_id, w.op.wc_opcode, qp.qpn))
        self.sq.clear()
        self.head = self.tx = self.tx_pkt = 0
        self.rd_out = 0
        self.rnr_wait = False

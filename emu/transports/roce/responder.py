# SPDX-License-Identifier: GPL-2.0-only
"""The RC responder: in-order acceptance, placement, ACK/NAK generation, READ and atomics.

Go-back-N (IBTA 9.7.5, ``specs/rocev2.md``): :meth:`Responder.classify` gives
every request its verdict (:class:`Rx`) — the general path and the middle-packet
fast path (:meth:`Responder.middle`, SEND and WRITE) both act on it, so each rule
below is written once. Only the expected
PSN is executed. A later PSN draws *one* PSN-sequence-error NAK per episode (the
episode ends when the expected PSN arrives), an earlier one is a duplicate:
SEND/WRITE duplicates are re-ACKed, a duplicate READ is executed again from
its own RETH (the requester adjusts VA/length when it resumes a partly
answered READ) and a duplicate atomic is answered from the saved result —
atomics run exactly once.

Responses leave in PSN order through one queue per QP, because an ACK
for PSN ``p`` implicitly acknowledges everything before it: were it to
overtake the READ responses of an earlier PSN, the requester would take
them for lost. Queue items are ready packets (NAK, atomic ACK), ACK
markers (coalesced while they sit at the tail) and READ jobs, which emit
their response packets one at a time under the QP's pacer.

Hostile or stray packets (issue #14): only a request at the expected PSN is
checked and executed, so only such a packet can draw an error NAK and move the
QP to ERR — as the IBTA rules make a real RNIC do (a blind forger hits it
with odds of 2^-24 per packet; RoCEv2 has no authentication against one who
reads the PSNs). Anything else changes no state: a duplicate is re-ACKed (a
duplicate READ or atomic that fails its checks is dropped, counted), a PSN
ahead draws one sequence-error NAK per episode — unless it is more than
``max_psn_ahead`` ahead (engine option, default 2^15), which no requester
can be, then it is dropped and counted (``rx_drop_psn_far``).

Errors: a remote access error (bad R_Key, out of bounds, missing right) or
an invalid request (bad opcode sequence, bad length, message larger than
the receive WQE) is NAKed with the request's PSN and moves the QP to ERR, as
a class C/D responder error does; every check happens before the first byte
is written, so such a request writes nothing.
"""

from __future__ import annotations

import enum
import struct
from collections import OrderedDict, deque

from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.memory import Access, MemError, MemoryAccessError, scatter
from emu.core.psn import PSN24
from emu.transports.roce import packets as P
from emu.transports.roce.qp import EngineCtx, QueuePair

_unwrap = PSN24.unwrap
_MASK = PSN24.mask
_U32 = struct.Struct("!I")  # BTH word 3: AckReq | reserved | PSN

_SEND_START = frozenset({P.SEND_FIRST, P.SEND_ONLY, P.SEND_ONLY_IMM, P.SEND_ONLY_INV})
_SEND_CONT = frozenset({P.SEND_MIDDLE, P.SEND_LAST, P.SEND_LAST_IMM, P.SEND_LAST_INV})
_SEND_END = frozenset({P.SEND_ONLY, P.SEND_ONLY_IMM, P.SEND_ONLY_INV, P.SEND_LAST,
                       P.SEND_LAST_IMM, P.SEND_LAST_INV})
_WRITE_START = frozenset({P.WRITE_FIRST, P.WRITE_ONLY, P.WRITE_ONLY_IMM})
_WRITE_CONT = frozenset({P.WRITE_MIDDLE, P.WRITE_LAST, P.WRITE_LAST_IMM})
_WRITE_END = frozenset({P.WRITE_ONLY, P.WRITE_ONLY_IMM, P.WRITE_LAST, P.WRITE_LAST_IMM})
_FULL = frozenset({P.SEND_FIRST, P.SEND_MIDDLE, P.WRITE_FIRST, P.WRITE_MIDDLE})
_ATOMIC = frozenset({P.CMP_SWAP, P.FETCH_ADD})
#: opcodes that begin a message (none may arrive while a multi-packet one is in progress)
_START = _SEND_START | _WRITE_START | {P.READ_REQUEST} | _ATOMIC
#: continuation opcodes → whether they continue a SEND (else a WRITE)
_CONT = {**dict.fromkeys(_SEND_CONT, True), **dict.fromkeys(_WRITE_CONT, False)}


class Rx(enum.Enum):
    """A request as this responder sees it (:meth:`Responder.classify`): the one receive
    verdict the general path (:meth:`Responder.on_request`) and the middle-packet fast
    path (:meth:`Responder.middle`) both act on (IBTA 9.7.5, rocev2.md: Behaviour)."""

    EXPECTED = "expected"  # the expected PSN, valid in the message sequence: execute it
    INVALID = "invalid"  # the expected PSN, but an invalid request: NAK it, QP to ERR
    DUPLICATE = "duplicate"  # behind: executed before; ACK again (READ again, atomic saved)
    SEQ_ERROR = "seq_error"  # ahead, first of an episode: NAK PSN sequence error once
    AHEAD = "ahead"  # ahead, the episode's NAK has gone: dropped, counted
    STRAY = "stray"  # more than max_psn_ahead ahead: no requester's, dropped, counted


# the verdicts as globals: ``Rx.EXPECTED`` costs ~140 ns a lookup on Python 3.11, a global ~8
_EXPECTED, _INVALID, _DUPLICATE = Rx.EXPECTED, Rx.INVALID, Rx.DUPLICATE
_SEQ_ERROR, _AHEAD, _STRAY = Rx.SEQ_ERROR, Rx.AHEAD, Rx.STRAY
#: the opcodes :meth:`Responder.middle` places (the bulk of a SEND or WRITE)
MIDDLES = frozenset({P.SEND_MIDDLE, P.WRITE_MIDDLE})


class RecvWqe:
    __slots__ = ("wr_id", "views", "length")

    def __init__(self, wr_id: int, views: list[memoryview], length: int) -> None:
        self.wr_id = wr_id
        self.views = views
        self.length = length


class AckItem:
    """A pending ACK of every PSN up to ``psn`` (extended) with ``msn``; coalesces at the tail."""

    __slots__ = ("psn", "msn")

    def __init__(self, psn: int, msn: int) -> None:
        self.psn = psn
        self.msn = msn


class ReadJob:
    """A READ being answered: ``npkts`` responses from PSN ``psn`` over ``view``."""

    __slots__ = ("psn", "view", "length", "npkts", "k", "msn")

    def __init__(self, psn: int, view: memoryview, length: int, npkts: int, msn: int) -> None:
        self.psn = psn
        self.view = view
        self.length = length
        self.npkts = npkts
        self.k = 0
        self.msn = msn


class _Msg:
    """The multi-packet SEND or WRITE in progress: where its bytes go (a WRITE's
    region ``view``, or a SEND's receive ``wqe``) and how many it may take
    (``total``: the DMA length, or the receive buffer's length)."""

    __slots__ = ("send", "wqe", "view", "off", "total")

    def __init__(self, send: bool, wqe: RecvWqe | None, view: memoryview | None,
                 total: int) -> None:
        self.send = send
        self.wqe = wqe
        self.view = view
        self.off = 0
        self.total = total

    def fits(self, n: int, last: bool) -> bool:
        """``n`` more bytes stay within ``total`` (and end it exactly if ``last``: a
        WRITE's last packet; a SEND may end short of its buffer)."""
        end = self.off + n
        return end <= self.total and (not last or end == self.total)

    def place(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at the message's offset and move past it (the caller checked
        :meth:`fits`): into the WRITE's region, or across the receive WQE's SGEs."""
        off = self.off
        end = off + len(data)
        if self.view is not None:
            self.view[off:end] = data
        else:
            assert self.wqe is not None
            scatter(self.wqe.views, off, data)
        self.off = end


class _Reject(Exception):
    """Internal: NAK ``code`` and error the QP with ``status``."""

    def __init__(self, code: int, status: WcStatus, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.status = status


class Responder:
    """The receive half of one QP (see the module docstring)."""

    def __init__(self, qp: QueuePair, eng: EngineCtx) -> None:
        self.qp = qp
        self.eng = eng
        self.rq: deque[RecvWqe] = deque()
        self.resp: deque[bytearray | AckItem | ReadJob] = deque()
        self.atomics: OrderedDict[int, int] = OrderedDict()
        self.reset(0)

    def reset(self, epsn: int) -> None:
        """Start expecting ``epsn`` (RTR); RESET also drops receive WQEs (:meth:`clear`)."""
        self.epsn = epsn
        self.msn = 0
        self.cur: _Msg | None = None
        self.nak_episode = False
        self.since_ack = 0
        self.resp.clear()
        self.atomics.clear()

    def clear(self) -> None:
        self.rq.clear()
        self.reset(0)

    # -- requests -----------------------------------------------------------

    def classify(self, psn: int, op: int, n: int) -> Rx:
        """What a request at extended ``psn`` with opcode ``op`` and ``n`` payload bytes is
        to this responder — every acceptance rule in one place (module docstring). Only
        the expected PSN is checked against the message sequence: anything else changes
        no state, so it cannot draw an error NAK."""
        d = psn - self.epsn
        if d == 0:
            return _INVALID if self._invalid(op, n) else _EXPECTED
        if d < 0:
            return _DUPLICATE
        if d > self.eng.max_psn_ahead:
            # no requester has that many packets in flight: a stray or a forgery. A
            # sequence-error NAK would make the real requester resend its whole window
            return _STRAY
        return _AHEAD if self.nak_episode else _SEQ_ERROR

    def _invalid(self, op: int, n: int) -> str | None:
        """Why a request at the expected PSN is invalid (an invalid-request NAK), or None:
        payload against the PMTU, and the opcode against the message in progress."""
        pmtu = self.qp.attr.pmtu
        if n > pmtu or n != pmtu and op in _FULL:
            return f"payload {n} B with PMTU {pmtu}"
        cur = self.cur
        send = _CONT.get(op)
        if send is not None:
            if cur is None or cur.send is not send:
                return "continuation without a first packet"
        elif op in _START:
            if cur is not None:
                return "new message inside a multi-packet one"
        else:
            return f"opcode 0x{op:02x} is not a request"
        return None

    def on_request(self, p: P.Pkt, now: float) -> None:
        """The general path: act on :meth:`classify`'s verdict for a decoded request."""
        psn = _unwrap(p.psn, self.epsn)
        op = p.opcode
        v = self.classify(psn, op, len(p.payload))
        if v is _EXPECTED:
            try:
                self._execute(p, op, psn)
            except _Reject as r:
                self._reject(psn, r, now)
        elif v is _DUPLICATE:
            self._duplicate(p, psn)
        elif v is _SEQ_ERROR or v is _AHEAD:
            self.eng.stats["rx_out_of_sequence"] += 1
            if v is _SEQ_ERROR:
                self.nak_episode = True
                self.eng.stats["tx_seq_naks"] += 1
                self._queue(P.nak_syndrome(P.NAK_PSN_SEQ), self.epsn)
        elif v is _INVALID:
            self._reject(psn, _Reject(P.NAK_INVALID_REQUEST, WcStatus.REM_INV_REQ_ERR,
                                      self._invalid(op, len(p.payload)) or ""), now)
        else:
            self.eng.stats["rx_drop_psn_far"] += 1

    def middle(self, data: bytes | bytearray | memoryview, n: int) -> bool:
        """A SEND_MIDDLE or WRITE_MIDDLE (:data:`MIDDLES`) that :meth:`classify` finds
        EXPECTED and that fits the message in progress, placed without building a
        :class:`~.packets.Pkt` — what :meth:`on_request` would do for it, in a fraction
        of the time. False (nothing changed): take the general path, which acts on any
        other verdict."""
        op = data[0]
        if op not in MIDDLES:
            return False
        w3 = _U32.unpack_from(data, 8)[0]
        epsn = self.epsn
        # the wire PSN is the expected one's (the unwrap without the call) and no pad or
        # transport version to decode: then the verdict is classify()'s
        if (w3 & _MASK) != (epsn & _MASK) or data[1] & 0x3F:
            return False
        pl = n - 16  # BTH 12 + ICRC 4
        if self.classify(epsn, op, pl) is not _EXPECTED:
            return False
        cur = self.cur
        assert cur is not None  # EXPECTED: a message of this kind is in progress
        if not cur.fits(pl, False):
            return False  # the general path rejects it
        cur.place(memoryview(data)[12:12 + pl])
        self._accepted(epsn, w3 >> 31)
        return True

    def _accepted(self, psn: int, ackreq: int, npkts: int = 1, answered: bool = False) -> None:
        """The request at the expected ``psn`` was executed: expect the one after its
        ``npkts`` PSNs (a READ takes one per response), end a NAK episode, and ACK when
        it asks (AckReq) or every ``ack_every`` packets — the one ACK rule of the general
        path and the middle-packet fast path. A READ or atomic is ``answered``: its
        response acknowledges it and everything before it, so no ACK is owed."""
        self.epsn = psn + npkts
        self.nak_episode = False
        if answered:
            self.since_ack = 0
            return
        self.since_ack += 1
        if ackreq or self.since_ack >= self.eng.ack_every:
            self._queue_ack()

    def _queue(self, syndrome: int, psn: int) -> None:
        a = self.qp.attr
        self.resp.append(P.build(P.ACKNOWLEDGE, a.dest_qp_num, psn & _MASK,
                                 P.aeth(syndrome, self.msn), pkey=a.pkey))

    def _queue_ack(self) -> None:
        self.since_ack = 0
        r = self.resp
        if r and type(r[-1]) is AckItem:
            it = r[-1]
            it.psn = self.epsn - 1  # type: ignore[union-attr]
            it.msn = self.msn  # type: ignore[union-attr]
        else:
            r.append(AckItem(self.epsn - 1, self.msn))

    def _execute(self, p: P.Pkt, op: int, psn: int) -> None:
        """Execute a request :meth:`classify` found EXPECTED (raises _Reject on a remote
        access or length error, before anything is written)."""
        if op in _SEND_START or op in _SEND_CONT:
            if not self._send(p, op, psn):
                return
        elif op in _WRITE_START or op in _WRITE_CONT:
            if not self._write(p, op, psn):
                return
        elif op == P.READ_REQUEST:
            self._read(p, psn)
            return
        else:
            self._atomic(p, op, psn)
            return
        self._accepted(psn, p.ackreq)

    def _rnr(self, psn: int) -> bool:
        """No receive WQE: RNR NAK ``psn`` (it will be resent) and hold the sequence."""
        self.eng.stats["tx_rnr_naks"] += 1
        self.nak_episode = True  # the rest of the burst is out of sequence: no NAK for it
        self._queue(P.rnr_syndrome(self.qp.attr.min_rnr_timer), psn)
        return False

    def _send(self, p: P.Pkt, op: int, psn: int) -> bool:
        cur = self.cur
        if cur is None:
            if not self.rq:
                return self._rnr(psn)
            wqe = self.rq.popleft()
            cur = self.cur = _Msg(True, wqe, None, wqe.length)
        wqe = cur.wqe
        assert wqe is not None
        data = p.payload
        n = len(data)
        if not cur.fits(n, False):
            raise _Reject(P.NAK_INVALID_REQUEST, WcStatus.LOC_LEN_ERR,
                          f"SEND of more than the {wqe.length}-byte receive buffer")
        if n:
            cur.place(data)
        if op in _SEND_END:
            self.cur = None
            self.msn = (self.msn + 1) & _MASK
            qp = self.qp
            self.eng.complete(qp.recv_cq, WorkCompletion(
                wqe.wr_id, WcStatus.SUCCESS, WcOpcode.RECV, qp.qpn, cur.off, p.imm,
                qp.attr.dest_qp_num))
        return True

    def _check(self, rkey: int, va: int, length: int, need: Access) -> memoryview:
        """Resolve a remote range or raise _Reject (nothing has been touched yet)."""
        if not int(self.qp.attr.access) & int(need):  # ints: IntFlag's & runs in Python
            raise _Reject(P.NAK_REMOTE_ACCESS, WcStatus.REM_ACCESS_ERR,
                          f"QP does not allow {need!r}")
        if length == 0:
            return memoryview(b"")
        try:
            mr = self.eng.memory.check_remote(rkey, va, length, need, self.qp.pd)
        except MemoryAccessError as e:
            raise _Reject(P.NAK_REMOTE_ACCESS, WcStatus.REM_ACCESS_ERR, str(e)) from None
        off = va - mr.va
        return mr.view[off:off + length]

    def _write(self, p: P.Pkt, op: int, psn: int) -> bool:
        data = p.payload
        n = len(data)
        cur = self.cur
        if cur is None:
            if p.dmalen > (1 << 31):
                raise _Reject(P.NAK_INVALID_REQUEST, WcStatus.REM_INV_REQ_ERR, "DMA length")
            view = self._check(p.rkey, p.va, p.dmalen, Access.REMOTE_WRITE)
            if op == P.WRITE_ONLY_IMM and not self.rq:
                return self._rnr(psn)
            cur = _Msg(False, None, view, p.dmalen)
        elif op == P.WRITE_LAST_IMM and not self.rq:
            return self._rnr(psn)
        last = op in _WRITE_END
        if not cur.fits(n, last):
            raise _Reject(P.NAK_INVALID_REQUEST, WcStatus.REM_INV_REQ_ERR,
                          f"WRITE payload does not match DMA length {cur.total}")
        if n:
            cur.place(data)
        if last:
            self.cur = None
            self.msn = (self.msn + 1) & _MASK
            if p.imm is not None:
                qp = self.qp
                wqe = self.rq.popleft()
                self.eng.complete(qp.recv_cq, WorkCompletion(
                    wqe.wr_id, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM, qp.qpn,
                    cur.total, p.imm, qp.attr.dest_qp_num))
        else:
            self.cur = cur
        return True

    def _read_job(self, p: P.Pkt, psn: int) -> ReadJob:
        if p.dmalen > (1 << 31):
            raise _Reject(P.NAK_INVALID_REQUEST, WcStatus.REM_INV_REQ_ERR, "DMA length")
        view = self._check(p.rkey, p.va, p.dmalen, Access.REMOTE_READ)
        pmtu = self.qp.attr.pmtu
        return ReadJob(psn, view, p.dmalen, max(1, -(-p.dmalen // pmtu)), self.msn)

    def _read(self, p: P.Pkt, psn: int) -> None:
        job = self._read_job(p, psn)
        self.msn = (self.msn + 1) & _MASK
        job.msn = self.msn
        self._accepted(psn, 1, job.npkts, answered=True)
        self.resp.append(job)

    def _atomic(self, p: P.Pkt, op: int, psn: int) -> None:
        if not self.qp.attr.access & Access.REMOTE_ATOMIC:
            raise _Reject(P.NAK_REMOTE_ACCESS, WcStatus.REM_ACCESS_ERR, "no atomic access")
        mem = self.eng.memory
        try:
            if op == P.CMP_SWAP:
                orig = mem.compare_swap(p.rkey, p.va, p.compare, p.swap_add, self.qp.pd)
            else:
                orig = mem.fetch_add(p.rkey, p.va, p.swap_add, self.qp.pd)
        except MemoryAccessError as e:
            if e.kind is MemError.MISALIGNED:
                raise _Reject(P.NAK_INVALID_REQUEST, WcStatus.REM_INV_REQ_ERR, str(e)) from None
            raise _Reject(P.NAK_REMOTE_ACCESS, WcStatus.REM_ACCESS_ERR, str(e)) from None
        self.msn = (self.msn + 1) & _MASK
        self._accepted(psn, 1, answered=True)
        cache = self.atomics
        cache[psn] = orig
        while len(cache) > max(16, 4 * self.qp.attr.max_dest_rd_atomic):
            cache.popitem(last=False)
        self._atomic_ack(psn, orig)

    def _atomic_ack(self, psn: int, orig: int) -> None:
        a = self.qp.attr
        self.resp.append(P.build(P.ATOMIC_ACK, a.dest_qp_num, psn & _MASK,
                                 P.aeth(P.ack_syndrome(), self.msn) + P.atomic_ack_eth(orig),
                                 pkey=a.pkey))

    def _duplicate(self, p: P.Pkt, psn: int) -> None:
        st = self.eng.stats
        st["rx_duplicates"] += 1
        op = p.opcode
        if op == P.READ_REQUEST:
            try:
                job = self._read_job(p, psn)
            except _Reject:
                st["rx_drop_bad_duplicate"] += 1
                return
            # the requester resends every request from here on, so READ answers still
            # queued for this or later PSNs would only be sent twice: drop them
            if any(type(it) is ReadJob and it.psn >= psn for it in self.resp):  # type: ignore[union-attr]
                self.resp = deque(it for it in self.resp
                                  if type(it) is not ReadJob or it.psn < psn)  # type: ignore[union-attr]
            job.msn = self.msn
            self.resp.append(job)
            st["read_reexecuted"] += 1
        elif op in _ATOMIC:
            orig = self.atomics.get(psn)
            if orig is None:
                st["rx_drop_bad_duplicate"] += 1
                return
            self._atomic_ack(psn, orig)
        else:
            self._queue_ack()

    def _reject(self, psn: int, r: _Reject, now: float) -> None:
        """NAK the request and move the QP to ERR (the NAK still leaves)."""
        self.eng.stats["tx_error_naks"] += 1
        self._queue(P.nak_syndrome(r.code), psn)
        cur, self.cur = self.cur, None
        qp = self.qp
        if cur is not None and cur.wqe is not None:
            self.eng.complete(qp.recv_cq, WorkCompletion(cur.wqe.wr_id, r.status,
                                                         WcOpcode.RECV, qp.qpn))
        self.eng.qp_error(qp, r.status, f"responder: {r}", now)

    # -- responses ----------------------------------------------------------

    def pop_control(self) -> bytearray | None:
        """The next unpaced response (ACK, NAK, atomic ACK), unless a READ job is first."""
        r = self.resp
        if not r:
            return None
        it = r[0]
        if type(it) is ReadJob:
            return None
        r.popleft()
        if type(it) is AckItem:
            a = self.qp.attr
            self.eng.stats["tx_acks"] += 1
            return P.build(P.ACKNOWLEDGE, a.dest_qp_num, it.psn & _MASK,
                           P.aeth(P.ack_syndrome(), it.msn), pkey=a.pkey)
        return it  # type: ignore[return-value]

    def has_read(self) -> bool:
        r = self.resp
        return bool(r) and type(r[0]) is ReadJob

    def read_packet(self) -> bytearray:
        """The next READ response packet of the job at the head (caller checked has_read)."""
        job: ReadJob = self.resp[0]  # type: ignore[assignment]
        a = self.qp.attr
        pmtu = a.pmtu
        k = job.k
        n = job.npkts
        off = k * pmtu
        data = job.view[off:off + pmtu]
        if n == 1:
            opc = P.READ_RESP_ONLY
        elif k == 0:
            opc = P.READ_RESP_FIRST
        elif k == n - 1:
            opc = P.READ_RESP_LAST
        else:
            opc = P.READ_RESP_MIDDLE
        ext = b"" if opc == P.READ_RESP_MIDDLE else P.aeth(P.ack_syndrome(), job.msn)
        job.k = k + 1
        if job.k == n:
            self.resp.popleft()
        return P.build(opc, a.dest_qp_num, (job.psn + k) & _MASK, ext, data, pkey=a.pkey)

    def post(self, wqe: RecvWqe) -> None:
        self.rq.append(wqe)

    def flush(self) -> None:
        """QP entered ERR: receive WQEs complete with WR_FLUSH_ERR; READ answers stop."""
        qp = self.qp
        for w in self.rq:
            self.eng.complete(qp.recv_cq, WorkCompletion.flushed(w.wr_id, WcOpcode.RECV, qp.qpn))
        self.rq.clear()
        self.cur = None
        self.resp = deque(it for it in self.resp if type(it) is not ReadJob)

# SPDX-License-Identifier: GPL-2.0-only
"""A sans-IO RoCEv2 RC queue pair for emu-ref: requester and responder, go-back-N.

Written from ``specs/rocev2.md`` (Behaviour, RC) to be obviously correct rather
than fast. No sockets and no clock: the caller feeds datagrams with
:meth:`RcQp.receive_datagram`, drains :meth:`RcQp.datagrams_to_send`, and calls
:meth:`RcQp.handle_timer` when :meth:`RcQp.get_timer` is due.

Requester: every posted work request gets its PSN range when posted (a READ
of *n* bytes takes ceil(n / PMTU) PSNs, the responder's response PSNs). One
send pointer walks the PSNs; go-back-N moves it back to the oldest
unacknowledged PSN on a NAK "PSN sequence error" or on the local ACK timeout.
A READ resumed in the middle is re-issued from the first missing response
PSN, with its VA and length advanced accordingly.

Responder: accepts only the expected PSN; an out-of-order one draws exactly
one NAK "PSN sequence error" until the expected PSN arrives; a duplicate is
re-ACKed (a duplicate READ request is re-executed, as READs are idempotent).
ACKs are coalesced: on AckReq, or every ``ack_every`` packets.

PSNs are kept as unbounded integers internally and wrapped to 24 bits on
the wire; a received PSN is mapped to the integer nearest the expected one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from emuref import roce_wire as W
from emuref.memory import AccessError, Memory

_HALF = 1 << 23


def unwrap(wire_psn: int, near: int) -> int:
    """The unbounded PSN with 24-bit value ``wire_psn`` closest to ``near``."""
    d = (wire_psn - near) & W.PSN_MASK
    if d >= _HALF:
        d -= 1 << 24
    return near + d


@dataclass
class Completion:
    """A finished work request, as a verbs work completion: status "SUCCESS" or an error."""

    wr_id: int
    op: str  # "WRITE", "SEND", "READ", "RECV"
    status: str
    length: int = 0


@dataclass
class _Wr:
    """A posted send-queue work request and its PSN range ``[first, first + npkts)``."""

    wr_id: int
    op: str
    data: bytes  # WRITE / SEND payload
    va: int
    rkey: int
    length: int
    first: int = 0
    npkts: int = 1
    dest: bytearray | None = None  # READ: where the response bytes go
    done: bool = False


@dataclass
class _Recv:
    wr_id: int
    buf: bytearray
    used: int = 0


@dataclass
class _InMsg:
    """The responder's message in progress (multi-packet WRITE or SEND)."""

    op: str  # "WRITE" or "SEND"
    rkey: int = 0
    va: int = 0
    left: int = 0
    recv: _Recv | None = None


@dataclass
class Counters:
    tx_packets: int = 0
    rx_packets: int = 0
    retransmits: int = 0
    timeouts: int = 0
    naks_sent: int = 0
    naks_received: int = 0
    bad_packets: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    errors: list[str] = field(default_factory=list)


class RcQp:
    """One RC queue pair (both halves). Addresses are needed for the ICRC."""

    def __init__(self, qpn: int, sq_psn: int, memory: Memory, local: str, *, pmtu: int = 4096,
                 timeout: float = 0.05, retry_cnt: int = 7, window: int = 64,
                 ack_every: int = 16) -> None:
        self.qpn, self.memory, self.local = qpn, memory, local
        self.pmtu, self.timeout, self.retry_cnt = pmtu, timeout, retry_cnt
        self.window, self.ack_every = window, ack_every
        self.peer: str | None = None
        self.dqpn = 0
        self.state = "INIT"
        self.c = Counters()
        self.completions: deque[Completion] = deque()
        # requester
        self.next_psn = sq_psn  # the PSN the next posted request starts at
        self.una = sq_psn  # oldest unacknowledged PSN
        self.send_psn = sq_psn  # next PSN to (re)transmit
        self.wrs: deque[_Wr] = deque()  # posted, not completed, in PSN order
        self.retries = 0
        self.deadline: float | None = None
        self.rnr_until: float | None = None
        self.reread_at = -1  # una at which a READ was last re-issued on a response gap
        # responder
        self.epsn = 0
        self.msn = 0
        self.rq: deque[_Recv] = deque()
        self.cur: _InMsg | None = None
        self.since_ack = 0
        self.ack_due = False
        self.nak_sent = False
        self.ctrl: deque[W.Packet] = deque()  # ACK/NAKs to send
        self.read_resp: deque[tuple[int, int, int, int]] = deque()  # (psn, va, rkey, len)
        self.resp_error = False

    # -- setup -------------------------------------------------------------------

    def connect(self, peer: str, dqpn: int, rq_psn: int) -> None:
        """To RTS with the peer's QPN and initial PSN (contract: connection objects)."""
        self.peer, self.dqpn, self.epsn = peer, dqpn, rq_psn
        self.state = "RTS"

    # -- verbs -------------------------------------------------------------------

    def _npkts(self, n: int) -> int:
        return max(1, -(-n // self.pmtu))

    def _post(self, wr: _Wr) -> None:
        if self.state != "RTS":
            self.completions.append(Completion(wr.wr_id, wr.op, "WR_FLUSH_ERR"))
            return
        wr.first = self.next_psn
        wr.npkts = self._npkts(wr.length)
        self.next_psn += wr.npkts
        self.wrs.append(wr)

    def post_write(self, wr_id: int, data: bytes, va: int, rkey: int) -> None:
        self._post(_Wr(wr_id, "WRITE", bytes(data), va, rkey, len(data)))

    def post_send(self, wr_id: int, data: bytes) -> None:
        self._post(_Wr(wr_id, "SEND", bytes(data), 0, 0, len(data)))

    def post_read(self, wr_id: int, dest: bytearray, va: int, rkey: int) -> None:
        """READ ``len(dest)`` bytes at ``va`` into ``dest``."""
        self._post(_Wr(wr_id, "READ", b"", va, rkey, len(dest), dest=dest))

    def post_recv(self, wr_id: int, buf: bytearray) -> None:
        self.rq.append(_Recv(wr_id, buf))

    # -- sans-IO interface --------------------------------------------------------

    def receive_datagram(self, data: bytes, now: float, sport: int = W.UDP_PORT) -> None:
        """One UDP payload from the peer (``sport``: its UDP source port, the flow's
        entropy, which the ICRC covers); bad ones are counted and dropped."""
        assert self.peer is not None
        try:
            p = W.decode(data, self.peer, self.local, sport)
        except W.WireError as e:
            self.c.bad_packets += 1
            self.c.errors.append(str(e))
            return
        if p.dqpn != self.qpn or p.opcode == W.CNP:
            self.c.bad_packets += 1 if p.opcode != W.CNP else 0
            return
        self.c.rx_packets += 1
        if p.opcode in (W.ACKNOWLEDGE, W.READ_RESP_FIRST, W.READ_RESP_MIDDLE, W.READ_RESP_LAST,
                        W.READ_RESP_ONLY, W.ATOMIC_ACK):
            self._on_response(p, now)
        else:
            self._on_request(p)

    def datagrams_to_send(self, now: float) -> list[bytes]:
        out = [self._enc(p) for p in self._control()]
        out += [self._enc(p) for p in self._requests(now)]
        if self.una < self.send_psn and self.deadline is None and self.state == "RTS":
            self.deadline = now + self.timeout  # outstanding requests: the ACK timer runs
        self.c.tx_packets += len(out)
        return out

    def get_timer(self) -> float | None:
        ts = [t for t in (self.deadline, self.rnr_until) if t is not None]
        return min(ts) if ts else None

    def handle_timer(self, now: float) -> None:
        if self.rnr_until is not None and now >= self.rnr_until:
            self.rnr_until = None
        if self.deadline is not None and now >= self.deadline:
            self.deadline = None
            if self.una < self.send_psn and self.state == "RTS":
                self.c.timeouts += 1
                self.retries += 1
                if self.retries > self.retry_cnt:
                    self._fail("RETRY_EXC_ERR")
                    return
                self._go_back(self.una)

    def _enc(self, p: W.Packet) -> bytes:
        assert self.peer is not None
        return W.encode(p, self.local, self.peer)

    # -- requester -------------------------------------------------------------------

    def _wr_at(self, psn: int) -> _Wr | None:
        for wr in self.wrs:
            if wr.first <= psn < wr.first + wr.npkts:
                return wr
        return None

    def _go_back(self, psn: int) -> None:
        if psn < self.send_psn:
            self.c.retransmits += self.send_psn - psn
        self.send_psn = max(psn, self.una)

    def _requests(self, now: float) -> list[W.Packet]:
        out: list[W.Packet] = []
        if self.state != "RTS" or self.rnr_until is not None:
            return out
        while self.send_psn < self.next_psn and self.send_psn < self.una + self.window:
            wr = self._wr_at(self.send_psn)
            if wr is None:  # completed already (a late go-back)
                self.send_psn += 1
                continue
            i = self.send_psn - wr.first
            if wr.op == "READ":
                off = i * self.pmtu
                out.append(W.Packet(W.READ_REQUEST, self.dqpn, self.send_psn, ackreq=True,
                                    va=wr.va + off, rkey=wr.rkey, dma_len=wr.length - off))
                self.send_psn = wr.first + wr.npkts
            else:
                out.append(self._data_packet(wr, i))
                self.send_psn += 1
            if self.deadline is None:
                self.deadline = now + self.timeout
        return out

    def _data_packet(self, wr: _Wr, i: int) -> W.Packet:
        """Packet ``i`` of a WRITE or SEND; AckReq on the last one, on every
        ``ack_every``-th and where the window fills."""
        last = i == wr.npkts - 1
        psn = wr.first + i
        chunk = wr.data[i * self.pmtu:(i + 1) * self.pmtu]
        ackreq = last or (psn - self.una + 1) >= self.window or i % self.ack_every == 0
        if wr.op == "WRITE":
            if wr.npkts == 1:
                op = W.WRITE_ONLY
            else:
                op = W.WRITE_FIRST if i == 0 else W.WRITE_LAST if last else W.WRITE_MIDDLE
        else:
            if wr.npkts == 1:
                op = W.SEND_ONLY
            else:
                op = W.SEND_FIRST if i == 0 else W.SEND_LAST if last else W.SEND_MIDDLE
        p = W.Packet(op, self.dqpn, psn, ackreq=ackreq, payload=chunk)
        if op in W.RETH_OPS:
            p.va, p.rkey, p.dma_len = wr.va, wr.rkey, wr.length
        return p

    def _ack_through(self, psn: int, implicit_read: bool = False) -> None:
        """Everything up to and including ``psn`` has arrived at the responder; a READ
        completes only by its data, so an ACK stops at an unfinished READ."""
        progressed = False
        while self.wrs:
            wr = self.wrs[0]
            end = wr.first + wr.npkts - 1
            if wr.op == "READ" and not wr.done:
                break
            if end > psn:
                if wr.first <= psn:
                    self.una = max(self.una, psn + 1)
                    progressed = True
                break
            self.wrs.popleft()
            self.una = max(self.una, end + 1)
            progressed = True
            self.completions.append(Completion(wr.wr_id, wr.op, "SUCCESS", wr.length))
        if progressed:
            self.retries = 0
            self.deadline = None
        self.send_psn = max(self.send_psn, self.una)

    def _on_response(self, p: W.Packet, now: float) -> None:
        psn = unwrap(p.psn, self.una)
        if p.opcode == W.ACKNOWLEDGE:
            kind = p.syndrome >> 5
            if kind == 0:  # ACK
                self._ack_through(psn)
                if self.wrs and self.wrs[0].op == "READ" and psn >= self.wrs[0].first:
                    self._reissue_read(self.wrs[0])  # the ACK passed an unanswered READ
            elif kind == 1:  # RNR NAK: wait, then resend from psn
                self.c.naks_received += 1
                self._ack_through(psn - 1)
                self.rnr_until = now + 0.005
                self._go_back(psn)
            elif kind == 3:
                self.c.naks_received += 1
                self._ack_through(psn - 1)
                if p.syndrome == W.NAK_PSN_SEQ_ERR:
                    self._go_back(psn)
                else:
                    names = {W.NAK_INVALID_REQ: "REM_INV_REQ_ERR",
                             W.NAK_REMOTE_ACCESS: "REM_ACCESS_ERR",
                             W.NAK_REMOTE_OP: "REM_OP_ERR"}
                    self._fail(names.get(p.syndrome, "REM_OP_ERR"))
            return
        # READ response: data for the oldest READ, strictly in order
        wr = self._wr_at(psn)
        if wr is None or wr.op != "READ" or psn < self.una:
            self.c.duplicates += 1
            return
        if psn > self.una:
            # a READ response implies every earlier request executed (responses in order)
            if psn == wr.first:
                self._ack_through(psn - 1)
            if psn != self.una:
                self.c.out_of_order += 1
                self._reissue_read(wr)
                return
        i = psn - wr.first
        assert wr.dest is not None
        expect = min(self.pmtu, wr.length - i * self.pmtu)
        if len(p.payload) != expect and wr.length:
            self.c.bad_packets += 1
            return
        wr.dest[i * self.pmtu:i * self.pmtu + len(p.payload)] = p.payload
        self.una = psn + 1
        self.retries = 0
        self.deadline = None if self.una >= self.send_psn else now + self.timeout
        if psn == wr.first + wr.npkts - 1:
            wr.done = True
            self._ack_through(psn)

    def _reissue_read(self, wr: _Wr) -> None:
        """Responses were lost: ask again from the first missing one, once per gap."""
        if self.reread_at == self.una:
            return
        self.reread_at = self.una
        self._go_back(self.una)

    def _fail(self, status: str) -> None:
        """The QP goes to the error state: the failing request gets ``status``, the
        rest are flushed."""
        self.state = "ERROR"
        first = True
        while self.wrs:
            wr = self.wrs.popleft()
            self.completions.append(Completion(wr.wr_id, wr.op,
                                               status if first else "WR_FLUSH_ERR"))
            first = False
        self.deadline = None
        self.c.errors.append(status)

    # -- responder ------------------------------------------------------------------

    def _ack(self, psn: int, syndrome: int = W.ACK_CREDIT_INVALID) -> None:
        self.ctrl.append(W.Packet(W.ACKNOWLEDGE, self.dqpn, psn, syndrome=syndrome,
                                  msn=self.msn))
        if syndrome >> 5:
            self.c.naks_sent += 1

    def _on_request(self, p: W.Packet) -> None:
        if self.resp_error:
            return
        psn = unwrap(p.psn, self.epsn)
        if psn < self.epsn:
            self.c.duplicates += 1
            if p.opcode == W.READ_REQUEST:  # re-execute: READs are idempotent
                self._queue_read(psn, p)
            else:
                self._ack(self.epsn - 1)
            return
        if psn > self.epsn:
            self.c.out_of_order += 1
            if not self.nak_sent:
                self.nak_sent = True
                self._ack(self.epsn, W.NAK_PSN_SEQ_ERR)
            return
        err = self._execute(p)
        if err is not None:
            if err >> 5 != 1:  # an RNR NAK leaves the QP usable; the others end it
                self.resp_error = True
            self._ack(self.epsn, err)
            return
        self.nak_sent = False
        if p.opcode == W.READ_REQUEST:
            self.epsn += self._npkts(p.dma_len)
            return
        self.epsn += 1
        self.since_ack += 1
        if p.ackreq or self.since_ack >= self.ack_every:
            self.since_ack = 0
            self._ack(self.epsn - 1)

    def _execute(self, p: W.Packet) -> int | None:
        """Carry out one in-order request; an AETH NAK syndrome when it must be refused."""
        op = p.opcode
        first = op in (W.WRITE_FIRST, W.WRITE_ONLY, W.SEND_FIRST, W.SEND_ONLY)
        last = op in (W.WRITE_LAST, W.WRITE_ONLY, W.SEND_LAST, W.SEND_ONLY)
        if op == W.READ_REQUEST:
            try:
                if p.dma_len:
                    self.memory.check(p.rkey, p.va, p.dma_len)
            except AccessError:
                return W.NAK_REMOTE_ACCESS
            self.msn += 1
            self._queue_read(self.epsn, p)
            return None
        if op not in (W.WRITE_FIRST, W.WRITE_MIDDLE, W.WRITE_LAST, W.WRITE_ONLY,
                      W.SEND_FIRST, W.SEND_MIDDLE, W.SEND_LAST, W.SEND_ONLY):
            return W.NAK_INVALID_REQ  # atomics, immediates, UD: not in this reference
        if first != (self.cur is None):
            return W.NAK_INVALID_REQ  # a FIRST inside a message, or a MIDDLE without one
        if not last and len(p.payload) != self.pmtu:
            return W.NAK_INVALID_REQ
        if first:
            if op in (W.WRITE_FIRST, W.WRITE_ONLY):
                try:
                    if p.dma_len:
                        self.memory.check(p.rkey, p.va, p.dma_len)
                except AccessError:
                    return W.NAK_REMOTE_ACCESS
                self.cur = _InMsg("WRITE", p.rkey, p.va, p.dma_len)
            else:
                if not self.rq:
                    return 0x20 | 0x0E  # RNR NAK (timer code 14): no receive posted
                self.cur = _InMsg("SEND", recv=self.rq[0])
        m = self.cur
        assert m is not None
        if m.op == "WRITE":
            if len(p.payload) > m.left or (last and len(p.payload) != m.left):
                return W.NAK_INVALID_REQ
            if p.payload:
                self.memory.write(m.rkey, m.va, p.payload)
            m.va += len(p.payload)
            m.left -= len(p.payload)
        else:
            r = m.recv
            assert r is not None
            if r.used + len(p.payload) > len(r.buf):
                return W.NAK_INVALID_REQ
            r.buf[r.used:r.used + len(p.payload)] = p.payload
            r.used += len(p.payload)
            if last:
                self.rq.popleft()
                self.completions.append(Completion(r.wr_id, "RECV", "SUCCESS", r.used))
        if last:
            self.cur = None
            self.msn += 1
        return None

    def _queue_read(self, psn: int, p: W.Packet) -> None:
        self.read_resp.append((psn, p.va, p.rkey, p.dma_len))

    def _control(self) -> list[W.Packet]:
        """ACKs/NAKs, then READ responses (each in order, AETH on first/last/only)."""
        out: list[W.Packet] = []
        while self.ctrl:
            out.append(self.ctrl.popleft())
        while self.read_resp:
            psn, va, rkey, n = self.read_resp.popleft()
            k = self._npkts(n)
            try:
                data = self.memory.read(rkey, va, n)
            except AccessError:
                continue
            for i in range(k):
                if k == 1:
                    op = W.READ_RESP_ONLY
                else:
                    op = (W.READ_RESP_FIRST if i == 0 else W.READ_RESP_LAST if i == k - 1
                          else W.READ_RESP_MIDDLE)
                out.append(W.Packet(op, self.dqpn, psn + i, syndrome=W.ACK_CREDIT_INVALID,
                                    msn=self.msn,
                                    payload=data[i * self.pmtu:(i + 1) * self.pmtu]))
        return out

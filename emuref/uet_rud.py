# SPDX-License-Identifier: GPL-2.0-only
"""A sans-IO UET RUD engine for emu-ref: PDCs, SACK/NACK retransmission, SES WRITE/SEND/READ.

Written from ``specs/uet.md`` (Behaviour, R unless noted), simply:

* **Initiator PDC** per peer address: random Start_PSN, every request carries
  SYN + psn_offset until the first ACK supplies the DPDCID; a packet leaves
  the outstanding set when an ACK covers it cumulatively (CACK_PSN), names it
  (ACK_PSN) or sets its bit in the SACK bitmap. A retransmission (RETX|AR)
  follows a NACK with a "retransmit" code at once, or the RTO. A message
  completes when all its packets are ACKed *and* its SES response arrived;
  a missing response is asked for with CP ACK_REQ.
* **Target PDC** per (initiator address, its PDCID), created on SYN at
  Start_PSN = PSN - psn_offset. Window MP_RANGE = 128 PSNs (mpr 1); beyond
  it NACK PSN_OOR_WINDOW; duplicates are re-ACKed with the stored response.
  ACK_CC (NSCC) on AR, SYN, a response, or every 16 KiB (each packet counting
  at least 1 KiB), with CACK, ACK_PSN and a 64-bit SACK bitmap. A trimmed
  packet draws NACK TRIMMED.
* **SES**: each packet is placed on its own at buffer_offset +
  message_offset (WRITE: memory by mem_key; SEND: the next posted receive of
  the target endpoint). READ data comes back as RSP_DATA on ACK_CC packets
  answering the READ request, re-read from memory whenever asked again (a READ
  is idempotent): the target keeps no send state for it.

Choices where the spec page is silent are listed in ``emuref/README.md``.
PSNs are unbounded integers internally, 32-bit on the wire.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from emuref import uet_wire as W
from emuref.memory import AccessError, Memory

M32 = 0xFFFFFFFF
MPR_UNIT = 128
ACK_BYTES = 16 * 1024
ACK_MIN_COUNT = 1024
READ_PIECE_PKTS = 8  # a READ is asked for in pieces, so a lost response costs one piece
#: NACK codes whose reaction is "retransmit" (spec: NACK codes)
RETX_CODES = frozenset({*range(0x01, 0x0C), 0x0D, 0x12, 0x14, 0x1A})
TRIM_CODES = frozenset({0x01, 0x02, 0x03})
NACK_TRIMMED, NACK_NO_SES_MSG_AVAIL, NACK_PSN_OOR_WINDOW = 0x01, 0x09, 0x0B
NACK_INV_DPDCID, NACK_RCVD_SES_PROCG = 0x0E, 0x18


def unwrap(wire: int, near: int) -> int:
    """The unbounded PSN with 32-bit value ``wire`` closest to ``near``."""
    d = (wire - near) & M32
    if d >= 1 << 31:
        d -= 1 << 32
    return near + d


def s16(x: int) -> int:
    return max(-32768, min(32767, x))


@dataclass
class Completion:
    wr_id: int
    op: str  # WRITE, SEND, READ, RECV
    status: str  # SUCCESS or an error name
    length: int = 0


@dataclass
class _Msg:
    """One initiator message (a READ piece is a message of its own)."""

    wr_id: int
    op: int
    data: bytes
    dest_pid: int
    src_pid: int
    va: int
    rkey: int
    length: int  # request_length
    message_id: int = 0
    npkts: int = 1
    sent: int = 0  # packets handed out (PSNs assigned)
    unacked: set[int] = field(default_factory=set)
    eom_psn: int = -1
    rc: int | None = None
    waiting_since: float | None = None
    ask_retries: int = 0
    read: _ReadOp | None = None
    read_off: int = 0
    got: set[int] = field(default_factory=set)  # READ piece: message_offsets received
    got_bytes: int = 0


@dataclass
class _ReadOp:
    wr_id: int
    dest: bytearray
    pieces: int
    status: str = "SUCCESS"


@dataclass
class _Pkt:
    msg: _Msg
    index: int
    sent_at: float
    retries: int = 0


@dataclass
class _IniPdc:
    peer: str
    pdcid: int
    start: int
    next_psn: int
    dpdcid: int | None = None
    window: int = MPR_UNIT
    queue: deque[_Msg] = field(default_factory=deque)
    msgs: dict[int, _Msg] = field(default_factory=dict)
    out: dict[int, _Pkt] = field(default_factory=dict)  # PSN → packet
    resend: deque[int] = field(default_factory=deque)
    resend_at: dict[int, float] = field(default_factory=dict)
    ctl: deque[tuple[int, int]] = field(default_factory=deque)  # (ctl_type, PSN)
    next_mid: int = 1
    error: str | None = None


@dataclass
class _TgtPdc:
    peer: str
    pdcid: int
    ini: int
    start: int
    first_missing: int
    above: set[int] = field(default_factory=set)
    rx_bytes: int = 0
    since_ack: int = 0
    psn_key: dict[int, int] = field(default_factory=dict)  # PSN → message key
    responses: dict[int, tuple[int, int]] = field(default_factory=dict)  # key → (rc, length)
    reads: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # key → (mk, va, n)
    inmsg: dict[int, list] = field(default_factory=dict)  # key → [got bytes, recv | None, offs]

    def has(self, psn: int) -> bool:
        return psn < self.first_missing or psn in self.above

    def mark(self, psn: int) -> None:
        self.above.add(psn)
        while self.first_missing in self.above:
            self.above.discard(self.first_missing)
            self.first_missing += 1


@dataclass
class _Recv:
    wr_id: int
    buf: bytearray


class UetEngine:
    """All PDCs of one host. Outgoing datagrams are ``(bytes, peer address)``."""

    def __init__(self, local: str, memory: Memory, rng: random.Random, *, mtu: int = 4096,
                 rto: float = 0.05, max_retries: int = 5, job: int = 0,
                 nack_delay: float = 0.002) -> None:
        self.local, self.memory, self.rng = local, memory, rng
        self.mtu, self.rto, self.max_retries, self.job = mtu, rto, max_retries, job
        self.nack_delay = nack_delay
        self.ini: dict[str, _IniPdc] = {}
        self.tgt: dict[tuple[str, int], _TgtPdc] = {}
        self.tgt_by_id: dict[int, _TgtPdc] = {}
        self.used_ids: set[int] = set()
        self.rq: dict[int, deque[_Recv]] = {}  # PIDonFEP → posted receives
        self.completions: deque[Completion] = deque()
        self.outq: list[tuple[bytes, str]] = []
        self.stats: dict[str, int] = {}

    def count(self, name: str, n: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + n

    def _alloc_id(self) -> int:
        while True:
            i = self.rng.randrange(1, 1 << 16)
            if i not in self.used_ids:
                self.used_ids.add(i)
                return i

    # -- verbs ---------------------------------------------------------------------

    def add_endpoint(self, pid: int) -> None:
        self.rq.setdefault(pid, deque())

    def post_recv(self, pid: int, wr_id: int, buf: bytearray) -> None:
        self.rq.setdefault(pid, deque()).append(_Recv(wr_id, buf))

    def _pdc(self, peer: str) -> _IniPdc:
        p = self.ini.get(peer)
        if p is None or p.error is not None:
            start = self.rng.getrandbits(32)
            p = self.ini[peer] = _IniPdc(peer, self._alloc_id(), start, start)
        return p

    def _enqueue(self, peer: str, m: _Msg) -> None:
        p = self._pdc(peer)
        m.message_id = p.next_mid
        p.next_mid = p.next_mid % 0xFFFF + 1
        m.npkts = 1 if m.op == W.OP_READ else max(1, -(-len(m.data) // self.mtu))
        p.msgs[m.message_id] = m
        p.queue.append(m)

    def post_write(self, wr_id: int, peer: str, dest_pid: int, data: bytes, va: int,
                   rkey: int, src_pid: int = 0) -> None:
        self._enqueue(peer, _Msg(wr_id, W.OP_WRITE, bytes(data), dest_pid, src_pid, va, rkey,
                                 len(data)))

    def post_send(self, wr_id: int, peer: str, dest_pid: int, data: bytes,
                  src_pid: int = 0) -> None:
        self._enqueue(peer, _Msg(wr_id, W.OP_SEND, bytes(data), dest_pid, src_pid, 0, 0,
                                 len(data)))

    def post_read(self, wr_id: int, peer: str, dest_pid: int, dest: bytearray, va: int,
                  rkey: int, src_pid: int = 0) -> None:
        """READ ``len(dest)`` bytes at ``va``: one READ request per piece."""
        piece = READ_PIECE_PKTS * self.mtu
        offs = list(range(0, len(dest), piece)) or [0]
        op = _ReadOp(wr_id, dest, len(offs))
        for off in offs:
            n = min(piece, len(dest) - off)
            self._enqueue(peer, _Msg(wr_id, W.OP_READ, b"", dest_pid, src_pid, va + off, rkey,
                                     n, read=op, read_off=off))

    # -- sans-IO interface -----------------------------------------------------------

    def receive_datagram(self, data: bytes, peer: str, now: float,
                         trimmed: bool = False) -> None:
        try:
            pds = W.decode_pds(data)
            rest = data[pds.size:]
            if pds.type == W.T_RUD_REQ:
                ses = W.decode_request(pds.next_hdr, rest)
                self._on_request(pds, ses, rest[ses.size:], peer, now, trimmed)
            elif pds.type in (W.T_ACK, W.T_ACK_CC):
                rsp = None
                if pds.next_hdr in (W.NH_RSP, W.NH_RSP_DATA):
                    rsp = W.decode_response(pds.next_hdr, rest)
                    rest = rest[rsp.size:]
                self._on_ack(pds, rsp, rest, peer, now)
            elif pds.type == W.T_NACK:
                self._on_nack(pds, peer, now)
            elif pds.type == W.T_CP:
                self._on_cp(pds, peer)
            else:
                raise W.WireError(f"PDS type {pds.type} not handled by emu-ref")
        except W.WireError as e:
            self.count("rx_dropped")
            self.stats.setdefault("last_error", 0)
            self.last_error = str(e)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, str]]:
        for p in list(self.ini.values()):
            self._pull(p, now)
        out, self.outq = self.outq, []
        self.count("tx_packets", len(out))
        return out

    def get_timer(self) -> float | None:
        ts: list[float] = []
        for p in self.ini.values():
            if p.error is not None:
                continue
            ts += [k.sent_at + self._rto(k.retries) for k in p.out.values()]
            ts += [m.waiting_since + self._rto(m.ask_retries) for m in p.msgs.values()
                   if m.waiting_since is not None]
            ts += list(p.resend_at.values())
        return min(ts) if ts else None

    def handle_timer(self, now: float) -> None:
        for p in list(self.ini.values()):
            if p.error is not None:
                continue
            for psn, due in list(p.resend_at.items()):
                if due <= now:
                    del p.resend_at[psn]
                    p.resend.append(psn)
            for psn, k in list(p.out.items()):
                if k.sent_at + self._rto(k.retries) <= now:
                    if k.retries >= self.max_retries:
                        self._fail(p, "RETRY_EXC_ERR")
                        break
                    k.retries += 1
                    self.count("rto_retransmits")
                    p.resend.append(psn)
            if p.error is not None:
                continue
            for m in p.msgs.values():
                w = m.waiting_since
                if w is not None and w + self._rto(m.ask_retries) <= now:
                    if m.ask_retries >= self.max_retries:
                        self._fail(p, "RETRY_EXC_ERR")
                        break
                    m.ask_retries += 1
                    m.waiting_since = now
                    p.ctl.append((W.CP_ACK_REQ, m.eom_psn))

    def _rto(self, retries: int) -> float:
        """RTO with exponential backoff (README: the spec's 1-5 ms is a hardware bound)."""
        return min(self.rto * (2 ** retries), 1.0)

    # -- initiator ---------------------------------------------------------------------

    def _oldest(self, p: _IniPdc) -> int:
        return min(p.out) if p.out else p.next_psn

    def _packet(self, p: _IniPdc, psn: int, k: _Pkt, retx: bool, ar: bool) -> bytes:
        m = k.msg
        flags = (W.F_RETX if retx else 0) | (W.F_AR if ar else 0)
        clear = s16(self._oldest(p) - psn)
        if p.dpdcid is None:
            pds = W.encode_request(W.NH_STANDARD, flags, clear, psn, p.pdcid, 0,
                                   syn_offset=psn - p.start)
        else:
            pds = W.encode_request(W.NH_STANDARD, flags, clear, psn, p.pdcid, p.dpdcid)
        off = k.index * self.mtu
        chunk = m.data[off:off + self.mtu]
        ses = W.SesRequest(m.op, k.index == 0, k.index == m.npkts - 1, m.message_id, self.job,
                           m.dest_pid, 0, m.va, m.src_pid, m.rkey,
                           payload_length=None if k.index == 0 else len(chunk),
                           message_offset=off, request_length=m.length)
        return pds + W.encode_standard(ses) + chunk

    def _ctl(self, p: _IniPdc, ctl: int, psn: int) -> bytes:
        if p.dpdcid is None:
            return W.encode_cp(ctl, W.F_AR, psn, p.pdcid, 0, syn_offset=max(0, psn - p.start))
        return W.encode_cp(ctl, W.F_AR, psn, p.pdcid, p.dpdcid)

    def _pull(self, p: _IniPdc, now: float) -> None:
        if p.error is not None:
            return
        while p.ctl:
            ctl, psn = p.ctl.popleft()
            self.outq.append((self._ctl(p, ctl, psn), p.peer))
            self.count("tx_cp")
        while p.resend:
            psn = p.resend.popleft()
            k = p.out.get(psn)
            if k is None:
                continue
            k.sent_at = now
            self.outq.append((self._packet(p, psn, k, True, True), p.peer))
            self.count("tx_retransmits")
        # before the first ACK the psn_offset (12 bits) bounds how far we may run ahead
        limit = p.window if p.dpdcid is not None else min(p.window, 0xFFF)
        while p.queue:
            if p.next_psn - self._oldest(p) >= limit:
                break
            m = p.queue[0]
            psn = p.next_psn
            p.next_psn += 1
            k = _Pkt(m, m.sent, now)
            p.out[psn] = k
            m.unacked.add(psn)
            m.sent += 1
            eom = m.sent == m.npkts
            if eom:
                m.eom_psn = psn
                p.queue.popleft()
            full = p.next_psn - self._oldest(p) >= limit
            self.outq.append((self._packet(p, psn, k, False, eom or full or not p.queue),
                              p.peer))
            self.count("tx_data_packets")

    def _release(self, p: _IniPdc, psn: int, now: float) -> None:
        k = p.out.pop(psn, None)
        p.resend_at.pop(psn, None)
        if k is None:
            return
        k.msg.unacked.discard(psn)
        self._check(p, k.msg, now)

    def _check(self, p: _IniPdc, m: _Msg, now: float) -> None:
        if m.sent < m.npkts or m.unacked or m.message_id not in p.msgs:
            return
        data_in = m.op != W.OP_READ or m.rc not in (None, W.RC_OK) or m.got_bytes >= m.length
        if m.rc is None or not data_in:
            if m.waiting_since is None:
                m.waiting_since = now  # ACKed, response (or READ data) missing: ask at RTO
            return
        del p.msgs[m.message_id]
        status = "SUCCESS" if m.rc == W.RC_OK else f"SES_RC_{m.rc:#04x}"
        if m.read is not None:
            op = m.read
            op.pieces -= 1
            if status != "SUCCESS":
                op.status = status
            if op.pieces == 0:
                self.completions.append(Completion(op.wr_id, "READ", op.status, len(op.dest)))
            return
        name = "WRITE" if m.op == W.OP_WRITE else "SEND"
        self.completions.append(Completion(m.wr_id, name, status, m.length))

    def _on_ack(self, a: W.Pds, rsp: W.SesResponse | None, data: bytes, peer: str,
                now: float) -> None:
        p = self.ini.get(peer)
        if p is None or p.error is not None or a.dpdcid != p.pdcid:
            self.count("rx_ack_unknown_pdc")
            return
        if p.dpdcid is None:
            p.dpdcid = a.spdcid  # the first ACK supplies DPDCID (spec: PDC)
        if a.mpr:
            p.window = min(p.window, a.mpr * MPR_UNIT)
        cack = unwrap(a.psn, self._oldest(p))
        for psn in [x for x in p.out if x <= cack]:
            self._release(p, psn, now)
        if not a.flags & W.F_P:
            self._release(p, cack + a.offset, now)
        if a.type == W.T_ACK_CC and a.sack_bitmap:
            base = cack + a.sack_offset
            for i in range(64):
                if a.sack_bitmap >> i & 1:
                    self._release(p, base + i, now)
        self.count("rx_acks")
        if rsp is not None:
            m = p.msgs.get(rsp.message_id)
            if m is None or m.sent < m.npkts:
                self.count("rx_rsp_unmatched")
                return
            if rsp.data and rsp.return_code == W.RC_OK and m.read is not None:
                off, n = rsp.message_offset, len(data)
                if n != rsp.payload_length or off + n > m.length:
                    self.count("rx_rsp_data_bad")
                    return
                if off not in m.got:
                    m.got.add(off)
                    m.got_bytes += n
                    d = m.read_off + off
                    m.read.dest[d:d + n] = data
            m.rc = rsp.return_code
            if m.waiting_since is not None:
                m.waiting_since = now
            self._check(p, m, now)

    def _on_nack(self, n: W.Pds, peer: str, now: float) -> None:
        self.count(f"rx_nack_{n.code:#04x}")
        p = self.ini.get(peer)
        if p is None or p.error is not None or n.dpdcid != p.pdcid:
            return
        psn = unwrap(n.psn, self._oldest(p))
        if n.code in RETX_CODES:
            if psn in p.out:
                if n.code in TRIM_CODES:
                    p.resend.append(psn)
                else:
                    p.resend_at[psn] = now + self.nack_delay
        elif n.code != NACK_RCVD_SES_PROCG:
            # close codes, and NEW_START_PSN which this reference does not implement
            self._fail(p, f"NACK_{n.code:#04x}")

    def _fail(self, p: _IniPdc, status: str) -> None:
        p.error = status
        seen: set[int] = set()
        for m in list(p.msgs.values()):
            if m.read is not None:
                if id(m.read) in seen:
                    continue
                seen.add(id(m.read))
                self.completions.append(Completion(m.read.wr_id, "READ", status))
            else:
                self.completions.append(Completion(m.wr_id, "WRITE" if m.op == W.OP_WRITE
                                                   else "SEND", status))
        p.msgs.clear()
        p.queue.clear()
        p.out.clear()

    def close(self, peer: str) -> None:
        """Send CP CLOSE (consumes a PSN, AR) once everything is ACKed (spec: Close)."""
        p = self.ini.get(peer)
        if p is None or p.error is not None or p.out or p.msgs or p.next_psn == p.start:
            return
        psn = p.next_psn
        p.next_psn += 1
        p.ctl.append((W.CP_CLOSE, psn))

    # -- target ------------------------------------------------------------------------

    def _on_request(self, r: W.Pds, ses: W.SesRequest, payload: bytes, peer: str, now: float,
                    trimmed: bool) -> None:
        if r.syn:
            start = (r.psn - r.syn_offset) & M32
            t = self.tgt.get((peer, r.spdcid))
            if t is None or t.start != start:
                if t is not None:
                    self.tgt_by_id.pop(t.pdcid, None)
                t = _TgtPdc(peer, self._alloc_id(), r.spdcid, start, start)
                self.tgt[(peer, r.spdcid)] = t
                self.tgt_by_id[t.pdcid] = t
                self.count("pdc_target_created")
        else:
            t = self.tgt_by_id.get(r.dpdcid)
            if t is None or t.peer != peer or t.ini != r.spdcid:
                self._nack(peer, NACK_INV_DPDCID, r.psn, 0, r.spdcid)
                return
        psn = unwrap(r.psn, t.first_missing)
        if t.has(psn):
            self.count("rx_duplicates")
            self._ack(t, psn, t.psn_key.get(psn), r.flags & W.F_RETX)
            return
        if psn - t.first_missing >= MPR_UNIT:
            self._nack(peer, NACK_PSN_OOR_WINDOW, r.psn, t.pdcid, t.ini, t.first_missing)
            return
        key = ses.message_id if ses.message_id is not None else (1 << 40) + psn
        if trimmed or self._looks_trimmed(ses, payload):
            self.count("rx_trimmed")
            self._nack(peer, NACK_TRIMMED, r.psn, t.pdcid, t.ini)
            return
        rsp = self._ses(t, key, ses, payload)
        if rsp == "nack":
            self._nack(peer, NACK_NO_SES_MSG_AVAIL, r.psn, t.pdcid, t.ini)
            return
        t.mark(psn)
        t.psn_key[psn] = key
        t.rx_bytes += len(payload)
        t.since_ack += max(len(payload), ACK_MIN_COUNT)
        self.count("rx_data_packets")
        if r.flags & (W.F_AR | W.F_SYN) or rsp is not None or t.since_ack >= ACK_BYTES:
            self._ack(t, psn, key if rsp is not None else None, r.flags & W.F_RETX)

    @staticmethod
    def _looks_trimmed(ses: W.SesRequest, payload: bytes) -> bool:
        """Bytes missing that the header says were sent (spec: Trimming)."""
        if ses.opcode == W.OP_READ:
            return False
        if ses.payload_length is not None:
            return len(payload) < ses.payload_length
        if ses.eom:  # a single-packet message carries all of request_length
            return len(payload) < ses.request_length
        return not payload

    def _ses(self, t: _TgtPdc, key: int, s: W.SesRequest, payload: bytes) -> str | None:
        """Place one request's bytes; returns "done" when its message is answered,
        "nack" when a SEND finds no receive, None while the message is incomplete."""
        if key in t.responses:
            return "done"
        if s.opcode == W.OP_READ:
            try:
                if s.request_length:
                    self.memory.check(s.mem_key, s.buffer_offset, s.request_length)
                t.responses[key] = (W.RC_OK, s.request_length)
                t.reads[key] = (s.mem_key, s.buffer_offset, s.request_length)
            except AccessError:
                t.responses[key] = (W.RC_BAD_KEY, 0)
            return "done"
        off = s.message_offset if s.payload_length is not None else 0
        if off + len(payload) > s.request_length:
            t.responses[key] = (W.RC_BAD_KEY, 0)
            return "done"
        st = t.inmsg.get(key)
        if s.opcode == W.OP_WRITE:
            try:
                if s.request_length:
                    self.memory.check(s.mem_key, s.buffer_offset, s.request_length)
            except AccessError:
                t.responses[key] = (W.RC_BAD_KEY, 0)
                t.inmsg.pop(key, None)
                return "done"
            if st is None:
                st = t.inmsg[key] = [0, None, set()]
            if off not in st[2]:
                st[2].add(off)
                st[0] += len(payload)
                if payload:
                    self.memory.write(s.mem_key, s.buffer_offset + off, payload)
        elif s.opcode == W.OP_SEND:
            if st is None:
                q = self.rq.get(s.pid_on_fep)
                if not q:
                    return "nack"
                st = t.inmsg[key] = [0, q.popleft(), set()]
            recv: _Recv = st[1]
            if off + len(payload) > len(recv.buf):
                t.responses[key] = (W.RC_BAD_KEY, 0)
                self.completions.append(Completion(recv.wr_id, "RECV", "LOC_LEN_ERR"))
                return "done"
            if off not in st[2]:
                st[2].add(off)
                st[0] += len(payload)
                recv.buf[off:off + len(payload)] = payload
        else:
            t.responses[key] = (0x06, 0)  # UNSUPPORTED_OP in Wireshark's table
            return "done"
        if st[0] >= s.request_length:
            del t.inmsg[key]
            t.responses[key] = (W.RC_OK, s.request_length)
            if s.opcode == W.OP_SEND:
                self.completions.append(Completion(st[1].wr_id, "RECV", "SUCCESS",
                                                   s.request_length))
            return "done"
        return None

    def _ack(self, t: _TgtPdc, psn: int, key: int | None, retx: int) -> None:
        """ACK_CC for ``psn`` (SACK base CACK + 1, or later so the bitmap holds ``psn``),
        carrying the SES response of message ``key`` if it has one."""
        cack = t.first_missing - 1
        base = cack + 1 if psn - cack <= 64 else psn - 63
        bm = 0
        for i in range(64):
            if t.has(base + i):
                bm |= 1 << i
        cc_state = ((t.rx_bytes & 0xFFFFFF) << 16) | min(len(t.above), 0xFFFF)
        flags = W.F_RETX if retx else 0

        def ack(nh: int) -> bytes:
            return W.encode_ack_cc(nh, flags, s16(psn - cack), cack, t.pdcid, t.ini, 1,
                                   s16(base - cack), bm, cc_state)

        rsp = t.responses.get(key) if key is not None else None
        mid = key & 0xFFFF if key is not None else 0
        if rsp is None:
            self.outq.append((ack(W.NH_NONE), t.peer))
        elif key in t.reads and rsp[0] == W.RC_OK and rsp[1]:
            mk, va, n = t.reads[key]
            try:
                data = self.memory.read(mk, va, n)  # re-read on every answer
            except AccessError:
                data = b""
            for off in range(0, n, self.mtu):
                k = min(self.mtu, n - off)
                r = W.SesResponse(W.RSP_OP_WITH_DATA, W.RC_OK, mid, self.job, n, True, mid, k,
                                  off)
                self.outq.append((ack(W.NH_RSP_DATA) + W.encode_response(r)
                                  + data[off:off + k], t.peer))
        else:
            r = W.SesResponse(W.RSP_OP_RESPONSE, rsp[0], mid, self.job, rsp[1])
            self.outq.append((ack(W.NH_RSP) + W.encode_response(r), t.peer))
        t.since_ack = 0
        self.count("tx_acks")

    def _nack(self, peer: str, code: int, psn: int, spdcid: int, dpdcid: int,
              payload: int = 0) -> None:
        self.outq.append((W.encode_nack(code, psn, spdcid, dpdcid, payload), peer))
        self.count(f"tx_nack_{code:#04x}")

    def _on_cp(self, c: W.Pds, peer: str) -> None:
        if c.syn:
            t = self.tgt.get((peer, c.spdcid))
        else:
            t = self.tgt_by_id.get(c.dpdcid)
            if t is not None and (t.peer != peer or t.ini != c.spdcid):
                t = None
        if t is None:
            if c.code == W.CP_CLOSE:  # a CLOSE whose ACK was lost: we forgot it already
                self.outq.append((W.encode_ack_cc(W.NH_NONE, 0, 0, c.psn, 0, c.spdcid, 1, 0,
                                                  0), peer))
                return
            self._nack(peer, NACK_INV_DPDCID, c.psn, 0, c.spdcid)
            return
        psn = unwrap(c.psn, t.first_missing)
        if c.code == W.CP_ACK_REQ:
            got = t.has(psn)
            self._ack(t, psn if got else t.first_missing - 1, t.psn_key.get(psn) if got else None,
                      c.flags & W.F_RETX)
        elif c.code == W.CP_CLOSE and psn == t.first_missing:
            t.mark(psn)
            self._ack(t, psn, None, c.flags & W.F_RETX)
            del self.tgt[(peer, t.ini)]
            self.tgt_by_id.pop(t.pdcid, None)
            self.count("rx_close")

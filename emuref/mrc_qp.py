# SPDX-License-Identifier: GPL-2.0-only
"""A sans-IO MRC queue pair for emu-ref (:mod:`emuref.mrc_nic` holds them behind one port).

Written from ``specs/mrc.md`` (Behaviour) and the interop contract; simple and
clearly correct rather than fast. Each :class:`MrcQp` has both halves:

* **Requester.** A WRITE (or WRITE with immediate) is cut into ``pmtu``-byte
  packets, each with METH (its message's MSN) and its own RETH (the VA of *this*
  packet's bytes, the message's length) so the responder can place it whatever
  order it arrives in. Packets are sprayed over the QP's EVs (UDP source ports)
  round robin. New PSNs go only while they stay below the peer's cumulative ack +
  ``mpr`` (and below a fixed packet cap, halved on trims or CE echoes: the only
  congestion control here). A SACK releases its cumulative PSN and its bitmap; a
  NACK TRIMMED resends that PSN at once; a packet ``DUPTHRESH`` PSNs below the
  highest SACKed one is resent once, and every packet still unSACKed when the
  retransmit timer (restarted by progress) fires is resent — holes only, never
  go-back-N. Every resend has BTH.RTX set and takes the next EV. A WRITE
  completes from the transport ACK (AETH MSN), never from the SACKs; a transport
  NAK completes it in error and the QP stops. All SACKed but no ACK for a timeout:
  the message's last packet is resent with AckReq, to be ACKed again.
* **Responder.** PSNs in ``[cack + 1, cack + mpr]`` are new (placed by their RETH
  after the R_Key/bounds check), earlier or already-seen ones are duplicates
  (SACKed again, not placed), later ones are dropped (spec). Every packet gets one
  SACK echoing its EV. Messages complete in MSN order; one with an immediate
  consumes a pre-posted receive. A completed message is transport-ACKed (AETH,
  said again if the requester goes quiet); a refused access is transport-NAKed
  (remote access error) though SACKed, and the responder stops, as RC's does.

Sans-IO: the caller feeds decoded packets (datagrams go to
:class:`emuref.mrc_nic.MrcNic`) and ``now``, and takes packets to send, completions
and the next timer. Nothing here raises on input from the wire; it counts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from emuref import mrc_wire as W
from emuref.memory import AccessError, Memory

M24, M16 = 0xFFFFFF, 0xFFFF
#: SETH.cc_flags bit echoing a CE mark on the SACKed packet (spec: "per-EV ECN echo
#: carried by cc_flags"; the bit is emu's choice) and the cc_type sent (1 = NSCC, emu's)
CC_FLAG_CE = 0x1
CC_TYPE = 1
#: what SETH's M field carries (specs/mrc.md: the reconstructions disagree): "skip" — the
#: EV skip hint, CE echoed in cc_flags (emu's default); "ecn" — the ECN echo itself
#: (M = 1: the SACKed packet arrived CE), no skip hints, no CE bit in cc_flags
M_FIELDS = ("skip", "ecn")
M_ECN_CE = 1
#: a packet this many PSNs below the highest one SACKed is presumed lost and resent once
#: without waiting for the timeout (large: the reordering case holds packets for up to
#: 2 ms, and a spurious resend is only a duplicate)
DUPTHRESH = 32


def unwrap(wire: int, near: int) -> int:
    """The unbounded PSN with 24-bit value ``wire`` closest to ``near``."""
    d = (wire - near) & M24
    if d >= 1 << 23:
        d -= 1 << 24
    return near + d


def _s16(x: int) -> int:
    return max(-0x8000, min(0x7FFF, x))


def _not_after(a: int, b: int) -> bool:
    """16-bit serial order: MSN ``a`` is ``b`` or before it."""
    return ((b - a) & M16) < 0x8000


@dataclass
class Completion:
    """A finished work request: ``op`` "WRITE" (requester) or "RECV_RDMA_WITH_IMM"
    (responder, carrying ``imm``); ``status`` "SUCCESS" or a verbs error name."""

    wr_id: int
    op: str
    status: str
    length: int = 0
    imm: int | None = None
    qpn: int = 0


@dataclass
class Out:
    """A packet to send: the caller encodes it from ``sport`` (its EV) to ``addr:port``."""

    packet: W.Packet
    addr: str
    port: int
    sport: int


@dataclass
class _TxMsg:
    wr_id: int
    data: bytes | memoryview
    va: int
    rkey: int
    imm: int | None
    msn: int
    rqmsn: int
    next_off: int = 0
    last_psn: int | None = None  # the PSN of its last packet, once sent

    @property
    def sent(self) -> bool:
        return self.next_off >= len(self.data) and self.last_psn is not None


@dataclass
class _TxPkt:
    psn: int  # unbounded
    msg: _TxMsg
    off: int
    length: int
    ev: int
    sent_at: float
    resent: bool = False


@dataclass
class _RxMsg:
    total: int
    got: int = 0
    imm: int | None = None
    has_imm: bool = False
    failed: bool = False


@dataclass
class QpStats:
    """Both halves' counters (``rx_drop_*`` and friends: dropped, never an exception)."""

    c: dict[str, int] = field(default_factory=lambda: dict.fromkeys((
        "tx_packets", "tx_bytes", "tx_retransmits", "retx_sack", "retx_trim", "retx_rto",
        "retx_oor",
        "ack_asks", "rx_sacks", "rx_sack_probe", "rx_nacks", "rx_nack_other", "rx_nack_stale",
        "rx_acks", "rx_naks", "rx_rnr", "rto", "window_full", "cwnd_cuts", "rx_ce_echo",
        "rx_echo_unknown_ev",
        "rx_packets", "rx_bytes", "rx_duplicate", "rx_out_of_window", "rx_trimmed",
        "rx_trimmed_dup", "rx_after_error",
        "rx_ooo", "rx_stray_msn", "tx_sacks", "tx_nacks", "tx_acks", "tx_naks",
        "ack_repeats", "rx_access_error", "msgs_done", "imm_waiting_recv", "rx_probes"), 0))


class MrcQp:
    """One MRC QP (``qpn``, first send PSN ``psn``); both halves share the EV list ``evs``
    (its UDP source ports). ``mpr``: the receive window this side offers (PSNs, a
    multiple of 128). ``rto``: the first retransmit timeout (s), doubling per timeout
    without progress up to ``max_rto``; ``retries`` such timeouts fail the QP."""

    def __init__(self, qpn: int, psn: int, memory: Memory, completions: deque[Completion], *,
                 evs: list[int], pmtu: int = 4096, mpr: int = 1024, rto: float = 0.2,
                 max_rto: float = 2.0, retries: int = 10, max_outstanding: int = 512,
                 ack_repeats: int = 2, m_field: str = "skip") -> None:
        if m_field not in M_FIELDS:
            raise ValueError(f"m_field {m_field!r} is not one of {M_FIELDS}")
        if mpr <= 0 or mpr % W.MPR_UNIT or mpr >= 1 << 23:
            raise ValueError(f"mpr {mpr} is not a positive multiple of {W.MPR_UNIT}")
        if not evs:
            raise ValueError("an MRC QP needs at least one EV")
        self.qpn, self.memory, self.completions = qpn, memory, completions
        self.evs = list(evs)
        self.pmtu, self.mpr = pmtu, mpr
        self.rto, self.max_rto, self.retries = rto, max_rto, retries
        self.max_outstanding = max_outstanding
        self.ack_repeats = ack_repeats
        self.m_field = m_field
        self.c = QpStats().c
        self.peer_addr = ""
        self.peer_port = W.UDP_PORT
        self.peer_qpn = 0
        self.peer_mpr = W.MPR_UNIT
        self.connected = False
        self.error: str | None = None
        # requester
        self.next_psn = psn
        self.snd_una = psn  # first PSN the peer has not cumulatively acked
        self.unacked: dict[int, _TxPkt] = {}  # sent, not SACKed; oldest send first
        self.retx: dict[int, None] = {}  # PSNs owed a resend now, in order
        self.later: dict[int, float] = {}  # PSNs owed a resend at a time (NACK OOR)
        self.queue: deque[_TxMsg] = deque()  # not all sent
        self.open: deque[_TxMsg] = deque()  # some sent, not transport-ACKed
        self.next_msn = 0
        self.next_rqmsn = 0
        self.timeouts = 0
        self.progress_at = 0.0
        self.ask = False
        self.cwnd = float(max_outstanding)
        self.recover = psn  # no second cut until this PSN is sent past
        self.high_sacked = psn - 1  # the highest PSN any SACK acknowledged
        self.scan = psn  # PSNs below this were looked at for presumed loss
        self._ev_i = 0
        self._skip: set[int] = set()
        # responder
        self.rcv_base = 0  # first missing PSN (unbounded): cack + 1
        self.rcv_ahead: set[int] = set()  # received PSNs above rcv_base
        self.rx_msgs: dict[int, _RxMsg] = {}
        self.rx_msn = 0  # the next message to complete
        self.last_done: int | None = None  # MSN of the last message completed (ACKed)
        self.failed: dict[int, int] = {}  # MSN → AETH syndrome of its NAK
        self.rx_error: int | None = None  # MSN of the message NAKed: the responder stops
        self.recvs: deque[int] = deque()
        self.rcvd_bytes = 0
        self.ooo = 0
        self.reply_addr = ""
        self._ack_due = False
        self.last_aeth: tuple[int, int] | None = None  # (syndrome, MSN) last said
        self._aeth_sent = False
        self.repeat_at: float | None = None
        self.repeats_left = 0
        self.out: list[Out] = []

    # -- setup and verbs -------------------------------------------------------------------

    def connect(self, addr: str, port: int, qpn: int, psn: int, mpr: int) -> None:
        """To RTS towards the peer's connection object (contract §4, MRC)."""
        self.peer_addr, self.peer_port, self.peer_qpn = addr, port, qpn
        self.peer_mpr = max(1, mpr)
        self.rcv_base = psn
        self.reply_addr = addr
        self.connected = True

    def post_write(self, wr_id: int, data: bytes | memoryview, va: int, rkey: int,
                   imm: int | None = None) -> None:
        """Queue a WRITE (``imm`` None) or WRITE with immediate. After an error it
        completes at once, flushed, as on a QP in the error state."""
        if self.error is not None:
            self.completions.append(Completion(wr_id, "WRITE", "WR_FLUSH_ERR", qpn=self.qpn))
            return
        msg = _TxMsg(wr_id, data, va, rkey, imm, self.next_msn, self.next_rqmsn)
        self.next_msn = (self.next_msn + 1) & M16
        if imm is not None:
            # RQMSN: the receive this message consumes (spec: completion "by MSN/RQMSN");
            # emu sends 0 and reads MSN only, so this is informational
            self.next_rqmsn = (self.next_rqmsn + 1) & M16
        self.queue.append(msg)

    def post_recv(self, wr_id: int) -> None:
        """A receive for a WRITE with immediate (no buffer: the data went where the RETH
        said). A message waiting for one completes now."""
        self.recvs.append(wr_id)
        self._complete_in_order()
        self._flush_ack()

    # -- requester: sending ------------------------------------------------------------------

    def _next_ev(self, avoid: int | None = None) -> int:
        """Round robin over the EVs, skipping each EV the SACKs or NACKs asked to skip once."""
        for _ in range(2 * len(self.evs)):
            ev = self.evs[self._ev_i % len(self.evs)]
            self._ev_i += 1
            if ev in self._skip:
                self._skip.discard(ev)
                continue
            if ev == avoid and len(self.evs) > 1:
                continue
            return ev
        return self.evs[self._ev_i % len(self.evs)]

    def _data_packet(self, pkt: _TxPkt, rtx: bool, ackreq: bool = False) -> W.Packet:
        msg = pkt.msg
        total = len(msg.data)
        first, last = pkt.off == 0, pkt.off + pkt.length >= total
        imm = msg.imm is not None
        if first and last:
            op = W.WRITE_ONLY_IMM if imm else W.WRITE_ONLY
        elif first:
            op = W.WRITE_FIRST
        elif last:
            op = W.WRITE_LAST_IMM if imm else W.WRITE_LAST
        else:
            op = W.WRITE_MIDDLE
        return W.Packet(op, self.peer_qpn, pkt.psn & M24, ackreq=last or ackreq, rtx=rtx,
                        rqmsn=msg.rqmsn, msn=msg.msn, va=msg.va + pkt.off, rkey=msg.rkey,
                        dma_len=total, imm=msg.imm if op in W.IMM_OPS else None,
                        payload=bytes(msg.data[pkt.off:pkt.off + pkt.length]))

    def _send(self, pkt: _TxPkt, now: float, rtx: bool) -> None:
        self.unacked.pop(pkt.psn, None)  # re-insert: the dict stays in send order
        pkt.sent_at = now
        pkt.resent = pkt.resent or rtx
        self.unacked[pkt.psn] = pkt
        self.out.append(Out(self._data_packet(pkt, rtx), self.peer_addr, self.peer_port,
                            pkt.ev))

    def pull(self, now: float) -> list[Out]:
        """Everything to send now: the responder's replies, owed resends, new packets."""
        if self.connected and self.error is None:
            for psn in list(self.retx):
                pkt = self.unacked.get(psn)
                if pkt is not None:
                    pkt.ev = self._next_ev(avoid=pkt.ev)
                    self.c["tx_retransmits"] += 1
                    self._send(pkt, now, rtx=True)
            self.retx.clear()
            if self.ask and self.open and self.open[0].sent:
                self._ask_for_ack(self.open[0], now)
            self.ask = False
            while self.queue:
                if self.next_psn >= self.snd_una - 1 + self.peer_mpr or \
                        len(self.unacked) >= min(self.cwnd, self.max_outstanding):
                    self.c["window_full"] += 1
                    break
                self._send_new(self.queue[0], now)
        out, self.out = self.out, []
        return out

    def _send_new(self, msg: _TxMsg, now: float) -> None:
        off = msg.next_off
        n = min(self.pmtu, len(msg.data) - off)
        msg.next_off = off + n
        if off == 0:
            self.open.append(msg)
        psn = self.next_psn
        self.next_psn += 1
        if msg.next_off >= len(msg.data):
            msg.last_psn = psn
            self.queue.popleft()
        if not self.unacked:
            self.progress_at = now  # the retransmit timer starts from the first packet out
        self.c["tx_packets"] += 1
        self.c["tx_bytes"] += n
        self._send(_TxPkt(psn, msg, off, n, self._next_ev(), now), now, rtx=False)

    def _ask_for_ack(self, msg: _TxMsg, now: float) -> None:
        """Every packet is SACKed but the transport ACK did not come (lost): resend the
        message's last packet (RTX, AckReq) so the responder says it again. It is a
        duplicate there, so nothing is placed twice."""
        assert msg.last_psn is not None
        total = len(msg.data)
        off = (total - 1) // self.pmtu * self.pmtu if total else 0
        pkt = _TxPkt(msg.last_psn, msg, off, total - off, self._next_ev(), now)
        self.out.append(Out(self._data_packet(pkt, rtx=True, ackreq=True), self.peer_addr,
                            self.peer_port, pkt.ev))
        self.c["ack_asks"] += 1

    # -- requester: feedback ---------------------------------------------------------------

    def _progress(self, now: float) -> None:
        self.timeouts = 0
        self.progress_at = now

    def _cut(self, psn: int) -> None:
        """Halve the packet window, at most once per window of data (a trim or a CE echo
        says the path is full; emu-ref has no NSCC, this is its whole reaction)."""
        if psn >= self.recover:
            self.cwnd = max(4.0, self.cwnd / 2)
            self.recover = self.next_psn
            self.c["cwnd_cuts"] += 1

    def on_sack(self, p: W.Packet, now: float) -> None:
        s = p.seth
        if s is None or self.error is not None:
            return
        self.c["rx_sacks"] += 1
        if s.pr:  # the answer to a probe: nothing to release
            self.c["rx_sack_probe"] += 1
            return
        if s.ev not in self.evs:  # the peer rebuilt another EV than ours (the STEV split)
            self.c["rx_echo_unknown_ev"] += 1
        if self.m_field == "ecn":  # M is the CE echo; there are no skip hints
            ce = s.m == M_ECN_CE
        else:
            ce = bool(s.cc_flags & CC_FLAG_CE)
            if s.m in (W.M_SKIP_ONCE, W.M_ALWAYS_SKIP):
                self._skip.add(s.ev)  # emu-ref has no probes to bring a path back: skip once
        released = False
        cack = unwrap(s.cack_psn, self.next_psn)
        if self.snd_una <= cack < self.next_psn:
            for psn in range(self.snd_una, cack + 1):
                self.unacked.pop(psn, None)
            self.snd_una = cack + 1
            released = True
        high = cack
        bm, base = s.sack_bitmap, cack + s.sack_offset
        while bm:
            low = bm & -bm
            psn = base + low.bit_length() - 1
            if self.unacked.pop(psn, None) is not None:
                released = True
            high = max(high, psn)
            bm ^= low
        if ce:
            self.c["rx_ce_echo"] += 1
            self._cut(cack + s.ack_psn_offset)
        if released:
            self.cwnd = min(float(self.max_outstanding), self.cwnd + 1 / self.cwnd)
            self._progress(now)
        if self.high_sacked < high < self.next_psn:
            self.high_sacked = high
            self._presume_lost()

    def _presume_lost(self) -> None:
        """Resend (once) each unSACKed packet ``DUPTHRESH`` or more PSNs below the highest
        SACKed one: later packets got through, so this one most likely did not."""
        limit = self.high_sacked - DUPTHRESH
        for psn in range(max(self.scan, self.snd_una), limit + 1):
            pkt = self.unacked.get(psn)
            if pkt is not None and not pkt.resent and psn not in self.retx:
                self.retx[psn] = None
                self.c["retx_sack"] += 1
        self.scan = max(self.scan, limit + 1)

    def on_nack(self, p: W.Packet, now: float) -> None:
        n = p.neth
        if n is None or self.error is not None:
            return
        self.c["rx_nacks"] += 1
        psn = unwrap(n.nack_psn, self.next_psn)
        if psn not in self.unacked:
            self.c["rx_nack_stale"] += 1  # SACKed meanwhile, or a copy of an old NACK
            return
        if n.reason in (W.NACK_TRIMMED, W.NACK_TRIMMED_LASTHOP):
            self._skip.add(n.ev)
            self._cut(psn)
            if psn not in self.retx:
                self.retx[psn] = None
                self.c["retx_trim"] += 1
        elif n.reason == W.NACK_PSN_OOR_WINDOW:
            self.later[psn] = now + self.rto / 4
            self.c["retx_oor"] += 1
        else:
            self.c["rx_nack_other"] += 1

    def on_transport_ack(self, p: W.Packet, now: float) -> None:
        """AETH ACK: every open message up to its MSN completed, in order. AETH NAK: the
        message it names completes in error and the QP stops, as RC's does."""
        if self.error is not None:
            return
        kind, msn = p.syndrome >> 5 & 3, p.aeth_msn & M16
        if kind == 3:
            self.c["rx_naks"] += 1
            status = {0x61: "REM_INV_REQ_ERR", 0x62: "REM_ACCESS_ERR",
                      0x63: "REM_OP_ERR"}.get(p.syndrome, "REM_OP_ERR")
            self._fail(status, msn)
            return
        if kind == 1:
            self.c["rx_rnr"] += 1  # MRC has no RNR (receives are pre-posted)
            return
        if kind != 0:
            return
        self.c["rx_acks"] += 1
        done = False
        while self.open and self.open[0].sent and _not_after(self.open[0].msn, msn):
            m = self.open.popleft()
            self.completions.append(Completion(m.wr_id, "WRITE", "SUCCESS", len(m.data),
                                               qpn=self.qpn))
            done = True
        if done:
            self._progress(now)

    def _fail(self, status: str, msn: int | None) -> None:
        """The QP enters the error state: the message ``msn`` (or the oldest) completes
        with ``status``, every other posted one is flushed."""
        self.error = status
        msgs = list(self.open) + [m for m in self.queue if m not in self.open]
        named = next((m for m in msgs if m.msn == msn), msgs[0] if msgs else None)
        for m in msgs:
            st = status if m is named else "WR_FLUSH_ERR"
            self.completions.append(Completion(m.wr_id, "WRITE", st, qpn=self.qpn))
        self.open.clear()
        self.queue.clear()
        self.unacked.clear()
        self.retx.clear()
        self.later.clear()

    # -- requester: timers -----------------------------------------------------------------

    def _wait(self) -> float:
        return min(self.max_rto, self.rto * (1 << min(self.timeouts, 16)))

    def deadline(self) -> float | None:
        """When something is due: the oldest unSACKed packet's timeout, a delayed resend,
        (all SACKed, the transport ACK missing) the time to ask for it again, or the
        responder's next repeat of its last transport ACK."""
        d = self.repeat_at
        if self.error is not None or not self.connected:
            return d
        if self.unacked:
            oldest = next(iter(self.unacked.values()))
            t = max(oldest.sent_at, self.progress_at) + self._wait()
            d = t if d is None else min(d, t)
        elif self.open and self.open[0].sent:
            t = self.progress_at + self._wait()
            d = t if d is None else min(d, t)
        if self.later:
            t = min(self.later.values())
            d = t if d is None else min(d, t)
        return d

    def on_timer(self, now: float) -> None:
        if self.repeat_at is not None and self.repeat_at <= now and self.last_aeth:
            self._aeth(*self.last_aeth)
            self._aeth_sent = False
            self.c["ack_repeats"] += 1
            self.repeats_left -= 1
            self.repeat_at = now + self.rto * 2 if self.repeats_left > 0 else None
        if self.error is not None or not self.connected:
            return
        for psn, t in list(self.later.items()):
            if t <= now:
                del self.later[psn]
                if psn in self.unacked:
                    self.retx[psn] = None
        wait = self._wait()
        if self.unacked:
            oldest = next(iter(self.unacked.values()))
            if max(oldest.sent_at, self.progress_at) + wait > now:
                return
            due = [p for p in self.unacked.values() if p.sent_at + wait <= now]
            due = due or [oldest]
        elif self.open and self.open[0].sent:
            if self.progress_at + wait > now:
                return
            due = []
        else:
            return
        self.timeouts += 1
        self.c["rto"] += 1
        if self.timeouts > self.retries:
            self._fail("RETRY_EXC_ERR", None)
            return
        self.progress_at = now
        for pkt in due:  # holes only: what is still unSACKed after a timeout
            self.retx[pkt.psn] = None
            self.c["retx_rto"] += 1
        if not due:
            self.ask = True

    # -- responder ---------------------------------------------------------------------------

    def _received(self, psn: int) -> bool:
        return psn < self.rcv_base or psn in self.rcv_ahead

    def _sack(self, psn: int, ev: int, addr: str, ce: bool, ts: int, probe: bool = False
              ) -> None:
        """One SACK answering ``psn`` (unbounded) that came on ``ev``: cumulative ack,
        the 64-PSN bitmap from cack + 1 (or later, so that it holds ``psn``)."""
        cack = self.rcv_base - 1
        base = cack + 1 if psn - cack <= 64 else psn - 63
        bm = 0 if not self.rcv_ahead and base == cack + 1 else W.sack_bitmap(base,
                                                                             self._received)
        s = W.Seth(ev=ev, cack_psn=cack & M24, sack_offset=_s16(base - cack), sack_bitmap=bm,
                   ack_psn_offset=_s16(psn - cack), pr=probe, spdcid=self.qpn & M16,
                   dpdcid=self.peer_qpn & M16, cc_type=CC_TYPE,
                   m=M_ECN_CE if ce and self.m_field == "ecn" else W.M_NONE,
                   cc_flags=CC_FLAG_CE if ce and self.m_field == "skip" else 0,
                   mpr=self.mpr // W.MPR_UNIT,
                   tx_timestamp=ts, ooo_count=min(self.ooo, 0x7FFF),
                   rcvd_bytes=(self.rcvd_bytes // W.RCVD_BYTES_UNIT) & M24)
        self.out.append(Out(W.Packet(W.RELIABILITY_SACK, self.peer_qpn, cack & M24, seth=s),
                            addr, self.peer_port, self._reply_sport(ev)))
        self.c["tx_sacks"] += 1

    def _reply_sport(self, ev: int) -> int:
        """The source port a reply leaves from: one of this QP's own EVs (a UDP socket can
        send only from a port it bound; the peer's EV is echoed in the header)."""
        return self.evs[ev % len(self.evs)]

    def _nack(self, reason: int, psn: int, ev: int, addr: str, ce: bool) -> None:
        n = W.Neth(reason=reason, nack_psn=psn & M24, ev=ev, spdcid=self.qpn & M16,
                   dpdcid=self.peer_qpn & M16, cc_type=CC_TYPE,
                   cc_flags=CC_FLAG_CE if ce else 0)
        self.out.append(Out(W.Packet(W.RELIABILITY_NACK, self.peer_qpn, psn & M24, neth=n),
                            addr, self.peer_port, self._reply_sport(ev)))
        self.c["tx_nacks"] += 1

    def _aeth(self, syndrome: int, msn: int) -> None:
        self.out.append(Out(W.Packet(W.TRANSPORT_ACK, self.peer_qpn, 0, syndrome=syndrome,
                                     aeth_msn=msn & M16), self.reply_addr, self.peer_port,
                            self.evs[0]))
        self.last_aeth = (syndrome, msn)
        self._aeth_sent = True

    def _arm_repeat(self, now: float) -> None:
        """After a transport ACK/NAK, say it again ``ack_repeats`` times if the requester
        goes quiet: once every packet is SACKed a requester may have no timer left that
        would ask for a lost one (emu's has none), so the last word must not depend on
        one datagram. A repeat is harmless: the requester completes nothing twice."""
        if self._aeth_sent:
            self._aeth_sent = False
            self.repeat_at = now + self.rto if self.ack_repeats else None
            self.repeats_left = self.ack_repeats

    def on_write(self, p: W.Packet, addr: str, ev: int, now: float, ce: bool = False) -> None:
        """One whole write packet that came from ``addr`` on ``ev`` (its source port)."""
        if self.connected:
            self._on_write(p, addr, ev, now, ce)
            self._arm_repeat(now)

    def _on_write(self, p: W.Packet, addr: str, ev: int, now: float, ce: bool) -> None:
        self.reply_addr = addr
        psn = unwrap(p.psn, self.rcv_base)
        if psn - self.rcv_base >= self.mpr:
            self.c["rx_out_of_window"] += 1  # spec: outside the window, silently dropped
            return
        self.c["rx_packets"] += 1
        if self._received(psn):
            self.c["rx_duplicate"] += 1  # its SACK was lost or late: say it again
            self._sack(psn, ev, addr, ce, p.tx_timestamp)
            if p.ackreq:
                self._repeat_ack(p.msn)
            return
        msn = p.msn
        self._accept(psn)
        if self.rx_error is not None:
            # after a remote access NAK the responder is in error, as RC's: packets are
            # SACKed (they arrived) but nothing more is placed, completed or ACKed, so no
            # later cumulative ACK can cover the failed message; an AckReq hears the NAK
            self.c["rx_after_error"] += 1
            self._sack(psn, ev, addr, ce, p.tx_timestamp)
            if p.ackreq:
                self._aeth(self.failed.get(self.rx_error, W.NAK_REMOTE_ACCESS), self.rx_error)
                self.c["ack_repeats"] += 1
            return
        if not _not_after(self.rx_msn, msn):
            # a message before the ones still open: all its PSNs arrived long ago, so a new
            # PSN cannot be part of it (a confused peer); SACKed, not placed
            self.c["rx_stray_msn"] += 1
            self._sack(psn, ev, addr, ce, p.tx_timestamp)
            return
        n = len(p.payload)
        self.c["rx_bytes"] += n
        self.rcvd_bytes += n
        msg = self.rx_msgs.get(msn)
        if msg is None:
            msg = self.rx_msgs[msn] = _RxMsg(p.dma_len)
        try:
            self.memory.write(p.rkey, p.va, p.payload)
        except AccessError:
            self.c["rx_access_error"] += 1
            msg.failed = True
            self.failed[msn] = W.NAK_REMOTE_ACCESS
            self.rx_error = msn
            self._aeth(W.NAK_REMOTE_ACCESS, msn)
            self.c["tx_naks"] += 1
            self._sack(psn, ev, addr, ce, p.tx_timestamp)
            return
        msg.got += n
        if p.opcode in W.IMM_OPS:
            msg.has_imm, msg.imm = True, p.imm
        self._sack(psn, ev, addr, ce, p.tx_timestamp)
        self._complete_in_order()
        self._flush_ack()

    def _accept(self, psn: int) -> None:
        if psn != self.rcv_base:
            self.ooo += 1
            self.c["rx_ooo"] += 1
            self.rcv_ahead.add(psn)
            return
        self.rcv_base += 1
        while self.rcv_base in self.rcv_ahead:
            self.rcv_ahead.discard(self.rcv_base)
            self.rcv_base += 1

    def _repeat_ack(self, msn: int) -> None:
        """A duplicate asking for an ACK (AckReq): if its message is done, the transport
        ACK (or NAK) for it was lost — say it again."""
        if msn in self.failed:
            self._aeth(self.failed[msn], msn)
            self.c["ack_repeats"] += 1
        elif self.last_done is not None and _not_after(msn, self.last_done):
            self._aeth(W.ACK_CREDIT_INVALID, self.last_done)
            self.c["ack_repeats"] += 1

    def _complete_in_order(self) -> None:
        while True:
            msg = self.rx_msgs.get(self.rx_msn)
            if msg is None or msg.got < msg.total:
                return
            if msg.has_imm and not msg.failed:
                if not self.recvs:
                    self.c["imm_waiting_recv"] += 1  # MRC has no RNR: wait for a receive
                    return
                self.completions.append(Completion(self.recvs.popleft(), "RECV_RDMA_WITH_IMM",
                                                   "SUCCESS", msg.total, msg.imm, self.qpn))
            del self.rx_msgs[self.rx_msn]
            self.c["msgs_done"] += 1
            if not msg.failed:  # a failed one had its NAK
                self.last_done = self.rx_msn
                self._ack_due = True
            self.rx_msn = (self.rx_msn + 1) & M16

    def _flush_ack(self) -> None:
        """One transport ACK for everything completed by this input (AETH MSN = the last
        message completed; the requester completes every message up to it)."""
        if self._ack_due and self.last_done is not None:
            self._aeth(W.ACK_CREDIT_INVALID, self.last_done)
            self.c["tx_acks"] += 1
        self._ack_due = False

    def on_trimmed(self, p: W.Packet, addr: str, ev: int, reason: int, ce: bool = False
                   ) -> None:
        """A write packet a switch cut: NACK it at once unless it already arrived whole
        (then the SACK says so again); nothing of it is accepted."""
        if not self.connected:
            return
        self.c["rx_trimmed"] += 1
        psn = unwrap(p.psn, self.rcv_base)
        if psn - self.rcv_base >= self.mpr:
            self.c["rx_out_of_window"] += 1
        elif self._received(psn):
            self.c["rx_trimmed_dup"] += 1  # a resend cut, the original arrived: say so
            self._sack(psn, ev, addr, ce, p.tx_timestamp)
        else:
            self._nack(reason, psn, ev, addr, ce)

    def on_probe(self, p: W.Packet, addr: str, ev: int) -> None:
        """RELIABILITY_PROBE: a SACK with PR set on the EV it came on (the path works)."""
        if not self.connected or p.peth is None:
            return
        self.c["rx_probes"] += 1
        self._sack(self.rcv_base - 1, ev, addr, False, p.peth.tx_timestamp, probe=True)

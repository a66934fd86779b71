# SPDX-License-Identifier: GPL-2.0-only
"""The sending half of one MRC QP: spray WRITEs over EVs, resend holes only.

What MRC's sender does (``specs/mrc.md``, Behaviour):

* **Spraying.** Each packet takes the next EV of the QP's EV set
  (:mod:`emu.transports.mrc.evset`: a rotation over the usable EVs, planes
  interleaved). Every packet carries METH and its own RETH (this packet's
  address), so the receiver places it whatever order it arrives in.
* **Windows.** New packets go while the PSNs outstanding stay under the
  receiver's MPR and the bytes in flight under NSCC's window (SACK-clocked;
  :class:`emu.cc.nscc.Nscc`, the UET algorithm MRC names "uet-1.0-nscc").
* **Loss recovery, holes only.** A SACK releases its cumulative PSN and the
  PSNs its bitmap marks; a packet with enough later ones delivered
  (:meth:`Scoreboard.presumed_lost`, RFC 6675 with the reordering threshold
  ``loss_threshold``) *and* a later one on its own EV delivered — a path is a
  FIFO, while planes and paths overtake each other by their queues' difference
  — is lost and resent at once (at a transfer's tail, where its EV may carry
  nothing more: once it is twice the longest round trip old); a NACK TRIMMED resends at once; a
  timeout resends the oldest outstanding packet. A resend has BTH.RTX set and
  goes on another EV (the next in the rotation).
* **EV feedback.** The SACK's echoed EV and M field, its per-EV CE echo, a
  trim's NACK, a hole the SACKs show and a timeout go to the EV set, which
  skips or retires paths; retired EVs get a RELIABILITY_PROBE every quarter
  timeout (it consumes no PSN; the answer is a SACK with PR) until enough
  answers bring them back.
* **Timeouts and retries** (``mrc.h``): the local ACK timeout is 1.024 µs ×
  2^``timeout``; the first ``retry_linear`` consecutive timeouts wait that
  long, the next ``retry_exp`` double it each time (``retry_exp`` 25 =
  never give up); past them the QP fails every work request with
  RETRY_EXC_ERR.
* **Completions** come from the transport ACK (AETH's MSN), in MSN order,
  not from the SACKs: a packet can be SACKed but its message transport-NAKed
  (REM_ACCESS_ERR, the QP fails as in RC).

* **Behind a paced port** (``gate``, :mod:`emu.transports.mrc.txlead`): resends, ACK
  requests and new packets go only while they fit the port's FIFO ahead of its wire;
  what the window allows and the FIFO does not stays here (``held``) until the
  deadline the gate gives. The local ACK timeout is ``tx_hold`` longer, as a packet
  may wait that long in its port before the wire (UET's rule: ``UetEngine``, ``tx_hold``).

Sans-IO: :meth:`InitiatorQP.pull` returns ``(datagram, ev)`` pairs; the
engine reads :meth:`InitiatorQP.deadline` for its timer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emu.cc.nscc import Nscc
from emu.core.cq import WcStatus, WorkCompletion
from emu.core.memory import MemoryAccessError, MemoryTable, ProtectionDomain, gather
from emu.core.psn import PSN24
from emu.core.reliable.scoreboard import Scoreboard
from emu.core.trace import NULL_TRACE, Trace
from emu.core.verbs import SendWR, WrOpcode
from emu.transports.mrc import fastpath
from emu.transports.mrc.evset import EVSet, SackHint
from emu.wire import mrc_defs
from emu.wire.codec.mrc import (
    MPR_UNIT,
    MRC_RELIABILITY_PROBE,
    MRC_WRITE_FIRST,
    MRC_WRITE_LAST,
    MRC_WRITE_LAST_IMM,
    MRC_WRITE_MIDDLE,
    MRC_WRITE_ONLY,
    MRC_WRITE_ONLY_IMM,
    NACK_PSN_OOR_WINDOW,
    NACK_REASONS,
    NACK_TRIMMED,
    NACK_TRIMMED_LASTHOP,
    NETH,
    PETH,
    SETH,
)
from emu.wire.codec.roce import (
    AETH,
    AETH_ACK,
    AETH_NAK,
    BTH,
    RocePacket,
    aeth_kind,
    encode_packet,
)

if TYPE_CHECKING:
    from emu.transports.mrc.txlead import QpGate

#: the local ACK timeout's unit (mrc.h): 1.024 µs × 2^timeout
TIMEOUT_UNIT = 1.024e-6
#: the largest timeout code (about 17 s)
TIMEOUT_MAX_CODE = 24
#: retry limits (mrc.h): linear ≤ 7, then exponential ≤ 25 (25: never give up)
RETRY_LINEAR_MAX, RETRY_EXP_MAX, RETRY_FOREVER = 7, 25, 25
#: ASSUMED_BAD EVs are probed every this share of the probe timeout, and a probe not
#: answered within it counts as a miss (EVSet.on_probe)
PROBE_SHARE = 0.25
#: the probe timeout: this many smoothed round trips (at most the local ACK timeout, which
#: it is before the first RTT sample). Why not the local ACK timeout itself: that is sized
#: for a data packet behind a full window (16.8 ms at the default code 14), and a probe
#: lost on a path still healing (a plane up before its routes) was retried only that much
#: later — after the transfer it was to bring the path back to
PROBE_RTTS = 8
#: a NACK PSN_OOR_WINDOW (the receiver's window moved less than ours): resend after this
#: many timeouts' worth of the base round trip, not at once
OOR_BACKOFF = 0.25
_M16, _M24 = 0xFFFF, 0xFFFFFF
#: SETH.m as a hint (``mrc_defs.seth_read`` gives 0, 1 or 2): a tuple index, not an enum call
_HINTS = tuple(SackHint)


def timeout_of(code: int) -> float:
    """The local ACK timeout (seconds) of a ``timeout`` attribute."""
    if not 0 <= code <= TIMEOUT_MAX_CODE:
        raise ValueError(f"MRC timeout code {code} is not 0..{TIMEOUT_MAX_CODE}")
    return TIMEOUT_UNIT * (1 << code)


@dataclass(slots=True)
class TxMessage:
    """One posted WRITE: its data (a view of the registered buffer), where it goes, and
    how far it has been sent and acknowledged."""

    wr: SendWR
    msn: int
    data: memoryview | bytes
    next_offset: int = 0
    last: TxPacket | None = None  # its last packet, once sent (said again to ask for an ACK)
    total: int = 0  # len(data)


@dataclass(slots=True)
class TxPacket:
    """One packet outstanding (the scoreboard's record)."""

    psn: int  # extended
    msg: TxMessage
    offset: int
    length: int
    ev: int
    sent_at: float
    resent: bool = False
    trimmed: bool = False  # a NACK TRIMMED came for it
    seq: int = 0  # this QP's transmission count when it last went out (send order)


class InitiatorQP:
    """The send side of one MRC QP connected to ``peer_qpn``."""

    def __init__(self, qpn: int, peer_qpn: int, memory: MemoryTable, evs: EVSet, *,
                 start_psn: int = 0, pmtu: int = 4096, mpr: int = 16 * 128,
                 timeout: int = 14, retry_linear: int = RETRY_LINEAR_MAX,
                 retry_exp: int = RETRY_EXP_MAX, loss_threshold: int = 16,
                 cc: Nscc | None = None, pd: ProtectionDomain | None = None,
                 max_send_wr: int = 1024, trace: Trace = NULL_TRACE,
                 dynamic_mpr: bool = False, gate: QpGate | None = None) -> None:
        if not 0 <= retry_linear <= RETRY_LINEAR_MAX or not 0 <= retry_exp <= RETRY_EXP_MAX:
            raise ValueError(f"retries: linear 0..{RETRY_LINEAR_MAX}, exponential "
                             f"0..{RETRY_EXP_MAX}, not {retry_linear}/{retry_exp}")
        if pmtu < 256:
            raise ValueError(f"path MTU {pmtu} is below 256 bytes")
        fastpath.check_qp(peer_qpn)  # every packet's BTH carries it (.fastpath)
        self.qpn = qpn
        self.peer = peer_qpn
        self.memory = memory
        self.pd = pd
        self.evs = evs
        self.pmtu = pmtu
        self.mpr = mpr
        #: DYNAMIC_MPR (both peers enabled it): the window follows each SACK's ``mpr``
        self.dynamic_mpr = dynamic_mpr
        #: the ports' FIFOs ahead of their wire (None: unpaced, all the windows allow goes)
        self.gate = gate
        #: how long a datagram may wait in its port's FIFO before the wire (the daemon's
        #: ``tx_hold``, the gate's): every age judged from a send — the timeout, a tail
        #: packet's — counts from the wire, not from the hand-over
        self.tx_hold = 0.0 if gate is None else gate.hold
        self.rto = timeout_of(timeout) + self.tx_hold
        #: the gate held back what the windows allow: :meth:`deadline` says when to resume
        self.held = False
        self.retry_linear = retry_linear
        self.retry_exp = retry_exp
        self.loss_threshold = loss_threshold
        self.cc = cc
        self.max_send_wr = max_send_wr
        self.sb: Scoreboard[TxPacket] = Scoreboard(PSN24, start_psn)
        self.queue: deque[TxMessage] = deque()  # posted, not all sent
        self.open: deque[TxMessage] = deque()  # sent or sending, not transport-ACKed
        self.next_msn = 0
        self.in_flight = 0  # bytes of data packets outstanding
        self.timeouts = 0  # consecutive timeouts (retries used)
        self.error: WcStatus | None = None
        self.probes: dict[int, float] = {}  # EV probed → when (one probe per EV at a time)
        self.next_probe: float | None = None
        #: transmissions so far, and per EV the latest (by that count) one delivered: a
        #: path is FIFO, so a packet is lost for sure once a later one on its EV arrived
        self.tx_seq = 0
        self.ev_delivered: dict[int, int] = {}
        #: the longest round trip sampled (the slowest path's queue included), and when a
        #: tail packet the SACKs left in doubt is looked at again
        self.rtt_max = 0.0
        self.recheck_at: float | None = None
        #: the smoothed round trip of SACKed packets (None before the first sample)
        self.srtt: float | None = None
        self.probe_id = 0
        self.completions: list[WorkCompletion] = []
        self.trace = trace  # packets, per-EV feedback, losses and probes (when enabled)
        #: since when every packet is SACKed but a message still waits for its transport
        #: ACK (None: not waiting): a lost ACK is asked for again after a timeout
        self.ack_wait: float | None = None
        self.ack_request_due = False
        self.stats: dict[str, int] = dict.fromkeys((
            "tx_packets", "tx_bytes", "tx_retransmits", "retx_sack", "retx_trim", "retx_rto",
            "retx_plane", "retx_oor", "rx_sacks", "rx_nacks", "rx_naks", "rx_acks", "rto",
            "tx_mpr_full", "tx_cwnd_full", "rx_stale_ack", "tx_probes", "probe_ok",
            "probe_lost", "ack_requests", "mpr_changes", "evs_port_down",
            "rx_echo_unknown_ev", "tx_lead_held"), 0)

    # -- verbs ---------------------------------------------------------------------------

    def post_send(self, wr: SendWR, now: float) -> None:
        """A WRITE or WRITE with immediate (MRC has no SEND, READ or atomics). Raises
        ValueError for anything else, a full send queue, or an SGE the memory refuses."""
        if wr.opcode not in (WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM):
            raise ValueError(f"MRC has WRITE and WRITE with immediate only, not "
                             f"{wr.opcode.name}")
        if (wr.opcode is WrOpcode.RDMA_WRITE_WITH_IMM) != (wr.imm is not None):
            raise ValueError("imm is for (and required by) WRITE with immediate")
        if self.error is not None:
            self._flush_one(wr)
            return
        if len(self.queue) + len(self.open) >= self.max_send_wr:
            raise ValueError(f"send queue full ({self.max_send_wr} work requests)")
        try:
            views = [self.memory.local_view(s.lkey, s.addr, s.length, False, self.pd)
                     for s in wr.sg_list]
        except MemoryAccessError as e:
            raise ValueError(f"bad SGE: {e}") from None
        total = sum(len(v) for v in views)
        # what each of its packets carries fits the wire (checked once, not per packet)
        fastpath.check_message(wr.remote_addr, wr.rkey, total, wr.imm)
        data = views[0] if len(views) == 1 else gather(views, 0, total)
        msg = TxMessage(wr, self.next_msn, data, total=total)
        self.next_msn = (self.next_msn + 1) & _M16
        self.queue.append(msg)

    # -- sending -------------------------------------------------------------------------

    def pull(self, now: float) -> list[tuple[bytearray, int, int]]:
        """What may go now, as ``(datagram, EV, its plane)``: owed resends first, then new
        packets within MPR and NSCC — and, behind a paced port, within its FIFO
        (:meth:`_held`; probes, which are small, are not held but are charged to it)."""
        out: list[tuple[bytearray, int, int]] = []
        self.held = False
        if self.error is not None:
            return out
        gate = self.gate
        if self.next_probe is not None and self.next_probe <= now:
            probes = self._probes(now)
            if gate is not None:
                for d, _, plane in probes:
                    gate.charge(plane, len(d), now)
            out += probes
        if self.ack_request_due and not self._held(now):
            req = self._ack_request()
            if req is not None:
                out.append(self._charged(req, now))
        sb = self.sb
        while sb.retx:
            if self._held(now):
                return out  # owed resends first: nothing new overtakes them
            pkt = sb.unacked.get(sb.retx.pop())
            if pkt is not None:
                out.append(self._charged(self._resend(pkt, now), now))
        queue, cc, stats = self.queue, self.cc, self.stats
        while queue:
            if sb.span >= self.mpr - 1:  # the peer takes [cack + 1, cack + MPR)
                stats["tx_mpr_full"] += 1
                break
            if cc is not None and self.in_flight >= cc.cwnd:
                stats["tx_cwnd_full"] += 1
                break
            if self._held(now):
                break
            out.append(self._charged(self._send_new(queue[0], now), now))
        return out

    def _held(self, now: float) -> bool:
        """Whether the port's FIFO holds the next data packet back (a full packet no
        longer fits: :class:`~emu.transports.mrc.txlead.QpGate`); noted in :attr:`held`
        (and counted once a turn, ``tx_lead_held``) so that :meth:`deadline` brings the QP
        back when it fits. Never without a gate."""
        gate = self.gate
        if gate is None or gate.open(now):
            return False
        if not self.held:
            self.held = True
            self.stats["tx_lead_held"] += 1
        return True

    def _charged(self, item: tuple[bytearray, int, int], now: float
                 ) -> tuple[bytearray, int, int]:
        """``item`` (a datagram, its EV and plane), charged to its plane's port when paced."""
        if self.gate is not None:
            self.gate.charge(item[2], len(item[0]), now)
        return item

    def _send_new(self, msg: TxMessage, now: float) -> tuple[bytearray, int, int]:
        off = msg.next_offset
        total = msg.total
        n = min(self.pmtu, total - off)
        msg.next_offset = end = off + n
        if off == 0:
            self.open.append(msg)
        if end >= total:
            self.queue.popleft()
        psn = self.sb.take(1)
        e = self.evs.next()
        ev = e.ev
        self.tx_seq += 1
        pkt = TxPacket(psn, msg, off, n, ev, now, seq=self.tx_seq)
        if end >= total:
            msg.last = pkt
        self.sb.track(pkt)
        self.in_flight += n
        stats = self.stats
        stats["tx_packets"] += 1
        stats["tx_bytes"] += n
        if self.trace.enabled:
            self.trace.packet_sent(now, qp=self.qpn, psn=psn & _M24, ev=ev, len=n)
        if self.cc is not None:
            self.cc.on_sent(n, now)
        return self._encode(pkt, rtx=False), ev, e.plane

    def _resend(self, pkt: TxPacket, now: float) -> tuple[bytearray, int, int]:
        self.sb.resending(pkt, now)
        old = pkt.ev
        e = self.evs.next()
        pkt.ev = e.ev  # another path than the one that lost it
        pkt.trimmed = False
        self.tx_seq += 1
        pkt.seq = self.tx_seq
        self.stats["tx_retransmits"] += 1
        if self.trace.enabled:
            self.trace.packet_retransmitted(now, qp=self.qpn, psn=pkt.psn & _M24, ev=pkt.ev,
                                            lost_on=old, len=pkt.length)
        return self._encode(pkt, rtx=True), pkt.ev, e.plane

    def _encode(self, pkt: TxPacket, rtx: bool) -> bytearray:
        """A data packet (:func:`.fastpath.data`: its fields were checked when the QP and
        the message were made)."""
        msg = pkt.msg
        wr = msg.wr
        off = pkt.offset
        end = off + pkt.length
        total = msg.total
        first, last = off == 0, end >= total
        imm = wr.imm
        if first and last:
            op = MRC_WRITE_ONLY if imm is None else MRC_WRITE_ONLY_IMM
        elif first:
            op = MRC_WRITE_FIRST
        elif last:
            op = MRC_WRITE_LAST if imm is None else MRC_WRITE_LAST_IMM
        else:
            op = MRC_WRITE_MIDDLE
        ackreq = int(last or len(self.sb.unacked) >= self.mpr // 2)
        return fastpath.data(op, self.peer, pkt.psn & _M24, ackreq, int(rtx), msg.msn,
                             wr.remote_addr + off, wr.rkey, total, imm if last else None,
                             msg.data[off:end])

    # -- probes --------------------------------------------------------------------------

    def _probes(self, now: float) -> list[tuple[bytearray, int, int]]:
        """A RELIABILITY_PROBE on each retired (ASSUMED_BAD) EV not already being probed;
        a probe unanswered for a timeout is a miss. Probes consume no PSN."""
        out = []
        wait = self.probe_wait()
        for ev, at in list(self.probes.items()):
            if now - at >= wait:
                del self.probes[ev]
                self.stats["probe_lost"] += 1
                if self.trace.enabled:
                    self.trace.event("probe_lost", now, qp=self.qpn, ev=ev)
                self.evs.on_probe(ev, now, answered=False)
        for ev in self.evs.to_probe():
            if ev in self.probes:
                continue
            self.probe_id = (self.probe_id + 1) & _M16
            peth = PETH(probe_id=self.probe_id, spdcid=self.qpn & _M16, dpdcid=self.peer & _M16)
            bth = BTH(opcode=MRC_RELIABILITY_PROBE, dqpn=self.peer,
                      psn=self.sb.next_psn & _M24)
            out.append((encode_packet(bth, [peth]), ev, self.evs.by_ev[ev].plane))
            self.probes[ev] = now
            self.evs.on_probe_sent(ev)
            self.stats["tx_probes"] += 1
            if self.trace.enabled:
                self.trace.event("probe_sent", now, qp=self.qpn, ev=ev, id=self.probe_id)
        self._arm_probes(now)
        return out

    def _ack_request(self) -> tuple[bytearray, int, int] | None:
        """The last packet of the oldest message still without its transport ACK, sent
        again (RTX, AckReq) on a usable EV: a target answers a duplicate asking for an ACK
        with its SACK and its last AETH (as an RC responder re-ACKs a duplicate)."""
        self.ack_request_due = False
        last = self.open[0].last if self.open else None
        if last is None:
            return None
        self.stats["ack_requests"] += 1
        e = self.evs.next()
        return self._encode(last, rtx=True), e.ev, e.plane

    def _await_ack(self, now: float, progress: bool = False) -> None:
        """Note whether only transport ACKs are outstanding (every packet SACKed)."""
        if self.open and not self.sb.unacked:
            if self.ack_wait is None or progress:
                self.ack_wait = now
        else:
            self.ack_wait = None

    def _arm_probes(self, now: float) -> None:
        self.next_probe = (now + PROBE_SHARE * self.probe_wait()
                           if self.probes or self.evs.to_probe() else None)

    def probe_wait(self) -> float:
        """How long a probe's answer may take: :data:`PROBE_RTTS` smoothed round trips,
        at most the local ACK timeout."""
        return self.rto if self.srtt is None else min(self.rto, PROBE_RTTS * self.srtt)

    # -- feedback ------------------------------------------------------------------------

    def on_sack(self, pkt: RocePacket, now: float) -> None:
        """A RELIABILITY_SACK, decoded (the general path: the engine's fast path reads the
        same fields from the datagram, :func:`.fastpath.read_sack`, and calls
        :meth:`sack`)."""
        seth = pkt.header(SETH)
        if isinstance(seth, SETH):
            self.sack(seth.m, seth.pr, seth.ack_psn_offset, seth.ev, seth.cack_psn,
                      seth.cc_flags, seth.mpr, seth.sack_offset, seth.sack_bitmap, now)

    def sack(self, m: int, pr: int, ack_psn_offset: int, ev: int, cack_psn: int,
             cc_flags: int, mpr: int, sack_offset: int, bitmap: int, now: float) -> None:
        """A SACK's SETH fields: release what it covers, tell the EV set and NSCC, owe
        resends for what it shows lost."""
        if self.error is not None:
            return
        self.stats["rx_sacks"] += 1
        if pr:  # a probe's answer: that path works
            if self.probes.pop(ev, None) is not None:
                self.stats["probe_ok"] += 1
                if self.trace.enabled:
                    self.trace.event("probe_answered", now, qp=self.qpn, ev=ev)
                self.evs.on_probe(ev, now, answered=True)
            return
        sb = self.sb
        cack = sb.ext(cack_psn)
        acked_psn = cack + ack_psn_offset
        rtt = sb.round_trip(acked_psn, now)
        if rtt is not None:  # smoothed as TCP's SRTT (RFC 6298, alpha 1/8)
            self.srtt = rtt if self.srtt is None else self.srtt + (rtt - self.srtt) / 8
            self.rtt_max = max(self.rtt_max, rtt)
        released = sb.ack_through(cack)
        if bitmap:
            released += sb.sack(cack + sack_offset, bitmap)
        nbytes = 0
        delivered = self.ev_delivered
        for p in released:
            nbytes += p.length
            if delivered.get(p.ev, -1) < p.seq:
                delivered[p.ev] = p.seq
        self.in_flight -= nbytes
        # the CE echo and the skip hint, where the M-field setting puts them (mrc_defs)
        ce, h = mrc_defs.seth_read(m, cc_flags)
        hint = _HINTS[h]
        if self.dynamic_mpr and mpr and mpr * MPR_UNIT != self.mpr:
            self.mpr = mpr * MPR_UNIT
            self.stats["mpr_changes"] += 1
        if self.trace.enabled:  # the per-EV feedback: which path, marked or not, the hint
            self.trace.ack_received(now, qp=self.qpn, cack=cack_psn, ev=ev,
                                    ce=ce, hint=hint.name, released=len(released))
        if not self.evs.on_sack(ev, now, hint=hint, ecn=ce):
            # an echo naming no EV of ours: the peer rebuilt the EV from the wire another
            # way (specs/mrc.md: the STEV split), so no feedback reaches a path
            self.stats["rx_echo_unknown_ev"] += 1
        if self.next_probe is None and hint is SackHint.ALWAYS_SKIP:
            self._arm_probes(now)
        if self.cc is not None:
            self.cc.on_ack(nbytes, now, ecn_echo=ce, rtt=rtt)
        if released:
            self.timeouts = 0
        self._find_losses(now)
        self._await_ack(now, progress=bool(released))

    def _find_losses(self, now: float) -> None:
        """Resend at once what the SACKs show lost (:meth:`_gone` says which of the SACK
        count's candidates are); a tail candidate not yet old enough is looked at again
        when it is (:attr:`recheck_at`)."""
        sb = self.sb
        tail = not self.queue
        self.recheck_at = None
        for psn in sb.presumed_lost(self.loss_threshold, tail=tail):
            rec = sb.unacked.get(psn)
            if not self._gone(rec, now, tail):
                if tail and rec is not None:  # overtaken, or lost: known at this time
                    t = self._tail_due(rec)
                    self.recheck_at = t if self.recheck_at is None else min(t, self.recheck_at)
                continue  # overtaken by other paths, not lost on its own: wait
            if sb.retx.at_once(psn):
                self.stats["retx_sack"] += 1
                rec = sb.unacked.get(psn)
                if self.trace.enabled:
                    self.trace.packet_lost(now, qp=self.qpn, psn=psn & _M24,
                                           ev=None if rec is None else rec.ev, by="sack")
                if rec is not None and not rec.trimmed:
                    self.evs.on_lost(rec.ev, now)
                    if self.next_probe is None:
                        self._arm_probes(now)

    def _gone(self, rec: TxPacket | None, now: float, tail: bool) -> bool:
        """Whether a packet the SACK count presumes lost is lost: a later packet on its
        own EV (its path, a FIFO) arrived, or its EV is out of use (retired, denied, on a
        plane that is down: nothing later will come on it), or — at a transfer's tail,
        where nothing later may ever go on its EV — it went out more than twice the
        longest round trip sampled ago (the slowest path's queue had time to deliver it),
        and its port's FIFO (``tx_hold``) had time to put it on the wire.

        Why not the count alone: planes (and paths) reorder by their queues' difference,
        and that difference can be far more than any threshold — a plane that comes back
        empty while the other still holds the QP's whole window overtook hundreds of
        packets, each "presumed lost", resent, its EV retired (measured: 95 packets and
        65 good EVs of plane 0, a 200-µs completion stall, at a repair)."""
        if rec is None:
            return True
        if self.ev_delivered.get(rec.ev, -1) > rec.seq:
            return True
        e = self.evs.by_ev.get(rec.ev)
        if e is None or not e.usable or e.plane in self.evs.down:
            return True
        return tail and now >= self._tail_due(rec)

    def _tail_due(self, rec: TxPacket) -> float:
        """When a tail packet still unaccounted for is lost (:meth:`_gone`) — the time
        :attr:`recheck_at` looks again, computed once so both agree: ``now - sent_at``
        could round below the sum at that very time, and the recheck came due for ever."""
        return rec.sent_at + 2 * self.rtt_max + self.tx_hold

    def plane_lost(self, plane: int, now: float) -> int:
        """``plane`` went down (this NIC's port or the peer's): every packet outstanding on
        one of its EVs is owed a resend at once — on a live plane, the rotation no longer
        has the dead one — rather than after a timeout or a SACK gap per packet. Not a
        congestion signal, and the EVs are not blamed (the plane, not the path, failed).
        Returns how many were owed."""
        by_ev, sb, n = self.evs.by_ev, self.sb, 0
        for psn, rec in sb.unacked.items():
            e = by_ev.get(rec.ev)
            if e is not None and e.plane == plane and sb.retx.at_once(psn):
                n += 1
        self.stats["retx_plane"] += n
        if self.trace.enabled:
            self.trace.event("plane_lost", now, qp=self.qpn, plane=plane, resent=n)
        return n

    def plane_back(self, plane: int, now: float) -> None:
        """``plane`` is up again: its EVs, assumed bad while it was down, are probed now
        (each comes back GOOD when its probes are answered)."""
        if self.evs.to_probe() and (self.next_probe is None or self.next_probe > now):
            self.next_probe = now
        if self.trace.enabled:
            self.trace.event("plane_back", now, qp=self.qpn, plane=plane)

    def on_nack(self, pkt: RocePacket, now: float) -> None:
        """A RELIABILITY_NACK: a trim resends at once (and tells the EV set where it was
        cut); PSN_OOR_WINDOW resends a little later; other reasons are counted."""
        neth = pkt.header(NETH)
        if not isinstance(neth, NETH) or self.error is not None:
            return
        self.stats["rx_nacks"] += 1
        if self.trace.enabled:
            self.trace.nack_received(now, qp=self.qpn, psn=neth.nack_psn, ev=neth.ev,
                                     reason=NACK_REASONS.get(neth.nack_reason,
                                                             neth.nack_reason))
        sb = self.sb
        psn = sb.ext(neth.nack_psn)
        rec = sb.unacked.get(psn)
        if rec is None:
            self.stats["rx_stale_ack"] += 1
            return
        reason = neth.nack_reason
        if reason in (NACK_TRIMMED, NACK_TRIMMED_LASTHOP):
            rec.trimmed = True
            self.evs.on_trim(neth.ev, now, last_hop=reason == NACK_TRIMMED_LASTHOP)
            if self.cc is not None:
                self.cc.on_trim(rec.length, now)
            if sb.retx.at_once(psn):
                self.stats["retx_trim"] += 1
        elif reason == NACK_PSN_OOR_WINDOW:
            sb.retx.after(psn, now + OOR_BACKOFF * self.rto)
            self.stats["retx_oor"] += 1

    def on_transport_ack(self, pkt: RocePacket, now: float) -> None:
        """AETH: an ACK completes every open message up to its MSN, in order; a NAK fails
        the QP (REM_ACCESS_ERR for a remote access error, as RC does)."""
        aeth = pkt.header(AETH)
        if not isinstance(aeth, AETH) or self.error is not None:
            return
        kind, _ = aeth_kind(aeth.syndrome)
        msn = aeth.msn & _M16
        if kind == AETH_NAK:
            self.stats["rx_naks"] += 1
            self._fail(WcStatus.REM_ACCESS_ERR, now)
            return
        if kind != AETH_ACK:
            return
        self.stats["rx_acks"] += 1
        before = len(self.open)
        while self.open and ((msn - self.open[0].msn) & _M16) < 0x8000:
            msg = self.open[0]
            if msg.next_offset < len(msg.data):
                break  # not all sent: an ACK for it cannot be ours
            self.open.popleft()
            if msg.wr.signaled:
                self.completions.append(WorkCompletion(
                    msg.wr.wr_id, WcStatus.SUCCESS, msg.wr.opcode.wc_opcode, self.qpn,
                    byte_len=len(msg.data)))
        if len(self.open) < before:
            self.timeouts = 0
        self._await_ack(now, progress=len(self.open) < before)

    # -- timers --------------------------------------------------------------------------

    def wait(self) -> float:
        """The timeout in force: ``rto`` for the linear retries, doubling after them."""
        k = self.timeouts - self.retry_linear
        return self.rto * (1 << min(k, 20)) if k > 0 else self.rto

    def deadline(self) -> float | None:
        """When the oldest outstanding packet times out (None: nothing outstanding); or the
        earliest delayed resend."""
        d = None
        for p in self.sb.unacked.values():
            d = p.sent_at + self.wait()
            break
        if d is None and self.ack_wait is not None:
            d = self.ack_wait + self.wait()
        later = self.sb.retx.later
        if later:
            t = min(later.values())
            d = t if d is None or t < d else d
        p = self.next_probe
        if p is not None and (d is None or p < d):
            d = p
        r = self.recheck_at
        if r is not None and (d is None or r < d):
            d = r
        if self.held and self.gate is not None:  # the port has room again
            r = self.gate.resume_at()
            if d is None or r < d:
                d = r
        return d if self.error is None else None

    def on_timer(self, now: float) -> None:
        if self.held and self.gate is not None and self.gate.resume_at() <= now:
            self.held = False  # the next pull decides anew (not due again while paused)
        sb = self.sb
        if self.recheck_at is not None and self.recheck_at <= now:
            self._find_losses(now)
        sb.retx.release_due(now)
        oldest = next(iter(sb.unacked.values()), None)
        if oldest is None and self.ack_wait is not None and self.ack_wait + self.wait() <= now:
            # every packet SACKed, the transport ACK not come: lost, or the peer is gone
            if self._retry(now):
                self.ack_wait, self.ack_request_due = now, True
                if self.trace.enabled:
                    self.trace.event("ack_request", now, qp=self.qpn, timeouts=self.timeouts)
            return
        if oldest is None or oldest.sent_at + self.wait() > now or not self._retry(now):
            return
        if self.trace.enabled:
            self.trace.timer_fired(now, qp=self.qpn, psn=oldest.psn & _M24, ev=oldest.ev,
                                   timeouts=self.timeouts)
        self.evs.on_timeout(oldest.ev, now, trimmed=oldest.trimmed)
        if self.next_probe is None:
            self._arm_probes(now)
        if self.cc is not None:
            self.cc.on_loss(now)
        if sb.retx.at_once(oldest.psn):
            self.stats["retx_rto"] += 1

    def _retry(self, now: float) -> bool:
        """A timeout: one more retry, or (past ``retry_linear + retry_exp``) the QP fails
        with RETRY_EXC_ERR and False is returned."""
        self.timeouts += 1
        self.stats["rto"] += 1
        if self.retry_exp != RETRY_FOREVER and \
                self.timeouts > self.retry_linear + self.retry_exp:
            self._fail(WcStatus.RETRY_EXC_ERR, now)
            return False
        return True

    # -- errors --------------------------------------------------------------------------

    def _fail(self, status: WcStatus, now: float) -> None:
        """The QP enters the error state: the first open message completes with
        ``status``, every other posted one is flushed."""
        self.error = status
        msgs = list(self.open) + [m for m in self.queue if m not in self.open]
        self.open.clear()
        self.queue.clear()
        self.sb.clear()
        self.in_flight = 0
        for i, m in enumerate(msgs):
            st = status if i == 0 else WcStatus.WR_FLUSH_ERR
            self.completions.append(WorkCompletion(m.wr.wr_id, st, m.wr.opcode.wc_opcode,
                                                   self.qpn))

    def _flush_one(self, wr: SendWR) -> None:
        self.completions.append(WorkCompletion(wr.wr_id, WcStatus.WR_FLUSH_ERR,
                                               wr.opcode.wc_opcode, self.qpn))

# SPDX-License-Identifier: GPL-2.0-only
"""PDS for RUD, initiator side: PSNs, SYN establishment, ACK/SACK/NACK handling, RTO, CLOSE.

Behaviour follows ``/work/shared/specs/uet.md`` (R for behaviour, W for layout);
each rule cites the section it implements. The target side is in
:mod:`emu.transports.uet.target`; packet construction shared by both is here.

The initiator keeps every outstanding packet as ``(message, offset, length)``
and rebuilds its bytes on retransmission, so memory follows the window, not
the data. A packet leaves the outstanding set when an ACK covers it
cumulatively (CACK_PSN), names it (ACK_PSN) or marks it in the 64-bit SACK
bitmap; a message completes when all its packets are ACKed and the target's
SES response has arrived.
"""

from __future__ import annotations

from typing import Any, Protocol

from emu.core.cq import WcStatus
from emu.core.datagram import Gather
from emu.core.psn import PSN32
from emu.core.reliable.retransmit import expired
from emu.core.sack import SACK_BITS
from emu.core.trace import Trace
from emu.transports.uet import fastpath as FP
from emu.transports.uet import pdc as D
from emu.transports.uet import rod
from emu.transports.uet import ses as S
from emu.transports.uet.pdc import InitiatorPdc, PdcState, Reaction, TxMessage, TxPacket
from emu.transports.uet.ses_initiator import read_room
from emu.wire.codec.uet import (
    PdsControl,
    PdsControlSyn,
    PdsNack,
    PdsRequest,
    PdsRequestSyn,
    encode_packet,
)

_M = PSN32.mask
_NH_REQ_STD = 3


class PdsHost(Protocol):
    """What the PDS logic needs from its engine (config, output, events)."""

    rto: float
    rto_max: float
    loss_threshold: int
    loss_probes: bool
    tx_hold: float
    rx_at: float  # when the datagram being handled reached the port (round trips end there)
    max_retries: int
    nack_retx_delay: float
    mtu: int
    job_id: int
    trace: Trace
    stats: Any

    def emit(self, buf: bytearray | Gather, addr: Any, entropy: int | None, ctrl: bool
             ) -> None: ...

    def finish(self, pdc: InitiatorPdc, msg: TxMessage, status: Any, rc: int,
               vendor: int = 0) -> None: ...

    def pdc_ended(self, pdc: InitiatorPdc, old: PdcState, reason: str,
                  status: WcStatus | None) -> None: ...


def s16(x: int) -> int:
    """Clamp a PSN offset into the signed 16-bit wire field."""
    return -32768 if x < -32768 else 32767 if x > 32767 else x


# -- packet builders (used by both halves) -------------------------------------------


def nack_packet(code: int, psn: int, spdcid: int, dpdcid: int, payload: int = 0, *,
                retx: bool = False, m: bool = False) -> bytearray:
    """A NACK (uet.md: PDS headers, NACK): ``psn`` is the wire PSN being refused."""
    return encode_packet(PdsNack(m=int(m), retx=int(retx), nack_code=code, nack_psn=psn & _M,
                                 spdcid=spdcid, dpdcid=dpdcid, nack_payload=payload & _M))


def control_packet(pdc: InitiatorPdc, ctl_type: int, psn: int, *, ar: bool = True,
                   retx: bool = False, payload: int = 0, opaque: int = 0) -> bytearray:
    """A CP from the initiator; before the first ACK it carries SYN + psn_offset
    instead of DPDCID, like every request (uet.md: PDS headers, CP). ISROD marks a
    ROD PDC's CPs (R); ``opaque`` is a PROBE's probe_opaque."""
    isrod = int(pdc.mode is D.Mode.ROD)
    if pdc.dpdcid is None:
        off = psn - pdc.start_psn
        h: Any = PdsControlSyn(ctl_type=ctl_type, isrod=isrod, retx=int(retx), ar=int(ar),
                               probe_opaque=opaque, psn=psn & _M, spdcid=pdc.pdcid,
                               psn_offset=min(max(off, 0), 0xFFF), ctl_payload=payload & _M)
    else:
        h = PdsControl(ctl_type=ctl_type, isrod=isrod, retx=int(retx), ar=int(ar),
                       probe_opaque=opaque, psn=psn & _M, spdcid=pdc.pdcid,
                       dpdcid=pdc.dpdcid, ctl_payload=payload & _M)
    return encode_packet(h)


def _askable(pkt: TxPacket) -> bool:
    """Whether a loss probe may ask about ``pkt`` with CP ACK_REQ: a data packet whose
    answer is an ACK, not a READ request — the target answers an ACK_REQ for a READ it
    has with the read data again (as it does a duplicate request), and a READ's ACK is
    slow because that data is in the way, not because the request was lost."""
    msg = pkt.msg
    return msg is not None and pkt.ctl_type < 0 and msg.opcode != S.OP_READ


class Initiator:
    """The initiator half of RUD for every initiator PDC of one engine."""

    def __init__(self, host: PdsHost) -> None:
        self.h = host
        self.runs = 0  # runs of middles sent in one go (_plan)

    # -- sending -----------------------------------------------------------------

    def _request(self, pdc: InitiatorPdc, msg: TxMessage, psn: int, off: int, n: int,
                 retx: bool, ar: bool, oldest: int | None = None) -> Any:
        """One data request: ``n`` bytes of ``msg`` from ``off`` at extended ``psn`` — the
        one encoder of a single request, first sends and retransmissions alike. RUD_REQ
        with SYN until DPDCID is known (uet.md: Behaviour, PDC); CLEAR_PSN = our oldest
        unACKed PSN (``oldest``, default the PDC's now) tells the target what we have
        seen ACKed."""
        clear = s16((pdc.oldest if oldest is None else oldest) - psn)
        if pdc.dpdcid is not None and msg.shape == S.SH.NH_STANDARD and msg.ext is None:
            # the bulk of a transfer: one struct call, no copy for a daemon (.fastpath)
            rl = msg.req_length
            return FP.request(pdc.mode, int(retx), int(ar), clear, psn & _M, pdc.pdcid,
                              pdc.dpdcid, msg.opcode, int(off + n >= msg.length),
                              int(off == 0), msg.message_id, self.h.job_id, msg.dest_ep,
                              msg.remote_addr, msg.ep, msg.rkey, n, off,
                              msg.length if rl is None else rl, msg.data[off:off + n],
                              self.h.gather)
        # the SES header shape (small/medium/standard) is the message's (.ses_shape)
        nh, ses, ext = S.SH.request_parts(msg, off, n, self.h.job_id)
        if pdc.dpdcid is None:
            pds: Any = PdsRequestSyn(type=pdc.mode, next_hdr=nh, retx=int(retx),
                                     ar=int(ar), clear_psn_offset=clear, psn=psn & _M,
                                     spdcid=pdc.pdcid, psn_offset=psn - pdc.start_psn)
        else:
            pds = PdsRequest(type=pdc.mode, next_hdr=nh, retx=int(retx), ar=int(ar),
                             clear_psn_offset=clear, psn=psn & _M, spdcid=pdc.pdcid,
                             dpdcid=pdc.dpdcid)
        return encode_packet(pds, ses, ext, msg.data[off:off + n])

    def rto_of(self, pdc: InitiatorPdc) -> float:
        """The PDC's retransmission timeout: its measured RTO, or the engine's ceiling
        until the first RTT sample (RFC 6298 starts high, too)."""
        return pdc.rtt.current(self.h.rto_max)

    def _arm(self, pdc: InitiatorPdc, now: float) -> None:
        """The retransmit timer fires one RTO after ``now`` unless it is due sooner."""
        pdc.timers.set_if_earlier("retx", now + self.rto_of(pdc))

    def probe_timeout(self, pdc: InitiatorPdc) -> float:
        """How long the PDC may send nothing and hear of no progress before a loss probe
        (:meth:`probe`): the measured round trip's probe timeout
        (:meth:`~emu.core.rto.RtoEstimator.probe_timeout`) plus what our port may hold
        a datagram (``tx_hold``, as every timeout here), doubled for each probe since
        the last progress; 0.0 — no probe — before the first round-trip sample, with
        probes off, or where it would not come before the RTO."""
        if not self.h.loss_probes:
            return 0.0
        pto = pdc.rtt.probe_timeout()
        if not pto:
            return 0.0
        pto = (pto + self.h.tx_hold) * (1 << min(pdc.probes, 16))
        return pto if pto < self.rto_of(pdc) else 0.0

    def _arm_probe(self, pdc: InitiatorPdc, now: float) -> None:
        """The loss probe is due one probe timeout after the last transmission or progress
        (``now``). Lazily: the timer, once armed, stays; when it fires early
        (:meth:`_probe_due`) it is moved to the deadline then in force. Why: this runs on
        every ACK that releases anything and every send batch, and re-arming each time
        cost the sans-IO loss-free 32 MiB stream 4 % more time overall."""
        pdc.quiet_since = now
        if "probe" not in pdc.timers:
            pto = self.probe_timeout(pdc)
            if pto:
                pdc.timers.set("probe", now + pto)

    def _probe_due(self, pdc: InitiatorPdc, now: float) -> None:
        """The probe timer fired: probe if the PDC has been quiet for a probe timeout,
        else wait for the rest of it."""
        pto = self.probe_timeout(pdc)
        if not pto:
            return
        due = pdc.quiet_since + pto
        if due > now:
            pdc.timers.set("probe", due)
        else:
            self.probe(pdc, now)

    def pull(self, pdc: InitiatorPdc, now: float) -> None:
        """Emit what this PDC may send now: control packets, urgent retransmissions,
        new packets within the window, then CLOSE once everything is ACKed."""
        if pdc.state in (PdcState.CLOSED, PdcState.ERROR):
            return
        h = self.h
        st = h.stats
        while pdc.ctl_pending:
            ctl, psn = pdc.ctl_pending.pop(0)
            h.emit(control_packet(pdc, ctl, psn), pdc.addr, None, True)
            st["tx_cp"] += 1
        owed = pdc.sb.retx
        while owed:
            self._retransmit(pdc, owed.pop(), now)
        self._send_new(pdc, now)
        if (pdc.state is PdcState.CLOSING and pdc.close_psn is None and not pdc.queue
                and not pdc.sb.unacked and not pdc.msgs):
            self._send_close(pdc, now)

    def _retransmit(self, pdc: InitiatorPdc, psn: int, now: float, reason: str = "nack") -> None:
        """Resend one packet with RETX|AR (uet.md: Retransmit); a new entropy, so a
        retransmission avoids the path that lost it."""
        pkt = pdc.sb.unacked.get(psn)
        if pkt is None:
            return
        pdc.sb.resending(pkt, now)
        ent = None
        if pkt.ctl_type >= 0:
            buf = control_packet(pdc, pkt.ctl_type, psn, retx=True)
        else:
            assert pkt.msg is not None
            buf = self._request(pdc, pkt.msg, psn, pkt.offset, pkt.length, True, True)
            ent = self.h.flowctl.resent(pdc, pkt, now, lost=reason != "nack")
        self.h.emit(buf, pdc.addr, ent, pkt.ctl_type >= 0)
        self.h.stats["tx_retransmits"] += 1
        self._arm(pdc, now)
        self._arm_probe(pdc, now)
        if self.h.trace.enabled:  # packet_sent for every packet on the wire, retx flagged
            self.h.trace.packet_sent(now, pdc=pdc.pdcid, psn=psn & _M, len=pkt.length,
                                     ent=ent, retx=True, ctl=pkt.ctl_type >= 0)
            self.h.trace.packet_retransmitted(now, pdc=pdc.pdcid, psn=psn & _M, reason=reason,
                                              ent=ent)

    # New data goes out in batches: *plan* (how many packets may go now and how big),
    # *commit* (PSNs, outstanding records, accounting, counters, timer — once per batch),
    # *encode* (bytes, Gather or Run). One packet is a batch of one; every rule is in one
    # of the three, whatever the batch size.

    def _send_new(self, pdc: InitiatorPdc, now: float) -> None:
        """New packets while the window and the controller allow, batch after batch."""
        h = self.h
        sb = pdc.sb
        win = pdc.send_window()
        while pdc.queue and pdc.state is not PdcState.CLOSED:
            if sb.span >= win:
                h.stats["tx_window_full"] += 1
                return
            msg = pdc.queue[0]
            if not read_room(pdc, msg, h.flowctl.line_rate):
                h.stats["tx_read_window_full"] += 1
                return
            k, n, run = self._plan(pdc, msg, now, win)
            if not k:
                return
            oldest, off = sb.oldest, msg.next_offset
            first, ents, eom = self._commit(pdc, msg, k, n, now)
            self._encode(pdc, msg, first, off, k, n, oldest, ents,
                         self._asks_ack(pdc, eom, win), run, now)

    def _plan(self, pdc: InitiatorPdc, msg: TxMessage, now: float, win: int
              ) -> tuple[int, int, bool]:
        """``(k, n, run)``: ``k`` packets of ``n`` bytes of ``msg`` may go now — a run of
        full-size middles (daemon engines: the bulk of a WRITE or SEND) or one packet;
        ``k = 0``: wait (window, controller).

        Why runs: per packet, asking the window, the controller and the path policy
        separately cost ~5 µs of Python per 8 KiB packet at the sender, most of it
        not needed between two middles of one message. A run is what those questions
        would have allowed one by one — up to the last packet the window or the
        controller allow now — and never holds the message's last packet."""
        h = self.h
        if msg.next_offset and h.gather and not h.trace.enabled:
            k = self._run_length(pdc, msg, now, win)
            if k:
                return k, h.mtu, True
        n = min(h.mtu, msg.length - msg.next_offset)
        return (1, n, False) if h.flowctl.may_send(pdc, n, now) else (0, 0, False)

    def _run_length(self, pdc: InitiatorPdc, msg: TxMessage, now: float, win: int) -> int:
        """How many full-size middles of ``msg`` may go in one run now (0: none)."""
        if pdc.dpdcid is None or msg.shape != S.SH.NH_STANDARD or msg.ext is not None:
            return 0
        h = self.h
        mtu = h.mtu
        sb = pdc.sb
        k = min((msg.length - msg.next_offset - 1) // mtu,  # full packets before the last
                win - sb.span, 64,
                # a run's PSN field counts up without wrapping (emu.core.datagram.Run)
                _M + 1 - (sb.next_psn & _M))
        if k <= 0:
            return 0
        fl = h.flowctl
        allow = fl.allowance(pdc)
        if allow is not None:
            k = min(k, allow // mtu)
            if k <= 0:
                return 0  # (asked before may_send, whose refusals count and ask for credit)
        return k if fl.may_send(pdc, mtu, now) else 0

    def _commit(self, pdc: InitiatorPdc, msg: TxMessage, k: int, n: int, now: float
                ) -> tuple[int, list[int], bool]:
        """Take ``k`` PSNs for ``n``-byte packets of ``msg``: outstanding records, the
        message's and the controller's accounting, counters and the retransmit timer;
        returns (first extended PSN, their entropies, whether the message is all sent)."""
        h = self.h
        off = msg.next_offset
        if off == 0:
            pdc.msgs[msg.message_id] = msg
        sb = pdc.sb
        psn = first = sb.take(k)
        unacked = sb.unacked  # (Scoreboard.track, inlined: a dict store per packet)
        for _ in range(k):
            unacked[psn] = TxPacket(psn, msg, off, n, now)
            psn += 1
            off += n
        msg.unacked += k
        msg.next_offset = off
        eom = off >= msg.length
        if eom:
            msg.all_sent = True
            msg.eom_psn = psn - 1
            pdc.queue.popleft()
        ents = h.flowctl.sent(pdc, first, k, n, now)
        h.stats["tx_data_packets"] += k
        self._arm(pdc, now)
        self._arm_probe(pdc, now)
        return first, ents, eom

    def _asks_ack(self, pdc: InitiatorPdc, eom: bool, win: int) -> bool:
        """AR on a batch's last packet: on a message's last packet and on the last we can
        send for now, so the tail never waits for the RTO (uet.md: ACK generation — AR)."""
        return (eom or not pdc.queue or pdc.sb.span >= win
                or self.h.flowctl.blocks(pdc, self.h.mtu))

    def _encode(self, pdc: InitiatorPdc, msg: TxMessage, first: int, off: int, k: int,
                n: int, oldest: int, ents: list[int], ar: bool, run: bool, now: float) -> None:
        """Emit a committed batch: a run as one :class:`~emu.core.datagram.Run` when the
        daemon takes them (``runs``), else one request per packet; AR on the last."""
        h = self.h
        if run:
            self.runs += 1
            if h.runs:
                rl = msg.req_length
                h.emit_run(FP.middle_headers(
                    k, pdc.mode, s16(oldest - first), first & _M, pdc.pdcid, pdc.dpdcid,
                    msg.opcode, msg.message_id, h.job_id, msg.dest_ep, msg.remote_addr,
                    msg.ep, msg.rkey, n, off, msg.length if rl is None else rl, ar),
                    msg.data[off:off + k * n], n, ents, pdc.addr)
                return
        emit, request, addr, last, trace = h.emit, self._request, pdc.addr, first + k - 1, h.trace
        for psn, ent in zip(range(first, first + k), ents, strict=True):
            emit(request(pdc, msg, psn, off, n, False, ar and psn == last, oldest), addr, ent,
                 False)
            if trace.enabled:
                trace.packet_sent(now, pdc=pdc.pdcid, psn=psn & _M, len=n, ent=ent,
                                  retx=False, msg=msg.message_id, syn=pdc.dpdcid is None)
            off += n

    def _send_close(self, pdc: InitiatorPdc, now: float) -> None:
        """CLOSE consumes a PSN and asks for an ACK (uet.md: Behaviour, Close)."""
        sb = pdc.sb
        if sb.next_psn == sb.start:  # never sent anything: nothing to tear down
            self._end(pdc, PdcState.CLOSED, "closed (unused)", None)
            return
        psn = pdc.close_psn = sb.take(1)
        sb.track(TxPacket(psn, None, 0, 0, now, ctl_type=D.CP_CLOSE))
        self.h.emit(control_packet(pdc, D.CP_CLOSE, psn), pdc.addr, None, True)
        self.h.stats["tx_close"] += 1
        self._arm(pdc, now)

    # -- receiving -------------------------------------------------------------------

    def reply_check(self, pdc: InitiatorPdc, pds: Any, is_ack: bool) -> str | None:
        """None if an ACK/NACK for ``pdc`` may act, else the drop counter to bump.

        Why (issue #14): the target answers whatever arrives — a forged request
        draws a NACK or an ACK addressed to the initiator's host with the forger's
        SPDCID — so what comes back must be checked against what we sent: the
        target's PDCID once we know it (a NACK for a PDC the target does not know
        carries 0), and a cumulative ACK of nothing we have sent is refused (it
        would release packets the target never got: a silent data loss)."""
        spd = pds.spdcid
        if pdc.dpdcid is not None and spd != pdc.dpdcid and (is_ack or spd):
            return "rx_drop_reply_pdcid"
        if is_ack and pdc.ext(pds.cack_psn) >= pdc.sb.next_psn:
            return "rx_drop_ack_unsent"
        return None

    def _nack_for_us(self, pdc: InitiatorPdc, psn: int) -> bool:
        """Whether a NACK that would end or rewind ``pdc`` names a PSN it may be about:
        an outstanding packet, the CLOSE, or the last packet of a message still waiting
        for its response (the PSN of our ACK_REQ). A forger blind to our PSNs hits
        this set with odds of about a window in 2^32."""
        if psn in pdc.sb.unacked or psn == pdc.close_psn:
            return True
        return any(m.eom_psn == psn and m.waiting_since is not None for m in pdc.msgs.values())

    def on_ack(self, pdc: InitiatorPdc, ack: Any, rsp: Any, now: float) -> None:
        """Apply an ACK / ACK_CC: learn DPDCID, release packets (CACK, ACK_PSN, SACK),
        take the SES response, honour the REQ field (uet.md: PDS headers, ACK)."""
        if pdc.state in (PdcState.CLOSED, PdcState.ERROR):
            return
        h = self.h
        pdc.acks += 1
        if pdc.dpdcid is None:
            pdc.dpdcid = ack.spdcid  # the first ACK supplies DPDCID (uet.md: PDC)
            if pdc.state is PdcState.SYN_SENT:
                pdc.move(PdcState.ESTABLISHED)
            if h.trace.enabled:
                h.trace.state_changed(now, "SYN_SENT", pdc.state.value, pdc=pdc.pdcid,
                                      dpdcid=ack.spdcid)
        mpr = getattr(ack, "mpr", 0)
        if mpr:  # never run past the target's window (uet.md: Window)
            pdc.window = min(pdc.window, mpr * D.MPR_UNIT)
        if ack.m:
            pdc.last_ack_ecn += 1
        sb = pdc.sb
        cack = pdc.ext(ack.cack_psn)
        if not ack.p:
            # the RTO's sample is the whole loop as this timer sees it — to ``now``, with
            # what the daemons held at both ends (NSCC's, held out, is FlowCtl.on_ack's);
            # taken with a fixed RTO too, whose loss probe needs the round trip
            r = sb.round_trip(cack + ack.ack_psn_offset, now)  # (Karn's rule)
            if r is not None:
                pdc.rtt.sample(r, h.rto, h.rto_max)
        # when this ACK would have arrived had the target not held it (_released, rto_held)
        held = D.held_out(h.rx_at, ack) if h.stats.get("rto_retransmits") else None
        # release what the ACK covers: cumulatively (CACK), by name (ACK_PSN), by SACK
        before = len(sb.unacked)
        pkts = sb.ack_through(cack)
        if pkts:
            self._released(pdc, pkts, now, held)
        if not ack.p:
            pkt = sb.ack(cack + ack.ack_psn_offset)
            if pkt is not None:
                self._released(pdc, (pkt,), now, held)
        bm = getattr(ack, "sack_bitmap", 0)
        if bm:
            pkts = sb.sack(cack + ack.sack_psn_offset, bm)
            if pkts:
                self._released(pdc, pkts, now, held)
        if len(sb.unacked) < before:  # progress: the next probe is a timeout away again
            if pdc.probes:  # (not the backed-off one)
                pdc.probes = 0
                pdc.timers.cancel("probe")
            self._arm_probe(pdc, now)
        if h.loss_threshold:
            # nothing new to send: the packets after a hole are all there will be
            for psn in sb.presumed_lost(h.loss_threshold, tail=not pdc.queue):
                h.stats["sack_retransmits"] += 1
                self._retransmit(pdc, psn, now, reason="sack")
        if (pdc.probe_at is not None and ack.retx and not ack.p
                and hasattr(ack, "sack_psn_offset")):
            # after a loss probe, an answer to it or to a retransmission (RETX echoed: no
            # ACK of a first transmission, which may have waited in a queue since before
            # the packets it shows missing arrived): what it shows missing and was sent
            # before the probe is lost (Scoreboard.shown_missing)
            for psn in sb.shown_missing(cack, cack + ack.sack_psn_offset, bm, pdc.probe_at):
                h.stats["probe_retransmits"] += 1
                self._retransmit(pdc, psn, now, reason="probe")
            if sb.oldest >= pdc.probe_end:
                pdc.probe_at = None  # all it asked about is settled: ACKs stop looking
        if rsp is not None:
            msg = pdc.msgs.get(rsp.message_id)
            if msg is not None and msg.all_sent:
                msg.response = rsp.return_code
                self._check(pdc, msg, now)
        if ack.req == D.ACK_REQ_CLEAR:
            pdc.ctl_pending.append((D.CP_CLEAR, pdc.oldest))
        elif ack.req == D.ACK_REQ_CLOSE and pdc.state is PdcState.ESTABLISHED:
            pdc.move(PdcState.CLOSING)  # the target asks us to close (uet.md: Close)
        if not sb.unacked and not any(m.waiting_since is not None for m in pdc.msgs.values()):
            pdc.timers.cancel("retx")  # nothing left to time out (or to probe for)
            pdc.timers.cancel("probe")
        if h.trace.enabled:
            h.trace.ack_received(now, pdc=pdc.pdcid, cack=ack.cack_psn,
                                 sack=bm, outstanding=len(pdc.unacked))

    def _released(self, pdc: InitiatorPdc, pkts: Any, now: float,
                  held: float | None = None) -> None:
        """Packets an ACK took out of the outstanding set (the scoreboard already dropped any
        resend they were owed), oldest first: the controller's accounting and each
        message's count (complete at zero); a released CLOSE ends the PDC.

        ``held`` (after a retransmission timeout): when the ACK would have arrived had
        the target not held what it answers (its arrival less its ``service_time``).
        The packets had all reached the target by then, so one whose timeout fired
        later was there in time and its ACK came late only by the target's holding — a
        daemon that read or answered late, not the emulated network: counted as
        ``rto_held``, emulator overload (``docs/credibility.md``).

        Why one call per ACK part, not per packet: an ACK of a daemon's transfer
        releases ~20 packets, and three method calls per packet (release, flow
        accounting, message check) were most of the initiator's ~1 µs of ACK
        processing per data packet."""
        if held is not None:
            n = sum(1 for p in pkts if p.rto_at is not None and held < p.rto_at)
            if n:
                self.h.stats["rto_held"] += n
        self.h.flowctl.acked_many(pdc, pkts)
        for pkt in pkts:
            if pkt.ctl_type == D.CP_CLOSE:
                self._end(pdc, PdcState.CLOSED, "closed", None)
                return
            msg = pkt.msg
            if msg is not None:
                msg.unacked -= 1
                if not msg.unacked and msg.all_sent:
                    self._check(pdc, msg, now)

    def _check(self, pdc: InitiatorPdc, msg: TxMessage, now: float) -> None:
        if not msg.all_sent or msg.unacked:
            return
        if msg.response is None:
            if msg.waiting_since is None:  # ACKed, response lost: ask (probe, RTO)
                msg.waiting_since = now
                self._arm(pdc, now)
                self._arm_probe(pdc, now)
            return
        for m in rod.ready_in_order(pdc, msg) if pdc.mode is D.Mode.ROD else (msg,):
            del pdc.msgs[m.message_id]
            rc = m.response
            self.h.finish(pdc, m, WcStatus.SUCCESS if rc == S.RC_OK else S.wc_status(rc), rc)

    def on_nack(self, pdc: InitiatorPdc, nack: Any, now: float) -> None:
        """React per code (uet.md: NACK codes): retransmit (trimmed ones at once, others
        after ``nack_retx_delay``), close the PDC in error, or adopt NEW_START_PSN."""
        h = self.h
        code = nack.nack_code
        reaction = D.NACK_REACTIONS.get(code, Reaction.IGNORE)
        h.stats[D.nack_counter("rx_nack", code)] += 1
        if h.trace.enabled:
            h.trace.nack_received(now, pdc=pdc.pdcid, code=code, psn=nack.nack_psn,
                                  reaction=reaction.value)
        if pdc.state in (PdcState.CLOSED, PdcState.ERROR):
            return
        sb = pdc.sb
        psn = pdc.ext(nack.nack_psn)
        if (reaction is not Reaction.RETRANSMIT or code == D.NACK_ROD_OOO) and (
                reaction is not Reaction.IGNORE and not self._nack_for_us(pdc, psn)):
            h.stats["rx_drop_nack_unsent"] += 1  # it would end or rewind the PDC: prove it
            return
        if code == D.NACK_ROD_OOO and pdc.mode is D.Mode.ROD:
            rod.go_back(self, pdc, psn, now)
        elif reaction is Reaction.RETRANSMIT:
            if psn not in sb.unacked:
                # it arrived after all (SACK/ACK showed it): ask for fresh ACK state
                # instead of resending data (uet.md: Retransmit)
                if pdc.established and sb.sent(psn):
                    pdc.ctl_pending.append((D.CP_ACK_REQ, psn))
                return
            D.resend_for_nack(sb.retx, pdc.timers, psn, code, now, h.nack_retx_delay)
        elif reaction is Reaction.CLOSE:
            if pdc.state is PdcState.CLOSING and psn == pdc.close_psn:
                self._end(pdc, PdcState.CLOSED, "closed (target had forgotten it)", None)
                return
            name = f"NACK {code:#04x}"
            self.fail(pdc, WcStatus.REM_OP_ERR, name, vendor=code)
        elif reaction is Reaction.NEW_START_PSN:
            self.restart(pdc, nack.nack_payload, now)

    def restart(self, pdc: InitiatorPdc, new_start: int, now: float) -> None:
        """Adopt a new Start_PSN and resend every unfinished message from its start, with
        SYN again (uet.md: NACK codes — NEW_START_PSN: adopt payload, resend)."""
        unfinished = list(pdc.msgs.values()) + [m for m in pdc.queue
                                                  if m.message_id not in pdc.msgs]
        for m in unfinished:
            m.next_offset, m.all_sent, m.unacked = 0, False, 0
            m.eom_psn, m.response, m.waiting_since = None, None, None
        pdc.msgs.clear()
        pdc.queue.clear()
        pdc.queue.extend(unfinished)
        pdc.sb.restart(new_start & _M)
        pdc.timers.clear()
        pdc.start_psn = new_start & _M
        pdc.dpdcid = None
        pdc.close_psn = None
        pdc.probe_at, pdc.probes = None, 0
        if pdc.state is PdcState.ESTABLISHED:
            pdc.move(PdcState.SYN_SENT)
        self.h.stats["pdc_restarts"] += 1

    # -- timers --------------------------------------------------------------------------

    def on_timer(self, pdc: InitiatorPdc, now: float) -> None:
        """RTO: resend each packet older than ``rto``; after ``max_retries`` the PDC
        closes in error (uet.md: Retransmit). Messages waiting only for their SES
        response get a CP ACK_REQ for their last PSN instead of data."""
        h = self.h
        for name in pdc.timers.expired(now):
            if h.trace.enabled:  # "retx" is the RTO; "nack" the delayed NACK resend
                h.trace.timer_fired(now, pdc=pdc.pdcid, timer=name)
            if name == "nack":
                nxt = pdc.sb.retx.release_due(now)
                if nxt is not None:
                    pdc.timers.set("nack", nxt)
            elif name == "retx":
                self._rto(pdc, now)
            elif name == "probe":
                self._probe_due(pdc, now)
            if pdc.state in (PdcState.CLOSED, PdcState.ERROR):
                return

    def probe(self, pdc: InitiatorPdc, now: float) -> None:
        """A loss probe: nothing sent and no progress for a probe timeout with packets
        outstanding, so ask the target where it stands — a CP ACK_REQ (uet.md: Control
        types; Retransmit: "send CP ACK_REQ instead of data") for the newest outstanding
        packet of each 64-PSN stretch, whose answers' SACKs cover every outstanding
        packet (the target's answer shows the PSN asked about, arrived or not:
        ``Target.on_control``). What they show missing was lost (:meth:`on_ack`,
        :meth:`~emu.core.reliable.scoreboard.Scoreboard.shown_missing`) and is resent
        at once; a lost probe or answer is probed again after twice the wait; the RTO
        stays the last resort. A message whose packets are all ACKed but whose SES
        response has not come (the ACK that carried it was lost) is asked for it the
        same way (ACK_REQ for its last PSN), a probe timeout after, not an RTO.

        Why: the SACK count (``loss_threshold``) needs packets sent after a loss, and
        there are none after a transfer's last packets nor after a retransmission
        made while the window was full. Measured (sans-IO, 400 Gb/s, ~7 µs round trip,
        2 % loss, 32 MiB as 1 MiB WRITEs, ``tests/transports/uet/test_loss_recovery.py``):
        in 6 of 10 seeds such losses waited the 5 ms RTO one to three times, and the
        transfer took 6-16 ms (17-45 Gb/s); with probes 1.0-1.2 ms, no RTO."""
        if pdc.state not in (PdcState.ESTABLISHED, PdcState.CLOSING):
            return
        asks: list[int] = []
        unacked = pdc.sb.unacked
        for psn in reversed(unacked):  # newest first: one ACK_REQ per SACK window
            if (not asks or psn <= asks[-1] - SACK_BITS) and _askable(unacked[psn]):
                asks.append(psn)
        asks += [m.eom_psn for m in pdc.msgs.values() if m.waiting_since is not None
                 and m.eom_psn is not None and m.opcode != S.OP_READ]
        if not asks:
            return  # a CLOSE or READs only: the RTO resends them
        h = self.h
        for psn in asks:  # RETX: the answer echoes it (on_ack tells it from stale ACKs)
            h.emit(control_packet(pdc, D.CP_ACK_REQ, psn, retx=True), pdc.addr, None, True)
        pdc.probe_at, pdc.probe_end = now, pdc.sb.next_psn
        pdc.probes += 1
        h.stats["tx_loss_probes"] += len(asks)
        if h.trace.enabled:
            h.trace.event("loss_probe", now, pdc=pdc.pdcid, psns=[p & _M for p in asks],
                          probes=pdc.probes)
        self._arm_probe(pdc, now)  # (the timer fired: armed anew, a doubled timeout on)

    def _rto(self, pdc: InitiatorPdc, now: float) -> None:
        h = self.h
        rto = self.rto_of(pdc)
        due, nxt = expired(pdc.sb.unacked.values(), now, rto)
        for pkt in due:
            if pkt.retries >= h.max_retries:
                self.fail(pdc, WcStatus.RETRY_EXC_ERR, "retries exhausted")
                return
            pkt.retries += 1
            if pkt.rto_at is None:
                pkt.rto_at = now
            h.stats["rto_retransmits"] += 1
            self._retransmit(pdc, pkt.psn, now, reason="rto")
        if due:
            nxt = now + rto if nxt is None or now + rto < nxt else nxt
        for msg in pdc.msgs.values():
            w = msg.waiting_since
            if w is None:
                continue
            if w + rto > now:
                nxt = w + rto if nxt is None or w + rto < nxt else nxt
                continue
            if msg.retries >= h.max_retries:
                self.fail(pdc, WcStatus.RETRY_EXC_ERR, "no SES response")
                return
            msg.retries += 1
            msg.waiting_since = now
            pdc.ctl_pending.append((D.CP_ACK_REQ, msg.eom_psn))
            h.stats["tx_ack_req_for_response"] += 1
            nxt = now + rto if nxt is None or now + rto < nxt else nxt
        if nxt is not None:
            pdc.timers.set("retx", nxt)

    # -- ending -------------------------------------------------------------------------

    def fail(self, pdc: InitiatorPdc, status: WcStatus, reason: str, vendor: int = 0) -> None:
        """Close in error: every unfinished message completes with ``status``."""
        for msg in list(pdc.msgs.values()) + [m for m in pdc.queue if m.message_id
                                              not in pdc.msgs]:
            self.h.finish(pdc, msg, status, 0, vendor)
        pdc.msgs.clear()
        pdc.queue.clear()
        self._end(pdc, PdcState.ERROR, reason, status)

    def _end(self, pdc: InitiatorPdc, state: PdcState, reason: str,
             status: WcStatus | None) -> None:
        old = pdc.move(state)
        pdc.sb.clear()
        pdc.ctl_pending.clear()
        pdc.timers.clear()
        self.h.pdc_ended(pdc, old, reason, status)

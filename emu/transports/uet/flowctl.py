# SPDX-License-Identifier: GPL-2.0-only
"""Per-PDC congestion control (:mod:`emu.cc`) and path choice (:mod:`emu.paths`) for UET.

Why a module of its own: the PDS logic (:mod:`.pds`) is about reliability;
*how much* to send and *on which entropy* are plug-ins it consults through
a handful of hooks, so the plug-ins can change without touching PDS and PDS
can change without knowing which plug-ins run. One :class:`FlowCtl` per
engine keeps, per initiator PDC, the controller, the path policy and a
:class:`~emu.core.reliable.paths.PathLedger` (bytes in flight, and for each
outstanding PSN the entropy and time it was sent on) — what is needed to tell
the right path and controller what an ACK, NACK or timeout means.

Hooks (all sans-IO, ``now`` passed in):

* ``may_send`` / ``sent`` / ``resent`` — from :meth:`.pds.Initiator._send_new`
  and ``_retransmit``: the window/credit check and the entropy to use;
* ``acked_many`` — the packets an ACK released; ``on_ack`` / ``on_nack`` — per ACK/NACK
  with the entropy it echoes (its UDP source port) and its ECN M bit;
* RCCC credit: CREDIT packets (:mod:`.control`) feed ``cc.on_credit``; a
  credit-blocked PDC sends CREDIT_REQ, again every ``credit_retry`` while
  still blocked (a lost request or a zero grant must not stall it). Before
  the first ACK a CREDIT could not reach the PDC (it has no DPDCID yet), so
  one uncredited packet opens it. The
  target answers from one :class:`~emu.cc.rccc.RcccReceiver` bucket per
  engine, at most ``quantum`` per request, so all senders together never
  get credit faster than the engine's ``line_rate``.

Without a controller (``cc=None``) nothing limits sending, as before; the
default path policy is ``"oblivious"`` over the engine's entropies, drawing
exactly as the engine always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from emu import cc as CC
from emu import paths as P
from emu.cc.rccc import RcccReceiver
from emu.core.reliable.paths import PathLedger
from emu.transports.uet import pdc as D
from emu.transports.uet.pdc import InitiatorPdc, TargetPdc, TxPacket

#: the weight of each new sample in :attr:`FlowCtl.emu_hold`'s averages (~8 ACKs)
HOLD_GAIN = 1 / 8

#: the longest emulator hold the window leaves out (seconds): the daemons' transmit FIFO
#: under ``emu up`` (``--tx-lead``); a pair at 1 Gb/s holds ~0.5-1 ms (mean + 2 deviations)
HOLD_MAX = 2e-3
#: the congestion controls a UET flow runs (besides none: ``cc=None``)
UET_CCS = ("nscc", "rccc")


@dataclass(eq=False)
class Flow:
    """One initiator PDC's plug-ins and accounting."""

    cc: CC.CongestionControl | None
    path: P.PathPolicy
    #: entropy and send time per PSN, bytes in flight, what the last ACK released
    #: (emu.core.reliable.paths)
    ledger: PathLedger = field(default_factory=PathLedger)
    loss_at: float = -1.0  # last time a timeout was reported to cc (once per RTO round)
    credit_req_at: float | None = None
    #: the controller refused a packet and no ACK has come since (its port may idle)
    blocked: bool = False


class FlowCtl:
    """The engine's plug-in glue (see the module docstring)."""

    def __init__(self, host: Any, *, cc: str | None, cc_params: dict[str, Any] | None,
                 paths: str, path_params: dict[str, Any] | None, line_rate: float,
                 credit_retry: float = 50e-6) -> None:
        self.h = host
        self.cc_name = cc
        self.cc_params = dict(cc_params or {})
        self.paths_name = paths
        self.path_params = dict(path_params or {})
        self.line_rate = line_rate
        self.credit_retry = credit_retry
        ents = host.entropies  # a range (the default set) is kept: every flow shares it
        if not isinstance(ents, range):
            ents = tuple(dict.fromkeys(ents))
        self.entropies: Sequence[int] = ents
        #: draws for packets with no PDC (RUDI, UUD): oblivious, the engine's historic draw
        self.default = P.create("oblivious", ents, host.rng)
        self.flows: dict[int, Flow] = {}
        # fail at construction, not at the first packet, on a bad name or parameter
        P.create(paths, ents, host.rng, **self.path_params)
        if cc is not None and cc not in UET_CCS:
            # the registry also holds DCQCN, which reacts to RoCEv2 CNPs a UET flow never gets
            raise ValueError(f"unknown UET congestion control {cc!r}; have none, "
                             + ", ".join(UET_CCS))
        if cc is not None:
            CC.create(cc, line_rate, **self._cc_kw())
        #: the emulator's own share of a feedback loop: how long after a NIC that reads
        #: and answers at once would have had an ACK this engine took it in (the target's
        #: ``service_time`` plus this daemon's late read; 0 sans-IO) — smoothed mean plus
        #: twice the mean deviation, as an RTO estimator bounds a round trip, so the
        #: usual late reads fit, not only the average one. See :meth:`_windowed`
        self.emu_hold = 0.0
        self._hold_mean = self._hold_dev = 0.0
        #: when this engine's port finishes the frames it was given (a model of its
        #: serializer at ``line_rate``): it idles from then while every flow waits
        self.wire_free = 0.0
        self.receiver: RcccReceiver | None = None
        if cc == "rccc":
            self.receiver = RcccReceiver(line_rate, quantum=4 * host.mtu)
            host.control.credit_source = self._credit_source
            host.control.on_credit = self._on_credit

    def _cc_kw(self) -> dict[str, Any]:
        kw = dict(self.cc_params)
        if self.cc_name == "nscc":
            kw.setdefault("mtu", self.h.mtu)
        return kw

    def flow(self, pdc: InitiatorPdc) -> Flow:
        f = self.flows.get(pdc.pdcid)
        if f is None:
            c = None if self.cc_name is None else CC.create(self.cc_name, self.line_rate,
                                                            self.h.now, **self._cc_kw())
            path = P.create(self.paths_name, self.entropies, self.h.rng, self.h.now,
                            **self.path_params)
            f = self.flows[pdc.pdcid] = Flow(c, path, PathLedger(path.wants_released))
        return f

    def forget(self, pdcid: int) -> None:
        self.flows.pop(pdcid, None)

    # -- sending ------------------------------------------------------------------------

    def _windowed(self, f: Flow) -> int | None:
        """The controller's allowance, with the bytes the emulator itself holds in the
        loop not counted as in flight.

        Why: a UET window is sized to the path's bandwidth-delay product, and its
        round-trip samples already leave out what the daemons add (kernel receive
        stamps, the target's ``service_time``). The ACK clock does not: an ACK a
        daemon reads 300 µs late frees the window 300 µs late, and at 1 Gb/s with a
        1.5-BDP window of 8.5 MTU-sized packets that alone held a pair's UET flow to
        0.83-0.9 of its port with no loss, no queue and no overload counted. The
        line rate times :attr:`emu_hold` is what the emulator keeps in its own hands;
        leaving it out of the window keeps the emulator's lateness out of the
        transport's goodput. Sans-IO (no stamps) it is 0 and changes nothing.

        At most :data:`HOLD_MAX` of it: a daemon that holds longer is overloaded
        (and counted so), and a window grown with its holding puts more in flight
        just when the daemons can least carry it."""
        assert f.cc is not None
        hold = self.emu_hold if self.emu_hold < HOLD_MAX else HOLD_MAX
        held = int(hold * self.line_rate / 8)
        return f.cc.send_allowance(max(0, f.ledger.in_flight - held))

    def may_send(self, pdc: InitiatorPdc, nbytes: int, now: float) -> bool:
        """May a new data packet of ``nbytes`` go out now (window or credit)?"""
        f = self.flow(pdc)
        if f.cc is None:
            return True
        led = f.ledger
        if led.in_flight and not pdc.sb.unacked:
            # packets dropped without an ACK (a NEW_START_PSN restart resends from
            # scratch): nothing is in flight any more
            led.reset()
        allow = self._windowed(f)
        if allow is None or allow >= nbytes or (allow > 0 and led.in_flight == 0
                                                and self.receiver is None):
            return True  # (a window below one packet still lets one packet through)
        if self.receiver is not None:
            if not pdc.established and led.in_flight == 0:
                # a CREDIT can only reach an established PDC: the first packet (SYN)
                # goes uncredited, once, and its ACK supplies the DPDCID
                return True
            self.h.stats["tx_cc_blocked"] += 1
            f.blocked = True
            self._ask_credit(pdc, f, now)
            return False
        self.h.stats["tx_cc_blocked"] += 1
        f.blocked = True
        return False

    def blocks(self, pdc: InitiatorPdc, nbytes: int) -> bool:
        """Would a packet of ``nbytes`` be held back now? (No side effects: the sender
        asks for an ACK on the last packet before it must wait.)"""
        f = self.flows.get(pdc.pdcid)
        if f is None or f.cc is None:
            return False
        allow = self._windowed(f)
        return allow is not None and allow < nbytes

    def _ask_credit(self, pdc: InitiatorPdc, f: Flow, now: float) -> None:
        if f.credit_req_at is not None:
            due = f.credit_req_at + self.credit_retry
            if now < due:
                # asked recently: wake up when it is time to ask again. (It compared
                # ``now - asked < retry``, which float rounding can make true at the very
                # wake-up the timer was set for — and nothing re-armed it: a lost CREDIT
                # or CREDIT_REQ then stalled the PDC for good.)
                pdc.timers.set_if_earlier("credit", due)
                return
        f.credit_req_at = now
        self.h.control.request_credit(pdc, now)
        pdc.timers.set_if_earlier("credit", now + self.credit_retry)  # wakes a pull

    def allowance(self, pdc: InitiatorPdc) -> int | None:
        """Bytes of new data the controller lets out now (None: no limit). Ask
        :meth:`may_send` first: it has the side effects (credit requests, resets)."""
        f = self.flows.get(pdc.pdcid)
        if f is None or f.cc is None:
            return None
        return self._windowed(f)

    def sent(self, pdc: InitiatorPdc, psn: int, k: int, nbytes: int, now: float) -> list[int]:
        """``k`` new data packets of ``nbytes`` each at PSNs ``psn …`` go out (a batch; one
        packet is a batch of one): account for them; returns their entropies."""
        f = self.flow(pdc)
        ents = f.path.choose_many(now, k)
        f.ledger.sent_many(psn, ents, nbytes, now)
        self._wire(k * (nbytes + D.WIRE_OVERHEAD), now)
        if f.cc is not None:
            f.cc.on_sent(k * nbytes, now)
        return ents

    def resent(self, pdc: InitiatorPdc, pkt: TxPacket, now: float, lost: bool) -> int:
        """A retransmission: a fresh entropy; for a lost packet (its RTO fired, or the
        ACKs of packets sent after it showed it missing) the old path is penalised and
        the controller told of a loss (once per instant); a NACK's resend is neither."""
        f = self.flow(pdc)
        if lost:
            old = f.ledger.sent.get(pkt.psn)
            if old is not None:
                f.path.on_timeout(old[0], now)
            if f.cc is not None and f.loss_at != now:
                f.loss_at = now
                f.cc.on_loss(now)
        e = f.path.choose(now)
        f.ledger.resent(pkt.psn, e, now)
        self._wire(pkt.length + D.WIRE_OVERHEAD, now)
        if f.cc is not None:
            f.cc.on_sent(pkt.length, now)
        return e

    def _wire(self, nbytes: int, now: float) -> None:
        if self.line_rate > 0:
            self.wire_free = max(self.wire_free, now) + nbytes * 8 / self.line_rate

    # -- feedback -------------------------------------------------------------------------

    def acked_many(self, pdc: InitiatorPdc, pkts: Any) -> None:
        """Packets released by an ACK (CACK, ACK_PSN or SACK), oldest first, in one call."""
        f = self.flows.get(pdc.pdcid)
        if f is not None:
            f.ledger.released(pkts)

    def on_ack(self, pdc: InitiatorPdc, entropy: int | None, ack: Any, now: float) -> None:
        """After an ACK was applied: the path learns from its entropy and M bit, the
        controller from the bytes it released and the RTT of the newest of them."""
        f = self.flows.get(pdc.pdcid)
        if f is None:
            return
        ecn = bool(ack.m)
        self._emulator_hold(f, ack, now)
        acked, rtt = f.ledger.feedback(self.h.rx_at)  # the sample ends at arrival …
        if rtt is not None:
            rtt = D.held_out(rtt, ack)  # … less what the target held it
        if f.path.wants_released:
            released = f.ledger.take_entropies()
            if entropy is not None:
                f.path.on_ack(entropy, now, ecn=ecn, rtt=rtt, released=released)
        elif entropy is not None:
            f.path.on_ack(entropy, now, ecn=ecn, rtt=rtt)
        if f.cc is not None and (acked or ecn):
            f.cc.on_ack(acked, now, ecn_echo=ecn, rtt=rtt)

    def _emulator_hold(self, f: Flow, ack: Any, now: float) -> None:
        """What the daemons added to this ACK's loop (:attr:`emu_hold`), and the port
        time it cost a waiting flow: counted as ``ack_late_us``, emulator overload
        judged against the run's length (``emu.credible.overload``).

        A flow its controller held back would have sent again when a NIC that reads
        and answers at once had this ACK — its kernel arrival less the target's
        ``service_time`` — or once the port finished its queued frames, whichever is
        later; from then until ``now`` the port idled by the emulator's doing alone."""
        t = D.held_out(self.h.rx_at, ack)
        lag = now - t if now > t else 0.0
        err = lag - self._hold_mean
        self._hold_mean += err * HOLD_GAIN
        self._hold_dev += ((err if err > 0 else -err) - self._hold_dev) * HOLD_GAIN
        self.emu_hold = self._hold_mean + 2 * self._hold_dev
        if f.blocked:
            f.blocked = False
            idle_from = t if t > self.wire_free else self.wire_free
            if now > idle_from:
                self.h.stats["ack_late_us"] += int((now - idle_from) * 1e6)

    def on_nack(self, pdc: InitiatorPdc, entropy: int | None, nack: Any, now: float) -> None:
        """After a NACK: penalise its path; trims and other "retransmit" codes are a loss
        signal for the controller (a trim with the packet's size)."""
        f = self.flows.get(pdc.pdcid)
        if f is None:
            return
        code = nack.nack_code
        trimmed = code in D.TRIM_CODES
        if entropy is not None:
            f.path.on_nack(entropy, now, trimmed=trimmed)
        if f.cc is None or D.NACK_REACTIONS.get(code) is not D.Reaction.RETRANSMIT:
            return
        if trimmed:
            pkt = pdc.sb.unacked.get(pdc.ext(nack.nack_psn))
            f.cc.on_trim(pkt.length if pkt is not None else self.h.mtu, now)
        else:
            f.cc.on_loss(now)

    # -- RCCC credit ------------------------------------------------------------------------

    def _on_credit(self, pdc: InitiatorPdc, credit: int, now: float) -> None:
        pdc.credit = credit
        f = self.flows.get(pdc.pdcid)
        if f is not None and f.cc is not None:
            f.cc.on_credit(credit, now)
            f.credit_req_at = None
        self.h._active[pdc.pdcid] = None

    def _credit_source(self, t: TargetPdc, now: float) -> int:
        r = self.receiver
        assert r is not None
        return r.take(t.pdcid, now)

    def state(self, pdcid: int) -> dict[str, Any]:
        """The PDC's controller and path numbers (for counters and tests)."""
        f = self.flows.get(pdcid)
        if f is None:
            return {}
        return {"in_flight": f.ledger.in_flight, "path": f.path.state(),
                "cc": None if f.cc is None else f.cc.state()}

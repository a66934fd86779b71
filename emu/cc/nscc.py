# SPDX-License-Identifier: GPL-2.0-only
"""NSCC, UET's network-signal-based sender congestion control (uet.md: Behaviour, NSCC).

A window (``cwnd``, bytes in flight) that one PDC shares over all the paths it
sprays on, driven by two signals per ACK: the ECN echo (a *leading* sign — a
switch marks as a packet leaves a long queue) and the queuing delay
``rtt − base_rtt`` (a *lagging*, multi-bit sign). Their four combinations
(``target`` = target queuing delay)::

    no ECN, delay <  target  → proportional increase (more headroom, faster growth;
                               a whole window with an empty queue → fast increase)
    no ECN, delay >= target  → fair increase (the queue behind us drained: add a
                               constant, so flows sharing a link converge)
    ECN,    delay >= target  → multiplicative decrease, at most once per RTT:
                               cwnd × max(1 − γ·(avg − target)/avg, 0.5)
    ECN,    delay <  target  → hold; the path is getting busy: change path

Increases accumulate in ``inc_bytes`` and are applied as ``cwnd += inc/cwnd``
every ``adjust_bytes`` ACKed or every base RTT, plus a small ``eta`` per RTT
(so a window always creeps up). *Quick adapt*: after a loss, a trim or a
delay above 4 × target, at the end of the current measuring period
(base RTT + target) the window drops to what was actually delivered in that
period (if that is below max_cwnd / 2^qa_gate), and the ECN echoes of the
packets already in flight are ignored — they describe the old window.

Constants are htsim's UEC model (the spec page's source), defined at a
100 Gb/s, 12 µs reference and scaled to the emulated link with
``a = BDP / (100 Gb/s × 12 µs)`` and ``b = target / 12 µs``:

=============== ======================== =====================================
name            value                    meaning
=============== ======================== =====================================
BDP             line_rate/8 × base_rtt   bytes
target          base_rtt (0.75× trimming) target queuing delay
min_cwnd        mtu                      never below one packet
max_cwnd        1.5 × BDP                also the initial window
γ (gamma)       0.8                      multiplicative-decrease gain
alpha           4·mtu·a·b / target       proportional increase per s of headroom
fi              5·mtu·a                  fair increase per window ACKed
eta             0.15·mtu·a               added once per base RTT
fi_scale        0.25·a                   fast increase per ACKed byte
fast tolerance  target / 12              "empty queue" (1 µs at the reference)
qa threshold    4 × target               delay that triggers quick adapt
qa_gate         3                        quick adapt only below max_cwnd/8
adjust_bytes    8 × mtu                  apply increases at least this often
delay_alpha     0.0125                   EWMA gain of the average delay
=============== ======================== =====================================

``base_rtt`` is the unloaded round trip of the emulated path (a parameter:
the emulator's RTT depends on the machine); with ``learn_base_rtt`` the
minimum RTT sample seen replaces it, and BDP, target and the scaled
constants follow. The pacing :attr:`Nscc.rate` is ``8·cwnd / base_rtt``
capped at line rate: the window, not the pacer, is the limit, while bursts
are spread over a round trip.
"""

from __future__ import annotations

from typing import Any

from emu.cc import CongestionControl, register

REF_RATE = 100e9  # bits/s, the spec page's reference link …
REF_RTT = 12e-6  # … and round trip
REF_BDP = REF_RATE / 8 * REF_RTT  # 150 000 bytes

CASE_PROPORTIONAL = "proportional_increase"
CASE_FAST = "fast_increase"
CASE_FAIR = "fair_increase"
CASE_MD = "multiplicative_decrease"
CASE_HOLD = "hold"
CASE_QUICK_ADAPT = "quick_adapt"
CASE_IGNORED = "ignored"


@register
class Nscc(CongestionControl):
    """One PDC's NSCC window (see the module docstring for rules and constants)."""

    name = "nscc"

    def __init__(self, line_rate: float, now: float = 0.0, *, base_rtt: float = REF_RTT,
                 mtu: int = 4096, trimming: bool = False, gamma: float = 0.8,
                 delay_alpha: float = 0.0125, qa_gate: int = 3, learn_base_rtt: bool = False,
                 init_cwnd: int | None = None) -> None:
        super().__init__(line_rate, now)
        if base_rtt <= 0 or mtu < 1:
            raise ValueError("need base_rtt > 0 s and mtu >= 1 byte")
        if not 0 < gamma < 1 or not 0 < delay_alpha <= 1 or not 0 <= qa_gate < 32:
            raise ValueError("need 0 < gamma < 1, 0 < delay_alpha <= 1, 0 <= qa_gate < 32")
        self.mtu = int(mtu)
        self.trimming = trimming
        self.gamma = gamma
        self.delay_alpha = delay_alpha
        self.qa_gate = int(qa_gate)
        self.learn_base_rtt = learn_base_rtt
        self._rtt_seen = False
        self._derive(base_rtt)
        self._cwnd = float(self.max_cwnd if init_cwnd is None else init_cwnd)
        self._bound()
        self.avg_delay = 0.0
        self.last_delay = 0.0
        self._inc = 0.0  # pending increase, bytes² (applied as inc / cwnd)
        self._received = 0  # bytes ACKed since the last adjustment
        self._last_adjust = now
        self._last_md = now - self.base_rtt  # the first MD may happen at once
        self._fi_count = 0  # bytes ACKed in a row with an empty queue
        self._fast = False
        self._achieved = 0  # bytes ACKed in the current quick-adapt period
        self._qa_end = now + self.base_rtt + self.target
        self._qa_trigger = False
        self._ignore = 0  # bytes whose ECN echo quick adapt told us to ignore
        self.last_case = ""
        self.change_path = False  # set by the "hold" case, for a path policy to act on
        self.counts = {CASE_PROPORTIONAL: 0, CASE_FAST: 0, CASE_FAIR: 0, CASE_MD: 0,
                       CASE_HOLD: 0, CASE_QUICK_ADAPT: 0, CASE_IGNORED: 0, "loss": 0,
                       "trim": 0, "acks": 0}

    def _derive(self, base_rtt: float) -> None:
        """Everything that scales with the link: BDP, bounds, target and the constants."""
        self.base_rtt = float(base_rtt)
        self.bdp = self.line_rate / 8 * self.base_rtt
        self.min_cwnd = self.mtu
        self.max_cwnd = max(1.5 * self.bdp, float(self.mtu))
        self.target = self.base_rtt * (0.75 if self.trimming else 1.0)
        a = self.bdp / REF_BDP
        b = self.target / REF_RTT
        self.alpha = 4 * self.mtu * a * b / self.target
        self.fi = 5 * self.mtu * a
        self.eta = 0.15 * self.mtu * a
        self.fi_scale = 0.25 * a
        self.fast_tol = self.target / 12
        self.qa_threshold = 4 * self.target
        self.adjust_bytes = 8 * self.mtu

    # -- queries ------------------------------------------------------------------------

    @property
    def cwnd(self) -> int:
        return int(self._cwnd)

    @property
    def rate(self) -> float:
        return min(self.line_rate, 8 * self._cwnd / self.base_rtt)

    def state(self) -> dict[str, Any]:
        return {"rate": self.rate, "cwnd": self.cwnd, "avg_delay": self.avg_delay,
                "base_rtt": self.base_rtt, "target": self.target, "case": self.last_case,
                **self.counts}

    # -- feedback -----------------------------------------------------------------------

    def on_ack(self, nbytes: int, now: float, *, ecn_echo: bool = False,
               rtt: float | None = None, qdelay: float | None = None) -> None:
        """``nbytes`` newly ACKed; ``rtt`` the round-trip sample of the packet this ACK
        answers, or ``qdelay`` the queuing delay directly (else the last one is reused)."""
        self.counts["acks"] += 1
        self.change_path = False
        nbytes = max(0, int(nbytes))
        if qdelay is None and rtt is not None and rtt > 0:
            if self.learn_base_rtt and (not self._rtt_seen or rtt < self.base_rtt):
                self._derive(rtt)
            self._rtt_seen = True
            qdelay = rtt - self.base_rtt
        delay = self.last_delay if qdelay is None else max(0.0, float(qdelay))
        self.last_delay = delay
        self._update_avg(delay, ecn_echo)
        self._achieved += nbytes
        self._received += nbytes
        if delay > self.qa_threshold:
            self._qa_trigger = True
        ignoring = self._ignore > 0
        self._ignore = max(0, self._ignore - nbytes)
        if ecn_echo and ignoring:
            self._case(CASE_IGNORED)  # an echo of the window before quick adapt
            return
        if self._quick_adapt(now, False):
            return
        target = self.target
        if not ecn_echo and delay < target:
            self._proportional(nbytes, delay)
        elif not ecn_echo:
            self._fast, self._fi_count = False, 0
            self._inc += self.fi * nbytes
            self._case(CASE_FAIR)
        elif delay >= target:
            self._decrease(now)
        else:
            self._fast, self._fi_count = False, 0
            self.change_path = True
            self._case(CASE_HOLD)
        self._bound()
        if self._received > self.adjust_bytes or now - self._last_adjust > self.base_rtt:
            self._adjust(now)
            self._bound()  # (bounded already unless adjusted: once per ACK, not twice)

    def on_loss(self, now: float) -> None:
        """A packet was lost (RTO, or a NACK meaning loss): quick adapt, else shed one MTU."""
        self.counts["loss"] += 1
        self._qa_trigger = True
        if not self._quick_adapt(now, True):
            self._cwnd -= self.mtu
            self._bound()

    def on_trim(self, nbytes: int, now: float) -> None:
        """A switch trimmed one of our packets: its queue was over the trim threshold —
        count it as a delay sample at target (the trim threshold's worth of queue),
        quick adapt, else shed the trimmed packet's bytes from the window."""
        self.counts["trim"] += 1
        self._update_avg(self.target, True)
        self._qa_trigger = True
        if not self._quick_adapt(now, True):
            self._cwnd -= max(0, int(nbytes))
            self._bound()

    # -- the cases ----------------------------------------------------------------------

    def _case(self, name: str) -> None:
        self.last_case = name
        self.counts[name] += 1

    def _update_avg(self, delay: float, ecn: bool) -> None:
        """EWMA of the queuing delay; a high sample *without* ECN says the queue has since
        drained, so it pulls the average down (towards base_rtt/4) instead of up."""
        a = self.delay_alpha
        sample = self.base_rtt * 0.25 if (not ecn and delay > self.target) else delay
        self.avg_delay = a * sample + (1 - a) * self.avg_delay

    def _proportional(self, nbytes: int, delay: float) -> None:
        if delay < self.fast_tol:
            self._fi_count += nbytes
            if self._fast or self._fi_count > self._cwnd:
                # a whole window went through an empty queue: grow exponentially
                self._fast = True
                self._cwnd += nbytes * self.fi_scale
                self._case(CASE_FAST)
                return
        else:
            self._fi_count = 0
        self._fast = False
        self._inc += self.alpha * nbytes * (self.target - delay)
        self._case(CASE_PROPORTIONAL)

    def _decrease(self, now: float) -> None:
        self._fast, self._fi_count = False, 0
        avg = self.avg_delay
        if avg > self.target and now - self._last_md >= self.base_rtt:
            self._cwnd *= max(1 - self.gamma * (avg - self.target) / avg, 0.5)
            self._last_md = now
            self._case(CASE_MD)
        else:
            self.last_case = "decrease_skipped"

    def _adjust(self, now: float) -> None:
        """Apply the accumulated increases (``inc / cwnd``) and, once per base RTT, eta."""
        self._cwnd += self._inc / self._cwnd
        if now - self._last_adjust >= self.base_rtt:
            self._cwnd += self.eta
            self._last_adjust = now
        self._inc = 0.0
        self._received = 0

    def _quick_adapt(self, now: float, loss: bool) -> bool:
        """At the end of each measuring period: if something bad happened during it and
        little was delivered, set cwnd to what was delivered. True if it acted."""
        done = False
        if now > self._qa_end:
            if ((self._qa_trigger or loss)
                    and self._achieved < self.max_cwnd / (1 << self.qa_gate)):
                before = self._cwnd
                self._cwnd = max(min(float(self._achieved), self._cwnd), float(self.min_cwnd))
                self._ignore = int(before)  # what was in flight, at most one old window
                self._fast, self._fi_count = False, 0
                self._case(CASE_QUICK_ADAPT)
                done = True
            self._achieved = 0
            self._qa_trigger = False  # a new period: only what happens in it counts
            self._qa_end = now + self.base_rtt + self.target
        if done:
            self._inc = 0.0
            self._received = 0
        return done

    def _bound(self) -> None:
        self._cwnd = min(max(self._cwnd, float(self.min_cwnd)), self.max_cwnd)

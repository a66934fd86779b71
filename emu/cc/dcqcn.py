# SPDX-License-Identifier: GPL-2.0-only
"""DCQCN reaction point (Zhu et al., SIGCOMM 2015), the RoCEv2 rate controller.

The notification point (a receiver that sees ECN-CE answering with at most
one CNP per QP per 50 µs) lives in the transport, because it is about
packets; this module is the *reaction point*: a per-flow rate that is cut
when a CNP arrives and recovers on a timer and a byte counter.

On a CNP (``specs/rocev2.md``)::

    target = rate;  rate = rate × (1 − α/2);  α = (1 − g)·α + g
    timer and byte counters restart

Without CNPs α decays, ``α = (1 − g)·α`` once per ``alpha_period``. α is
updated lazily (on the next CNP or query) from the elapsed periods — the
same values a periodic α timer produces at its ticks, without a timer that
would keep an idle endpoint's ``get_timer()`` busy forever.

A cut makes the rate before it the **target** recovery returns to — except a cut that
follows another before any increase event, which keeps the earlier target (ConnectX's
``clamp_tgt_rate = 0``; see :meth:`Dcqcn.on_cnp`).

Recovery: every ``increase_period`` (timer T) and every ``byte_counter``
bytes sent (counter B) is an *increase event*; with ``t``/``b`` the number of
such events since the last cut and ``F = fast_recovery_steps``:

* ``max(t, b) < F`` — **fast recovery**: ``rate = (rate + target) / 2``
* ``min(t, b) > F`` — **hyper increase**: ``target += R_HAI``, then average
* otherwise — **additive increase**: ``target += R_AI``, then average

(hyper adds a constant ``R_HAI`` per event, as the widely used ns-3
Mellanox model does, rather than QCN's growing ``i·R_HAI``.) Nothing runs
once the rate is back at line rate, so an idle flow schedules no timers.

The defaults are the paper's (``specs/rocev2.md``), chosen at 40 Gb/s. A 400 Gb/s
NIC runs other constants: NVIDIA ConnectX updates α every 1 µs with g = 5/1024 and
lets its notification point send a CNP every 4 µs (``g``, ``alpha_period`` here, the
RoCE engine's ``cnp_interval``; ``scenarios/incast.toml`` sets all three). Take such a
set whole: ConnectX's α with the paper's 50 µs between CNPs decays α to nothing
between cuts, and a 4 -> 1 incast outgrew an 8 MB port (tests/cc/test_dcqcn_incast.py).

Defaults and why — all rates scale with the emulated ``line_rate`` so the
dynamics look the same on a 10 Gb/s and a 400 Gb/s emulated link:

==================== ================= ============================================
parameter            default           note
==================== ================= ============================================
g                    1/256             the paper's α gain
alpha_init           1.0               first CNP halves the rate, as in hardware
alpha_period         55 µs             K in the paper
increase_period      55 µs             timer T in the paper
byte_counter         10 MiB            B (the paper's 10 MB)
fast_recovery_steps  5                 F in the paper
r_ai                 line_rate / 1000  40 Mb/s at 40 Gb/s, the paper's R_AI
r_hai                5 × r_ai          our choice of ratio; set it to match a NIC
min_rate             line_rate / 1000  floor of repeated cuts
min_cut_interval     4 µs              at most one cut per interval (α still updates)
==================== ================= ============================================
"""

from __future__ import annotations

import math
from typing import Any

from emu.cc import CongestionControl, register

STAGE_LINE = "line_rate"
STAGE_CUT = "cut"
STAGE_FAST = "fast_recovery"
STAGE_ADDITIVE = "additive_increase"
STAGE_HYPER = "hyper_increase"


@register
class Dcqcn(CongestionControl):
    """One QP's DCQCN reaction point (see the module docstring for the rules)."""

    name = "dcqcn"

    def __init__(self, line_rate: float, now: float = 0.0, *, g: float = 1 / 256,
                 alpha_init: float = 1.0, alpha_period: float = 55e-6,
                 increase_period: float = 55e-6, byte_counter: int = 10 * 2**20,
                 fast_recovery_steps: int = 5, r_ai: float | None = None,
                 r_hai: float | None = None, min_rate: float | None = None,
                 min_cut_interval: float = 4e-6) -> None:
        super().__init__(line_rate, now)
        if not 0 < g <= 1 or not 0 <= alpha_init <= 1:
            raise ValueError("need 0 < g <= 1 and 0 <= alpha_init <= 1")
        if alpha_period <= 0 or increase_period <= 0 or byte_counter <= 0:
            raise ValueError("periods and byte_counter must be > 0")
        self.g = g
        self.alpha_period = alpha_period
        self.increase_period = increase_period
        self.byte_counter = int(byte_counter)
        self.steps = int(fast_recovery_steps)
        self.r_ai = line_rate / 1000 if r_ai is None else float(r_ai)
        self.r_hai = 5 * self.r_ai if r_hai is None else float(r_hai)
        self.min_rate = line_rate / 1000 if min_rate is None else float(min_rate)
        self.min_cut_interval = min_cut_interval
        self._rate = self.line_rate
        self.target = self.line_rate
        self._alpha = alpha_init
        # α is exact as of this time and decays per whole period after; None until the
        # first CNP: a flow's α starts then, at alpha_init (ConnectX's
        # initial_alpha_value, "used when receiving the first CNP for a flow")
        self._alpha_ref: float | None = None
        self._last_cut = -math.inf
        self._t = 0  # timer increase events since the last cut
        self._b = 0  # byte-counter increase events since the last cut
        self._bytes = 0
        self._deadline: float | None = None
        self.stage = STAGE_LINE
        self.counts = {STAGE_CUT: 0, STAGE_FAST: 0, STAGE_ADDITIVE: 0, STAGE_HYPER: 0,
                       "cnp": 0}

    # -- queries ------------------------------------------------------------

    @property
    def rate(self) -> float:
        return self._rate

    def alpha_at(self, now: float) -> float:
        """α at ``now``: decayed once per full ``alpha_period`` since the last update."""
        if self._alpha_ref is None:
            return self._alpha
        n = int((now - self._alpha_ref) / self.alpha_period)
        if n <= 0:
            return self._alpha
        self._alpha *= (1 - self.g) ** n
        self._alpha_ref += n * self.alpha_period
        return self._alpha

    @property
    def alpha(self) -> float:
        """α as of the last update (use :meth:`alpha_at` for a given time)."""
        return self._alpha

    def get_timer(self) -> float | None:
        return self._deadline

    def state(self) -> dict[str, Any]:
        return {"rate": self._rate, "target": self.target, "alpha": self._alpha,
                "stage": self.stage, "t": self._t, "b": self._b, **self.counts}

    # -- feedback -----------------------------------------------------------

    def on_cnp(self, now: float) -> None:
        """Cut the rate (at most once per ``min_cut_interval``) and raise α."""
        self.counts["cnp"] += 1
        alpha = self.alpha_at(now)
        if now - self._last_cut >= self.min_cut_interval:
            self._last_cut = now
            if self._t or self._b or self.stage == STAGE_LINE:
                # the rate before the cut becomes the target to recover to — unless
                # this cut follows another with no increase between (CNPs every 50 µs,
                # the timer 55 µs): then the target stays the rate before the first of
                # them. Resetting it at every cut (the paper's QCN pseudo-code) ratchets
                # the target down with the rate: a 4 -> 1 incast at 400 Gb/s halved every
                # sender to ~6 Gb/s and kept the port 29 % busy. NVIDIA's ConnectX
                # (clamp_tgt_rate = 0) and the ns-3 Mellanox model keep it
                self.target = self._rate
            self._rate = max(self.min_rate, self._rate * (1 - alpha / 2))
            self.counts[STAGE_CUT] += 1
            self.stage = STAGE_CUT
            self._t = self._b = 0
            self._bytes = 0
            self._deadline = now + self.increase_period
        self._alpha = (1 - self.g) * alpha + self.g
        self._alpha_ref = now

    def on_sent(self, nbytes: int, now: float) -> None:
        if self._deadline is None:  # at line rate: nothing to recover
            return
        self._bytes += nbytes
        while self._bytes >= self.byte_counter and self._deadline is not None:
            # several counter periods at once when a paced burst is charged in one call
            self._bytes -= self.byte_counter
            self._b += 1
            self._increase()

    def handle_timer(self, now: float) -> None:
        # bounded: a huge clock jump recovers fully in a few hundred events
        for _ in range(100_000):
            d = self._deadline
            if d is None or d > now:
                return
            self._deadline = d + self.increase_period
            self._t += 1
            self._increase()

    def _increase(self) -> None:
        t, b, f = self._t, self._b, self.steps
        if max(t, b) < f:
            self.stage = STAGE_FAST
        elif min(t, b) > f:
            self.stage = STAGE_HYPER
            self.target = min(self.line_rate, self.target + self.r_hai)
        else:
            self.stage = STAGE_ADDITIVE
            self.target = min(self.line_rate, self.target + self.r_ai)
        self.counts[self.stage] += 1
        self._rate = min(self.line_rate, (self._rate + self.target) / 2)
        if self._rate >= self.line_rate * (1 - 1e-9):
            self._rate = self.target = self.line_rate
            self._deadline = None
            self.stage = STAGE_LINE

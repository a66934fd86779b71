# SPDX-License-Identifier: GPL-2.0-only
"""Retransmission timeout from measured round trips (RFC 6298), transport-neutral.

The first piece of the shared reliable core (issue #15): UET's PDCs use it
today and MRC's will; nothing here knows a header. Why adapt at all when UET's
spec gives a fixed 1–5 ms: that is a hardware NIC's bound on a µs fabric; two
Python daemons on a loaded machine see round trips of several ms, and a fixed
RTO then resends whole windows that had arrived (see ``transports/uet/pds.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RtoEstimator:
    """SRTT, RTTVAR and the RTO they give (seconds); ``rto`` is 0.0 until the first
    sample, when callers use their ceiling (RFC 6298 starts high, too)."""

    srtt: float = 0.0
    rttvar: float = 0.0
    rto: float = 0.0

    def sample(self, r: float, lo: float, hi: float) -> None:
        """One round trip ``r`` (α = 1/8, β = 1/4; Karn's rule is the caller's: no
        sample from a retransmitted packet): RTO = SRTT + 4·RTTVAR within [lo, hi]."""
        if self.srtt:
            self.rttvar += (abs(self.srtt - r) - self.rttvar) / 4
            self.srtt += (r - self.srtt) / 8
        else:
            self.srtt, self.rttvar = r, r / 2
        self.rto = min(max(self.srtt + 4 * self.rttvar, lo), hi)

    def current(self, ceiling: float) -> float:
        """The RTO to use now: the measured one, or ``ceiling`` before any sample."""
        return self.rto or ceiling

    def probe_timeout(self) -> float:
        """How long a sender with packets outstanding may hear nothing new before it asks
        the receiver where it stands (a loss probe): the larger of two smoothed round
        trips (RFC 8985's PTO) and SRTT + 4·RTTVAR (RFC 6298's RTO before its floor);
        0.0 before the first sample (no probe: the RTO's ceiling governs).

        Why not the RTO: a transport's RTO has a floor sized for the worst host (UET's
        1–5 ms, uet.md: Retransmit), hundreds of round trips of a µs fabric; a loss that
        nothing sent later reveals (a tail, a lost retransmission behind a full window)
        paid all of it. The variance term keeps a probe from calling a merely late
        packet lost where round trips swing (a loaded daemon)."""
        s = self.srtt
        if not s:
            return 0.0
        v = s + 4 * self.rttvar
        return v if v > 2 * s else 2 * s

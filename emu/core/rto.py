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

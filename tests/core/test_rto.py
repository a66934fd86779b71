# SPDX-License-Identifier: GPL-2.0-only
"""emu.core.rto: RFC 6298's estimator, as the reliable transports use it."""

from __future__ import annotations

import pytest

from emu.core.rto import RtoEstimator


def test_first_sample_then_smoothing_within_bounds():
    e = RtoEstimator()
    assert e.current(0.5) == 0.5  # no sample yet: the caller's ceiling
    e.sample(0.010, 1e-3, 1.0)
    assert (e.srtt, e.rttvar) == (0.010, 0.005) and e.rto == pytest.approx(0.030)
    e.sample(0.002, 1e-3, 1.0)  # RTTVAR first, from the old SRTT (RFC 6298, 2.3)
    assert e.rttvar == pytest.approx(0.005 + (0.008 - 0.005) / 4)
    assert e.srtt == pytest.approx(0.010 + (0.002 - 0.010) / 8)
    assert e.current(0.5) == e.rto == pytest.approx(e.srtt + 4 * e.rttvar)


def test_rto_is_clamped_to_floor_and_ceiling():
    lo, hi = 1e-3, 5e-3
    e = RtoEstimator()
    e.sample(1e-6, lo, hi)
    assert e.rto == lo
    e = RtoEstimator()
    e.sample(0.1, lo, hi)
    assert e.rto == hi


def test_probe_timeout_is_a_few_round_trips_not_the_rto():
    e = RtoEstimator()
    assert e.probe_timeout() == 0.0  # no sample: no probe (the RTO's ceiling governs)
    e.sample(10e-6, 1e-3, 5e-3)  # first sample: RTTVAR = r/2, so SRTT + 4·RTTVAR = 3 r
    assert e.probe_timeout() == pytest.approx(30e-6) and e.rto == 1e-3
    for _ in range(200):  # a steady round trip: RTTVAR decays, two SRTTs remain
        e.sample(10e-6, 1e-3, 5e-3)
    assert e.probe_timeout() == pytest.approx(20e-6)

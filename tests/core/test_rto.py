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

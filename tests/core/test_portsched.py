# SPDX-License-Identifier: GPL-2.0-only
"""A port's wire schedule (emu.core.portsched): a FIFO of ``lead_s`` ahead of the line
rate is never overfilled, an idle port saves no credit and always takes a packet, and
the resume time it gives admits the packet it was asked for."""

from __future__ import annotations

import random

import pytest

from emu.core.portsched import EPS, PortSchedule


def test_the_fifo_takes_what_fits_and_no_more():
    s = PortSchedule(8e9, lead_s=10e-6, overhead=0)  # 1 byte per ns: a 10,000-byte FIFO
    n = 0
    while s.admits(0.0, 1000):
        s.charge(0.0, 1000)
        n += 1
    assert n == 10 and s.ahead(0.0) == pytest.approx(10e-6)
    assert not s.admits(0.0, 1) and s.admits(1e-6, 1000)  # one packet has left


def test_the_overhead_is_charged_per_datagram():
    s = PortSchedule(8e9, lead_s=1.0, overhead=62)
    assert s.charge(0.0, 938) == pytest.approx(1e-6)


def test_an_idle_port_saves_no_credit_and_takes_a_packet_larger_than_its_fifo():
    s = PortSchedule(8e9, lead_s=1e-6)
    s.charge(0.0, 1000)
    assert s.t_free == pytest.approx(1e-6)
    s.charge(5.0, 1000)  # idle since 1 µs: starts now, not back then
    assert s.t_free == pytest.approx(5.0 + 1e-6)
    big = PortSchedule(8e9, lead_s=1e-9)
    assert big.admits(0.0, 9000)  # else a FIFO smaller than a packet would take none
    big.charge(0.0, 9000)
    assert not big.admits(0.0, 9000) and big.resume_at(9000) == big.t_free


def test_resume_is_half_a_fifo_drained_and_then_a_packet_fits():
    s = PortSchedule(8e9, lead_s=10e-6)
    for _ in range(10):
        s.charge(0.0, 1000)
    assert s.resume_at(1000) == pytest.approx(5e-6)
    rng = random.Random(1)
    now = 0.0
    for _ in range(10_000):  # whatever the floats, the resume time admits the packet
        size = rng.randrange(64, 5000)
        while s.admits(now, size):
            s.charge(now, size)
        t = s.resume_at(size)
        assert t > now and s.admits(t, size)
        assert s.ahead(now) <= s.lead_s + EPS
        now = t + rng.random() * 1e-6


def test_bad_arguments_are_refused():
    for args in ((0, 1e-6), (1e9, -1.0)):
        with pytest.raises(ValueError):
            PortSchedule(*args)

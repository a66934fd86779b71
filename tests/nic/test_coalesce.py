# SPDX-License-Identifier: GPL-2.0-only
"""Receive coalescing (emu.nic.coalesce), sans-IO: when a port's next read may wait."""

from __future__ import annotations

import math

import pytest

from emu.nic import coalesce as C
from emu.nic.coalesce import RxCoalescer

GBIT = 1e9
MTU = 9000
FRAME_S = (MTU + 14) * 8 / GBIT  # ~72 µs at 1 Gb/s


def _stream(co: RxCoalescer, rate: float, seconds: float, t0: float = 0.0) -> float:
    """Reads of one 9 KB frame each, at ``rate`` bits/s for ``seconds``; returns the time."""
    t, gap = t0, (MTU + 14) * 8 / rate
    while t < t0 + seconds:
        co.on_read(t, MTU)
        t += gap
    return t


def test_a_stream_at_the_line_rate_is_read_every_hold():
    co = RxCoalescer(GBIT, MTU)
    assert co.hold == pytest.approx(min(C.HOLD_MAX, C.HOLD_FRAMES * FRAME_S))
    assert co.hold_until(0.0, 0.0) is None  # nothing measured yet: read at once
    t = _stream(co, GBIT, 3 * C.WINDOW)
    assert co.streaming
    assert co.hold_until(t, 0.0) == pytest.approx(t + co.hold)


def test_a_flow_below_a_quarter_of_the_line_is_never_held():
    co = RxCoalescer(GBIT, MTU)
    t = _stream(co, 0.2 * GBIT, 10 * C.WINDOW)
    assert not co.streaming and co.hold_until(t, 0.0) is None


def test_a_ping_pong_is_never_held():
    """One small datagram per round trip: far below the stream threshold however often."""
    co = RxCoalescer(GBIT, MTU)
    t = 0.0
    for _ in range(1000):
        co.on_read(t, 80)
        assert co.hold_until(t, 0.0) is None
        t += 150e-6


def test_a_pause_ends_the_stream_at_once():
    co = RxCoalescer(GBIT, MTU)
    t = _stream(co, GBIT, 3 * C.WINDOW)
    assert co.hold_until(t, 0.0) is not None
    co.paused()  # a hold came back empty
    assert not co.streaming and co.hold_until(t, 0.0) is None


def test_a_stream_that_slows_down_stops_being_held():
    co = RxCoalescer(GBIT, MTU)
    t = _stream(co, GBIT, 3 * C.WINDOW)
    t = _stream(co, 0.1 * GBIT, 3 * C.WINDOW, t)
    assert not co.streaming


def test_the_transmit_rule_waits_until_the_queue_nearly_drains():
    co = RxCoalescer(GBIT, MTU)
    now = 5.0
    assert co.hold_until(now, now + C.BUSY_MIN / 2) is None  # too little queued
    busy = now + 2e-3
    assert co.hold_until(now, busy) == pytest.approx(busy - C.GUARD)
    # both rules: the later of the two
    t = _stream(co, GBIT, 3 * C.WINDOW, now)
    assert co.hold_until(t, t + 2e-3) == pytest.approx(max(t + co.hold, t + 2e-3 - C.GUARD))


def test_slow_ports_have_no_stream_hold():
    """At 100 Mb/s a 9 KB frame takes 720 µs: two of them would hold the ACK 1.4 ms."""
    co = RxCoalescer(100e6, MTU)
    assert co.hold == 0.0
    t = _stream(co, 100e6, 5 * C.WINDOW)
    assert co.streaming and co.hold_until(t, 0.0) is None


def test_a_port_too_slow_for_the_usual_hold_holds_two_frames():
    """At 200 Mb/s 600 µs gathered no second frame (348 µs apart): every datagram was a
    wake-up. Two frame times (696 µs) halve them."""
    frame = (MTU + 14) * 8 / 200e6
    co = RxCoalescer(200e6, MTU)
    assert co.hold == pytest.approx(2 * frame) and co.hold > C.HOLD_MAX
    t = _stream(co, 200e6, 5 * C.WINDOW)
    assert co.hold_until(t, 0.0) == pytest.approx(t + 2 * frame)
    assert RxCoalescer(GBIT, MTU).hold == pytest.approx(min(C.HOLD_MAX, C.HOLD_FRAMES * FRAME_S))


def test_settings_off_unpaced_and_fixed():
    assert RxCoalescer.for_port(0.0, GBIT, MTU) is None  # --rx-coalesce 0
    assert RxCoalescer.for_port(None, None, MTU) is None  # adaptive on an unpaced port
    assert RxCoalescer.for_port(None, math.inf, MTU) is None
    fixed = RxCoalescer.for_port(200e-6, None, MTU)  # fixed works unpaced too
    assert fixed is not None
    fixed.on_read(1.0, 80)  # even a lone small datagram waits (ethtool's rx-usecs)
    assert fixed.hold_until(1.0, 0.0) == pytest.approx(1.0 + 200e-6)
    assert RxCoalescer.for_port(None, GBIT, MTU) is not None


def test_the_setting_as_stats_show_it():
    assert [C.describe_coalesce(v) for v in (None, 0.0, 200e-6)] == ["adaptive", "off", "200us"]


def test_the_nic_sections_setting_checked_and_passed_to_the_daemons():
    from emu.nic.topology import check_section, coalesce_arg

    for ok in ("adaptive", "off", 0, "0", "200us", 0.0002):
        assert check_section({"rx_coalesce": ok}) is None, ok
    for bad in ("soon", "20ms", "-1us"):
        where, why = check_section({"rx_coalesce": bad})
        assert where == "nic.rx_coalesce" and repr(bad) in why
    assert coalesce_arg({"rx_coalesce": "off"}) == ("--rx-coalesce", "off")
    assert coalesce_arg({}) == ()


def test_without_data_only_the_transmit_rule_holds():
    """Before a datagram wakes the daemon (the last read found nothing), a stream or a
    fixed hold has nothing to wait for; a busy port still lets the read wait."""
    co = RxCoalescer(GBIT, MTU)
    t = _stream(co, GBIT, 3 * C.WINDOW)
    assert co.hold_until(t, 0.0, False) is None
    assert co.hold_until(t, t + 2e-3, False) == pytest.approx(t + 2e-3 - C.GUARD)
    fixed = RxCoalescer(None, MTU, 200e-6)
    assert fixed.hold_until(1.0, 0.0, False) is None


def test_one_parser_for_the_command_line_and_the_topology_file():
    assert C.parse_setting("adaptive") is None
    assert C.parse_setting("off") == C.parse_setting(0) == C.parse_setting("0") == 0.0
    assert C.parse_setting("200us") == pytest.approx(200e-6)
    for bad in ("soon", "20ms", "-1us"):
        with pytest.raises(ValueError, match=repr(bad)):
            C.parse_setting(bad)

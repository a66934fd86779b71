# SPDX-License-Identifier: GPL-2.0-only
"""The kernel RTT beside latency results: ping output parsing, the report lines, the
JSON keys, the flag (no root needed; the real ping runs in test_perf_cluster)."""

from __future__ import annotations

import json

import pytest

from emu.apps.perf import report, stats
from emu.apps.perf.kernel_rtt import (
    PathRtt,
    RttError,
    added_rtt_us,
    emu_rtt_us,
    parse_ping,
    ping_argv,
    ping_rtt,
)
from emu.apps.perf.options import TESTS, UsageError, client_argv, from_args
from emu.cli import build_parser

IPUTILS = """PING 10.0.1.12 (10.0.1.12) 56(84) bytes of data.

--- 10.0.1.12 ping statistics ---
50 packets transmitted, 49 received, 2% packet loss, time 512ms
rtt min/avg/max/mdev = 0.019/0.045/0.062/0.011 ms
"""
BUSYBOX = """--- fd00:0:1::12 ping statistics ---
5 packets transmitted, 5 packets received, 0% packet loss
round-trip min/avg/max = 0.031/0.040/0.052 ms
"""


def test_iputils_summary_in_microseconds():
    r = parse_ping(IPUTILS, "10.0.1.12", 0.01)
    assert (r.sent, r.received) == (50, 49)
    assert (r.min_us, r.avg_us, r.max_us, r.mdev_us) == pytest.approx((19, 45, 62, 11))
    assert r.to_json()["avg_us"] == pytest.approx(45) and r.interval_s == 0.01


def test_no_echo_or_no_summary_is_an_error_not_a_zero():
    lost = "--- x ping statistics ---\n3 packets transmitted, 0 received, 100% packet loss\n"
    with pytest.raises(RttError, match="no echo"):
        parse_ping(lost, "x")
    with pytest.raises(RttError, match="no summary"):
        parse_ping("ping: connect: Network is unreachable\n", "x")


def test_busybox_summary_has_no_mdev():
    r = parse_ping(BUSYBOX, "fd00:0:1::12")
    assert (r.sent, r.received, r.avg_us, r.mdev_us) == (5, 5, pytest.approx(40), 0.0)


def test_ping_argv_is_quiet_numeric_and_bounded():
    argv = ping_argv("10.0.1.12", 7, 0.005)
    assert argv[1:] == ["-n", "-q", "-c", "7", "-i", "0.005", "-W", "1", "10.0.1.12"]


def test_a_missing_ping_program_is_an_rtt_error():
    with pytest.raises(RttError, match="cannot run ping"):
        ping_rtt("127.0.0.1", count=1, prefix=["/nonexistent/emu-no-such-prefix"])
    with pytest.raises(ValueError):
        ping_rtt("127.0.0.1", count=0)


def test_emu_rtt_is_twice_t_typical_for_ping_pong_and_once_for_read():
    ping = PathRtt("a", 10, 10, 20.0, 50.0, 80.0, 5.0, 0.01)
    assert emu_rtt_us("write-lat", 100.0) == 200.0 and emu_rtt_us("send-lat", 100.0) == 200.0
    assert emu_rtt_us("read-lat", 100.0) == 100.0
    assert added_rtt_us("write-lat", 100.0, ping) == 150.0
    assert added_rtt_us("read-lat", 100.0, ping) == 50.0


def _lat(t_typical: float) -> stats.LatResult:
    return stats.latency_stats([t_typical] * 5, 2, 5)


def test_report_lines_name_the_kernel_rtt_and_what_emu_adds():
    ping = PathRtt("10.0.1.12", 50, 50, 19.0, 45.0, 62.0, 11.0, 0.01)
    lines = report.rtt_lines(TESTS["write-lat"], [_lat(100.0)], ping)
    assert lines[0].startswith(" kernel RTT (ICMP echo, same path): avg 45.00 usec")
    assert "(50/50 echoes 10 ms apart)" in lines[0]
    assert lines[1] == (" 2 bytes: emu RTT 200.00 usec = 4.4 x kernel RTT; added by emu "
                        "155.00 usec per round trip")
    assert report.rtt_lines(TESTS["write-lat"], [_lat(1.0)], None, "no ping") == \
        [" kernel RTT: not measured (no ping)"]
    assert report.rtt_lines(TESTS["write-lat"], [_lat(1.0)], None) == []


def test_json_latency_results_carry_kernel_and_added_rtt():
    ping = PathRtt("10.0.1.12", 50, 50, 19.0, 40.0, 62.0, 11.0, 0.01)
    kw = dict(role="client", params={}, device="d", mtu=4096, local=[], remote=[], errors=[],
              min_bw=None)
    doc = json.loads(json.dumps(report.document(TESTS["send-lat"], results=[_lat(60.0)],
                                                kernel_rtt=ping, **kw)))
    [r] = doc["results"]
    assert doc["kernel_rtt"]["avg_us"] == 40.0 and doc["kernel_rtt_error"] is None
    assert (r["emu_rtt_us"], r["kernel_rtt_us"], r["added_rtt_us"], r["rtt_ratio"]) == \
        (120.0, 40.0, 80.0, 3.0)
    none = report.document(TESTS["send-lat"], results=[_lat(60.0)], kernel_rtt_error="x", **kw)
    assert none["kernel_rtt"] is None and none["kernel_rtt_error"] == "x"
    assert none["results"][0]["added_rtt_us"] is None and none["results"][0]["emu_rtt_us"] == 120
    bw = report.document(TESTS["write-bw"], results=[], **kw)
    assert bw["kernel_rtt"] is None


def test_ping_count_flag_defaults_validates_and_reaches_the_client():
    o = from_args(build_parser().parse_args(["perf", "write-lat", "h"]))
    assert o.ping_count == 50 and "--ping-count" not in client_argv(o, "10.0.1.12")
    o = from_args(build_parser().parse_args(["perf", "write-lat", "h", "--ping-count", "0"]))
    assert o.ping_count == 0
    assert client_argv(o, "10.0.1.12")[-2:] == ["--ping-count", "0"]
    with pytest.raises(UsageError, match="--ping-count"):
        from_args(build_parser().parse_args(["perf", "write-lat", "h", "--ping-count", "-1"]))

# SPDX-License-Identifier: GPL-2.0-only
"""``emu perf`` without a cluster: flags, result math, output formats, data patterns,
the side channel (no root needed)."""

from __future__ import annotations

import json
import math
import random
import threading

import pytest

from emu.apps.perf import report, stats
from emu.apps.perf.channel import Channel, ChannelError, PeerAbort
from emu.apps.perf.options import (
    DEFAULT_PORT,
    TESTS,
    UsageError,
    client_argv,
    from_args,
    server_argv,
)
from emu.apps.perf.pattern import CORRUPT_ENV, DataError, Pattern, client_stream
from emu.cli import build_parser, main


def parse(*argv: str):
    return from_args(build_parser().parse_args(["perf", *argv]))


# -- flags ------------------------------------------------------------------------------


def test_perftest_defaults_per_test():
    o = parse("write-bw", "10.0.1.12")
    assert (o.size, o.iters, o.tx_depth, o.qps, o.cq_mod, o.port) == (65536, 5000, 128, 1, 100,
                                                                      18515)
    assert o.is_client and not o.report_gbits and o.verify and o.sizes == [65536]
    o = parse("read-bw", "h")
    assert o.iters == 1000
    o = parse("send-lat")
    assert (o.size, o.iters, o.tx_depth, o.server) == (2, 1000, 1, None)
    assert not o.is_client


def test_flags_and_aliases():
    o = parse("read-bw", "fd00:0:1::12", "-s", "64K", "-n", "10", "-q", "4", "-t", "32",
              "-p", "18600", "-m", "1024", "--report_gbits", "--json", "--min-bw", "2.5",
              "--no-verify", "-Q", "8", "-o", "4", "-N")
    assert (o.server, o.size, o.iters, o.qps, o.tx_depth, o.port, o.mtu) == (
        "fd00:0:1::12", 65536, 10, 4, 32, 18600, 1024)
    assert o.report_gbits and o.json and o.min_bw == 2.5 and not o.verify
    assert (o.cq_mod, o.outs, o.no_peak) == (8, 4, True)
    assert parse("write-bw", "x", "--report-gbits", "-s", "1M").size == 1 << 20
    assert parse("write-bw", "x", "-D", "2.5").duration == 2.5


def test_all_sizes_are_perftests_2_to_8mib():
    o = parse("write-bw", "x", "-a")
    assert o.sizes == [2 ** k for k in range(1, 24)]


@pytest.mark.parametrize("argv, words", [
    (["write-bw", "x", "-a", "-D", "2"], "--duration"),
    (["write-lat", "x", "-q", "2"], "one QP"),
    (["write-bw", "x", "-n", "3"], "--iters"),
    (["write-bw", "x", "-s", str((1 << 23) + 1)], "--size"),
    (["write-bw", "x", "-t", "0"], "--tx-depth"),
    (["write-bw", "--min-bw", "1"], "client option"),
    (["write-bw", "--from", "h1"], "--to"),
    (["write-bw", "10.0.0.1", "--from", "h1", "--to", "h2"], "ADDR"),
    (["write-bw", "--from", "h1", "--to", "h1"], "different"),
    (["write-bw", "x", "--cluster", "c"], "--from/--to"),
    (["write-bw", "--from", "a:h1", "--to", "b:h2"], "different clusters"),
    (["write-bw", "--from", "a:h1", "--to", "h2", "-c", "b"], "different clusters"),
    (["write-bw", "--from", ":h1", "--to", "h2"], "CLUSTER:NODE"),
    (["write-bw", "--from", "a:h1", "--to", "a:h1"], "different"),
    (["write-lat", "x", "--min-bw", "1"], "BW tests"),
    (["read-lat", "x", "--plot", "a.svg"], "BW tests"),
])
def test_bad_combinations_are_usage_errors(argv, words):
    with pytest.raises(UsageError, match=words):
        parse(*argv)


def test_from_to_take_cluster_colon_node_like_emu_exec():
    o = parse("write-bw", "--from", "big:h1", "--to", "big:h4")
    assert (o.cluster, o.src, o.dst) == ("big", "h1", "h4")
    o = parse("write-bw", "--from", "big:h1", "--to", "h4", "-c", "big")
    assert (o.cluster, o.src, o.dst) == ("big", "h1", "h4")
    o = parse("write-bw", "--from", "h1", "--to", "h2")
    assert (o.cluster, o.src, o.dst) == (None, "h1", "h2")


def test_usage_errors_exit_2(capsys):
    assert main(["perf", "write-lat", "x", "-q", "2"]) == 2
    assert "emu perf:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # argparse's own errors are status 2 as well
        main(["perf", "no-such-test"])
    assert e.value.code == 2


def test_an_unwritable_plot_is_a_usage_error_before_the_run(tmp_path, capsys):
    """Found before anything starts (it was a traceback after the whole test had run):
    one line naming the path and why, exit 2 — here before the cluster is even looked
    up, and nothing is made."""
    (tmp_path / "file").write_text("")
    for rel, why in (("nodir/p.svg", f"no directory {tmp_path}/nodir"),
                     ("file/p.svg", f"{tmp_path}/file is not a directory"),
                     ("", "it is a directory")):
        path = str(tmp_path / rel)
        with pytest.raises(UsageError, match=f"^--plot: cannot write {path}: {why}$"):
            parse("write-bw", "10.0.0.1", "--plot", path)
        assert main(["perf", "write-bw", "--from", "h1", "--to", "h2", "-c", "nosuch-fa",
                     "--plot", path]) == 2
        assert capsys.readouterr().err == f"emu perf: --plot: cannot write {path}: {why}\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["file"]
    assert parse("write-bw", "x", "--plot", str(tmp_path / "ok.svg")).plot == str(
        tmp_path / "ok.svg")


def test_usage_errors_with_json_are_a_json_document(capsys):
    """``--json`` means stdout is one JSON document: a bad flag too (it was plain text on
    stderr only); the line on stderr and exit status 2 stay."""
    assert main(["perf", "write-bw", "--from", "h1", "--to", "h2", "-s", "0", "--json"]) == 2
    out, err = capsys.readouterr()
    assert err == "emu perf: --size must be 1 .. 8388608, got 0\n"
    assert json.loads(out) == {"test": "write-bw", "role": None,
                               "error": "--size must be 1 .. 8388608, got 0",
                               "errors": ["--size must be 1 .. 8388608, got 0"],
                               "passed": False, "exit_status": 2}
    assert main(["perf", "write-bw", "-s", "0"]) == 2  # without --json: the line alone
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("emu perf: --size")


def test_a_run_document_names_its_first_error_as_the_error_document_does():
    kw = dict(role="client", params={}, device="d", mtu=4096, local=[], remote=[], results=[],
              min_bw=None)
    assert report.document(TESTS["write-bw"], errors=[], **kw)["error"] is None
    doc = report.document(TESTS["write-bw"], errors=["a", "b"], **kw)
    assert doc["error"] == "a" and doc["errors"] == ["a", "b"] and doc["passed"] is False


def test_client_argv_round_trips():
    o = parse("send-bw", "--from", "h1", "--to", "h2", "-s", "4096", "-n", "77", "-q", "3",
              "-D", "1.5", "--report_gbits", "--json", "--min-bw", "0.5", "--no-verify",
              "-m", "2048", "--plot", "x.svg", "-u", "9")
    again = parse(*client_argv(o, "10.0.1.12"))
    assert again.server == "10.0.1.12" and again.params() == o.params()
    assert o.params()["qp_timeout"] == 9  # the server's QPs take the client's timeout
    assert (again.min_bw, again.json, again.plot) == (0.5, True, "x.svg")
    srv = parse(*server_argv(o))
    assert srv.server is None and srv.port == o.port


def test_qp_timeout_is_perftests_u_for_roce_only():
    assert parse("write-bw", "x").qp_timeout == 14  # perftest's default: 67 ms
    assert parse("write-bw", "x", "-u", "8").qp_timeout == 8
    with pytest.raises(UsageError, match="--qp-timeout must be 1 .. 31"):
        parse("write-bw", "x", "-u", "0")
    with pytest.raises(UsageError, match="RoCEv2 QP attribute"):
        parse("write-bw", "x", "-u", "8", "--transport", "uet")


def test_default_port_is_the_exchange_modules():
    from emu.api import exchange

    assert DEFAULT_PORT == exchange.DEFAULT_PORT == 18515


# -- result math ------------------------------------------------------------------------


def test_bandwidth_units_are_perftests():
    assert stats.bandwidth(1000 * 2 ** 20, 1.0, gbits=False) == pytest.approx(1000)
    assert stats.bandwidth(125_000_000, 1.0, gbits=True) == pytest.approx(1.0)
    assert stats.bandwidth(1, 0.0, gbits=True) == 0.0
    assert stats.msg_rate(3_000_000, 2.0) == pytest.approx(1.5)


def test_bw_result_average_peak_and_msgrate():
    # four 1000-byte messages: two posted at 0, two at 10; completions 5, 6, 11, 11.5
    r = stats.bw_result(1000, [0, 0, 10, 10], [5, 6, 11, 11.5], gbits=True)
    assert r.iterations == 4 and r.bytes_total == 4000 and r.seconds == 11.5
    assert r.bw_average == pytest.approx(4000 / 11.5 / 125e6)
    assert r.msg_rate == pytest.approx(4 / 11.5 / 1e6)
    # best window: posts from t=10, completions of messages 2..3 at 11.5 → 0.75 s/message
    assert r.bw_peak == pytest.approx(1000 / 0.75 / 125e6)
    assert r.gbps_peak == pytest.approx(r.bw_peak)
    mb = stats.bw_result(1000, [0, 0, 10, 10], [5, 6, 11, 11.5], gbits=False)
    assert mb.bw_average == pytest.approx(4000 / 11.5 / 2 ** 20) and mb.unit == "MB/sec"
    assert stats.bw_result(1000, [0, 0, 10, 10], [5, 6, 11, 11.5], True, peak=False).bw_peak == 0


def test_peak_equals_the_brute_force_definition():
    rng = random.Random(7)
    for _ in range(30):
        n = rng.randint(1, 60)
        tp, t = [], 0.0
        while len(tp) < n:  # batches of equal post times
            t += rng.random()
            tp += [t] * rng.randint(1, 8)
        tp = tp[:n]
        tc, t = [], tp[0]
        while len(tc) < n:  # completion groups, each after its posts
            k = min(n, len(tc) + rng.randint(1, 8))
            t = max(t, tp[k - 1]) + rng.random() + 1e-3
            tc += [t] * (k - len(tc))
        brute = min((tc[j] - tp[i]) / (j - i + 1) for i in range(n) for j in range(i, n)
                    if tc[j] - tp[i] > 0)
        assert stats.peak_message_time(tp, tc) == pytest.approx(brute)


def test_latency_stats_follow_perftest():
    r = stats.latency_stats([float(x) for x in range(100, 0, -1)], 2, 100)  # 1..100 shuffled
    # the two largest samples are dropped; t_max is the largest kept + 1 (perftest indexes m)
    assert (r.t_min, r.t_max, r.t_typical) == (1, 99, 49.5)
    assert r.t_avg == pytest.approx(49.5)
    assert r.t_stdev == pytest.approx(math.sqrt(sum((x - 49.5) ** 2 for x in range(1, 99)) / 98))
    assert (r.p99, r.p99_9) == (99, 99)
    odd = stats.latency_stats([5.0, 1.0, 3.0, 100.0, 200.0], 8, 5)  # kept: 1 3 5 → median 3
    assert (odd.t_min, odd.t_typical, odd.t_max) == (1, 3, 100)
    one = stats.latency_stats([7.0], 2, 1)
    assert (one.t_min, one.t_typical, one.t_max, one.t_stdev) == (7, 7, 7, 0)
    with pytest.raises(ValueError):
        stats.latency_stats([], 2, 0)


def test_latency_fields_are_ordered_for_any_samples():
    rng = random.Random(3)
    for _ in range(200):
        s = [rng.expovariate(0.01) for _ in range(rng.randint(1, 300))]
        r = stats.latency_stats(s, 2, len(s))
        assert r.t_min <= r.t_typical <= r.t_max
        assert r.t_min <= r.t_avg <= r.t_max
        assert r.t_typical <= r.p99 <= r.p99_9 <= max(s)


def test_timeline_series_and_peak():
    tl = stats.Timeline(100.0, resolution=0.1)
    for k in range(25):  # 1.25 MB per 100 ms = 100 Mb/s, for 2.5 s
        tl.add(100.0 + k * 0.1 + 0.05, 1_250_000)
    s = tl.series(1.0, end=102.5)
    assert [t for t, _ in s] == [1.0, 2.0, 2.5]
    assert all(v == pytest.approx(0.1) for _, v in s)
    assert tl.peak_gbps() == pytest.approx(0.1)
    # the same completions cut finer afterwards: a fabric-time run is milliseconds long
    assert len(tl.series(0.2, end=102.5)) == 13


@pytest.mark.parametrize(("elapsed", "step"), [(60.0, 2.0), (3.0, 0.1), (0.0021, 5e-5),
                                               (2.5e-5, 5e-7), (0.0, 0.1)])
def test_series_interval_cuts_a_run_into_about_fifty_points(elapsed, step):
    assert stats.series_interval(elapsed) == pytest.approx(step)


# -- output formats ---------------------------------------------------------------------


def test_table_headers_are_perftests_exactly():
    assert report.header(TESTS["write-bw"], gbits=True) == (
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]")
    assert report.header(TESTS["send-bw"], gbits=False) == (
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
    assert report.header(TESTS["read-lat"], gbits=False) == (
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
        "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
    assert report.RESULT_LINE == "-" * 87


def test_rows_use_perftests_formats():
    r = stats.BwResult(65536, 5000, 1.0, 11036.79, 11036.12, 0.176578, "MB/sec", 0, 0, 0)
    assert report.bw_row(r, gbits=False) == (
        " 65536      5000             11036.79            11036.12\t\t     0.176578")
    slow = stats.BwResult(2, 20, 1.0, 0.000194, 0.000194, 0.012144, "Gb/sec", 0, 0, 0)
    assert report.bw_row(slow, gbits=True) == (  # REPORT_FMT_EXT below 0.1 Gb/s
        " 2          20           0.000194            0.000194            0.012144")
    lat = stats.LatResult(2, 1000, 1.5, 9.25, 2.0, 2.5, 0.5, 7.0, 9.0)
    # what C's printf makes of REPORT_FMT_LAT with these values
    assert report.lat_row(lat) == (" 2       1000          1.50           9.25         2.00     "
                                   "\t       2.50        \t0.50   \t\t7.00    \t\t9.00   ")


def test_banner_and_address_lines():
    lines = report.banner(TESTS["write-bw"], role="client", device="emu-roce (pair:h1)", qps=1,
                          mtu=4096, tx_depth=128, rx_depth=512, cq_mod=100, outs=16,
                          gid_index=0)
    assert lines[0] == lines[-1] == report.RESULT_LINE
    assert lines[1] == " " * 20 + "RDMA_Write BW Test"
    assert " Number of qps   : 1\t\tTransport type : IB" in lines
    assert " Connection type : RC\t\tUsing SRQ      : OFF" in lines
    assert " Mtu             : 4096[B]" in lines and " TX depth        : 128" in lines
    lat = report.banner(TESTS["send-lat"], role="server", device="d", qps=1, mtu=1024,
                        tx_depth=1, rx_depth=512, cq_mod=100, outs=16, gid_index=None)
    assert lat[1].strip() == "Send Latency Test" and " RX depth        : 512" in lat
    assert not any("CQ Moderation" in x for x in lat)
    info = {"qpn": 0x11, "psn": 0x5A5C2B, "rkey": 0x1FD6BC, "va": 0x7F6A1E9BB000,
            "gid": "::ffff:192.168.1.2"}
    assert report.address_line("local", info, "write", 16) == (
        " local address: LID 0000 QPN 0x0011 PSN 0x5a5c2b RKey 0x1fd6bc VAddr 0x007f6a1e9bb000")
    assert report.address_line("remote", info, "read", 16).endswith(
        "PSN 0x5a5c2b OUT 0x10 RKey 0x1fd6bc VAddr 0x007f6a1e9bb000")
    assert report.address_line("local", info, "send", 16) == (
        " local address: LID 0000 QPN 0x0011 PSN 0x5a5c2b")
    assert report.gid_line(info["gid"]) == (
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:01:02")
    assert report.c_hex(0, 6) == "000000" and report.c_hex(0x9F688, 6) == "0x9f688"


def test_json_document_is_valid_json():
    r = stats.bw_result(1024, [0.0, 0.0], [0.5, 1.0], gbits=True,
                        timeline=stats.Timeline(0.0))
    lat = stats.latency_stats([1.0, 2.0, 3.0], 2, 3)
    doc = report.document(TESTS["write-bw"], role="client", params={"report_gbits": True},
                          device="d", mtu=4096, local=[{"qpn": 1, "psn": 2, "x": 3}],
                          remote=[], results=[r, lat], errors=[], min_bw=None)
    back = json.loads(json.dumps(doc))
    assert back["passed"] is True and back["units"]["bw"] == "Gb/sec"
    assert back["local"] == [{"qpn": 1, "psn": 2}]
    assert back["results"][0]["bytes_total"] == 2048
    assert set(back["results"][1]) >= {"t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99",
                                       "p99_9"}
    assert (back["transport"], back["connection"]) == ("roce", "RC")


def test_uet_run_is_not_called_roce():
    """A UET run's banner and ``--json`` name UET and its PDC mode, not RoCE's RC QP."""
    doc = report.document(TESTS["write-bw"], role="client", params={"transport": "uet"},
                          device="emu-uet (pair:h1)", mtu=4096, local=[], remote=[],
                          results=[], errors=[], min_bw=None)
    assert (doc["transport"], doc["connection"]) == ("uet", "RUD")
    lines = report.banner(TESTS["write-bw"], role="client", device="emu-uet (pair:h1)", qps=1,
                          mtu=4096, tx_depth=128, rx_depth=512, cq_mod=100, outs=16,
                          gid_index=0, transport="uet")
    assert " Number of qps   : 1\t\tTransport type : UET" in lines
    assert " Connection type : RUD\t\tUsing SRQ      : OFF" in lines


# -- data patterns ----------------------------------------------------------------------


def test_pattern_detects_a_flipped_byte(monkeypatch):
    monkeypatch.delenv(CORRUPT_ENV, raising=False)
    p = Pattern(8192)
    buf = bytearray(4096)
    mv = memoryview(buf)
    p.fill(mv, client_stream(0), 7)
    assert p.mismatch(mv, client_stream(0), 7) is None
    assert p.mismatch(mv, client_stream(0), 8) is not None  # another iteration differs
    assert p.mismatch(mv, client_stream(1), 7) is not None  # another QP differs
    buf[1234] ^= 0x01
    m = p.mismatch(mv, client_stream(0), 7)
    assert m is not None and m.offset == 1234 and m.got == m.expected ^ 0x01
    with pytest.raises(DataError, match="byte 1234"):
        p.check(mv, client_stream(0), 7, "QP 0 iteration 7")


def test_pattern_is_the_same_on_both_sides_and_shifts_per_iteration():
    a, b = Pattern(1 << 16), Pattern(1 << 16)
    assert bytes(a.data(3, 99, 4096)) == bytes(b.data(3, 99, 4096))
    shifts = {Pattern.shift(0, i) for i in range(10_000)}
    assert len(shifts) == 10_000
    with pytest.raises(ValueError):
        a.data(0, 0, (1 << 16) + 1)


def test_corruption_switch_flips_one_byte_once(monkeypatch):
    monkeypatch.setenv(CORRUPT_ENV, "1")
    p = Pattern(4096)
    mv = memoryview(bytearray(100))
    p.fill(mv, 0, 1)
    assert p.mismatch(mv, 0, 1).offset == 50
    p.fill(mv, 0, 2)
    assert p.mismatch(mv, 0, 2) is None


# -- side channel -----------------------------------------------------------------------


def test_channel_round_trip_poll_and_abort():
    got: dict = {}
    import socket

    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def server():
        ch = Channel.listen(port, 10, bind="127.0.0.1")
        got["hello"] = ch.recv("hello")
        ch.send("go", n=1)
        ch.send("abort", error="boom", code=1)
        got["closing"] = ch.recv()
        ch.close()

    t = threading.Thread(target=server)
    t.start()
    c = Channel.connect("127.0.0.1", port, 10)
    c.send("hello", params={"a": 1})
    assert c.recv("go")["n"] == 1
    with pytest.raises(PeerAbort, match="boom") as e:
        c.recv("result")
    assert e.value.code == 1
    assert c.poll() is None
    c.send("bye")
    t.join(10)
    assert got["hello"]["params"] == {"a": 1} and got["closing"]["op"] == "bye"
    with pytest.raises(ChannelError, match="closed"):
        c.recv(timeout=5)
    c.close()


def test_channel_connect_gives_up_with_a_clear_error():
    with pytest.raises(ChannelError, match="cannot reach"):
        Channel.connect("127.0.0.1", 9, 0.3)  # discard port: nobody listens


def test_a_taken_port_is_a_channel_error_not_a_traceback():
    """A server whose side-channel port another process holds raised OSError out of
    ``emu perf`` (a traceback, exit 1); it is a setup error in one line now."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ChannelError) as e:
            Channel.listen(port, 1, bind="127.0.0.1")
    assert str(e.value) == (f"cannot listen on port {port}: Address already in use (another "
                            "server on this host holds it? -p chooses another)")


def test_channel_connect_to_no_address_fails_at_once_in_one_sentence():
    """``emu perf write-bw 10.0.1.300`` retried "Temporary failure in name resolution" for
    its whole --timeout; it fails at once now, saying what is wrong with the address."""
    import time

    t0 = time.monotonic()
    with pytest.raises(ChannelError) as e:
        Channel.connect("10.0.1.300", DEFAULT_PORT, 60)
    assert time.monotonic() - t0 < 1
    assert str(e.value) == ("cannot reach the server 10.0.1.300 port 18515: '10.0.1.300' is "
                            "not an IPv4 or IPv6 address")


def test_no_nic_daemon_is_a_setup_error_before_waiting(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("EMU_NIC_SOCK", str(tmp_path / "nothing.sock"))
    assert main(["perf", "write-bw", "--timeout", "1"]) == 2  # the server: does not wait
    assert f"no NIC daemon listens at {tmp_path / 'nothing.sock'}" in capsys.readouterr().err
    assert main(["perf", "send-lat", "127.0.0.1", "--json", "--timeout", "1"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] is False and "NIC daemon" in doc["errors"][0]


def test_a_daemon_that_dies_mid_post_is_one_line_not_a_traceback(capsys):
    """kill -9 of the NIC daemon while a client posts (tests/chaos): the post's write fails
    with ECONNRESET; the run ends with exit 1 and one line naming the lost connection."""
    from emu.api import NicError
    from emu.apps.perf import EXIT_FAILED
    from emu.apps.perf.run import Client

    class Dying(Client):
        def _run(self) -> None:
            raise NicError("ECONNRESET", "[Errno 32] Broken pipe")

    side = Dying(parse("write-bw", "127.0.0.1", "--timeout", "1"))
    assert side.run() == EXIT_FAILED
    err = capsys.readouterr().err
    assert err == ("emu perf write-bw (client): NIC daemon connection lost: "
                   "ECONNRESET: [Errno 32] Broken pipe\n")

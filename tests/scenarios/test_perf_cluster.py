# SPDX-License-Identifier: GPL-2.0-only
"""``emu perf`` end to end on a pair cluster (root): every test kind, both modes,
corruption detection, exit statuses. No wall-clock thresholds: only what the
runs report about themselves.

One cluster for the module (bringing it up is the slow part); whatever
happens it is torn down, and the test checks nothing of it is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fabric_util import emu_cli, pair_cluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")
H2 = "10.0.1.12"  # namespaces/pair.toml



@pytest.fixture(scope="module")
def cluster():
    with pair_cluster("p") as name:
        yield name


def perf(cluster: str, test: str, *args: str, check: bool = True, env: dict | None = None
         ) -> tuple[subprocess.CompletedProcess, dict]:
    p = emu_cli("perf", test, "--from", "h1", "--to", "h2", "--cluster", cluster, "--json", *args,
            check=check, env=env)
    return p, json.loads(p.stdout)  # stdout is exactly one JSON document


@pytest.mark.parametrize("test, size, iters", [("write-bw", 65536, 200), ("read-bw", 8192, 100),
                                               ("send-bw", 4096, 100)])
def test_bw_tests_move_the_bytes_they_report(cluster, test, size, iters):
    p, doc = perf(cluster, test, "-s", str(size), "-n", str(iters))
    assert doc["passed"] is True and doc["errors"] == [] and doc["role"] == "client"
    [r] = doc["results"]
    assert (r["size"], r["iterations"], r["bytes_total"]) == (size, iters, size * iters)
    assert r["seconds"] > 0 and r["bw_average"] > 0 and r["msg_rate"] > 0
    assert r["bw_peak"] >= r["bw_average"] * 0.999
    assert doc["remote"][0]["address"] == H2 and doc["mtu"] == 4096
    assert "BW Test" in p.stderr  # the banner went to stderr
    o = doc["overload"]  # and what the run's NICs resent, in words too (not only in --json)
    assert (f"emu perf: {o['retransmits']:,} of {o['tx_packets']:,} packets the NICs of h1 "
            "and h2 sent were retransmissions") in p.stderr and o["tx_packets"] >= iters
    assert o["counted_nics"] == ["h1", "h2"]  # the client's host and the server's hello's


def test_write_bw_several_qps_in_gbits_with_a_smaller_mtu(cluster):
    p, doc = perf(cluster, "write-bw", "-q", "3", "-n", "20", "-s", "5000", "--report_gbits",
                  "-m", "1024")
    [r] = doc["results"]
    assert r["iterations"] == 60 and r["bytes_total"] == 300_000 and r["unit"] == "Gb/sec"
    assert len(doc["local"]) == len(doc["remote"]) == 3 and doc["mtu"] == 1024


def test_all_sizes_run_one_row_each(cluster):
    p, doc = perf(cluster, "send-lat", "-a", "-n", "5")
    assert [r["size"] for r in doc["results"]] == [2 ** k for k in range(1, 24)]
    assert all(r["iterations"] == 5 for r in doc["results"])


def test_latency_fields_are_present_and_ordered(cluster):
    for test in ("write-lat", "read-lat", "send-lat"):
        p, doc = perf(cluster, test, "-n", "50", "-s", "64")
        [r] = doc["results"]
        assert r["iterations"] == 50 and r["size"] == 64
        assert 0 < r["t_min"] <= r["t_typical"] <= r["t_max"]
        assert r["t_min"] <= r["t_avg"] <= r["t_max"] and r["t_stdev"] >= 0
        assert r["t_typical"] <= r["p99"] <= r["p99_9"]


def test_latency_json_carries_the_kernel_rtt_and_what_emu_adds(cluster):
    """The kernel's ICMP round trip over the same path, measured in the same run, beside
    each latency row; only consistency is checked (no thresholds on times)."""
    for test in ("write-lat", "send-lat"):
        p, doc = perf(cluster, test, "-n", "50", "--ping-count", "5")
        k = doc["kernel_rtt"]
        assert k["address"] == H2 and k["sent"] == 5 and 0 < k["received"] <= 5
        assert 0 < k["min_us"] <= k["avg_us"] <= k["max_us"]
        [r] = doc["results"]
        assert r["emu_rtt_us"] == pytest.approx(2 * r["t_typical"])
        assert r["kernel_rtt_us"] == k["avg_us"]
        assert r["added_rtt_us"] == pytest.approx(r["emu_rtt_us"] - k["avg_us"])
        assert r["rtt_ratio"] == pytest.approx(r["emu_rtt_us"] / k["avg_us"])
        assert "kernel RTT (ICMP echo, same path): avg" in p.stderr  # --json: text on stderr
    p, doc = perf(cluster, "write-lat", "-n", "20", "--ping-count", "0")
    assert doc["kernel_rtt"] is None and doc["results"][0]["added_rtt_us"] is None
    assert "kernel RTT" not in p.stderr


def test_kernel_rtt_function_measures_a_cluster_path(cluster):
    from emu.apps.perf.kernel_rtt import kernel_rtt

    r = kernel_rtt(cluster, "h1", "h2", count=3, interval=0.01)
    assert r.address == H2 and r.sent == 3 and r.received > 0 and r.avg_us > 0


def test_text_output_has_perftests_table(cluster):
    p = emu_cli("perf", "write-lat", "--from", "h1", "--to", "h2", "-c", cluster, "-n", "20")
    lines = p.stdout.splitlines()
    assert " " * 20 + "RDMA_Write Latency Test" in lines
    assert any(x.startswith(" local address: LID 0000 QPN 0x") and "RKey 0x" in x
               for x in lines)
    head = lines.index(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
                       "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% "
                       "percentile[usec] ")
    assert lines[head + 1].split()[:2] == ["2", "20"]


def test_server_client_pair_via_emu_exec(cluster):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    py = [sys.executable, "-m", "emu"]
    server = subprocess.Popen(py + ["exec", f"{cluster}:h2", "--", *py, "perf", "read-bw",
                                    "-p", "18611", "--json"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        client = emu_cli("exec", f"{cluster}:h1", "--", *py, "perf", "read-bw", H2, "-p", "18611",
                     "-s", "16384", "-n", "50", "--json")
        out, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 0, err
    cdoc, sdoc = json.loads(client.stdout), json.loads(out)
    assert cdoc["role"] == "client" and sdoc["role"] == "server"
    assert sdoc["params"]["sizes"] == [16384]  # the server ran with the client's parameters
    assert sdoc["results"][0]["bytes_total"] == cdoc["results"][0]["bytes_total"] == 50 * 16384
    assert cdoc["local"][0]["qpn"] == sdoc["remote"][0]["qpn"]
    assert "Waiting for client" not in out  # --json: stdout is the document only


@pytest.mark.parametrize("test, detector", [("write-bw", "server"), ("read-bw", "client"),
                                            ("send-lat", "server")])
def test_corrupted_data_fails_the_run(cluster, test, detector):
    """A test-only switch makes the checking side flip one received byte before it checks."""
    p, doc = perf(cluster, test, "-n", "20", "-s", "4096", check=False,
                  env={"EMU_PERF_TEST_CORRUPT": "1"})
    assert p.returncode == 1, p.stderr
    assert doc["passed"] is False
    assert "data verification failed" in doc["errors"][0] and "byte 2048" in doc["errors"][0]
    assert (detector == "server") == doc["errors"][0].startswith("the server stopped")


def test_min_bw_missed_exits_1_and_plot_is_written(cluster, tmp_path):
    svg = tmp_path / "bw.svg"
    p, doc = perf(cluster, "write-bw", "-s", "65536", "-D", "1", "--min-bw", "1000000",
                  "--plot", str(svg), check=False)
    assert p.returncode == 1 and "--min-bw" in doc["errors"][0]
    png = tmp_path / "bw.png"
    assert f"wrote {svg} and {png} (" in p.stderr
    assert doc["results"][0]["series"] and 'id="series-0"' in svg.read_text()
    assert ">65536 B</text>" in svg.read_text() and png.read_bytes()[:4] == b"\x89PNG"


def test_a_plot_that_cannot_be_written_after_the_run_is_one_line(cluster):
    """/dev/full passes the check before the run (it exists and may be written) and then
    refuses the chart, as a full disk would: the results stand, the failure is one line
    and exit status 2 (it was a traceback after the results)."""
    p, doc = perf(cluster, "write-bw", "-s", "4096", "-n", "50", "--plot", "/dev/full",
                  check=False)
    assert p.returncode == 2, p.stderr
    assert doc["results"][0]["iterations"] == 50 and doc["passed"] is False
    said = "cannot write /dev/full: No space left on device"
    assert doc["errors"] == [said]
    assert [ln for ln in p.stderr.splitlines() if said in ln] == [
        f"emu perf write-bw (client): {said}"]
    assert "Traceback" not in p.stderr


def test_setup_errors_exit_2(cluster):
    p = emu_cli("perf", "write-bw", "--from", "h1", "--to", "nosuch", "-c", cluster, check=False)
    assert p.returncode == 2 and "nosuch" in p.stderr
    p = emu_cli("perf", "write-bw", "--from", "h1", "--to", "h2", "-c", cluster + "x", check=False)
    assert p.returncode == 2 and "no cluster" in p.stderr
    # a client with nobody to talk to gives up after --timeout
    p = emu_cli("exec", f"{cluster}:h1", "--", sys.executable, "-m", "emu", "perf", "write-bw", H2,
            "-p", "18612", "--timeout", "1", "--json", check=False)
    assert p.returncode == 2 and json.loads(p.stdout)["passed"] is False


def _holds(cluster: str, host: str) -> int:
    p = emu_cli("nicd", "stats", "--cluster", cluster, "--host", host, "--json")
    return int(json.loads(p.stdout)["totals"]["rx_holds"])


def test_receive_coalescing_holds_a_streams_reads_never_a_ping_pongs(cluster):
    """The default (adaptive) coalescing: a write-bw stream at the port's line rate is read
    in batches at the receiver; a latency test's reads are never held, at either end."""
    before = {h: _holds(cluster, h) for h in ("h1", "h2")}
    for transport in ("roce", "uet"):
        perf(cluster, "write-lat", "-n", "300", "--transport", transport)
    assert {h: _holds(cluster, h) for h in ("h1", "h2")} == before
    p, doc = perf(cluster, "write-bw", "-s", "1048576", "-n", "60", "--transport", "uet")
    assert doc["passed"] is True
    assert _holds(cluster, "h2") > before["h2"]


def test_start_at_waits_for_the_fabric_clock_and_says_when_it_was_missed(cluster):
    """``--start-at T``: the client posts nothing before the cluster's fabric clock reads
    T (so separate commands start together at any scale); a T already past is said and
    the run starts at once."""
    from emu.cluster.cluster import plan_of

    clock = plan_of(cluster).time.clock()
    at = clock.now() + clock.to_fabric(3.0)
    p, doc = perf(cluster, "write-bw", "-s", "4096", "-n", "50", "--start-at", repr(at))
    assert doc["passed"] and doc["start_at"] == {"fabric_s": at, "missed_by_s": None}
    [r] = doc["results"]
    # the run began at T at the earliest: it cannot have ended before T + its own length
    assert clock.now() >= at + r["seconds"]
    p, doc = perf(cluster, "write-bw", "-s", "4096", "-n", "50", "--start-at", "0")
    assert doc["passed"] and doc["start_at"]["missed_by_s"] > 0
    assert "--start-at 0 passed" in p.stderr

# SPDX-License-Identifier: GPL-2.0-only
"""``emu perf … --oob perftest`` end to end on a pair cluster (root): both sides speak
perftest's side-channel bytes (emu.apps.perf.perftest_wire), every BW test kind runs
and verifies data, a corrupted byte fails the run, and mismatched sides stop with
exit status 2 and one line. No wall-clock thresholds.

One cluster for the module, torn down (and checked gone) whatever happens.
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
    with pair_cluster("po") as name:
        yield name


def perf(cluster: str, test: str, *args: str, check: bool = True, env: dict | None = None
         ) -> tuple[subprocess.CompletedProcess, dict]:
    p = emu_cli("perf", test, "--from", "h1", "--to", "h2", "--cluster", cluster, "--json",
                "--oob", "perftest", "-v", *args, check=check, env=env)
    return p, json.loads(p.stdout)


@pytest.mark.parametrize("test, args, note", [
    ("write-bw", ("-s", "65536", "-n", "200"), "checked every slot's data"),
    ("write-bw", ("-s", "100", "-n", "50", "-q", "2"), "checked every slot's data"),
    ("read-bw", ("-s", "1000", "-n", "100"), None),
    # more messages than the send queue is deep: the receive slots follow -r, not -t
    ("send-bw", ("-s", "4096", "-n", "300", "-q", "2"), "checked every message's data"),
])
def test_bw_tests_over_perftests_side_channel(cluster, test, args, note):
    p, doc = perf(cluster, test, *args)
    assert doc["passed"] is True and doc["errors"] == [] and doc["params"]["oob"] == "perftest"
    [r] = doc["results"]
    size, iters = int(args[1]), int(args[3])
    qps = int(args[5]) if len(args) > 4 else 1
    assert (r["size"], r["iterations"], r["bytes_total"]) == (size, iters * qps,
                                                               size * iters * qps)
    assert len(doc["local"]) == len(doc["remote"]) == qps
    assert doc["remote"][0]["address"] == H2 and doc["local"][0]["address"] == "10.0.1.11"
    if note is not None:  # the server says what it verified (its stderr, prefixed [h2])
        assert f"[h2] emu perf {test}: the client is emu perf: {note}" in p.stderr
    if test != "send-bw":  # the server prints the client's BW report, as perftest's does
        rows = [x for x in p.stderr.splitlines() if x.startswith(f"[h2]  {size} ")]
        assert rows and rows[0].split()[2] == str(iters * qps)


def test_all_sizes_write_and_read(cluster):
    for test in ("write-bw", "read-bw"):
        p, doc = perf(cluster, test, "-a", "-n", "5")
        assert [r["size"] for r in doc["results"]] == [2 ** k for k in range(1, 24)]


@pytest.mark.parametrize("test, args", [("write-lat", ("-n", "100")),
                                        ("read-lat", ("-n", "100", "-s", "64")),
                                        ("send-lat", ("-n", "100", "-s", "64")),
                                        ("send-lat", ("-n", "600", "-s", "2")),
                                        ("write-lat", ("-a", "-n", "5"))])
def test_latency_tests_over_perftests_side_channel(cluster, test, args):
    """perftest's loops: write-lat stamps each message's last byte with the iteration as
    a C char and polls for it (both sides report rows); read-lat READs one at a time."""
    p, doc = perf(cluster, test, *args)
    assert doc["passed"] is True and doc["errors"] == []
    sizes = [2 ** k for k in range(1, 24)] if "-a" in args else [int(args[3]) if len(args) > 2
                                                               else 2]
    assert [r["size"] for r in doc["results"]] == sizes
    r = doc["results"][0]
    assert r["iterations"] == int(args[args.index("-n") + 1])
    assert 0 < r["t_min"] <= r["t_typical"] <= r["t_max"]
    # the server ran the same loop: --from/--to exits with its status when the client passed


@pytest.mark.parametrize("test", ["write-bw", "read-bw", "send-bw", "write-lat", "read-lat",
                                  "send-lat"])
def test_a_corrupted_byte_fails_the_run(cluster, test):
    p, doc = perf(cluster, test, "-s", "1000", "-n", "20", check=False,
                  env={"EMU_PERF_TEST_CORRUPT": "1"})
    assert p.returncode == 1 and doc["passed"] is False
    assert "data verification failed" in p.stderr


def _pair(cluster: str, server: list[str], client: list[str]
          ) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """A server and a client started by hand (emu exec), each with its own flags."""
    emu = [sys.executable, "-m", "emu"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    srv = subprocess.Popen([*emu, "exec", f"{cluster}:h2", "--", *emu, "perf", *server,
                            "--timeout", "15"], cwd=ROOT, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        cli = subprocess.run([*emu, "exec", f"{cluster}:h1", "--", *emu, "perf", *client,
                              "--timeout", "15"], cwd=ROOT, env=env, text=True,
                             capture_output=True, timeout=120)
        out, err = srv.communicate(timeout=60)
    finally:
        if srv.poll() is None:
            srv.kill()  # our own child, by its handle
            srv.wait()
    return subprocess.CompletedProcess(srv.args, srv.returncode, out, err), cli


def test_different_qp_counts_stop_both_sides_with_status_2(cluster):
    srv, cli = _pair(cluster, ["write-bw", "--oob", "perftest", "-q", "1", "-n", "20"],
                     ["write-bw", H2, "--oob", "perftest", "-q", "2", "-n", "20"])
    assert srv.returncode == 2 and cli.returncode == 2
    assert "second QP exchange differs from its first" in srv.stderr
    assert "same -q" in cli.stderr


def test_emus_own_side_channel_against_a_perftest_one_is_named(cluster):
    srv, cli = _pair(cluster, ["write-bw", "--oob", "perftest", "-n", "20"],
                     ["write-bw", H2, "-n", "20"])
    assert srv.returncode == 2 and cli.returncode == 2
    assert "not a perftest version" in srv.stderr and "without --oob perftest" in srv.stderr


def test_unreachable_server_is_one_line_and_status_2(cluster):
    p = emu_cli("exec", f"{cluster}:h1", "--", sys.executable, "-m", "emu", "perf", "write-bw",
                "10.9.9.9", "--oob", "perftest", "--timeout", "2", check=False)
    assert p.returncode == 2
    [line] = [x for x in p.stderr.splitlines() if x.strip()]
    assert line.startswith("emu perf write-bw (client): cannot reach the server 10.9.9.9 "
                           "port 18515")


def test_a_gid_index_the_nic_does_not_send_from_is_status_2(cluster):
    """-x names the GID the QPs must use; emu's engine has one source GID per host, so any
    other index is a setup error that says which one it uses."""
    p = emu_cli("exec", f"{cluster}:h1", "--", sys.executable, "-m", "emu", "perf", "write-bw",
                H2, "--oob", "perftest", "-x", "99", "--timeout", "5", check=False)
    assert p.returncode == 2
    assert "-x 99: that is no GID, but this NIC's RoCE engine sends from GID index 0 (" in p.stderr

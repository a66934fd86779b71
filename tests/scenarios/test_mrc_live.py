# SPDX-License-Identifier: GPL-2.0-only
"""MRC through the NIC daemons of a pair cluster (root), as a user runs it (issue #35):
``emu perf write-bw|write-lat --transport mrc`` move and verify their bytes at the
fabric's rate; through 1 % loss on the cable the transfer still completes, resending
holes only; and a capture of it is MRC to Wireshark (emu's Lua dissectors), every ICRC
good, one QP's packets on many EVs (source ports).

No wall-clock thresholds: only what the runs and the capture say about themselves."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from fabric_util import emu_cli, pair_cluster

from emu.wire import wireshark

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")
TSHARK = shutil.which("tshark")


@pytest.fixture(scope="module")
def cluster():
    with pair_cluster("m") as name:
        yield name


def perf(cluster: str, test: str, *args: str) -> dict:
    p = emu_cli("perf", test, "--from", "h1", "--to", "h2", "--cluster", cluster, "--json",
                "--transport", "mrc", *args)
    return json.loads(p.stdout)


def test_write_bw_moves_and_verifies_its_bytes(cluster):
    doc = perf(cluster, "write-bw", "-s", "65536", "-n", "100", "--report_gbits")
    assert doc["passed"] is True and doc["errors"] == [], doc["errors"]
    [r] = doc["results"]
    assert r["bytes_total"] == 65536 * 100 and r["bw_average"] > 0
    o = doc["overload"]
    assert o["tx_packets"] >= 100 * 16 and o["retransmits"] == 0  # a clean cable


def test_write_lat_one_packet_messages(cluster):
    doc = perf(cluster, "write-lat", "-s", "64", "-n", "50")
    assert doc["passed"] is True, doc["errors"]
    [r] = doc["results"]
    assert r["iterations"] == 50 and r["t_typical"] > 0


def test_loss_on_the_cable_is_recovered_by_resending_holes(cluster):
    emu_cli("impair", "-c", cluster, "h1:h2", "--loss", "1%")
    try:
        doc = perf(cluster, "write-bw", "-s", "1048576", "-n", "20")
    finally:
        emu_cli("impair", "-c", cluster, "h1:h2", "--clear")
    assert doc["passed"] is True, doc["errors"]
    o = doc["overload"]
    sent = 20 * 256  # 4 KiB packets of 20 x 1 MiB
    # seeded 1 % loss of ~5,000 data packets: some resent, holes only (go-back-N would
    # resend everything after each loss: thousands)
    assert 0 < o["retransmits"] < 0.1 * sent, o


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_a_capture_is_mrc_to_wireshark_with_good_icrcs_and_many_evs(cluster, tmp_path: Path):
    pcap = tmp_path / "mrc.pcapng"
    cap = subprocess.Popen([*emu_cmd(), "capture", "--cluster", cluster, "h1-h2", "-w",
                            str(pcap), "--count", "400"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)  # the capture is listening (it prints nothing before)
        perf(cluster, "write-bw", "-s", "65536", "-n", "20")
        assert cap.wait(timeout=120) == 0, cap.stderr.read()
    finally:
        if cap.poll() is None:
            cap.kill()
            cap.wait()
    out = subprocess.run([TSHARK, "-r", str(pcap), *wireshark.tshark_args(), "-Y", "mrc",
                          "-T", "fields", "-e", "mrc.bth.opcode", "-e", "udp.srcport",
                          "-e", "udp.dstport", "-e", "roce.icrc_ok"],
                         capture_output=True, text=True, check=True).stdout
    rows = [ln.split("\t") for ln in out.splitlines() if ln.strip()]
    assert len(rows) > 100, out[-2000:]
    assert all(r[3] == "1" or r[3].lower() == "true" for r in rows), rows[:5]  # ICRC good
    data = [r for r in rows if r[2] == "4971" and int(r[0], 0) in range(0xC6, 0xCC)]
    sacks = [r for r in rows if int(r[0], 0) == 0xDC]
    assert data and sacks
    evs = Counter(r[1] for r in data)
    assert len(evs) >= min(len(data), 64), evs  # sprayed: a new EV per packet


def emu_cmd() -> list[str]:
    import sys

    return [sys.executable, "-m", "emu"]

# SPDX-License-Identifier: GPL-2.0-only
"""Emulator overload end to end (root): a receive-buffer overflow is overload, not loss.

A pair cluster whose ports run at 10 Gb/s; while ``emu perf write-bw`` runs,
the receiving NIC daemon is stopped (SIGSTOP) for a moment — a daemon behind
its traffic, as a starved CPU makes it. Its socket buffer overflows in the
kernel. The run must still deliver verified data (go-back-N), and
``emu perf --json`` must say the result is not credible, with the cause
``rx_socket`` in ``nicd h2``; stderr carries the warning line. No wall-clock
thresholds: the sleeps only place the stop inside the transfer.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from fabric_util import ROOT, emu_cli

from emu.fabric import state
from emu.fabric.naming import random_cluster
from emu.nic.protocol import call_once, sock_path

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


@contextlib.contextmanager
def _pair(prefix: str, rate: str) -> Iterator[tuple[str, str]]:
    """A pair cluster in real time at line rate ``rate`` (what this machine's own limits
    are measured against): (its name, what ``emu up`` printed); down after."""
    name = random_cluster(prefix)
    try:
        up = emu_cli("up", "namespaces/pair.toml", "--name", name, "--set", "time.scale=1",
                     "--set", f"link.rate={rate}")
        yield name, up.stdout + up.stderr
    finally:
        if state.load(name) is not None:
            emu_cli("down", name, check=False)
        assert state.load(name) is None


@pytest.fixture
def cluster():
    with _pair("cr", "10gbit") as (name, said):
        # more than this machine sustains: emu up says so before anything runs
        assert "warning: line rate 10gbit exceeds" in said
        yield name


def test_receive_buffer_overflow_is_reported_as_overload(cluster):
    # the port's line rate is serialized by the kernel too (a tbf on the host's egress)
    tc = subprocess.run(["ip", "netns", "exec", f"{cluster}-h1", "tc", "qdisc", "show", "dev",
                         "eth0"], capture_output=True, text=True, check=True).stdout
    assert "tbf e3e0: root" in tc and "rate 10Gbit" in tc, tc
    pid = call_once(sock_path(cluster, "h2"), "stats")["pid"]
    perf = subprocess.Popen([sys.executable, "-m", "emu", "perf", "write-bw", "--cluster",
                             cluster, "--from", "h1", "--to", "h2", "-s", "1M", "-D", "4",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        time.sleep(2.0)  # into the transfer (connection set up, data flowing)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.3)  # ~375 MB at 10 Gb/s against a 4 MiB socket buffer
    finally:
        os.kill(pid, signal.SIGCONT)
    out, err = perf.communicate(timeout=120)
    assert perf.returncode == 0, err  # data verified: the protocol recovered
    doc = json.loads(out)
    o = doc["overload"]
    assert doc["credible"] is False and o["credible"] is False
    assert o["causes"].get("rx_socket", 0) > 0, o
    assert o["daemons"]["nicd h2"]["rx_socket"] > 0
    assert "NOT CREDIBLE" in err and "rx_socket" in err
    # the daemon says so too, and emu status shows it
    st = json.loads(emu_cli("status", cluster, "--json").stdout)
    assert st["overload"]["nicd h2"]["rx_socket"] > 0


@pytest.fixture
def uet_cluster():
    with _pair("cu", "1gbit") as (name, _):
        yield name


def test_a_timeout_a_stalled_daemon_caused_is_reported_as_overload(uet_cluster):
    """UET: the receiving daemon stopped three times for 60 ms. Its socket holds what
    arrives (the window bounds it: no overflow), the sender's retransmission timer
    fires, and the ACKs that come after say — by NSCC's ``service_time`` against each
    datagram's kernel receive stamp — that the packets had been there all along: the
    timeouts were the emulator's (``rto_held`` in ``nicd h1``), not the network's."""
    cluster = uet_cluster
    pid = call_once(sock_path(cluster, "h2"), "stats")["pid"]
    perf = subprocess.Popen([sys.executable, "-m", "emu", "perf", "write-bw", "--cluster",
                             cluster, "--from", "h1", "--to", "h2", "-s", "1M", "-D", "4",
                             "--transport", "uet", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        time.sleep(1.5)  # into the transfer
        for _ in range(3):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.06)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.4)
    finally:
        os.kill(pid, signal.SIGCONT)
    out, err = perf.communicate(timeout=120)
    assert perf.returncode == 0, err  # data verified
    o = json.loads(out)["overload"]
    assert o["credible"] is False and o["causes"].get("rto_held", 0) > 0, o
    assert o["daemons"]["nicd h1"]["rto_held"] > 0
    assert "NOT CREDIBLE" in err and "rto_held" in err

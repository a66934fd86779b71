# SPDX-License-Identifier: GPL-2.0-only
"""A cable delivers in order (root): no transport sees an emulated link reorder.

A veth hands each packet to the receive backlog of the CPU that sent it, and a
shaped link (the host port's tbf) sends from two places — the sender's system
call and the qdisc's timer, on different CPUs — so unless the veth receives
through its NAPI ring (GRO on, TSO off: :func:`emu.fabric.build.cable_offloads`)
the two backlogs raced and one flow arrived out of order. RoCEv2 makes that
visible: its responder NAKs a packet ahead of the expected PSN, which on a
link with no loss and no overload drop can only be reordering, and go-back-N
resends. Before the fix, 4 of 6 such runs at 1 Gb/s over IPv6 saw it.
"""

from __future__ import annotations

import json
import os

import pytest
from fabric_util import emu_cli, pair_cluster

from emu.cpu import rt_throttled
from emu.fabric import netns
from emu.ifinfo import feature
from emu.nic.protocol import call_once, sock_path

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


def _features(ns: str) -> dict[str, bool]:
    with netns.entered(ns):
        return {k: feature("eth0", k) for k in ("tx", "tso", "gro")}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU cannot race itself")
def test_a_lossless_cable_never_makes_roce_see_out_of_sequence():
    with pair_cluster("co", "--set", "nic.family=6") as c:
        for h in ("h1", "h2"):  # every port receives through its NAPI ring
            assert _features(f"{c}-{h}") == {"tx": False, "tso": False, "gro": True}
        for _ in range(3):
            run = emu_cli("perf", "write-bw", "--cluster", c, "--from", "h1", "--to", "h2",
                          "-s", "1M", "-n", "100", "--json")
            assert json.loads(run.stdout)["overload"]["causes"].get("rx_socket", 0) == 0
        st = call_once(sock_path(c, "h2"), "stats")
        # the daemon runs as soon as it wakes: real-time where the kernel throttles it
        # (emu.cpu), else its short slice (Linux 6.12+)
        if rt_throttled():
            assert st["sched"] == "fifo 1"
        elif st["sched_slice_s"] is not None:
            assert st["sched_slice_s"] == pytest.approx(100e-6)
        eng = st["transports"]["roce"]["engine"]
        assert eng["rx_packets"] > 70_000  # the transfers did run through this responder
        assert eng.get("rx_out_of_sequence", 0) == 0, eng
        assert eng.get("tx_seq_naks", 0) == 0, eng

# SPDX-License-Identifier: GPL-2.0-only
"""A pair cluster run dilated gives the same fabric-time answer (issue 34's DieCast check).

``emu perf write-bw`` RoCEv2 and UET at time scale 1 and 2: the fabric Gb/s of the two
scales agree with each other and with the line rate's payload share, and the wall
figures beside them are the fabric ones / scale. No wall-clock threshold: only the two
scales' fabric results are compared, with each other and with the configured rate.
Captures, ``[[event]]`` and ``emu impair`` at a scale: ``test_fabric_time_tools_live.py``;
the switch pipeline: ``test_switch_fabric_time_live.py``. Clusters are removed also
when a check fails."""

from __future__ import annotations

import json

import pytest
from fabric_util import emu_cli, pair_cluster

from emu.fabric import state

LINE = 1e9  # the NIC line rate the test gives (bits/s, fabric)


def payload_share(transport: str) -> float:
    """The line rate's share that is payload, loosely (RoCEv2: 4096-byte packets with
    BTH, ICRC, UDP, IP and Ethernet headers, 0.986; UET's packets are no smaller)."""
    return 4096 / (4096 + 12 + 4 + 8 + 20 + 14)


#: runs of one (transport, scale) tried for one whose daemons kept up: emu counts a run's
#: late sends and the like (a busy machine: real time at 1 Gb/s is the least slack there
#: is), and such a run measures the machine, not the fabric, so it is not compared
TRIES = 3


def fell_behind(doc: dict) -> set[str]:
    """The run's overload causes that are the daemons' lateness (``scale_too_small`` is the
    plan's floor for the pair's 400 Gb/s cables, which this test runs at 1 Gb/s)."""
    return set((doc.get("overload") or {}).get("causes") or {}) - {"scale_too_small"}


def write_bw(cluster: str, transport: str) -> dict:
    """A run's document whose daemons kept up (the last one when none of :data:`TRIES`
    did)."""
    for _ in range(TRIES):
        p = emu_cli("perf", "write-bw", "--from", "h1", "--to", "h2", "-c", cluster, "-s",
                    "1M", "-n", "60", "--transport", transport, "--json", timeout=300)
        doc = json.loads(p.stdout)
        if not fell_behind(doc):
            break
    return doc


def test_write_bw_is_the_same_in_fabric_time_at_scale_1_and_2():
    fabric: dict[tuple[str, int], float] = {}
    lateness: dict[tuple[str, int], list[str]] = {}  # what a compared run was flagged for
    for scale in (1, 2):
        # the same fabric at both scales: the line rate given (with none, the plan proposes
        # what this machine sustains at the scale, which grows with it)
        with pair_cluster("ft", "--set", f"time.scale={scale}", "--set",
                          "nic.line_rate=1gbit") as name:
            st = state.load(name)
            assert st is not None and st["plan"]["time"]["scale"] == scale
            for transport in ("roce", "uet"):
                doc = write_bw(name, transport)
                assert doc["passed"], doc["errors"]
                assert doc["time"]["scale"] == scale and doc["units"]["time"] == "fabric"
                r = doc["results"][0]
                fabric[(transport, scale)] = r["gbps_average"]
                lateness[(transport, scale)] = sorted(fell_behind(doc))
                assert r["wall"]["gbps_average"] == pytest.approx(r["gbps_average"] / scale)
            if scale != 1:
                text = emu_cli("status", name).stdout
                assert f"time scale {scale}: manual" in text
                assert f"one fabric ms costs {scale} ms of wall time" in text
                emu_cli("impair", "-c", name, "h1-h2", "--loss", "0%")
    for transport in ("roce", "uet"):
        one, two = fabric[(transport, 1)], fabric[(transport, 2)]
        assert two == pytest.approx(one, rel=0.15), (transport, fabric, lateness)
        for g in (one, two):  # near the line rate's payload share, in fabric Gb/s
            assert 0.6 * payload_share(transport) * LINE / 1e9 < g <= LINE / 1e9, fabric

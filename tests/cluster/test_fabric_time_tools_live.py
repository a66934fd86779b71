# SPDX-License-Identifier: GPL-2.0-only
"""``emu capture``, ``[[event]]`` and ``emu impair`` on a pair cluster at time scale 4.

Issue 34, item 5: what a user reads is fabric time. One cluster, dilated ×4, with a
1 Gb/s fabric line rate (250 Mb/s on the wall clock, which this shared machine keeps
up with):

* two scheduled impair events fire in ``at`` order, and the event log records each
  with its fabric ``at``, fabric time, the scale, and (for the rate) the fabric and
  the wall figure; the kernel's tbf has rate / 4;
* a capture of a paced write-bw flow has fabric timestamps: the median gap between
  data packets is near the fabric serialization time of one (a loose ratio, far from
  the ×4 a wall-clock capture would show; no wall-clock bound anywhere), by emu's
  reader and by tshark's ``frame.time_delta_displayed``;
* ``emu impair --rate`` takes fabric units (the tbf gets rate / 4, the output says
  both), ``--clear`` returns to the plan's wall serializer, ``--delay`` without netem
  fails in fabric units.

The cluster is taken down, and its namespaces checked gone, also when a check fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fabric_util import ROOT, emu_cli, ns_of_cluster, shipped_real_time

from emu.fabric import naming, state
from emu.wire.pcapio import read_frames, read_info

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")

SCALE = 4
LINE = 1e9  # the NIC line rate, fabric bits/s (250 Mb/s of wall)
H1 = "10.0.1.11"
EVENTS = """
[[event]]
at = "1s"
action = "impair"
target = "h1:h2"
direction = "b_to_a"
rate = "500mbit"

[[event]]
at = "500ms"
action = "impair"
target = "h1:h2"
direction = "a_to_b"
loss = "0%"
"""


@contextlib.contextmanager
def cluster_of(topology: Path, prefix: str, *up_args: str) -> Iterator[str]:
    """``emu up topology`` under a fresh name; down, and its namespaces gone, afterwards."""
    name = naming.random_cluster(prefix)
    try:
        emu_cli("up", str(topology), "--name", name, *up_args, timeout=300)
        yield name
    finally:
        if state.load(name) is not None:
            emu_cli("down", name, check=False)
        assert state.load(name) is None and ns_of_cluster(name) == []
        assert not os.path.exists(f"/run/emu/nic/{name}")


def tbf_rate_bps(cluster: str, node: str) -> float:
    """The rate of the tbf on ``node``'s eth0, as the kernel has it (bits/s)."""
    out = subprocess.run(["ip", "netns", "exec", f"{cluster}-{node}", "tc", "-j", "qdisc",
                          "show", "dev", "eth0"], capture_output=True, text=True,
                         check=True).stdout
    tbf = [q for q in json.loads(out) if q["kind"] == "tbf"]
    assert len(tbf) == 1, out
    return tbf[0]["options"]["rate"] * 8  # tc -j gives bytes/s


def event_log(cluster: str) -> list[dict]:
    path = Path(state.load(cluster)["event_log"])
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_for(cond, what: str, limit: float = 180.0) -> None:
    """Poll until ``cond()``; ``limit`` is a deadline to fail by, not a measurement."""
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.1)


def test_capture_events_and_impair_take_fabric_time_at_scale_4(tmp_path):
    topo = tmp_path / "pair-events.toml"
    # the pair with its rate unstated (the NIC's line rate given below, a serializer
    # that `emu impair --clear` goes back to)
    topo.write_text(shipped_real_time("pair.toml") + EVENTS)
    with cluster_of(topo, "ftt", "--set", f"time.scale={SCALE}", "--set",
                    "nic.line_rate=1gbit") as name:
        # ---- [[event]]: fabric `at`, in order, logged with the scale; rate / scale
        def fired() -> list[dict]:
            return [e for e in event_log(name) if e["action"] == "event"]

        wait_for(lambda: len(fired()) == 2, "the two scheduled events")
        evs = fired()
        assert [e["settings"]["at"] for e in evs] == [0.5, 1.0]
        assert [e["settings"]["source"] for e in evs] == ["[[event]]"] * 2
        assert all(e["scale"] == SCALE for e in evs)
        assert evs[0]["fabric_t"] < evs[1]["fabric_t"]
        assert all(e["settings"]["since_up"] >= e["settings"]["at"] for e in evs)
        assert evs[1]["settings"]["settings"]["rate_bps"] == 500_000_000
        assert evs[1]["settings"]["wall_settings"]["rate_bps"] == 500_000_000 // SCALE
        wait_for(lambda: tbf_rate_bps(name, "h2") == 5e8 / SCALE, "h2's tbf at 500mbit / 4",
                 30)
        # linkctl's own lines carry the fabric time and the scale too
        impairs = [e for e in event_log(name) if e["action"] == "impair"]
        assert impairs and all(e["scale"] == SCALE and "fabric_t" in e for e in impairs)

        # ---- emu capture: fabric timestamps of a flow paced at the fabric line rate
        cap = tmp_path / "flow.pcapng"
        proc = subprocess.Popen([sys.executable, "-m", "emu", "capture", "h1-h2", "-c", name,
                                 "-w", str(cap), "--count", "3000"], cwd=ROOT,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert "timestamps are fabric time" in proc.stderr.readline()
            time.sleep(1.0)  # let it open its socket (a late start only skips packets)
            emu_cli("perf", "write-bw", "--from", "h1", "--to", "h2", "-c", name, "-s", "1M",
                    "-D", "1", timeout=300)
            if proc.poll() is None:  # the flow ended before 3000 packets: what it has
                proc.send_signal(2)
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        data = [f for f in read_frames(cap) if len(f.data) > 4000
                and f.data[26:30] == bytes(int(x) for x in H1.split("."))]
        assert len(data) > 500, len(data)
        gaps = [b.time_ns - a.time_ns for a, b in zip(data, data[1:], strict=False)]
        serialization_ns = statistics.median(len(f.data) for f in data) * 8 / LINE * 1e9
        median = statistics.median(gaps)
        # fabric gaps: near one frame's fabric serialization time (~33 us), where a
        # wall-clock capture would show SCALE times that
        assert 0.5 < median / serialization_ns < 2, (median, serialization_ns)
        info = read_info(cap)
        assert any(c.startswith(f"emu-time: units=fabric scale={SCALE} ")
                   for c in info.comments), info.comments
        assert all(i.tick == 1e-9 for i in info.interfaces)
        if shutil.which("tshark"):
            out = subprocess.run(
                ["tshark", "-r", str(cap), "-Y", f"ip.src == {H1} && frame.len > 4000",
                 "-T", "fields", "-e", "frame.time_delta_displayed"],
                capture_output=True, text=True, check=True).stdout.split()
            shark = statistics.median(float(x) for x in out[1:]) * 1e9
            assert shark == pytest.approx(median, abs=1), (shark, median)

        # ---- emu impair: fabric units in, rate / scale in the kernel, both said
        p = emu_cli("impair", "-c", name, "h1-h2", "-d", "a_to_b", "--rate", "500mbit")
        assert "a_to_b=rate 500mbit (wall 125mbit)" in p.stdout
        assert f"at time scale {SCALE}" in p.stdout
        assert tbf_rate_bps(name, "h1") == 5e8 / SCALE
        last = [e for e in event_log(name) if e["action"] == "event"][-1]
        assert last["settings"]["source"] == "emu impair" and last["scale"] == SCALE
        assert last["settings"]["settings"]["rate_bps"] == 500_000_000
        assert last["settings"]["wall_settings"]["rate_bps"] == 500_000_000 // SCALE
        p = emu_cli("impair", "-c", name, "h1-h2", "-d", "a_to_b", "--clear")
        assert "a_to_b=rate 1gbit (wall 250mbit)" in p.stdout  # the line rate, as planned
        assert tbf_rate_bps(name, "h1") == LINE / SCALE
        status = emu_cli("status", name).stdout
        assert "1G (NIC)" in status and f"at time scale {SCALE} the kernel's tbf" in status

        from emu.fabric import linkctl

        if not linkctl.features().netem:  # the error says the fabric value and the wall one
            p = emu_cli("impair", "-c", name, "h1-h2", "--delay", "10us", check=False)
            err = p.stderr.strip()
            assert p.returncode != 0 and "\n" not in err
            assert "delay 10us (wall 40us) (fabric time" in err and "netem" in err
            assert tbf_rate_bps(name, "h1") == LINE / SCALE  # nothing changed

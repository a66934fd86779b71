# SPDX-License-Identifier: GPL-2.0-only
"""Impairments and events in fabric units (no root, no cluster): what the kernel is given
at a time scale, what the event log records, and the schedule on the fabric clock."""

from __future__ import annotations

import json
import time

import pytest
import trio

from emu.cluster import fabricunits
from emu.fabric import linkctl
from emu.fabric.events import run_schedule
from emu.fabricclock import FabricClock
from emu.nic.clock import TrioFabricClock
from emu.plan.model import TimePlan
from emu.topology.model import Event

X4 = TimePlan(scale=4, why="test", epoch=100.0)


def test_rates_divide_and_delays_multiply_by_the_scale():
    fabric = {"rate_bps": 400_000_000_000, "delay_s": 2e-6, "jitter_s": 1e-7, "loss": 0.01,
              "direction": "a_to_b"}
    wall = fabricunits.wall_settings(fabric, X4)
    assert wall == {"rate_bps": 100_000_000_000, "delay_s": 8e-6, "jitter_s": 4e-7,
                    "loss": 0.01, "direction": "a_to_b"}
    assert fabric["rate_bps"] == 400_000_000_000  # the caller's dict is left alone
    assert fabricunits.wall_settings(fabric, TimePlan()) == fabric  # scale 1: as given
    assert fabricunits.wall_settings({"rate_bps": None}, X4) == {"rate_bps": None}  # unlimited
    assert fabricunits.wall_settings({"rate_bps": 3}, X4)["rate_bps"] == 1  # never 0
    assert fabricunits.describe(fabric, X4) == ("rate 400gbit (wall 100gbit), delay 2us "
                                                "(wall 8us), jitter 100ns (wall 400ns)")
    assert fabricunits.describe(fabric, TimePlan()) == "rate 400gbit, delay 2us, jitter 100ns"


def test_a_missing_netem_is_said_in_fabric_units(monkeypatch):
    monkeypatch.setattr(fabricunits, "features", lambda: linkctl.Features(netem=False,
                                                                         nft_egress=True))
    with pytest.raises(linkctl.FeatureMissing) as e:
        fabricunits.check_kernel({"delay_s": 2e-6, "loss": 0.1}, X4, "h1-h2")
    msg = str(e.value)
    assert msg.startswith("h1-h2: delay 2us (wall 8us) (fabric time; at time scale 4 ")
    assert "netem" in msg and "\n" not in msg
    fabricunits.check_kernel({"loss": 0.1, "delay_s": 0.0}, X4, "x")  # nothing timed: fine
    monkeypatch.setattr(fabricunits, "features", lambda: linkctl.Features(netem=True,
                                                                         nft_egress=True))
    fabricunits.check_kernel({"delay_s": 2e-6}, X4, "x")


def test_apply_gives_the_kernel_wall_units_and_logs_both(monkeypatch, tmp_path):
    """The event line has the settings as given (fabric) and as the kernel gets them,
    the fabric time, the scale, the event's ``at`` and its fabric time since emu up;
    apply_event (linkctl) is handed the wall settings and the cluster's clock."""
    calls = []
    monkeypatch.setattr(fabricunits, "apply_event", lambda topo, ev, **kw: calls.append(
        (ev, kw)) or [ev.target])
    tp = TimePlan(scale=4, why="test", epoch=0.0)
    log = tmp_path / "ev.jsonl"
    ev = Event(0.5, "impair", "h1-h2", {"rate_bps": 1_000_000_000, "direction": "b_to_a"})
    up = tp.clock().now() - 1.0  # emu up finished one fabric second ago
    assert fabricunits.apply("c", None, ev, tp, event_log=log, source="[[event]]",
                             up_fabric=up) == ["h1-h2"]
    (wall_ev, kw), = calls
    assert wall_ev.settings == {"rate_bps": 250_000_000, "direction": "b_to_a"}
    assert kw["clock"] == tp.clock() and kw["cluster"] == "c"
    line = json.loads(log.read_text())
    assert line["action"] == "event" and line["link"] == "h1-h2"
    assert line["scale"] == 4 and line["fabric_t"] > up and line["t"] > 0
    s = line["settings"]
    assert s["event"] == "impair" and s["source"] == "[[event]]" and s["at"] == 0.5
    assert s["settings"]["rate_bps"] == 1_000_000_000
    assert s["wall_settings"]["rate_bps"] == 250_000_000
    assert s["since_up"] >= 1.0  # fabric seconds, from the same clock as fabric_t


def test_log_event_has_fabric_time_only_with_a_clock(tmp_path):
    log = tmp_path / "ev.jsonl"
    clock = FabricClock(scale=10, epoch=0.0)
    before = clock.now()
    with_clock = linkctl.log_event(log, action="down", clock=clock)
    plain = linkctl.log_event(log, action="up")
    assert with_clock["scale"] == 10 and with_clock["fabric_t"] >= round(before, 9)
    assert "fabric_t" not in plain and "scale" not in plain
    assert [json.loads(x)["action"] for x in log.read_text().splitlines()] == ["down", "up"]


def test_the_schedule_runs_on_the_fabric_clock():
    """Under trio's fabric clock (what the scheduler installs) ``at`` is fabric time: each
    event fires in order, no earlier than its fabric time (no bound on how late: the
    machine is shared)."""
    fc = FabricClock(scale=50, epoch=time.monotonic())
    events = [Event(0.002, "up", "x"), Event(0.001, "down", "x"), Event(0.002, "down", "y")]
    fired: list[tuple[str, str, float]] = []

    async def main() -> float:
        start = trio.current_time()

        def apply(ev: Event) -> None:
            fired.append((ev.action, ev.target, fc.now() - start))

        await run_schedule(events, apply, start=start, in_thread=False)
        return start

    trio.run(main, clock=TrioFabricClock(fc))
    assert [(a, t) for a, t, _ in fired] == [("down", "x"), ("up", "x"), ("down", "y")]
    assert all(at >= ev for (*_, at), ev in zip(fired, (0.001, 0.002, 0.002), strict=True))

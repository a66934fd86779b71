# SPDX-License-Identifier: GPL-2.0-only
"""The fabric clock and the NIC daemon's one boundary to the wall clock (issue 34).

No sockets, no namespaces, no wall-clock bounds: the conversions are checked as
arithmetic on a stubbed ``CLOCK_MONOTONIC``, and trio's deadlines under
:class:`TrioFabricClock` by order (a sleep never ends before its fabric deadline,
whose wall time is the deadline × scale). And the rule that keeps it so: protocol code
reads no clock, and ``emu/nic`` reads the wall clock only through
:mod:`emu.fabricclock`, in the places listed below with the reason each is wall.
"""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import pytest
import trio

import emu.fabricclock as fcmod
from emu.fabricclock import FabricClock, check_scale
from emu.nic.clock import TrioFabricClock, current_scale
from emu.nic.config import NicConfig
from emu.nic.daemon import HELD_RECHECK, PRECISE_WITHIN, NicDaemon
from emu.nic.overloadstat import overload
from emu.nic.udp import ArrivalTimes, arrival

ROOT = Path(__file__).resolve().parents[2] / "emu"


class FakeMono:
    """A ``time.monotonic`` the test moves by hand."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_fabric_time_is_monotonic_minus_epoch_over_scale(monkeypatch):
    mono = FakeMono(1000.0)
    monkeypatch.setattr(fcmod.time, "monotonic", mono)
    c = FabricClock(scale=4, epoch=900.0)
    assert c.now() == 25.0
    mono.t = 1004.0  # four wall seconds …
    assert c.now() == 26.0  # … are one fabric second
    assert c.wall_at(26.0) == 1004.0 and c.fabric_at(1004.0) == 26.0
    assert c.to_wall(1e-6) == 4e-6 and c.to_fabric(4e-3) == 1e-3
    assert "one fabric ms costs 4 ms of wall time" in c.describe()


def test_a_trio_deadline_becomes_a_wall_sleep_at_one_boundary(monkeypatch):
    mono = FakeMono(50.0)
    monkeypatch.setattr(fcmod.time, "monotonic", mono)
    clk = TrioFabricClock(FabricClock(scale=8, epoch=10.0))
    assert clk.current_time() == 5.0
    assert clk.deadline_to_sleep_time(5.5) == 4.0  # half a fabric second: 4 wall seconds
    assert clk.deadline_to_sleep_time(4.0) == 0.0  # past: no sleep
    assert clk.deadline_to_sleep_time(float("inf")) == float("inf")


def test_trio_runs_on_fabric_time():
    """Under the daemon's clock ``trio.current_time()`` is the fabric clock and a sleep
    of d fabric seconds ends no earlier than d × scale on the wall (ordering only)."""
    fc = FabricClock(scale=3, epoch=fcmod.wall())
    seen = {}

    async def main() -> None:
        before = fc.now()
        t = trio.current_time()
        after = fc.now()
        seen["between"] = before <= t <= after
        seen["scale"] = current_scale()
        w0, f0 = fcmod.wall(), trio.current_time()
        await trio.sleep(0.002)
        seen["fabric"] = trio.current_time() - f0
        seen["wall"] = fcmod.wall() - w0

    trio.run(main, clock=TrioFabricClock(fc))
    assert seen["between"] and seen["scale"] == 3
    assert seen["fabric"] >= 0.002
    assert seen["wall"] >= 0.002 * 3 * (1 - 1e-9)


def test_trio_deadlines_in_fabric_time_under_autojump():
    """trio's own cancel scopes and sleeps are in whatever clock runs: the daemon's timer
    task (a cancel scope at the engine's deadline) needs no conversion of its own."""
    from trio.testing import MockClock

    order = []

    async def main() -> None:
        async with trio.open_nursery() as n:
            async def at(t: float, name: str) -> None:
                with trio.CancelScope(deadline=t):
                    await trio.sleep_forever()
                order.append((name, trio.current_time()))
            n.start_soon(at, 0.003, "rto")
            n.start_soon(at, 0.001, "pacer")

    trio.run(main, clock=MockClock(autojump_threshold=0))
    assert order == [("pacer", 0.001), ("rto", 0.003)]


def test_receive_stamps_age_by_the_scale():
    """A kernel receive stamp (``CLOCK_REALTIME``) 8 µs old on the wall is 2 µs old in
    fabric time at scale 4; at scale 1 the arithmetic is what it always was."""
    real, fabric_now = 1_700_000_000.0, 12.5
    raw = struct.pack("qq", 1_699_999_999, 999_992_000)  # real - 8 µs
    skew = real - fabric_now
    clk = FabricClock(scale=4)
    assert arrival(raw, skew, clk, real) == pytest.approx(fabric_now - 2e-6, abs=5e-7)
    assert arrival(raw, skew) == pytest.approx(fabric_now - 8e-6, abs=5e-7)
    assert arrival(raw, skew, FabricClock(), real) == arrival(raw, skew)
    assert ArrivalTimes([raw, None], skew, clk, real)[0] == arrival(raw, skew, clk, real)
    assert ArrivalTimes([raw, None], skew, clk, real)[1] is None


def test_the_daemon_states_wall_settings_in_fabric_terms():
    """What stays wall (trio's ms rounding, the serializer's late time) is converted."""
    d = NicDaemon(NicConfig(time_scale=4, time_epoch=7.0))
    assert d.clock == FabricClock(4, 7.0)
    assert d._precise == PRECISE_WITHIN / 4 and d._held_recheck == HELD_RECHECK / 4
    ov = overload({}, {"eth0": {"late": 2, "late_s": 0.004, "line_rate": 25e6}}, 4.0)
    assert ov["tx_late_s"] == pytest.approx(0.001) and ov["time_scale"] == 4.0
    assert overload({}, {"eth0": {"late_s": 0.004}})["tx_late_s"] == 0.004


def test_a_daemon_on_the_wrong_clock_refuses_to_run():
    """Engines on trio's real-time clock with a scale configured would be silently wrong."""
    d = NicDaemon(NicConfig(time_scale=2))
    with pytest.raises(RuntimeError, match="time scale 2 configured"):
        trio.run(d.run)


@pytest.mark.parametrize("bad", [0.5, 0, -1, "auto", "fast", float("inf"), True])
def test_a_scale_is_a_number_at_least_one(bad):
    with pytest.raises(ValueError):
        check_scale(bad)
    assert check_scale("2.5") == 2.5 and check_scale(1) == 1.0


# -- who reads a clock ----------------------------------------------------------------

#: modules that decide what the protocol does: they read no clock at all (time is an
#: argument; the sans-IO import-linter contract forbids ``time`` too)
PROTOCOL = ("transports", "core", "cc", "paths")
#: the clock-reading names a module must not call or import
CLOCK_MODULES = {"time", "datetime"}
CLOCK_CALLS = {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time_ns",
               "clock_gettime", "clock_gettime_ns", "current_time", "wall", "realtime", "now"}
#: the emu/nic modules that read the wall clock (emu.fabricclock.wall/realtime), and why
#: each is wall: everything else in emu/nic reads fabric time (trio.current_time())
NIC_WALL = {
    "txpath.py": "the port serializer's clock: it stands for the dilated wire and runs at "
                 "the plan's wall line rate, like the kernel's tbf; its late-send log is "
                 "CLOCK_MONOTONIC so stallwatch can match it with the machine's stalls",
    "frames.py": "the packet TX ring's flush stamps: kernel I/O bookkeeping, no protocol "
                 "decision",
    "timerfd.py": "the kernel's timerfd takes CLOCK_MONOTONIC deadlines",
    "daemon.py": "the one boundary: engine-timer deadlines to the timerfd, receive stamps "
                 "(CLOCK_REALTIME) and the serializer's wall times to fabric time, receive "
                 "coalescing on the serializer's clock, and its start time (uptime)",
    "daemonstats.py": "the daemon's uptime in `emu nicd stats` (a fact of the process)",
    "gcwatch.py": "how long the interpreter's garbage collections stopped the process: "
                  "the emulator's own pauses, shown beside its overload, no protocol decision",
}


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module:
            out.add(n.module)
    return out


def _called(tree: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


@pytest.mark.parametrize("package", PROTOCOL)
def test_protocol_code_reads_no_clock(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = _tree(path)
        imported = {m.split(".")[0] for m in _imports(tree)}
        assert not imported & (CLOCK_MODULES | {"trio"}), f"{path} imports a clock"
        assert "emu.fabricclock" not in _imports(tree), f"{path}: time is an argument"
        bad = _called(tree) & (CLOCK_CALLS - {"now"})
        assert not bad, f"{path} calls {sorted(bad)}"


def test_the_nic_reads_the_wall_clock_only_through_the_clock_module():
    readers = set()
    for path in sorted((ROOT / "nic").glob("*.py")):
        tree = _tree(path)
        assert not {m.split(".")[0] for m in _imports(tree)} & CLOCK_MODULES, \
            f"{path}: read the wall clock through emu.fabricclock (wall, realtime)"
        if _called(tree) & {"wall", "realtime", "monotonic", "perf_counter", "time_ns"}:
            readers.add(path.name)
    assert readers == set(NIC_WALL), "a new wall-clock reader in emu/nic: say why in NIC_WALL"

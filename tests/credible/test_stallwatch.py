# SPDX-License-Identifier: GPL-2.0-only
"""Machine stalls (emu.credible.stallwatch) and how an overload report uses them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from emu import proc
from emu.credible import stallwatch as sw
from emu.credible.overload import delta, retransmitted, warning
from emu.nic.overloadstat import overload
from emu.nic.pacer import PortPacer


def test_a_machine_stall_is_every_cpu_stalled_at_once():
    ev = [(0, 1.000, 1.004), (1, 1.001, 1.005),  # both: 1.001-1.004
          (0, 2.000, 2.003),                      # CPU 0 alone: its own load, not the machine's
          (1, 3.000, 3.002), (0, 3.0015, 3.010)]  # both: 3.0015-3.002
    stalls = sw.machine_stalls(ev, [0, 1])
    assert stalls == [pytest.approx((1.001, 1.004)), pytest.approx((3.0015, 3.002))]
    assert sw.machine_stalls(ev, [0, 1], t0=1.002, t1=1.5) == [pytest.approx((1.002, 1.004))]
    assert sw.machine_stalls(ev, [0]) == [(1.0, 1.004), (2.0, 2.003), (3.0015, 3.01)]
    assert sw.machine_stalls(ev, [0, 1, 2]) == []  # a CPU that never stalled
    assert sw.overlap(1.0, 3.0018, stalls) == pytest.approx(3e-3 + 0.3e-3)


def test_a_stall_explains_a_late_send_only_when_it_covers_the_gap():
    stalls = [(10.0, 10.004)]  # the machine stopped for 4 ms
    # due at 9.999 with a 2 ms FIFO (port dry at 10.001), back at 10.0045: 3.5 ms late,
    # all but 0.5 ms of [due, back] was the stall
    assert sw.explained([(9.999, 10.001, 10.0045)], stalls) == [True]
    # 8 ms late around the same stall: the daemon was 4 ms late by itself
    assert sw.explained([(9.999, 10.001, 10.009)], stalls) == [False]
    # a late send far from any stall
    assert sw.explained([(20.0, 20.002, 20.005)], stalls) == [False]
    # a short gap beside a sliver of a stall: the daemon's own (regression: a 1 ms slack
    # once put a starved daemon's late sends on 10 µs of stall)
    assert sw.explained([(9.9, 10.0035, 10.0045)], [(10.0039, 10.00391)]) == [False]


def test_reading_a_watchers_file(tmp_path):
    p = tmp_path / "w.log"
    assert sw.read(str(p)) == (None, [])
    p.write_text('{"pid": 1, "cpus": [0, 1], "rt": true, "start": 5.0}\n'
                 "0 6.0 6.002\n1 6.0005 6.0021\ngarbage\n1 7.0 7.")
    head, ev = sw.read(str(p))
    assert head["cpus"] == [0, 1] and head["alive"]  # pid 1 runs
    p.write_text('{"pid": 999999999, "cpus": [0]}\n')
    assert sw.read(str(p))[0]["alive"] is False
    p.write_text('{"pid": 1, "cpus": [0, 1], "rt": true, "start": 5.0}\n'
                 "0 6.0 6.002\n1 6.0005 6.0021\ngarbage\n1 7.0 7.")
    head, ev = sw.read(str(p))
    assert ev == [(0, 6.0, 6.002), (1, 6.0005, 6.0021), (1, 7.0, 7.0)]
    p.write_text("not json\n0 1 2\n")
    assert sw.read(str(p)) == (None, [])


def test_the_pacer_keeps_each_late_sends_times():
    p = PortPacer("eth0", 1e9, burst_s=1e-3, mtu=1500)
    p.charge(0.0, 125_000, 10, waited=False)  # 1 ms of wire time: dry at 1 ms
    p.charge(4e-3, 1500, 1, waited=True)      # back 3 ms after the port ran dry
    assert p.counters()["late_events"] == [[0.0, 1e-3, 4e-3]]  # due, dry, back


def _snap(t: float, late_events: list, stall_lines: list, late: int) -> dict:
    ports = {"eth0": {"late": late, "late_s": 0.003 * late, "late_events": late_events}}
    head = {"pid": 1, "cpus": [0, 1], "rt": True, "period": 1e-3, "start": 0.0, "alive": True}
    return {"t": t, "switch": {}, "unreachable": [], "steal_s": 0.0,
            "stallwatch": (head, stall_lines),
            "nic": {"h1": {"overload": overload({}, ports), "tx_packets": 0, "retransmits": 0}}}


def test_late_sends_a_machine_stall_explains_are_the_machines_not_the_emulators():
    stalls = [(0, 10.0, 10.004), (1, 10.0, 10.0042)]
    lates = [[9.999, 10.001, 10.0045],  # inside the stall
             [19.0, 19.002, 19.006]]    # the daemon's own
    d = delta(_snap(5.0, [], [], 0), _snap(30.0, lates, stalls, 2))
    assert d["causes"] == {"machine_stall": 1, "tx_late": 1}
    assert not d["credible"]
    assert d["machine"]["stalls"] == 1 and d["machine"]["longest_s"] == pytest.approx(4e-3)
    w = warning(d)
    assert "emulator overload" in w and "stalled 4.0 ms in all" in w and "lower the rates" in w

    d = delta(_snap(5.0, [], [], 0), _snap(30.0, lates[:1], stalls, 1))
    assert d["causes"] == {"machine_stall": 1} and not d["credible"]
    assert warning(d).startswith("warning: the machine stalled during this run")
    assert "lower rates would not avoid it" in warning(d)


def test_only_stalls_inside_the_run_and_a_real_time_watcher_count():
    stalls = [(0, 10.0, 10.004), (1, 10.0, 10.0042)]
    lates = [[9.999, 10.001, 10.0045]]
    # the late send happened before the run (its first snapshot at 11 s)
    d = delta(_snap(11.0, [], [], 1), _snap(30.0, lates, stalls, 1))
    assert d["credible"]
    # a watcher that could not run real-time measures CPU contention too: not used
    after = _snap(30.0, lates, stalls, 1)
    after["stallwatch"][0]["rt"] = False
    d = delta(_snap(5.0, [], [], 0), after)
    assert d["causes"] == {"tx_late": 1} and not d["machine"]["watched"]
    # nor one that died (its silence is not a quiet machine)
    after = _snap(30.0, lates, stalls, 1)
    after["stallwatch"][0]["alive"] = False
    assert delta(_snap(5.0, [], [], 0), after)["causes"] == {"tx_late": 1}


@pytest.mark.skipif(os.geteuid() != 0, reason="the watcher asks for SCHED_FIFO")
def test_the_watcher_records_and_ends_with_the_daemons_it_serves(tmp_path):
    out = tmp_path / "stalls.log"
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    w = subprocess.Popen([sys.executable, "-m", "emu.credible.stallwatch", str(out),
                          "--watch", str(daemon.pid)])
    try:
        deadline = time.monotonic() + 10
        while sw.read(str(out))[0] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        head, _ = sw.read(str(out))
        assert head is not None and head["rt"] and head["pid"] == w.pid
        assert head["cpus"] == sorted(os.sched_getaffinity(0))
        kids = _children(w.pid, len(head["cpus"]))
        assert len(kids) == len(head["cpus"])  # one probe per CPU
        daemon.kill()
        daemon.wait()
        assert w.wait(timeout=10) == 0  # the daemons are gone: so is the watcher …
        deadline = time.monotonic() + 5
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(k) for k in kids)  # … and its probes
    finally:
        for p in (daemon, w):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=5)


def _children(pid: int, n: int) -> list[int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            kids = []
        if len(kids) >= n:
            return kids
        time.sleep(0.05)
    return []


def _alive(pid: int) -> bool:
    return not proc.gone(pid)


@pytest.mark.skipif(os.geteuid() != 0, reason="the watcher asks for SCHED_FIFO")
def test_doctor_measures_the_machines_stalls_and_shows_them():
    from emu.apps.doctor import costs_lines
    from emu.credible.capacity import REFERENCE, Costs

    st = sw.measure(0.5)
    assert st["real_time"] and st["seconds"] >= 0.5
    assert 0 <= st["longest_s"] <= st["stalled_s"] + 1e-9
    c = Costs(**{**REFERENCE.to_dict(), "source": "measured", "stalls_per_min": 12.0,
                 "stall_longest": 4.2e-3})
    line = costs_lines(c)[-1]
    assert "12 per minute over 1 ms, longest 4.2 ms" in line and "machine_stall" in line
    assert not any("machine stalls" in x for x in costs_lines(REFERENCE))  # not measured


def test_steal_is_read_from_the_first_line_of_proc_stat(tmp_path):
    p = tmp_path / "stat"
    p.write_text("cpu  10 0 5 900 0 0 3 250 0 0\ncpu0 5 0 2 450 0 0 1 125 0 0\n")
    assert sw.steal_seconds(str(p)) == pytest.approx(250 / os.sysconf("SC_CLK_TCK"))
    assert sw.steal_seconds(str(tmp_path / "none")) == 0.0
    p.write_text("cpu  1 2 3\n")  # a kernel without the steal column
    assert sw.steal_seconds(str(p)) == 0.0


def test_busy_time_is_the_work_done_here_not_the_hypervisors_steal(tmp_path):
    p = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    p.write_text("cpu  10 1 5 900 7 2 3 250 4 0\ncpu0 5 0 2 450 0 0 1 125 0 0\n")
    assert sw.busy_seconds(str(p)) == pytest.approx((10 + 1 + 5 + 2 + 3)
                                                    / os.sysconf("SC_CLK_TCK"))
    p.write_text("cpu  10 1 5 900\n")  # an old kernel: fewer columns
    assert sw.busy_seconds(str(p)) == pytest.approx(16 / os.sysconf("SC_CLK_TCK"))


def test_a_stall_too_short_for_a_tenth_of_a_ms_is_told_in_microseconds():
    stalls = [(0, 10.0, 10.00004), (1, 10.0, 10.00004)]
    d = delta(_snap(5.0, [], [], 0), _snap(30.0, [[9.99999, 10.0, 10.00005]], stalls, 1))
    assert d["machine"]["stalls"] == 1
    w = warning(d)
    assert "stalled 40 µs in all" in w and "longest 40 µs" in w and "0.0 ms" not in w


def test_every_run_says_what_was_retransmitted():
    assert retransmitted({"tx_packets": 20_000, "retransmits": 3_616}) == (
        "3,616 of 20,000 packets all NICs of the cluster sent were retransmissions (18 %)")
    assert retransmitted({"tx_packets": 20_000, "retransmits": 3_616,
                          "counted_nics": ["h1", "h2"]}) == (
        "3,616 of 20,000 packets the NICs of h1 and h2 sent were retransmissions (18 %)")
    assert retransmitted({"tx_packets": 0, "retransmits": 0}).startswith("0 of 0 packets")

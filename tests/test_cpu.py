# SPDX-License-Identifier: GPL-2.0-only
"""emu.cpu: a daemon's short scheduler slice (in a child process, so the suite's own
scheduling is untouched)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _kernel() -> tuple[int, int]:
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _child(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}
                          ).stdout.strip()


@pytest.mark.skipif(_kernel() < (6, 12), reason="custom EEVDF slices need Linux 6.12+")
def test_a_daemon_gets_the_slice_it_asks_for_and_its_threads_inherit_it():
    out = _child("import threading; from emu import cpu\n"
                 "before = cpu.slice_in_force()\n"
                 "got = cpu.request_slice()\n"
                 "seen = []\n"
                 "t = threading.Thread(target=lambda: seen.append(cpu.slice_in_force()))\n"
                 "t.start(); t.join()\n"
                 "print(before, got, seen[0], cpu.slice_in_force())")
    before, got, thread, now = (float(x) for x in out.split())
    assert got == now == thread == pytest.approx(100e-6)
    assert before != got  # the kernel's default slice (1.4 ms here) is not the request


def test_a_refused_request_says_so_and_changes_nothing():
    out = _child("from emu import cpu\n"
                 "print(cpu.request_slice(0), cpu.request_slice(-1))")
    assert out == "None None"


def test_a_policy_someone_chose_is_left_alone():
    # SCHED_BATCH (chrt -b): not SCHED_OTHER, so no slice is requested over it
    out = _child("import os; from emu import cpu\n"
                 "os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))\n"
                 "print(cpu.request_slice(), os.sched_getscheduler(0) == os.SCHED_BATCH)")
    assert out == "None True"


def test_real_time_is_taken_only_where_the_kernel_throttles_it(tmp_path):
    from emu import cpu

    runtime, period = tmp_path / "runtime", tmp_path / "period"
    period.write_text("1000000\n")
    for value, throttled in (("950000", True), ("-1", False), ("1000000", False)):
        runtime.write_text(value + "\n")
        assert cpu.rt_throttled(str(runtime), str(period)) is throttled, value
    assert cpu.rt_throttled(str(tmp_path / "absent"), str(period)) is False
    # never taken without the kernel's share kept for everything else: nothing changes
    out = _child("from emu import cpu\n"
                 "print(cpu.request_realtime(throttled=False), cpu.policy_in_force())")
    assert out.split()[0] == "False" and "fifo" not in out


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs CAP_SYS_NICE")
def test_a_daemon_runs_real_time_and_its_threads_and_children_do_not():
    from emu import cpu

    if not cpu.rt_throttled():
        pytest.skip("this kernel does not throttle real-time tasks")
    out = _child("import os, threading; from emu import cpu\n"
                 "got = cpu.schedule_daemon('rt')\n"
                 "seen = []\n"
                 "t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))\n"
                 "t.start(); t.join()\n"
                 "pid = os.fork()\n"
                 "if pid == 0:\n"
                 "    os._exit(os.sched_getscheduler(0))\n"
                 "child = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
                 "print(got, seen[0] == os.SCHED_OTHER, child == os.SCHED_OTHER)")
    assert out == "fifo 1 True True"
    # the stall watcher's probes sit above the daemons, so a busy daemon is never a stall
    assert cpu.PROBE_RT_PRIORITY > cpu.DAEMON_RT_PRIORITY
    with pytest.raises(ValueError):
        cpu.schedule_daemon("fast")


def test_slice_and_default_policies_never_take_real_time():
    out = _child("from emu import cpu\n"
                 "a = cpu.schedule_daemon('slice'); b = cpu.policy_in_force()\n"
                 "print('fifo' in a, 'fifo' in b)")
    assert out == "False False"

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

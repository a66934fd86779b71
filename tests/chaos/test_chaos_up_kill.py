# SPDX-License-Identifier: GPL-2.0-only
"""``emu up`` SIGKILLed at random moments of a bring-up: ``emu status`` still works and
says what is there, and ``emu down`` or ``emu clean`` then leaves nothing of that cluster
(namespace, process, socket, state file, /dev/shm file). Seeded: ``CHAOS_SEED``."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from life_util import ROOT, budget, emu, emu_argv, leftovers, rng, seed, shm_files, status

from emu.fabric.naming import random_cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


def test_emu_up_killed_at_random_moments_leaves_nothing_after_down_or_clean():
    r = rng("up-kill")
    moments = max(1, round(2 * budget()))
    shm0 = shm_files()
    # one whole bring-up first: when its state file appears (the interpreter has started)
    # and how long it takes on this machine now set the range of kill moments
    name = random_cluster("hlk")
    t0 = time.monotonic()
    first = None
    p = subprocess.Popen(emu_argv("up", "namespaces/leaf-spine.toml", "--name", name),
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        while p.poll() is None:
            if first is None and os.path.exists(f"/run/emu/{name}.json"):
                first = time.monotonic() - t0
            time.sleep(0.005)
        full = time.monotonic() - t0
        assert p.returncode == 0, p.stderr.read()
        assert status(name)["state"] == "up"
    finally:
        p.kill()
        p.communicate()
        emu("down", name, check=False)
    first = first if first is not None else 0.0
    assert leftovers(name, shm0) == []

    report = []
    for i in range(moments):
        name = random_cluster(f"hlk{i:02d}")
        delay = r.uniform(0.9 * first, 1.05 * full)
        p = subprocess.Popen(emu_argv("up", "namespaces/leaf-spine.toml", "--name", name),
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            p.wait(30)
            s = status(name)  # never a traceback, whatever the moment
            seen = "none" if s is None else s["state"]
            if s is not None:
                assert s["state"] in ("up", "degraded", "partial"), s
                if s["state"] == "partial":
                    assert s["problems"] and "died while" in s["problems"][0]
                action = "down" if seen in ("up", "degraded") else r.choice(["down", "clean"])
                out = emu(action, name)
                if action == "clean":
                    assert f"cleaned 1 cluster(s): {name}" in out.stdout
            else:
                action = "-"
        finally:
            if p.poll() is None:
                p.kill()
            if os.path.exists(f"/run/emu/{name}.json"):  # the test failed half way
                emu("down", name, check=False)
        left = leftovers(name, shm0)
        report.append(f"seed {seed()} moment {i}: kill at {delay:.2f}s of ~{full:.2f}s, "
                      f"status {seen}, {action}: {len(left)} left")
        assert left == [], "\n".join(report + left)
    print("\n".join(report))

# SPDX-License-Identifier: GPL-2.0-only
"""Shared by the crash scenarios of ``scripts/chaos``: seed, budget, the emu CLI, and
the check that a cluster left nothing behind.

``CHAOS_SEED`` (default 1) seeds every random choice, so a failing run repeats
with the same seed. ``CHAOS_BUDGET`` (seconds, default 10 under
``scripts/chaos``) scales how much chaos a scenario makes: ``emu up`` is killed
at ``2 × budget`` moments (20 by default). When the normal suite collects these
files (``scripts/test``, CI) without ``CHAOS_BUDGET``, the budget is 2.5: five
kill moments.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def seed() -> int:
    return int(os.environ.get("CHAOS_SEED", "1"))


def budget() -> float:
    return float(os.environ.get("CHAOS_BUDGET", "2.5"))


def rng(scenario: str) -> random.Random:
    """A generator per scenario, so adding one scenario does not change another's draws."""
    return random.Random(f"{seed()}:{scenario}")


def emu_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "emu", *args]


def emu(*args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
    p = subprocess.run(emu_argv(*args), capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if check and p.returncode != 0:
        raise AssertionError(f"emu {' '.join(args)} → {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def status(cluster: str) -> dict | None:
    """``emu status --json``: must never fail with a traceback; None when there is no cluster."""
    p = emu("status", cluster, "--json", check=False)
    assert "Traceback" not in p.stderr, p.stderr
    if p.returncode == 2 and "no cluster" in p.stderr:
        return None
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _argv_mentions(cluster: str) -> list[tuple[int, list[str]]]:
    """Processes whose argv names the cluster: a NIC daemon (``--cluster C``), a switch
    daemon (``--netns C-node``), the scheduler (``emu.cluster.scheduler C``)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
            with open(f"/proc/{d}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # dead, not yet reaped
        except OSError:
            continue
        if not any(m in argv for m in ("emu.nic.daemon", "emu.switch.daemon",
                                       "emu.cluster.scheduler")):
            continue
        if cluster in argv or any(a.startswith(f"{cluster}-") for a in argv):
            out.append((int(d), argv))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def leftovers(cluster: str, shm_before: set[str] = frozenset()) -> list[str]:
    """Everything of ``cluster`` that still exists: namespaces, processes, sockets and run
    directories, the state file, and memory-region files made since ``shm_before`` whose
    owner is dead."""
    from emu.core import shm

    left = []
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    left += [f"namespace {n}" for n in netns if n.startswith(f"{cluster}-")]
    left += [f"namespace {n}" for n in netns  # a feature probe of an up killed mid-probe
             if (m := re.match(r"emuprobe-(\d+)-", n)) and not _alive(int(m.group(1)))]
    left += [f"process {pid}: {' '.join(argv)}" for pid, argv in _argv_mentions(cluster)]
    for p in (f"/run/emu/{cluster}.json", f"/run/emu/nic/{cluster}", f"/run/emu/switch/{cluster}"):
        if os.path.exists(p):
            left.append(p)
    if os.path.isdir("/run/emu"):  # a state file written aside and never renamed
        left += [f"/run/emu/{n}" for n in os.listdir("/run/emu")
                 if n.startswith(f"{cluster}.json.") and n.endswith(".tmp")]
    snaps = Path("/run/emu/linkctl")
    if snaps.is_dir():
        left += [str(p) for p in snaps.iterdir() if p.name.startswith(f"{cluster}-")]
    for name in sorted(set(os.listdir(shm.SHM_DIR)) - set(shm_before)):
        if name.startswith(shm.SHM_PREFIX) and shm.owner_gone(name):
            left.append(f"{shm.SHM_DIR}/{name}")
    return left


def shm_files() -> set[str]:
    from emu.core import shm

    return {n for n in os.listdir(shm.SHM_DIR) if n.startswith(shm.SHM_PREFIX)}

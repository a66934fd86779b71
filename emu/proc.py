# SPDX-License-Identifier: GPL-2.0-only
"""Is a process (still) ours and alive? Read from ``/proc``, never by name — and this
process's own CPU wait, age and memory, as a NIC daemon reports them.

Why start times: a pid is reused once its process is gone, so a pid alone in a
state file would let ``emu status`` call somebody else's process our daemon,
and ``emu down`` kill it. Every pid emu records carries the process's start
time (clock ticks since boot, field 22 of ``/proc/<pid>/stat``); a process is
"ours" only while both match. A zombie (killed, not yet reaped — common when
the parent that started it has exited and nothing reaps) or an exiting process
counts as dead: it serves nothing any more.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

PF_EXITING = 0x4  # include/linux/sched.h: the task is in do_exit()


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if there is no such process."""
    f = stat_fields(pid)
    try:
        return int(f[19]) if f else None
    except (IndexError, ValueError):
        return None


def gone(pid: int) -> bool:
    """True if ``pid`` no longer runs: absent, a zombie, dead, or already exiting."""
    f = stat_fields(pid)
    if not f:
        return True
    if f[0] in ("Z", "X", "x"):
        return True
    try:
        return bool(int(f[6]) & PF_EXITING)
    except (IndexError, ValueError):
        return False


def alive(pid: int, start: int | None) -> bool:
    """True while the process ``pid`` started at ``start`` runs (a reused pid is not it)."""
    if start is None or pid <= 0:
        return False
    f = stat_fields(pid)
    if not f or f[0] in ("Z", "X", "x"):
        return False
    try:
        return int(f[19]) == start and not int(f[6]) & PF_EXITING
    except (IndexError, ValueError):
        return False


def cmdline(pid: int) -> list[str] | None:
    """The argv of ``pid`` (None if it is gone or a kernel thread)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] or None


def _proc_value(path: str, key: str) -> str | None:
    """The first value after ``key`` on its line of a ``/proc`` file of such lines
    (``btime 1700000000``, ``VmRSS:  43844 kB``), or None."""
    with open(path) as f:
        for line in f:
            if line.startswith(key):
                return line.split()[1]
    return None


def boot_time() -> float:
    """The wall-clock time the machine booted (``btime`` in ``/proc/stat``)."""
    v = _proc_value("/proc/stat", "btime ")
    return 0.0 if v is None else float(v)


def started_at(pid: int) -> float | None:
    """When ``pid`` started, wall clock (seconds since the epoch), or None."""
    st = start_time(pid)
    if st is None:
        return None
    return boot_time() + st / os.sysconf("SC_CLK_TCK")


def find_by_argv(argv: list[str], not_before: float) -> list[int]:
    """Pids whose argv ends with exactly ``argv`` and that started at or after ``not_before``
    (wall clock, with a second's slack for tick rounding).

    For a spawn that a SIGKILL interrupted between fork and recording the pid:
    the journal holds the exact argv (it names the cluster and node) and the
    time, so the process is found by identity, not by a name pattern.
    """
    out = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        cl = cmdline(pid)
        if not cl or len(cl) < len(argv) or cl[len(cl) - len(argv):] != argv:
            continue
        t = started_at(pid)
        if t is not None and t >= not_before - 1.0 and not gone(pid):
            out.append(pid)
    return out


def stop(p: subprocess.Popen[Any], timeout: float = 10.0) -> int:
    """Stop a child emu started: SIGTERM (emu's daemons drain and exit 0 on it), wait up
    to ``timeout`` seconds, then SIGKILL. Returns its exit status; a child already gone
    is only reaped."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
    return p.wait()


# -- this process's own figures (the NIC daemon reports them) ---------------------


def cpu_wait(path: str = "/proc/self/schedstat") -> tuple[float, int]:
    """``(seconds, runs)``: how long this process has waited on a run queue, runnable but
    not running, and how many times it got a CPU (``schedstat``'s second and third
    fields) — the emulated hardware waiting for a CPU, and over how many wake-ups. Their
    growth over a run is judged by ``emu.credible.overload.delta``; zeros where the
    kernel keeps no schedstat."""
    try:
        with open(path) as f:
            fields = f.read().split()
        return round(int(fields[1]) / 1e9, 6), int(fields[2])
    except (OSError, IndexError, ValueError):
        return 0.0, 0


def process_age() -> float:
    """Seconds since this process started (10 ms resolution): the honest start-up time,
    interpreter and imports included."""
    start = start_time(os.getpid())
    if start is None:
        return 0.0
    try:
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return round(up - start / os.sysconf("SC_CLK_TCK"), 3)


def rss_kib() -> int:
    """This process's resident memory (KiB)."""
    v = _proc_value("/proc/self/status", "VmRSS:")
    return 0 if v is None else int(v)

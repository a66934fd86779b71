# SPDX-License-Identifier: GPL-2.0-only
"""Machine stalls: moments when every CPU of this machine stopped at once.

Why: emu's daemons stand in for hardware that never stops, so a daemon late for
its port (``tx_late``) makes a result not credible. On a virtual machine some of
that lateness is not emu's at all. Measured on the 2-core development VM, idle:
a real-time thread sleeping 1 ms at a time on each CPU woke more than 1 ms late
about once every two seconds, on *both* CPUs at the same moments (within ~5 ms),
up to ~1.5 ms; an ordinary 300 µs sleeper saw up to 7 ms. That is the hypervisor
(or the guest kernel) stopping the whole machine — emu's own load cannot delay a
real-time thread on every CPU at once. Lower rates cannot avoid it; a quieter
host or a rerun can. So such lateness is told apart and shown as ``machine_stall``
(still not credible: the emulated links lost time), not as emulator overload.

How: ``emu up`` starts one watcher per cluster (``python -m
emu.credible.stallwatch OUT --watch PID…``): a probe process per CPU, pinned to
it, ``SCHED_FIFO`` one priority above the NIC daemons' (:data:`emu.cpu.PROBE_RT_PRIORITY`:
a busy real-time daemon cannot delay it) where the kernel allows, timer slack 1 ns, that
sleeps :data:`PERIOD` at a time and appends every wake-up later than
:data:`STALL_MIN` to ``OUT`` as ``cpu due woke`` (``CLOCK_MONOTONIC``, shared by
every process). Cost: ~1,000 short wake-ups a second per CPU. The watcher ends
when the daemons it watches are gone. Readers take :func:`read` and
:func:`machine_stalls` (the intervals every CPU was stalled in), and
:func:`explained` decides which of a daemon's late sends such a stall explains.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from emu import proc
from emu.cpu import PROBE_RT_PRIORITY
from emu.nic.protocol import RUN_DIR

#: a probe sleeps this long at a time; a stall is measured up to this much short
PERIOD = 1e-3
#: wake-ups later than this are recorded (an idle VM's usual lateness is 30-120 µs)
STALL_MIN = 250e-6
#: how often the watcher checks that the daemons it serves still run
WATCH_EVERY_S = 1.0
_PR_SET_TIMERSLACK = 29
_PR_SET_PDEATHSIG = 1

Interval = tuple[float, float]


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _probe(fd: int, cpu: int, period: float, stall_min: float) -> None:
    """One CPU's probe (a child process): sleep, note late wake-ups, forever."""
    os.sched_setaffinity(0, {cpu})
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # never outlive the watcher
    mono, sleep, write = time.monotonic, time.sleep, os.write
    while True:
        due = mono() + period
        sleep(period)
        woke = mono()
        if woke - due > stall_min:
            write(fd, f"{cpu} {due:.6f} {woke:.6f}\n".encode())


def path(cluster: str) -> str:
    """Where a cluster's watcher writes: beside its NIC daemons' sockets, removed with
    them (``emu.cluster.remove_run_dirs``)."""
    return os.path.join(RUN_DIR, cluster, "stallwatch.log")


def run(out: str, watch: Sequence[int] = (), period: float = PERIOD,
        stall_min: float = STALL_MIN) -> int:
    """The watcher: header line, one probe per CPU, until SIGTERM or until every pid in
    ``watch`` is gone (then the probes die with it)."""
    rt = True
    try:
        # probes inherit it
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(PROBE_RT_PRIORITY))
    except (OSError, AttributeError):
        rt = False  # then its lateness includes CPU contention: not used to explain
    _prctl(_PR_SET_TIMERSLACK, 1)
    cpus = sorted(os.sched_getaffinity(0))
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    os.write(fd, (json.dumps({"pid": os.getpid(), "cpus": cpus, "rt": rt, "period": period,
                              "stall_min": stall_min, "start": time.monotonic()}) + "\n").encode())
    kids = []
    for cpu in cpus:
        pid = os.fork()
        if pid == 0:
            try:
                _probe(fd, cpu, period, stall_min)
            finally:
                os._exit(0)
        kids.append(pid)

    def stop(*_: Any) -> None:
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    starts = {p: proc.start_time(p) for p in watch}  # a reused pid is not the daemon
    while not watch or any(proc.alive(p, t) for p, t in starts.items()):
        time.sleep(WATCH_EVERY_S)
    stop()
    return 0


def read(path: str) -> tuple[dict[str, Any] | None, list[tuple[int, float, float]]]:
    """The watcher's header and its stalls ``(cpu, due, woke)``; ``(None, [])`` when
    there is no watcher's file (or not a readable one). The header's ``alive`` says
    whether the watcher still runs (a dead one's silence is not a quiet machine)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None, []
    try:
        head = json.loads(lines[0])
    except (IndexError, ValueError):
        return None, []
    if not isinstance(head, dict):
        return None, []
    head["alive"] = isinstance(head.get("pid"), int) and not proc.gone(head["pid"])
    events = []
    for ln in lines[1:]:
        parts = ln.split()
        if len(parts) == 3:
            try:
                events.append((int(parts[0]), float(parts[1]), float(parts[2])))
            except ValueError:
                continue  # a line cut short by a crash
    return head, events


def _intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def machine_stalls(events: Iterable[tuple[int, float, float]], cpus: Sequence[int],
                   t0: float = float("-inf"), t1: float = float("inf")) -> list[Interval]:
    """The intervals in which every CPU in ``cpus`` was stalled at once (each probe's
    ``[due, woke]``), clipped to ``[t0, t1]``. One CPU's stall alone is not the
    machine's: it may be the emulator's own load on that CPU (softirq work)."""
    per: dict[int, list[Interval]] = {c: [] for c in cpus}
    for cpu, due, woke in events:
        if cpu in per and woke > t0 and due < t1:
            per[cpu].append((max(due, t0), min(woke, t1)))
    if not cpus:
        return []
    lists = [sorted(v) for v in per.values()]
    acc = lists[0]
    for other in lists[1:]:
        acc = _intersect(acc, other)
    return acc


def summary(stalls: Sequence[Interval]) -> dict[str, Any]:
    """How many machine stalls, how long in all and the longest (seconds)."""
    return {"stalls": len(stalls), "stalled_s": round(sum(e - s for s, e in stalls), 6),
            "longest_s": round(max((e - s for s, e in stalls), default=0.0), 6)}


def overlap(a: float, b: float, stalls: Sequence[Interval]) -> float:
    """Seconds of ``[a, b]`` inside the (disjoint, sorted) ``stalls``."""
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in stalls)


def explained(late: Iterable[Sequence[float]], stalls: Sequence[Interval]) -> list[bool]:
    """For each late send ``(due, t_free, now)`` — the daemon was due to top its port's
    FIFO up at ``due`` and came back at ``now``, ``now - t_free`` after the port ran
    dry — whether a machine stall explains it: had the machine not stopped, the daemon
    would have been back within its FIFO (the measured stall inside ``[due, now]``
    covers the whole gap). Conservative: a probe's sleep can under-measure a stall by
    up to :data:`PERIOD`, and such a stall stays the emulator's (a first version gave
    that much slack, and a 200 Mb/s run put 71 late sends of a starved daemon on
    0.01 ms of stalls)."""
    return [overlap(due, now, stalls) >= now - t_free for due, t_free, now in late]


def _cpu_ticks(path: str) -> list[int]:
    """The summed ``cpu`` line of ``/proc/stat`` — user, nice, system, idle, iowait, irq,
    softirq, steal, … in clock ticks — as many columns as this kernel writes."""
    with open(path) as f:
        return [int(x) for x in f.readline().split()[1:]]


def steal_seconds(path: str = "/proc/stat") -> float:
    """CPU time the hypervisor gave other guests while this one's CPUs wanted to run
    (``/proc/stat`` steal, summed over CPUs), seconds; 0 where there is none."""
    try:
        return _cpu_ticks(path)[7] / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def busy_seconds(path: str = "/proc/stat") -> float:
    """CPU time this machine's CPUs spent working (``/proc/stat``: user, nice, system, irq
    and softirq, summed over CPUs), seconds.

    Not idle, not iowait, and not steal: steal is time the hypervisor ran other guests
    while ours wanted to run — the host's load, not work done here. Counted as busy
    (as ``emu doctor`` did), a window with a burst of steal looked like emu's cost,
    and a difference of two such windows (a kernel hop's) came out at 0.5 µs in one
    run and 21–27 in three others."""
    user, nice, system, _idle, _iowait, irq, softirq = (_cpu_ticks(path) + [0] * 7)[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def measure(seconds: float = 5.0) -> dict[str, Any]:
    """Watch this machine for ``seconds`` (``emu doctor --measure``): how often every CPU
    stopped at once, for how long, and the hypervisor's steal meanwhile."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="emu-stalls") as d:
        out = os.path.join(d, "stalls.log")
        w = subprocess.Popen([sys.executable, "-m", "emu.credible.stallwatch", out],
                             stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while read(out)[0] is None and w.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            s0, t0 = steal_seconds(), time.monotonic()
            time.sleep(seconds)
            s1, t1 = steal_seconds(), time.monotonic()
        finally:
            w.terminate()
            w.wait(timeout=10)
        head, events = read(out)
    stalls = machine_stalls(events, head["cpus"], t0, t1) if head else []
    return {"seconds": round(t1 - t0, 3), "real_time": bool(head and head.get("rt")),
            "stalls_over_1ms": sum(1 for s, e in stalls if e - s >= 1e-3), **summary(stalls),
            "steal_s": round(s1 - s0, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m emu.credible.stallwatch",
                                description="record moments when every CPU stalled at once")
    p.add_argument("out", help="file the stalls are appended to")
    p.add_argument("--watch", type=int, nargs="*", default=[],
                   help="exit once all of these pids are gone")
    p.add_argument("--period", type=float, default=PERIOD)
    a = p.parse_args(argv)
    return run(a.out, a.watch, a.period)


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: GPL-2.0-only
"""Ask the kernel's scheduler to run a daemon soon after it wakes: a short EEVDF slice.

Why: a NIC or switch daemon stands in for hardware, which never waits for a
CPU. On a small machine it shares the CPUs with the other daemons and the
applications; when it wakes (a timer for its port's next frame, a datagram,
a post) while both CPUs are busy, the fair scheduler lets the running task
finish its slice first (1.4 ms here by default), and the emulated port idles
with frames queued (counted as ``tx_late``). Linux 6.12+ lets a normal task
request a shorter slice (``sched_attr.sched_runtime`` with ``SCHED_OTHER``):
EEVDF then gives it an earlier virtual deadline, so it preempts on wake-up —
without a larger share of the CPU (unlike a nice value) and without the
starvation risk of a real-time policy. Older kernels ignore the field; the
call then reports that no slice is in force.

A NIC daemon goes further by default (:func:`schedule_daemon`, ``emu nicd run
--sched rt``): ``SCHED_FIFO`` priority :data:`DAEMON_RT_PRIORITY`. Why: with
the slice, a sending daemon at ~0.75 of a core that shared a CPU with the
receiving one was still preempted and left waiting 0.5–2 ms a few times a
second (bpftrace on ``sched_switch``: ~20 such waits in 5 s, behind the other
daemon or ``ksoftirqd``) — its port's FIFO ran dry, a ``tx_late`` in nearly
every pair write-bw at 1 Gb/s. A real-time task is never queued behind an
ordinary one, and the kernel places runnable real-time tasks on CPUs that run
none, so the two daemons spread over the two CPUs. The risk of a real-time
policy is starving everything else; it is taken only where the kernel throttles
real-time tasks (``sched_rt_runtime_us`` below its period: 95 % by default, the
rest kept for ordinary tasks), and ``SCHED_RESET_ON_FORK`` keeps it from the
daemon's children and threads. The stall watcher's probes run one priority
above (:data:`PROBE_RT_PRIORITY`), so a busy daemon cannot pass for a stall of
the machine.
"""

from __future__ import annotations

import ctypes
import os
import struct

#: x86_64 and aarch64 syscall numbers (sched_setattr, sched_getattr)
_NR = {"x86_64": (314, 315), "aarch64": (274, 275)}
#: struct sched_attr, SCHED_ATTR_SIZE_VER1 (56 bytes): size, policy, flags, nice,
#: priority, runtime, deadline, period, util_min, util_max
_ATTR = struct.Struct("IIQiIQQQII")
SCHED_OTHER = 0
#: the slice NIC and switch daemons ask for: a tenth of a millisecond, EEVDF's minimum
DAEMON_SLICE_S = 100e-6
#: ``SCHED_FIFO`` priority of NIC daemons under ``--sched rt`` …
DAEMON_RT_PRIORITY = 1
#: … and of the stall watcher's probes, above them (emu.credible.stallwatch)
PROBE_RT_PRIORITY = DAEMON_RT_PRIORITY + 1
#: ``emu nicd run --sched``: real-time (falls back to the slice), the slice, the kernel's
SCHED_POLICIES = ("rt", "slice", "default")
RT_RUNTIME = "/proc/sys/kernel/sched_rt_runtime_us"
RT_PERIOD = "/proc/sys/kernel/sched_rt_period_us"


def _syscalls() -> tuple[ctypes.CDLL, int, int] | None:
    nrs = _NR.get(os.uname().machine)
    if nrs is None:
        return None
    try:
        return ctypes.CDLL(None, use_errno=True), *nrs
    except OSError:
        return None


def slice_in_force(tid: int = 0) -> float | None:
    """The custom slice (seconds) of thread ``tid`` (0: the calling thread), or None."""
    sc = _syscalls()
    if sc is None:
        return None
    libc, _set, get = sc
    buf = ctypes.create_string_buffer(_ATTR.size)
    if libc.syscall(get, tid, buf, _ATTR.size, 0) != 0:
        return None
    fields = _ATTR.unpack(buf.raw)
    return fields[5] / 1e9 if fields[1] == SCHED_OTHER and fields[5] else None


def request_slice(seconds: float = DAEMON_SLICE_S) -> float | None:
    """Ask for a ``seconds`` slice for the calling thread (and the threads it starts
    later, which inherit it); returns the slice in force, None where the kernel has
    none to give (older than 6.12, another architecture, or a policy other than
    ``SCHED_OTHER`` already set). Never raises: a coarser scheduler is slower, not wrong.
    """
    sc = _syscalls()
    if sc is None or seconds <= 0:
        return None
    libc, set_, _get = sc
    cur = ctypes.create_string_buffer(_ATTR.size)
    if libc.syscall(_get, 0, cur, _ATTR.size, 0) != 0:
        return None
    size, policy, flags, nice, *_ = _ATTR.unpack(cur.raw)
    if policy != SCHED_OTHER:
        return None  # someone chose a policy for us (chrt): leave it alone
    attr = ctypes.create_string_buffer(_ATTR.pack(_ATTR.size, SCHED_OTHER, 0, nice, 0,
                                                  int(seconds * 1e9), 0, 0, 0, 0))
    if libc.syscall(set_, 0, attr, 0) != 0:
        return None
    return slice_in_force()


def rt_throttled(runtime: str = RT_RUNTIME, period: str = RT_PERIOD) -> bool:
    """The kernel keeps a share of every period for ordinary tasks, however busy the
    real-time ones (``sched_rt_runtime_us`` ≥ 0 and below ``sched_rt_period_us``)."""
    try:
        with open(runtime) as f:
            rt = int(f.read())
        with open(period) as f:
            per = int(f.read())
    except (OSError, ValueError):
        return False
    return 0 <= rt < per


def request_realtime(priority: int = DAEMON_RT_PRIORITY, *, throttled: bool | None = None
                     ) -> bool:
    """``SCHED_FIFO`` at ``priority`` (reset on fork) for the calling process; False —
    nothing changed — where the kernel would not throttle it (:func:`rt_throttled`),
    where it is refused (no ``CAP_SYS_NICE``, a container's limits) or where a policy
    other than ``SCHED_OTHER`` is already set (someone ran us under ``chrt``)."""
    if not (rt_throttled() if throttled is None else throttled):
        return False
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return False
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(priority))
    except (OSError, AttributeError):
        return False
    return True


def schedule_daemon(policy: str = "rt") -> str:
    """Apply ``policy`` (:data:`SCHED_POLICIES`) to the calling daemon; returns what is in
    force (:func:`policy_in_force`). ``rt`` falls back to the slice where real-time
    scheduling is not to be had; neither ever raises."""
    if policy not in SCHED_POLICIES:
        raise ValueError(f"scheduling policy must be one of {', '.join(SCHED_POLICIES)}")
    if policy == "rt" and request_realtime():
        return policy_in_force()
    if policy in ("rt", "slice"):
        request_slice()
    return policy_in_force()


def policy_in_force() -> str:
    """What the calling thread runs under: ``fifo N``, ``slice N us`` or ``default``."""
    try:
        pol = os.sched_getscheduler(0) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
        if pol == os.SCHED_FIFO:
            return f"fifo {os.sched_getparam(0).sched_priority}"
        if pol == os.SCHED_RR:
            return f"rr {os.sched_getparam(0).sched_priority}"
    except (OSError, AttributeError):
        return "default"
    sl = slice_in_force()
    return f"slice {sl * 1e6:.0f} us" if sl else "default"

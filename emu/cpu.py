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

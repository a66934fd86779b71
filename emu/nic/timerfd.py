# SPDX-License-Identifier: GPL-2.0-only
"""Microsecond sleeps for trio through a Linux ``timerfd``.

Why: trio waits in ``epoll_wait``, whose timeout CPython rounds *up* to a
whole millisecond, so ``trio.sleep_until`` wakes up to ~1 ms late. A port
pacer at 1 Gb/s that sleeps between frames would then release 125 KB
bursts, which a same-rate switch port downstream sees as a queue the
emulated NIC never built. A ``timerfd`` armed at an absolute
``CLOCK_MONOTONIC`` time (``emu.fabricclock.wall()``'s clock) becomes readable at
that instant, and readability wakes ``epoll_wait`` early.

Python 3.13 has ``os.timerfd_create``; 3.11 does not, so this calls libc
through ``ctypes`` (and falls back to ``trio.sleep_until`` where that fails,
e.g. on a non-Linux system — correct, only coarser).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import math
import os

import trio

from emu.fabricclock import wall
from emu.nic.clock import current_scale

CLOCK_MONOTONIC = 1
TFD_NONBLOCK = 0o4000
TFD_CLOEXEC = 0o2000000
TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int,
                                         ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


class TimerFd:
    """One timerfd; :meth:`sleep_until` (monotonic seconds) may be awaited by one task."""

    def __init__(self) -> None:
        self.fd = -1
        if _LIBC is not None:
            fd = _LIBC.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
            if fd >= 0:
                self.fd = fd
        self._spec = _Itimerspec()

    @property
    def precise(self) -> bool:
        return self.fd >= 0

    def _arm(self, deadline: float) -> bool:
        assert _LIBC is not None
        sec = math.floor(deadline)
        v = self._spec.it_value
        v.tv_sec = sec
        v.tv_nsec = max(1, int((deadline - sec) * 1e9))  # 0/0 would disarm it
        return _LIBC.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(self._spec),
                                     None) == 0

    async def sleep_until(self, deadline: float) -> None:
        """Return at ``deadline`` (``emu.fabricclock.wall()`` seconds), microseconds late at most
        when the process is not starved; at once when it has passed."""
        if deadline <= wall():
            await trio.lowlevel.checkpoint()
            return
        if self.fd < 0 or not self._arm(deadline):
            # a wall duration; trio's clock may be fabric time (emu.nic.clock)
            await trio.sleep(max(0.0, deadline - wall()) / current_scale())
            return
        await trio.lowlevel.wait_readable(self.fd)
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)  # the expiry count: clears readability

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

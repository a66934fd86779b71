# SPDX-License-Identifier: GPL-2.0-only
"""Named deadlines for sans-IO endpoints.

A transport has several logical timers (retransmission, ACK coalescing, RNR
back-off, DCQCN rate increase, CNP spacing, close linger …) but the daemon
arms exactly one OS timer per endpoint, at ``get_timer()``. :class:`TimerSet`
bridges the two: engines set and cancel named deadlines, ``get_timer()``
returns :meth:`TimerSet.earliest`, and ``handle_timer(now)`` dispatches on
:meth:`TimerSet.expired`. Deadlines are plain floats in the caller's clock
(seconds, as passed in); nothing here reads the time.

A set holds a handful of names, so a dict plus a cached minimum beats a heap:
setting a timer (done per packet for the retransmission timer) is a dict
store and a compare.
"""

from __future__ import annotations

from collections.abc import Iterator


class TimerSet:
    """Named one-shot deadlines; re-setting a name replaces its deadline."""

    __slots__ = ("_deadlines", "_min")

    def __init__(self) -> None:
        self._deadlines: dict[str, float] = {}
        self._min: float | None = None  # cached earliest; None = empty or stale

    def set(self, name: str, deadline: float) -> None:
        """Arm (or re-arm) ``name`` to fire at ``deadline``."""
        old = self._deadlines.get(name)
        self._deadlines[name] = deadline
        m = self._min
        if m is not None:
            if deadline <= m:
                self._min = deadline
            elif old is not None and old <= m:
                self._min = None  # the earliest may have moved later
        elif len(self._deadlines) == 1:
            self._min = deadline

    def set_if_earlier(self, name: str, deadline: float) -> None:
        """Arm ``name`` unless it is already due sooner (e.g. ACK coalescing)."""
        old = self._deadlines.get(name)
        if old is None or deadline < old:
            self.set(name, deadline)

    def cancel(self, name: str) -> bool:
        """Disarm ``name``; True if it was armed."""
        old = self._deadlines.pop(name, None)
        if old is None:
            return False
        if self._min is not None and old <= self._min:
            self._min = None
        return True

    def clear(self) -> None:
        self._deadlines.clear()
        self._min = None

    def get(self, name: str) -> float | None:
        return self._deadlines.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._deadlines

    def __len__(self) -> int:
        return len(self._deadlines)

    def __iter__(self) -> Iterator[tuple[str, float]]:
        return iter(sorted(self._deadlines.items(), key=lambda kv: kv[1]))

    def earliest(self) -> float | None:
        """The next deadline, or None when nothing is armed (``get_timer()``)."""
        if self._min is None and self._deadlines:
            self._min = min(self._deadlines.values())
        return self._min

    def expired(self, now: float) -> list[str]:
        """Disarm and return the names due at ``now`` (deadline <= now), earliest first.

        They are removed before the caller handles them, so a handler may
        re-arm its own timer.
        """
        m = self.earliest()
        if m is None or m > now:
            return []
        due = sorted((d, n) for n, d in self._deadlines.items() if d <= now)
        for _, n in due:
            del self._deadlines[n]
        self._min = None
        return [n for _, n in due]

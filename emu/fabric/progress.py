# SPDX-License-Identifier: GPL-2.0-only
"""Steps done / total during a long ``emu up``, printed at most once a second.

Why: a 64-host cluster is up in half a second and needs no chatter, but a big
one takes minutes, and a command that prints nothing for that long looks hung.
Nothing is printed until a bring-up has run for ``every`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Progress:
    """Counts steps (namespaces made, daemons ready …) against a total."""

    def __init__(self, total: int = 0, emit: Callable[[str], None] | None = None,
                 every: float = 1.0) -> None:
        self.total = total
        self.done = 0
        self.emit = emit
        self.every = every
        self._last = time.monotonic()
        self.lines = 0  # how many progress lines were printed (tests, bench)

    def add_total(self, n: int) -> None:
        self.total += n

    def step(self, what: str, n: int = 1) -> None:
        """``n`` more steps of ``what`` are done; say so if a second has passed."""
        self.done += n
        if self.emit is None:
            return
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self.lines += 1
            self.emit(f"emu up: {self.done}/{self.total} steps ({what})")

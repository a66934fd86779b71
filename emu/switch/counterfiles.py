# SPDX-License-Identifier: GPL-2.0-only
"""The switch daemon's counter files, written off its packet loop.

``counters.json`` (atomically replaced) and ``series.jsonl`` (a line per port
per period) are what ``emu switch``, ``emu status`` and plots read. Why a
thread: writing them took ~1.5 ms every 100 ms in the daemon's own loop — a
``rename`` on /run alone 0.7 ms (``perf trace``) — and every packet due in
that time left late, ~1 ms behind its departure, which the daemon rightly
counted as overload (``late``): the user-space datapath at 100 Mb/s was
flagged in every run for its own bookkeeping. The loop now hands a snapshot
over and goes on; the writer keeps only the newest one it has not written
(a slow disk skips periods, never holds packets).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

#: series.jsonl stops growing at this size
SERIES_MAX = 64 << 20


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class CounterFiles:
    """``counters.json`` and ``series.jsonl`` in ``state_dir``: :meth:`post` from the
    packet loop (returns at once), :meth:`write` to write now (start-up, exit)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.series_bytes = 0
        self.written = 0  # snapshots written
        self.skipped = 0  # snapshots replaced by a newer one before the writer got to them
        self.errors = 0
        self._lock = threading.Lock()  # one writer at a time (thread, or write())
        self._cv = threading.Condition()
        self._pending: dict[str, Any] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def write(self, c: dict[str, Any]) -> None:
        """Write snapshot ``c`` now (raises OSError)."""
        with self._lock:
            write_atomic(self.state_dir / "counters.json", json.dumps(c, indent=1))
            if self.series_bytes < SERIES_MAX:
                lines = "".join(json.dumps({"t": round(c["t"], 6), "port": p, **v}) + "\n"
                                for p, v in c["ports"].items())
                with open(self.state_dir / "series.jsonl", "a") as f:
                    f.write(lines)
                self.series_bytes += len(lines)
            self.written += 1

    def post(self, c: dict[str, Any]) -> None:
        """Have snapshot ``c`` written by the writer thread (started on first use)."""
        with self._cv:
            if self._pending is not None:
                self.skipped += 1
            self._pending = c
            self._cv.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="counter-files",
                                            daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the writer once it has written what was posted."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._pending is None and not self._closed:
                    self._cv.wait()
                c, self._pending = self._pending, None
                if c is None:
                    return
            try:
                self.write(c)
            except OSError:
                self.errors += 1

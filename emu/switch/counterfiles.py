# SPDX-License-Identifier: GPL-2.0-only
"""The switch daemon's counter files, written off its packet loop.

``counters.json`` (atomically replaced) and ``series.jsonl`` (a line per port
per period) are what ``emu switch``, ``emu status`` and plots read. Why a
thread: writing them took ~1.5 ms every 100 ms in the daemon's own loop — a
``rename`` on /run alone 0.7 ms (``perf trace``) — and every packet due in
that time left late, ~1 ms behind its departure, which the daemon rightly
counted as overload (``late``): the user-space datapath at 100 Mb/s was
flagged in every run for its own bookkeeping.

The loop serializes a snapshot (compact JSON: json's C encoder, tens of µs)
and hands the text over; the thread only does the file system calls, which
release the GIL. A thread that ran Python — the JSON encoding with ``indent``,
which json does in Python — held the GIL while the loop waited for it, and
the late releases clustered at each 100 ms period. The writer keeps only the
newest ``counters.json`` it has not written, and every series line (a slow
disk skips replacements, never holds packets nor loses a period).
"""

from __future__ import annotations

import contextlib
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
    packet loop (serializes, then returns), :meth:`write` to write now (start, exit)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.series_bytes = 0
        self.written = 0  # snapshots written
        self.skipped = 0  # counters.json texts replaced by a newer one before written
        self.errors = 0
        self._lock = threading.Lock()  # one writer at a time (thread, or write())
        self._cv = threading.Condition()
        self._pending: tuple[str, str] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def _texts(self, c: dict[str, Any]) -> tuple[str, str]:
        """``counters.json``'s text and the series lines of snapshot ``c`` ("" once the
        series is full)."""
        lines = "" if self.series_bytes >= SERIES_MAX else "".join(
            json.dumps({"t": round(c["t"], 6), "port": p, **v}) + "\n"
            for p, v in c["ports"].items())
        self.series_bytes += len(lines)
        return json.dumps(c), lines

    def _write_texts(self, counters: str, lines: str) -> None:
        with self._lock:
            write_atomic(self.state_dir / "counters.json", counters)
            if lines:
                with open(self.state_dir / "series.jsonl", "a") as f:
                    f.write(lines)
            self.written += 1

    def write(self, c: dict[str, Any]) -> None:
        """Write snapshot ``c`` now (raises OSError)."""
        self._write_texts(*self._texts(c))

    def post(self, c: dict[str, Any]) -> None:
        """Have snapshot ``c`` written by the writer thread (started on first use)."""
        counters, lines = self._texts(c)
        with self._cv:
            if self._pending is not None:  # not written yet: its series lines still are
                self.skipped += 1
                lines = self._pending[1] + lines
            self._pending = (counters, lines)
            self._cv.notify()
        if self._thread is None:
            # the loop's own scheduling policy: a real-time loop whose writer is an
            # ordinary thread (SCHED_RESET_ON_FORK) waited for the GIL while a busy CPU
            # kept the writer from running to its next release of it
            try:
                sched = (os.sched_getscheduler(0), os.sched_getparam(0))
            except OSError:
                sched = None
            self._thread = threading.Thread(target=self._run, args=(sched,),
                                            name="counter-files", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the writer once it has written what was posted."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self, sched: tuple[int, Any] | None) -> None:
        if sched is not None:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, *sched)
        while True:
            with self._cv:
                while self._pending is None and not self._closed:
                    self._cv.wait()
                texts, self._pending = self._pending, None
                if texts is None:
                    return
            try:
                self._write_texts(*texts)
            except OSError:
                self.errors += 1

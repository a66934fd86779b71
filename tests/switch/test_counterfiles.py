# SPDX-License-Identifier: GPL-2.0-only
"""emu.switch.counterfiles: the switch daemon's counter files, written off its loop."""

from __future__ import annotations

import json
import threading
import time

from emu.switch import counterfiles as CF


def _snap(t: float) -> dict:
    return {"t": t, "ports": {"p1": {"released": int(t)}, "p2": {"released": 0}}}


def test_posted_snapshots_are_written_by_the_thread_newest_kept_no_period_lost(tmp_path):
    files = CF.CounterFiles(tmp_path)
    gate = threading.Lock()
    gate.acquire()
    real = files._write_texts
    files._write_texts = lambda *t: (gate.acquire(), gate.release(), real(*t))  # hold it
    files.post(_snap(1.0))
    deadline = time.monotonic() + 10  # to fail fast, not a measurement
    while files._pending is not None and time.monotonic() < deadline:
        time.sleep(0.001)  # the writer takes the first and waits at the gate
    assert files._pending is None
    files.post(_snap(2.0))
    files.post(_snap(3.0))  # replaces 2.0 before the writer got to it
    gate.release()
    files.close()
    assert files.written == 2 and files.skipped == 1 and files.errors == 0
    assert json.loads((tmp_path / "counters.json").read_text())["t"] == 3.0
    lines = [json.loads(x) for x in (tmp_path / "series.jsonl").read_text().splitlines()]
    assert [(x["t"], x["port"]) for x in lines] == [(1.0, "p1"), (1.0, "p2"),
                                                   (2.0, "p1"), (2.0, "p2"),
                                                   (3.0, "p1"), (3.0, "p2")]


def test_a_write_error_is_counted_not_raised_in_the_thread(tmp_path):
    files = CF.CounterFiles(tmp_path / "gone")  # no such folder
    files.post(_snap(1.0))
    files.close()
    assert files.errors == 1 and files.written == 0


def test_the_series_stops_growing_at_its_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(CF, "SERIES_MAX", 1)
    files = CF.CounterFiles(tmp_path)
    files.write(_snap(1.0))
    files.write(_snap(2.0))  # past the cap: counters.json still replaced, no more lines
    assert json.loads((tmp_path / "counters.json").read_text())["t"] == 2.0
    assert len((tmp_path / "series.jsonl").read_text().splitlines()) == 2

# SPDX-License-Identifier: GPL-2.0-only
"""``emu sample -w FILE`` as a user runs it: the file written, or one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def sample(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emu", "sample", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_writes_the_sample_capture(tmp_path):
    out = tmp_path / "s.pcapng"
    p = sample("-w", str(out))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("wrote ") and out.stat().st_size > 0


@pytest.mark.parametrize("rel, why", [("nodir/x.pcapng", "no directory {t}/nodir"),
                                      ("file/x.pcap", "{t}/file is not a directory")])
def test_an_unwritable_path_is_one_line_and_exit_2(tmp_path, rel, why):
    (tmp_path / "file").write_text("")
    path = tmp_path / rel
    p = sample("-w", str(path))
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == f"emu sample: cannot write {path}: {why.format(t=tmp_path)}\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["file"]


def test_a_failed_write_is_one_line_and_exit_2():
    """/dev/full: the path is fine, every write fails (a full disk)."""
    p = sample("-w", "/dev/full")
    assert p.returncode == 2
    assert p.stderr == "emu sample: cannot write /dev/full: No space left on device\n"

# SPDX-License-Identifier: GPL-2.0-only
"""``emu interop run`` as a user runs it (root): output paths that cannot be written are
one line and exit 2 before the matrix runs, and nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emu.fabric import state
from emu.fabric.naming import random_cluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


def interop_run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """One emu × emu RoCEv2 handshake: the smallest matrix."""
    prefix = random_cluster("i")
    try:
        return subprocess.run([sys.executable, "-m", "emu", "interop", "run", "-s", "emu",
                               "-c", "emu", "-T", "roce", "-t", "handshake", "--prefix",
                               prefix, *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        assert not [c for c in state.clusters() if c.startswith(prefix)], "cluster left up"


def test_an_unwritable_result_file_is_refused_before_the_matrix(tmp_path):
    (tmp_path / "file").write_text("")
    for flag in ("--json", "--markdown"):
        path = tmp_path / "file" / "r"
        p = interop_run("--log-dir", str(tmp_path / "new" / "io"), flag, str(path))
        assert (p.returncode, p.stdout) == (2, ""), p.stderr
        assert p.stderr == f"emu interop: cannot write {path}: {tmp_path}/file is not a directory\n"
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]  # the log dir made is gone again


@pytest.mark.parametrize("rel", ["file/io", "file/a/io"])
def test_a_log_dir_under_a_file_is_one_line(tmp_path, rel):
    (tmp_path / "file").write_text("")
    log_dir = tmp_path / rel
    p = interop_run("--log-dir", str(log_dir))
    assert (p.returncode, p.stdout) == (2, ""), p.stderr
    assert p.stderr == (f"emu interop: cannot create directory {log_dir}: "
                        f"{tmp_path}/file is not a directory\n")


def test_result_files_may_go_in_a_new_log_dir_and_a_failed_write_is_one_line(tmp_path):
    """The log dir is made first (the JSON may be in it); /dev/full passes the check and
    refuses the write, as a full disk would: the matrix is printed, then one line."""
    log_dir = tmp_path / "a" / "io"
    p = interop_run("--log-dir", str(log_dir), "--json", str(log_dir / "r.json"),
                    "--markdown", "/dev/full")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "handshake" in p.stdout
    assert "\n1 result in " in p.stdout  # one case: not "1 results"
    assert p.stderr == "emu interop: cannot write /dev/full: No space left on device\n"
    [r] = json.loads((log_dir / "r.json").read_text())["results"]
    assert (r["case"], r["client"], r["server"]) == ("handshake", "emu", "emu")

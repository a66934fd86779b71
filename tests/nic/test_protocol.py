# SPDX-License-Identifier: GPL-2.0-only
"""A NIC daemon that is not running, as every client of its control socket says it
(emu.nic.protocol ``connect``/``not_running``): the client API, ``emu nicd stats``, the
overload snapshot. No root, no namespaces: a run directory and a state directory in
``tmp_path``, a socket file nobody listens on (what ``kill -9`` of a daemon leaves)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from emu import proc
from emu.credible import overload  # bound to the real run directory before any test moves it
from emu.fabric import state
from emu.nic import protocol

CLUSTER = "fcdead"


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``/run/emu`` and ``/run/emu/nic`` moved into ``tmp_path``; returns the run dir."""
    run = tmp_path / "nic"
    (run / CLUSTER).mkdir(parents=True)
    monkeypatch.setattr(protocol, "RUN_DIR", str(run))
    monkeypatch.setattr(state, "STATE_DIR", str(tmp_path))
    return run


def _stale_socket(path: Path) -> str:
    """A socket file whose listener is gone: connecting is refused (ECONNREFUSED)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()
    return str(path)


def _dead_pid() -> tuple[int, int]:
    """A pid and start time of a process that has exited (as `emu status` records one)."""
    p = subprocess.Popen(["sleep", "30"])
    start = proc.start_time(p.pid)
    p.kill()
    p.wait()
    assert start is not None
    return p.pid, start


def _state(tmp_path: Path, pids: list[dict]) -> None:
    (tmp_path / f"{CLUSTER}.json").write_text(json.dumps(
        {"cluster": CLUSTER, "phase": "up", "namespaces": [], "root_links": [], "pids": pids}))


def test_a_killed_daemon_is_named_not_running_with_its_pid(dirs: Path, tmp_path: Path):
    """``kill -9`` of nicd h2: its socket stays and refuses. The client API said
    "[Errno 111] Connection refused"; now it names the daemon, its exited pid, and where
    to look."""
    from emu.api import DaemonDown, Device

    path = _stale_socket(dirs / CLUSTER / "h2.sock")
    pid, start = _dead_pid()
    _state(tmp_path, [{"pid": os.getpid(), "start": proc.start_time(os.getpid()),
                       "what": "nicd h1"}, {"pid": pid, "start": start, "what": "nicd h2"}])
    with pytest.raises(DaemonDown) as e:
        Device.open(sock_path=path)
    assert str(e.value) == (f"nicd h2 of cluster {CLUSTER} is not running (pid {pid} "
                            f"exited); see `emu status {CLUSTER}`")
    assert e.value.code == "ECONNREFUSED"
    with pytest.raises(DaemonDown, match="is not running .pid"):  # one-shot callers alike
        protocol.call_once(path, "stats")


def test_a_missing_socket_says_the_same(dirs: Path, tmp_path: Path):
    pid, start = _dead_pid()
    _state(tmp_path, [{"pid": pid, "start": start, "what": "nicd h2"}])
    with pytest.raises(protocol.DaemonDown) as e:
        protocol.connect(str(dirs / CLUSTER / "h2.sock"))
    assert str(e.value) == (f"nicd h2 of cluster {CLUSTER} is not running (pid {pid} "
                            f"exited); see `emu status {CLUSTER}`") and e.value.code == "ENOENT"


def test_what_is_said_without_a_record_or_a_cluster(dirs: Path, tmp_path: Path):
    path = _stale_socket(dirs / CLUSTER / "h3.sock")
    with pytest.raises(protocol.DaemonDown, match=f"^nicd h3 of cluster {CLUSTER} is not "
                       f"running: no cluster '{CLUSTER}' is up$"):
        protocol.connect(path)
    _state(tmp_path, [])  # up, but no daemon recorded for h3
    with pytest.raises(protocol.DaemonDown, match=f"^nicd h3 of cluster {CLUSTER} is not "
                       r"running \(its control socket refuses\); see `emu status fcdead`$"):
        protocol.connect(path)
    # recorded and alive, yet refusing: it runs, and that is said, not "exited"
    _state(tmp_path, [{"pid": os.getpid(), "start": proc.start_time(os.getpid()),
                       "what": "nicd h3"}])
    with pytest.raises(protocol.DaemonDown, match=f"pid {os.getpid()}. runs but takes no "
                       "connections"):
        protocol.connect(path)
    # a socket elsewhere ($EMU_NIC_SOCK, --sock) is no cluster's daemon: named by its path
    other = _stale_socket(tmp_path / "mine.sock")
    with pytest.raises(protocol.DaemonDown, match=f"^no NIC daemon listens at {other} "
                       r"\(Connection refused\)$"):
        protocol.connect(other)


def test_nicd_stats_says_the_daemon_is_not_running(dirs: Path, tmp_path: Path, capsys):
    """``emu nicd stats CL:h2`` printed "/run/emu/nic/CL/h2.sock: [Errno 111] Connection
    refused"; now the one sentence, exit status 1 as before."""
    from emu.cli import main

    path = _stale_socket(dirs / CLUSTER / "h2.sock")
    pid, start = _dead_pid()
    _state(tmp_path, [{"pid": pid, "start": start, "what": "nicd h2"}])
    assert main(["nicd", "stats", "--sock", path]) == 1
    out = capsys.readouterr().out
    assert out == (f"nicd h2 of cluster {CLUSTER} is not running (pid {pid} exited); see "
                   f"`emu status {CLUSTER}`\n")


def test_the_overload_snapshot_lists_it_as_unreachable_in_those_words(dirs, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(overload, "NIC_RUN_DIR", str(dirs))
    _stale_socket(dirs / CLUSTER / "h2.sock")
    pid, start = _dead_pid()
    _state(tmp_path, [{"pid": pid, "start": start, "what": "nicd h2"}])
    snap = overload.snapshot(CLUSTER)
    assert snap["unreachable"] == [f"nicd h2 of cluster {CLUSTER} is not running (pid {pid} "
                                   f"exited); see `emu status {CLUSTER}`"]

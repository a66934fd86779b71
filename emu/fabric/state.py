# SPDX-License-Identifier: GPL-2.0-only
"""State files: the only record of what a cluster made, so teardown removes exactly that.

``/run/emu/<cluster>.json`` is written *before* each batch of objects is
created (the names it is about to make), then updated with identities once
they exist, so a SIGKILL at any instant leaves a file that names everything
that may exist. Teardown never goes by name patterns: it removes what the
file lists, tolerates objects already gone, and skips a namespace whose inode
differs from the recorded one (someone else's namespace reusing the name).

Other parts of emu add their objects with :func:`add_pid` (NIC daemons,
captures) and :func:`add_root_link` before creating them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

from emu.fabric import netns

STATE_DIR = "/run/emu"
VERSION = 1


def path(cluster: str) -> str:
    return os.path.join(STATE_DIR, f"{cluster}.json")


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Serialise read-modify-write of state files between emu processes."""
    os.makedirs(STATE_DIR, mode=0o755, exist_ok=True)
    fd = os.open(os.path.join(STATE_DIR, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def load(cluster: str) -> dict[str, Any] | None:
    try:
        with open(path(cluster)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def save(state: dict[str, Any]) -> None:
    """Atomic replace (write + rename): a reader never sees half a file."""
    os.makedirs(STATE_DIR, mode=0o755, exist_ok=True)
    p = path(state["cluster"])
    tmp = f"{p}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, p)


def create(cluster: str, info: dict[str, Any]) -> dict[str, Any]:
    """A fresh state file; fails if the cluster already has one (it is up, or crashed: clean it)."""
    os.makedirs(STATE_DIR, mode=0o755, exist_ok=True)
    state = {
        "version": VERSION, "cluster": cluster, "phase": "creating",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid(),
        "pid_start": _start_time(os.getpid()), **info,
        "namespaces": [], "root_links": [], "pids": [],
    }
    fd = os.open(path(cluster), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, indent=1)
    return state


def clusters() -> list[str]:
    """Every cluster that has a state file."""
    try:
        names = os.listdir(STATE_DIR)
    except FileNotFoundError:
        return []
    return sorted(n[:-5] for n in names if n.endswith(".json"))


def _start_time(pid: int) -> int | None:
    """Process start time (clock ticks since boot), so a recycled pid is not mistaken for ours."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def add_pid(cluster: str, pid: int, what: str) -> None:
    """Record a process (daemon, capture) that teardown must stop."""
    with locked():
        st = load(cluster)
        if st is None:
            raise KeyError(f"no cluster {cluster!r}")
        st["pids"].append({"pid": pid, "start": _start_time(pid), "what": what})
        save(st)


def add_root_link(cluster: str, ifname: str) -> None:
    """Record a link in the root namespace BEFORE creating it (names must be unique: emu+hex)."""
    with locked():
        st = load(cluster)
        if st is None:
            raise KeyError(f"no cluster {cluster!r}")
        st["root_links"].append(ifname)
        save(st)


def alive(pid: int, start: int | None) -> bool:
    return start is not None and _start_time(pid) == start


def teardown(state: dict[str, Any], grace_s: float = 2.0) -> dict[str, int]:
    """Remove everything ``state`` lists, then its file. Returns counts of what was removed."""
    removed = {"pids": 0, "root_links": 0, "namespaces": 0}
    state["phase"] = "tearing-down"
    with contextlib.suppress(OSError):
        save(state)
    procs = [p for p in state.get("pids", []) if alive(p["pid"], p.get("start"))]
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while procs and time.monotonic() < deadline:
        procs = [p for p in procs if alive(p["pid"], p.get("start"))]
        time.sleep(0.02)
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p["pid"], signal.SIGKILL)
    removed["pids"] = len(state.get("pids", []))
    if state.get("root_links"):
        from emu.fabric import nl
        with nl.Batch() as b:
            for ifname in state["root_links"]:
                try:
                    idx = socket.if_nametoindex(ifname)
                except OSError:
                    continue
                body = nl._ifinfo(idx)
                with contextlib.suppress(OSError):
                    b.run([nl.Msg(nl.RTM_DELLINK, 0, body, f"delete {ifname}")])
                    removed["root_links"] += 1
    for ns in state.get("namespaces", []):
        if netns.remove(ns["name"], ns.get("inode")):
            removed["namespaces"] += 1
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path(state["cluster"]))
    return removed


def down(cluster: str) -> dict[str, int]:
    """Tear down ``cluster`` by its state file (works after ``up`` was SIGKILLed)."""
    with locked():
        st = load(cluster)
    if st is None:
        raise KeyError(f"no cluster {cluster!r} (no {path(cluster)})")
    return teardown(st)


def clean(all_clusters: bool = False) -> list[str]:
    """Tear down clusters whose ``up`` died half way (state 'creating'/'tearing-down' and the
    creating process gone); with ``all_clusters`` every cluster that has a state file."""
    done = []
    for c in clusters():
        st = load(c)
        if st is None:
            continue
        crashed = st.get("phase") != "up" and not alive(st.get("pid", -1), st.get("pid_start"))
        if all_clusters or crashed:
            teardown(st)
            done.append(c)
    return done

# SPDX-License-Identifier: GPL-2.0-only
"""State files: the only record of what a cluster made, so teardown removes exactly that.

``/run/emu/<cluster>.json`` is written *before* each batch of objects is
created (the names it is about to make), then updated with identities once
they exist, so a SIGKILL at any instant leaves a file that names everything
that may exist. Teardown never goes by name patterns: it removes what the
file lists, tolerates objects already gone, and skips a namespace whose inode
differs from the recorded one (someone else's namespace reusing the name).

Other parts of emu add their objects with :func:`add_root_link` before
creating them, and start processes between :func:`add_spawn` (the exact argv,
written before the fork) and :func:`add_pid` (the pid and its start time): a
SIGKILL between fork and record leaves a ``spawning`` entry that teardown
resolves to the process by its argv, so no daemon outlives its cluster.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

from emu import proc
from emu.errors import UserError
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
    """The state of ``cluster``, None without a file; an unreadable file (written by
    something else, or a full disk) loads as an empty record marked ``corrupt``."""
    try:
        with open(path(cluster)) as f:
            st = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return {"cluster": cluster, "phase": "corrupt", "corrupt": str(e), "namespaces": [],
                "root_links": [], "pids": []}
    if not isinstance(st, dict):
        return {"cluster": cluster, "phase": "corrupt", "corrupt": "not a JSON object",
                "namespaces": [], "root_links": [], "pids": []}
    return st


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
    # written aside, then linked into place (fails if the name exists): a SIGKILL never
    # leaves a half-written state file
    tmp = f"{path(cluster)}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    try:
        os.link(tmp, path(cluster))
    finally:
        os.unlink(tmp)
    return state


def clusters() -> list[str]:
    """Every cluster that has a state file."""
    try:
        names = os.listdir(STATE_DIR)
    except FileNotFoundError:
        return []
    return sorted(n[:-5] for n in names if n.endswith(".json"))


def resolve(cluster: str | None) -> str:
    """The cluster a command means: the one named, or the only one that is up.
    UserError (one line) when it is not up, none is, or several are and none is named —
    the one rule every command that takes ``--cluster`` follows."""
    names = clusters()
    if cluster:
        if cluster not in names:
            raise UserError(f"no cluster {cluster!r} is up"
                            + (f" (up: {', '.join(names)})" if names else ""))
        return cluster
    if len(names) == 1:
        return names[0]
    if not names:
        raise UserError("no cluster is up (`emu up TOPOLOGY`)")
    raise UserError(f"several clusters are up ({', '.join(names)}): say which with --cluster")


_start_time = proc.start_time  # process start time (clock ticks since boot)


def add_spawn(cluster: str, argv: list[str], what: str) -> None:
    """Journal a process about to be started (its exact argv), BEFORE the fork."""
    add_spawns(cluster, [(argv, what)])


def add_spawns(cluster: str, spawns: list[tuple[list[str], str]]) -> None:
    """Journal processes about to be started (``(argv, what)`` each), BEFORE the forks,
    in one write of the state file (a write per daemon was seconds of a large ``emu
    up``: the file grows with the fabric)."""
    with locked():
        st = load(cluster)
        if st is None:
            raise KeyError(f"no cluster {cluster!r}")
        now = time.time()
        st.setdefault("spawning", []).extend({"argv": argv, "what": what, "at": now}
                                             for argv, what in spawns)
        save(st)


def add_pid(cluster: str, pid: int, what: str | tuple[str, ...]) -> None:
    """Record a process (daemon, capture) that teardown must stop; settles its spawn entry.
    ``what``: its name, or each name it serves (a NIC worker's hosts: one entry each)."""
    add_pids(cluster, [(pid, what)])


def add_pids(cluster: str, procs: list[tuple[int, str | tuple[str, ...]]]) -> None:
    """:func:`add_pid` for several processes, in one write of the state file."""
    rows = []
    for pid, what in procs:
        start = _start_time(pid)
        rows += [{"pid": pid, "start": start, "what": w}
                 for w in ((what,) if isinstance(what, str) else what)]
    names = {r["what"] for r in rows}
    with locked():
        st = load(cluster)
        if st is None:
            raise KeyError(f"no cluster {cluster!r}")
        st["pids"] += rows
        st["spawning"] = [s for s in st.get("spawning", []) if s["what"] not in names]
        save(st)


def update(cluster: str, **fields: Any) -> None:
    """Set top-level fields of ``cluster``'s state (its phase, the step under way …)."""
    with locked():
        st = load(cluster)
        if st is None:
            raise KeyError(f"no cluster {cluster!r}")
        st.update(fields)
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
    """The recorded process still runs (same start time: not a reused pid; not a zombie)."""
    return proc.alive(pid, start)


def recorded(state: dict[str, Any], what: str) -> dict[str, Any] | None:
    """The process ``state`` records as ``what`` (``"nicd h2"``; the newest, should one
    have been restarted), with ``alive`` judged as ``emu status`` judges it (pid and
    start time); None if none is recorded. Why: a tool whose daemon does not answer can
    then say the daemon died, and which pid, instead of quoting its socket's errno."""
    for p in reversed(state.get("pids", [])):
        if p.get("what") == what and isinstance(p.get("pid"), int):
            return {**p, "alive": alive(p["pid"], p.get("start"))}
    return None


def processes(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every process ``state`` says may exist: recorded pids, and spawns a SIGKILL cut
    short before their pid was written (found by their exact argv)."""
    out = list(state.get("pids", []))
    known = {p["pid"] for p in out}
    for s in state.get("spawning", []):
        for pid in proc.find_by_argv(s["argv"], s.get("at", 0.0)):
            if pid not in known:
                out.append({"pid": pid, "start": proc.start_time(pid), "what": s["what"]})
                known.add(pid)
    return out


def teardown(state: dict[str, Any], grace_s: float = 2.0) -> dict[str, int]:
    """Remove everything ``state`` lists, then its file. Returns counts of what was removed."""
    removed = {"pids": 0, "root_links": 0, "namespaces": 0}
    state["phase"] = "tearing-down"
    with contextlib.suppress(OSError):
        save(state)
    everything = processes(state)
    procs = [p for p in everything if alive(p["pid"], p.get("start"))]
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
    removed["pids"] = len({p["pid"] for p in everything})  # a worker serves many hosts
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
    remove_stale_tmps(state["cluster"])
    return removed


def remove_stale_tmps(cluster: str | None = None) -> list[str]:
    """Remove state files written aside (``<cluster>.json.<pid>.tmp``) by a process that
    is gone — an ``emu up``/``down`` SIGKILLed between writing and renaming — for
    ``cluster`` or every cluster; a live writer's file is left alone. Returns them."""
    try:
        names = os.listdir(STATE_DIR)
    except FileNotFoundError:
        return []
    gone = []
    for n in names:
        stem, _, rest = n.partition(".json.")
        pid, _, tail = rest.partition(".")
        if tail != "tmp" or not pid.isdigit() or (cluster is not None and stem != cluster):
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its writer still runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(STATE_DIR, n))
            gone.append(n)
    return gone


def down(cluster: str) -> dict[str, int]:
    """Tear down ``cluster`` by its state file (works after ``up`` was SIGKILLed)."""
    with locked():
        st = load(cluster)
    if st is None:
        raise KeyError(f"no cluster {cluster!r} (no {path(cluster)})")
    return teardown(st)


def crashed(st: dict[str, Any]) -> bool:
    """An ``up`` (or ``down``) that died half way: not 'up', and the process that was
    making it is gone."""
    return st.get("phase") != "up" and not alive(st.get("pid", -1), st.get("pid_start"))


def abandoned(st: dict[str, Any]) -> bool:
    """Brought up, but every process it started is gone: nothing serves it any more (its
    daemons were killed — a session or machine torn down around it — and no ``emu down``
    ran), while its namespaces, bound under /run/netns, outlive them. ``emu clean``
    removes it. A cluster that started no process (``--no-daemons``) is never abandoned."""
    pids = st.get("pids", [])
    return st.get("phase") == "up" and bool(pids) and not any(
        alive(p["pid"], p.get("start")) for p in pids)


def leftover(st: dict[str, Any]) -> bool:
    """What ``emu clean`` removes without being told: :func:`crashed` or :func:`abandoned`."""
    return crashed(st) or abandoned(st)


def clean(all_clusters: bool = False, only: list[str] | None = None,
          after: Callable[[dict[str, Any]], None] | None = None) -> list[str]:
    """Tear down every :func:`leftover` cluster (with ``all_clusters`` every cluster that
    has a state file; with ``only`` just those named), calling ``after(state)`` for each
    once it is down (what its owner keeps beside the namespaces). Returns their names."""
    done = []
    for c in clusters():
        if only is not None and c not in only:
            continue
        st = load(c)
        if st is None or not (all_clusters or leftover(st)):
            continue
        teardown(st)
        if after is not None:
            after(st)
        done.append(c)
    return done

# SPDX-License-Identifier: GPL-2.0-only
"""The control protocol's framing, paths and names, shared by the daemon and the client API.

Why newline-delimited JSON: every message is small (work requests carry
scatter/gather *addresses*, never data — data moves through shared memory),
so a text format costs little, ``socat`` and a shell can speak it, and the
framing needs no state beyond "split on ``\\n``". ``docs/nic-protocol.md``
is the full description; in short:

* request  ``{"id": 7, "op": "reg_mr", ...arguments}``
* reply    ``{"id": 7, "ok": true, "result": {...}}`` or
  ``{"id": 7, "ok": false, "error": "text", "code": "EINVAL"}``
* event    ``{"event": "wc", "cq": 3, "wcs": [{...}, ...]}`` (no ``id``),
  ``{"event": "qp", "qpn": ..., ...}``, ``{"event": "shutdown"}``

The hot verbs (``post_send``/``post_recv``, completions) also travel as
fixed binary records that mix with the lines: :mod:`emu.nic.compact`.

This module imports only the standard library so that the client API (and
its users: perftest-style tools) load fast; only when a daemon turns out not to
run does :func:`not_running` read the cluster's state file (``emu.fabric.state``)
to say why.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

#: keys of a daemon's ``overload`` that are measures beside the counts, not overload: the
#: total itself, seconds (``*_s``) and what the credibility judge needs to tell a busy
#: daemon that kept up from one that was the limit, and when its late sends happened
#: (``emu.credible.overload``)
OVERLOAD_INFO = frozenset({"total", "cpu_s", "cpu_runs", "port_waits", "tx_bytes",
                           "rx_bytes", "line_rate", "late_events"})


def overload_causes(ov: dict[str, Any]) -> dict[str, Any]:
    """The counts in a daemon's ``overload`` (every key but :data:`OVERLOAD_INFO` and
    seconds), for display and for summing causes."""
    return {k: v for k, v in ov.items() if k not in OVERLOAD_INFO and not k.endswith("_s")}

PROTOCOL_VERSION = 1
RUN_DIR = "/run/emu/nic"
#: the largest message either side accepts; longer lines are a protocol error
MAX_LINE = 1 << 20
#: UDP destination port of each transport (RoCEv2 4791, UET 4793, MRC 4971); the stub engine
#: shares RoCE's by default so captures of plumbing tests look like RoCE ports
DEFAULT_PORTS: dict[str, int] = {"roce": 4791, "uet": 4793, "mrc": 4971, "loopback": 4791}

#: ``ibv_wr_opcode`` names accepted in work requests
WR_OPCODES = ("RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
              "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD")


class NicError(OSError):
    """An error reply from a daemon (``code`` is the protocol's errno-like name) or a lost daemon.

    Here, with the framing, so that one-shot callers below the client API (``emu nicd
    stats``) raise the same error the client API does."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class ProtocolError(Exception):
    """A malformed message (bad JSON, over-long line, missing field)."""


class DaemonDown(NicError):
    """A host's NIC daemon takes no connections: its control socket refuses them or is
    gone. ``str()`` is one sentence for a person — which daemon, that it is not running
    and, where the cluster's state file knows its pid, that the process exited — where
    the socket's own ``[Errno 111] Connection refused`` named neither the host nor the
    cause. ``code`` is the errno's name (``ECONNREFUSED``, ``ENOENT``); ``exited``: the
    state file records the daemon and its process is gone (what ``emu status`` calls
    dead)."""

    def __init__(self, message: str, code: str = "ECONNREFUSED", exited: bool = False
                 ) -> None:
        OSError.__init__(self, message)
        self.code = code
        self.exited = exited


def sock_path(cluster: str, host: str, run_dir: str = RUN_DIR) -> str:
    """Where the daemon of ``host`` in ``cluster`` listens."""
    for part in (cluster, host):
        if not part or "/" in part or part.startswith("."):
            raise ValueError(f"bad cluster/host name {part!r}")
    return os.path.join(run_dir, cluster, f"{host}.sock")


def daemon_hosts(cluster: str, run_dir: str = RUN_DIR) -> list[str]:
    """The hosts of ``cluster`` whose daemons listen (their sockets), sorted."""
    try:
        return sorted(f[:-5] for f in os.listdir(os.path.join(run_dir, cluster))
                      if f.endswith(".sock"))
    except FileNotFoundError:
        return []


def daemon_of(path: str, run_dir: str | None = None) -> tuple[str, str] | None:
    """(cluster, host) of a control socket at its usual place (:func:`sock_path`), else
    None (``--sock``, ``$EMU_NIC_SOCK`` elsewhere: no daemon of a cluster's is meant)."""
    run_dir = RUN_DIR if run_dir is None else run_dir
    d, name = os.path.split(os.path.abspath(path))
    top, cluster = os.path.split(d)
    if top != os.path.abspath(run_dir) or not name.endswith(".sock") or name == ".sock":
        return None
    return cluster, name[:-5]


def not_running(cluster: str, host: str, why: str = "", code: str = "ECONNREFUSED"
                ) -> DaemonDown:
    """What to tell a person whose connection to ``host``'s daemon failed (``why``, the
    socket's error) or who is about to need it: the daemon is not running — with its pid
    and "exited" where the cluster's state file records the daemon and the process is gone
    (what ``emu status`` calls dead) — and where to look. Read only on this error path:
    the state module brings the fabric package along, which the client API need not load
    otherwise."""
    from emu.fabric import state

    who = f"nicd {host} of cluster {cluster}"
    st = state.load(cluster)
    if st is None:
        return DaemonDown(f"{who} is not running: no cluster {cluster!r} is up", code)
    rec = state.recorded(st, f"nicd {host}")
    see = f"; see `emu status {cluster}`"
    if rec is None:
        return DaemonDown(f"{who} is not running{f' ({why})' if why else ''}{see}", code)
    if rec["alive"]:  # recorded and running, yet not answering: say what the socket said
        return DaemonDown(f"{who} (pid {rec['pid']}) runs but takes no connections"
                          f"{f' ({why})' if why else ''}{see}", code)
    return DaemonDown(f"{who} is not running (pid {rec['pid']} exited){see}", code, True)


def died(path: str) -> str | None:
    """Why a connection to the daemon at ``path`` ended, when it ended because the daemon
    died (the cluster's state file records it and the process is gone — what
    :func:`not_running` says of it); None while it runs, or for a socket that is no
    cluster daemon's. Why: a client whose connection drops mid-run otherwise said only
    "daemon closed the connection", as if the daemon had hung up on purpose. Read only
    when a connection has ended."""
    where = daemon_of(path)
    if where is None:
        return None
    down = not_running(*where)
    return str(down) if down.exited else None


def connect(path: str, timeout: float | None = None) -> socket.socket:
    """A connected stream socket to the daemon at ``path``; a refused or missing socket
    raises :class:`DaemonDown` (:func:`not_running`, when ``path`` is a cluster daemon's,
    else naming ``path``). The one way the client API and one-shot callers (``emu nicd
    stats``, overload snapshots) reach a daemon, so all of them say the same."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if timeout is not None:
            s.settimeout(timeout)
        s.connect(path)
    except (ConnectionRefusedError, FileNotFoundError) as e:
        s.close()
        code = "ENOENT" if isinstance(e, FileNotFoundError) else "ECONNREFUSED"
        why = "no control socket" if code == "ENOENT" else "its control socket refuses"
        where = daemon_of(path)
        if where is None:
            raise DaemonDown(f"no NIC daemon listens at {path} ({e.strerror or e})",
                             code) from None
        raise not_running(*where, why=why, code=code) from None
    except BaseException:
        s.close()
        raise
    return s


def encode(msg: dict[str, Any]) -> bytes:
    """One message as a line (compact separators: the daemon encodes many of these)."""
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    try:
        msg = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"bad JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("a message must be a JSON object")
    return msg


def __getattr__(name: str) -> Any:
    """``LineBuffer``: the control stream's one framing, JSON lines and compact records
    (:class:`emu.nic.compact.RecordBuffer`; imported late, compact imports this module)."""
    if name == "LineBuffer":
        from emu.nic.compact import RecordBuffer

        return RecordBuffer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def find_sock(run_dir: str = RUN_DIR) -> str:
    """The daemon socket of the host namespace this thread is in.

    ``emu exec h1 -- tool`` runs ``tool`` in namespace ``<cluster>-h1``; the
    daemon for that host listens at ``<run_dir>/<cluster>/h1.sock``. We match
    the namespace inode of ``/run/netns/<cluster>-<host>`` against our own, so
    no name guessing is involved. ``$EMU_NIC_SOCK`` overrides.
    """
    env = os.environ.get("EMU_NIC_SOCK")
    if env:
        return env
    me = os.stat("/proc/thread-self/ns/net").st_ino
    found = []
    try:
        clusters = sorted(os.listdir(run_dir))
    except FileNotFoundError:
        clusters = []
    for c in clusters:
        try:
            socks = sorted(os.listdir(os.path.join(run_dir, c)))
        except (NotADirectoryError, PermissionError, FileNotFoundError):
            continue
        for s in socks:
            if not s.endswith(".sock"):
                continue
            try:
                ino = os.stat(f"/run/netns/{c}-{s[:-5]}").st_ino
            except OSError:
                continue
            if ino == me:
                found.append(os.path.join(run_dir, c, s))
    if len(found) == 1:
        return found[0]
    if not found:
        raise FileNotFoundError("no NIC daemon serves this namespace (run inside a host: "
                                "`emu exec h1 -- …`, or give cluster/host or $EMU_NIC_SOCK)")
    raise FileNotFoundError(f"several daemons match this namespace: {found}")


def call_once(path: str, op: str, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
    """One request without a reader thread (``emu nicd stats``, overload snapshots)."""
    with connect(path, timeout) as s:
        s.sendall(encode({"id": 1, "op": op, **args}))
        from emu.nic.compact import RecordBuffer

        lb = RecordBuffer()
        while True:
            data = s.recv(1 << 16)
            if not data:
                raise NicError("ECONNRESET", f"{path}: connection closed")
            for line in lb.feed(data):
                msg = decode(line)
                if msg.get("event") == "refused":
                    raise NicError("EACCES", str(msg.get("error")))
                if msg.get("id") == 1:
                    if not msg.get("ok"):
                        raise NicError(str(msg.get("code")), str(msg.get("error")))
                    return msg["result"]

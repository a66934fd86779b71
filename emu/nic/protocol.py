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
its users: perftest-style tools) load fast.
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
#: UDP destination port of each transport (RoCEv2 4791, UET 4793); the stub engine
#: shares RoCE's by default so captures of plumbing tests look like RoCE ports
DEFAULT_PORTS: dict[str, int] = {"roce": 4791, "uet": 4793, "mrc": 4793, "loopback": 4791}

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
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
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

# SPDX-License-Identifier: GPL-2.0-only
"""Out-of-band exchange of connection data over TCP, as perftest does it.

RDMA peers must learn each other's QPN, PSN, GID/address, R_Key, VA and
length before the first packet; real deployments use a side channel (perftest:
a TCP socket on port 18515; NCCL: its bootstrap). The server listens, the
client connects (retrying until the server is up, so both can be started in
any order), each side sends one JSON line and reads the other's. Both run in
the host namespaces, over the same fabric the RDMA traffic uses.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

DEFAULT_PORT = 18515  # perftest's default
VERSION = 1


def conn_info(qp: Any, mr: Any = None, **extra: Any) -> dict[str, Any]:
    """``{qpn, psn, gid, address, port, transport[, rkey, va, len]}`` of a QP (and MR)."""
    info = dict(qp.local_info())
    if mr is not None:
        info.update(rkey=mr.rkey, va=mr.va, len=mr.length)
    info.update(extra)
    return info


def _send(sock: socket.socket, obj: dict[str, Any]) -> None:
    sock.sendall(json.dumps({"version": VERSION, **obj}).encode() + b"\n")


def _recv(sock: socket.socket, limit: int = 1 << 20) -> dict[str, Any]:
    buf = b""
    while not buf.endswith(b"\n"):
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("peer closed before sending its connection data")
        buf += data
        if len(buf) > limit:
            raise ValueError("connection data too long")
    obj = json.loads(buf)
    if not isinstance(obj, dict) or obj.get("version") != VERSION:
        raise ValueError(f"unexpected connection data: {buf[:200]!r}")
    return obj


def accept_one(port: int, timeout: float, bind: str = "::", ready: Any = None
               ) -> socket.socket:
    """The first TCP client on ``port`` (IPv4 and IPv6 when ``bind`` is ``::``), or
    TimeoutError after ``timeout`` s; ``ready()`` runs once the socket listens.
    Shared by the connection exchange and ``emu perf``'s control channel."""
    fam = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as ls:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if fam == socket.AF_INET6:
            ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        ls.bind((bind, port))
        ls.listen(1)
        ls.settimeout(timeout)
        if ready is not None:
            ready()
        conn, _ = ls.accept()
    return conn


def connect_retrying(server: str, port: int, timeout: float, attempt: float = 5.0
                     ) -> socket.socket:
    """A TCP connection to ``server``, retried every 50 ms while it is not listening yet
    (each attempt at most ``attempt`` s); the last OSError once ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((server, port), timeout=min(
                attempt, max(0.1, deadline - time.monotonic())))
        except OSError:  # refused, unreachable, timed out: the server may be late
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def serve(local: dict[str, Any], port: int = DEFAULT_PORT, bind: str = "::",
          timeout: float = 60.0, ready: Any = None) -> dict[str, Any]:
    """Wait for one client; return its connection data after sending ours.

    ``bind="::"`` accepts IPv4 and IPv6 (dual stack). ``ready`` (a callable)
    runs once the socket listens — tests and tools use it to start the peer.
    """
    conn = accept_one(port, timeout, bind, ready)
    with conn:
        conn.settimeout(timeout)
        remote = _recv(conn)
        _send(conn, local)
    return remote


def connect(server: str, local: dict[str, Any], port: int = DEFAULT_PORT,
            timeout: float = 60.0) -> dict[str, Any]:
    """Connect to ``server`` (retrying while it is not listening yet); swap connection data."""
    deadline = time.monotonic() + timeout
    sock = connect_retrying(server, port, timeout)
    with sock:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        _send(sock, local)
        return _recv(sock)


def exchange(local: dict[str, Any], server: str | None = None, port: int = DEFAULT_PORT,
             timeout: float = 60.0) -> dict[str, Any]:
    """perftest's rule: no server address → be the server; else connect to it."""
    if server is None:
        return serve(local, port, timeout=timeout)
    return connect(server, local, port, timeout)

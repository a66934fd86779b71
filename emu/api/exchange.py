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

import errno
import ipaddress
import json
import socket
import time
from typing import Any

DEFAULT_PORT = 18515  # perftest's default
VERSION = 1
#: connect errors that say this host has no way to the address at all — no route (the
#: address is outside every network the host's routes cover), the neighbour never
#: answered, no source address of its family. A server that is late to listen causes
#: none of them (it refuses, or its SYN goes unanswered until it listens), so retrying
#: them only waits out the whole timeout before saying the same thing
NO_WAY = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN,
                    errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT})


class Unreachable(OSError):
    """The server cannot be reached however long we wait: its address is not one and
    names no host, or this host has no route to it. Raised at once, not after the
    timeout; ``str()`` is a sentence for a person."""


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


def _looks_numeric(server: str) -> bool:
    """Meant as an IP address (digits and dots, or a colon), whether or not it is one:
    ``10.0.1.300`` must not go to a name server as a host name."""
    return ":" in server or (bool(server) and all(c.isdigit() or c == "." for c in server))


def _unresolved(server: str, e: socket.gaierror) -> Unreachable:
    why = e.strerror or str(e)
    if _looks_numeric(server):
        return Unreachable(f"{server!r} is not an IPv4 or IPv6 address")
    return Unreachable(f"{server!r} is not an IP address, and no host name resolves to it "
                       f"here ({why})")


def connect_retrying(server: str, port: int, timeout: float, attempt: float = 5.0
                     ) -> socket.socket:
    """A TCP connection to ``server``, retried every 50 ms while it is not listening yet
    (refused, or no answer: each attempt at most ``attempt`` s); the last OSError once
    ``timeout`` s pass. What waiting cannot mend — an address that is not one or does
    not resolve, no route from this host to it (:data:`NO_WAY`) — raises
    :class:`Unreachable` at once."""
    if _looks_numeric(server):
        try:
            ipaddress.ip_address(server.split("%", 1)[0])  # fe80::1%eth0 is an address too
        except ValueError:
            raise Unreachable(f"{server!r} is not an IPv4 or IPv6 address") from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((server, port), timeout=min(
                attempt, max(0.1, deadline - time.monotonic())))
        except socket.gaierror as e:  # a name no resolver here knows: it will not appear
            raise _unresolved(server, e) from None
        except OSError as e:
            if e.errno in NO_WAY:
                raise Unreachable(f"this host has no route to {server} "
                                  f"({e.strerror or e})") from None
            if time.monotonic() >= deadline:  # refused or timed out: the server may be late
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

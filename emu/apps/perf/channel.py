# SPDX-License-Identifier: GPL-2.0-only
"""The side channel: one TCP connection, JSON lines, for the whole run.

perftest exchanges QP data over TCP (port 18515) and uses the same socket to
synchronise ("hand shake") between phases; so do we. Unlike
:func:`emu.api.exchange.exchange` (one line each way), a test needs several
steps: parameters, QP data, one start/stop per message size, results. The
client connects (retrying while the server is not listening yet, so either
side may start first — but not while the address is no address or this host has no
route to it: that fails at once); ``poll`` lets a measurement loop notice a message
(e.g. the peer's "done" or "abort") without blocking.
"""

from __future__ import annotations

import json
import math
import select
import socket
import time
from typing import Any

from emu.api.exchange import Unreachable, accept_one, connect_retrying

VERSION = 1
LIMIT = 1 << 20


def dial(server: str, port: int, timeout: float, error: type[Exception]) -> socket.socket:
    """A TCP connection to a perf server's side channel (emu's or perftest's), retried
    until it listens or ``timeout`` passes; ``error`` at once when waiting cannot help
    (:class:`emu.api.exchange.Unreachable`), or when the time is up."""
    try:
        sock = connect_retrying(server, port, timeout)
    except Unreachable as e:
        raise error(f"cannot reach the server {server} port {port}: {e}") from None
    except OSError as e:
        raise error(f"cannot reach the server {server} port {port} in {timeout:g} s "
                    f"({e.strerror or e})") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class ChannelError(Exception):
    """The peer went away, sent garbage, or did not answer in time."""


class Channel:
    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = timeout
        self._buf = b""
        self.peer = sock.getpeername()[0]

    # -- setup ------------------------------------------------------------------------
    @classmethod
    def listen(cls, port: int, timeout: float, bind: str = "::",
               ready: Any = None) -> Channel:
        """Wait (up to ``timeout``) for one client on ``port`` (IPv4 and IPv6)."""
        try:
            conn = accept_one(port, timeout, bind, ready)
        except TimeoutError:
            raise ChannelError(f"no client connected to port {port} in {timeout:g} s"
                               ) from None
        except OSError as e:  # the port is taken (another server here): a setup error
            raise ChannelError(f"cannot listen on port {port}: {e.strerror or e} (another "
                               "server on this host holds it? -p chooses another)") from None
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(conn, timeout)

    @classmethod
    def connect(cls, server: str, port: int, timeout: float) -> Channel:
        """Connect to ``server``, retrying until it listens or ``timeout`` passes; at once
        a :class:`ChannelError` when waiting cannot help (``exchange.Unreachable``)."""
        sock = dial(server, port, timeout, ChannelError)
        sock.settimeout(None)
        return cls(sock, timeout)

    # -- messages ---------------------------------------------------------------------
    def send(self, op: str, **fields: Any) -> None:
        try:
            self.sock.sendall(json.dumps({"v": VERSION, "op": op, **fields}).encode() + b"\n")
        except OSError as e:
            raise ChannelError(f"side channel to {self.peer}: {e}") from None

    def _line(self) -> dict[str, Any] | None:
        if b"\n" not in self._buf:
            return None
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            raise ChannelError(f"garbage on the side channel: {line[:80]!r}") from None
        if not isinstance(msg, dict) or msg.get("v") != VERSION:
            raise ChannelError(f"peer speaks another side-channel version: {line[:80]!r}")
        return msg

    def _fill(self, timeout: float | None) -> bool:
        """Read what is there (waiting up to ``timeout``); False if nothing came."""
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return False
        try:
            data = self.sock.recv(65536)
        except OSError as e:
            raise ChannelError(f"side channel to {self.peer}: {e}") from None
        if not data:
            raise ChannelError(f"the peer ({self.peer}) closed the side channel")
        self._buf += data
        if len(self._buf) > LIMIT:
            raise ChannelError("side-channel message too long")
        return True

    def poll(self) -> dict[str, Any] | None:
        """A message if one has arrived, else None (never blocks)."""
        msg = self._line()
        while msg is None and self._fill(0):
            msg = self._line()
        return msg

    def recv(self, expect: str | tuple[str, ...] | None = None,
             timeout: float | None = None) -> dict[str, Any]:
        """The next message (waiting up to ``timeout``, default the channel's).

        A peer's ``abort`` raises :class:`PeerAbort`; another op than
        ``expect`` raises :class:`ChannelError`. ``timeout`` may be ``math.inf``."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        msg = self._line()
        while msg is None:
            left = deadline - time.monotonic()
            if left <= 0 or not self._fill(None if left == math.inf else left):
                raise ChannelError(f"the peer ({self.peer}) said nothing for {timeout:g} s")
            msg = self._line()
        return check(msg, expect)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class PeerAbort(Exception):
    """The peer gave up; its message says why and which exit status it chose."""

    def __init__(self, error: str, code: int = 1) -> None:
        super().__init__(error)
        self.code = code


def check(msg: dict[str, Any], expect: str | tuple[str, ...] | None) -> dict[str, Any]:
    if msg.get("op") == "abort":
        raise PeerAbort(str(msg.get("error", "the peer aborted")), int(msg.get("code", 1)))
    if expect is not None:
        ops = (expect,) if isinstance(expect, str) else expect
        if msg.get("op") not in ops:
            raise ChannelError(f"expected {'/'.join(ops)} from the peer, got {msg.get('op')!r}")
    return msg

# SPDX-License-Identifier: GPL-2.0-only
"""The interop endpoint contract in code: environment, exit codes, the JSON-lines
exchange session and the files each test case uses (``docs/interop.md``).

Why a module of its own: the runner (which sets the environment and lays out
the files), the test cases (which check them) and emu's own endpoint (which
obeys them) must agree on every name; writing them once keeps the document,
the runner and the endpoint from drifting apart. Nothing here imports emu's
transports, so an endpoint built on it still talks to the network only
through the documented exchange.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

VERSION = 1
EXCHANGE_PORT = 18515

EXIT_OK, EXIT_FAILED, EXIT_UNSUPPORTED = 0, 1, 127

TRANSPORTS = ("roce", "uet", "mrc")
ENV_KEYS = ("ROLE", "TRANSPORT", "TESTCASE", "LOCAL", "PEER", "EXCHANGE_PORT", "DATA_DIR",
            "LOGDIR", "SERVER_PARAMS", "CLIENT_PARAMS", "TIMEOUT", "EMU_CLUSTER", "EMU_HOST",
            "PMTU")

KiB, MiB = 1 << 10, 1 << 20
#: bytes moved by each transfer-like case (the client's payload.bin)
TRANSFER_SIZES = {"transfer-1b": 1, "transfer-4k": 4 * KiB, "transfer-1m": MiB,
                  "transfer-64m": 64 * MiB, "loss": MiB, "duplication": MiB, "reordering": MiB,
                  "trimming": MiB}
HANDSHAKE_SIZE = 32
HANDSHAKE_RECV = 64
#: the immediate of MRC's handshake WRITE (any value does; this one is easy to spot in a capture)
HANDSHAKE_IMM = 0x48454C4F
READ_SIZE = MiB
SENDRECV_SIZE, SENDRECV_CHUNK = 256 * KiB, 16 * KiB
MULTICONN_N, MULTICONN_SIZE = 4, 256 * KiB
ATOMIC_INITIAL, ATOMIC_ADD, ATOMIC_COMPARE, ATOMIC_SWAP = 100, 5, 105, 7
BADKEY_SIZE, BADKEY_XOR = 4 * KiB, 0x5A5A
TEARDOWN_SIZE = 4 * KiB

CASES = ("handshake", "transfer-1b", "transfer-4k", "transfer-1m", "transfer-64m", "read",
         "sendrecv", "atomics", "multiconn", "loss", "duplication", "reordering", "trimming",
         "badkey", "teardown")


class ProtocolError(Exception):
    """The peer broke the exchange (unexpected line, closed socket, wrong version)."""


class Session:
    """One TCP exchange session: JSON objects, one per line (contract §3)."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.sock.settimeout(timeout)
        self._buf = b""

    def send(self, obj: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def recv(self, *types: str, limit: int = MiB) -> dict[str, Any]:
        """The next object; ProtocolError unless its ``type`` is one of ``types``."""
        while b"\n" not in self._buf:
            data = self.sock.recv(65536)
            if not data:
                raise ProtocolError(f"peer closed the exchange (waiting for {'/'.join(types)})")
            self._buf += data
            if len(self._buf) > limit:
                raise ProtocolError("exchange line longer than 1 MiB")
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            obj = json.loads(line)
        except ValueError:
            raise ProtocolError(f"exchange line is not JSON: {line[:120]!r}") from None
        if not isinstance(obj, dict) or obj.get("type") not in types:
            raise ProtocolError(f"expected {'/'.join(types)}, got {line[:200]!r}")
        return obj

    def close(self) -> None:
        self.sock.close()


def listen(port: int, timeout: float) -> Session:
    """Server side: accept one client on ``port`` (dual stack)."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as ls:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        ls.bind(("::", port))
        ls.listen(1)
        ls.settimeout(timeout)
        conn, _ = ls.accept()
    return Session(conn, timeout)


def connect(peer: str, port: int, timeout: float) -> Session:
    """Client side: connect to the server, retrying every 50 ms while it is not up."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((peer, port), timeout=2.0)
            return Session(sock, timeout)
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


@dataclass(frozen=True)
class Env:
    """The contract's environment, parsed (contract §1)."""

    role: str
    transport: str
    testcase: str
    local: str
    peer: str
    port: int
    data_dir: str
    log_dir: str
    timeout: float
    params: str

    @classmethod
    def from_environ(cls, env: dict[str, str]) -> Env:
        missing = [k for k in ("ROLE", "TRANSPORT", "TESTCASE", "PEER", "DATA_DIR") if k not in env]
        if missing:
            raise KeyError(f"missing environment variable(s): {', '.join(missing)}")
        role = env["ROLE"]
        if role not in ("server", "client"):
            raise ValueError(f"ROLE must be server or client, got {role!r}")
        return cls(role, env["TRANSPORT"], env["TESTCASE"], env.get("LOCAL", ""), env["PEER"],
                   int(env.get("EXCHANGE_PORT") or EXCHANGE_PORT), env["DATA_DIR"],
                   env.get("LOGDIR", env["DATA_DIR"]), float(env.get("TIMEOUT") or 60),
                   env.get("SERVER_PARAMS" if role == "server" else "CLIENT_PARAMS", ""))


def write_received(env: Env, name: str, data: bytes | memoryview) -> None:
    """Write ``data`` as ``$DATA_DIR/received/NAME``, where the runner looks (§5)."""
    d = os.path.join(env.data_dir, "received")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def server_files(case: str, n_conns: int) -> list[tuple[str, int, int | None]]:
    """What a server writes to ``received/`` once a case's client is done (§5): (file
    name, connection index, bytes from the start of its region or None for all of it).
    One rule for every endpoint of ours (emu's, the linux-rxe guest's)."""
    if case == "atomics":
        return [("final.bin", 0, 8)]
    if case == "badkey":
        return [("target.bin", 0, None)]
    if case == "multiconn":
        return [(f"payload-{i}.bin", i, None) for i in range(n_conns)]
    if case in TRANSFER_SIZES or case in ("sendrecv", "teardown"):
        return [("payload.bin", 0, None)]
    return []

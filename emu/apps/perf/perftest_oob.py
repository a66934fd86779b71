# SPDX-License-Identifier: GPL-2.0-only
"""perftest's side channel as a session: who writes first, what comes in which order.

Why a session object: perftest's exchanges are fixed-size and unframed, so
the only protection against a peer out of step is doing exactly its steps
in its order — a missing step shows up as the wrong bytes in a later one.
Each step here checks what it reads (:mod:`.perftest_wire` decodes
strictly) and says which step failed. The bytes are in
:mod:`.perftest_wire`; the steps (``write_bw.c`` and the other test mains):

1. TCP connect to port 18515 (the server accepts one client);
2. versions (``exchange_versions``), refused below 5.70;
3. cycle buffer and cache line (``check_sys_data``), the larger wins;
4. MTU (``check_mtu``), the smaller wins;
5. [6.28+ only, skipped: emu says 6.27] the parameter negotiation;
6. one key message per QP (``ctx_hand_shake``), the QPs connected, the key
   messages again (perftest prints the peer's from this round), one more
   hand shake "after RTR"; send_bw puts that hand shake before the second
   round;
7. the test; WRITE/READ BW: one hand shake when the client has finished and
   the client's BW report (``xchg_bw_reports``); SEND BW: a hand shake before
   each size, after the server posted its receives;
8. a final hand shake (``ctx_close_connection``), then both close.
"""

from __future__ import annotations

import math
import select
import socket
import time
from typing import Any

from emu.api.exchange import accept_one
from emu.apps.perf import perftest_wire as W
from emu.apps.perf.channel import dial


class OobError(Exception):
    """The side channel failed or the peer is out of step; ``str()`` is one line."""


class Session:
    """One perftest side channel, as client (writes first) or server (reads first)."""

    def __init__(self, sock: socket.socket, client: bool, timeout: float) -> None:
        self.sock = sock
        self.client = client
        self.timeout = timeout
        self.peer = sock.getpeername()[0]
        self.peer_version = ""
        self.peer_number = 0.0
        self.peer_is_emu = False
        self.peer_key0: bytes | None = None  # the peer's QP 0 message: every hand shake's

    @classmethod
    def connect(cls, server: str, port: int, timeout: float) -> Session:
        return cls(dial(server, port, timeout, OobError), True, timeout)

    @classmethod
    def listen(cls, port: int, timeout: float, ready: Any = None) -> Session:
        try:
            sock = accept_one(port, timeout, ready=ready)
        except TimeoutError:
            raise OobError(f"no client connected to port {port} in {timeout:g} s") from None
        except OSError as e:
            raise OobError(f"cannot listen on port {port}: {e.strerror or e} (another server "
                           "on this host holds it? -p chooses another)") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock, False, timeout)

    # -- raw exchanges -------------------------------------------------------------------
    def _read(self, n: int, what: str, timeout: float | None) -> bytes:
        deadline = None if timeout is None or timeout == math.inf else time.monotonic() + timeout
        buf = b""
        while len(buf) < n:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise OobError(f"{what}: the peer ({self.peer}) sent {len(buf)} of {n} bytes "
                               f"in {timeout:g} s")
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                continue
            try:
                data = self.sock.recv(n - len(buf))
            except OSError as e:
                raise OobError(f"{what}: side channel to {self.peer}: {e.strerror or e}"
                               ) from None
            if not data:
                raise OobError(f"{what}: the peer ({self.peer}) closed the side channel "
                               f"after {len(buf)} of {n} bytes")
            buf += data
        return buf

    def _write(self, data: bytes, what: str) -> None:
        try:
            self.sock.sendall(data)  # one small write: perftest read()s it in one call
        except OSError as e:
            raise OobError(f"{what}: side channel to {self.peer}: {e.strerror or e}") from None

    def xchg(self, mine: bytes, size: int, what: str, timeout: float | None = None
             ) -> bytes:
        """``ctx_xchg_data``: the client writes then reads, the server reads then writes."""
        t = self.timeout if timeout is None else timeout
        if self.client:
            self._write(mine, what)
            return self._read(size, what, t)
        theirs = self._read(size, what, t)
        self._write(mine, what)
        return theirs

    # -- the steps -----------------------------------------------------------------------
    def versions(self) -> None:
        """Exchange versions; :class:`OobError` below 5.70, as perftest exits there."""
        try:
            raw = self.xchg(W.encode_version(), W.MAX_VERSION, "version exchange")
        except OobError as e:
            raise OobError(f"{e} (is the peer perftest, or emu perf with --oob perftest?)"
                           ) from None
        try:
            self.peer_version, self.peer_number, self.peer_is_emu = W.decode_version(raw)
        except W.WireError as e:
            raise OobError(f"version exchange: {e}") from None
        if self.peer_number < W.MIN_VERSION:
            raise OobError(f"the peer's perftest is version {self.peer_version}: perftest "
                           f"(and emu) work with {W.MIN_VERSION:.2f} or later")

    def sys_data(self) -> tuple[int, int]:
        """``check_sys_data``: (cycle buffer, cache line), the larger of both sides'."""
        cycle, line = W.CYCLE_BUFFER, W.CACHE_LINE
        if self.peer_number < W.SYS_DATA_FROM:
            return cycle, line
        try:
            rc = W.decode_int(self.xchg(W.encode_int(cycle), 4, "page size exchange"),
                              "page size")
            rl = W.decode_int(self.xchg(W.encode_int(line), 4, "cache line exchange"),
                              "cache line size")
        except W.WireError as e:
            raise OobError(str(e)) from None
        if rc <= 0 or rl <= 0 or rc > 1 << 30 or rl > 1 << 16:
            raise OobError(f"the peer's page size {rc} / cache line {rl} make no sense "
                           f"(out of step?)")
        return max(cycle, rc), max(line, rl)

    def mtu(self, mine: int) -> int:
        """``check_mtu``: the path MTU in bytes, the smaller of ours and a valid peer's."""
        if self.peer_number < W.MTU_FROM:
            return mine
        size = 2 if self.peer_number >= W.MTU_2_BYTES_FROM else 4
        raw = self.xchg(W.encode_mtu(mine).ljust(size, b"\0"), size, "MTU exchange")
        try:
            theirs = W.decode_mtu(raw[:2])
        except W.WireError as e:
            raise OobError(str(e)) from None
        return min(mine, theirs) if theirs is not None else mine

    def keys(self, mine: list[W.KeyMsg], what: str) -> list[W.KeyMsg]:
        """One key message per QP each way; the peer's, decoded."""
        out = []
        for i, k in enumerate(mine):
            try:
                raw = self.xchg(W.encode_key(k), W.KEY_MSG_SIZE_GID, f"{what}, QP {i}")
            except OobError as e:
                raise OobError(f"{e} (perftest stops when the two sides' QPs differ: "
                               f"do both run the same test with the same -q?)") from None
            try:
                out.append(W.decode_key(raw))
            except W.WireError as e:
                raise OobError(f"{what}, QP {i}: {e} (is the peer perftest, or emu perf "
                               f"without --oob perftest?)") from None
            if i == 0 and self.peer_key0 is None:
                self.peer_key0 = raw
        return out

    def hand_shake(self, mine0: W.KeyMsg, what: str, timeout: float | None = None) -> None:
        """``ctx_hand_shake`` used as a barrier: QP 0's message again each way. The peer's
        must be its QP 0 message as before: anything else means the two sides are not at
        the same step (e.g. a different number of QPs)."""
        raw = self.xchg(W.encode_key(mine0), W.KEY_MSG_SIZE_GID, what, timeout)
        if self.peer_key0 is not None and raw != self.peer_key0:
            try:
                got = W.decode_key(raw)
                why = f"QPN {got.qpn:#x} where QP 0 is {W.decode_key(self.peer_key0).qpn:#x}"
            except W.WireError as e:
                why = str(e)
            raise OobError(f"{what}: the peer is out of step ({why}): do both sides run the "
                           f"same test with the same -q, -s, -a and -n/-D?")

    def reports(self, mine: W.BwReport) -> W.BwReport:
        """``xchg_bw_reports``: five 8-byte fields, one exchange each (peer >= 5.33)."""
        if self.peer_number < W.ITERS_64_FROM:
            raise OobError(f"the peer's perftest {self.peer_version} sends 4-byte iteration "
                           "counts: emu speaks 5.33 and later")
        got = [self.xchg(f, n, "BW report exchange", None)
               for f, n in zip(W.encode_report(mine), W.REPORT_SIZES, strict=True)]
        return W.decode_report(got)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

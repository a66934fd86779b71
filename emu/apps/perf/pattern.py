# SPDX-License-Identifier: GPL-2.0-only
"""Data patterns: what a sender puts in each message, and the receiver's check.

The bytes of message ``i`` of stream ``s`` at offset ``off`` are
``tape[shift(s, i) + off]``, where ``tape`` is a seeded pseudo-random byte
string both sides generate identically and ``shift`` moves by an odd stride
modulo a prime: every iteration of a stream has its own pattern, misplaced
segments and stale data show up, and filling or checking a message is one
``memcpy``/``memcmp``-speed operation (no per-byte Python).

Streams: ``2 × qp`` for what the client sends on QP ``qp`` (WRITE and SEND
data, the client's pings), ``2 × qp + 1`` for what the server provides (its
READ source, its write-lat pongs).

``$EMU_PERF_TEST_CORRUPT=1`` (tests only) flips one byte of the first
message a process checks, just before the check: the end-to-end way to see
that a corrupted byte fails the run.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

PERIOD = 65521  # prime: the number of distinct shifts per stream
STRIDE = 40503
SEED = 0x5EED_E4E
CORRUPT_ENV = "EMU_PERF_TEST_CORRUPT"


class DataError(Exception):
    """Received data differs from what was sent (exit status 1)."""


@dataclass(frozen=True)
class Mismatch:
    offset: int
    expected: int
    got: int


def client_stream(qp: int) -> int:
    return 2 * qp


def server_stream(qp: int) -> int:
    return 2 * qp + 1


class Pattern:
    """The shared tape, long enough for messages up to ``max_size`` bytes."""

    def __init__(self, max_size: int, seed: int = SEED) -> None:
        self.max_size = max_size
        self.tape = random.Random(seed).randbytes(PERIOD + max_size)
        self._mv = memoryview(self.tape)
        self._corrupt_pending = os.environ.get(CORRUPT_ENV, "") not in ("", "0")

    @staticmethod
    def shift(stream: int, i: int) -> int:
        return (stream * 7919 + i * STRIDE + 17) % PERIOD

    def data(self, stream: int, i: int, size: int) -> memoryview:
        """The ``size`` bytes message ``i`` of ``stream`` carries."""
        if size > self.max_size:
            raise ValueError(f"message of {size} bytes exceeds the pattern's {self.max_size}")
        o = self.shift(stream, i)
        return self._mv[o:o + size]

    def fill(self, dst: memoryview, stream: int, i: int) -> None:
        dst[:] = self.data(stream, i, len(dst))

    def mismatch(self, got: memoryview, stream: int, i: int) -> Mismatch | None:
        """None when ``got`` holds message ``i`` of ``stream``, else the first difference."""
        if self._corrupt_pending and len(got):
            self._corrupt_pending = False
            got[len(got) // 2] ^= 0xFF
        want = self.data(stream, i, len(got))
        if got.tobytes() == want.tobytes():
            return None
        return first_difference(got, want)

    def check(self, got: memoryview, stream: int, i: int, what: str) -> None:
        """Raise :class:`DataError` naming ``what`` (e.g. "QP 0 iteration 7") on a mismatch."""
        m = self.mismatch(got, stream, i)
        if m is not None:
            raise DataError(f"data verification failed: {what}, {len(got)} bytes: byte "
                            f"{m.offset} is 0x{m.got:02x}, expected 0x{m.expected:02x}")


    def check_at(self, got: memoryview, stream: int, offset: int, what: str) -> None:
        """:meth:`check` against bytes ``offset`` on of message 0 of ``stream`` (a region
        filled once, read in pieces: perftest's layout)."""
        if self._corrupt_pending and len(got):
            self._corrupt_pending = False
            got[len(got) // 2] ^= 0xFF
        want = self.data(stream, 0, offset + len(got))[offset:]
        if got.tobytes() != want.tobytes():
            m = first_difference(got, want)
            raise DataError(f"data verification failed: {what}, {len(got)} bytes: byte "
                            f"{m.offset} is 0x{m.got:02x}, expected 0x{m.expected:02x}")


def first_difference(got: memoryview, want: memoryview, chunk: int = 4096) -> Mismatch:
    """The first differing byte of two equally long buffers that are known to differ."""
    n = min(len(got), len(want))
    for start in range(0, n, chunk):
        g, w = got[start:start + chunk].tobytes(), want[start:start + chunk].tobytes()
        if g != w:
            k = next(k for k in range(len(g)) if g[k] != w[k])
            return Mismatch(start + k, w[k], g[k])
    return Mismatch(n, 0, 0)  # lengths differ

# SPDX-License-Identifier: GPL-2.0-only
"""CRC-32 (the Ethernet/zlib polynomial) for the RoCE and MRC ICRC, as fast as we can get it.

Why not plain :func:`zlib.crc32`: Debian's zlib computes it a byte table at a
time, ~1.1 µs per 4 KiB packet — measured at ~15 % of a sending daemon's
CPU. ISA-L's folding CRC (``python-isal``, a declared dependency) uses
carry-less multiply and does the same 4 KiB in ~0.13 µs. Both compute the
identical function (same polynomial, same ``crc32(data, start)`` chaining),
which ``tests/wire/test_icrc.py`` checks; when isal is missing (a source checkout
without it installed) we fall back to zlib and only lose speed.
"""

from __future__ import annotations

from collections.abc import Callable

crc32: Callable[..., int]
try:
    from isal.isal_zlib import crc32  # type: ignore[no-redef]

    IMPLEMENTATION = "isal"
except ImportError:  # pragma: no cover - depends on the environment
    from zlib import crc32  # type: ignore[no-redef]

    IMPLEMENTATION = "zlib"

__all__ = ["crc32", "IMPLEMENTATION"]

# SPDX-License-Identifier: GPL-2.0-only
"""The one exception type every wire decoder raises on bad input.

Decoders in :mod:`emu.wire.codec` never let ``IndexError``, ``struct.error`` or
``ValueError`` escape: a daemon fed garbage must be able to count a drop with a
single ``except DecodeError`` and go on serving, and a user reading a capture
must see *which* header was bad and *where*.
"""

from __future__ import annotations


class DecodeError(ValueError):
    """Bytes that do not decode as the header they were meant to be.

    ``header`` names the header (``"BTH"``, ``"UET PDS ACK_CC"`` …), ``offset``
    is the byte offset of that header in the buffer handed to the decoder, and
    ``reason`` says what is wrong. ``str(err)`` reads
    ``"BTH at offset 0: truncated: need 12 bytes, have 5"``.
    """

    def __init__(self, header: str, offset: int, reason: str) -> None:
        self.header = header
        self.offset = offset
        self.reason = reason
        super().__init__(f"{header} at offset {offset}: {reason}")


def need(header: str, buf: bytes | bytearray | memoryview, offset: int, size: int) -> None:
    """Raise :class:`DecodeError` unless ``buf`` holds ``size`` bytes at ``offset``."""
    have = len(buf) - offset
    if have < size:
        raise DecodeError(header, offset, f"truncated: need {size} bytes, have {max(have, 0)}")


class FieldRangeError(ValueError):
    """A header field given a value that does not fit its width on the wire.

    Raised when a codec header is constructed, so an out-of-range PSN or QPN
    can never be silently masked into a neighbouring bit field.
    """

    def __init__(self, header: str, field: str, value: object, bits: int) -> None:
        self.header = header
        self.field = field
        self.value = value
        self.bits = bits
        super().__init__(f"{header}.{field} = {value!r} does not fit in {bits} bits")

# SPDX-License-Identifier: GPL-2.0-only
"""struct codecs for the hot path: encode/decode every header the daemons send.

No scapy here (it is 500–1400× slower, ``perf-notes.md``). Every header class
mirrors the scapy layer of the same name in :mod:`emu.wire` field for field —
same names, same order, same widths — and the test suite holds the two
against each other with hypothesis in both directions.
"""

from emu.wire.errors import DecodeError, FieldRangeError

__all__ = ["DecodeError", "FieldRangeError"]

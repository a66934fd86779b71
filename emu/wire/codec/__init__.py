# SPDX-License-Identifier: GPL-2.0-only
"""struct codecs for the hot path: encode/decode every header the daemons send.

No scapy here (it is 500–1400× slower, ``perf-notes.md``). Every header class
mirrors the scapy layer of the same name in :mod:`emu.wire` field for field —
same names, same order, same widths — and the test suite holds the two
against each other with hypothesis in both directions.
"""

# MRC shares RoCEv2's BTH and decode_packet: importing its codec registers the
# MRC opcodes with emu.wire.codec.roce.register_chain, so importing any codec
# module (which runs this package first) is enough for decode_packet to know MRC.
# No cycle: codec.mrc imports only codec._base, codec.roce and emu.wire.errors.
from emu.wire.codec import mrc as _mrc  # noqa: F401  (registration side effect)
from emu.wire.errors import DecodeError, FieldRangeError

__all__ = ["DecodeError", "FieldRangeError"]

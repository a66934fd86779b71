# SPDX-License-Identifier: GPL-2.0-only
"""Wire formats of RoCEv2, UET and MRC.

scapy layers (the reference): :mod:`emu.wire.roce`, :mod:`emu.wire.uet`,
:mod:`emu.wire.mrc`. struct codecs for the hot path: :mod:`emu.wire.codec`.
Importing this package loads no scapy, so daemons can use the codecs alone.
"""

from emu.wire.errors import DecodeError, FieldRangeError

__all__ = ["DecodeError", "FieldRangeError"]

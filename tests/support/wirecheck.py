# SPDX-License-Identifier: GPL-2.0-only
"""Shared checks that a struct codec header and its scapy layer agree.

Widths, order and signedness come from the scapy layer's ``fields_desc`` (the
reference), so a codec that drifts from its scapy twin in any field fails.
"""

from __future__ import annotations

from hypothesis import strategies as st
from scapy.fields import BitField, FCSField, Field
from scapy.packet import Packet

from emu.wire.codec._base import Header


def scapy_fields(cls: type[Packet]) -> list[tuple[str, int, bool]]:
    """(name, bits, signed) for every wire field of a scapy layer, trailer fields excluded."""
    out = []
    for f in cls.fields_desc:
        if isinstance(f, FCSField):
            continue
        inner = getattr(f, "fld", f)
        if isinstance(inner, BitField):
            out.append((inner.name, inner.size, False))
        elif isinstance(inner, Field) and inner.fmt[-1] in "BbHhIiQq":
            out.append((inner.name, inner.sz * 8, inner.fmt[-1].islower()))
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: not an integer field")
    return out


def trailer_size(cls: type[Packet]) -> int:
    return sum(f.fld.sz for f in cls.fields_desc if isinstance(f, FCSField))


def field_values(cls: type[Packet]) -> st.SearchStrategy[dict[str, int]]:
    """Random values, full range, for every field of a scapy layer."""
    parts = {}
    for name, bits, signed in scapy_fields(cls):
        if signed:
            parts[name] = st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        else:
            parts[name] = st.integers(0, (1 << bits) - 1)
    return st.fixed_dictionaries(parts)


def check_pair(scapy_cls: type[Packet], codec_cls: type[Header], values: dict[str, int]) -> None:
    """Both directions: scapy → bytes → codec, and codec → bytes → scapy, same fields."""
    names = [n for n, _, _ in scapy_fields(scapy_cls)]
    assert list(codec_cls.FIELDS) == names, f"{codec_cls.__name__} fields differ from scapy"
    assert codec_cls.SIZE * 8 == sum(b for _, b, _ in scapy_fields(scapy_cls))
    trailer = trailer_size(scapy_cls)

    wire = bytes(scapy_cls(**values))
    wire = wire[:len(wire) - trailer] if trailer else wire
    assert len(wire) == codec_cls.SIZE
    decoded = codec_cls.decode(wire)
    assert decoded.values() == values

    encoded = codec_cls(**values).encode()
    assert encoded == wire
    parsed = scapy_cls(encoded + b"\0" * trailer)
    assert {n: parsed.getfieldval(n) for n in names} == values

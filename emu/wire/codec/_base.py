# SPDX-License-Identifier: GPL-2.0-only
"""What every codec header shares: range checks, ``encode``, field tuples.

A header is a ``@dataclass(slots=True)`` subclass of :class:`Header` that
declares ``NAME`` (for messages), ``SIZE`` (bytes on the wire) and ``WIDTHS``
(bits per field, in field order) and implements two methods by hand with a
precompiled :class:`struct.Struct`:

* ``pack_into(buf, offset) -> int`` writes the header and returns the offset
  after it (the daemons build packets in one preallocated buffer);
* ``decode(buf, offset=0)`` (classmethod) reads it, raising
  :class:`~emu.wire.errors.DecodeError` — never ``struct.error`` — when the
  buffer is short.

Hand-written bodies rather than a generic interpreter: the generic loop costs
several times the ``struct`` call it wraps.
"""

from __future__ import annotations

from typing import ClassVar

from emu.wire.errors import FieldRangeError


class Header:
    """Base of every codec header (see the module docstring)."""

    __slots__ = ()
    NAME: ClassVar[str] = "?"
    SIZE: ClassVar[int] = 0
    #: bits per field, in declaration order; negative = signed of that width
    WIDTHS: ClassVar[tuple[int, ...]] = ()
    FIELDS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        ann = [n for n in cls.__dict__.get("__annotations__", {})
               if not n.isupper()]
        if ann:
            cls.FIELDS = tuple(ann)
            cls._trusted = classmethod(_trusted_constructor(cls.FIELDS))  # type: ignore[assignment]
            if len(cls.WIDTHS) == len(cls.FIELDS):  # else the loop below says what is wrong
                cls.__post_init__ = _range_checker(cls.FIELDS, cls.WIDTHS)  # type: ignore[method-assign]

    def __post_init__(self) -> None:
        """Every field in range (a generated, unrolled form of this loop replaces it per
        class: the loop cost ~3 µs per header the engines build, four per UET packet
        and ACK; the checks are the same)."""
        for name, bits in zip(self.FIELDS, self.WIDTHS, strict=True):
            v = getattr(self, name)
            if bits > 0:
                if not (isinstance(v, int) and 0 <= v < (1 << bits)):
                    raise FieldRangeError(self.NAME, name, v, bits)
            elif not (isinstance(v, int) and -(1 << (-bits - 1)) <= v < (1 << (-bits - 1))):
                raise FieldRangeError(self.NAME, name, v, -bits)

    @classmethod
    def _trusted(cls, *values: int) -> Header:
        """Build from values a decoder extracted with masks: in range by construction.

        Skips :meth:`__post_init__`'s range check, which otherwise costs more
        than the ``struct`` call itself on the receive path. Generated per
        class (see :func:`_trusted_constructor`).
        """
        raise NotImplementedError

    def pack_into(self, buf: bytearray | memoryview, offset: int = 0) -> int:
        raise NotImplementedError

    def encode(self) -> bytes:
        """The header's bytes."""
        buf = bytearray(self.SIZE)
        self.pack_into(buf, 0)
        return bytes(buf)

    def values(self) -> dict[str, int]:
        """Field name -> value, in wire order (for tests, JSON and ``emu dissect``)."""
        return {n: getattr(self, n) for n in self.FIELDS}


def _trusted_constructor(fields: tuple[str, ...]):  # noqa: ANN202
    """Compile ``_trusted(cls, a, b, …)`` assigning each field, no checks, no loop."""
    args = ", ".join(fields)
    body = "".join(f"    o.{n} = {n}\n" for n in fields)
    src = f"def _trusted(cls, {args}):\n    o = _new(cls)\n{body}    return o\n"
    scope: dict[str, object] = {"_new": object.__new__}
    exec(src, scope)  # noqa: S102 - field names come from class annotations, not input
    return scope["_trusted"]


def _range_checker(fields: tuple[str, ...], widths: tuple[int, ...]):  # noqa: ANN202
    """Compile ``__post_init__`` for one header class: each field's range check written
    out (no loop, no ``getattr``), raising what :meth:`Header.__post_init__` raises."""
    body = []
    for n, bits in zip(fields, widths, strict=True):
        lo, hi = (0, 1 << bits) if bits > 0 else (-(1 << (-bits - 1)), 1 << (-bits - 1))
        body.append(f"    v = self.{n}\n"
                    f"    if not (isinstance(v, int) and {lo} <= v < {hi}):\n"
                    f"        raise _err(self.NAME, {n!r}, v, {abs(bits)})\n")
    src = "def __post_init__(self):\n" + "".join(body) + "    return None\n"
    scope: dict[str, object] = {"_err": FieldRangeError}
    exec(src, scope)  # noqa: S102 - field names come from class annotations, not input
    return scope["__post_init__"]

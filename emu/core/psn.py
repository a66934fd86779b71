# SPDX-License-Identifier: GPL-2.0-only
"""Serial-number arithmetic for packet sequence numbers (RFC 1982 style).

RoCEv2 and MRC carry 24-bit PSNs, UET 32-bit ones; all of them wrap, and a
random Start_PSN makes the wrap happen early in real runs, so every comparison
on the per-packet path must be modular. The rules, for a space of ``bits``
bits (``M = 2**bits``, ``H = M // 2``):

* ``add(a, n) = (a + n) mod M``
* ``diff(a, b)`` is the signed distance from ``b`` to ``a`` in ``[-H, H)``:
  the unique ``d`` with ``a == add(b, d)`` in that interval.
* ``lt(a, b)  <=>  diff(a, b) < 0``. RFC 1982 leaves a distance of exactly
  ``H`` undefined; here it reads as "behind" in both directions, so keep
  windows well under ``H`` (IB already caps the RC window at 2**23 for 24-bit).
* ``in_window(p, start, size)`` uses the *unsigned* offset
  ``(p - start) mod M < size`` — unambiguous for any ``size <= M``.

Two ways to avoid wrap bugs in bookkeeping are offered:

1. compare with :meth:`PsnSpace.diff` / ``lt`` everywhere, or
2. :meth:`PsnSpace.unwrap` a wire PSN to an unbounded "extended" integer near a
   reference (as QUIC decodes packet numbers) and keep ordinary integers
   internally; :meth:`PsnSpace.wrap` goes back. :class:`emu.core.sack.RangeSet`
   and :class:`emu.core.reorder.ReorderBuffer` do this, so their state never
   needs rebasing and Python's int compare does the rest.

The two spaces are module constants, :data:`PSN24` and :data:`PSN32`. Methods
are plain ints in, ints out (no validation on the hot path; :meth:`check`
validates values that come from configuration or the wire).
"""

from __future__ import annotations

from typing import Protocol


class RandomBits(Protocol):
    """What the injected RNG must offer (``random.Random`` does)."""

    def getrandbits(self, k: int, /) -> int: ...


class PsnSpace:
    """Modular arithmetic on ``bits``-bit sequence numbers.

    Stateless apart from the width; share the module constants. Methods are
    written so a caller can bind them once (``diff = PSN24.diff``) and pay a
    single function call per use on the packet path.
    """

    __slots__ = ("bits", "modulus", "mask", "half")

    def __init__(self, bits: int) -> None:
        if not 2 <= bits <= 64:
            raise ValueError(f"PSN width must be 2..64 bits, got {bits}")
        self.bits = bits
        self.modulus = 1 << bits
        self.mask = self.modulus - 1
        self.half = self.modulus >> 1

    def __repr__(self) -> str:
        return f"PsnSpace({self.bits})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PsnSpace) and other.bits == self.bits

    def __hash__(self) -> int:
        return hash(("PsnSpace", self.bits))

    # -- validation (not for the hot path) ---------------------------------

    def check(self, psn: int) -> int:
        """Return ``psn`` if it fits the space, else raise ValueError."""
        if not isinstance(psn, int) or not 0 <= psn <= self.mask:
            raise ValueError(f"PSN {psn!r} is not a {self.bits}-bit value")
        return psn

    def random(self, rng: RandomBits) -> int:
        """A random PSN (e.g. a Start_PSN) drawn from the injected ``rng``."""
        return rng.getrandbits(self.bits)

    # -- arithmetic ---------------------------------------------------------

    def add(self, psn: int, n: int) -> int:
        """``psn + n`` modulo the space (``n`` may be negative)."""
        return (psn + n) & self.mask

    def sub(self, psn: int, n: int) -> int:
        """``psn - n`` modulo the space."""
        return (psn - n) & self.mask

    def next(self, psn: int) -> int:
        """The PSN after ``psn``."""
        return (psn + 1) & self.mask

    def diff(self, a: int, b: int) -> int:
        """Signed distance from ``b`` to ``a`` in ``[-half, half)``."""
        return ((a - b + self.half) & self.mask) - self.half

    def offset(self, psn: int, base: int) -> int:
        """Unsigned distance from ``base`` forward to ``psn`` in ``[0, modulus)``."""
        return (psn - base) & self.mask

    def lt(self, a: int, b: int) -> bool:
        """``a`` precedes ``b``."""
        return ((a - b + self.half) & self.mask) < self.half

    def le(self, a: int, b: int) -> bool:
        """``a`` precedes or equals ``b``."""
        return a == b or ((a - b + self.half) & self.mask) < self.half

    def gt(self, a: int, b: int) -> bool:
        """``a`` follows ``b``."""
        return a != b and ((a - b + self.half) & self.mask) >= self.half

    def ge(self, a: int, b: int) -> bool:
        """``a`` follows or equals ``b``."""
        return ((a - b + self.half) & self.mask) >= self.half

    def max(self, a: int, b: int) -> int:
        """The later of ``a`` and ``b``."""
        return a if ((a - b + self.half) & self.mask) >= self.half else b

    def min(self, a: int, b: int) -> int:
        """The earlier of ``a`` and ``b``."""
        return b if ((a - b + self.half) & self.mask) >= self.half else a

    def in_window(self, psn: int, start: int, size: int) -> bool:
        """``psn`` lies in ``[start, start + size)`` going forward from ``start``."""
        return ((psn - start) & self.mask) < size

    def between(self, psn: int, lo: int, hi: int) -> bool:
        """``lo <= psn <= hi`` going forward from ``lo`` (inclusive both ends)."""
        return ((psn - lo) & self.mask) <= ((hi - lo) & self.mask)

    # -- extended (unwrapped) sequence numbers ------------------------------

    def unwrap(self, psn: int, ref: int) -> int:
        """The unbounded integer congruent to ``psn`` nearest the extended ``ref``.

        Result lies in ``[ref - half, ref + half)``. ``ref`` is an extended
        value the caller already holds (its expected PSN, cumulative ack, …).
        """
        return ref + (((psn - ref + self.half) & self.mask) - self.half)

    def wrap(self, ext: int) -> int:
        """The wire PSN of an extended sequence number."""
        return ext & self.mask


#: RoCEv2 BTH and MRC PSNs.
PSN24 = PsnSpace(24)
#: UET PDS PSNs.
PSN32 = PsnSpace(32)


def space(bits: int) -> PsnSpace:
    """The shared space for ``bits`` (24 or 32 reuse the module constants)."""
    if bits == 24:
        return PSN24
    if bits == 32:
        return PSN32
    return PsnSpace(bits)

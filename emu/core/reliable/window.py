# SPDX-License-Identifier: GPL-2.0-only
"""The receiver's PSN window: which PSNs arrived and what a new one is.

Why here and not in a transport: every reliable multipath transport's
receiver asks the same questions of each request — is it the next PSN, one
it already has, one so old it is a stray, one beyond the window, or (for an
ordered stream) one past a hole — and answers every ACK with the same
cumulative PSN plus a 64-bit SACK bitmap (UET ACK_CC, MRC SETH). The
transport decides what to *do* with a verdict (NACK codes, counters, SES
placement); the verdict and the bookkeeping are written once, here.

PSNs are extended integers (:meth:`emu.core.psn.PsnSpace.unwrap`); the
received set is a :class:`~emu.core.sack.RangeSet` whose floor is the first
missing PSN, so "everything below it arrived" needs no storage.
"""

from __future__ import annotations

import enum

from emu.core.psn import PsnSpace
from emu.core.sack import SACK_BITS, RangeSet


class Rx(enum.Enum):
    """A request's PSN as the receiver's window sees it (:meth:`RecvWindow.classify`)."""

    NEW = "new"  # in the window, not received yet: place it
    DUPLICATE = "duplicate"  # in the window, received already: ACK again
    STALE = "stale"  # behind the window: a stray, dropped
    OUT_OF_WINDOW = "out_of_window"  # beyond the window: the transport refuses it
    AHEAD = "ahead"  # an ordered stream only: past the first missing PSN


class RecvWindow:
    """PSNs received at or above a floor (the first missing PSN), within ``size``.

    ``ordered`` windows deliver only the in-order prefix (UET ROD): a PSN past
    the first missing one is :attr:`Rx.AHEAD`, never :attr:`Rx.NEW`.
    """

    __slots__ = ("space", "rcvd", "size", "ordered", "ooo")

    def __init__(self, space: PsnSpace, start: int, size: int, *, ordered: bool = False
                 ) -> None:
        self.space = space
        self.rcvd = RangeSet(space, start)
        self.size = size
        self.ordered = ordered
        self.ooo = 0  # PSNs accepted ahead of the first missing one

    @property
    def first_missing(self) -> int:
        """Extended PSN of the first PSN not received (CACK_PSN + 1)."""
        return self.rcvd.floor_ext

    def ext(self, wire_psn: int) -> int:
        """Unwrap a wire PSN against the first missing PSN."""
        return self.space.unwrap(wire_psn, self.rcvd.floor_ext)

    def classify(self, psn: int) -> Rx:
        """What a request at extended ``psn`` is: the one receive verdict every path
        of a transport (general, fast) acts on. Behind the floor but within the
        window is a duplicate; further behind, stale; ``size`` or more ahead, out of
        the window."""
        fm = self.rcvd.floor_ext
        if psn == fm:
            return Rx.NEW  # the usual case: the next PSN in order
        if not -self.size <= psn - fm < self.size:
            return Rx.STALE if psn < fm else Rx.OUT_OF_WINDOW
        if psn < fm or psn in self.rcvd:
            return Rx.DUPLICATE
        return Rx.AHEAD if self.ordered else Rx.NEW

    def received(self, psn: int) -> bool:
        """Whether extended ``psn`` has arrived (below the floor counts as arrived)."""
        return psn < self.rcvd.floor_ext or psn in self.rcvd

    def accept(self, psn: int, count: int = 1) -> None:
        """Extended ``psn`` (classified :attr:`Rx.NEW`) arrived: record it, advancing the
        floor past everything now contiguous; count it if it came ahead of a hole.
        ``count`` > 1: the run ``psn .. psn + count - 1`` arrived in order at the floor
        with nothing held above it (a receive batch's fast path)."""
        rs = self.rcvd
        if count != 1:
            if psn != rs.floor_ext:
                raise ValueError(f"accept: a run of {count} must start at the floor")
            rs.advance_by(count)
            return
        if psn > rs.floor_ext:
            self.ooo += 1
        rs.add_advance(psn & self.space.mask)

    def sack(self, psn: int, bits: int = SACK_BITS) -> tuple[int, int, int]:
        """``(cack, base, bitmap)`` of an ACK answering extended ``psn``: CACK = first
        missing − 1; the bitmap starts at CACK + 1, or later so it still holds ``psn``
        (bit i = base + i, LSB first; PSNs below the floor set)."""
        cack = self.rcvd.floor_ext - 1
        base = cack + 1 if psn - cack <= bits else psn - (bits - 1)
        return cack, base, self.rcvd.to_bitmap(base & self.space.mask, bits, below_floor=True)

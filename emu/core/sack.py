# SPDX-License-Identifier: GPL-2.0-only
"""SACK bitmaps and wrap-aware PSN range sets.

Both UET (ACK_CC ``sack_bitmap``) and MRC (SETH ``sack_bitmap``) acknowledge
selectively with a 64-bit bitmap over PSNs: bit ``i`` (LSB first) stands for
``base + i``, where ``base = cack_psn + sack_offset`` (``specs/uet.md``,
``specs/mrc.md``). The helpers here build and parse such bitmaps; the wire
codecs carry them as a plain ``u64``.

:class:`RangeSet` is the bookkeeping behind them: which PSNs have arrived (a
receiver) or have been selectively acknowledged (a sender). It stores sorted,
disjoint, half-open ranges of *extended* PSNs (see :meth:`PsnSpace.unwrap`):
wire PSNs are unwrapped against the set's floor on the way in and wrapped on
the way out, so wrap-around never splits a range and no rebasing is needed as
the floor advances. Two parallel ``list[int]`` with :mod:`bisect` keep the
common cases — append at the top, extend the last range, trim the bottom —
O(1)/O(log n) with tiny constants, and the worst case (10^5 alternating holes)
a memmove of a few hundred KiB. Ranges, not PSNs, are stored: 10^5 outstanding
packets with a handful of holes cost a handful of list entries.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

from emu.core.psn import PsnSpace

SACK_BITS = 64


# -- bitmaps -----------------------------------------------------------------


def bitmap_from_psns(space: PsnSpace, base: int, psns: Iterable[int], bits: int = SACK_BITS) -> int:
    """Bitmap with bit ``i`` set for each ``base + i`` in ``psns``; others ignored."""
    bm = 0
    mask = space.mask
    for p in psns:
        i = (p - base) & mask
        if i < bits:
            bm |= 1 << i
    return bm


def bitmap_psns(space: PsnSpace, base: int, bitmap: int, bits: int = SACK_BITS) -> list[int]:
    """The PSNs a bitmap acknowledges, in order (LSB first)."""
    out = []
    mask = space.mask
    for off, n in bitmap_runs(bitmap & ((1 << bits) - 1)):
        out.extend((base + off + k) & mask for k in range(n))
    return out


def bitmap_runs(bitmap: int) -> Iterator[tuple[int, int]]:
    """``(offset, length)`` of each run of set bits, lowest first.

    Works on the integer directly (no per-bit loop): a 64-bit SACK with a few
    holes costs a few iterations.
    """
    if bitmap < 0:
        raise ValueError("bitmap must be non-negative")
    while bitmap:
        low = (bitmap & -bitmap).bit_length() - 1
        shifted = bitmap >> low
        run = (shifted ^ (shifted + 1)).bit_length() - 1
        yield low, run
        bitmap &= ~(((1 << run) - 1) << low)


def bitmap_holes(bitmap: int, bits: int = SACK_BITS) -> Iterator[tuple[int, int]]:
    """``(offset, length)`` of each run of clear bits below ``bits``."""
    full = (1 << bits) - 1
    return bitmap_runs(~bitmap & full)


# -- range set ---------------------------------------------------------------


def merge_interval(starts: list[int], ends: list[int], x: int, y: int) -> int:
    """Merge ``[x, y)`` into the sorted disjoint ranges ``starts[i], ends[i]`` (ends
    exclusive; touching ranges merge) in place; returns how many values were new.

    The one interval-set primitive behind :class:`RangeSet` (PSNs) and
    :class:`emu.core.reorder.PlacementTracker` (message bytes)."""
    i = bisect_left(ends, x)  # first range ending at/after x (touching merges)
    j = bisect_right(starts, y)  # ranges starting at/before y merge too
    if i < j:
        ns = min(x, starts[i])
        ne = max(y, ends[j - 1])
        old = sum(ends[k] - starts[k] for k in range(i, j))
    else:
        ns, ne, old = x, y, 0
    starts[i:j] = [ns]
    ends[i:j] = [ne]
    return (ne - ns) - old


class RangeSet:
    """A set of PSNs at or above a moving floor, stored as disjoint ranges.

    PSNs are wire values of ``space``. Anything that unwraps below the floor
    (behind it by at most half the space) is outside the set: :meth:`add`
    ignores it, :meth:`__contains__` says no. Callers that need "below the
    floor means already done" (duplicate detection) ask :meth:`is_below`.
    Values must stay within half the space ahead of the floor, which any PSN
    window guarantees.
    """

    __slots__ = ("space", "_floor", "_starts", "_ends", "_count")

    def __init__(self, space: PsnSpace, floor: int) -> None:
        self.space = space
        self._floor = space.check(floor)  # extended; starts equal to the wire value
        self._starts: list[int] = []
        self._ends: list[int] = []  # exclusive
        self._count = 0

    # -- conversion ---------------------------------------------------------

    def _ext(self, psn: int) -> int:
        sp = self.space
        f = self._floor
        return f + (((psn - f + sp.half) & sp.mask) - sp.half)

    # -- queries ------------------------------------------------------------

    @property
    def floor(self) -> int:
        """The lowest PSN the set can hold (wire value)."""
        return self._floor & self.space.mask

    @property
    def floor_ext(self) -> int:
        """The floor as an extended PSN (what callers that count without wrapping use)."""
        return self._floor

    @property
    def contiguous(self) -> bool:
        """Nothing is held above the floor (every PSN received so far is below it)."""
        return not self._starts

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    @property
    def num_ranges(self) -> int:
        return len(self._starts)

    def __contains__(self, psn: int) -> bool:
        x = self._ext(psn)
        i = bisect_right(self._starts, x)
        return i > 0 and x < self._ends[i - 1]

    def is_below(self, psn: int) -> bool:
        """``psn`` precedes the floor (already removed / cumulatively done)."""
        return self._ext(psn) < self._floor

    def first_missing(self) -> int:
        """The lowest PSN at or above the floor that is not in the set."""
        s = self._starts
        x = self._ends[0] if s and s[0] == self._floor else self._floor
        return x & self.space.mask

    def lowest(self) -> int | None:
        return self._starts[0] & self.space.mask if self._starts else None

    def highest(self) -> int | None:
        return (self._ends[-1] - 1) & self.space.mask if self._ends else None

    def ranges(self) -> Iterator[tuple[int, int]]:
        """``(first_psn, count)`` of each range, lowest first."""
        m = self.space.mask
        for s, e in zip(self._starts, self._ends, strict=True):
            yield s & m, e - s

    def __iter__(self) -> Iterator[int]:
        m = self.space.mask
        for s, e in zip(self._starts, self._ends, strict=True):
            for x in range(s, e):
                yield x & m

    def holes(self, limit: int) -> Iterator[tuple[int, int]]:
        """``(first_psn, count)`` of each gap in ``[floor, limit)``, lowest first.

        ``limit`` is a wire PSN (e.g. the sender's next PSN); a ``limit`` at or
        below the floor yields nothing.
        """
        lim = self._ext(limit)
        m = self.space.mask
        cur = self._floor
        for s, e in zip(self._starts, self._ends, strict=True):
            if s >= lim:
                break
            if s > cur:
                yield cur & m, s - cur
            cur = e
        if cur < lim:
            yield cur & m, lim - cur

    def missing(self, limit: int, max_count: int | None = None) -> Iterator[int]:
        """Individual missing PSNs in ``[floor, limit)``, oldest first."""
        m = self.space.mask
        left = max_count
        for start, n in self.holes(limit):
            if left is not None:
                n = min(n, left)
                left -= n
            for k in range(n):
                yield (start + k) & m
            if left == 0:
                return

    def to_bitmap(self, base: int, bits: int = SACK_BITS, *, below_floor: bool = False) -> int:
        """Bitmap over ``base .. base+bits-1``: bit ``i`` set iff ``base + i`` is held.

        ``below_floor=True`` counts PSNs behind the floor as held — what a
        receiver means when the floor is its cumulative ack point and the SACK
        base lies at or behind it.
        """
        b = self._ext(base)
        top = b + bits
        bm = 0
        if below_floor and b < self._floor:
            bm = (1 << (min(self._floor, top) - b)) - 1
        starts, ends = self._starts, self._ends
        i = bisect_right(ends, b)
        n = len(starts)
        while i < n and starts[i] < top:
            lo = starts[i] if starts[i] > b else b
            hi = ends[i] if ends[i] < top else top
            bm |= ((1 << (hi - lo)) - 1) << (lo - b)
            i += 1
        return bm

    # -- updates ------------------------------------------------------------

    def add(self, psn: int) -> bool:
        """Insert one PSN; True if it was new (False: held already or below floor)."""
        x = self._ext(psn)
        if x < self._floor:
            return False
        starts, ends = self._starts, self._ends
        if starts and x >= starts[-1]:  # fast path: at or after the last range
            e = ends[-1]
            if x < e:
                return False
            if x == e:
                ends[-1] = e + 1
            else:
                starts.append(x)
                ends.append(x + 1)
            self._count += 1
            return True
        i = bisect_right(starts, x)
        if i and x < ends[i - 1]:
            return False
        left = i > 0 and ends[i - 1] == x
        right = i < len(starts) and starts[i] == x + 1
        if left and right:
            ends[i - 1] = ends[i]
            del starts[i], ends[i]
        elif left:
            ends[i - 1] = x + 1
        elif right:
            starts[i] = x
        else:
            starts.insert(i, x)
            ends.insert(i, x + 1)
        self._count += 1
        return True

    def add_advance(self, psn: int) -> None:
        """:meth:`add` then :meth:`advance`: the receiver's "this PSN arrived" — O(1) in
        the usual case, the PSN at the floor with nothing held above it."""
        f = self._floor
        if not self._starts and (psn - f) & self.space.mask == 0:  # the floor's wire value
            self._floor = f + 1
            return
        self.add(psn)
        self.advance()

    def advance_by(self, count: int) -> None:
        """The ``count`` PSNs at the floor arrived, nothing being held above it: the
        receiver's in-order run (a batch of :meth:`add_advance` calls) in O(1)."""
        if self._starts:
            raise ValueError("advance_by: PSNs are held above the floor")
        self._floor += count

    def add_range(self, start: int, count: int) -> int:
        """Insert ``start .. start+count-1``; returns how many PSNs were new."""
        if count <= 0:
            return 0
        x = self._ext(start)
        y = x + count
        if x < self._floor:
            x = self._floor
            if y <= x:
                return 0
        added = merge_interval(self._starts, self._ends, x, y)
        self._count += added
        return added

    def add_bitmap(self, base: int, bitmap: int, bits: int = SACK_BITS) -> int:
        """Insert every PSN a SACK bitmap acknowledges; returns how many were new."""
        added = 0
        for off, n in bitmap_runs(bitmap & ((1 << bits) - 1)):
            added += self.add_range((base + off) & self.space.mask, n)
        return added

    def discard(self, psn: int) -> bool:
        """Remove one PSN; True if it was held."""
        return self.remove_range(psn, 1) == 1

    def remove_range(self, start: int, count: int) -> int:
        """Remove ``start .. start+count-1``; returns how many PSNs were held."""
        if count <= 0:
            return 0
        x = self._ext(start)
        y = x + count
        starts, ends = self._starts, self._ends
        i = bisect_right(ends, x)  # first range ending after x
        j = bisect_left(starts, y)  # ranges starting before y
        if i >= j:
            return 0
        pieces_s: list[int] = []
        pieces_e: list[int] = []
        if starts[i] < x:
            pieces_s.append(starts[i])
            pieces_e.append(x)
        if ends[j - 1] > y:
            pieces_s.append(y)
            pieces_e.append(ends[j - 1])
        removed = sum(ends[k] - starts[k] for k in range(i, j))
        removed -= sum(e - s for s, e in zip(pieces_s, pieces_e, strict=True))
        starts[i:j] = pieces_s
        ends[i:j] = pieces_e
        self._count -= removed
        return removed

    def remove_below(self, psn: int) -> int:
        """Drop every PSN before ``psn`` and raise the floor to it.

        A ``psn`` at or behind the current floor changes nothing (floors only
        move forward). Returns how many held PSNs were dropped.
        """
        x = self._ext(psn)
        if x <= self._floor:
            return 0
        starts, ends = self._starts, self._ends
        i = bisect_right(ends, x)  # ranges [0, i) lie wholly below x
        dropped = sum(ends[k] - starts[k] for k in range(i))
        if i:
            del starts[:i], ends[:i]
        if starts and starts[0] < x:
            dropped += x - starts[0]
            starts[0] = x
        self._floor = x
        self._count -= dropped
        return dropped

    def advance(self) -> int:
        """Drop the contiguous run at the floor and move the floor past it.

        A receiver calls this after :meth:`add` to turn arrivals into a
        cumulative ack point; returns the new floor (= first missing PSN).
        """
        starts = self._starts
        if starts and starts[0] == self._floor:
            e = self._ends[0]
            self._count -= e - starts[0]
            del starts[0], self._ends[0]
            self._floor = e
        return self._floor & self.space.mask

    def clear(self, floor: int | None = None) -> None:
        """Empty the set, optionally resetting the floor (e.g. a new Start_PSN)."""
        self._starts.clear()
        self._ends.clear()
        self._count = 0
        if floor is not None:
            self._floor = self.space.check(floor)

    def __repr__(self) -> str:
        body = ", ".join(f"{s}+{n}" for s, n in self.ranges())
        return f"RangeSet({self.space.bits}-bit, floor={self.floor}, [{body}])"

# SPDX-License-Identifier: GPL-2.0-only
"""SACK bitmaps and RangeSet, checked against a naive set model across the wrap."""

import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emu.core.psn import PSN24, PSN32, PsnSpace
from emu.core.sack import (
    RangeSet,
    bitmap_from_psns,
    bitmap_holes,
    bitmap_psns,
    bitmap_runs,
)

bm64 = st.integers(0, (1 << 64) - 1)
sp_st = st.sampled_from([PSN24, PSN32, PsnSpace(8)])


def naive_runs(bm):
    runs, i = [], 0
    while bm >> i:
        if bm >> i & 1:
            j = i
            while bm >> j & 1:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


@given(bm64)
def test_bitmap_runs_and_holes_match_naive(bm):
    assert list(bitmap_runs(bm)) == naive_runs(bm)
    assert list(bitmap_holes(bm)) == naive_runs(~bm & ((1 << 64) - 1))


@given(sp_st, st.data())
def test_bitmap_round_trip_across_wrap(sp, data):
    base = data.draw(st.integers(0, sp.mask))
    bm = data.draw(bm64)
    bits = min(64, sp.modulus)
    bm &= (1 << bits) - 1
    psns = bitmap_psns(sp, base, bm, bits)
    assert psns == [sp.add(base, i) for i in range(bits) if bm >> i & 1]
    assert bitmap_from_psns(sp, base, psns, bits) == bm
    # RangeSet agrees both ways
    rs = RangeSet(sp, base)
    assert rs.add_bitmap(base, bm, bits) == bin(bm).count("1")
    assert rs.to_bitmap(base, bits) == bm
    assert sorted(sp.offset(p, base) for p in rs) == [sp.offset(p, base) for p in psns]


def test_bitmap_ignores_out_of_range_psns():
    assert bitmap_from_psns(PSN24, 10, [9, 10, 73, 74]) == 1 | (1 << 63)
    assert bitmap_psns(PSN24, PSN24.mask, 0b101) == [PSN24.mask, 1]


# -- RangeSet vs model ---------------------------------------------------------

OPS = st.lists(st.tuples(
    # adds weighted up so the set is populated when removals cut into it
    st.sampled_from(["add", "add_range", "add_range", "add_range", "discard", "remove_range",
                     "remove_below", "advance"]),
    # offsets from the floor: mostly dense (overlaps, touching ranges, cuts inside a
    # range), sometimes far (sparse ranges)
    st.one_of(st.integers(-8, 60), st.integers(-40, 400)), st.integers(0, 24)),
    min_size=4, max_size=60)


class Model:
    def __init__(self, floor):
        self.floor = floor
        self.s = set()

    def add_range(self, x, n):
        new = {v for v in range(max(x, self.floor), x + n)} - self.s
        self.s |= new
        return len(new)

    def remove_range(self, x, n):
        gone = self.s & set(range(x, x + n))
        self.s -= gone
        return len(gone)

    def remove_below(self, x):
        if x <= self.floor:
            return 0
        gone = {v for v in self.s if v < x}
        self.s -= gone
        self.floor = x
        return len(gone)

    def advance(self):
        while self.floor in self.s:
            self.s.discard(self.floor)
            self.floor += 1
        return self.floor


def check(rs, m, sp, origin):
    w = lambda x: (origin + x) & sp.mask  # noqa: E731
    assert len(rs) == len(m.s)
    assert rs.floor == w(m.floor)
    fm = m.floor
    while fm in m.s:
        fm += 1
    assert rs.first_missing() == w(fm)
    runs = []
    for v in sorted(m.s):
        if runs and runs[-1][0] + runs[-1][1] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    assert list(rs.ranges()) == [(w(s), n) for s, n in runs]
    assert [sp.diff(p, w(0)) for p in rs] == sorted(m.s)
    probes = list(range(m.floor - 10, m.floor + 100)) + list(range(m.floor + 100, m.floor + 450, 7))
    for x in probes:
        assert (w(x) in rs) == (x in m.s)
        assert rs.is_below(w(x)) == (x < m.floor)
    assert rs.lowest() == (w(min(m.s)) if m.s else None)
    assert rs.highest() == (w(max(m.s)) if m.s else None)
    lim = m.floor + 300
    holes = [(sp.diff(s, w(0)), n) for s, n in rs.holes(w(lim))]
    expect, x = [], m.floor
    while x < lim:
        if x not in m.s:
            y = x
            while y < lim and y not in m.s:
                y += 1
            expect.append((x, y - x))
            x = y
        else:
            x += 1
    assert holes == expect
    assert [sp.diff(p, w(0)) for p in rs.missing(w(lim), 25)] == \
        [v for v in range(m.floor, lim) if v not in m.s][:25]
    for base in (m.floor - 10, m.floor, m.floor + 33):
        bm = rs.to_bitmap(w(base))
        assert bm == sum(1 << i for i in range(64) if base + i in m.s)
        bmf = rs.to_bitmap(w(base), below_floor=True)
        assert bmf == sum(1 << i for i in range(64) if base + i in m.s or base + i < m.floor)


@given(st.sampled_from([PSN24, PSN32]), st.integers(-300, 300), OPS)
def test_rangeset_matches_model_across_wrap(sp, shift, ops):
    origin = (sp.modulus + shift) & sp.mask  # floor starts near the wrap point
    rs = RangeSet(sp, origin)
    m = Model(0)
    w = lambda x: (origin + x) & sp.mask  # noqa: E731
    for op, x, n in ops:
        x += m.floor  # keep operands near the live region
        if op == "add":
            assert rs.add(w(x)) == (m.add_range(x, 1) == 1)
        elif op == "add_range":
            assert rs.add_range(w(x), n) == m.add_range(x, n)
        elif op == "discard":
            assert rs.discard(w(x)) == (m.remove_range(x, 1) == 1)
        elif op == "remove_range":
            assert rs.remove_range(w(x), n) == m.remove_range(x, n)
        elif op == "remove_below":
            assert rs.remove_below(w(x)) == m.remove_below(x)
        else:
            assert rs.advance() == w(m.advance())
        check(rs, m, sp, origin)


def test_rangeset_cuts_inside_ranges():
    rs = RangeSet(PSN24, 0)
    rs.add_range(0, 10)
    rs.add_range(20, 10)
    assert rs.remove_below(5) == 5 and list(rs.ranges()) == [(5, 5), (20, 10)]
    assert rs.remove_range(8, 15) == 5 and list(rs.ranges()) == [(5, 3), (23, 7)]
    assert rs.add_range(8, 15) == 15 and list(rs.ranges()) == [(5, 25)]  # merges both sides
    assert rs.discard(10) and list(rs.ranges()) == [(5, 5), (11, 19)]
    assert rs.add_range(7, 4) == 1 and rs.num_ranges == 1 and len(rs) == 25
    assert rs.remove_below(29) == 24 and list(rs.ranges()) == [(29, 1)]


def test_rangeset_basics_and_repr():
    rs = RangeSet(PSN24, PSN24.mask - 1)
    for p in (PSN24.mask - 1, PSN24.mask, 0, 2):
        assert rs.add(p)
    assert not rs.add(0)
    assert not rs.add(PSN24.mask - 5)  # below the floor: ignored
    assert list(rs.ranges()) == [(PSN24.mask - 1, 3), (2, 1)]
    assert rs.num_ranges == 2 and rs.first_missing() == 1
    assert rs.advance() == 1 and len(rs) == 1 and rs.is_below(0)
    assert "floor=1" in repr(rs)
    rs.clear(floor=100)
    assert not rs and rs.floor == 100 and rs.first_missing() == 100
    assert rs.add_range(90, 5) == 0 and rs.add_range(98, 4) == 2
    assert rs.remove_range(5, 0) == 0 and rs.add_range(5, 0) == 0


def test_rangeset_scales_to_1e5_outstanding():
    """10^5 PSNs arriving shuffled with 1% holes, then a SACK walk and cumulative advance."""
    rng = random.Random(1)
    n = 100_000
    start = PSN24.mask - n // 2  # straddle the wrap
    psns = [PSN24.add(start, i) for i in range(n) if i % 100 != 7]
    rng.shuffle(psns)
    t0 = time.perf_counter()
    rs = RangeSet(PSN24, start)
    for p in psns:
        rs.add(p)
    assert len(rs) == len(psns) and rs.num_ranges == n // 100 + 1
    holes = list(rs.holes(PSN24.add(start, n)))
    assert len(holes) == n // 100 and all(c == 1 for _, c in holes)
    for k in range(0, n, 64):
        rs.to_bitmap(PSN24.add(start, k))
    for k in range(0, n, 50):
        rs.remove_below(PSN24.add(start, k))
    elapsed = time.perf_counter() - t0
    assert elapsed < 3.0, elapsed  # ~0.2 s here; a quadratic slip would take minutes


def test_rangeset_rejects_bad_floor():
    with pytest.raises(ValueError):
        RangeSet(PSN24, 1 << 24)


@given(st.lists(st.integers(0, 40), max_size=60), st.integers(0, (1 << 32) - 1))
def test_add_advance_is_add_then_advance(offsets, start):
    """The receiver's one-call arrival equals the two calls, wrap or not, in order or not."""
    a, b = RangeSet(PSN32, start), RangeSet(PSN32, start)
    for o in offsets:
        psn = (start + o) & PSN32.mask
        a.add_advance(psn)
        b.add(psn)
        b.advance()
        assert (a.floor_ext, list(a.ranges()), len(a)) == (b.floor_ext, list(b.ranges()), len(b))
        assert a.contiguous == (a.num_ranges == 0)

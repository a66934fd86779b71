# SPDX-License-Identifier: GPL-2.0-only
"""PSN serial arithmetic across wrap-around, for 24- and 32-bit spaces."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emu.core.psn import PSN24, PSN32, PsnSpace, space

SPACES = [PSN24, PSN32]
sp_st = st.sampled_from(SPACES)


@st.composite
def psn_and_delta(draw):
    sp = draw(sp_st)
    a = draw(st.integers(0, sp.mask))
    d = draw(st.integers(-sp.half, sp.half - 1))
    return sp, a, d


@given(psn_and_delta())
def test_add_then_diff_round_trips(t):
    sp, a, d = t
    b = sp.add(a, d)
    assert 0 <= b <= sp.mask
    assert sp.diff(b, a) == d
    assert sp.sub(b, d) == a


@given(psn_and_delta())
def test_comparisons_agree_with_signed_distance(t):
    sp, a, d = t
    b = sp.add(a, d)
    assert sp.lt(a, b) == (d > 0) or d == -sp.half
    assert sp.gt(b, a) == (0 < d)
    assert sp.le(a, b) == (d >= 0) or d == -sp.half
    assert sp.ge(b, a) == (d >= 0)
    assert sp.lt(a, b) != sp.ge(a, b)
    assert sp.gt(a, b) != sp.le(a, b)
    if d != -sp.half:
        assert sp.max(a, b) == (b if d >= 0 else a)
        assert sp.min(a, b) == (a if d >= 0 else b)


@given(sp_st, st.data())
def test_order_is_consistent_within_a_small_window(sp, data):
    """Any PSNs spanning less than half the space sort like their unwrapped values."""
    start = data.draw(st.integers(0, sp.mask))
    offs = data.draw(st.lists(st.integers(0, 1 << 20), min_size=2, max_size=20))
    psns = [sp.add(start, o) for o in offs]
    for (oa, a) in zip(offs, psns, strict=True):
        for (ob, b) in zip(offs, psns, strict=True):
            assert sp.lt(a, b) == (oa < ob)
            assert sp.diff(a, b) == oa - ob


@given(sp_st, st.data())
def test_in_window_and_between(sp, data):
    start = data.draw(st.integers(0, sp.mask))
    size = data.draw(st.integers(0, 1 << 20))
    off = data.draw(st.integers(0, sp.mask))
    p = sp.add(start, off)
    assert sp.in_window(p, start, size) == (off < size)
    assert sp.offset(p, start) == off
    if size:
        assert sp.between(p, start, sp.add(start, size - 1)) == (off < size)


@given(sp_st, st.data())
def test_unwrap_is_nearest_and_wrap_inverts(sp, data):
    ref = data.draw(st.integers(0, 1 << 70))
    psn = data.draw(st.integers(0, sp.mask))
    x = sp.unwrap(psn, ref)
    assert sp.wrap(x) == psn
    assert ref - sp.half <= x < ref + sp.half


def test_wrap_edges():
    sp = PSN24
    top = sp.mask
    assert sp.next(top) == 0
    assert sp.add(top, 2) == 1
    assert sp.diff(0, top) == 1
    assert sp.diff(top, 0) == -1
    assert sp.lt(top, 0) and sp.gt(0, top)
    assert sp.in_window(0, top - 1, 3) and not sp.in_window(1, top - 1, 3)
    assert PSN32.diff(0, 0xFFFFFFFF) == 1
    assert sp.unwrap(5, 0x1FFFFFE) == 0x2000005  # just past a wrap, extended keeps counting


def test_half_distance_is_behind_both_ways():
    """RFC 1982 leaves it undefined; ours is stable and documented."""
    sp = PSN24
    assert sp.diff(sp.half, 0) == -sp.half
    assert sp.lt(sp.half, 0) and sp.lt(0, sp.half)


def test_check_and_random_and_space():
    assert PSN24.check(0xFFFFFF) == 0xFFFFFF
    with pytest.raises(ValueError):
        PSN24.check(1 << 24)
    with pytest.raises(ValueError):
        PSN24.check(-1)
    rng = random.Random(7)
    assert all(0 <= PSN24.random(rng) <= PSN24.mask for _ in range(100))
    assert space(24) is PSN24 and space(32) is PSN32
    assert space(16) == PsnSpace(16) and hash(space(16)) == hash(PsnSpace(16))
    with pytest.raises(ValueError):
        PsnSpace(1)

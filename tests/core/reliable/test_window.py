# SPDX-License-Identifier: GPL-2.0-only
"""emu.core.reliable.window: the receiver's PSN window, held to a plain-set model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from emu.core.psn import PSN32
from emu.core.reliable.window import RecvWindow, Rx

NEAR_WRAP = (1 << 32) - 5  # every sequence below crosses the 32-bit wrap


def test_verdicts_at_the_edges_unordered_and_ordered():
    for ordered in (False, True):
        w = RecvWindow(PSN32, NEAR_WRAP, 16, ordered=ordered)
        fm = w.first_missing
        assert w.classify(fm) is Rx.NEW
        w.accept(fm)
        w.accept(fm + 2)  # fm + 1 missing
        fm += 1
        assert w.first_missing == fm and w.ooo == 1
        assert w.classify(fm - 1) is Rx.DUPLICATE and w.classify(fm + 1) is Rx.DUPLICATE
        assert w.classify(fm + 3) is (Rx.AHEAD if ordered else Rx.NEW)
        assert w.classify(fm - 16) is Rx.DUPLICATE and w.classify(fm - 17) is Rx.STALE
        assert w.classify(fm + 15) is not Rx.OUT_OF_WINDOW
        assert w.classify(fm + 16) is Rx.OUT_OF_WINDOW
        assert w.received(fm - 1) and w.received(fm + 1) and not w.received(fm)
        assert w.ext(fm & PSN32.mask) == fm and w.ext((fm - 3) & PSN32.mask) == fm - 3


def test_sack_base_follows_cack_until_the_psn_would_not_fit():
    w = RecvWindow(PSN32, NEAR_WRAP, 1024)
    fm = w.first_missing
    w.accept(fm + 1)
    w.accept(fm + 3)
    cack, base, bm = w.sack(fm + 3)
    assert (cack, base, bm) == (fm - 1, fm, 0b1010)
    w.accept(fm + 100)
    cack, base, bm = w.sack(fm + 100)  # 101 past CACK: the bitmap ends at the PSN
    assert cack == fm - 1 and base == fm + 100 - 63 and bm == 1 << 63
    cack, base, bm = w.sack(fm + 63)  # exactly 64 past CACK still starts at CACK + 1
    assert base == fm and bm == 0b1010
    w.accept(fm)  # the hole fills: everything up to fm + 1 is in, fm + 2 missing
    cack, base, bm = w.sack(fm + 1)
    assert cack == fm + 1 and base == fm + 2 and bm & 0b11 == 0b10


@given(st.lists(st.integers(-40, 80), max_size=120), st.booleans())
def test_window_agrees_with_a_set_model(offsets, ordered):
    """Whatever arrives, in any order: the verdict, first missing PSN, the out-of-order
    count and every SACK bit are what a plain set of received PSNs says."""
    size = 32
    w = RecvWindow(PSN32, NEAR_WRAP, size, ordered=ordered)
    got: set[int] = set()
    fm = start = w.first_missing
    ooo = 0
    for off in offsets:
        psn = start + off
        v = w.classify(psn)
        if not -size <= psn - fm < size:
            want = Rx.STALE if psn < fm else Rx.OUT_OF_WINDOW
        elif psn < fm or psn in got:
            want = Rx.DUPLICATE
        elif ordered and psn != fm:
            want = Rx.AHEAD
        else:
            want = Rx.NEW
        assert v is want
        assert w.received(psn) == (psn < fm or psn in got)
        if v is Rx.NEW:
            ooo += psn > fm
            w.accept(psn)
            got.add(psn)
            while fm in got:
                fm += 1
        assert w.first_missing == fm and w.ooo == ooo
        cack, base, bm = w.sack(psn)
        assert cack == fm - 1 and base > cack
        if psn > cack:  # the answered PSN is in the bitmap, which starts at CACK + 1 if it can
            assert base <= psn < base + 64 and (base == cack + 1 or psn - cack > 64)
        for i in range(64):
            p = base + i
            assert bool(bm >> i & 1) == (p < fm or p in got)

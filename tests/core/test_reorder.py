# SPDX-License-Identifier: GPL-2.0-only
"""Reorder buffer and out-of-order placement tracker."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emu.core.psn import PSN24, PSN32
from emu.core.reorder import (
    MessageAssembly,
    PlacementTracker,
    PlaceStatus,
    ReorderBuffer,
    Verdict,
)


@given(st.sampled_from([PSN24, PSN32]), st.integers(-200, 200), st.integers(1, 120),
       st.randoms(use_true_random=False), st.integers(1, 64))
def test_delivers_exactly_the_in_order_stream(sp, shift, n, rnd, window):
    """Random arrival order with duplicates, retried until all delivered (a sender's view)."""
    start = (sp.modulus + shift) & sp.mask
    rb: ReorderBuffer[int] = ReorderBuffer(sp, start, window)
    pending = list(range(n))
    got = []
    dup_seen = 0
    while pending:
        batch = pending[:]
        rnd.shuffle(batch)
        batch += rnd.sample(batch, min(len(batch), 3))  # duplicates
        for i in batch:
            v = rb.accept(sp.add(start, i), i)
            if v is Verdict.DUPLICATE:
                dup_seen += 1
            elif v is Verdict.OUT_OF_WINDOW:
                assert sp.diff(sp.add(start, i), rb.next_psn) >= window
            got.extend(rb.pop_ready())
        delivered = {x for _, x in got}
        pending = [i for i in pending if i not in delivered]
    assert [x for _, x in got] == list(range(n))
    assert [p for p, _ in got] == [sp.add(start, i) for i in range(n)]
    assert rb.next_psn == sp.add(start, n) and rb.held == 0
    assert rb.delivered == n and rb.duplicates == dup_seen


def test_go_back_n_window_one():
    rb: ReorderBuffer[str] = ReorderBuffer(PSN24, PSN24.mask, 1)
    assert rb.accept(0, "b") is Verdict.OUT_OF_WINDOW  # sequence error: NAK it
    assert rb.accept(PSN24.mask, "a") is Verdict.ACCEPTED
    assert rb.accept(PSN24.mask, "a") is Verdict.DUPLICATE  # re-ACK
    assert rb.accept(0, "b") is Verdict.ACCEPTED
    assert rb.pop_ready() == [(PSN24.mask, "a"), (0, "b")]
    assert rb.pop_ready() == []
    assert (rb.out_of_window, rb.duplicates, rb.delivered) == (1, 1, 2)


def test_holds_gaps_and_reports_bitmap():
    rb: ReorderBuffer[int] = ReorderBuffer(PSN24, 100, 64)
    for p in (102, 105, 103):
        assert rb.accept(p, p) is Verdict.ACCEPTED
    assert rb.accept(103, 0) is Verdict.DUPLICATE
    assert rb.accept(164, 0) is Verdict.OUT_OF_WINDOW
    assert rb.accept(163, 0) is Verdict.ACCEPTED
    assert rb.pop_ready() == [] and rb.held == 4
    assert rb.is_received(103) and not rb.is_received(101) and rb.is_received(99)
    assert rb.to_bitmap(100) == (1 << 2) | (1 << 3) | (1 << 5) | (1 << 63)
    assert rb.to_bitmap(98) & 0b11 == 0b11  # behind next: delivered, so received
    assert rb.accept(100, 100) is Verdict.ACCEPTED
    assert rb.pop_ready() == [(100, 100)]
    assert rb.accept(101, 101) is Verdict.ACCEPTED
    assert [p for p, _ in rb.pop_ready()] == [101, 102, 103]
    assert rb.next_psn == 104
    dropped = rb.reset(500)
    assert [p for p, _ in dropped] == [105, 163] and rb.held == 0 and rb.next_psn == 500
    with pytest.raises(ValueError):
        ReorderBuffer(PSN24, 0, 0)
    with pytest.raises(ValueError):
        ReorderBuffer(PSN24, 0, PSN24.half)


# -- placement -----------------------------------------------------------------


@given(st.integers(0, 20_000), st.integers(1, 1500), st.randoms(use_true_random=False),
       st.booleans())
def test_placement_completes_once_in_any_order(total, mtu, rnd, known):
    chunks = [(o, min(mtu, total - o)) for o in range(0, total, mtu)] or [(0, 0)]
    order = chunks + rnd.sample(chunks, min(3, len(chunks)))  # with duplicates
    rnd.shuffle(order)
    tr: PlacementTracker[int] = PlacementTracker()
    last_off = chunks[-1][0]
    statuses = []
    placed = 0
    for off, ln in order:
        r = tr.place(7, off, ln, total=total if known else None, last=(off == last_off))
        statuses.append(r.status)
        placed += r.new_bytes
        assert r.status is not PlaceStatus.OUT_OF_BOUNDS
    assert statuses.count(PlaceStatus.COMPLETED) == 1
    assert placed == total
    assert 7 not in tr and len(tr) == 0
    # a late retransmission after completion is a duplicate, not a new message
    assert tr.place(7, 0, min(mtu, total)).status is PlaceStatus.DUPLICATE


def test_message_assembly_edges():
    m = MessageAssembly(10)
    assert m.place(8, 4).status is PlaceStatus.OUT_OF_BOUNDS
    assert m.place(-1, 2).status is PlaceStatus.OUT_OF_BOUNDS
    assert m.place(0, 4) == (PlaceStatus.PLACED, 4)
    assert m.place(2, 4) == (PlaceStatus.PLACED, 2)  # partial overlap
    assert m.place(0, 6) == (PlaceStatus.DUPLICATE, 0)
    assert m.holes() == [(6, 4)]
    assert m.place(6, 3, last=True).status is PlaceStatus.LENGTH_MISMATCH
    assert m.place(6, 4, last=True) == (PlaceStatus.COMPLETED, 4)
    assert m.place(0, 2).status is PlaceStatus.DUPLICATE
    u = MessageAssembly()
    assert u.place(100, 50) == (PlaceStatus.PLACED, 50)
    assert u.place(0, 20, last=True).status is PlaceStatus.LENGTH_MISMATCH  # bytes beyond
    assert u.holes() == [(0, 100)]
    assert MessageAssembly(0).place(0, 0) == (PlaceStatus.COMPLETED, 0)


def test_tracker_many_messages_and_forget():
    tr: PlacementTracker[tuple[int, int]] = PlacementTracker(remember=2)
    rng = random.Random(3)
    pkts = [((1, m), o, 100) for m in range(50) for o in range(0, 1000, 100)]
    rng.shuffle(pkts)
    done = []
    for key, off, ln in pkts:
        r = tr.place(key, off, ln, total=1000)
        if r.status is PlaceStatus.COMPLETED:
            done.append(key)
    assert sorted(done) == [(1, m) for m in range(50)] and len(tr) == 0
    assert tr.place((1, 0), 0, 100).status is PlaceStatus.PLACED  # forgotten (remember=2)
    assert tr.get((1, 0)) is not None and tr.forget((1, 0)) is not None
    assert tr.place((2, 0), 0, 10, total=20).status is PlaceStatus.PLACED
    assert tr.place((2, 0), 10, 10, total=30).status is PlaceStatus.LENGTH_MISMATCH
    assert tr.place((3, 0), 0, 10).status is PlaceStatus.PLACED
    assert tr.place((3, 0), 0, 10, total=5).status is PlaceStatus.OUT_OF_BOUNDS
    assert tr.place((4, 0), 0, 0).status is PlaceStatus.DUPLICATE and (4, 0) not in tr


def test_append_is_place_for_in_order_bytes_and_declines_the_rest():
    from emu.core.reorder import MessageAssembly

    a, b = MessageAssembly(total=100), MessageAssembly(total=100)
    for m in (a, b):
        m.place(0, 10)
    assert a.append(10, 20) and b.place(10, 20).new_bytes == 20
    assert (a.placed, a._starts, a._ends) == (b.placed, b._starts, b._ends)
    assert not a.append(40, 10)  # a gap: place() decides
    assert not a.append(30, 70)  # would complete the message: place() reports COMPLETED
    assert not a.append(10, 5)  # behind the end: a duplicate
    assert not MessageAssembly(total=9).append(0, 4)  # nothing placed yet
    assert a.placed == 30

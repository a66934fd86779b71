# SPDX-License-Identifier: GPL-2.0-only
"""Path policies over a large entropy set (UET's default: 4096 ports as a ``range``):
every choice costs the same whatever the size, oblivious uses the whole set, REPS
draws what the list of unbanned entropies would and recycles every packet a clean
ACK vouches for."""

from __future__ import annotations

import random

import pytest

from emu import paths
from emu.paths import entropy_set
from emu.paths.oblivious import Oblivious
from emu.paths.reps import Reps

BIG = range(49152, 49152 + 4096)


def test_a_range_stays_a_range_and_anything_else_a_checked_tuple():
    assert entropy_set(BIG) is BIG
    assert entropy_set([3, 1, 2]) == (3, 1, 2)
    for bad in (range(5, 5), [], [1, 1], [-1], range(-1, 3)):
        with pytest.raises(ValueError):
            entropy_set(bad)
    for name in paths.available():
        assert paths.create(name, BIG, random.Random(1)).entropies is BIG  # not copied


def test_oblivious_over_the_default_set_uses_thousands_of_entropies():
    o = Oblivious(BIG, random.Random(3))
    got = [o.choose(0.0) for _ in range(5_000)] + o.choose_many(0.0, 5_000)
    assert len(set(got)) >= 1000  # ~3,700 distinct expected of 10,000 draws over 4096
    assert set(got) <= set(BIG)
    assert o.bits == 16  # 4096 divides 2^16: the historic draw, exactly uniform


def test_a_set_above_4096_draws_32_bits_unless_its_size_divides_2_16():
    """16 bits modulo a set of 40,000 would draw a quarter of it twice as often; modulo
    RoCEv2's 16384 source ports they are exact (and that policy's draws unchanged)."""
    o = Oblivious(range(1, 40_001), random.Random(3))
    assert o.bits == 32
    assert max(o.choose(0.0) for _ in range(2000)) > 32_768
    assert Oblivious(range(0xC000, 0x10000), random.Random(3)).bits == 16


def _pool_draw(ents, banned: set[int], bits: int) -> int:
    """What REPS explored before: a list of the unbanned entropies, indexed by the draw."""
    pool = [e for e in ents if e not in banned] or list(ents)
    return pool[bits % len(pool)]


@pytest.mark.parametrize("ents", [BIG, tuple(range(60000, 59000, -3)), tuple(range(16))],
                         ids=["range", "tuple", "small"])
def test_reps_explores_what_the_list_of_unbanned_entropies_would_give(ents):
    """Without making that list: the same random bits pick the same entropy, whatever
    is banned (including everything)."""
    for seed in range(20):
        rng = random.Random(seed)
        r = Reps(ents, random.Random(seed), penalty=1.0)
        k = rng.choice([1, 2, 5, len(ents) // 2, len(ents) - 1, len(ents)])
        banned = set(rng.sample(list(ents), k))
        for e in banned:
            r.on_timeout(e, 0.0)
        mirror = random.Random(seed)
        for _ in range(20):
            want = _pool_draw(ents, banned, mirror.getrandbits(r.bits))
            assert r.choose(0.5) == want


def test_reps_recycles_every_packet_a_clean_coalesced_ack_released():
    r = Reps(BIG, random.Random(4))
    r.on_ack(BIG[9], 0.0, released=[BIG[1], BIG[5], BIG[9]])  # one ACK, three packets
    assert [r.choose(0.0) for _ in range(3)] == [BIG[1], BIG[5], BIG[9]]
    assert r.state()["recycled"] == 3


def test_reps_with_a_marked_ack_bans_its_entropy_and_recycles_the_rest():
    """A target ACKs a CE-marked packet at once: the others that ACK released arrived
    unmarked, the one it answers (its entropy) did not."""
    r = Reps(BIG, random.Random(4), penalty=1e-3)
    r.on_ack(BIG[9], 0.0, ecn=True, released=[BIG[1], BIG[9], BIG[5]])
    assert r.banned(0.0) == [BIG[9]]
    assert [r.choose(0.0) for _ in range(2)] == [BIG[1], BIG[5]]
    assert r.state()["explored"] == 0

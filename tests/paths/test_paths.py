# SPDX-License-Identifier: GPL-2.0-only
"""Path-choice plug-ins (emu.paths): registry, fixed, oblivious, REPS; sans-IO imports."""

from __future__ import annotations

import random
from collections import Counter, deque

import pytest

from emu import paths
from emu.paths.fixed import Fixed
from emu.paths.oblivious import Oblivious
from emu.paths.reps import Reps

ENTS = list(range(49152, 49152 + 16))


def test_registry_and_bad_input():
    assert paths.available() == ["fixed", "flowlet", "oblivious", "reps"]
    assert isinstance(paths.create("reps", ENTS, random.Random(1)), Reps)
    with pytest.raises(ValueError, match="unknown path policy"):
        paths.create("nope", ENTS, random.Random(1))
    with pytest.raises(ValueError, match="reps"):
        paths.create("reps", ENTS, random.Random(1), bogus=1)
    with pytest.raises(ValueError, match="at least one"):
        paths.create("oblivious", [], random.Random(1))
    with pytest.raises(ValueError, match="distinct"):
        paths.create("oblivious", [5, 5], random.Random(1))
    with pytest.raises(ValueError, match="capacity"):
        paths.create("reps", ENTS, random.Random(1), capacity=0)
    with pytest.raises(ValueError, match="not in the flow's set"):
        paths.create("fixed", ENTS, random.Random(1), entropy=7)


def test_fixed_pins_one_entropy_whatever_happens():
    f = Fixed(ENTS, random.Random(3))
    e = f.choose(0.0)
    assert e in ENTS
    f.on_ack(e, 0.0, ecn=True)
    f.on_nack(e, 0.0, trimmed=True)
    f.on_timeout(e, 0.0)
    assert {f.choose(t * 1e-3) for t in range(50)} == {e}
    assert f.state()["ecn"] == f.state()["nack"] == f.state()["timeout"] == 1
    assert Fixed(ENTS, random.Random(3), entropy=ENTS[5]).choose(0.0) == ENTS[5]


def test_oblivious_is_the_engines_historic_draw_and_roughly_uniform():
    rng_a, rng_b = random.Random(9), random.Random(9)
    o = Oblivious(ENTS, rng_a)
    got = [o.choose(0.0) for _ in range(3200)]
    # the same 16-bit-modulo draw UetEngine.emit made before path policies existed
    assert got == [ENTS[rng_b.getrandbits(16) % len(ENTS)] for _ in range(3200)]
    c = Counter(got)
    assert set(c) == set(ENTS)
    assert all(100 < n < 300 for n in c.values()), c  # mean 200, sd ≈ 14
    o.on_ack(ENTS[0], 0.0, ecn=True)  # feedback changes nothing
    assert o.state()["chosen"] == 3200


@pytest.mark.parametrize("name", ["fixed", "oblivious", "reps"])
def test_choose_many_is_k_calls_of_choose(name):
    """A run's entropies (choose_many) are exactly what packet-by-packet choose() would
    have drawn from the same RNG, and the policy counts them the same."""
    one = paths.create(name, ENTS, random.Random(9))
    many = paths.create(name, ENTS, random.Random(9))
    want = [one.choose(0.0) for _ in range(50)]
    assert many.choose_many(0.0, 20) + many.choose_many(0.0, 30) == want
    assert many.state() == one.state()
    assert many.choose(0.0) == one.choose(0.0)  # and the RNG is at the same place


def test_reps_explores_when_nothing_is_recycled():
    r = Reps(ENTS, random.Random(4))
    got = [r.choose(0.0) for _ in range(160)]
    assert r.state()["explored"] == 160 and r.state()["recycled"] == 0
    assert len(set(got)) == 16  # 160 uniform draws over 16 values miss one with p < 0.02%


def test_reps_recycles_entropies_whose_acks_came_back_clean():
    r = Reps(ENTS, random.Random(4))
    for e in (ENTS[3], ENTS[7], ENTS[3]):
        r.on_ack(e, 0.0)
    assert [r.choose(0.0) for _ in range(3)] == [ENTS[3], ENTS[7], ENTS[3]]
    assert r.state()["recycled"] == 3
    r.choose(0.0)
    assert r.state()["explored"] == 1


def test_reps_capacity_bounds_the_recycle_queue():
    r = Reps(ENTS, random.Random(4), capacity=4)
    for e in ENTS[:10]:
        r.on_ack(e, 0.0)
    assert r.state()["queued"] == 4
    assert [r.choose(0.0) for _ in range(4)] == ENTS[6:10]


@pytest.mark.parametrize("how", ["ecn", "nack", "trim", "timeout"])
def test_reps_penalises_and_forgets(how):
    r = Reps(ENTS, random.Random(5), penalty=1e-3)
    bad = ENTS[2]
    for e in (bad, ENTS[0], bad):
        r.on_ack(e, 0.0)
    if how == "ecn":
        r.on_ack(bad, 0.0, ecn=True)
    elif how == "timeout":
        r.on_timeout(bad, 0.0)
    else:
        r.on_nack(bad, 0.0, trimmed=how == "trim")
    assert r.banned(0.0) == [bad] and r.banned(1e-3) == []
    assert r.choose(0.0) == ENTS[0]  # both queued copies of the bad one are gone
    r.on_ack(bad, 1e-4)  # a late clean ACK for an old packet does not lift the ban
    explored = [r.choose(1e-4) for _ in range(400)]
    assert bad not in explored
    assert r.state()["explored"] == 400


def test_reps_unknown_entropy_is_counted_not_used():
    r = Reps(ENTS, random.Random(5))
    r.on_ack(4793, 0.0)
    r.on_nack(1, 0.0)
    assert r.state()["unknown"] == 2 and r.state()["queued"] == 0


def test_reps_when_everything_is_banned_it_still_sends():
    r = Reps(ENTS[:2], random.Random(5))
    r.on_ack(ENTS[0], 0.0, ecn=True)
    r.on_ack(ENTS[1], 0.0, ecn=True)
    assert {r.choose(0.0) for _ in range(50)} == set(ENTS[:2])


def _window_run(r: Reps, bad: set[int], start: float, packets: int, window: int = 32,
                dt: float = 1e-6) -> Counter:
    """A flow with ``window`` packets in flight: each step the oldest is ACKed (ECN if its
    entropy is in ``bad``) and a new packet is sent. Returns the entropies chosen."""
    inflight: deque[int] = deque()
    chosen: Counter = Counter()
    now = start
    for _ in range(packets):
        if len(inflight) >= window:
            e = inflight.popleft()
            r.on_ack(e, now, ecn=e in bad)
        e = r.choose(now)
        chosen[e] += 1
        inflight.append(e)
        now += dt
    while inflight:  # drain: the last ACKs come back
        e = inflight.popleft()
        r.on_ack(e, now, ecn=e in bad)
    return chosen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reps_avoids_a_marked_path_and_recovers(seed):
    r = Reps(ENTS, random.Random(seed), penalty=50e-6)
    bad = ENTS[5]
    c = _window_run(r, {bad}, 0.0, 4000)
    others = [c[e] for e in ENTS if e != bad]
    # oblivious would give it 4000/16 = 250; REPS explores it only after each ban expires
    assert c[bad] < 0.2 * (sum(others) / len(others)), c
    assert r.state()["ecn"] == c[bad]  # every use of it was marked, and each was noticed
    # the path heals: after the ban, exploration treats it like any other entropy
    t = 1.0
    r._fifo.clear()  # a new burst: nothing to recycle
    explored = Counter(r.choose(t) for _ in range(3200))
    assert 100 < explored[bad] < 300, explored  # mean 200 (uniform over 16)
    # and once its ACKs come back clean it is recycled like the rest
    r._fifo.clear()
    r.on_ack(bad, t)
    assert r.choose(t) == bad
    assert r.state()["recycled"] > 3000  # the marked run was mostly recycling

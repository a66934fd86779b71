# SPDX-License-Identifier: GPL-2.0-only
"""``flowlet``: the entropy holds within a burst and changes after an idle gap."""

from __future__ import annotations

import random

import pytest

from emu import paths

ENTS = list(range(1000, 1016))


def test_back_to_back_packets_keep_the_entropy_and_a_gap_changes_it():
    p = paths.create("flowlet", ENTS, random.Random(3), gap=10e-6)
    first = p.choose(0.0)
    assert all(p.choose(k * 5e-6) == first for k in range(1, 100))  # 5 us apart: one flowlet
    second = p.choose(99 * 5e-6 + 11e-6)
    assert second != first and second in ENTS
    assert p.choose_many(99 * 5e-6 + 12e-6, 8) == [second] * 8
    assert p.state()["flowlets"] == 2 and p.state()["chosen"] == 109


def test_flowlets_spread_over_the_entropies():
    p = paths.create("flowlet", ENTS, random.Random(1), gap=1e-6)
    seen = {p.choose(k * 1e-3) for k in range(400)}
    assert len(seen) == len(ENTS)


def test_a_single_entropy_stays_and_bad_parameters_are_refused():
    p = paths.create("flowlet", [7], random.Random(1))
    assert {p.choose(k * 1.0) for k in range(5)} == {7}
    with pytest.raises(ValueError, match="gap"):
        paths.create("flowlet", ENTS, random.Random(1), gap=-1)
    with pytest.raises(ValueError, match="not in the flow's set"):
        paths.create("flowlet", ENTS, random.Random(1), entropy=5)
    assert paths.create("flowlet", ENTS, random.Random(1), entropy=1003).choose(0.0) == 1003

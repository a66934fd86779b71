# SPDX-License-Identifier: GPL-2.0-only
"""Seeded impairment patterns and the rules that carry them (no kernel: text only;
tests/fabric/test_linkctl.py sends packets through them)."""

from __future__ import annotations

import math

import pytest

from emu.fabric import nftrules
from emu.fabric.nftrules import PROB_SCALE, seeded_pattern


def _k(p: float) -> int:
    return round(p * PROB_SCALE)


@pytest.mark.parametrize("p", [1e-6, 1e-4, 0.01, 0.05, 0.3, 0.5, 0.7, 0.999])
def test_pattern_rate_matches_the_probability(p):
    """Over its period a pattern picks p of the packets (±5σ of a Bernoulli count), its
    list is sorted, inside the period and never longer than twice SEEDED_SET_MAX."""
    period, ordinals, picked = seeded_pattern(_k(p), f"1/l/a_to_b/{p}")
    assert picked == (p <= 0.5)
    assert ordinals == sorted(set(ordinals)) and 0 <= ordinals[0] and ordinals[-1] < period
    assert len(ordinals) <= 2 * nftrules.SEEDED_SET_MAX
    hits = len(ordinals) if picked else period - len(ordinals)
    q = min(p, 1 - p)
    sigma = math.sqrt(period * q * (1 - q))
    assert abs(hits - period * p) <= 5 * sigma + 1, (hits, period, p)


def test_pattern_is_a_function_of_its_key():
    a = seeded_pattern(_k(0.01), "1/h1-h2/a_to_b/loss")
    assert a == seeded_pattern(_k(0.01), "1/h1-h2/a_to_b/loss")
    for other in ("2/h1-h2/a_to_b/loss", "1/h1-h2/b_to_a/loss", "1/h1-h3/a_to_b/loss",
                  "1/h1-h2/a_to_b/dup"):
        assert seeded_pattern(_k(0.01), other)[1] != a[1]


def test_period_is_long_at_small_probabilities():
    """At 1 % the pattern repeats only after 819,200 packets (3.4 GB of 4 KiB frames);
    at 10⁻⁶ after 2²⁴ — longer than any run here."""
    assert seeded_pattern(_k(0.01), "k")[0] == 819_200
    assert seeded_pattern(_k(1e-6), "k")[0] == nftrules.SEEDED_PERIOD_MAX


def test_ruleset_seeded_and_random():
    """Seeded: UDP packets by the pattern (a counter per rule), everything else by the
    kernel's draw, one comment per kind so the counters add up; "random": the draw only."""
    key = nftrules.stream_key(5, "h1-h2", "a_to_b")
    seeded = nftrules.nft_ruleset("x0", _k(0.01), _k(0.2), True, _k(0.7), key)
    period, ordinals, _ = seeded_pattern(_k(0.01), f"{key}/loss")
    assert (f"meta l4proto udp numgen inc mod {period} {{ {ordinals[0]}, {ordinals[1]},"
            in seeded)
    assert seeded.count("meta l4proto udp numgen inc") == 4  # loss, dup, ce4, ce6
    assert seeded.count("meta l4proto != udp numgen random") == 4
    assert seeded.count('"emu:loss"') == 2 and seeded.count('"emu:dup"') == 2
    assert "!= {" in seeded  # duplicate 70 %: the rarer 30 % listed, negated
    rand = nftrules.nft_ruleset("x0", _k(0.01), 0, True, 0, nftrules.stream_key(None, "l", "d"))
    assert "numgen random mod 1000000 < 10000 " in rand and "l4proto" not in rand
    inet = nftrules.nft_ruleset("x0", _k(0.01), 0, False, 0, key)
    assert 'oifname "x0" meta l4proto udp numgen inc' in inet

# SPDX-License-Identifier: GPL-2.0-only
"""A resolved topology survives JSON exactly (running clusters keep theirs in the state file)."""

import json
from pathlib import Path

import pytest

from emu.topology import load
from emu.topology.model import Direction
from emu.topology.serialize import from_dict, to_dict

FILES = sorted(Path(__file__).resolve().parents[2].glob("namespaces/*.toml"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_round_trip(path):
    t = load(path, ["link.loss=1%"])
    assert from_dict(json.loads(json.dumps(to_dict(t)))) == t


def test_link_seed_default_set_and_random():
    """Every direction is seeded 1 unless the file or --set says; "random" is None and
    survives the state file."""
    pair = FILES[[p.stem for p in FILES].index("pair")]
    t = load(pair)
    assert {lk.a_to_b.seed for lk in t.links} == {1}
    assert Direction(seed=None).is_default() and Direction(seed=9).is_default()
    t = load(pair, ["link.seed=42", "link.b_to_a.seed=random", "link.loss=1%"])
    lk = t.links[0]
    assert (lk.a_to_b.seed, lk.b_to_a.seed) == (42, None)
    assert from_dict(json.loads(json.dumps(to_dict(t)))) == t

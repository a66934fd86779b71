# SPDX-License-Identifier: GPL-2.0-only
"""A resolved topology survives JSON exactly (running clusters keep theirs in the state file)."""

import json
from pathlib import Path

import pytest

from emu.topology import load
from emu.topology.serialize import from_dict, to_dict

FILES = sorted(Path(__file__).resolve().parents[2].glob("namespaces/*.toml"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_round_trip(path):
    t = load(path, ["link.loss=1%"])
    assert from_dict(json.loads(json.dumps(to_dict(t)))) == t

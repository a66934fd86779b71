# SPDX-License-Identifier: GPL-2.0-only
"""The generators' parameter ranges agree with the address plan they feed."""

from __future__ import annotations

from pathlib import Path

import pytest

import emu.cluster  # noqa: F401  (registers the [nic] and [switch] checkers)
from emu.topology import TopologyError, load

ROOT = Path(__file__).resolve().parents[2]


def test_leaves_reach_the_address_plans_255_host_subnets():
    """The README promises 255 host subnets per plane; ``leaves`` stopped at 250."""
    t = load(ROOT / "namespaces/leaf-spine.toml", ["leaves=255", "hosts_per_leaf=1",
                                                   "spines=1"])
    leaf255 = t.nodes["leaf255"]
    assert leaf255.role == "leaf"
    h = t.links_of("h255")[0].end("h255")
    assert str(h.ipv4.ip) == "10.0.255.11"


def test_one_leaf_more_than_the_plan_holds_is_refused():
    with pytest.raises(TopologyError, match=r"leaves.*1\.\.255"):
        load(ROOT / "namespaces/leaf-spine.toml", ["leaves=256"])

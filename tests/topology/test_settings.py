# SPDX-License-Identifier: GPL-2.0-only
"""emu.topology.settings: the check of a link event's target (``emu link``, ``[[event]]``)."""

from __future__ import annotations

import pytest

from emu.topology import Topology, generators
from emu.topology.settings import TargetError, planes, resolve_target


@pytest.fixture(scope="module")
def mp() -> Topology:
    return generators.multi_plane(planes=2, spines=1, leaves=1, hosts_per_leaf=2)


@pytest.fixture(scope="module")
def ls() -> Topology:
    return generators.leaf_spine(spines=2, leaves=2, hosts_per_leaf=2)


def test_targets_that_name_links(mp: Topology, ls: Topology) -> None:
    assert planes(mp) == [0, 1] and planes(ls) == []
    assert resolve_target(mp, "plane:1") == ("plane:1", False, False)
    assert resolve_target(ls, "spine1") == ("spine1", False, False)
    assert resolve_target(ls, "leaf1-spine1") == ("leaf1-spine1", True, False)
    assert resolve_target(ls, "spine1:leaf1") == ("leaf1-spine1", True, True)


@pytest.mark.parametrize("topo,target,message", [
    ("mp", "plane:7", "no plane 7 in cluster c (its planes: 0, 1)"),
    ("ls", "plane:1", "no plane 1 in cluster c: it has no planes"),
    ("ls", "plane:x", "'plane:x': bad plane number: expected an integer, got 'x'"),
    ("ls", "plane:-1", "'plane:-1': bad plane number: -1 is out of range 0.."),
    ("ls", "h1:h9", "no link 'h1:h9' in cluster c (no node 'h9')"),
    ("ls", "h1:h2", "no link 'h1:h2' in cluster c"),
    ("ls", "leaf9", "unknown target 'leaf9' in cluster c: expected a link name, 'A:B', "
                    "a node name or 'plane:N'"),
])
def test_a_target_that_names_no_link_is_refused(request: pytest.FixtureRequest, topo: str,
                                                target: str, message: str) -> None:
    with pytest.raises(TargetError) as e:
        resolve_target(request.getfixturevalue(topo), target, within="cluster c")
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_node_without_links_is_refused() -> None:
    t = generators.pair()
    t.nodes["h3"] = type(t.nodes["h1"])("h3", "host")
    with pytest.raises(TargetError, match="node 'h3' of this topology has no links"):
        resolve_target(t, "h3")

# SPDX-License-Identifier: GPL-2.0-only
"""Cluster topologies: declarative TOML files → a validated :class:`Topology`.

``load("namespaces/leaf-spine.toml", ["hosts_per_leaf=8"])`` reads, validates and
resolves a file (names, interfaces, addresses, link settings, events); see
:mod:`emu.topology.loader` for the format, :mod:`emu.topology.generators` for
naming and :mod:`emu.topology.addressing` for the address plan.
"""

from emu.topology.generators import GENERATORS, leaf_spine, multi_plane, pair, rail_optimized
from emu.topology.loader import load, loads
from emu.topology.model import (
    Direction,
    Endpoint,
    Event,
    Link,
    Node,
    Topology,
    TopologyError,
)

__all__ = [
    "Direction", "Endpoint", "Event", "Link", "Node", "Topology", "TopologyError",
    "GENERATORS", "leaf_spine", "load", "loads", "multi_plane", "pair", "rail_optimized",
]

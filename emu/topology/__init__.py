# SPDX-License-Identifier: GPL-2.0-only
"""Cluster topologies: declarative TOML files → a validated :class:`Topology`."""

from emu.topology.model import (
    Direction,
    Endpoint,
    Event,
    Link,
    Node,
    Topology,
    TopologyError,
)

__all__ = ["Direction", "Endpoint", "Event", "Link", "Node", "Topology", "TopologyError"]

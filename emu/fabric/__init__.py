# SPDX-License-Identifier: GPL-2.0-only
"""The emulated hardware: namespaces, veths, ECMP and SRv6 routes — built with netlink
(and ``tc`` for the SRv6 tc BPF datapath, :mod:`emu.fabric.srv6bpf`).

Public API::

    Fabric(topology, cluster=None)      # context manager; .up() / .down() / .ns(node)
    down(cluster)                       # by state file, works after a SIGKILLed up
    clean(all_clusters=False)           # leftovers (crashed ups, dead daemons), by state files
    status(cluster) -> dict; render(status_dict) -> str
    exec_argv(cluster, node, argv) -> argv for running inside a node
    build_and_destroy(topology) -> timings (benchmark hook)
    routes.srv6_paths(topology, host)   # SRv6 path table: {address: {port, src, paths}}
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from emu.fabric.state import clean, clusters, down
from emu.fabric.status import exec_argv, render, status

if TYPE_CHECKING:
    from emu.fabric.build import Fabric, FabricError, build_and_destroy

#: the builder (and pyroute2 with it) is imported on first use: a daemon that needs a
#: small module of the package (a switch daemon: ``bpfobj``, ``netns``) no longer loads
#: it (0.14 s of each switch daemon's start)
_LAZY = {"Fabric": "build", "FabricError": "build", "build_and_destroy": "build"}

__all__ = ["Fabric", "FabricError", "build_and_destroy", "clean", "clusters", "down",
           "exec_argv", "render", "status"]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"emu.fabric.{mod}"), name)
    globals()[name] = value
    return value

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

from emu.fabric.build import Fabric, FabricError, build_and_destroy
from emu.fabric.state import clean, clusters, down
from emu.fabric.status import exec_argv, render, status

__all__ = ["Fabric", "FabricError", "build_and_destroy", "clean", "clusters", "down",
           "exec_argv", "render", "status"]

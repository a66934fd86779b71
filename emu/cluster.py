# SPDX-License-Identifier: GPL-2.0-only
"""A running cluster: the fabric, its link settings, its schedule, and its model.

:class:`emu.fabric.Fabric` builds namespaces, veths and routes; this module
adds what makes it the user's cluster: link impairments from the topology
file, the scheduled events (a small background process), an event log, and
the resolved model kept in the state file so later commands (``emu link``,
``emu impair``, ``emu capture``) act on the cluster as built.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from emu.fabric import Fabric, state
from emu.fabric import down as fabric_down
from emu.topology import Topology
from emu.topology.serialize import from_dict, to_dict


class ClusterError(RuntimeError):
    """A cluster command that cannot be carried out (no such cluster, ambiguous name …)."""


def event_log(cluster: str) -> str:
    """The JSON-lines log of every link change of ``cluster`` (kept after ``emu down``)."""
    return os.path.join(state.STATE_DIR, "logs", f"{cluster}.events.jsonl")


def up(topology: Topology, cluster: str | None = None, *, schedule: bool = True,
       progress=print) -> Fabric:
    """Build the cluster, apply its link settings, start its schedule. All or nothing."""
    from emu.fabric import linkctl

    fabric = Fabric(topology, cluster=cluster)
    fabric.up()
    name = fabric.cluster
    log = event_log(name)
    try:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with state.locked():
            st = state.load(name)
            assert st is not None
            st["model"] = to_dict(topology)
            st["event_log"] = log
            state.save(st)
        impaired = [lk for lk in topology.links
                    if not (lk.a_to_b.is_default() and lk.b_to_a.is_default())]
        for lk in impaired:
            linkctl.apply_link(name, lk, event_log=log)
        initially_down = [lk for lk in topology.links if not lk.up]
        for lk in initially_down:
            linkctl.set_link(name, lk, False, event_log=log)
        if initially_down:
            reconverge(name, topology)
        if impaired:
            progress(f"applied link settings to {len(impaired)} link(s) "
                     f"({linkctl.features().describe()})")
        with state.locked():
            st = state.load(name)
            assert st is not None
            st["up_done"] = time.time()
            state.save(st)
        if schedule and topology.events:
            pid = _start_scheduler(name)
            progress(f"scheduled {len(topology.events)} event(s) (scheduler pid {pid}, "
                     f"log {log})")
    except BaseException:
        fabric.down()
        raise
    return fabric


def _start_scheduler(cluster: str) -> int:
    log = open(event_log(cluster) + ".scheduler.log", "ab")  # noqa: SIM115 - child keeps it
    proc = subprocess.Popen([sys.executable, "-m", "emu.scheduler", cluster],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True)
    log.close()
    state.add_pid(cluster, proc.pid, "scheduler")
    return proc.pid


def down(cluster: str) -> dict[str, int]:
    """Tear ``cluster`` down by its state file: daemons, scheduler, namespaces."""
    try:
        return fabric_down(cluster)
    except KeyError:
        raise ClusterError(f"no cluster {cluster!r} is up (no {state.path(cluster)})") from None


def resolve(cluster: str | None) -> str:
    """The cluster a command means: the one named, or the only one that is up."""
    names = state.clusters()
    if cluster:
        if cluster not in names:
            raise ClusterError(f"no cluster {cluster!r} is up"
                               + (f" (up: {', '.join(names)})" if names else ""))
        return cluster
    if len(names) == 1:
        return names[0]
    if not names:
        raise ClusterError("no cluster is up (`emu up TOPOLOGY`)")
    raise ClusterError(f"several clusters are up ({', '.join(names)}): say which with --cluster")


def model(cluster: str) -> Topology:
    """The resolved topology ``cluster`` was built from."""
    st = state.load(cluster)
    if st is None or "model" not in st:
        raise ClusterError(f"cluster {cluster!r} has no model in its state file "
                           f"(still coming up, or built by an older emu)")
    return from_dict(st["model"])


def save_model(cluster: str, topology: Topology) -> None:
    """Record live changes (impairments, link state) so status shows them."""
    with state.locked():
        st = state.load(cluster)
        if st is not None:
            st["model"] = to_dict(topology)
            state.save(st)


def reconverge(cluster: str, topology: Topology) -> int:
    """Re-route around every link that is down, as a converged routing protocol would.

    Taking a veth down removes the kernel's single-path routes through it and
    only the local member of multipath routes; the far side of the fabric would
    keep hashing flows into a dead end. Returns the number of routes written.
    """
    down_links = {lk.name for lk in topology.links if not lk.up}
    return Fabric(topology, cluster=cluster).reconverge(down_links)


def set_links(cluster: str, topology: Topology, names: list[str], up: bool) -> None:
    """Record links as up/down in the model, re-route, and save the model."""
    for lk in topology.links:
        if lk.name in names:
            lk.up = up
    reconverge(cluster, topology)
    save_model(cluster, topology)


def split_node(spec: str, cluster: str | None) -> tuple[str, str]:
    """``C:node`` or ``node`` (with the default cluster) → (cluster, node)."""
    if ":" in spec:
        c, node = spec.split(":", 1)
        return resolve(c), node
    return resolve(cluster), spec


def remove_logs(cluster: str) -> None:
    for p in (event_log(cluster), event_log(cluster) + ".scheduler.log"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)

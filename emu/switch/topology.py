# SPDX-License-Identifier: GPL-2.0-only
"""The ``[switch]`` section of a topology file → one :class:`SwitchConfig` per switch.

    [switch]
    pipeline = true             # run `emu switchd` on every switch (default: true
                                # when the section is present)
    trimmed_dscp = 30           # any switch-wide key of SwitchConfig
    [switch.port]               # every port of every switch: port and class keys
    rate = "10gbit"
    kmin = "20KB"
    trim = true
    [[switch.override]]         # later entries win; shell wildcards
    node = "leaf*"
    port = "h1"                 # default "*"
    rate = "1gbit"
    "c3.lossless" = true        # one class only

``host_facing`` is derived from the topology (the port's peer is a host), so
trimmed packets on a last hop carry TRIMMED_LASTHOP without anyone listing
ports. A port with no ``rate`` of its own serializes at its cable's (the rate of the
link direction it sends on, ``[defaults.link] rate``): a switch's egress queue is where
a fabric's congestion builds, so turning the pipeline on gives every port its queue,
ECN marking and trimming at the rate the fabric has — without it a 400 Gb/s leaf-spine
with ``switch.pipeline = true`` queued in the link's tbf alone and never marked.
Validation builds every switch's config once at load time, so a bad key fails ``emu up``
before anything is created.
"""

from __future__ import annotations

import fnmatch
from dataclasses import fields
from typing import Any

from emu.switch.config import ConfigError, PortConfig, SwitchConfig, apply_settings
from emu.topology import sections
from emu.topology.model import Topology

_SWITCH_WIDE = {f.name for f in fields(SwitchConfig)} - {"ports"}
_SECTION = {"pipeline", "port", "override"} | _SWITCH_WIDE


def check_section(raw: dict[str, Any], topology: Topology) -> tuple[str, str] | None:
    """``(key path, reason)`` of the first problem in a ``[switch]`` table, or None."""
    for key in raw:
        if key not in _SECTION:
            return f"switch.{key}", (f"unknown key {key!r} (allowed: pipeline, port, override, "
                                     f"{', '.join(sorted(_SWITCH_WIDE))})")
    if "pipeline" in raw and not isinstance(raw["pipeline"], bool):
        return "switch.pipeline", f"expected true or false, got {raw['pipeline']!r}"
    if "port" in raw and not isinstance(raw["port"], dict):
        return "switch.port", "expected a table ([switch.port])"
    overrides = raw.get("override", [])
    if not isinstance(overrides, list) or not all(isinstance(o, dict) for o in overrides):
        return "switch.override", "expected an array of tables ([[switch.override]])"
    switches = [n.name for n in topology.switches()]
    if not switches:
        return "switch", f"topology {topology.name!r} has no switches for a pipeline to run on"
    for i, o in enumerate(overrides):
        if "node" not in o:
            return f"switch.override[{i}]", "missing node = \"<switch name or glob>\""
        if not fnmatch.filter(switches, str(o["node"])):
            return f"switch.override[{i}].node", f"matches no switch ({o['node']!r})"
    try:  # settings are checked even where no switch would use them (a pair, a typo'd glob)
        SwitchConfig.from_dict({k: v for k, v in raw.items() if k in _SWITCH_WIDE})
        apply_settings(PortConfig(), dict(raw.get("port", {})), "switch.port")
        for i, o in enumerate(overrides):
            apply_settings(PortConfig(), {k: v for k, v in o.items() if k not in ("node", "port")},
                           f"switch.override[{i}]")
        configs(topology, raw)
    except ConfigError as e:
        return "switch", str(e)
    return None


sections.register("switch", check_section)


def enabled(topology: Topology) -> bool:
    """Whether ``emu up`` starts a switch daemon on every switch."""
    return bool(topology.switch) and bool(topology.switch.get("pipeline", True))


def configs(topology: Topology, raw: dict[str, Any] | None = None) -> dict[str, SwitchConfig]:
    """One SwitchConfig per switch node, ports resolved (raises ConfigError)."""
    raw = topology.switch if raw is None else raw
    wide = {k: v for k, v in raw.items() if k in _SWITCH_WIDE}
    port_defaults = dict(raw.get("port", {}))
    overrides = raw.get("override", [])
    out = {}
    for node in topology.switches():
        cfg = SwitchConfig.from_dict(wide)
        for lk in topology.links_of(node.name):
            end, peer = lk.end(node.name), lk.peer(node.name)
            where = f"switch {node.name} port {end.ifname}"
            port = apply_settings(PortConfig(), port_defaults, where)
            for o in overrides:
                if fnmatch.fnmatch(node.name, str(o["node"])) and \
                        fnmatch.fnmatch(end.ifname, str(o.get("port", "*"))):
                    apply_settings(port, {k: v for k, v in o.items() if k not in ("node", "port")},
                                   where)
            port.host_facing = topology.nodes[peer.node].kind == "host"
            if port.rate is None:  # the port serializes at its cable's rate (docstring)
                port.rate = (lk.a_to_b if lk.a is end else lk.b_to_a).rate_bps
            cfg.ports[end.ifname] = port
        out[node.name] = cfg
    return out


def user_space(topology: Topology) -> set[str]:
    """The switches whose daemons will do per-packet work in user space (the capacity
    model charges only these; kernel-datapath switches cost what kernel forwarding
    does, which ping's figure already holds). Empty without a pipeline."""
    from emu.switch.kernel import predict

    if not enabled(topology):
        return set()
    return {n for n, c in configs(topology).items() if predict(c) == "user"}

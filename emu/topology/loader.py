# SPDX-License-Identifier: GPL-2.0-only
"""Topology files → a validated, fully resolved :class:`Topology`.

File format (TOML; every table optional except ``[topology]``)::

    [topology]      kind = "pair"|"leaf-spine"|"rail-optimized"|"multi-plane"|"custom"
                    name = "ls" (cluster name; default: file stem), description = "…"
    [params]        generator parameters (see emu.topology.generators.GENERATORS)
    [defaults.link] mtu (9000; 1280..65535: every port has IPv6), up (true), rate, loss,
                    ecn_ce, duplicate, delay, jitter, seed (0..2**32-1 or "random";
                    default 1: which packets loss/ecn_ce/duplicate pick),
                    a_to_b = {…}, b_to_a = {…} (per-direction values win)
    [[link]]        generated kinds: match = "leaf1-spine1" | "leaf1:spine*" + settings
                    custom: a, b, a_if, b_if, plane + settings
    [[node]]        custom only: name, kind = "host"|"switch", role, plane
    [[event]]       at = "2s", action = "down"|"up"|"impair", target = link name |
                    "A:B" | node | "plane:N", direction, rate, loss, ecn_ce, duplicate,
                    delay, jitter, seed (at, rates, delays: fabric time, [time] scale)
    [routing]       mode = "ecmp"|"srv6", hash_seed = 0..2**32-1,
                    srv6 = "auto"|"kernel"|"bpf" (which datapath serves SRv6: the kernel's
                    seg6local, tc BPF, or the first of them this machine has)

``--set`` overrides (``load(path, ["hosts_per_leaf=8", "link.mtu=1500"])``):
a bare key or ``params.<k>`` sets a generator parameter; ``link.<k>`` (or
``defaults.link.<k>``, also ``link.a_to_b.rate``) sets a link default;
``routing.<k>`` sets routing. Values are read as TOML when they parse
(``8``, ``0.01``, ``false``) and as strings otherwise (``10gbit``).

Every problem raises :class:`TopologyError` with a one-line message
``file[:line]: key.path: what is wrong``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from emu.fabricclock import check_scale
from emu.topology import addressing, sections
from emu.topology.generators import GENERATORS, Builder, Size
from emu.topology.locate import Locator, line_index, toml_syntax
from emu.topology.model import MAX_IFNAME, Topology, TopologyError
from emu.topology.settings import (
    apply_overrides,
    check_keys,
    check_table,
    match_links,
    parse_events,
    parse_settings,
    parse_value,
)
from emu.topology.units import UnitError, parse_int, parse_prob, parse_time

#: ``check_size(size, has_switch_section)``: raises to refuse a topology before generation
SizeCheck = Callable[[Size, bool], None]

__all__ = ["load", "loads", "KINDS", "NODE_NAME_RE", "MAX_NODE_NAME", "MAX_CLUSTER_NAME"]

KINDS = (*GENERATORS, "custom")
NODE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MAX_NODE_NAME = 32
MAX_CLUSTER_NAME = 12
_TOP = {"topology", "params", "defaults", "link", "node", "event", "routing", "switch",
        "nic", "time", "latency"}
_IFNAME_BAD = re.compile(r"[/:\s]")


def load(path: str | Path, overrides: Mapping[str, object] | Sequence[str] | None = None,
         name: str | None = None, check_size: SizeCheck | None = None) -> Topology:
    """Read, validate and resolve a topology file (``name`` overrides the cluster name).

    ``check_size(size, has_switch_section)`` runs once the parameters are known and
    before anything is generated: it raises to refuse a topology too big to build."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TopologyError(str(path), f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise TopologyError(str(path), f"not UTF-8 text: {e.reason}") from None
    return loads(text, str(path), overrides, name, stem=path.stem, check_size=check_size)


def loads(text: str, source: str = "<string>",
          overrides: Mapping[str, object] | Sequence[str] | None = None,
          name: str | None = None, stem: str | None = None,
          check_size: SizeCheck | None = None) -> Topology:
    """Like :func:`load` for text already in memory; ``source`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TopologyError(*toml_syntax(source, e)) from None
    loc = Locator(source, line_index(text))
    _apply_set(data, overrides, loc)
    return _build(data, loc, name, stem, check_size)


def _apply_set(data: dict, overrides: Mapping[str, object] | Sequence[str] | None,
               loc: Locator) -> None:
    """Fold ``--set k=v`` into the parsed file so the normal checks apply to them."""
    if overrides is None:
        return
    if isinstance(overrides, Mapping):
        items = list(overrides.items())
    else:
        items = []
        for arg in overrides:
            if "=" not in arg:
                raise TopologyError(f"{loc.source}: --set {arg}", "expected KEY=VALUE")
            k, v = arg.split("=", 1)
            items.append((k.strip(), v.strip()))
    for key, value in items:
        arg = f"{key}={value}"
        if isinstance(value, str):
            try:
                value = tomllib.loads(f"v = {value}")["v"]
            except tomllib.TOMLDecodeError:
                pass
        parts = key.split(".")
        if parts[0] == "link":
            parts = ["defaults", *parts]
        elif len(parts) == 1:
            parts = ["params", *parts]
        if parts[0] not in ("params", "defaults", "routing", "switch", "nic", "time", "latency") \
                or len(parts) < 2 or not all(parts):
            raise TopologyError(f"{loc.source}: --set {arg}", f"unknown setting {key!r}: use a "
                                "parameter name, link.<key>, routing.<key>, switch.<key>, "
                                "time.<key>, latency.<key> or nic.<transport>.<key>")
        table = data
        for p in parts[:-1]:
            table = table.setdefault(p, {})
            if not isinstance(table, dict):
                raise TopologyError(f"{loc.source}: --set {arg}", f"{p} is not a table in the file")
        table[parts[-1]] = value
        loc.from_set[".".join(parts)] = arg


def _workers(size: Size, data: dict[str, Any]) -> Size:
    """``size`` with the ``[nic] workers`` the file (and its ``--set``s) ask for: how many
    processes the NIC daemons take decides their memory."""
    nic = data.get("nic")
    return replace(size, nic_workers=nic.get("workers", "auto")) if isinstance(nic, dict) \
        else size


def _build(data: dict, loc: Locator, name: str | None, stem: str | None,
           check_size: SizeCheck | None = None) -> Topology:
    check_keys(data, _TOP, "", loc)
    top = check_table(data.get("topology"), "topology", loc) if "topology" in data else None
    if top is None:
        raise loc.error("topology", "missing [topology] table with kind = one of "
                        + ", ".join(KINDS))
    check_keys(top, {"kind", "name", "description"}, "topology", loc)
    kind = top.get("kind")
    if "kind" not in top:
        raise loc.error("topology.kind", f"missing: say which topology, kind = one of "
                                         f"{', '.join(KINDS)}")
    if kind not in KINDS:
        raise loc.error("topology.kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    for key in ("params", "defaults", "routing"):
        if key in data:
            check_table(data[key], key, loc)
    for key in ("link", "node", "event"):
        if key in data and not isinstance(data[key], list):
            raise loc.error(key, f"expected an array of tables ([[{key}]])")

    if kind == "custom":
        if data.get("params"):
            raise loc.error("params." + next(iter(data["params"])),
                            "unknown parameter: kind 'custom' takes no parameters")
        if check_size is not None:
            nodes = [n for n in data.get("node", []) if isinstance(n, dict)]
            hosts = sum(1 for n in nodes if n.get("kind", "host") == "host")
            check_size(_workers(Size(hosts, len(nodes) - hosts, len(data.get("link", []))),
                                data), "switch" in data)
        topo = _custom(data, loc)
        params: dict[str, object] = {}
    else:
        if "node" in data:
            raise loc.error("node[0]", "[[node]] is only allowed with kind = 'custom'")
        gen = GENERATORS[kind]
        params = {k: p.default for k, p in gen.params.items()}
        for key, value in data.get("params", {}).items():
            if key not in gen.params:
                raise loc.error(f"params.{key}", f"unknown parameter for {kind} "
                                f"(known: {', '.join(gen.params)})")
            p = gen.params[key]
            params[key] = parse_value(lambda v, p=p: parse_int(v, p.lo, p.hi), value,
                                      f"params.{key}", loc)
        if check_size is not None:
            check_size(_workers(gen.size(**params), data), "switch" in data)
        topo = gen.func(**params)
    topo.source = loc.source
    topo.params = params
    topo.name = _cluster_name(top, name, stem, loc)
    topo.kind = kind
    topo.declared_name = top["name"] if isinstance(top.get("name"), str) else (stem or "")
    _check_graph(topo, loc, kind == "custom")

    defaults = check_table(data.get("defaults", {}), "defaults", loc)
    check_keys(defaults, {"link"}, "defaults", loc)
    dl = check_table(defaults.get("link", {}), "defaults.link", loc)
    base = parse_settings(dl, "defaults.link", loc)
    for lk in topo.links:
        base.apply(lk)
    if kind == "custom":
        for i, entry in enumerate(data.get("link", [])):
            parse_settings(entry, f"link[{i}]", loc, extra=_CUSTOM_LINK).apply(topo.links[i])
    else:
        apply_overrides(topo, data.get("link", []), loc)

    routing = check_table(data.get("routing", {}), "routing", loc)
    check_keys(routing, {"mode", "hash_seed", "srv6"}, "routing", loc)
    topo.routing = routing.get("mode", "ecmp")
    if topo.routing not in ("ecmp", "srv6"):
        raise loc.error("routing.mode", f"{topo.routing!r} is not one of ecmp, srv6")
    topo.srv6 = routing.get("srv6", "auto")
    if topo.srv6 not in ("auto", "kernel", "bpf"):
        raise loc.error("routing.srv6", f"{topo.srv6!r} is not one of auto, kernel, bpf")
    if "hash_seed" in routing:
        topo.hash_seed = parse_value(lambda v: parse_int(v, 0, 2**32 - 1), routing["hash_seed"],
                                     "routing.hash_seed", loc)
    topo.events = parse_events(topo, data.get("event", []), loc)
    if "switch" in data:
        section = check_table(data["switch"], "switch", loc)
        _check_section("switch", section, topo, loc)
        topo.switch = section
    if "nic" in data:
        nic = check_table(data["nic"], "nic", loc)
        _check_section("nic", nic, topo, loc)
        topo.nic = {t: (dict(o) if isinstance(o, dict) else o) for t, o in nic.items()}
        if "line_rate" in topo.nic:
            from emu.topology.units import parse_rate

            topo.nic["line_rate"] = parse_rate(topo.nic["line_rate"])  # type: ignore[assignment]
    if "time" in data:
        topo.time = _time_section(check_table(data["time"], "time", loc), loc)
    if "latency" in data:
        lat = check_table(data["latency"], "latency", loc)
        check_keys(lat, {"nic", "switch"}, "latency", loc)
        for k, v in lat.items():
            try:
                topo.latency[k] = parse_time(v)
            except UnitError as e:
                raise loc.error(f"latency.{k}", str(e)) from None
    node_index = {n: i for i, n in enumerate(topo.nodes)}
    addressing.assign(topo, lambda n: loc.where(f"node[{node_index[n]}]") if kind == "custom"
                      else loc.where("params"))
    _check_mtu(topo, data.get("link", []), loc, kind == "custom")
    return topo


#: the smallest MTU of a link that carries IPv6 (RFC 8200 §5)
IPV6_MIN_MTU = 1280


def _time_section(tsec: dict, loc: Locator) -> dict[str, object]:
    """``[time]`` (DESIGN.md, Fabric time): ``scale`` = "auto" or a number >= 1,
    ``senders`` (how many host ports send at once, for "auto"; default all) and
    ``overhead`` (the largest share of the fabric's base round trip emu's own round trip
    may add, for "auto"; default 5 %)."""
    check_keys(tsec, {"scale", "senders", "overhead"}, "time", loc)
    out: dict[str, object] = {}
    if "scale" in tsec:
        v = tsec["scale"]
        if isinstance(v, str) and v.strip().lower() == "auto":
            out["scale"] = "auto"
        else:
            try:
                out["scale"] = check_scale(v)
            except ValueError as e:
                raise loc.error("time.scale", str(e)) from None
    if "senders" in tsec:
        try:
            out["senders"] = parse_int(tsec["senders"], lo=1)
        except UnitError as e:
            raise loc.error("time.senders", str(e)) from None
    if "overhead" in tsec:
        try:
            f = parse_prob(tsec["overhead"])
        except UnitError as e:
            raise loc.error("time.overhead", str(e)) from None
        if not 0 < f < 1:
            raise loc.error("time.overhead", f"{tsec['overhead']!r} must be above 0 % and "
                            "below 100 % (e.g. '5%')")
        out["overhead"] = f
    return out


def _check_mtu(topo: Topology, entries: list, loc: Locator, custom: bool) -> None:
    """A link whose ports get IPv6 addresses (the address plan gives every port one) needs
    an MTU of at least 1280: the kernel refuses an IPv6 address on a smaller one, which
    otherwise surfaced only half way through ``emu up``. The error names the key that set
    the MTU: the link's own ``[[link]]`` entry (the last that matched it), else
    ``[defaults.link]`` (or the ``--set`` that changed either)."""
    for lk in topo.links:
        if lk.mtu >= IPV6_MIN_MTU or not (lk.a.ipv6 or lk.b.ipv6):
            continue
        key = "defaults.link.mtu"
        if custom:
            i = topo.links.index(lk)
            if i < len(entries) and "mtu" in entries[i]:
                key = f"link[{i}].mtu"
        else:
            for i, entry in enumerate(entries):
                if "mtu" in entry and any(m is lk for m, _ in match_links(topo, entry["match"])):
                    key = f"link[{i}].mtu"
        raise loc.error(key, f"mtu {lk.mtu} is too small for link {lk.name}: its ports get "
                             f"IPv6 addresses (docs/addressing.md), and IPv6 needs an MTU of at "
                             f"least {IPV6_MIN_MTU}")


_CUSTOM_LINK = {"a", "b", "a_if", "b_if", "plane"}


def _cluster_name(top: dict, name: str | None, stem: str | None, loc: Locator) -> str:
    if name is not None:
        where, value = f"{loc.source}: --name", name
    elif "name" in top:
        where, value = loc.where("topology.name"), top["name"]
    else:
        where, value = f"{loc.source}: topology.name (default: the file name)", stem or "emu"
    if not isinstance(value, str):
        raise TopologyError(where, f"expected a string, got {value!r}")
    if not NODE_NAME_RE.match(value) or len(value) > MAX_CLUSTER_NAME:
        raise TopologyError(where, f"cluster name {value!r} must match [a-z0-9][a-z0-9-]* and be "
                            f"at most {MAX_CLUSTER_NAME} characters (set [topology] name or "
                            "use --name)")
    return value


def _custom(data: dict, loc: Locator) -> Topology:
    """``[[node]]`` + ``[[link]]`` (a, b, a_if, b_if, plane) → an unaddressed topology."""
    b = Builder()
    first: dict[str, int] = {}
    for i, entry in enumerate(data.get("node", [])):
        path = f"node[{i}]"
        entry = check_table(entry, path, loc)
        check_keys(entry, {"name", "kind", "role", "plane"}, path, loc)
        nname = entry.get("name")
        _check_node_name(nname, f"{path}.name", loc)
        if nname in first:
            raise loc.error(f"{path}.name", f"duplicate node name {nname!r} "
                            f"(first at node[{first[nname]}])")
        first[nname] = i
        nkind = entry.get("kind")
        if nkind not in ("host", "switch"):
            raise loc.error(f"{path}.kind", f"{nkind!r} is not one of host, switch")
        role = entry.get("role", "host" if nkind == "host" else "")
        if not isinstance(role, str):
            raise loc.error(f"{path}.role", f"expected a string, got {role!r}")
        plane = entry.get("plane")
        if plane is not None:
            plane = parse_value(lambda v: parse_int(v, 0, 253), plane, f"{path}.plane", loc)
        b.node(nname, nkind, role, plane)
    if not b.nodes:
        raise loc.error("node", "kind 'custom' needs [[node]] entries")
    for i, entry in enumerate(data.get("link", [])):
        path = f"link[{i}]"
        entry = check_table(entry, path, loc)
        ends = []
        for key in ("a", "b"):
            n = entry.get(key)
            if not isinstance(n, str):
                raise loc.error(f"{path}.{key}", "missing or not a string: the node at this end")
            if n not in b.nodes:
                raise loc.error(f"{path}.{key}", f"unknown node {n!r}")
            ends.append(n)
        if ends[0] == ends[1]:
            raise loc.error(f"{path}.b", f"link from {ends[0]!r} to itself")
        ifs = []
        for key in ("a_if", "b_if"):
            v = entry.get(key)
            if v is not None and not isinstance(v, str):
                raise loc.error(f"{path}.{key}", f"expected a string, got {v!r}")
            ifs.append(v)
        plane = entry.get("plane")
        if plane is not None:
            plane = parse_value(lambda v: parse_int(v, 0, 253), plane, f"{path}.plane", loc)
        else:
            plane = next((b.nodes[n].plane for n in ends if b.nodes[n].plane is not None), None)
        b.link(ends[0], ends[1], plane, ifs[0], ifs[1])
    return b.build()


def _check_node_name(value: object, path: str, loc: Locator) -> None:
    if not isinstance(value, str):
        raise loc.error(path, f"missing or not a string: {value!r}")
    if not NODE_NAME_RE.match(value) or len(value) > MAX_NODE_NAME:
        raise loc.error(path, f"node name {value!r} must match [a-z0-9][a-z0-9-]* and be at most "
                        f"{MAX_NODE_NAME} characters (it becomes part of a namespace name)")


def _check_graph(topo: Topology, loc: Locator, custom: bool) -> None:
    """Interface names: non-empty, ≤ 15 characters, legal for Linux, unique per node."""
    seen: dict[tuple[str, str], int] = {}
    for i, lk in enumerate(topo.links):
        for key, end in (("a", lk.a), ("b", lk.b)):
            path = f"link[{i}].{key}_if" if custom else "params"
            name = end.ifname
            problem = None
            if not name or name in (".", "..") or _IFNAME_BAD.search(name):
                problem = "is not a valid Linux interface name"
            elif len(name) > MAX_IFNAME:
                problem = f"is {len(name)} characters, more than Linux allows ({MAX_IFNAME})"
            elif (end.node, name) in seen:
                problem = f"is used twice (also by link[{seen[end.node, name]}])"
            if problem:
                raise loc.error(path, f"interface {name!r} on {end.node!r} {problem}")
            seen[end.node, name] = i


def _check_section(name: str, table: dict, topo: Topology, loc: Locator) -> None:
    """Run the checker the section's owner registered (:mod:`emu.topology.sections`)."""
    check = sections.checker(name)
    if check is None:
        raise loc.error(name, f"[{name}] cannot be checked: its checker is not loaded "
                              f"(import {sections.OWNERS[name]})")
    problem = check(table, topo)
    if problem:
        raise loc.error(*problem)

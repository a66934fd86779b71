# SPDX-License-Identifier: GPL-2.0-only
"""Link settings (``[defaults.link]``, ``[[link]]``) and scheduled ``[[event]]`` entries.

A settings table holds ``mtu``, ``up`` and the per-direction keys ``rate``,
``loss``, ``ecn_ce``, ``duplicate``, ``delay``, ``jitter``, ``seed`` (which packets the
probabilities pick: :class:`~emu.topology.model.Direction`); the latter apply to both
directions unless repeated inside an ``a_to_b`` / ``b_to_a`` table, which wins
for its direction. Parsed values use :class:`~emu.topology.model.Direction`'s
field names (``rate_bps``, ``delay_s`` …) so applying them is a plain replace.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass, field

from emu.topology.locate import Locator
from emu.topology.model import Event, Link, Topology
from emu.topology.units import (
    UnitError,
    parse_int,
    parse_prob,
    parse_rate,
    parse_seed,
    parse_time,
)

__all__ = ["LinkSettings", "parse_settings", "apply_overrides", "parse_events", "DIR_KEYS",
           "TargetError", "planes", "resolve_target"]

#: file key → (Direction field, parser)
DIR_KEYS = {
    "rate": ("rate_bps", parse_rate),
    "loss": ("loss", parse_prob),
    "ecn_ce": ("ecn_ce", parse_prob),
    "duplicate": ("duplicate", parse_prob),
    "delay": ("delay_s", parse_time),
    "jitter": ("jitter_s", parse_time),
    "seed": ("seed", parse_seed),
}
LINK_KEYS = {"mtu", "up", "a_to_b", "b_to_a", *DIR_KEYS}
ACTIONS = ("down", "up", "impair")
DIRECTIONS = ("a_to_b", "b_to_a", "both")


@dataclass
class LinkSettings:
    """What one settings table asks for; None / missing keys leave a link as it is."""

    mtu: int | None = None
    up: bool | None = None
    a_to_b: dict[str, object] = field(default_factory=dict)
    b_to_a: dict[str, object] = field(default_factory=dict)

    def apply(self, link: Link, swapped: bool = False) -> None:
        """Apply to ``link``; ``swapped``: the user wrote ``B:A``, so their a_to_b is our b_to_a."""
        if self.mtu is not None:
            link.mtu = self.mtu
        if self.up is not None:
            link.up = self.up
        fwd, rev = (self.b_to_a, self.a_to_b) if swapped else (self.a_to_b, self.b_to_a)
        link.a_to_b = dataclasses.replace(link.a_to_b, **fwd)
        link.b_to_a = dataclasses.replace(link.b_to_a, **rev)


def check_table(value: object, path: str, loc: Locator) -> dict:
    if not isinstance(value, dict):
        raise loc.error(path, f"expected a table, got {type(value).__name__} {value!r}")
    return value


def check_keys(table: dict, allowed: set[str] | tuple[str, ...], path: str, loc: Locator) -> None:
    for key in table:
        if key not in allowed:
            sub = f"{path}.{key}" if path else key
            raise loc.error(sub, f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})")


def parse_value(parser, value: object, path: str, loc: Locator):  # noqa: ANN001, ANN201
    """Run a unit parser; its UnitError becomes a located TopologyError."""
    try:
        return parser(value)
    except UnitError as e:
        raise loc.error(path, str(e)) from None


def _parse_dir(table: dict, path: str, loc: Locator) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in table.items():
        if key in DIR_KEYS:
            fname, parser = DIR_KEYS[key]
            out[fname] = parse_value(parser, value, f"{path}.{key}", loc)
    return out


def parse_settings(table: dict, path: str, loc: Locator,
                   extra: set[str] | frozenset[str] = frozenset()) -> LinkSettings:
    """Parse a settings table; ``extra`` keys are allowed but left to the caller."""
    check_keys(table, LINK_KEYS | set(extra), path, loc)
    s = LinkSettings()
    if "mtu" in table:
        s.mtu = parse_value(lambda v: parse_int(v, 68, 65535), table["mtu"], f"{path}.mtu", loc)
    if "up" in table:
        if not isinstance(table["up"], bool):
            raise loc.error(f"{path}.up", f"expected true or false, got {table['up']!r}")
        s.up = table["up"]
    both = _parse_dir(table, path, loc)
    s.a_to_b, s.b_to_a = dict(both), dict(both)
    for d in ("a_to_b", "b_to_a"):
        if d in table:
            sub = check_table(table[d], f"{path}.{d}", loc)
            check_keys(sub, set(DIR_KEYS), f"{path}.{d}", loc)
            getattr(s, d).update(_parse_dir(sub, f"{path}.{d}", loc))
    return s


def match_links(topo: Topology, spec: str) -> list[tuple[Link, bool]]:
    """Links named by ``spec`` (a link name or ``A:B``, shell wildcards allowed).

    Returns (link, swapped) pairs; swapped means the user's A is the link's b.
    """
    out: list[tuple[Link, bool]] = []
    if ":" in spec:
        pa, pb = spec.split(":", 1)
        for lk in topo.links:
            if fnmatch.fnmatchcase(lk.a.node, pa) and fnmatch.fnmatchcase(lk.b.node, pb):
                out.append((lk, False))
            elif fnmatch.fnmatchcase(lk.a.node, pb) and fnmatch.fnmatchcase(lk.b.node, pa):
                out.append((lk, True))
    else:
        out = [(lk, False) for lk in topo.links if fnmatch.fnmatchcase(lk.name, spec)]
    return out


def apply_overrides(topo: Topology, entries: list, loc: Locator) -> None:
    """``[[link]]`` entries of a generated topology: ``match = "leaf1:spine*"`` + settings."""
    for i, entry in enumerate(entries):
        path = f"link[{i}]"
        entry = check_table(entry, path, loc)
        settings = parse_settings(entry, path, loc, extra={"match"})
        spec = entry.get("match")
        if not isinstance(spec, str) or not spec:
            raise loc.error(f"{path}.match", "missing or not a string: name the link(s) to "
                            "change by link name ('leaf1-spine1') or 'A:B' (wildcards allowed)")
        matched = match_links(topo, spec)
        if not matched:
            raise loc.error(f"{path}.match", f"{spec!r} matches no link")
        for lk, swapped in matched:
            settings.apply(lk, swapped)


class TargetError(ValueError):
    """A link-event target (``emu link``, ``[[event]]``) that names nothing in the topology."""


def planes(topo: Topology) -> list[int]:
    """The planes a topology has (those of its nodes and links), in order; [] without planes."""
    return sorted({x.plane for x in (*topo.nodes.values(), *topo.links) if x.plane is not None})


def resolve_target(topo: Topology, target: str,
                   within: str = "this topology") -> tuple[str, bool, bool]:
    """(normalised target, is_link, swapped) of a link event's target: a link name, ``A:B``
    (becomes the first matching link's name), a node (its links) or ``plane:N`` (the
    plane's links). The one check of such a target, for the file's ``[[event]]`` and for
    ``emu link`` alike: a target that would change no link raises :class:`TargetError`
    naming what exists (``within`` says where: ``"cluster ls"``), so taking a plane or a
    switch down never reports success for nothing."""
    if target.startswith("plane:"):
        try:
            n = parse_int(target[6:], 0)
        except UnitError as e:
            raise TargetError(f"{target!r}: bad plane number: {e}") from None
        have = planes(topo)
        if not have:
            raise TargetError(f"no plane {n} in {within}: it has no planes (only a multi-plane "
                              f"topology, or nodes and links given a plane, have them)")
        if n not in have:
            raise TargetError(f"no plane {n} in {within} (its planes: "
                              f"{', '.join(map(str, have))})")
        if not any(lk.plane == n for lk in topo.links):
            raise TargetError(f"plane {n} of {within} has no links")
        return f"plane:{n}", False, False
    if target in topo.nodes:
        if not topo.links_of(target):
            raise TargetError(f"node {target!r} of {within} has no links")
        return target, False, False
    if any(lk.name == target for lk in topo.links):
        return target, True, False
    if ":" in target and "*" not in target and "?" not in target:
        matched = match_links(topo, target)
        if matched:
            return matched[0][0].name, True, matched[0][1]
        missing = [x for x in target.split(":", 1) if x not in topo.nodes]
        raise TargetError(f"no link {target!r} in {within}"
                          + (f" (no node {', '.join(map(repr, missing))})" if missing else ""))
    raise TargetError(f"unknown target {target!r} in {within}: expected a link name, 'A:B', "
                      "a node name or 'plane:N'")


def _resolve_target(topo: Topology, target: str, path: str, loc: Locator) -> tuple[str, bool, bool]:
    """:func:`resolve_target` with its error located at ``path`` of the file."""
    try:
        return resolve_target(topo, target)
    except TargetError as e:
        raise loc.error(path, str(e)) from None


def parse_events(topo: Topology, entries: list, loc: Locator) -> list[Event]:
    """``[[event]]``: ``at``, ``action`` (down/up/impair), ``target``, impair settings."""
    events: list[Event] = []
    for i, entry in enumerate(entries):
        path = f"event[{i}]"
        entry = check_table(entry, path, loc)
        check_keys(entry, {"at", "action", "target", "direction", *DIR_KEYS}, path, loc)
        for key in ("at", "action", "target"):
            if key not in entry:
                raise loc.error(f"{path}.{key}", "missing")
        at = parse_value(parse_time, entry["at"], f"{path}.at", loc)
        action = entry["action"]
        if action not in ACTIONS:
            raise loc.error(f"{path}.action", f"{action!r} is not one of {', '.join(ACTIONS)}")
        if not isinstance(entry["target"], str):
            raise loc.error(f"{path}.target", f"expected a string, got {entry['target']!r}")
        target, is_link, swapped = _resolve_target(topo, entry["target"], f"{path}.target", loc)
        settings = _parse_dir(entry, path, loc)
        if action != "impair":
            if settings or "direction" in entry:
                raise loc.error(path, f"action {action!r} takes no settings")
        elif not settings:
            raise loc.error(path, "impair needs at least one of " + ", ".join(DIR_KEYS))
        if "direction" in entry:
            d = entry["direction"]
            if d not in DIRECTIONS:
                raise loc.error(f"{path}.direction", f"{d!r} is not one of {', '.join(DIRECTIONS)}")
            if not is_link and d != "both":
                raise loc.error(f"{path}.direction", "a direction needs a single link target")
            if swapped and d != "both":
                d = "b_to_a" if d == "a_to_b" else "a_to_b"
            settings["direction"] = d
        elif action == "impair":
            settings["direction"] = "both"
        events.append(Event(at_s=at, action=action, target=target, settings=settings))
    events.sort(key=lambda e: e.at_s)
    return events

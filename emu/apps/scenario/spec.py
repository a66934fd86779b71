# SPDX-License-Identifier: GPL-2.0-only
"""A scenario file (TOML), read and checked: the question, the fabric, the workload, the
sweep, and the shape the answer must have.

Every error is one line naming the file, the line where the key lives and the key
(``scenarios/incast.toml:12: workload.size: bad size 'x'``), before any cluster is made.
Sweep variables are named in ``[sweep]`` and used as ``"$name"`` anywhere a value is
read: in ``[topology] set``, ``[workload]``, ``[[impair]]`` and ``[[event]]``; ``transport``
is one of them (RoCEv2, UET or MRC). The layout, with every key, is in
``docs/scenario-files.md``.
"""

from __future__ import annotations

import ast
import itertools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emu.topology.locate import line_index, toml_syntax

TRANSPORTS = ("roce", "uet", "mrc")
#: the per-point metrics a check or a plot may name (:mod:`emu.apps.scenario.metrics`)
METRICS = ("jct_us", "fct_p50_us", "fct_p99_us", "fct_max_us", "fct_mean_us",
           "goodput_gbps", "flow_goodput_min_gbps", "flow_goodput_max_gbps", "jain",
           "steady_goodput_gbps", "steady_jain",
           "retransmits", "retransmitted_fraction", "rto_retransmits", "trim_nacks",
           "marked", "trimmed", "dropped", "queue_max_bytes", "spine_imbalance",
           "stall_us", "verified", "flows", "credible", "overload", "wall_s")
#: functions a check's expression may call (:mod:`emu.apps.scenario.checks`)
CHECK_FUNCS = ("value", "values", "min", "max", "mean", "abs", "len")
_VAR = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


class ScenarioError(ValueError):
    """A scenario file that cannot be run: ``where`` names the file, line and key."""

    def __init__(self, where: str, reason: str) -> None:
        self.where, self.reason = where, reason
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class Check:
    name: str
    expect: str
    key: str  # where it lives in the file (``check[2]``), for messages


@dataclass(frozen=True)
class Plot:
    x: str
    y: str
    series: str | None
    title: str
    file: str
    kind: str = "line"  # "line" or "bar"
    where: dict[str, Any] = field(default_factory=dict)  # only the rows matching this
    logy: bool = False


@dataclass
class Scenario:
    """A scenario as read (values may still hold ``"$var"``: :meth:`points` binds them)."""

    path: str
    name: str
    title: str
    anchor: str
    question: str
    topology: str  # a path to the topology file
    set: dict[str, Any]
    workload: dict[str, Any]
    sweep: dict[str, list[Any]]
    impairs: list[dict[str, Any]]
    events: list[dict[str, Any]]
    checks: list[Check]
    plots: list[Plot]
    scale_check: dict[str, Any]
    timeout: float  # wall seconds a point's workload may take
    lines: dict[str, int] = field(default_factory=dict)

    def where(self, key: str) -> str:
        probe = key
        while probe:
            if probe in self.lines:
                return f"{self.path}:{self.lines[probe]}: {key}"
            probe = probe.rsplit(".", 1)[0] if "." in probe else ""
        return f"{self.path}: {key}"

    def error(self, key: str, reason: str) -> ScenarioError:
        return ScenarioError(self.where(key), reason)

    def points(self) -> list[dict[str, Any]]:
        """Every combination of the sweep's values, in file order (the last key fastest).
        A value that is a table (a *case*) binds several variables at once: its ``name``
        is the variable's value, its other keys variables of their own."""
        keys = list(self.sweep)
        out = []
        for combo in itertools.product(*(self.sweep[k] for k in keys)):
            point: dict[str, Any] = {}
            for k, v in zip(keys, combo, strict=True):
                if isinstance(v, dict):
                    point[k] = v["name"]
                    point.update({kk: vv for kk, vv in v.items() if kk != "name"})
                else:
                    point[k] = v
            out.append(point)
        return out

    def variables(self) -> set[str]:
        """Every name a ``$var`` may use: the sweep's keys and its cases' keys."""
        names = set(self.sweep)
        for vals in self.sweep.values():
            for v in vals:
                if isinstance(v, dict):
                    names |= set(v) - {"name"}
        return names


def bind(value: Any, point: dict[str, Any]) -> Any:
    """``value`` with every ``"$var"`` replaced by the point's value (recursively)."""
    if isinstance(value, str):
        m = _VAR.match(value)
        return point[m.group(1)] if m else value
    if isinstance(value, dict):
        return {k: bind(v, point) for k, v in value.items()}
    if isinstance(value, list):
        return [bind(v, point) for v in value]
    return value


def _vars_in(value: Any) -> set[str]:
    if isinstance(value, str):
        m = _VAR.match(value)
        return {m.group(1)} if m else set()
    if isinstance(value, dict):
        return set().union(*(_vars_in(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_vars_in(v) for v in value)) if value else set()
    return set()


SHIPPED_DIR = Path(__file__).resolve().parents[3] / "scenarios"
TOPOLOGY_DIR = Path(__file__).resolve().parents[3] / "namespaces"


def locate(name: str) -> Path:
    """A scenario by path, or by the name of a shipped one (``incast``)."""
    p = Path(name)
    if p.suffix == ".toml" or p.exists():
        return p
    return SHIPPED_DIR / f"{name}.toml"


def shipped() -> list[Path]:
    return sorted(SHIPPED_DIR.glob("*.toml"))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) \
            else v
    return out


def load(name: str, quick: bool = False) -> Scenario:
    """Read and check a scenario (``quick``: with its ``[quick]`` table merged over it)."""
    path = locate(name)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        known = ", ".join(p.stem for p in shipped())
        raise ScenarioError(str(path), f"cannot read: {e.strerror or e}"
                            + (f" (shipped scenarios: {known})" if known else "")) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(*toml_syntax(str(path), e)) from None
    lines = line_index(text)
    if quick:
        q = data.pop("quick", {})
        data = _merge(data, {k: v for k, v in q.items()})
    else:
        data.pop("quick", None)
    return _build(data, str(path), path, lines)


def _table(data: dict[str, Any], key: str, sc_path: str, lines: dict[str, int],
           required: bool = False) -> dict[str, Any]:
    v = data.get(key, None)
    if v is None:
        if required:
            raise ScenarioError(_where(sc_path, lines, key), "missing table")
        return {}
    if not isinstance(v, dict):
        raise ScenarioError(_where(sc_path, lines, key), "must be a table")
    return v


def _where(path: str, lines: dict[str, int], key: str) -> str:
    return f"{path}:{lines[key]}: {key}" if key in lines else f"{path}: {key}"


def _only(table: dict[str, Any], allowed: set[str], prefix: str, sc: Scenario) -> None:
    for k in table:
        if k not in allowed:
            raise sc.error(f"{prefix}.{k}" if prefix else k,
                           f"unknown key (one of {', '.join(sorted(allowed))})")


def _build(data: dict[str, Any], sc_path: str, path: Path, lines: dict[str, int]) -> Scenario:
    top = {"scenario", "topology", "workload", "sweep", "impair", "event", "check", "plot",
           "scale_check", "quick"}
    for k in data:
        if k not in top:
            raise ScenarioError(_where(sc_path, lines, k),
                                f"unknown key (one of {', '.join(sorted(top))})")
    head = _table(data, "scenario", sc_path, lines, required=True)
    topo = _table(data, "topology", sc_path, lines, required=True)
    sweep = _table(data, "sweep", sc_path, lines)
    sc = Scenario(path=sc_path, name=path.stem, title=str(head.get("title", path.stem)),
                  anchor=str(head.get("anchor", "")), question=str(head.get("question", "")),
                  topology="", set={}, workload=_table(data, "workload", sc_path, lines,
                                                       required=True),
                  sweep={}, impairs=[], events=[], checks=[], plots=[],
                  scale_check=_table(data, "scale_check", sc_path, lines), timeout=600.0,
                  lines=lines)
    _only(head, {"title", "anchor", "question", "timeout"}, "scenario", sc)
    if "timeout" in head:
        t = head["timeout"]
        if isinstance(t, bool) or not isinstance(t, int | float) or t <= 0:
            raise sc.error("scenario.timeout", f"{t!r}: wall seconds, a number > 0")
        sc.timeout = float(t)
    _only(topo, {"file", "set"}, "topology", sc)
    file = topo.get("file")
    if not isinstance(file, str) or not file:
        raise sc.error("topology.file", "a topology: a shipped name (leaf-spine) or a path")
    tp = Path(file)
    if not tp.suffix:
        tp = TOPOLOGY_DIR / f"{file}.toml"
    elif not tp.is_absolute():
        tp = path.parent / tp
    if not tp.exists():
        raise sc.error("topology.file", f"no topology {file!r} ({tp} does not exist)")
    sc.topology = str(tp)
    s = topo.get("set", {})
    if not isinstance(s, dict):
        raise sc.error("topology.set", "a table of --set overrides (\"switch.pipeline\" = true)")
    sc.set = dict(s)
    for k, v in sweep.items():
        if not isinstance(v, list) or not v:
            raise sc.error(f"sweep.{k}", "a non-empty list of values")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
            raise sc.error(f"sweep.{k}", "a variable name: letters, digits, _")
        for j, c in enumerate(v):
            if isinstance(c, dict) and (not isinstance(c.get("name"), str) or not all(
                    re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", kk) for kk in c)):
                raise sc.error(f"sweep.{k}", f"case {j + 1}: a table with a name and "
                                             "variables (name = \"uet-reps\", transport = "
                                             "\"uet\", ...)")
    sc.sweep = {k: list(v) for k, v in sweep.items()}
    if "transport" not in sc.variables():
        tr = sc.workload.pop("transport", "roce")
        sc.sweep = {"transport": tr if isinstance(tr, list) else [tr], **sc.sweep}
    for p in sc.points():
        if p.get("transport") not in TRANSPORTS:
            raise sc.error("sweep", f"{p.get('transport')!r} is not a transport "
                                    f"({', '.join(TRANSPORTS)}) in {p}")
    for i, d in enumerate(_array(data, "impair", sc)):
        _only(d, {"link", "direction", "loss", "rate", "delay", "ecn", "duplicate", "seed"},
              f"impair[{i}]", sc)
        if not isinstance(d.get("link"), str):
            raise sc.error(f"impair[{i}].link", "a link (\"leaf1:spine1\", \"h1-leaf1\")")
        sc.impairs.append(d)
    for i, d in enumerate(_array(data, "event", sc)):
        _only(d, {"at", "action", "target"}, f"event[{i}]", sc)
        if d.get("action") not in ("down", "up"):
            raise sc.error(f"event[{i}].action", f"{d.get('action')!r}: down or up")
        if not isinstance(d.get("target"), str):
            raise sc.error(f"event[{i}].target", "a link, a switch or plane:N")
        sc.events.append(d)
    for i, d in enumerate(_array(data, "check", sc)):
        _only(d, {"name", "expect"}, f"check[{i}]", sc)
        expect = d.get("expect")
        if not isinstance(expect, str):
            raise sc.error(f"check[{i}].expect", "an expression over the results")
        _check_expr(expect, sc, f"check[{i}].expect")
        sc.checks.append(Check(str(d.get("name", expect)), expect, f"check[{i}]"))
    for i, d in enumerate(_array(data, "plot", sc)):
        _only(d, {"x", "y", "series", "title", "file", "kind", "where", "logy"}, f"plot[{i}]",
              sc)
        for k in ("x", "y"):
            if not isinstance(d.get(k), str):
                raise sc.error(f"plot[{i}].{k}", "a sweep variable or a metric")
        if d["y"] not in METRICS:
            raise sc.error(f"plot[{i}].y", f"unknown metric {d['y']!r}")
        names = sc.variables() | set(sc.sweep) | set(METRICS)
        for k in ("x", "series"):
            if d.get(k) is not None and d[k] not in names:
                raise sc.error(f"plot[{i}].{k}", f"{d[k]!r} is neither a sweep variable nor "
                                                  "a metric")
        kind = d.get("kind", "line")
        if kind not in ("line", "bar"):
            raise sc.error(f"plot[{i}].kind", f"{kind!r}: line or bar")
        sc.plots.append(Plot(d["x"], d["y"], d.get("series"), str(d.get("title", d["y"])),
                             str(d.get("file", f"{d['y']}-vs-{d['x']}")), kind,
                             dict(d.get("where", {})), bool(d.get("logy", False))))
    _only(sc.scale_check, {"metrics", "tolerance"}, "scale_check", sc)
    for m in sc.scale_check.get("metrics", []):
        if m not in METRICS:
            raise sc.error("scale_check.metrics", f"unknown metric {m!r}")
    # every "$var" names a sweep variable
    for key, value in (("topology.set", sc.set), ("workload", sc.workload),
                       ("impair", sc.impairs), ("event", sc.events)):
        for v in sorted(_vars_in(value) - sc.variables()):
            raise sc.error(key, f"${v} is not a sweep variable "
                                f"({', '.join(sorted(sc.variables()))})")
    return sc


def _array(data: dict[str, Any], key: str, sc: Scenario) -> list[dict[str, Any]]:
    v = data.get(key, [])
    if not isinstance(v, list) or not all(isinstance(d, dict) for d in v):
        raise sc.error(key, f"an array of tables ([[{key}]])")
    return v


def _check_expr(expr: str, sc: Scenario, key: str) -> None:
    """Refuse an expression that is not plain arithmetic and comparisons over the
    allowed functions, before anything runs."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise sc.error(key, f"not an expression: {e.msg}") from None
    allowed = (ast.Expression, ast.Compare, ast.BinOp, ast.BoolOp, ast.UnaryOp, ast.Call,
               ast.Name, ast.Constant, ast.keyword, ast.Load, ast.operator, ast.cmpop,
               ast.boolop, ast.unaryop, ast.List, ast.Tuple)
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise sc.error(key, f"{type(node).__name__} is not allowed in a check")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in CHECK_FUNCS:
                raise sc.error(key, f"only {', '.join(CHECK_FUNCS)} may be called")
            if node.func.id in ("value", "values"):
                first = node.args[0] if node.args else None
                if not (isinstance(first, ast.Constant) and first.value in METRICS):
                    raise sc.error(key, f"{node.func.id}() takes a metric first (one of "
                                        f"{', '.join(METRICS)})")
        if isinstance(node, ast.Name) and node.id not in CHECK_FUNCS:
            raise sc.error(key, f"unknown name {node.id!r} (quote strings: 'uet')")

# SPDX-License-Identifier: GPL-2.0-only
"""A scenario's expected shape, judged on its results: each ``[[check]]`` is an expression
over the rows (one per sweep point), e.g.

    value('goodput_gbps', transport='uet', loss=0.01)
        >= 2 * value('goodput_gbps', transport='roce', loss=0.01)

``value(metric, **where)`` is the metric of the one row matching ``where``;
``values(metric, **where)`` the list over every matching row; ``min``, ``max``, ``mean``,
``abs``, ``len`` work on numbers and lists. :func:`emu.apps.scenario.spec.load` has
already refused anything else (names, attributes, subscripts), so the expression is
evaluated with nothing else in reach. A metric that is missing — a flow did not
complete, so there is no completion time — fails the check with that reason; it is
never read as zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from emu.apps.scenario.spec import Check


class Missing(Exception):
    """A value a check needs is not there (no row, several rows, or no figure)."""


@dataclass(frozen=True)
class Verdict:
    name: str
    expect: str
    passed: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "expect": self.expect, "passed": self.passed,
                "detail": self.detail}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) \
            and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def _matching(rows: list[dict[str, Any]], where: dict[str, Any]) -> list[dict[str, Any]]:
    for k in where:
        if rows and k not in rows[0]:
            raise Missing(f"no sweep variable or metric {k!r}")
    return [r for r in rows if all(_same(r.get(k), v) for k, v in where.items())]


def _fmt(where: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in where.items()) or "every row"


def functions(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def values(metric: str, **where: Any) -> list[float]:
        hit = _matching(rows, where)
        if not hit:
            raise Missing(f"no result for {_fmt(where)}")
        out = []
        for r in hit:
            v = r.get(metric)
            if v is None:
                raise Missing(f"{metric} is missing for {_fmt({**where, **_point(r)})}"
                              f"{_why(r)}")
            out.append(v)
        return out

    def value(metric: str, **where: Any) -> float:
        hit = _matching(rows, where)
        if len(hit) != 1:
            raise Missing(f"{len(hit)} results match {_fmt(where)} (value() needs one; "
                          "values() takes several)")
        return values(metric, **where)[0]

    def mean(xs: list[float]) -> float:
        if not xs:
            raise Missing("mean of nothing")
        return sum(xs) / len(xs)

    return {"value": value, "values": values, "mean": mean, "min": min, "max": max,
            "abs": abs, "len": len}


def _point(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in r.get("_vars", ())}


def _why(r: dict[str, Any]) -> str:
    errs = r.get("errors") or []
    return f" ({errs[0]})" if errs else ""


def judge(check: Check, rows: list[dict[str, Any]]) -> Verdict:
    """PASS or FAIL of one check, with the figures it compared."""
    code = compile(check.expect, check.key, "eval")
    try:
        ok = eval(code, {"__builtins__": {}}, functions(rows))  # noqa: S307 - AST checked
    except Missing as e:
        return Verdict(check.name, check.expect, False, str(e))
    except (TypeError, ValueError, ZeroDivisionError) as e:
        return Verdict(check.name, check.expect, False, f"cannot evaluate: {e}")
    return Verdict(check.name, check.expect, bool(ok), _explain(check.expect, rows))


def _explain(expect: str, rows: list[dict[str, Any]]) -> str:
    """The values of each ``value(...)``/``values(...)`` call in ``expect``: what the
    verdict was made of, for the reader."""
    import ast

    tree = ast.parse(expect, mode="eval")
    env = functions(rows)
    parts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("value", "values", "mean", "min", "max"):
            src = ast.unparse(node)
            try:
                v = eval(compile(ast.Expression(node), "<check>", "eval"),  # noqa: S307
                         {"__builtins__": {}}, env)
            except Missing:
                continue
            parts.append(f"{src} = {_num(v)}")
    return "; ".join(dict.fromkeys(parts))


def _num(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_num(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)

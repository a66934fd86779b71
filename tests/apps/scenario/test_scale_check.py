# SPDX-License-Identifier: GPL-2.0-only
"""``emu run --scale-check``: each point's named metrics at the two scales, within the
file's tolerance; a missing figure is not "within"."""

from __future__ import annotations

from types import SimpleNamespace

from emu.apps.scenario.cli import _compare, render


def rows(jct: list[float | None]) -> list[dict]:
    return [{"_vars": ["transport"], "transport": t, "jct_us": j, "verified": 1, "flows": 1}
            for t, j in zip(("roce", "uet"), jct, strict=True)]


def test_within_and_outside_the_tolerance():
    sc = SimpleNamespace(scale_check={"metrics": ["jct_us"], "tolerance": 0.05})
    ok = _compare(sc, rows([100.0, 200.0]), rows([104.0, 196.0]))
    assert ok["passed"] and [p["within"] for p in ok["points"]] == [True, True]
    bad = _compare(sc, rows([100.0, 200.0]), rows([110.0, 200.0]))
    assert not bad["passed"] and bad["points"][0]["ratio"] == 1.1
    gone = _compare(sc, rows([100.0, 200.0]), rows([None, 200.0]))
    assert not gone["passed"] and gone["points"][0]["ratio"] is None


def test_the_verdict_line_names_the_worst_ratio():
    doc = {"scenario": "s", "title": "t", "rows": rows([100.0, 200.0]), "clusters": [],
           "checks": [], "credible": True, "complete": True, "verdict": "FAIL",
           "wall_s": 1.0,
           "scale_check": {"tolerance": 0.05, "passed": False,
                           "points": [{"ratio": 1.1}, {"ratio": 0.99}]}}
    text = render(doc, ["a/results.json"])
    assert "FAIL  same results at twice the time scale within 5% (worst 10.0%)" in text

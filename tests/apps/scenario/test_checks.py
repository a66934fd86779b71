# SPDX-License-Identifier: GPL-2.0-only
"""Checks judged on rows: a PASS needs the figures, a missing figure is a FAIL that says
why, never a zero."""

from __future__ import annotations

from emu.apps.scenario.checks import judge
from emu.apps.scenario.spec import Check

ROWS = [
    {"_vars": ["transport", "loss"], "transport": "roce", "loss": 0.0, "goodput_gbps": 380.0},
    {"_vars": ["transport", "loss"], "transport": "roce", "loss": 0.01, "goodput_gbps": 40.0},
    {"_vars": ["transport", "loss"], "transport": "uet", "loss": 0.0, "goodput_gbps": 375.0},
    {"_vars": ["transport", "loss"], "transport": "uet", "loss": 0.01, "goodput_gbps": 300.0},
]


def c(expect: str) -> Check:
    return Check("c", expect, "check[0]")


def test_value_picks_the_one_row_and_the_verdict_shows_the_figures():
    v = judge(c("value('goodput_gbps', transport='uet', loss=0.01) >= "
                "2 * value('goodput_gbps', transport='roce', loss=0.01)"), ROWS)
    assert v.passed
    assert "= 300" in v.detail and "= 40" in v.detail


def test_a_false_shape_fails():
    assert not judge(c("value('goodput_gbps', transport='roce', loss=0.01) > 100"),
                     ROWS).passed


def test_values_and_aggregates():
    assert judge(c("min(values('goodput_gbps', loss=0.0)) >= 370"), ROWS).passed
    assert judge(c("mean(values('goodput_gbps', transport='uet')) > 330"), ROWS).passed
    assert not judge(c("max(values('goodput_gbps')) < 300"), ROWS).passed


def test_ambiguous_or_absent_rows_fail_with_the_reason():
    v = judge(c("value('goodput_gbps', loss=0.0) > 1"), ROWS)
    assert not v.passed and "2 results match" in v.detail
    v = judge(c("value('goodput_gbps', transport='mrc', loss=0.0) > 1"), ROWS)
    assert not v.passed and "0 results match transport='mrc'" in v.detail


def test_a_missing_figure_fails_and_names_the_point_and_the_error():
    rows = ROWS + [{"_vars": ["transport", "loss"], "transport": "mrc", "loss": 0.0,
                    "goodput_gbps": None, "errors": ["h1->h2: did not complete in time"]}]
    v = judge(c("min(values('goodput_gbps')) > 1"), rows)
    assert not v.passed
    assert "goodput_gbps is missing" in v.detail and "transport='mrc'" in v.detail
    assert "did not complete" in v.detail


def test_spine_imbalance_is_the_worst_leafs_busiest_uplink_over_its_mean():
    from emu.apps.scenario.run import spine_imbalance

    even = {"leaf1>spine1:s1": 100, "leaf1>spine2:s2": 100, "leaf2>spine1:s1": 50,
            "leaf2>spine2:s2": 50}
    assert spine_imbalance(even) == 0
    skew = {**even, "leaf2>spine1:s1": 150, "leaf2>spine2:s2": 50}
    assert spine_imbalance(skew) == 0.5  # 150 over a mean of 100
    assert spine_imbalance({"leaf1>spine1:s1": 0, "leaf1>spine2:s2": 0}) is None

# SPDX-License-Identifier: GPL-2.0-only
"""Scenario files: the shipped ones load; a broken one gets one line naming file, line
and key, before anything is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.apps.scenario import spec

GOOD = """\
[scenario]
title = "t"

[topology]
file = "leaf-spine"
set = { "switch.pipeline" = true }

[workload]
kind = "incast"
n = "$n"
size = "1MiB"

[sweep]
transport = ["roce", "uet"]
n = [2, 3]

[[check]]
name = "fair"
expect = "min(values('jain')) >= 0.9"
"""


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "s.toml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("path", spec.shipped(), ids=lambda p: p.stem)
@pytest.mark.parametrize("quick", [False, True])
def test_every_shipped_scenario_loads(path, quick):
    sc = spec.load(str(path), quick=quick)
    assert sc.title and sc.anchor and sc.checks and sc.plots
    assert sc.points()


def test_shipped_scenarios_are_found_by_name():
    assert spec.locate("incast") == spec.SHIPPED_DIR / "incast.toml"


def test_the_sweep_is_the_product_of_its_lists(tmp_path):
    sc = spec.load(write(tmp_path, GOOD))
    assert sc.points() == [{"transport": "roce", "n": 2}, {"transport": "roce", "n": 3},
                           {"transport": "uet", "n": 2}, {"transport": "uet", "n": 3}]
    assert spec.bind(sc.workload, {"n": 3})["n"] == 3


@pytest.mark.parametrize("old, new, where, says", [
    ('n = "$n"', 'n = "$m"', "s.toml:8: workload", "$m is not a sweep variable"),
    ('transport = ["roce", "uet"]', 'transport = ["roce", "tcp"]', "s.toml:13: sweep",
     "'tcp' is not a transport"),
    ('file = "leaf-spine"', 'file = "nope"', ":5: topology.file", "no topology 'nope'"),
    ("expect = \"min(values('jain')) >= 0.9\"", "expect = \"__import__('os')\"",
     ":19: check[0].expect", "only value, values"),
    ("expect = \"min(values('jain')) >= 0.9\"", "expect = \"values('speed') > 1\"",
     ":19: check[0].expect", "takes a metric first"),
    ("expect = \"min(values('jain')) >= 0.9\"", "expect = \"jain >\"",
     ":19: check[0].expect", "not an expression"),
    ('title = "t"', 'title = "t"\ncolour = 1', ":3: scenario.colour", "unknown key"),
    ("n = [2, 3]", "n = []", ":15: sweep.n", "non-empty list"),
    ('[scenario]', '[scenari]', "s.toml:1: scenari", "unknown key"),
])
def test_a_broken_file_gets_one_line_naming_file_line_and_key(tmp_path, old, new, where,
                                                              says):
    assert old in GOOD
    with pytest.raises(spec.ScenarioError) as e:
        spec.load(write(tmp_path, GOOD.replace(old, new, 1)))
    msg = str(e.value)
    assert "\n" not in msg and where in msg and says in msg, msg


def test_toml_syntax_errors_name_the_line_and_column(tmp_path):
    with pytest.raises(spec.ScenarioError, match=r"s\.toml:3:5: TOML syntax"):
        spec.load(write(tmp_path, '[scenario]\ntitle = "t"\nx = = 1\n'))


def test_a_missing_file_lists_the_shipped_scenarios(tmp_path):
    with pytest.raises(spec.ScenarioError, match="shipped scenarios: .*incast"):
        spec.load("no-such-scenario")


def test_a_case_binds_several_variables_at_once(tmp_path):
    text = GOOD.replace('transport = ["roce", "uet"]\n', 'case = [{ name = "roce-ecmp", '
                        'transport = "roce", paths = "fixed" }, { name = "uet-reps", '
                        'transport = "uet", paths = "reps" }]\n')
    text = text.replace('"switch.pipeline" = true', '"switch.pipeline" = true, '
                        '"nic.uet.paths" = "$paths"')
    sc = spec.load(write(tmp_path, text))
    assert sc.points()[0] == {"case": "roce-ecmp", "transport": "roce", "paths": "fixed",
                              "n": 2}
    assert spec.bind(sc.set, sc.points()[-1])["nic.uet.paths"] == "reps"
    with pytest.raises(spec.ScenarioError, match="case 1: a table with a name"):
        spec.load(write(tmp_path, text.replace('name = "roce-ecmp", ', '')))

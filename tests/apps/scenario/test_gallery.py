# SPDX-License-Identifier: GPL-2.0-only
"""The gallery page is made from what ``emu run`` wrote: verdicts, checks with their
figures, plots, and the points that were not credible or did not complete."""

from __future__ import annotations

import json

from emu.apps.scenario import gallery


def test_the_gallery_shows_verdicts_checks_plots_and_suspect_points(tmp_path):
    out = tmp_path / "docs" / "scenarios" / "incast"
    out.mkdir(parents=True)
    (out / "jain-vs-n.png").write_bytes(b"\x89PNG")
    doc = {"scenario": "incast", "title": "Incast", "anchor": "DCQCN", "question": "Fair?",
           "verdict": "FAIL", "credible": False, "complete": True, "wall_s": 41.0,
           "clusters": [{"time_scale": 5200.0}],
           "checks": [{"name": "fair", "passed": True, "detail": "min(values('jain')) = 0.95"},
                      {"name": "full", "passed": False, "detail": "x = 118 | y"}],
           "rows": [{"_vars": ["transport", "n"], "transport": "roce", "n": 4,
                     "credible": False, "overload_causes": {"tx_late": 3}, "errors": []}]}
    (out / "results.json").write_text(json.dumps(doc))
    page = tmp_path / "docs" / "scenarios.md"
    text = gallery.build([("incast", str(out)), ("gone", str(tmp_path / "nope"))], str(page),
                         "2026-12-07", "2 cores")
    assert page.read_text() == text
    assert "| [incast](#incast-incast) | Fair? | **FAIL** | 41.0 s |" in text
    assert "| fair | PASS | min(values('jain')) = 0.95 |" in text
    assert "| full | FAIL | x = 118 / y |" in text  # a table cell cannot hold a pipe
    assert "![jain-vs-n](scenarios/incast/jain-vs-n.png)" in text
    assert "time scale 5200" in text and "NOT credible" in text
    assert "- transport=roce, n=4: overload {'tx_late': 3}" in text
    assert "| gone | | did not run:" in text

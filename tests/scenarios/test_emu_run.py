# SPDX-License-Identifier: GPL-2.0-only
"""``emu run`` end to end (root): every shipped scenario's ``--quick`` variant runs with
every flow verified, writes its results and plots, and leaves nothing behind; a broken
scenario file is one line and exit status 2."""

from __future__ import annotations

import json
import os

import pytest
from fabric_util import emu_cli, ns_of_cluster

from emu.apps.scenario import spec
from emu.fabric import naming, state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


#: shipped scenarios whose --quick variant passes on this machine at the auto scale, and
#: the checks that must pass there; the others run here too (their machinery must hold:
#: every flow verified, every file written) and report their verdict — a FAIL there is a
#: finding about a transport or about the auto scale (docs/scenarios.md), not a broken
#: tool. Incast's utilisation bar (349 Gb/s after convergence) is not held here: 2 MiB
#: flows end before DCQCN has recovered from its first cuts (161 Gb/s after convergence
#: in --quick against 388-392 with the full run's 64 MiB); the verdict says so
QUICK_PASSES = {
    "incast": {"fair shares after convergence: Jain's index >= 0.9 for every transport and N"}}
#: … but whose points of these transports may be flagged: RoCEv2's quick incast (DCQCN as
#: ConnectX runs it, a CNP per 4 µs: its QPs paced below the line rate after each cut) had
#: pacer_late in 3 of 10 runs on the 2-core VM at the auto scale (issue #34: a RoCEv2 QP's
#: pacer served late by the daemon); the flag is right, and the verdict says so
QUICK_LATE_OK = {"incast": {"roce"}}
#: … and whose --quick variant also runs at twice its scale (``--scale-check``): the
#: fabric-time results of these transports must agree within the tolerance the file
#: states. UET/NSCC's runs agree within 1 % run to run; DCQCN's one run at each scale
#: cannot tell the scale from chance (307-374 Gb/s over 8 runs of 4 MiB; medians over
#: runs are bench-credible's invariance part), so its ratios are printed, not held
SCALE_CHECKED = {"incast": {"uet"}}


@pytest.mark.parametrize("path", spec.shipped(), ids=lambda p: p.stem)
def test_each_shipped_scenario_runs_quick_with_every_flow_verified_and_its_files(path,
                                                                                  tmp_path):
    prefix = naming.random_cluster("sq")
    out = tmp_path / "out"
    try:
        twice = ("--scale-check",) if path.stem in SCALE_CHECKED else ()
        p = emu_cli("run", path.stem, "--quick", "--json", "--out", str(out), "--name", prefix,
                    *twice, check=False, timeout=600)
        assert p.returncode in (0, 1), p.stderr
        doc = json.loads(p.stdout)
        assert doc["complete"], [r["errors"] for r in doc["rows"]]
        for row in doc["rows"]:
            assert row["verified"] == row["flows"] > 0
            assert row["credible"] == (row["overload"] == 0)
        for c in doc["checks"]:  # every check could be evaluated (a quick sweep may lack
            assert "cannot evaluate" not in c["detail"]  # a point some check compares)
        assert (p.returncode == 0) == (doc["verdict"] == "PASS")
        if path.stem in QUICK_PASSES:
            # the shape holds; and every point is credible, or lost only to the machine's
            # own stalls (every CPU stopped at once: the hypervisor's, which no scale
            # avoids — emu flags them, a rerun is the remedy)
            must = QUICK_PASSES[path.stem]
            assert must <= {c["name"] for c in doc["checks"]}
            assert all(c["passed"] for c in doc["checks"] if c["name"] in must), doc["checks"]
            for row in doc["rows"]:
                if row.get("transport") in QUICK_LATE_OK.get(path.stem, ()):
                    continue
                assert row["credible"] or set(row["overload_causes"]) == {"machine_stall"}, row
        if twice:
            sc_doc = doc["scale_check"]
            sc = spec.load(str(path), quick=True)  # --quick --scale-check: its [quick] table
            assert {pt["metric"] for pt in sc_doc["points"]} == set(sc.scale_check["metrics"])
            for pt in sc_doc["points"]:
                assert pt["ratio"] == pytest.approx(pt["at_twice"] / pt["at_scale"])
            at_twice = doc["rows_at_twice_the_scale"]
            assert [r["time_scale"] for r in at_twice] == [2 * r["time_scale"]
                                                           for r in doc["rows"]]
            if all(r["credible"] for r in doc["rows"] + at_twice):
                # the DieCast validation: the same fabric, twice as slow, the same answer
                held = [pt for pt in sc_doc["points"]
                        if pt["transport"] in SCALE_CHECKED[path.stem]]
                assert held and all(pt["within"] for pt in held), sc_doc
        written = json.loads((out / "results.json").read_text())
        assert written["rows"] == doc["rows"]
        assert (out / "results.csv").read_text().count("\n") == len(doc["rows"]) + 1
        sc = spec.load(str(path))
        for plot in sc.plots:
            assert (out / f"{plot.file}.png").stat().st_size > 1000
            assert (out / f"{plot.file}.svg").stat().st_size > 1000
    finally:
        for i in range(4):
            for name in (f"{prefix}{i}", f"{prefix}x{i}"):
                assert state.load(name) is None
                assert ns_of_cluster(name) == []


def test_a_broken_scenario_is_one_line_and_exit_status_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[scenario]\ntitle = "x"\n[topology]\nfile = "leaf-spine"\n'
                   '[workload]\nkind = "incast"\nsize = "lots"\n')
    p = emu_cli("run", str(bad), check=False)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "bad.toml" in p.stderr and "workload.size" in p.stderr


def test_scripts_scenarios_quick_rebuilds_a_gallery(tmp_path):
    import re
    import subprocess

    from fabric_util import ROOT

    out = tmp_path / "scenarios"
    # a scenario that ran before (its results already there): --only incast keeps it
    (out / "trimming").mkdir(parents=True)
    (out / "trimming" / "results.json").write_text(
        (ROOT / "docs" / "scenarios" / "trimming" / "results.json").read_text())
    p = subprocess.run([str(ROOT / "scripts" / "scenarios"), "--quick", "--only", "incast",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stderr  # 1: a FAIL (a hypervisor stall can make one)
    doc = json.loads((out / "incast" / "results.json").read_text())
    assert re.search(rf"^incast\s+{doc['verdict']}\s", p.stdout, re.M), p.stdout
    page = (tmp_path / "scenarios.md").read_text()
    assert f"**{doc['verdict']}**" in page
    assert "![goodput-vs-n](scenarios/incast/goodput-vs-n.png)" in page
    assert "## trimming: " in page and "| [trimming](#" in page
    assert (p.returncode == 0) == (doc["verdict"] == "PASS")

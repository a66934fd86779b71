# SPDX-License-Identifier: GPL-2.0-only
"""``emu run SCENARIO``: a question answered in one command — the fabric up, the sweep
run with progress, the results written (``results.json``, ``results.csv``, plots) and a
PASS / FAIL verdict per check. Exit status 0 PASS, 1 FAIL, 2 a bad scenario file or
setup."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from typing import Any

from emu.errors import UserError

EPILOG = """\
examples:
  emu run --list                          # the shipped scenarios and their questions
  emu run incast --quick                  # seconds: the smallest sweep, smaller flows
  emu run loss-recovery --out results/lr  # results.json, results.csv, PNG and SVG plots
  emu run my.toml --scale-check           # again at twice the time scale; compare

exit status: 0 every check passed on credible results; 1 a check failed, a flow did not
complete or a result was not credible; 2 a bad scenario file or setup error.
"""


def add_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a scenario: emu run incast [--quick]",
                       description="Run a scenario file (TOML): its fabric, workload, sweep "
                                   "and checks; results, plots and a verdict.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", nargs="?", help="a shipped scenario's name or a .toml path")
    p.add_argument("--list", action="store_true", help="list the shipped scenarios")
    p.add_argument("--quick", action="store_true",
                   help="the scenario's [quick] variant (seconds; the test suite runs it)")
    p.add_argument("--out", metavar="DIR", help="where results go (default emu-run/NAME)")
    p.add_argument("--json", action="store_true", help="print results.json's document")
    p.add_argument("--scale", type=float, metavar="N",
                   help="run at time scale N instead of the plan's auto scale")
    p.add_argument("--name", metavar="PREFIX",
                   help="cluster names start with PREFIX (default sc<pid>); each fabric of "
                        "the sweep adds its number")
    p.add_argument("--scale-check", action="store_true",
                   help="run again at twice the time scale and compare the metrics "
                        "[scale_check] names within its tolerance")
    p.set_defaults(func=_main)


def _main(a: argparse.Namespace) -> int:
    from emu.apps.scenario import spec

    if a.list:
        return _list()
    if not a.scenario:
        raise UserError("name a scenario (emu run --list shows the shipped ones)")
    try:
        sc = spec.load(a.scenario, quick=a.quick)
    except spec.ScenarioError as e:
        raise UserError(str(e)) from None
    from emu.cluster.cli import need_root, one_line, user_errors

    need_root()
    from emu.apps.scenario import run as running

    try:
        running.validate(sc)
    except spec.ScenarioError as e:
        raise UserError(str(e)) from None
    out_dir = a.out or os.path.join("emu-run", sc.name + ("-quick" if a.quick else ""))

    def say(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    say(f"emu run {sc.name}: {sc.title}" + (f" [{sc.anchor}]" if sc.anchor else ""))
    npts = len(sc.points())
    say(f"  {npts} point{'s' * (npts != 1)}: "
        + ", ".join(f"{k} = {', '.join(map(str, v))}" for k, v in sc.sweep.items()))
    t0 = time.monotonic()
    try:
        outcome = running.run(sc, scale=a.scale, say=say, prefix=a.name)
        doc = outcome.to_dict()
        if a.scale_check:
            base = min(c["time_scale"] for c in outcome.clusters)
            say(f"scale check: again at twice the time scale ({2 * base:g})")
            twice = running.run(sc, scale=2 * base, say=say,
                                prefix=a.name and a.name + "x")
            doc["scale_check"] = _compare(sc, outcome.rows, twice.rows)
            doc["rows_at_twice_the_scale"] = twice.rows
            if not doc["scale_check"]["passed"] or not twice.credible:
                doc["verdict"] = "FAIL"
    except spec.ScenarioError as e:
        raise UserError(str(e)) from None
    except user_errors() as e:
        raise UserError(one_line(e)) from None
    doc["wall_s"] = round(time.monotonic() - t0, 1)
    files = write(doc, outcome, out_dir)
    if a.json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        print(render(doc, files))
    return 0 if doc["verdict"] == "PASS" else 1


def _list() -> int:
    from emu.apps.scenario import spec

    for p in spec.shipped():
        try:
            sc = spec.load(str(p))
            print(f"{sc.name:<22} {sc.title}" + (f"  [{sc.anchor}]" if sc.anchor else ""))
        except spec.ScenarioError as e:
            print(f"{p.stem:<22} (broken: {e})")
    return 0


def _compare(sc: Any, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Each ``[scale_check]`` metric at the two scales, point by point."""
    tol = float(sc.scale_check.get("tolerance", 0.05))
    metrics = list(sc.scale_check.get("metrics", ["jct_us"]))
    out = []
    ok = True
    for ra, rb in zip(a, b, strict=True):
        point = {k: ra[k] for k in ra["_vars"]}
        for m in metrics:
            x, y = ra.get(m), rb.get(m)
            ratio = (y / x) if x and y is not None else None
            good = ratio is not None and abs(ratio - 1) <= tol
            ok &= good
            out.append({**point, "metric": m, "at_scale": x, "at_twice": y, "ratio": ratio,
                        "within": good})
    return {"tolerance": tol, "passed": ok, "points": out}


def write(doc: dict[str, Any], outcome: Any, out_dir: str) -> list[str]:
    """results.json, results.csv and the plots into ``out_dir``; the files written."""
    from emu.apps.scenario import plots

    os.makedirs(out_dir, exist_ok=True)
    files = []
    path = os.path.join(out_dir, "results.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    files.append(path)
    rows = outcome.rows
    if rows:
        keys = [k for k in rows[0] if not k.startswith("_") and k not in ("events",)]
        path = os.path.join(out_dir, "results.csv")
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(keys)
            for r in rows:
                w.writerow([json.dumps(r.get(k)) if isinstance(r.get(k), dict | list)
                            else r.get(k) for k in keys])
        files.append(path)
    for p in outcome.scenario.plots:
        files += plots.draw(outcome.scenario, p, rows, out_dir)
    return files


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def render(doc: dict[str, Any], files: list[str]) -> str:
    rows = doc["rows"]
    lines = [f"{doc['scenario']}: {doc['title']}"]
    if rows:
        vars_ = rows[0]["_vars"]
        steady = ["steady_goodput_gbps", "steady_jain"]
        cols = vars_ + ["jct_us", "fct_p99_us", "goodput_gbps", "jain"] + (
            steady if any(r.get(steady[0]) is not None for r in rows) else []) + [
            "retransmits", "verified", "credible"]
        table = [cols] + [[_cell(r.get(c)) if c != "verified" else f"{r['verified']}/"
                           f"{r['flows']}" for c in cols] for r in rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
        for row in table:
            lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths,
                                                                      strict=True)))
    for c in doc["clusters"]:
        lines.append(f"  time scale {c['time_scale']:g} ({c['name']}): {c['why']}")
    for v in doc["checks"]:
        lines.append(f"  {'PASS' if v['passed'] else 'FAIL'}  {v['name']}"
                     + (f"  ({v['detail']})" if v["detail"] else ""))
    if not doc["credible"]:
        lines.append("  FAIL  every result credible: emulator overload in "
                     + ", ".join(" ".join(f"{k}={r[k]}" for k in r["_vars"])
                                 for r in rows if not r["credible"]))
    if not doc["complete"]:
        lines.append("  FAIL  every flow completed with its data verified")
    sc = doc.get("scale_check")
    if sc:
        worst = max((abs(p["ratio"] - 1) for p in sc["points"] if p["ratio"]), default=None)
        lines.append(f"  {'PASS' if sc['passed'] else 'FAIL'}  same results at twice the "
                     f"time scale within {sc['tolerance']:.0%}"
                     + (f" (worst {worst:.1%})" if worst is not None else ""))
    lines.append(f"verdict: {doc['verdict']}  ({doc['wall_s']} s; "
                 f"{', '.join(files[:1])} and {len(files) - 1} more)")
    return "\n".join(lines)

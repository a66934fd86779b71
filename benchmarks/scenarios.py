# SPDX-License-Identifier: GPL-2.0-only
"""``scripts/scenarios``: every shipped scenario, one after another, then the gallery.

Each runs as a user runs it — ``emu run NAME --out DIR`` as a whole command — so the
wall time printed is what a user waits. Progress goes to stderr, a summary table to
stdout; the exit status is 0 when every scenario passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from emu.apps.scenario import gallery, spec  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="each scenario's [quick] variant")
    ap.add_argument("--only", help="comma-separated scenario names")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "scenarios"),
                    help="results per scenario under DIR/NAME; the gallery is DIR.md")
    ap.add_argument("--replot", action="store_true",
                    help="no runs: redraw each scenario's plots from its DIR/NAME/results.json "
                         "and rebuild the gallery")
    a = ap.parse_args()
    names = [p.stem for p in spec.shipped()]
    if a.only:
        want = a.only.split(",")
        unknown = sorted(set(want) - set(names))
        if unknown:
            ap.error(f"no shipped scenario {', '.join(unknown)} (have {', '.join(names)})")
        names = [n for n in names if n in want]
    summary: list[tuple[str, str, float]] = []
    t0 = time.monotonic()
    if a.replot:
        return replot(names, a.out)
    for i, name in enumerate(names, 1):
        out = os.path.join(a.out, name)
        print(f"[{i}/{len(names)}] emu run {name}{' --quick' * a.quick}", file=sys.stderr,
              flush=True)
        t = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "emu", "run", name, "--out", out, "--json",
                            *(["--quick"] if a.quick else [])], cwd=ROOT, text=True,
                           stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": ROOT})
        wall = time.monotonic() - t
        try:
            verdict = json.loads(p.stdout)["verdict"]
        except (ValueError, KeyError):
            verdict = f"ERROR (exit {p.returncode})"
        summary.append((name, verdict, wall))
        print(f"    {verdict} in {wall:.0f} s", file=sys.stderr, flush=True)
    page = build_gallery(a.out, datetime.date.today().isoformat())
    print(f"{'scenario':<22} {'verdict':<8} {'wall s':>7}")
    for name, verdict, wall in summary:
        print(f"{name:<22} {verdict:<8} {wall:>7.0f}")
    print(f"total {time.monotonic() - t0:.0f} s; gallery {os.path.relpath(page, ROOT)}")
    return 0 if all(v == "PASS" for _, v, _ in summary) else 1


def build_gallery(base: str, when: str) -> str:
    """``BASE.md`` from every shipped scenario with results under ``BASE/NAME`` — not only
    the ones this run ran: ``--only trimming`` must not drop the other six from the
    page. Returns the page's path."""
    results = [(n, os.path.join(base, n)) for n in (p.stem for p in spec.shipped())
               if os.path.exists(os.path.join(base, n, "results.json"))]
    page = base.rstrip("/") + ".md"
    gallery.build(results, page, when, f"{os.cpu_count()} cores, Linux {platform.release()}")
    return page


def replot(names: list[str], base: str) -> int:
    """Redraw from the results already there; the gallery keeps their dates' figures."""
    from emu.apps.scenario import plots

    n = 0
    for name in names:
        out = os.path.join(base, name)
        try:
            with open(os.path.join(out, "results.json")) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{name}: no results to redraw ({e})", file=sys.stderr)
            continue
        sc = spec.load(name)
        for p in sc.plots:
            plots.draw(sc, p, doc["rows"], out)
        n += 1
    page = build_gallery(base, "redrawn " + datetime.date.today().isoformat())
    print(f"redrew {n} scenarios; gallery {os.path.relpath(page, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

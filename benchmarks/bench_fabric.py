# SPDX-License-Identifier: GPL-2.0-only
"""Build and remove emulated clusters; compare with Mininet where it is installed.

Times a 64-host leaf-spine (8 leaves × 8 hosts, 4 spines) build + teardown,
and a 256-host one; if Mininet is installed (Debian ``mininet`` and
``bridge-utils``), times ``mn --topo tree,depth=2,fanout=8 --switch lxbr
--controller none --test none`` (64 hosts, 9 switches) in the same run and
prints the ratio. Goal (issue #3): emu ≤ 1/5 of Mininet's time.
Never runs ``mn -c``: it kills processes by name.

``--quick`` (the test suite's smoke run, so the benchmark cannot rot): the same
build and teardown once, of a 4-host leaf-spine (2 leaves × 2 hosts, 1 spine) in
place of the 64-host one; no 256-host build and no Mininet (a ratio of a 4-host emu
to a 64-host Mininet would mean nothing).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time

from emu.fabric import build_and_destroy
from emu.topology import load

GOAL = 5.0
LEAF_SPINE = "namespaces/leaf-spine.toml"
#: the sizes built: the one compared with Mininet's 64 hosts, the large one, and --quick's
SIZE_64 = ["spines=4", "leaves=8", "hosts_per_leaf=8"]
SIZE_256 = ["spines=4", "leaves=16", "hosts_per_leaf=16"]
SIZE_QUICK = ["spines=1", "leaves=2", "hosts_per_leaf=2"]


def emu_build(overrides: list[str], repeat: int) -> dict[str, float | str]:
    topo = load(LEAF_SPINE, overrides).bare()  # the bare fabric, as Mininet's lxbr one is
    runs = []
    for i in range(repeat):
        print(f"  emu {len(topo.hosts())} hosts: run {i + 1}/{repeat}", file=sys.stderr,
              flush=True)
        runs.append(build_and_destroy(topo))
    med: dict[str, float | str] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    med["hosts"] = len(topo.hosts())
    med["switches"] = len(topo.switches())
    o = dict(x.split("=", 1) for x in overrides)
    med["label"] = (f"emu leaf-spine {o['leaves']} leaves × {o['hosts_per_leaf']} hosts, "
                    f"{o['spines']} spine{'s' if o['spines'] != '1' else ''}")
    return med


def mininet(repeat: int) -> float | None:
    if not (shutil.which("mn") and shutil.which("brctl")):
        return None
    times = []
    for i in range(repeat):
        print(f"  mininet tree,depth=2,fanout=8: run {i + 1}/{repeat}", file=sys.stderr,
              flush=True)
        t0 = time.perf_counter()
        subprocess.run(["mn", "--topo", "tree,depth=2,fanout=8", "--switch", "lxbr",
                        "--controller", "none", "--test", "none"],
                       check=True, capture_output=True, timeout=600)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-256", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run (the test suite's): one 4-host build, no Mininet")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    print("measuring ...", file=sys.stderr)
    e64 = emu_build(SIZE_QUICK if args.quick else SIZE_64, 1 if args.quick else args.repeat)
    mn = None if args.quick else mininet(args.repeat)
    e256 = None if args.skip_256 or args.quick else emu_build(SIZE_256, 1)
    out = {"emu_64": e64, "mininet_64_s": mn, "emu_256": e256,
           "ratio": (mn / e64["total"]) if mn else None, "goal": GOAL, "quick": args.quick}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'build + teardown':<44} {'hosts':>6} {'switches':>9} {'up s':>7} {'down s':>7} "
          f"{'total s':>8}")
    for r in (e64, e256):
        if r:
            print(f"{r['label']:<44} {r['hosts']:>6.0f} {r['switches']:>9.0f} "
                  f"{r.get('up', 0):>7.2f} {r.get('down', 0):>7.2f} {r['total']:>8.2f}")
    if args.quick:
        print("mininet: not compared (--quick builds 4 hosts, Mininet's tree has 64)")
    elif mn is None:
        print("mininet: not installed (apt-get install mininet bridge-utils to compare)")
    else:
        print(f"{'mininet tree,depth=2,fanout=8 (lxbr)':<44} {64:>6} {9:>9} {'':>7} {'':>7} "
              f"{mn:>8.2f}")
        ok = "✓" if out["ratio"] >= GOAL else "✕"
        print(f"\nemu is {out['ratio']:.1f}× faster than Mininet for 64 hosts "
              f"(goal ≥ {GOAL:.0f}×) {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

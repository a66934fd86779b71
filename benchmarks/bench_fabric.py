# SPDX-License-Identifier: GPL-2.0-only
"""Bring clusters up and down as a user does — whole ``emu up`` / ``emu down`` commands —
and compare with Mininet where it is installed.

Cases (leaf-spine, ``namespaces/leaf-spine.toml``):

* 64 bare hosts (8 leaves × 8, 4 spines; ``--no-daemons``) beside Mininet's
  ``mn --topo tree,depth=2,fanout=8 --switch lxbr --controller none --test none``
  (64 hosts, 9 switches) in the same run — goal: emu ≤ 0.2× Mininet's time;
* 64 hosts with their NIC daemons;
* 256 hosts (16 × 16, 4 spines) with NIC daemons and the switch pipeline — goals
  (issue #36): up and ready ≤ 10 s, down ≤ 5 s, ≤ 2 GB;
* ``--large``: 1,024 hosts (32 × 32, 8 spines) with NIC daemons (reported).

Memory is what the machine gave the cluster: ``MemAvailable`` before ``emu up`` less
after it (namespaces, daemons, kernel state), and the NIC and switch daemons' own PSS.
Never runs ``mn -c`` (it kills processes by name).

``--quick`` (the test suite's smoke run, so the benchmark cannot rot): a 4-host
leaf-spine bare and with daemons and the pipeline, once each; no Mininet (a ratio of a
4-host emu to a 64-host Mininet would mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEAF_SPINE = "namespaces/leaf-spine.toml"
#: Mininet's time over emu's for the 64 bare hosts, at least
GOAL_MININET = 5.0
#: the 256-host cluster with NIC daemons and the switch pipeline
GOAL_UP_S, GOAL_DOWN_S, GOAL_MIB = 10.0, 5.0, 2048.0
SIZE_4 = ("spines=1", "leaves=2", "hosts_per_leaf=2")
SIZE_64 = ("spines=4", "leaves=8", "hosts_per_leaf=8")
SIZE_256 = ("spines=4", "leaves=16", "hosts_per_leaf=16")
SIZE_1024 = ("spines=8", "leaves=32", "hosts_per_leaf=32")
PIPELINE = ("switch.pipeline=true",)
#: the shipped leaf-spine runs its switches' pipeline; the bare and NIC-daemon rows do not
FORWARD = ("switch.pipeline=false",)


def _emu(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emu", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _mem_available_mib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _settled_mem_mib(limit_s: float = 15.0) -> float:
    """``MemAvailable`` once it has stopped moving (within 4 MiB over half a second):
    the kernel frees a removed cluster's namespaces in the background, for seconds."""
    last = _mem_available_mib()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _mem_available_mib()
        if abs(now - last) < 4:
            return now
        last = now
    return last


def _daemon_pss_mib(cluster: str) -> dict[str, float]:
    """The NIC and switch daemons' proportional set size (MiB), each process once."""
    from emu.fabric import state

    st = state.load(cluster) or {}
    pids: dict[int, str] = {}
    for p in st.get("pids", []):
        what = str(p.get("what", ""))
        kind = "nicd" if what.startswith("nicd ") else \
            "switchd" if what.startswith("switchd ") else None
        if kind and isinstance(p.get("pid"), int):
            pids[p["pid"]] = kind
    out = {"nicd": 0.0, "switchd": 0.0, "nicd_processes": 0.0}
    for pid, kind in pids.items():
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss = next(int(x.split()[1]) for x in f if x.startswith("Pss:")) / 1024
        except (OSError, StopIteration):
            continue
        out[kind] += pss
        out["nicd_processes"] += kind == "nicd"
    return out


def emu_case(label: str, size: tuple[str, ...], extra: tuple[str, ...],
             daemons: bool) -> dict[str, object]:
    """One ``emu up`` + ``emu down`` as whole commands (the cluster is removed however
    the up ends)."""
    from emu.fabric import naming

    name = naming.random_cluster("bf")
    sets = [a for s in (*size, *extra) for a in ("--set", s)]
    argv = ["up", LEAF_SPINE, "--name", name, "--force", *sets,
            *(() if daemons else ("--no-daemons",))]
    print(f"  {label}: emu up …", file=sys.stderr, flush=True)
    before = _settled_mem_mib()
    t0 = time.perf_counter()
    try:
        up = _emu(*argv)
        t_up = time.perf_counter() - t0
        if up.returncode != 0:
            raise RuntimeError(f"emu up failed ({label}): {up.stderr.strip()[-600:]}")
        mem = before - _settled_mem_mib(5.0)  # what the cluster holds once it settled
        pss = _daemon_pss_mib(name)
        hosts = sum(1 for line in up.stdout.splitlines() if line.split()[1:2] == ["host"])
        switches = sum(1 for line in up.stdout.splitlines()
                       if line.split()[1:2] == ["switch"])
    finally:
        t1 = time.perf_counter()
        down = _emu("down", name)
        t_down = time.perf_counter() - t1
    if down.returncode != 0:
        raise RuntimeError(f"emu down failed ({label}): {down.stderr.strip()[-600:]}")
    return {"label": label, "hosts": hosts, "switches": switches, "up_s": round(t_up, 3),
            "down_s": round(t_down, 3), "total_s": round(t_up + t_down, 3),
            "mem_mib": round(mem, 1), "nicd_pss_mib": round(pss["nicd"], 1),
            "nicd_processes": int(pss["nicd_processes"]),
            "switchd_pss_mib": round(pss["switchd"], 1)}


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


def _median(runs: list[dict[str, object]]) -> dict[str, object]:
    out = dict(runs[0])
    for k, v in runs[0].items():
        if isinstance(v, float):
            out[k] = round(statistics.median(float(r[k]) for r in runs), 3)  # type: ignore
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of the 64-host cases")
    ap.add_argument("--large", action="store_true", help="also 1,024 hosts with NIC daemons")
    ap.add_argument("--skip-256", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run (the test suite's): 4 hosts, once, no Mininet")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    print("measuring (whole emu up / emu down commands) …", file=sys.stderr)
    rows: list[dict[str, object]] = []
    if args.quick:
        rows.append(emu_case("4 hosts, bare", SIZE_4, FORWARD, False))
        rows.append(emu_case("4 hosts, NIC daemons + pipeline", SIZE_4, PIPELINE, True))
    else:
        n = max(1, args.repeat)
        rows.append(_median([emu_case("64 hosts, bare", SIZE_64, FORWARD, False)
                             for _ in range(n)]))
        rows.append(_median([emu_case("64 hosts, NIC daemons", SIZE_64, FORWARD, True)
                             for _ in range(n)]))
        if not args.skip_256:
            rows.append(emu_case("256 hosts, NIC daemons + pipeline", SIZE_256, PIPELINE,
                                 True))
        if args.large:
            rows.append(emu_case("1024 hosts, NIC daemons", SIZE_1024, FORWARD, True))
    mn = None if args.quick else mininet(args.repeat)
    bare = rows[0]
    ratio = (mn / float(bare["total_s"])) if mn else None  # type: ignore[arg-type]
    out = {"rows": rows, "mininet_64_s": mn, "mininet_over_emu": ratio,
           "goals": {"mininet_over_emu": GOAL_MININET, "up_s_256": GOAL_UP_S,
                     "down_s_256": GOAL_DOWN_S, "mem_mib_256": GOAL_MIB},
           "quick": args.quick}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'whole commands':<36} {'hosts':>6} {'sw':>4} {'up s':>7} {'down s':>7} "
          f"{'MiB':>7} {'nicd MiB':>9} {'procs':>6} {'switchd MiB':>12}")
    for r in rows:
        print(f"{r['label']:<36} {r['hosts']:>6} {r['switches']:>4} {r['up_s']:>7.2f} "
              f"{r['down_s']:>7.2f} {r['mem_mib']:>7.0f} {r['nicd_pss_mib']:>9.0f} "
              f"{r['nicd_processes']:>6} {r['switchd_pss_mib']:>12.0f}")
    print("MiB: MemAvailable before emu up less after (all the cluster takes); nicd/switchd "
          "MiB: the daemons' PSS; procs: NIC daemon processes ([nic] workers)")
    for r in rows:
        if str(r["label"]).startswith("256 hosts"):
            ok = (float(r["up_s"]) <= GOAL_UP_S and float(r["down_s"]) <= GOAL_DOWN_S  # type: ignore[arg-type]
                  and float(r["mem_mib"]) <= GOAL_MIB)  # type: ignore[arg-type]
            print(f"256 hosts with daemons and pipeline: goals up ≤ {GOAL_UP_S:g} s, down ≤ "
                  f"{GOAL_DOWN_S:g} s, ≤ {GOAL_MIB:.0f} MiB {'✓' if ok else '✕'}")
    if args.quick:
        print("mininet: not compared (--quick builds 4 hosts, Mininet's tree has 64)")
    elif mn is None:
        print("mininet: not installed (apt-get install mininet bridge-utils to compare)")
    else:
        print(f"{'mininet tree,depth=2,fanout=8 (lxbr)':<36} {64:>6} {9:>4} {'':>7} {'':>7} "
              f"total {mn:.2f} s")
        ok = "✓" if ratio is not None and ratio >= GOAL_MININET else "✕"
        print(f"\nemu's 64 bare hosts up + down take {1 / ratio:.2f}× Mininet's time "  # type: ignore[operator]
              f"(goal ≤ {1 / GOAL_MININET:.1f}×) {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

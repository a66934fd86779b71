# SPDX-License-Identifier: GPL-2.0-only
"""``scripts/bench-credible --part invariance``: the DieCast checks of issue #34 that
need more than one flow or an impairment, each at the auto scale and at twice it.

* **loss**: the pair with 1 % random loss on its cable (``--set link.loss=1%``), write-bw
  1 MiB per transport: median fabric goodput of ``runs`` runs at each scale.
* **incast**: the leaf-spine with the switch pipeline (ECN marking; kernel datapath),
  h1, h2, h3 → h4 at once (3 → 1; RoCEv2 with DCQCN, UET with NSCC), started together at
  one fabric time (``emu perf --start-at``): each flow's completion time (fabric s) and
  Jain's fairness of the three goodputs, medians of ``runs`` rounds at each scale.

A result is the network's only if it is the same at twice the scale: the ratio of each
median (2× over 1×) is printed beside the 5 % goal. Nothing is asserted here; the test
suite runs ``--quick`` so the code cannot rot.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Callable
from typing import Any

TOLERANCE = 0.05
INCAST = (("h1", "h4"), ("h2", "h4"), ("h3", "h4"))
BASE_PORT = 18700
#: wall seconds from launching an incast round to its common start (each command brings
#: its ends up and connects first)
START_LEAD_WALL_S = 8.0


def jain(xs: list[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one takes everything."""
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0


#: the RoCEv2 QPs' local ACK timeout in the loss case (``emu perf -u``): 4.096 µs × 2^8 ≈
#: 1 fabric ms, not perftest's 67 ms. A go-back-N sender whose NAK or resend was lost
#: waits it out; at 67 ms one wait is 8 wall minutes at scale 7100, and this case asks
#: whether the result holds at twice the scale, not what a 67-ms timer costs.
LOSS_QP_TIMEOUT = 8


def _perf(emu_argv: list[str], name: str, src: str, dst: str, transport: str, size: str,
          iters: int, port: int, start_at: float | None = None,
          qp_timeout: int | None = None) -> subprocess.Popen:
    cmd = [*emu_argv, "perf", "write-bw", "--cluster", name, "--from", src, "--to", dst,
           "-s", size, "-n", str(iters), "-p", str(port), "--transport", transport,
           "--report_gbits", "--json"]
    if qp_timeout is not None and transport == "roce":
        cmd += ["-u", str(qp_timeout)]
    if start_at is not None:
        cmd += ["--start-at", repr(start_at)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(pr: subprocess.Popen) -> dict[str, Any]:
    so, se = pr.communicate(timeout=1800)
    try:
        d = json.loads(so)
    except ValueError:
        d = {}
    r = (d.get("results") or [{}])[0]
    return {"rc": pr.returncode, "gbps": r.get("bw_average", 0.0),
            "seconds": r.get("seconds", 0.0), "verified": pr.returncode == 0
            and bool(d.get("passed")), "credible": bool(d.get("credible")),
            "causes": (d.get("overload") or {}).get("causes") or {},
            "scale": (d.get("time") or {}).get("scale"),
            "error": "" if pr.returncode == 0 else se.strip()[-200:]}


def loss_case(emu_argv: list[str], name: str, up: Callable[..., None],
              down: Callable[[str], None], transports: list[str], runs: int, iters: int,
              scale: float | None, say: Callable[[str], None], loss: str = "1%",
              size: str = "1M") -> list[dict[str, Any]]:
    """The pair with ``loss`` on its cable: ``runs`` write-bw runs per transport."""
    sets = [f"link.loss={loss}"] + ([] if scale is None else [f"time.scale={scale:g}"])
    out = []
    try:
        up("pair.toml", name, sets)
        for t in transports:
            for i in range(runs):
                r = _result(_perf(emu_argv, name, "h1", "h2", t, size, iters, BASE_PORT,
                                  qp_timeout=LOSS_QP_TIMEOUT))
                say(f"  loss {loss} {t} run {i + 1}/{runs} (scale {r['scale']}): "
                    f"{r['gbps']:.1f} Gb/s, verified {r['verified']}, credible "
                    f"{r['credible']} {r['causes'] or ''}")
                out.append({"transport": t, **r})
    finally:
        down(name)
    return out


def incast_case(emu_argv: list[str], name: str, up: Callable[..., None],
                down: Callable[[str], None], clock_of: Callable[[str], Any],
                transports: list[str], runs: int, iters: int, scale: float | None,
                say: Callable[[str], None], size: str = "1M",
                extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """3 → 1 through ECN-marking switches, ``runs`` rounds per transport; ``extra``:
    more ``--set`` for this case's cluster (e.g. ``switch.port.lossless=true``: PFC)."""
    sets = ["switch.pipeline=true", *extra] + ([] if scale is None
                                                else [f"time.scale={scale:g}"])
    out = []
    try:
        up("leaf-spine.toml", name, sets)
        clock = clock_of(name)
        for t in transports:
            for i in range(runs):
                at = clock.now() + clock.to_fabric(START_LEAD_WALL_S)
                procs = [_perf(emu_argv, name, s, d, t, size, iters, BASE_PORT + k, at)
                         for k, (s, d) in enumerate(INCAST)]
                flows = [_result(p) for p in procs]
                j = jain([f["gbps"] for f in flows])
                say(f"  incast 3->1 {t} round {i + 1}/{runs} (scale {flows[0]['scale']}): "
                    + ", ".join(f"{s}->{d} {f['seconds'] * 1e6:.0f} us"
                                for (s, d), f in zip(INCAST, flows, strict=True))
                    + f", Jain {j:.3f}, verified {sum(f['verified'] for f in flows)}/3, "
                    f"credible {sum(f['credible'] for f in flows)}/3"
                    + "".join(f"; {s}->{d} {f['causes']}"
                              for (s, d), f in zip(INCAST, flows, strict=True)
                              if not f["credible"] and f["causes"]))
                out.append({"transport": t, "round": i + 1, "flows": flows, "jain": j})
    finally:
        down(name)
    return out


def medians(loss: list[dict[str, Any]], incast: list[dict[str, Any]]
            ) -> dict[tuple[str, str, str], float]:
    """(experiment, transport, figure) → the median over runs."""
    m: dict[tuple[str, str, str], float] = {}
    for t in sorted({r["transport"] for r in loss}):
        m[("loss", t, "goodput Gb/s")] = statistics.median(
            r["gbps"] for r in loss if r["transport"] == t)
    for t in sorted({r["transport"] for r in incast}):
        rounds = [r for r in incast if r["transport"] == t]
        for k, (s, d) in enumerate(INCAST):
            m[("incast 3->1", t, f"{s}->{d} FCT us")] = statistics.median(
                r["flows"][k]["seconds"] * 1e6 for r in rounds)
        m[("incast 3->1", t, "Jain")] = statistics.median(r["jain"] for r in rounds)
    return m


def ratios(at1: dict[tuple[str, str, str], float], at2: dict[tuple[str, str, str], float]
           ) -> list[dict[str, Any]]:
    return [{"case": k[0], "transport": k[1], "what": k[2], "at_scale": v,
             "at_twice": at2[k], "ratio": at2[k] / v if v else None,
             "agree": bool(v) and abs(at2[k] / v - 1) <= TOLERANCE}
            for k, v in at1.items() if k in at2]


def print_ratios(rows: list[dict[str, Any]], scales: dict[str, list[float | None]]) -> None:
    print(f"{'2x scale':12} {'transport':9} {'result':16} {'scale':>6} {'2x':>6} "
          f"{'at scale':>10} {'at 2x':>10} {'ratio':>6} {'agree':>5}")
    for r in rows:
        s1, s2 = scales["loss" if r["case"] == "loss" else "incast"]
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        print(f"{r['case']:12} {r['transport']:9} {r['what']:16} {s1 or 0:6g} {s2 or 0:6g} "
              f"{r['at_scale']:10.3f} {r['at_twice']:10.3f} {ratio:>6} "
              f"{'yes' if r['agree'] else 'NO':>5}")
    print(f"medians over the runs, fabric time; goal (issue #34): within {TOLERANCE:.0%}; "
          f"the loss case's RoCEv2 QPs time out after 4.096 us x 2^{LOSS_QP_TIMEOUT} "
          f"(emu perf -u {LOSS_QP_TIMEOUT})")

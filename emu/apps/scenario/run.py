# SPDX-License-Identifier: GPL-2.0-only
"""Run a scenario: bring its fabric up, run the workload at every sweep point, collect
the figures, the daemons' counters and overload, judge the checks, write the results.

One cluster serves every point whose fabric is the same (the sweep's ``$vars`` in
``[topology] set`` decide; a transport or a loss rate does not need a new fabric), so a
sweep over transports and loss rates costs one ``emu up``. The plan's auto time scale is
sized for the workload: ``time.senders`` is the most hosts that send at once in any of
the group's points, unless the scenario sets it.

A point's figures count only if the emulated network produced them: each point is
bracketed by overload snapshots (:mod:`emu.credible.overload`), and a point with any
overload is **not credible** — its row says so and the scenario fails, whatever its
figures say. Impairments (``[[impair]]``) are applied before a point's workload;
``[[event]]`` changes (a link or a switch down or up) happen at their fabric time
after the workload's start, and everything an event took down is brought back up after
the point.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emu.apps.scenario import checks as checking
from emu.apps.scenario.spec import Scenario, bind
from emu.apps.workload import metrics, model, runner
from emu.apps.workload.runner import WorkloadResult
from emu.credible import overload
from emu.switch.config import parse_size
from emu.topology.units import parse_prob, parse_rate, parse_time

Say = Callable[[str], None]


@dataclass
class Outcome:
    """A scenario's run: a row per point, the verdicts, and where the files went."""

    scenario: Scenario
    rows: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[checking.Verdict] = field(default_factory=list)
    clusters: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)  # every flow of every point

    @property
    def credible(self) -> bool:
        return all(r["credible"] for r in self.rows)

    @property
    def complete(self) -> bool:
        return all(r["verified"] == r["flows"] for r in self.rows)

    @property
    def passed(self) -> bool:
        return self.credible and self.complete and all(v.passed for v in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        sc = self.scenario
        return {"scenario": sc.name, "title": sc.title, "anchor": sc.anchor,
                "question": sc.question, "file": sc.path,
                "verdict": "PASS" if self.passed else "FAIL",
                "credible": self.credible, "complete": self.complete,
                "checks": [v.to_dict() for v in self.verdicts],
                "clusters": self.clusters, "rows": self.rows, "flows": self.runs}


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def workload_of(sc: Scenario, point: dict[str, Any], hosts: list[str]) -> model.Workload:
    """The point's workload, its ``$vars`` bound and its units parsed (errors name the key)."""
    w = bind(sc.workload, point)
    allowed = {"kind", "size", "message", "n", "dst", "seed", "flows", "participants",
               "depth", "qp", "shift"}
    for k in w:
        if k not in allowed:
            raise sc.error(f"workload.{k}", f"unknown key (one of {', '.join(sorted(allowed))})")

    def size(key: str, v: Any) -> int:
        try:
            return parse_size(v)
        except (ValueError, TypeError) as e:
            raise sc.error(key, str(e)) from None

    flows = []
    for i, f in enumerate(w.get("flows", [])):
        if not isinstance(f, dict) or not {"src", "dst", "size"} <= set(f):
            raise sc.error(f"workload.flows[{i}]", "a table with src, dst, size (and start)")
        try:
            start = parse_time(f.get("start", 0))
        except ValueError as e:
            raise sc.error(f"workload.flows[{i}].start", str(e)) from None
        flows.append(model.Flow(str(f["src"]), str(f["dst"]),
                                size(f"workload.flows[{i}].size", f["size"]), start))
    try:
        return model.make(str(w.get("kind", "")), hosts,
                          size=size("workload.size", w.get("size", "1MiB")),
                          message=size("workload.message", w.get("message", "1MiB")),
                          n=None if w.get("n") is None else int(w["n"]), dst=w.get("dst"),
                          seed=int(w.get("seed", 0)), flows=flows,
                          participants=w.get("participants"),
                          shift=None if w.get("shift") is None else int(w["shift"]))
    except ValueError as e:
        raise sc.error("workload", str(e)) from None


def _impair_settings(sc: Scenario, i: int, d: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    parse = {"loss": parse_prob, "ecn": parse_prob, "duplicate": parse_prob,
             "rate": parse_rate, "delay": parse_time}
    keys = {"loss": "loss", "ecn": "ecn_ce", "duplicate": "duplicate", "rate": "rate_bps",
            "delay": "delay_s"}
    out: dict[str, Any] = {"direction": d.get("direction", "both")}
    for k, f in parse.items():
        if k in d:
            try:
                out[keys[k]] = f(d[k])
            except ValueError as e:
                raise sc.error(f"impair[{i}].{k}", str(e)) from None
    if "seed" in d:
        out["seed"] = d["seed"]
    return str(d["link"]), out


class _Cluster:
    """One fabric of the scenario, up for the points that share it."""

    def __init__(self, sc: Scenario, overrides: dict[str, Any], name: str, say: Say) -> None:
        from emu.cluster import cluster as C
        from emu.plan import build
        from emu.topology import loader

        self.C, self.name, self.say = C, name, say
        args = _set_args(overrides)
        self.topo = loader.load(sc.topology, args, name=name)
        self.plan = build(self.topo)
        self.time = self.plan.time
        say(f"  cluster {name}: {os.path.basename(sc.topology)} "
            f"{' '.join('--set ' + a for a in args)}; time scale {self.time.scale:g} "
            f"({self.time.why})")
        C.up(self.topo, name, schedule=False, progress=lambda m: None, plan=self.plan)
        self.hosts = sorted((n.name for n in self.topo.hosts()), key=_natural)

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "time_scale": self.time.scale, "why": self.time.why}

    def apply(self, target: str, action: str, settings: dict[str, Any]) -> list[str]:
        from emu.cluster import fabricunits
        from emu.topology import Event

        # the cluster's own model (the kernel's settings, as emu impair and the [[event]]
        # scheduler take it), not the file as loaded: its rates and delays are the fabric's
        topo = self.C.model(self.name)
        changed = fabricunits.apply(self.name, topo, Event(0.0, action, target, settings),
                                    self.time, event_log=self.C.event_log(self.name),
                                    source="emu run")
        if action in ("down", "up"):
            self.C.set_links(self.name, topo, changed, action == "up")
        else:
            self.C.save_model(self.name, topo)
        return changed

    def switch_totals(self) -> dict[str, int]:
        out = {"marked": 0, "trimmed": 0, "dropped": 0}
        for node in self.topo.switches():
            try:
                c = self.C.switch_request(self.name, node.name, {"cmd": "counters"})
            except Exception:  # noqa: BLE001 - no pipeline on this switch: nothing to count
                continue
            for p in (c.get("ports") or {}).values():
                out["marked"] += int(p.get("marked", 0))
                out["trimmed"] += int(p.get("trimmed", 0))
                out["dropped"] += sum(int(p.get(k, 0)) for k in
                                      ("dropped_tail", "dropped_random", "dropped_trim"))
        return out

    def uplink_bytes(self) -> dict[str, int]:
        """Bytes each switch sent up each switch-to-switch cable (``leaf1>spine2``): the
        spread of a leaf's traffic over its spines, which path policies decide."""
        from emu.fabric import naming
        from emu.fabric.status import interfaces

        switches = {n.name for n in self.topo.switches()}
        out: dict[str, int] = {}
        by_node: dict[str, list[tuple[str, str]]] = {}
        for lk in self.topo.links:
            if lk.a.node in switches and lk.b.node in switches:
                by_node.setdefault(lk.a.node, []).append((lk.a.ifname, lk.b.node))
        for node, ports in by_node.items():
            ifs = interfaces(naming.ns_name(self.name, node))
            for ifname, peer in ports:
                tx = (ifs.get(ifname) or {}).get("tx_bytes", 0)
                out[f"{node}>{peer}:{ifname}"] = int(tx)
        return out

    def down(self) -> None:
        self.C.down(self.name)


def _events(cl: _Cluster, sc: Scenario, point: dict[str, Any], start_wall: float,
            log: list[dict[str, Any]], stop: threading.Event) -> threading.Thread:
    """A thread that carries out the point's ``[[event]]`` changes at their fabric times
    after the workload's start (``start_wall``)."""
    evs = []
    for i, e in enumerate(bind(sc.events, point)):
        try:
            evs.append((parse_time(e["at"]), e["action"], e["target"]))
        except (ValueError, KeyError) as err:
            raise sc.error(f"event[{i}].at", str(err)) from None
    clock = cl.time.clock()

    def go() -> None:
        for at, action, target in sorted(evs):
            left = start_wall + clock.to_wall(at) - time.monotonic()
            if stop.wait(max(0.0, left)):
                return
            changed = cl.apply(target, action, {})
            log.append({"at_s": at, "fabric_s": clock.now(), "action": action,
                        "target": target, "links": changed})

    t = threading.Thread(target=go, name="scenario events", daemon=True)
    t.start()
    return t


def run_point(cl: _Cluster, sc: Scenario, point: dict[str, Any], say: Say
              ) -> tuple[dict[str, Any], WorkloadResult]:
    w = workload_of(sc, point, cl.hosts)
    for i, d in enumerate(bind(sc.impairs, point)):
        link, settings = _impair_settings(sc, i, d)
        cl.apply(link, "impair", settings)
    transport = str(point["transport"])
    table = bind(sc.workload, point)
    qp = (table.get("qp") or {}).get(transport, {})
    depth = int(table.get("depth", 4))
    before = overload.snapshot(cl.name)
    sw0 = cl.switch_totals()
    up0 = cl.uplink_bytes()
    t0 = time.monotonic()
    log: list[dict[str, Any]] = []
    stop = threading.Event()
    ev = _events(cl, sc, point, t0 + runner.START_MARGIN, log, stop) if sc.events else None
    try:
        res = runner.run(cl.name, w, transport, depth=depth, timeout=sc.timeout, qp_attrs=qp)
    finally:
        stop.set()
        if ev is not None:
            ev.join()
    wall_s = time.monotonic() - t0
    d = overload.delta(before, overload.snapshot(cl.name))
    sw1 = cl.switch_totals()
    up1 = cl.uplink_bytes()
    for e in log:  # what an event took down comes back for the next point
        if e["action"] == "down":
            cl.apply(e["target"], "up", {})
    rto = _engine_delta(before, overload.snapshot(cl.name), "rto_retransmits")
    row: dict[str, Any] = {**point, "_vars": list(point), **metrics.summary(res),
                           "retransmits": d["retransmits"],
                           "retransmitted_fraction": d["retransmitted_fraction"],
                           "rto_retransmits": rto,
                           "spine_imbalance": spine_imbalance(
                               {k: up1[k] - up0.get(k, 0) for k in up1}),
                           **{k: sw1[k] - sw0[k] for k in sw1},
                           "credible": d["credible"], "overload": d["total"],
                           "overload_causes": d["causes"], "time_scale": cl.time.scale,
                           "wall_s": round(wall_s, 3), "events": log,
                           "errors": [f"{r.flow.name}: {r.error}" for r in res.flows
                                      if r.error]}
    return row, res


def spine_imbalance(sent: dict[str, int]) -> float | None:
    """How unevenly the leaves spread their traffic over their uplinks: per switch that
    sent anything up, its busiest uplink's bytes over the mean of its uplinks, minus 1
    (0: perfectly even; 1: the busiest carried twice the mean); the worst switch's. None
    when no switch sent anything up (the traffic stayed under one leaf)."""
    per: dict[str, list[int]] = {}
    for k, v in sent.items():
        per.setdefault(k.split(">", 1)[0], []).append(max(0, v))
    worst = None
    for vals in per.values():
        mean = sum(vals) / len(vals)
        if mean > 0 and len(vals) > 1:
            x = max(vals) / mean - 1
            worst = x if worst is None else max(worst, x)
    return worst


def _engine_delta(before: dict[str, Any], after: dict[str, Any], key: str) -> int:
    def total(s: dict[str, Any]) -> int:
        return sum(int((eng or {}).get(key, 0) or 0) for n in s.get("nic", {}).values()
                   for eng in (n.get("engines") or {}).values())
    return total(after) - total(before)


def run(sc: Scenario, *, scale: float | None = None, say: Say = print,
        prefix: str | None = None) -> Outcome:
    """Every point of ``sc``; ``scale``: a fixed time scale instead of the plan's auto one."""
    out = Outcome(sc)
    senders = validate(sc)
    points = sc.points()
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault(json.dumps(bind(sc.set, p), sort_keys=True), []).append(p)
    prefix = prefix or f"sc{os.getpid() % 100000}"
    done = 0
    for gi, (key, pts) in enumerate(groups.items()):
        overrides = json.loads(key)
        if scale is not None:
            overrides["time.scale"] = scale
        if "time.senders" not in overrides:
            overrides["time.senders"] = senders[key]
        cl = _Cluster(sc, overrides, f"{prefix}{gi}", say)
        out.clusters.append(cl.record())
        try:
            for p in pts:
                done += 1
                label = " ".join(f"{k}={v}" for k, v in p.items())
                t = time.monotonic()
                row, res = run_point(cl, sc, p, say)
                out.rows.append(row)
                out.runs.append({"point": p, **res.to_dict()})
                say(f"  [{done}/{len(points)}] {label}: {_brief(row)} "
                    f"({time.monotonic() - t:.1f} s)")
        finally:
            cl.down()
    out.verdicts = [checking.judge(c, out.rows) for c in sc.checks]
    return out


def validate(sc: Scenario) -> dict[str, int]:
    """Every point's fabric, workload, impairments and events read as the run will read
    them, before anything is made: a bad value fails here, naming its key. Returns the
    most hosts sending at once per fabric (by its overrides, JSON), for the auto scale."""
    import emu.nic.topology  # noqa: F401  (registers the [nic] section's checker)
    import emu.switch.topology  # noqa: F401  (… and the [switch] section's)
    from emu.topology import loader
    from emu.topology.model import TopologyError

    senders: dict[str, int] = {}
    hosts_of: dict[str, list[str]] = {}
    for p in sc.points():
        key = json.dumps(bind(sc.set, p), sort_keys=True)
        if key not in hosts_of:
            try:
                topo = loader.load(sc.topology, _set_args(json.loads(key)))
            except TopologyError as e:
                raise sc.error("topology.set", str(e)) from None
            hosts_of[key] = sorted((n.name for n in topo.hosts()), key=_natural)
        w = workload_of(sc, p, hosts_of[key])
        senders[key] = max(senders.get(key, 1), w.senders())
        for i, d in enumerate(bind(sc.impairs, p)):
            _impair_settings(sc, i, d)
        for i, e in enumerate(bind(sc.events, p)):
            try:
                parse_time(e.get("at"))
            except ValueError as err:
                raise sc.error(f"event[{i}].at", str(err)) from None
    return senders


def _set_args(overrides: dict[str, Any]) -> list[str]:
    return [f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
            for k, v in overrides.items()]


def _brief(row: dict[str, Any]) -> str:
    parts = []
    if row.get("jct_us") is not None:
        parts.append(f"JCT {row['jct_us']:.1f} us")
    if row.get("goodput_gbps") is not None:
        parts.append(f"{row['goodput_gbps']:.1f} Gb/s")
    if row.get("jain") is not None and row["flows"] > 1:
        parts.append(f"Jain {row['jain']:.3f}")
    if row.get("steady_goodput_gbps") is not None:
        parts.append(f"after convergence {row['steady_goodput_gbps']:.1f} Gb/s, "
                     f"Jain {row['steady_jain']:.3f}")
    parts.append(f"verified {row['verified']}/{row['flows']}")
    if row["retransmits"]:
        parts.append(f"retx {row['retransmits']}")
    parts.append("credible" if row["credible"] else
                 f"NOT CREDIBLE {dict(row['overload_causes'])}")
    if row["errors"]:
        parts.append(row["errors"][0])
    return ", ".join(parts)

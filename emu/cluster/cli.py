# SPDX-License-Identifier: GPL-2.0-only
"""Cluster commands: ``emu up/down/status/exec/link/impair/clean/graph/capture``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable

from emu.errors import UserError


def cluster_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", "-c", metavar="C",
                   help="cluster name (default: the only cluster that is up)")


def add_cli(sub: argparse._SubParsersAction) -> None:
    """The cluster commands, registered by the ``emu`` command line."""
    p = sub.add_parser("up", help="bring up a cluster from a topology file")
    p.add_argument("topology", help="topology file (e.g. namespaces/leaf-spine.toml)")
    p.add_argument("--name", "-n", help="cluster name (default: the file's topology.name)")
    p.add_argument("--set", "-s", action="append", default=[], metavar="K=V",
                   help="override a parameter, e.g. --set hosts_per_leaf=8 (repeatable)")
    p.add_argument("--no-schedule", action="store_true",
                   help="do not run the file's [[event]] schedule (its at times are fabric "
                        "time after emu up, its rates and delays fabric units)")
    p.add_argument("--no-daemons", action="store_true",
                   help="do not start a NIC daemon (emu nicd) in each host")
    p.add_argument("--trace", action="store_true",
                   help="NIC daemons write their engines' event traces (JSON lines) to "
                        "/run/emu/logs/<cluster>.nicd-<host>.trace.jsonl")
    p.add_argument("--json", action="store_true",
                   help="print the status as JSON when up (with --dry-run: the plan)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (rates and delays per port, time scale, each NIC's "
                        "and switch's settings) and build nothing; needs no root")
    p.add_argument("--force", action="store_true",
                   help="go ahead although the topology exceeds a limit of this machine "
                        "(memory, namespaces, processes, open files)")
    p.set_defaults(func=_up)

    p = sub.add_parser("down", help="tear down a cluster")
    p.add_argument("cluster", nargs="?", help="cluster name (default: the only one up)")
    p.set_defaults(func=_down)

    p = sub.add_parser("status", help="nodes, links, addresses, state and counters")
    p.add_argument("cluster", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_status)

    p = sub.add_parser("exec", help="run a command inside a node: emu exec h1 -- ping h2")
    p.add_argument("node", help="node, or CLUSTER:node")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    cluster_arg(p)
    p.set_defaults(func=_exec)

    p = sub.add_parser("link", help="take a link, a whole switch or a plane down or up: "
                                    "emu link leaf1:spine1 down")
    p.add_argument("link", help="link name (leaf1-spine1), A:B, a switch (all its links) "
                                "or plane:N (every link of plane N)")
    p.add_argument("state", choices=["down", "up"])
    cluster_arg(p)
    p.set_defaults(func=_link)

    p = sub.add_parser("impair", help="set rate, loss, ECN-CE marking, duplication, delay on "
                                      "a live link",
                       description="Set impairments on a live link. Rates, delays and "
                                   "jitters are fabric units: at time scale N the kernel "
                                   "gets rate / N and delay × N (the output says both).")
    p.add_argument("link", help="link name or A:B (A:B makes --direction a_to_b mean A→B)")
    p.add_argument("--direction", "-d", choices=["a_to_b", "b_to_a", "both"], default="both")
    p.add_argument("--rate", help="fabric rate, e.g. 400gbit, 100mbit, unlimited")
    p.add_argument("--loss", help="probability, e.g. 1%% or 0.01")
    p.add_argument("--ecn", "--ecn-ce", dest="ecn_ce", help="CE-marking probability")
    p.add_argument("--duplicate", "--dup", dest="duplicate",
                   help="probability that a packet is sent twice, e.g. 5%% (never 3 times)")
    p.add_argument("--delay", help="fabric time, e.g. 2us (needs netem)")
    p.add_argument("--jitter", help="fabric time, e.g. 100ns (needs netem)")
    p.add_argument("--seed", help="which packets --loss, --ecn and --duplicate pick: a "
                                  "number (by their order on the link, the same n-th UDP "
                                  "packets in every run; the file's seed, 1 unless it "
                                  "says, is kept otherwise) or 'random' (the kernel's draw)")
    p.add_argument("--clear", action="store_true",
                   help="remove every impairment first (a host port keeps its line rate)")
    cluster_arg(p)
    p.set_defaults(func=_impair)

    p = sub.add_parser("clean", help="remove leftovers of crashed runs (emu's own, by state file)")
    p.add_argument("clusters", nargs="*", metavar="CLUSTER",
                   help="only these clusters (default: every cluster with a state file)")
    p.add_argument("--all", action="store_true", help="tear down every cluster that is up, too")
    p.add_argument("--logs", action="store_true",
                   help="also delete the logs emu down keeps (/run/emu/logs) of clusters "
                        "that are not up")
    p.set_defaults(func=_clean)

    p = sub.add_parser("graph", help="draw a topology file or a running cluster (SVG or PNG)")
    p.add_argument("what", nargs="?",
                   help="topology file, or the name of a running cluster (default: the "
                        "cluster --cluster names, or the only one that is up)")
    p.add_argument("-o", "--output", required=True, help="out.svg, out.png or out.dot")
    p.add_argument("--set", "-s", action="append", default=[], metavar="K=V")
    cluster_arg(p)
    p.set_defaults(func=_graph)

    p = sub.add_parser("capture", help="capture links into one pcapng (interfaces = link names)",
                       description="Capture links into one pcapng whose interfaces are the "
                                   "link names. At a time scale other than 1 the timestamps "
                                   "are fabric time (seconds since the cluster's fabric "
                                   "epoch; deltas are the fabric's) and the file's comments "
                                   "say so, with the scale and the epoch.")
    p.add_argument("what", nargs="?", default="all", help="all, a link, or a node (its links)")
    p.add_argument("-w", "--write", required=True, metavar="FILE")
    p.add_argument("--duration", type=_positive(float), metavar="S",
                   help="fabric seconds, more than 0 (at time scale N the capture takes N×S "
                        "s of wall time; default: until Ctrl-C)")
    p.add_argument("--count", type=_positive(int), metavar="N",
                   help="stop after this many packets")
    p.add_argument("--filter", "-f", help="BPF capture filter, e.g. 'udp port 4791'")
    cluster_arg(p)
    p.set_defaults(func=_capture)


def _positive(kind: type[float] | type[int]) -> Callable[[str], float | int]:
    """An argparse type: a number more than 0. A capture of ``--duration 0`` (or -1) ran
    and stopped at once, and ``--count 0`` likewise: a mistake, refused as usage (exit 2)."""
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:  # NaN too
            raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
        return value

    return parse


def _load(path: str, overrides: list[str], name: str | None = None, check_size=None):
    from emu.topology import TopologyError, load

    try:
        return load(path, overrides, name=name, check_size=check_size)
    except TopologyError as e:
        raise UserError(str(e)) from None
    except OSError as e:
        raise UserError(f"{path}: {e.strerror}") from None


def user_errors():
    """Exceptions that are the user's or the machine's situation, not emu bugs."""
    from emu.cluster.cluster import ClusterError
    from emu.fabric import FabricError
    from emu.fabric.linkctl import LinkCtlError

    return (ClusterError, FabricError, LinkCtlError, KeyError, ValueError, PermissionError)


def one_line(e: BaseException) -> str:
    """The one-line text of an error: a KeyError's own message, not its repr (str() of a
    KeyError quotes it; stripping quotes instead cut a message's own closing quote)."""
    if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        return e.args[0]
    return str(e)


def need_root() -> None:
    if os.geteuid() != 0:
        raise UserError("needs root (namespaces and netlink): run with sudo")


def _up(a: argparse.Namespace) -> int:
    if a.dry_run:
        return _dry_run(a)
    need_root()
    topo = _load(a.topology, a.set, a.name, check_size=_size_check(a))
    from emu.cluster import cluster as C  # after the size check: a refusal costs no fabric imports
    from emu.fabric import render, status
    from emu.plan import build

    t0 = time.perf_counter()
    try:
        plan = build(topo)
        fabric = C.up(topo, a.name, schedule=not a.no_schedule, daemons=not a.no_daemons,
                      trace=a.trace, progress=lambda m: print(m, file=sys.stderr), plan=plan)
    except user_errors() as e:
        raise UserError(one_line(e)) from None
    def n(k: int, what: str) -> str:
        return f"{k} {what}{'' if k == 1 else ('es' if what.endswith('h') else 's')}"
    print(f"cluster {fabric.cluster} up: {n(len(topo.hosts()), 'host')}, "
          f"{n(len(topo.switches()), 'switch')}, {n(len(topo.links), 'link')} in "
          f"{time.perf_counter() - t0:.2f} s", file=sys.stderr)
    s = status(fabric.cluster)
    print(json.dumps(s, indent=1) if a.json else render(s))
    return 0


def _dry_run(a: argparse.Namespace) -> int:
    """``emu up --dry-run``: the plan ``emu up`` would start the cluster from, printed;
    nothing is made (no namespace, state file, process or file), so no root is needed.
    The plan is :func:`emu.plan.build`'s, the very one ``emu up`` uses."""
    from emu.plan import build
    from emu.plan import render as render_plan

    topo = _load(a.topology, a.set, a.name, check_size=_size_check(a))
    try:
        plan = build(topo)
    except (ValueError, KeyError) as e:  # a setting no checker caught: one line, exit 2
        raise UserError(f"{a.topology}: {one_line(e)}") from None
    if a.json:
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        print(render_plan(plan))
    print(f"dry run: nothing was made (emu up without --dry-run brings up cluster "
          f"{a.name or topo.name})", file=sys.stderr)
    return 0


def _size_check(a: argparse.Namespace):
    """The loader's hook that refuses a topology this machine cannot run, before it is
    generated (:mod:`emu.limits`); ``--force`` turns the refusal into a warning, and so
    does ``--dry-run`` (it builds nothing, and says what ``emu up`` would refuse)."""
    from emu import limits

    def check(size, has_switch: bool) -> None:
        from emu.nic.topology import workers

        try:  # (a bad value is refused when the [nic] section is checked)
            procs = workers({"workers": size.nic_workers}, size.hosts,
                            len(os.sched_getaffinity(0)))
        except (TypeError, ValueError):
            procs = size.hosts
        need = limits.Need(size.hosts, size.switches, size.links,
                           0 if a.no_daemons else size.hosts, size.switches if has_switch else 0,
                           procs)
        try:
            limits.check(need)
        except limits.LimitError as e:
            if getattr(a, "dry_run", False) and not a.force:
                print(f"emu up: warning: emu up would refuse this: too big for this machine: "
                      f"{e} (--force to try anyway)", file=sys.stderr)
                return
            if not a.force:
                raise UserError(f"too big for this machine: {e} (--force to try "
                                f"anyway)") from None
            print(f"emu up: warning: {e}; going ahead (--force)", file=sys.stderr)

    return check


def _down(a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C

    need_root()
    try:
        name = C.resolve(a.cluster)
        removed = C.down(name)
    except user_errors() as e:
        raise UserError(one_line(e)) from None
    print(f"cluster {name} down: removed {removed.get('namespaces', 0)} namespaces, "
          f"{removed.get('pids', 0)} processes")
    return 0


def _status(a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C
    from emu.fabric import render, state, status

    if not a.cluster and not state.clusters():
        print("no cluster is up" if not a.json else "[]")
        return 0
    try:
        names = [C.resolve(a.cluster)] if a.cluster or len(state.clusters()) == 1 \
            else state.clusters()
    except user_errors() as e:
        raise UserError(one_line(e)) from None
    out = []
    for n in names:
        try:
            s = status(n)
        except KeyError:
            continue  # went down while we looked
        try:
            s = _with_links(s, n)
        except Exception as e:  # noqa: BLE001 - status shows a broken cluster, never a traceback
            s.setdefault("problems", []).append(f"counters unavailable: {e}")
        out.append(s)
    if a.json:
        print(json.dumps(out[0] if len(out) == 1 else out, indent=1))
    else:
        print("\n\n".join(render(s) + _impairment_table(s) + _credible_lines(s) for s in out))
    return 0


def _credible_lines(s: dict) -> str:
    """The line rates in force and every daemon's overload since the cluster came up."""
    from emu.nic.protocol import overload_causes

    lines = []
    cr = s.get("credible") or {}
    if cr.get("line"):
        lines.append(cr["line"])
    t = s.get("time") or {}
    if cr.get("line") and "scale" in t:
        lines.append(f"time scale {t['scale']:g}: {t.get('why', '')}"
                     + (f"; one fabric ms costs {t['scale']:g} ms of wall time"
                        if t["scale"] != 1 else " (one fabric ms costs 1 ms of wall time)"))
    ov = s.get("overload") or {}
    bad = {k: v for k, v in ov.items() if v.get("total")}
    if ov and not bad:
        lines.append(f"overload: none in {len(ov)} daemon(s) since up")
    for k, v in sorted(bad.items()):
        lines.append(f"overload in {k} since up: " + ", ".join(
            f"{c} {n}" for c, n in overload_causes(v).items() if n)
            + " — runs it overlapped are NOT CREDIBLE (emu perf judges each run alone)")
    return ("\n" + "\n".join(lines)) if lines else ""


def _planned(st: dict, key: str) -> dict:
    """``key`` of the plan a cluster's state file keeps (``credible``, ``serializers``),
    else the key of that name beside it (a cluster brought up by an emu before plans)."""
    plan = st.get("plan")
    if isinstance(plan, dict) and isinstance(plan.get(key), dict):
        return plan[key]
    return st.get(key) or {}


def _with_links(s: dict, name: str) -> dict:
    """Add each link's configured settings and emu's counters (drops, CE marks) to status."""
    from emu.cluster import cluster as C
    from emu.fabric import linkctl

    try:
        topo = C.model(name)
    except C.ClusterError:
        return s
    s["event_log"] = C.event_log(name)
    from emu.credible.overload import snapshot
    from emu.fabric import state

    st = state.load(name) or {}
    cr = _planned(st, "credible") if st.get("credible") else {}  # set once NICs started
    if cr:
        s["credible"] = {k: cr[k] for k in ("line", "fits", "proposed", "max_rate",
                                           "base_rtt") if k in cr}
    if isinstance(st.get("plan"), dict) and "time" in st["plan"]:
        s["time"] = st["plan"]["time"]  # the scale beside every figure (DESIGN: Fabric time)
    serializers = _planned(st, "serializers")
    plan = st.get("plan") if isinstance(st.get("plan"), dict) else {}
    # ports a switch pipeline serializes (no link tbf there: emu.plan.build.wall_model)
    switch_rates = {(p.get("link"), p.get("direction")): p.get("pipeline_rate")
                    for p in plan.get("ports") or () if isinstance(p, dict)}
    snap = snapshot(name, timeout=2.0)
    s["overload"] = {**{f"nicd {h}": v["overload"] for h, v in snap["nic"].items()},
                     **{f"switchd {n}": v["overload"] for n, v in snap["switch"].items()}}
    switches = C.switch_counters(name)
    if switches:
        s["switches"] = switches
    by_name = {lk.name: lk for lk in topo.links}
    wanted: list[tuple[dict, str, tuple[str, str]]] = []
    for rec in s["links"]:
        lk = by_name.get(rec["name"])
        if lk is None:
            continue
        rec["mtu"] = lk.mtu
        for label, end in (("a_to_b", lk.a), ("b_to_a", lk.b)):
            d = getattr(lk, label)
            rec[label] = dataclasses.asdict(d)
            # the rate is a NIC port's line rate (its serializer), not an impairment
            rec[label]["line_rate"] = bool(d.rate_bps) and d.rate_bps == serializers.get(
                f"{lk.name} {label}")
            # the switch pipeline's port rate, fabric units (it serializes this direction)
            rec[label]["switch_rate"] = switch_rates.get((lk.name, label))
            if not d.is_default():
                wanted.append((rec, label, (linkctl.ns_name(name, end.node), end.ifname)))
    # one nft listing and one netlink socket per namespace; a vanished link reads as its
    # error, not a broken status
    got = linkctl.counters_many([port for _, _, port in wanted])
    for rec, label, port in wanted:
        rec[label]["counters"] = got[port]
    return s


def _impairment_table(s: dict) -> str:
    """The links' settings in fabric units (the model holds the kernel's: rates × scale)."""
    scale = float((s.get("time") or {}).get("scale", 1))
    rows = []
    for rec in s["links"]:
        for label in ("a_to_b", "b_to_a"):
            d = rec.get(label)
            if not d or all(not d.get(k) for k in ("rate_bps", "loss", "ecn_ce", "duplicate",
                                                   "delay_s", "switch_rate")):
                continue
            c = d.get("counters", {})
            rate = f"{d['rate_bps'] * scale / 1e9:.4g}G" if d.get("rate_bps") else "-"
            if d.get("line_rate"):
                rate += " (NIC)"
            elif not d.get("rate_bps") and d.get("switch_rate"):
                rate = f"{d['switch_rate'] / 1e9:.4g}G (switch)"  # already fabric units
            rows.append(f"{rec['name']:<18} {label:<7} {rate:>13} {d['loss']:>7.2%} "
                        f"{d['ecn_ce']:>7.2%} {d.get('duplicate', 0):>7.2%} "
                        f"{c.get('dropped', '-')!s:>8} {c.get('marked', '-')!s:>8} "
                        f"{c.get('duplicated', '-')!s:>8} {c.get('qdisc_dropped', '-')!s:>8}")
    if not rows:
        return ""
    head = (f"\n\n{'LINK SETTINGS':<18} {'DIR':<7} {'RATE':>13} {'LOSS':>7} {'CE':>7} "
            f"{'DUP':>7} {'DROPPED':>8} {'MARKED':>8} {'DUPED':>8} {'Q-DROPS':>8}")
    if scale != 1:
        rows.append(f"(rates are the fabric's; at time scale {scale:g} the kernel's tbf runs "
                    f"them / {scale:g})")
    return head + "\n" + "\n".join(rows)


def _exec(a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C
    from emu.fabric import exec_argv

    need_root()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if not argv:
        raise UserError("no command: emu exec NODE -- CMD [ARGS]")
    try:
        name, node = C.split_node(a.node, a.cluster)
        full = exec_argv(name, node, argv)
    except user_errors() as e:
        raise UserError(one_line(e)) from None
    try:
        os.execvp(full[0], full)
    except FileNotFoundError:
        raise UserError(f"{full[0]}: command not found") from None
    return 127


def _link(a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C
    from emu.fabric.events import apply_event
    from emu.topology import Event
    from emu.topology.settings import resolve_target

    need_root()
    try:
        name = C.resolve(a.cluster)
        topo = C.model(name)
        # a target that names no link is an error (TargetError), never "down: no links"
        target = resolve_target(topo, a.link, within=f"cluster {name}")[0]
        changed = apply_event(topo, Event(0.0, a.state, target), event_log=C.event_log(name),
                              cluster=name, clock=_clock_of(name))
        C.set_links(name, topo, changed, a.state == "up")
    except user_errors() as e:
        raise UserError(one_line(e)) from None
    print(f"{name}: {a.state}: {', '.join(changed) or 'no links'}")
    return 0


def _impair(a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C
    from emu.cluster import fabricunits
    from emu.fabric import linkctl, state
    from emu.topology import Event
    from emu.topology.model import Direction
    from emu.topology.settings import DIR_KEYS
    from emu.topology.units import UnitError

    need_root()
    try:
        name = C.resolve(a.cluster)
        tp = _time_of(name)  # rates and delays given are fabric units (DESIGN: Fabric time)
        topo = C.model(name)  # the kernel's settings: wall units
        lk = topo.link(a.link)
        direction = a.direction
        if ":" in a.link and a.link.split(":", 1)[0] == lk.b.node and direction != "both":
            direction = "b_to_a" if direction == "a_to_b" else "a_to_b"
        settings: dict[str, object] = {}
        for opt, (key, parse) in DIR_KEYS.items():  # a file's per-direction keys, parsed alike
            value = getattr(a, opt)
            if value is not None:
                try:
                    settings[key] = parse(value)
                except UnitError as e:
                    raise UserError(f"--{opt.replace('_ce', '')}: {e}") from None
        if not settings and not a.clear:
            raise UserError("nothing to set: give --rate, --loss, --ecn, --duplicate, --delay, "
                            "--seed or --clear")
        if settings:  # before --clear changes anything: a delay this kernel cannot do
            fabricunits.check_kernel(settings, tp, lk.name)
        if a.clear:
            # back to the cable as `emu up` built it: a host port keeps its line rate
            # (its serializer, not an impairment: emu.credible.rates.serializers; the
            # plan's wall rate, what the kernel had)
            base = _planned(state.load(name) or {}, "serializers")
            for label in ("a_to_b", "b_to_a"):
                if direction in (label, "both"):
                    setattr(lk, label, Direction(rate_bps=base.get(f"{lk.name} {label}")))
                    linkctl.apply_link_direction(name, lk, label, event_log=C.event_log(name),
                                                 clock=tp.clock())
        if settings:
            fabricunits.apply(name, topo, Event(0.0, "impair", lk.name,
                                                {**settings, "direction": direction}),
                              tp, event_log=C.event_log(name), source="emu impair")
        C.save_model(name, topo)
    except user_errors() as e:
        raise UserError(one_line(e)) from None
    line = f"{name}: {lk.name} a_to_b={_fmt_dir(lk.a_to_b, tp)} b_to_a={_fmt_dir(lk.b_to_a, tp)}"
    if tp.scale != 1:
        line += (f" (fabric units; at time scale {tp.scale:g} the kernel runs rates / "
                 f"{tp.scale:g} and delays × {tp.scale:g}: the wall values)")
    print(line)
    return 0


def _time_of(cluster: str):
    """The clock plan ``cluster`` runs on (its plan's :class:`emu.plan.TimePlan`; real
    time for a cluster from before plans)."""
    from emu.cluster import cluster as C
    from emu.plan import TimePlan

    try:
        return C.plan_of(cluster).time
    except C.ClusterError:
        return TimePlan()


def _clock_of(cluster: str):
    """``cluster``'s fabric clock (:class:`emu.fabricclock.FabricClock`)."""
    return _time_of(cluster).clock()


def _fmt_dir(d, time=None) -> str:
    """A link direction's settings as the kernel has them (``d``: wall units); at a time
    scale ≠ 1 (``time``, the plan's) in fabric units, the wall value beside each rate
    and delay."""
    from emu.cluster.fabricunits import fmt_rate, fmt_time

    scale = 1.0 if time is None else time.scale
    parts = []
    if d.rate_bps:
        parts.append(f"rate {d.rate_bps / 1e6:g}Mbit" if scale == 1 else
                     f"rate {fmt_rate(d.rate_bps * scale)} (wall {fmt_rate(d.rate_bps)})")
    if d.loss:
        parts.append(f"loss {d.loss:.3%}")
    if d.ecn_ce:
        parts.append(f"ce {d.ecn_ce:.3%}")
    if d.duplicate:
        parts.append(f"duplicate {d.duplicate:.3%}")
    if d.delay_s:
        parts.append(f"delay {d.delay_s * 1e6:g}us" if scale == 1 else
                     f"delay {fmt_time(d.delay_s / scale)} (wall {fmt_time(d.delay_s)})")
    if d.loss or d.ecn_ce or d.duplicate:
        parts.append("seed random" if d.seed is None else f"seed {d.seed}")
    return ",".join(parts) or "clean"


def _clean(a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C
    from emu.fabric import state

    need_root()
    done, shm_files = C.clean(all_clusters=a.all, only=a.clusters or None)
    print(f"cleaned {len(done)} cluster(s)" + (f": {', '.join(done)}" if done else "")
          + (f"; removed {shm_files} memory-region file(s) of dead processes"
             if shm_files else ""))
    for c in a.clusters or []:  # named but not cleaned: say why, not just "cleaned 0"
        if c in done:
            continue
        if state.load(c) is None:
            print(f"no cluster {c!r}")
        else:
            print(f"{c} left alone: it is up, not a leftover of a crash; "
                  f"emu down {c}, or emu clean --all {c}")
    if a.logs:
        logdir = os.path.join(state.STATE_DIR, "logs")
        up = set(state.clusters())
        gone = 0
        for f in os.listdir(logdir) if os.path.isdir(logdir) else []:
            cluster = f.split(".", 1)[0]  # <cluster>.events.jsonl, <cluster>.nicd-h1.log …
            if cluster not in up:
                os.unlink(os.path.join(logdir, f))
                gone += 1
        print(f"deleted {gone} log file(s) of clusters that are down")
    return 0


def _graph(a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C
    from emu.fabric import state
    from emu.outpath import cannot_write, check_file
    from emu.topology.graph import render

    check_file(a.output)
    if a.what and a.cluster and a.what != a.cluster:
        raise UserError(f"{a.what!r} and --cluster {a.cluster!r} disagree: name one "
                        "topology file or running cluster")
    if a.what and not a.cluster and a.what not in state.clusters():
        topo = _load(a.what, a.set)
        down = []
    else:  # a running cluster: named, either way, or the only one up
        try:
            topo = C.model(C.resolve(a.cluster or a.what))
        except user_errors() as e:
            raise UserError(one_line(e)) from None
        down = [lk.name for lk in topo.links if not lk.up]
    try:
        render(topo, a.output, down=down)
    except OSError as e:
        raise UserError(cannot_write(a.output, e)) from None
    except (ValueError, RuntimeError) as e:
        raise UserError(str(e)) from None
    print(f"wrote {a.output}")
    return 0


def _capture(a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C
    from emu.fabric import capture as cap
    from emu.outpath import check_file

    need_root()
    check_file(a.write)  # before "capturing …", not as open()'s traceback after it
    try:
        name = C.resolve(a.cluster)
        clock = _clock_of(name)
        topo = C.model(name)
        targets = cap.targets_for(topo, a.what, cluster=name)
    except user_errors() as e:
        raise UserError(one_line(e)) from None
    scaled = clock.scale != 1
    how_long = " (Ctrl-C to stop)"
    if a.duration:
        how_long = f" for {a.duration:g} s" + (
            f" of fabric time ({clock.to_wall(a.duration):g} s of wall time at time scale "
            f"{clock.scale:g})" if scaled else "")
    print(f"capturing {len(targets)} link(s) of {name} to {a.write}{how_long}"
          + ("; timestamps are fabric time" if scaled else ""), file=sys.stderr)
    try:
        result = cap.capture(targets, a.write, count=a.count, bpf=a.filter, clock=clock,
                             duration=clock.to_wall(a.duration) if a.duration else None,
                             comments=[f"emu capture of cluster {name} ({a.what}: "
                                       f"{', '.join(t.name for t in targets)})"]
                             if scaled else [])
    except cap.CaptureFailed as e:
        raise UserError(str(e)) from None
    print(result.report(), file=sys.stderr)
    return 0

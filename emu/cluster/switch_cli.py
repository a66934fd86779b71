# SPDX-License-Identifier: GPL-2.0-only
"""``emu switch`` (a running switch daemon's counters, settings and time series) and the
``emu switchd`` entry in the command list.

The switch daemon itself is :mod:`emu.switch`; this module is its command on a
*cluster*: it resolves ``CLUSTER:node`` through the cluster's state and reaches
the daemon's control socket where ``emu up`` put it, so it sits in the cluster
layer, above the switch package, and shares the cluster commands' error rules.
"""

from __future__ import annotations

import argparse
import json
import os

from emu.cluster.cli import cluster_arg, need_root, one_line, user_errors
from emu.errors import UserError
from emu.fabricclock import FabricClock
from emu.outpath import cannot_write, check_file


def add_cli(sub: argparse._SubParsersAction) -> None:
    # `emu switchd …` is passed straight to the daemon's own parser (emu.cli.PASS_THROUGH)
    sub.add_parser("switchd", help="run a switch pipeline daemon (emu up starts them)")

    p = sub.add_parser("switch", help="inspect or change a switch's pipeline: "
                                      "emu switch leaf1 h1 set rate=1gbit kmin=20KB")
    p.add_argument("node", help="switch node, or CLUSTER:node")
    p.add_argument("port", nargs="?", help="port (interface name on the switch) or *")
    p.add_argument("action", nargs="?", choices=["set", "show"], default="show")
    p.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                   help="port or class settings (kmin, kmax, pmax, rate, depth, trim, c3.xoff …)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--config", action="store_true", help="show the configuration, not counters")
    p.add_argument("--plot", metavar="OUT.svg",
                   help="draw the time series of --metric per port (from series.jsonl; an "
                        ".svg gets a .png beside it; .png, .pdf: that format alone)")
    p.add_argument("--metric", default="depth",
                   help="depth, max_depth (bytes) or a counter shown per second: marked, "
                        "trimmed, enqueued, dropped_tail, … (default depth)")
    cluster_arg(p)
    p.set_defaults(func=_switch)


_PORT_COLUMNS = ("enqueued", "marked", "trimmed", "dropped_tail", "dropped_random", "depth",
                 "max_depth", "paused_time", "late")
#: columns that hold seconds
_SECONDS = frozenset({"paused_time"})


def _switch(a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C
    from emu.switch.config import ConfigError, is_pattern, select_ports

    need_root()
    if a.plot:
        check_file(a.plot)
    try:
        name, node = C.split_node(a.node, a.cluster)
        if a.plot:
            return _switch_plot(name, node, a)
        if a.action == "set":
            if not a.port or not a.settings:
                raise UserError("usage: emu switch NODE PORT set KEY=VALUE ...")
            settings = {}
            for kv in a.settings:
                if "=" not in kv:
                    raise UserError(f"{kv!r}: expected KEY=VALUE")
                k, v = kv.split("=", 1)
                settings[k.strip()] = v.strip()
            # the daemon checks the port (emu.switch.config.select_ports) and says which it set
            reply = C.switch_request(name, node, {"cmd": "set", "port": a.port,
                                                  "settings": settings})
            changed = list(reply.get("ports") or [a.port])
            print(json.dumps(reply.get("config", reply.get("ports")), indent=1) if a.json else
                  f"{name}:{node} port{'s' if len(changed) > 1 else ''} {', '.join(changed)}: "
                  + " ".join(a.settings))
            return 0
        reply = C.switch_request(name, node, {"cmd": "config" if a.config else "counters"})
    except user_errors() as e:
        raise UserError(one_line(e)) from None
    except OSError as e:
        raise UserError(f"{a.node}: switch daemon not reachable: {e.strerror}") from None
    reply.pop("ok", None)
    if a.json or a.config:
        print(json.dumps(reply, indent=1))
        return 0
    ports = dict(reply.get("ports", {}))
    try:  # ports that have seen no transport traffic yet have no queue: show them as zeros
        configured = C.switch_request(name, node, {"cmd": "config"})["config"]["ports"]
        ports.update({p: {} for p in configured if not is_pattern(p) and p not in ports})
    except (C.ClusterError, OSError, KeyError):
        pass
    if a.port:
        try:  # the same check of a port name as the daemon's `set`
            shown = select_ports(a.port, ports)
        except ConfigError as e:
            raise UserError(f"{node}: {e}") from None
        ports = {k: ports[k] for k in shown}
    print(f"{'PORT':<10} " + " ".join(f"{c:>14}" for c in _PORT_COLUMNS))
    for port, c in sorted(ports.items()):
        # a time is seconds to the ms whichever datapath counted it (the kernel's is a float,
        # the user datapath's a 0 until a pause, a port without traffic has none)
        cells = [f"{float(c.get(k, 0)):>14.3f}" if k in _SECONDS or isinstance(c.get(k), float)
                 else f"{c.get(k, 0):>14}" for k in _PORT_COLUMNS]
        print(f"{port:<10} " + " ".join(cells))
    ov = reply.get("overload") or {}
    scale = float(reply.get("time_scale") or 1.0)
    print(f"times in fabric seconds (paused_time, late); {FabricClock(scale).describe()}")
    if reply.get("datapath"):
        note = f" ({reply['datapath_note']})" if reply.get("datapath_note") else ""
        sched = f"; scheduler {reply['sched']}" if reply.get("sched") else ""
        print(f"datapath: {reply['datapath']}{note}{sched}")
    if ov:
        bad = " — results through this switch are NOT CREDIBLE" if ov.get("total") else ""
        print(f"overload {ov.get('total', 0)}: released late {ov.get('late', 0)} "
              f"({ov.get('late_s', 0):.3f} fabric s), NFQUEUE drops {ov.get('queue_dropped', 0)}, "
              f"netlink drops {ov.get('user_dropped', 0)}, PFC frames refused "
              f"{ov.get('pfc_send_errors', 0)}, tbf drops {ov.get('qdisc_dropped', 0)}{bad}")
    cf = reply.get("counter_files") or {}
    if cf.get("errors"):
        print(f"warning: {cf['errors']} counter snapshot(s) could not be written to "
              f"{node}'s state folder (counters.json and series.jsonl are stale there)")
    return 0


def _switch_plot(cluster: str, node: str, a: argparse.Namespace) -> int:
    from emu.cluster import cluster as C
    from emu.plot import line_chart

    try:
        C.need_switch(cluster, node)
    except C.ClusterError as e:
        raise UserError(str(e)) from None
    path = os.path.join(C.switch_dir(cluster, node), "series.jsonl")
    rows = []
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        raise UserError(f"{node}: no time series yet ({path})") from None
    gauge = a.metric in ("depth", "max_depth", "paused_time")
    series: dict[str, list[tuple[float, float]]] = {}
    last: dict[str, tuple[float, float]] = {}
    t0 = min((r["t"] for r in rows), default=0.0)
    for r in rows:
        port = r.get("port")
        if a.port and port != a.port or a.metric not in r:
            continue
        t, v = r["t"] - t0, float(r[a.metric])
        if gauge:
            series.setdefault(port, []).append((t, v))
        else:
            if port in last and t > last[port][0]:
                pt, pv = last[port]
                series.setdefault(port, []).append((t, (v - pv) / (t - pt)))
            last[port] = (t, v)
    # the series' times are the daemon's fabric clock (emu.switch.daemon), the scale beside
    unit = f"{a.metric} (bytes)" if a.metric in ("depth", "max_depth") else \
        (f"{a.metric} (fabric s)" if gauge else f"{a.metric} per fabric second")
    try:
        scale = C.plan_of(cluster).time.scale
    except C.ClusterError:
        scale = 1.0
    title = f"{cluster}:{node} {a.metric}" + (f" (time scale {scale:g})" if scale != 1 else "")
    try:  # not the caller's OSError: that one says the daemon is not reachable
        files = line_chart(a.plot, series, title=title,
                           xlabel="fabric seconds since the first sample",
                           ylabel=unit, legend_title="port", step=not gauge)
    except OSError as e:
        raise UserError(cannot_write(e.filename or a.plot, e)) from None
    print(f"wrote {' and '.join(files)} ({sum(len(s) for s in series.values())} points, "
          f"{len(series)} port(s))")
    return 0

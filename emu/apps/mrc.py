# SPDX-License-Identifier: GPL-2.0-only
"""``emu mrc``: the MRC controller's view of a host's NIC, after ``mrc_ctl.h`` (issue #35).

* ``emu mrc qp CLUSTER:HOST [QPN]`` — every MRC QP of the host's NIC (or one): its
  state and peer, and its EV table — each EV's value (its UDP source port), plane,
  state (GOOD, SKIP, ASSUMED_BAD, DENIED) and counters (sent, SACKed, ECN, trimmed,
  lost, timeouts, probes, probes answered), live from the daemon.
* ``emu mrc events CLUSTER:HOST`` — the EV state changes since the last poll, with the
  count the daemon dropped (a bounded queue, as ``mrc_ctl.h``'s event poll reports).
* ``emu mrc ev CLUSTER:HOST QPN EV deny|allow`` — the controller takes an EV out of use
  (DENIED: never sprayed on, never probed) or gives it back.
* ``emu mrc port CLUSTER:HOST PORT up|down`` — a NIC port (plane, from 0) taken down by
  the administrator: every QP's EVs of that plane leave the rotation, the live planes
  carry the traffic, and they come back with ``up``. Each peer NIC is told with an
  ENDPOINT_REQUEST PORT_STATUS_UPDATE (answered by an ENDPOINT_RESPONSE), and its QPs
  stop sending to this NIC's address on that plane.

* ``emu mrc probe CLUSTER:HOST PEER [--plane P] [--ev EV …] [-c N]`` — EV_PROBE endpoint
  operations to the peer NIC (a host name: its address on plane P; or an address), each
  leaving on one EV (UDP source port): which paths answer and their round trips in
  fabric time, as ``mrc_ctl.h``'s batch probe reports them.

* ``emu mrc ev-profile|cc-profile CLUSTER:HOST list|create|offline|online|delete|default
  [NAME] …`` — the NIC's EV profiles (format, mode AUTO/EXP/GEN, ``--evs``, ``--field
  width=16,init=0xe000,min=0xe000,max=0xefff[,mask=…]``) and CC profiles (``--algorithm
  uet-1.0-nscc|none``, ``--base-rtt``, ``--gamma``, ``--qa-gate``, ``--init-cwnd``):
  created INIT, then OFFLINE, then ONLINE (``mrc_ctl.h``); ``default NAME`` gives an
  ONLINE one to every QP created afterwards that names none (``emu perf`` included).

``--json`` prints the daemon's answer as it is. Exit 0, or 1 with one line when the
host has no NIC daemon, it runs no MRC, or the QP or EV is not there.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

#: the counters of an EV row, in the order the table shows them
COLUMNS = ("sent", "sacked", "ecn", "trimmed", "lost", "timeouts", "probes", "probe_ok")


def _ask(where: str, **req: Any) -> dict[str, Any]:
    """The ``mrc`` request to the NIC daemon of ``CLUSTER:HOST`` (UserError if none)."""
    from emu.errors import UserError
    from emu.fabric import state
    from emu.nic.protocol import DaemonDown, NicError, call_once, sock_path

    cluster, _, host = where.rpartition(":")
    if not host:
        raise UserError(f"{where!r}: name a host as CLUSTER:HOST (or HOST with one cluster up)")
    cluster = state.resolve(cluster or None)
    _check_host(cluster, host)
    try:
        return call_once(sock_path(cluster, host), "mrc", **req)
    except DaemonDown as e:
        raise UserError(str(e)) from None
    except NicError as e:
        raise UserError(f"{cluster}:{host}: {e.args[-1] if e.args else e}") from None
    except OSError as e:
        raise UserError(f"{cluster}:{host}: no NIC daemon answers ({e})") from None


def _check_host(cluster: str, host: str) -> None:
    """A name that is no host of the cluster is said so, not "its daemon is not running"."""
    from emu.cluster import cluster as C
    from emu.errors import UserError

    try:
        topo = C.model(cluster)
    except Exception:  # noqa: BLE001 - no model: the daemon's answer says what is wrong
        return
    try:
        topo.host_address(host)
    except ValueError as e:
        raise UserError(str(e)) from None


def _ev(text: str) -> int:
    """A number as the user writes it (0xd000 or 53248)."""
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 0xd000)") from None


def _evs(text: str) -> list[int]:
    return [_ev(v) for v in text.split(",")]


def table(qps: list[dict[str, Any]]) -> str:
    """The EV tables as text: a header line per QP, then one row per EV."""
    lines = []
    for q in qps:
        s = q.get("summary") or {}
        st = s.get("states", {})
        lines.append(f"QP {q['qpn']:#08x} {q['state']}  peer QPN "
                     f"{q['peer'] if q['peer'] is None else hex(q['peer'])}  "
                     f"EVs {s.get('size', 0)} over {s.get('planes', 0)} plane(s), active "
                     f"{s.get('active', 0)} (min {s.get('ev_min_active', 0)}): good "
                     f"{st.get('good', 0)} skip {st.get('skip', 0)} assumed_bad "
                     f"{st.get('assumed_bad', 0)} denied {st.get('denied', 0)}; retired "
                     f"{s.get('retired', 0)}")
        if not q["evs"]:
            continue
        lines.append(f"  {'EV':>10} {'plane':>5} {'state':<12} "
                     + " ".join(f"{c:>8}" for c in COLUMNS) + "  in set")
        for r in q["evs"]:
            lines.append(f"  {r['ev']:>#10x} {r['plane']:>5} {r['state']:<12} "
                         + " ".join(f"{r[c]:>8}" for c in COLUMNS)
                         + ("  yes" if r["in_set"] else "  retired"))
    return "\n".join(lines) if lines else "no MRC QP"


def _peer_address(where: str, peer: str, plane: int) -> str:
    """``peer`` as an address: itself if it is one, else the host's on ``plane``."""
    import ipaddress

    from emu.cluster import cluster as C
    from emu.errors import UserError
    from emu.fabric import state

    try:
        return str(ipaddress.ip_address(peer))
    except ValueError:
        pass
    try:
        topo = C.model(state.resolve(where.rpartition(":")[0] or None))
        # a source-routed fabric's MRC runs over IPv6 (its EVs need the flow label)
        return topo.host_address(peer, plane, 6 if topo.routing == "srv6" else None)
    except ValueError as e:
        raise UserError(str(e)) from None


def probe(a: argparse.Namespace) -> dict[str, Any]:
    """Send the EV_PROBEs, then collect the answers until all came or the wait is over
    (wall seconds: at time scale N a fabric round trip takes N times longer)."""
    import time

    dest = _peer_address(a.where, a.peer, a.plane)
    # without --ev the NIC takes its default EV profile's first ones
    ans = _ask(a.where, probe_to=dest, evs=a.ev, count=a.count, plane=a.plane)
    rids, evs = ans["request_ids"], ans["evs"]
    want, got = set(rids), []
    end = time.monotonic() + a.wait
    while want and time.monotonic() < end:
        time.sleep(0.05)
        for r in _ask(a.where, probe_results=True)["results"]:
            if r["request_id"] in want:
                want.discard(r["request_id"])
                got.append(r)
    got += [{"request_id": rid, "to": dest, "ev": ev, "rtt_ns": None, "status": "no answer"}
            for rid, ev in zip(rids, evs, strict=True) if rid in want]
    return {"to": dest, "results": sorted(got, key=lambda r: r["ev"])}



def _field(text: str) -> dict[str, int]:
    """``width=16,init=0xe000,min=0xe000,max=0xefff[,mask=0xffff]`` → a GEN field."""
    out: dict[str, int] = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        if not sep or k.strip() not in ("width", "init", "min", "max", "mask"):
            raise argparse.ArgumentTypeError(f"{part!r}: fields are width=, init=, min=, "
                                             "max=, mask=")
        out[k.strip()] = int(v, 0)
    if "width" not in out:
        raise argparse.ArgumentTypeError("a GEN field needs width=")
    return out


def _profile_spec(a: argparse.Namespace) -> dict[str, Any]:
    from emu.topology.units import parse_time

    if a.what == "ev-profile":
        return {"format": a.format, "mode": a.mode, "evs": a.evs or [],
                "fields": a.field or [], **({"split": a.split} if a.split else {})}
    from emu.errors import UserError
    from emu.topology.units import UnitError

    spec: dict[str, Any] = {"algorithm": a.algorithm}
    if a.base_rtt is not None:
        if a.base_rtt.strip().replace(".", "", 1).isdigit():
            raise UserError(f"--base-rtt {a.base_rtt}: give a unit (fabric time, e.g. 6us)")
        try:
            spec["base_rtt"] = parse_time(a.base_rtt)
        except UnitError as e:
            raise UserError(f"--base-rtt: {e}") from None
    for k in ("gamma", "qa_gate", "init_cwnd"):
        if getattr(a, k) is not None:
            spec[k] = getattr(a, k)
    return spec


def _show(k: str, v: Any) -> str:
    """A spec value as the user wrote it: EVs in hex, times with a unit."""
    if k == "base_rtt" and isinstance(v, int | float):
        return f"{k}={v * 1e6:g}us"
    if k == "evs":
        return f"{k}=[{', '.join(hex(x) for x in v)}]"
    if k == "fields":
        return f"{k}=[" + "; ".join(",".join(f"{a}={b:#x}" if a != "width" else f"{a}={b}"
                                             for a, b in f.items() if b is not None)
                                    for f in v) + "]"
    return f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"


def profiles_text(res: dict[str, Any]) -> str:
    """A listing (or one profile) as lines: kind, name, state, the spec, the defaults."""
    if "profiles" not in res:
        res = {"profiles": [res], "default": {}}
    lines = []
    for p in res["profiles"]:
        mark = "  (default)" if res["default"].get(p["kind"]) == p["name"] else ""
        spec = ", ".join(_show(k, v) for k, v in p["spec"].items() if v not in ([], None))
        lines.append(f"{p['kind'].upper():2s} {p['name']:<16s} {p['state']:<8s} {spec}{mark}")
    return "\n".join(lines)


def main(a: argparse.Namespace) -> int:
    from emu.errors import UserError

    try:
        if a.what in ("ev-profile", "cc-profile"):
            if a.action != "list" and not a.name:
                raise UserError(f"{a.what} {a.action} needs a profile NAME")
            kind = a.what[:2]
            res = _ask(a.where, profile_kind=kind, profile_action=a.action,
                       name=None if a.action == "list" else a.name,
                       spec=_profile_spec(a) if a.action == "create" else None)
            if a.action == "list" and "profiles" in res:  # this kind's (and NAME's) only
                res = {**res, "profiles": [p for p in res["profiles"] if p["kind"] == kind
                                           and (not a.name or p["name"] == a.name)]}
            print(json.dumps(res, indent=1) if a.json else profiles_text(res))
            return 0
        if a.what == "probe":
            res = probe(a)
            out = json.dumps(res, indent=1) if a.json else "\n".join(
                f"EV {r['ev']:#06x} -> {r['to']}: "
                + (f"{r['rtt_ns'] / 1e3:.3f} us (fabric)" if r["status"] == "OK"
                   else r["status"]) for r in res["results"])
            print(out)
            return 0 if all(r["status"] == "OK" for r in res["results"]) else 1
        if a.what == "qp":
            res = _ask(a.where, qpn=a.qpn)
            out = json.dumps(res, indent=1) if a.json else table(res["qps"])
        elif a.what == "events":
            res = _ask(a.where, events=True)
            out = json.dumps(res, indent=1) if a.json else "\n".join(
                [f"QP {e['qpn']:#08x} EV {e['ev']:#x} plane {e['plane']}: {e['from']} -> "
                 f"{e['to']} ({e['cause']}) at {e['time']:.9f}" for e in res["events"]]
                + [f"dropped {res['drop_count']}"])
        elif a.what == "port":
            res = _ask(a.where, port=a.port, up=a.state == "up")
            out = json.dumps(res, indent=1) if a.json else (
                f"port {res['port']} {'up' if res['up'] else 'down'} on {res['qps']} QP(s); "
                f"ports down: {', '.join(map(str, res['ports_down'])) or 'none'}")
        else:
            res = _ask(a.where, qpn=a.qpn, ev=a.ev, action=a.action)
            out = json.dumps(res, indent=1) if a.json else table([res["qp"]])
    except UserError as e:
        print(f"emu mrc: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


def add_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mrc", help="the MRC controller: a host's QPs and their EV tables, "
                                   "EV events, deny/allow an EV, port up/down, EV probes")
    ms = p.add_subparsers(dest="what", required=True)
    q = ms.add_parser("qp", help="MRC QPs of a host's NIC with their EV tables, live")
    q.add_argument("where", metavar="CLUSTER:HOST")
    q.add_argument("qpn", nargs="?", type=_ev, help="one QP (default: every MRC QP)")
    ev = ms.add_parser("events", help="EV state changes since the last poll (and drops)")
    ev.add_argument("where", metavar="CLUSTER:HOST")
    c = ms.add_parser("ev", help="deny an EV (out of use) or allow it again")
    c.add_argument("where", metavar="CLUSTER:HOST")
    c.add_argument("qpn", type=_ev)
    c.add_argument("ev", type=_ev)
    c.add_argument("action", choices=("deny", "allow"))
    pt = ms.add_parser("port", help="take a NIC port (plane) down or bring it up")
    pt.add_argument("where", metavar="CLUSTER:HOST")
    pt.add_argument("port", type=int, help="the plane, from 0")
    pt.add_argument("state", choices=("up", "down"))
    pr = ms.add_parser("probe", help="EV_PROBE a peer NIC on some EVs: which paths answer, "
                                     "and their round trips")
    pr.add_argument("where", metavar="CLUSTER:HOST")
    pr.add_argument("peer", help="the peer: a host name (its address on --plane) or an address")
    pr.add_argument("--plane", type=int, default=0, help="the peer's plane (default 0)")
    pr.add_argument("--ev", type=_ev, action="append",
                    help="an EV to probe on, in the NIC's EV format (udp: a source port; "
                         "repeatable; default: -c EVs, the default EV profile's first)")
    pr.add_argument("-c", "--count", type=int, default=4, help="EVs without --ev (default 4)")
    pr.add_argument("--wait", type=float, default=10.0,
                    help="wall seconds to wait for the answers (default 10)")
    actions = ("list", "create", "offline", "online", "delete", "default")
    evp = ms.add_parser("ev-profile", help="EV profiles: which EVs new QPs spray over")
    ccp = ms.add_parser("cc-profile", help="CC profiles: new QPs' congestion control")
    for x in (evp, ccp):
        x.add_argument("where", metavar="CLUSTER:HOST")
        x.add_argument("action", choices=actions,
                       help="list (this kind's; NAME: one), create NAME (state INIT), "
                            "offline NAME (from INIT or ONLINE), online NAME (from OFFLINE), "
                            "delete NAME (not ONLINE), default NAME (an ONLINE one: what new "
                            "QPs that name none get)")
        x.add_argument("name", nargs="?")
    evp.add_argument("--format", choices=("udp", "stev", "srv6"), default="udp",
                     help="where the EV rides (default udp: the source port; stev: the source "
                          "port and the IPv6 flow label; srv6: as stev, in an outer IPv6 header "
                          "naming the EV's path — a cluster with routing.mode = srv6)")
    evp.add_argument("--split", metavar="S+F[@BASE]",
                     help="stev, srv6: S EV bits in the source port (above BASE), F in the "
                          "flow label (default 16+16; specs/mrc.md's other reading: "
                          "12+20@0xd000)")
    evp.add_argument("--mode", choices=("auto", "exp", "gen"), default="gen",
                     help="auto (drawn at random), exp (--evs), gen (--field; the default)")
    evp.add_argument("--evs", type=_evs, help="EXP: the EVs, comma-separated")
    evp.add_argument("--field", type=_field, action="append",
                     help="GEN: a field width=…,init=…,min=…,max=…[,mask=…] (repeatable, "
                          "most significant first)")
    ccp.add_argument("--algorithm", choices=("uet-1.0-nscc", "none"), default="uet-1.0-nscc")
    ccp.add_argument("--base-rtt", help="NSCC's base round trip, fabric time (e.g. 6us)")
    ccp.add_argument("--gamma", type=float)
    ccp.add_argument("--qa-gate", type=int)
    ccp.add_argument("--init-cwnd", type=int, help="NSCC's first window, bytes (> 0)")
    for x in (q, ev, c, pt, pr, evp, ccp):
        x.add_argument("--json", action="store_true")
    p.set_defaults(func=main)

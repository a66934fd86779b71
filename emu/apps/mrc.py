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
    try:
        return call_once(sock_path(cluster, host), "mrc", **req)
    except DaemonDown as e:
        raise UserError(str(e)) from None
    except NicError as e:
        raise UserError(f"{cluster}:{host}: {e.args[-1] if e.args else e}") from None
    except OSError as e:
        raise UserError(f"{cluster}:{host}: no NIC daemon answers ({e})") from None


def _ev(text: str) -> int:
    return int(text, 0)


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


def main(a: argparse.Namespace) -> int:
    from emu.errors import UserError

    try:
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
                                   "EV events, deny/allow an EV, port up/down")
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
    for x in (q, ev, c, pt):
        x.add_argument("--json", action="store_true")
    p.set_defaults(func=main)

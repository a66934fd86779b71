# SPDX-License-Identifier: GPL-2.0-only
"""``emu status``: what a cluster is, read back from the kernel (pyroute2 dumps).

The cluster's shape (nodes, links and their ends) comes from the state file;
state, addresses and counters come from netlink inside each namespace, so the
output shows what is, not what was meant. Nodes whose namespace is missing are
reported ``present: false`` rather than failing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from emu.fabric import naming, netns, srv6bpf, state

if TYPE_CHECKING:
    from pyroute2 import IPRoute

_STATS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped",
          "rx_errors", "tx_errors")


def _open(ns: str) -> IPRoute:
    """A pyroute2 socket inside ``ns`` without pyroute2's fork-per-socket netns helper
    (pyroute2 imported here: the package's other users — a switch daemon — need not)."""
    from pyroute2 import IPRoute

    with netns.entered(ns):
        return IPRoute(groups=0)


def interfaces(ns: str) -> dict[str, dict[str, Any]]:
    """Every interface in ``ns``: state, MTU, MAC, alias, addresses, counters (IFLA_STATS64)."""
    ipr = _open(ns)
    try:
        out: dict[str, dict[str, Any]] = {}
        by_index: dict[int, dict[str, Any]] = {}
        for msg in ipr.get_links():
            name = msg.get("ifname")
            st = msg.get("stats64") or msg.get("stats") or {}
            d = {
                "ifname": name,
                "index": msg["index"],
                "state": (msg.get("operstate") or "UNKNOWN").lower(),
                "admin_up": bool(msg["flags"] & 1),
                "mtu": msg.get("mtu"),
                "mac": msg.get("address"),
                "alias": msg.get("ifalias"),
                "addresses": [],
                **{k: int(st.get(k, 0)) for k in _STATS},
            }
            out[name] = by_index[msg["index"]] = d
        for msg in ipr.get_addr():
            d = by_index.get(msg["index"])
            if d is not None and msg.get("scope", 0) != 253:  # skip link-local
                d["addresses"].append(f"{msg.get('address')}/{msg['prefixlen']}")
        return out
    finally:
        ipr.close()


def status(cluster: str) -> dict[str, Any]:
    """A JSON-ready description of ``cluster`` (``emu status --json``).

    Never fails on a half-made or half-gone cluster: a namespace that is not
    (or no longer) there is ``present: false``, one that cannot be read carries
    ``error``, every recorded process carries ``alive``, and ``state`` sums it
    up (:func:`health`) with the ``problems`` that make it so."""
    st = state.load(cluster)
    if st is None:
        raise KeyError(f"no cluster {cluster!r}")
    nodes_info = st.get("nodes", {})
    ifs: dict[str, dict[str, dict[str, Any]]] = {}
    nodes = []
    for rec in st.get("namespaces", []):
        node, ns = rec["node"], rec["name"]
        # a name whose bind mount was never made (up killed inside netns.create) is no
        # namespace: entering it would fail with EINVAL
        present = os.path.ismount(netns.netns_path(ns))
        error = None
        try:
            ifs[node] = interfaces(ns) if present else {}
        except OSError as e:
            ifs[node], error = {}, f"cannot read: {e.strerror or e}"
        nodes.append({"name": node, "namespace": ns, "present": present,
                      **({"error": error} if error else {}),
                      **nodes_info.get(node, {}),
                      "interfaces": [v for k, v in sorted(ifs[node].items()) if k != "lo"],
                      "loopback": ifs[node].get("lo", {}).get("addresses", [])})
    links = []
    for lk in st.get("links", []):
        ends = {}
        for side in ("a", "b"):
            node, ifname = lk[side]
            d = ifs.get(node, {}).get(ifname)
            ends[side] = {"node": node, "ifname": ifname, **(d or {"state": "absent"})}
        links.append({"name": lk["name"], "plane": lk.get("plane"), **ends})
    pids = [{**p, "alive": state.alive(p["pid"], p.get("start"))} for p in st.get("pids", [])]
    pids += [{"pid": None, "what": sp["what"], "alive": False, "spawning": True}
             for sp in st.get("spawning", [])]
    out = {
        "cluster": cluster, "phase": st.get("phase"), "step": st.get("step"),
        "created": st.get("created"),
        "topology": st.get("topology"), "marker": naming.marker(cluster),
        "nodes": nodes, "links": links, "pids": pids,
    }
    if st.get("srv6"):
        out["srv6"] = srv6_status(st)
    out["state"], out["problems"] = health(st, out)
    return out


def srv6_status(st: dict[str, Any]) -> dict[str, Any]:
    """Which SRv6 datapath serves (``datapath``: the switches', ``kernel`` | ``bpf``;
    ``decap``: the hosts') and the BPF programs' counters per node, summed over its
    ports (:data:`emu.fabric.srv6bpf.STATS`; a node whose programs are gone is left
    out)."""
    counters = {}
    for node, progs in sorted((st.get("srv6_progs") or {}).items()):
        c = srv6bpf.node_counters({k: int(v) for k, v in progs.items()})
        if c is not None:
            counters[node] = c
    return {"datapath": st["srv6"], "decap": st.get("srv6_decap", "kernel"),
            "counters": counters}


def health(st: dict[str, Any], s: dict[str, Any]) -> tuple[str, list[str]]:
    """``up``, ``degraded`` (up, but a namespace is gone or a daemon died), ``abandoned``
    (up, but every process it started is dead: ``emu clean`` removes it), ``starting`` /
    ``tearing-down`` (under way), ``partial`` (an up or down that died half way: finish
    it with ``emu down`` or ``emu clean``) or ``corrupt``; and what makes it so."""
    problems = []
    if st.get("corrupt"):
        return "corrupt", [f"state file unreadable: {st['corrupt']}"]
    for n in s["nodes"]:
        if n.get("error"):
            problems.append(f"namespace {n['namespace']}: {n['error']}")
        elif not n["present"]:
            problems.append(f"namespace {n['namespace']} missing")
    for p in s["pids"]:
        if p.get("spawning"):
            problems.append(f"{p['what']}: start not recorded")
        elif not p["alive"]:
            problems.append(f"{p['what']} (pid {p['pid']}) dead")
    phase = st.get("phase")
    if state.abandoned(st):
        return "abandoned", problems + ["every process it started is dead: emu clean removes it"]
    if phase == "up":
        return ("degraded" if problems else "up"), problems
    if state.crashed(st):
        step = st.get("step") or phase
        return "partial", [f"emu up/down (pid {st.get('pid')}) died while {step}"] + problems
    return str(phase), problems


def render(s: dict[str, Any]) -> str:
    """A plain-text table of a :func:`status` result."""
    topo = s.get("topology") or {}
    # the topology's own name and kind, not the cluster's name again (a state file written
    # before they were recorded has only the cluster's)
    kind = f"{topo['kind']}, " if topo.get("kind") else ""
    lines = [f"cluster {s['cluster']}  state {s.get('state', s['phase'])}  "
             f"created {s['created']}  "
             f"topology {topo.get('declared_name') or topo.get('name')} "
             f"({kind}{topo.get('source')})  routing {topo.get('routing')}"
             + (f" ({s['srv6']['datapath']} datapath, decap {s['srv6']['decap']})"
                if s.get("srv6") else "")]
    lines += [f"  {p}" for p in s.get("problems", [])]
    lines += ["", f"{'NODE':<12} {'KIND':<7} {'NAMESPACE':<24} ADDRESSES"]
    for n in s["nodes"]:
        addrs = [a for i in n["interfaces"] for a in i["addresses"]] + n.get("loopback", [])
        # a leaf holds its hosts' gateway on each host-facing port: one mention is enough
        addrs = list(dict.fromkeys(a for a in addrs if not a.startswith(("127.", "::1/"))))
        pres = "" if n["present"] and not n.get("error") else " (missing)"
        lines.append(f"{n['name']:<12} {n.get('kind', '?'):<7} {n['namespace'] + pres:<24} "
                     f"{' '.join(addrs)}")
    lines += ["", f"{'LINK':<18} {'A':<18} {'B':<18} {'STATE':<10} "
                  f"{'A→B pkts':>10} {'B→A pkts':>10} {'drops':>7}"]
    for lk in s["links"]:
        a, b = lk["a"], lk["b"]
        st = a.get("state", "?") if a.get("state") == b.get("state") else \
            f"{a.get('state')}/{b.get('state')}"
        drops = sum(int(e.get(k, 0)) for e in (a, b) for k in ("rx_dropped", "tx_dropped"))
        lines.append(f"{lk['name']:<18} {a['node'] + ':' + a['ifname']:<18} "
                     f"{b['node'] + ':' + b['ifname']:<18} {st:<10} "
                     f"{a.get('tx_packets', 0):>10} {b.get('tx_packets', 0):>10} {drops:>7}")
    if s.get("srv6", {}).get("counters"):
        lines += ["", f"{'SRV6 (tc BPF)':<14} {'shifted':>9} {'srh_end':>9} {'decapped':>9} "
                      f"{'ce_copied':>9} {'dropped':>9} {'passed':>9} {'bare':>9}"]
        for node, c in s["srv6"]["counters"].items():
            dropped = c["dropped_ecn"] + c["dropped_srh"] + c["malformed"] + c["failed"]
            lines.append(f"{node:<14} {c['shifted']:>9} {c['srh_end']:>9} {c['decapped']:>9} "
                         f"{c['ce_copied']:>9} {dropped:>9} {c['passed']:>9} {c['bare']:>9}")
    if s.get("pids"):
        lines += ["", f"{'DAEMON':<18} {'PID':>8} STATE"]
        for p in s["pids"]:
            what = "starting (pid not recorded)" if p.get("spawning") else \
                ("alive" if p["alive"] else "DEAD")
            lines.append(f"{p['what']:<18} {p['pid'] or '-'!s:>8} {what}")
    return "\n".join(lines)


def exec_argv(cluster: str, node: str, argv: list[str]) -> list[str]:
    """How to run ``argv`` inside ``node`` of ``cluster`` (for ``emu exec NODE -- CMD``).

    The namespace name comes from the state file, never from guessing.
    """
    st = state.load(cluster)
    if st is None:
        raise KeyError(f"no cluster {cluster!r}")
    for rec in st.get("namespaces", []):
        if rec["node"] == node:
            return netns.exec_argv(rec["name"], argv)
    raise KeyError(f"no node {node!r} in cluster {cluster!r}")

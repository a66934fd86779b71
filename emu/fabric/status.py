# SPDX-License-Identifier: GPL-2.0-only
"""``emu status``: what a cluster is, read back from the kernel (rtnetlink dumps).

The cluster's shape (nodes, links and their ends) comes from the state file;
state, addresses and counters come from netlink inside each namespace, so the
output shows what is, not what was meant. Nodes whose namespace is missing are
reported ``present: false`` rather than failing.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Any

from emu.fabric import naming, netns, nl, srv6bpf, state

_STATS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped",
          "rx_errors", "tx_errors")


#: IFLA_OPERSTATE values (RFC 2863), as ``ip link`` names them
_OPERSTATE = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")
#: struct rtnl_link_stats64's first eight counters, in order, as :data:`_STATS` names them
_STATS64 = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors",
            "rx_dropped", "tx_dropped")
_IFLA_ADDRESS, _IFLA_OPERSTATE, _IFLA_STATS64 = 1, 16, 23


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.split(b"\0", 1)[0].decode(errors="replace")


def interfaces(ns: str) -> dict[str, dict[str, Any]]:
    """Every interface in ``ns``: state, MTU, MAC, alias, addresses, counters (IFLA_STATS64).
    Two rtnetlink dumps decoded with ``struct`` (:meth:`emu.fabric.nl.Batch.dump`)."""
    with netns.entered(ns):
        sock = nl.Batch()
    try:
        links = sock.dump(nl.RTM_GETLINK, struct.pack("=BxHiII", 0, 0, 0, 0, 0))
        addrs = sock.dump(nl.RTM_GETADDR, struct.pack("=BBBBI", 0, 0, 0, 0, 0))
    finally:
        sock.close()
    out: dict[str, dict[str, Any]] = {}
    by_index: dict[int, dict[str, Any]] = {}
    for m in links:
        _, _, index, flags, _ = struct.unpack_from("=BxHiII", m)
        a = nl.parse_attrs(m, 16)
        name = _text(a.get(nl.IFLA_IFNAME))
        st = a.get(_IFLA_STATS64, b"")
        stats = dict(zip(_STATS64, struct.unpack_from("=8Q", st), strict=True)) \
            if len(st) >= 64 else {}
        op = a.get(_IFLA_OPERSTATE, b"\0")[0]
        mac = a.get(_IFLA_ADDRESS)
        mtu = a.get(nl.IFLA_MTU)
        d = {
            "ifname": name,
            "index": index,
            "state": _OPERSTATE[op] if op < len(_OPERSTATE) else "unknown",
            "admin_up": bool(flags & 1),
            "mtu": struct.unpack("=I", mtu)[0] if mtu and len(mtu) >= 4 else None,
            "mac": ":".join(f"{x:02x}" for x in mac) if mac else None,
            "alias": _text(a.get(nl.IFLA_IFALIAS)),
            "addresses": [],
            **{k: int(stats.get(k, 0)) for k in _STATS},
        }
        out[str(name)] = by_index[index] = d
    for m in addrs:
        fam, plen, _, scope, index = struct.unpack_from("=BBBBI", m)
        d = by_index.get(index)
        raw = nl.parse_attrs(m, 8).get(nl.IFA_ADDRESS)
        if d is not None and raw is not None and scope != 253:  # skip link-local
            d["addresses"].append(f"{socket.inet_ntop(fam, raw)}/{plen}")
    return out


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

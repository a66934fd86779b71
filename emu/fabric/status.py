# SPDX-License-Identifier: GPL-2.0-only
"""``emu status``: what a cluster is, read back from the kernel (pyroute2 dumps).

The cluster's shape (nodes, links and their ends) comes from the state file;
state, addresses and counters come from netlink inside each namespace, so the
output shows what is, not what was meant. Nodes whose namespace is missing are
reported ``present: false`` rather than failing.
"""

from __future__ import annotations

from typing import Any

from pyroute2 import IPRoute

from emu.fabric import naming, netns, state

_STATS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped",
          "rx_errors", "tx_errors")


def _open(ns: str) -> IPRoute:
    """A pyroute2 socket inside ``ns`` without pyroute2's fork-per-socket netns helper."""
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
    """A JSON-ready description of ``cluster`` (``emu status --json``)."""
    st = state.load(cluster)
    if st is None:
        raise KeyError(f"no cluster {cluster!r}")
    nodes_info = st.get("nodes", {})
    ifs: dict[str, dict[str, dict[str, Any]]] = {}
    nodes = []
    for rec in st.get("namespaces", []):
        node, ns = rec["node"], rec["name"]
        present = netns.exists(ns)
        ifs[node] = interfaces(ns) if present else {}
        nodes.append({"name": node, "namespace": ns, "present": present,
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
    return {
        "cluster": cluster, "phase": st.get("phase"), "created": st.get("created"),
        "topology": st.get("topology"), "marker": naming.marker(cluster),
        "nodes": nodes, "links": links, "pids": st.get("pids", []),
    }


def render(s: dict[str, Any]) -> str:
    """A plain-text table of a :func:`status` result."""
    topo = s.get("topology") or {}
    lines = [f"cluster {s['cluster']}  phase {s['phase']}  created {s['created']}  "
             f"topology {topo.get('name')} ({topo.get('source')})  routing {topo.get('routing')}",
             "", f"{'NODE':<12} {'KIND':<7} {'NAMESPACE':<24} ADDRESSES"]
    for n in s["nodes"]:
        addrs = [a for i in n["interfaces"] for a in i["addresses"]] + n.get("loopback", [])
        addrs = [a for a in addrs if not a.startswith(("127.", "::1/"))]
        pres = "" if n["present"] else " (missing)"
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

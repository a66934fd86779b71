# SPDX-License-Identifier: GPL-2.0-only
"""Build and tear down a cluster: :class:`Fabric`.

Order of ``up()`` and why:

1. **state file** naming every namespace about to be made (so SIGKILL at any
   point leaves a record ``down`` can act on);
2. **namespaces** (in-process ``unshare`` + bind mount, ~0.6 ms each), inodes
   recorded;
3. **sysctls** per namespace, written from this thread after ``setns`` — before
   any veth exists, so ``conf.default`` values reach the veths; the netlink
   socket for step 5 is opened in the same visit;
4. **veths** created by one batched RTM_NEWLINK per link from the root
   namespace *directly inside* their two namespaces with their final names
   (``IFLA_NET_NS_FD`` on the device and on the peer). No temporary device
   ever exists in the root namespace, so nothing there can collide or leak;
5. **per node**: offloads by ``SIOCETHTOOL`` ioctl on a socket inside the
   namespace, both veth ends (:func:`emu.ifinfo.set_feature`): TX checksum
   offload off (locally sent packets carry a real checksum in captures); GRO
   on and TSO off, which puts the veth in NAPI mode — see :func:`cable_offloads`
   for why a cable needs it; then links up with ifalias
   ``emu:<cluster>``, addresses (IPv6 ``nodad``), then routes, SRv6 SIDs and
   rules (:mod:`emu.fabric.routes`) in a second pass once carriers are up;
6. **SRv6 in tc BPF** (``routing.mode = "srv6"``): the programs of
   :mod:`emu.fabric.srv6bpf` on every port's ingress hook — the uSID shift on
   switches where the kernel's ``seg6local`` does not serve them, the decap on
   hosts (:func:`srv6_path` chooses; the state file records it as ``srv6``).

Any failure rolls back everything recorded and raises :class:`FabricError`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import time
from typing import Any

from emu.fabric import linkctl, naming, netns, nl, routes, srv6bpf, state
from emu.fabric.progress import Progress
from emu.ifinfo import set_feature
from emu.jsonable import jsonable
from emu.topology.model import Topology

#: veth ifindexes are unique across the cluster (link j: a = BASE+2j, b = BASE+2j+1) — see nl.veth
IFINDEX_BASE = 16
#: wall seconds a route via a gateway the kernel does not reach yet is tried again
ROUTE_SETTLE_S = 2.0


class FabricError(RuntimeError):
    """``up`` failed; everything it made has been removed again."""


def srv6_path(topology: Topology, cluster: str) -> routes.Srv6Path:
    """Which datapath serves SRv6 here (``[routing] srv6``, see :mod:`emu.fabric.routes`):

    * ``kernel``: the kernel's ``seg6local End`` (NEXT-C-SID) on switches — an error
      naming the kernel option and ``srv6 = "bpf"`` where the kernel has no seg6local;
    * ``bpf``: the tc BPF uSID shift on switches — an error where clang or tc is missing;
    * ``auto``: ``kernel`` where :func:`emu.fabric.linkctl.features` finds seg6local,
      else ``bpf``.

    Hosts decapsulate in tc BPF in every case (the kernel's End.DT6 drops the outer
    CE mark); only where BPF cannot run does a kernel host fall back to End.DT6."""
    setting = topology.srv6
    if setting not in routes.SRV6_SETTINGS:
        raise FabricError(f"cluster {cluster}: routing.srv6 = {setting!r} is not one of "
                          + ", ".join(routes.SRV6_SETTINGS))
    no_bpf = srv6bpf.available()
    if setting == "bpf":
        if no_bpf is not None:
            raise FabricError(f"cluster {cluster}: routing.srv6 = \"bpf\" needs clang and tc "
                              f"to load emu's SRv6 programs: {no_bpf}")
        return routes.Srv6Path("bpf", "bpf")
    seg6 = linkctl.features().seg6local
    if setting == "kernel" and not seg6:
        raise FabricError(
            f"cluster {cluster}: routing.srv6 = \"kernel\" needs the kernel's SRv6 local "
            "SIDs (seg6local routes, CONFIG_IPV6_SEG6_LWTUNNEL), and this kernel has none; "
            "use routing.srv6 = \"bpf\" (or \"auto\"), or routing.mode = \"ecmp\"")
    if not seg6:
        if no_bpf is not None:
            raise FabricError(
                f"cluster {cluster}: routing.mode = \"srv6\" needs the kernel's SRv6 local "
                "SIDs (seg6local routes, CONFIG_IPV6_SEG6_LWTUNNEL), which this kernel has "
                f"not, or emu's tc BPF datapath, which cannot run here ({no_bpf}); "
                "use routing.mode = \"ecmp\"")
        return routes.Srv6Path("bpf", "bpf")
    return routes.Srv6Path("kernel", "bpf" if no_bpf is None else "kernel")


def cable_offloads(sock: socket.socket, ifname: str, checksum_offload: bool) -> str | None:
    """Offloads of one veth end, through a socket of its namespace.

    GRO on and TSO off make the veth receive through NAPI: a per-device ring
    that one CPU drains in order. Why: without NAPI a veth hands each packet to
    the backlog of the CPU that sent it, and a shaped link (tbf) sends from two —
    the sender's system call and the qdisc's timer — so the two CPUs' backlogs
    raced and a cable reordered one flow (RoCEv2 write-bw at 1 Gb/s over IPv6,
    no loss anywhere: out-of-sequence NAKs and go-back-N in 4 of 6 runs). A
    cable never reorders. (One receive CPU per device by RPS kept order too, but
    a packet sent from the other CPU then waited for an inter-processor
    interrupt: the kernel ping's round trip went from ~25 to ~70 µs.) TSO must
    be off for veth to take locally sent packets into the ring; emu carries no
    TCP traffic. GRO merges nothing here: UDP datagrams merge only for a socket
    that asks (``UDP_GRO``), and the NIC daemons ask only where the sender's
    segments arrive unsplit (:class:`emu.nic.udp.PortSocket`), so a capture
    shows every frame as sent.

    Returns a warning when the kernel refuses GRO or TSO (the cable then keeps the
    old behaviour: order is not guaranteed on a shaped link), else None."""
    if not checksum_offload:
        set_feature(sock, ifname, "tx", False)
    try:
        set_feature(sock, ifname, "tso", False)
        set_feature(sock, ifname, "gro", True)
    except OSError as e:
        return (f"veth receive ring (GRO on, TSO off) refused by this kernel ({e.strerror}): "
                "a shaped link may reorder packets")
    return None


class Fabric:
    """A cluster of namespaces built from a :class:`Topology`; a context manager.

    ``with Fabric(topo, cluster="c1") as f: ...`` builds on entry and always
    tears down on exit. ``checksum_offload=False`` (default) gives correct
    checksums in captures at the cost of GSO super-packets being split in
    software; set True for throughput runs.
    """

    def __init__(self, topology: Topology, cluster: str | None = None,
                 checksum_offload: bool = False, progress: Progress | None = None,
                 final_phase: str = "up") -> None:
        self.topology = topology
        #: counts namespaces, sysctls, veths, links and routes set up (steps of ``emu up``)
        self.progress = progress or Progress()
        #: the state file's phase once the fabric is built; ``emu up`` says "starting"
        #: until its daemons run, so a bring-up killed after the fabric reads as unfinished
        self.final_phase = final_phase
        self.cluster = naming.check_cluster(cluster or topology.name)
        self.checksum_offload = checksum_offload
        self.timings: dict[str, float] = {}
        self.warnings: list[str] = []
        self._state: dict[str, Any] | None = None
        self._ifindex: dict[str, dict[str, int]] = {}
        #: the SRv6 datapath in use (None: routing is not srv6), set by ``up``
        self.srv6: routes.Srv6Path | None = None

    # -- names ---------------------------------------------------------------------------
    def ns(self, node: str) -> str:
        """The namespace of ``node``."""
        if node not in self.topology.nodes:
            raise KeyError(f"no node {node!r} in cluster {self.cluster!r}")
        return naming.ns_name(self.cluster, node)

    def exec_argv(self, node: str, argv: list[str]) -> list[str]:
        return netns.exec_argv(self.ns(node), argv)

    # -- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> Fabric:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> Fabric:
        step = "checking names"
        t0 = time.perf_counter()
        fds: dict[str, int] = {}
        socks: dict[str, nl.Batch] = {}
        try:
            names = {n: naming.ns_name(self.cluster, n) for n in self.topology.nodes}
            taken = [ns for ns in names.values() if netns.exists(ns)]
            if taken:
                raise FabricError(f"cluster {self.cluster}: namespace {taken[0]} already exists"
                                  f" (cluster up? `emu down {self.cluster}`)")
            if self.topology.routing == "srv6":
                self.srv6 = srv6_path(self.topology, self.cluster)
                if self.srv6.host == "kernel":
                    self.warnings.append(
                        f"SRv6 hosts decapsulate with the kernel's End.DT6, which does not "
                        f"copy the outer ECN CE mark to the inner packet (the BPF decap "
                        f"cannot run here: {srv6bpf.available()})")
            bpf_nodes = self._srv6_bpf_nodes()
            n_nodes, n_links = len(self.topology.nodes), len(self.topology.links)
            self.progress.add_total(4 * n_nodes + n_links + len(bpf_nodes))
            plans = routes.plan(self.topology, srv6_path=self.srv6)
            self._mark("plan", t0)

            step = "writing the state file"
            try:
                self._state = state.create(self.cluster, self._info())
            except FileExistsError:
                raise FabricError(f"cluster {self.cluster} already has a state file "
                                  f"{state.path(self.cluster)}: `emu down {self.cluster}` "
                                  f"or `emu clean`") from None
            self._state["namespaces"] = [{"name": ns, "node": n, "inode": None}
                                         for n, ns in names.items()]
            if self.srv6 is not None:
                # the datapath in use (emu status says it); srv6_progs: {node: {port: BPF
                # program id}} for the counters
                self._state["srv6"] = self.srv6.name
                self._state["srv6_decap"] = self.srv6.host
                self._state["srv6_progs"] = {}
            state.save(self._state)

            step = "creating namespaces"
            t = time.perf_counter()
            for rec in self._state["namespaces"]:
                rec["inode"] = netns.create(rec["name"])
                fds[rec["node"]] = netns.open_ns(rec["name"])
                self.progress.step("creating namespaces")
            state.save(self._state)
            self._mark("netns", t)

            step = "setting sysctls"
            t = time.perf_counter()
            for node, p in plans.items():
                with netns.entered(fds[node]):
                    missing = netns.write_sysctls(p.sysctls)
                    socks[node] = nl.Batch()
                self.progress.step("setting sysctls")
                for key in missing:
                    msg = f"{key} not available on this kernel"
                    if msg not in self.warnings:
                        self.warnings.append(msg)
            self._mark("sysctl", t)

            step = "creating veths"
            t = time.perf_counter()
            with nl.Batch() as root:
                msgs = [nl.veth(lk.a.ifname, fds[lk.a.node], lk.b.ifname, fds[lk.b.node],
                                lk.mtu, IFINDEX_BASE + 2 * j, IFINDEX_BASE + 2 * j + 1)
                        for j, lk in enumerate(self.topology.links)]
                msgs += [nl.veth(routes.SID_DEV, fds[n], routes.SID_PEER, fds[n], 9000, 2, 3)
                         for n, p in plans.items() if p.sids]
                for i in range(0, len(msgs), 256):
                    root.run(msgs[i:i + 256])
                    self.progress.step("creating veths", min(256, n_links - i) if i < n_links
                                       else 0)
            self._mark("veth", t)

            step = "configuring links and addresses"
            t = time.perf_counter()
            for node, p in plans.items():
                self._configure_links(node, p, fds[node], socks[node])
                self.progress.step("configuring links and addresses")
            self._mark("config", t)

            step = "installing routes"
            t = time.perf_counter()
            for node, p in plans.items():
                self._install_routes(node, p, socks[node])
                self.progress.step("installing routes")
            self._mark("routes", t)

            if bpf_nodes:
                step = "attaching the SRv6 BPF datapath"
                t = time.perf_counter()
                obj = srv6bpf.build()
                for node, program in bpf_nodes.items():
                    ports = [lk.end(node).ifname for lk in self.topology.links_of(node)]
                    lo6 = self.topology.nodes[node].loopback6
                    assert lo6 is not None
                    self._state["srv6_progs"][node] = srv6bpf.attach(
                        names[node], ports, program, srv6bpf.locator(lo6), obj)
                    self.progress.step(step)
                state.save(self._state)
                self._mark("srv6bpf", t)

            self._state["phase"] = self.final_phase
            state.save(self._state)
        except BaseException as e:
            for s in socks.values():
                s.close()
            socks.clear()
            for fd in fds.values():
                os.close(fd)
            fds.clear()
            self._rollback()
            if isinstance(e, Exception) and not isinstance(e, FabricError):
                raise FabricError(f"emu up {self.cluster}: failed while {step}: {e}; "
                                  f"everything made so far was removed") from e
            raise
        finally:
            for s in socks.values():
                s.close()
            for fd in fds.values():
                os.close(fd)
        self.timings["up"] = time.perf_counter() - t0
        return self

    def down(self) -> dict[str, int]:
        """Remove the cluster (everything its state file lists). Idempotent."""
        t = time.perf_counter()
        with state.locked():
            st = state.load(self.cluster)
        removed = state.teardown(st) if st is not None else {}
        self._state = None
        self.timings["down"] = time.perf_counter() - t
        return removed

    def _srv6_bpf_nodes(self) -> dict[str, str]:
        """{node: BPF program} for the SRv6 datapath chosen (``shift`` on switches,
        ``decap`` on hosts, where they serve; only nodes with a loopback and a port)."""
        p = self.srv6
        if p is None:
            return {}
        out = {}
        for n in self.topology.nodes.values():
            prog = "shift" if n.kind == "switch" else "decap"
            if (p.switch if n.kind == "switch" else p.host) == "bpf" and \
                    n.loopback6 is not None and self.topology.links_of(n.name):
                out[n.name] = prog
        return out

    def _rollback(self) -> None:
        if self._state is None:
            return  # nothing was made (the file was never ours)
        with contextlib.suppress(Exception):
            state.teardown(self._state)
        self._state = None

    def _mark(self, what: str, since: float) -> None:
        self.timings[what] = time.perf_counter() - since

    def _info(self) -> dict[str, Any]:
        t = self.topology
        return {
            "topology": {"name": t.name, "source": t.source, "params": jsonable(t.params),
                         "routing": t.routing, "srv6": t.srv6, "hash_seed": t.hash_seed,
                         "kind": t.kind,
                         "declared_name": t.declared_name},
            "nodes": {n.name: {"kind": n.kind, "role": n.role, "plane": n.plane}
                      for n in t.nodes.values()},
            "links": [{"name": lk.name, "a": [lk.a.node, lk.a.ifname],
                       "b": [lk.b.node, lk.b.ifname], "plane": lk.plane} for lk in t.links],
        }

    # -- per-node configuration ----------------------------------------------------------
    def _configure_links(self, node: str, p: routes.NodePlan, fd: int, sock: nl.Batch) -> None:
        alias = naming.marker(self.cluster)
        idx: dict[str, int] = {"lo": 1}
        with netns.entered(fd):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for ifname, _mtu, _up in p.ifaces:
                    idx[ifname] = socket.if_nametoindex(ifname)
                    why = cable_offloads(s, ifname, self.checksum_offload)
                    if why is not None and why not in self.warnings:
                        self.warnings.append(why)
        self._ifindex[node] = idx
        msgs = [nl.link_set(1, what=f"{node}: lo up")]
        msgs += [nl.link_set(idx[ifn], up=up, alias=alias, what=f"{node}: {ifn} up")
                 for ifn, _mtu, up in p.ifaces]
        msgs += [nl.address(idx[ifn], a, what=f"{node}: address {a} on {ifn}", noprefixroute=npr)
                 for ifn, a, npr in p.addresses]
        sock.run(msgs)

    def _install_routes(self, node: str, p: routes.NodePlan, sock: nl.Batch) -> None:
        """The node's routes, SIDs and rules. A gateway the kernel calls unreachable
        (EHOSTUNREACH) is tried again for up to :data:`ROUTE_SETTLE_S`: a route via a
        gateway needs the link's carrier seen and the address's prefix route in place, and
        under load the kernel's link watch passes the carrier change on late (seen once in
        a CI run: ``h1: route ::/0: No route to host``). Retries replace the routes that
        went in and tolerate the SIDs and rules that did."""
        deadline = time.monotonic() + ROUTE_SETTLE_S
        msgs, tolerate = self._route_msgs(node, p), ()
        while True:
            try:
                sock.run(msgs, tolerate=tolerate)
                return
            except nl.NetlinkError as e:
                if e.errno != errno.EHOSTUNREACH or time.monotonic() > deadline:
                    raise
            time.sleep(0.02)
            msgs, tolerate = self._route_msgs(node, p, replace=True), (errno.EEXIST,)

    def _route_msgs(self, node: str, p: routes.NodePlan, replace: bool = False) -> list[nl.Msg]:
        idx = self._ifindex[node]
        msgs: list[nl.Msg] = []
        cache: dict[int, tuple[bytes, bool]] = {}  # plans share one hop list per BFS result
        for dst, hops, table in p.routes:
            enc = cache.get(id(hops))
            if enc is None:
                enc = cache[id(hops)] = nl.nexthops_attrs([(idx[i], gw) for i, gw in hops])
            m = nl.route(dst, table=table, replace=replace, encoded=enc)
            m.what = f"{node}: route"  # the destination is formatted only on failure
            msgs.append(m)
        for loc, action, table, csid in p.sids:
            m = nl.seg6local(loc, idx[routes.SID_DEV], action, table=table, next_csid=csid,
                             lblen=routes.USID_LBLEN, nflen=routes.USID_NFLEN)
            m.what = f"{node}: {m.what}"
            msgs.append(m)
        for src, table, prio in p.rules:
            m = nl.rule(src, table, prio)
            m.what = f"{node}: {m.what}"
            msgs.append(m)
        return msgs

    def reconverge(self, exclude_links: set[str]) -> int:
        """Re-install ECMP routes as a converged routing protocol would with ``exclude_links``
        gone (or back, with an empty set). Returns the number of routes written."""
        old = routes.plan(self.topology, srv6_path=self.srv6)
        new = routes.plan(self.topology, exclude_links, srv6_path=self.srv6)
        count = 0
        for node, p in new.items():
            if node not in self._ifindex:
                self._load_ifindex(node)
            idx = self._ifindex[node]
            with netns.entered(self.ns(node)):
                b = nl.Batch()
            with b:
                want = {(d, t) for d, _h, t in p.routes}
                stale = {(d, t) for d, _h, t in old[node].routes} - want
                b.run([nl.route(d, [], table=t, delete=True) for d, t in stale],
                      tolerate=(3,))  # ESRCH: already gone
                msgs = [nl.route(d, [(idx[i], gw) for i, gw in hops], table=t, replace=True)
                        for d, hops, t in p.routes]
                b.run(msgs)
                count += len(msgs)
        return count

    def _load_ifindex(self, node: str) -> None:
        idx = {"lo": 1}
        with netns.entered(self.ns(node)):
            for lk in self.topology.links_of(node):
                ifn = lk.end(node).ifname
                idx[ifn] = socket.if_nametoindex(ifn)
        self._ifindex[node] = idx

    def status(self) -> dict[str, Any]:
        from emu.fabric.status import status
        return status(self.cluster)


def build_and_destroy(topology: Topology, cluster: str | None = None) -> dict[str, float]:
    """Benchmark hook for ``scripts/bench-fabric``: build, tear down, return phase timings (s)."""
    f = Fabric(topology, cluster=cluster or naming.random_cluster("bench"))
    try:
        f.up()
    finally:
        f.down()
    out = dict(f.timings)
    out["total"] = out.get("up", 0.0) + out.get("down", 0.0)
    out["n_namespaces"] = float(len(topology.nodes))
    out["n_links"] = float(len(topology.links))
    return out

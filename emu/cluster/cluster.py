# SPDX-License-Identifier: GPL-2.0-only
"""A running cluster: the fabric, its link settings, its schedule, and its model.

:class:`emu.fabric.Fabric` builds namespaces, veths and routes; this module
adds what makes it the user's cluster: link impairments from the topology
file, the scheduled events (a small background process), an event log, and
the resolved model kept in the state file so later commands (``emu link``,
``emu impair``, ``emu capture``) act on the cluster as built.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from emu.errors import UserError
from emu.fabric import Fabric, state
from emu.fabric import down as fabric_down
from emu.topology import Topology
from emu.topology.serialize import from_dict, to_dict

if TYPE_CHECKING:
    from emu.plan import Plan


class ClusterError(RuntimeError):
    """A cluster command that cannot be carried out (no such cluster, ambiguous name …)."""


def event_log(cluster: str) -> str:
    """The JSON-lines log of every link change of ``cluster`` (kept after ``emu down``)."""
    return os.path.join(state.STATE_DIR, "logs", f"{cluster}.events.jsonl")


def up(topology: Topology, cluster: str | None = None, *, schedule: bool = True,
       daemons: bool = True, trace: bool = False, progress=print,
       plan: Plan | None = None) -> Fabric:
    """Build the cluster, apply its link settings, start its schedule and NIC daemons.

    Everything is started from ``plan`` (:func:`emu.plan.build` of ``topology`` unless
    given), which the state file keeps under ``plan``: the kernel gets the plan's wall
    rates (:func:`emu.plan.wall_model`), each daemon its part of the plan, and
    nothing here asks the topology for a setting again.

    All or nothing. Crash-safe: the state file names every object before it is
    made, and its ``phase`` stays "starting" (with ``step`` naming what is under
    way) until the last daemon is ready, so a SIGKILLed ``up`` reads as unfinished
    in ``emu status`` and ``emu clean`` removes it. ``trace``: every NIC daemon
    writes its engines' event trace to :func:`trace_path` (``emu up --trace``)."""
    from emu import plan as planning
    from emu.fabric import linkctl
    from emu.fabric.progress import Progress

    plan = plan or planning.build(topology)
    progress(f"fabric time: {plan.time.clock().describe()}; {plan.time.why}")
    # each host port's line rate goes in a kernel tbf on its egress too (the port's
    # serializer; the daemon then runs up to TX_LEAD ahead of it): emu.credible.rates
    topology = planning.wall_model(topology, plan)
    steps = Progress(emit=progress)
    n_switchd = len(plan.switches)
    steps.add_total(n_switchd + (len(plan.nics) if daemons else 0))
    fabric = Fabric(topology, cluster=cluster, progress=steps, final_phase="starting")
    fabric.up()
    name = fabric.cluster
    for w in fabric.warnings:  # what the kernel refused (a sysctl, the veth receive ring)
        progress(f"warning: {w}")
    if fabric.srv6 is not None:  # which SRv6 datapath serves: the kernel's, or tc BPF
        progress(f"SRv6: {fabric.srv6.describe()} (routing.srv6 = {topology.srv6})")
    log = event_log(name)
    try:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with state.locked():
            st = state.load(name)
            assert st is not None
            st["model"] = to_dict(topology)
            st["plan"] = plan.to_dict()
            st["serializers"] = plan.serializers  # what `emu impair --clear` goes back to
            st["event_log"] = log
            st["step"] = "applying link settings"
            state.save(st)
        impaired = [lk for lk in topology.links
                    if not (lk.a_to_b.is_default() and lk.b_to_a.is_default())]
        clock = plan.time.clock()  # the event log's lines carry fabric time
        # links just made: nothing of anyone's on them yet
        linkctl.apply_links(name, impaired, event_log=log, clock=clock, fresh=True)
        initially_down = [lk for lk in topology.links if not lk.up]
        for lk in initially_down:
            linkctl.set_link(name, lk, False, event_log=log, clock=clock)
        if initially_down:
            reconverge(name, topology)
        if impaired:
            progress(f"applied link settings to {len(impaired)} link(s) "
                     f"({linkctl.features().describe()})")
        state.update(name, up_done=time.time())

        # the switch and NIC daemons start together (neither waits for the other), so
        # their start-ups overlap where they wait on the kernel rather than the CPU
        jobs: dict[str, tuple[list[str], str, str | tuple[str, ...]]] = {}
        kinds: dict[str, str] = {}
        if n_switchd:
            sj = switch_jobs(name, plan)
            jobs.update(sj)
            kinds.update(dict.fromkeys(sj, "switch daemon"))
        nics = bool(daemons and plan.nics)
        if nics:
            state.update(name, credible=plan.credible)
            progress(plan.credible["line"])
            args = {h: n.args + srv6_path_args(name, topology, h) for h, n in plan.nics.items()}
            nj = nic_jobs(name, args, trace=trace,
                          workers={h: n.worker for h, n in plan.nics.items()})
            jobs.update(nj)
            kinds.update(dict.fromkeys(nj, "NIC daemon"))
        ready: dict[str, float] = {}
        if jobs:
            state.update(name, step="starting the daemons")
            ready = spawn_ready(name, jobs, daemon_timeout(len(plan.nics) if nics else 0),
                                "daemon", steps, kinds)
        if n_switchd:
            _remember("switchd", name)
            paths = sorted({str(c.get("datapath", "?")) for c in switch_counters(name).values()})
            progress(f"switch pipeline running on {n_switchd} switch(es), {'/'.join(paths)} "
                     f"datapath (emu switch NODE to inspect)")
        if schedule and topology.events:
            state.update(name, step="starting the scheduler")
            pid = _start_scheduler(name)
            progress(f"scheduled {len(topology.events)} event(s) (scheduler pid {pid}, "
                     f"log {log}" + ("; their times are fabric time after emu up)"
                                     if plan.time.scale != 1 else ")"))
        if nics:
            started = {k: v for k, v in ready.items() if kinds.get(k) == "NIC daemon"}
            progress(f"started {len(plan.nics)} NIC daemon(s) in {len(started)} process(es) (emu "
                     f"nicd; slowest ready after {max(started.values()):.2f} s; sockets in "
                     f"/run/emu/nic/{name}/)")
            if trace:
                progress(f"event traces: {trace_path(name, '<host>')}")
            _start_stallwatch(name, sorted({p["pid"] for p in (state.load(name) or {}).get(
                "pids", []) if p.get("what", "").startswith("nicd ")}))
            _remember("nicd", name)
        state.update(name, phase="up", step=None)
    except BaseException:
        fabric.down()
        remove_run_dirs(name, fabric_namespaces(topology, name))
        raise
    return fabric


def plan_of(cluster: str) -> Plan:
    """The plan ``cluster`` was started from (its state file's ``plan``)."""
    from emu.plan import Plan

    st = state.load(cluster)
    if st is None or "plan" not in st:
        raise ClusterError(f"cluster {cluster!r} has no plan in its state file "
                           f"(still coming up, or built by an older emu)")
    try:
        return Plan.from_dict(st["plan"])
    except (ValueError, KeyError, TypeError) as e:
        raise ClusterError(f"cluster {cluster!r}: its plan cannot be read: {e}") from None


def fabric_namespaces(topology: Topology, cluster: str) -> list[str]:
    from emu.fabric.naming import ns_name

    return [ns_name(cluster, n) for n in topology.nodes]


SWITCH_DIR = os.path.join(state.STATE_DIR, "switch")


def switch_dir(cluster: str, node: str | None = None) -> str:
    """Where a switch daemon keeps its control socket, counters and time series."""
    base = os.path.join(SWITCH_DIR, cluster)
    return os.path.join(base, node) if node else base


def spawn_ready(cluster: str, jobs: dict[str, tuple[list[str], str, str | tuple[str, ...]]],
                timeout: float, kind: str, progress=None,
                kinds: dict[str, str] | None = None) -> dict[str, float]:
    """Start daemons at once and wait until each prints a line starting with ``ready``.

    ``jobs``: name -> (argv after ``python -m``, log path, what the state file calls
    it — or, for a process serving several, each name it serves: the pid is recorded
    under each). Each pid is recorded in the state file right after the spawn, before
    readiness, so ``emu down`` — or the rollback of a failed ``up`` — stops it.
    Returns each one's seconds to ready; a daemon that exits or stays silent
    raises ClusterError with the end of its log.
    """
    import selectors

    import emu

    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(emu.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    procs: dict[str, tuple[subprocess.Popen, float, str]] = {}
    served = {name: 1 if isinstance(w, str) else len(w) for name, (_, _, w) in jobs.items()}
    sel = selectors.DefaultSelector()
    try:
        argvs = {name: [sys.executable, "-m", *argv] for name, (argv, _, _) in jobs.items()}
        names = {name: (w,) if isinstance(w, str) else w for name, (_, _, w) in jobs.items()}
        # every one journalled before the forks, every pid recorded before readiness:
        # one state-file write each way (emu down finds a process the journal names by
        # its argv, should this be killed between the two)
        state.add_spawns(cluster, [(argvs[n], names[n][0]) for n in jobs])
        try:
            for name, (_, log_path, _) in jobs.items():
                os.makedirs(os.path.dirname(log_path), exist_ok=True)
                with open(log_path, "ab") as log:
                    t0 = time.monotonic()
                    p = subprocess.Popen(argvs[name], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=log, env=env,
                                         start_new_session=True)
                procs[name] = (p, t0, log_path)
                assert p.stdout is not None
                sel.register(p.stdout, selectors.EVENT_READ, name)
        finally:
            state.add_pids(cluster, [(p.pid, names[n]) for n, (p, _, _) in procs.items()])
        ready: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while len(ready) < len(procs):
            left = deadline - time.monotonic()
            events = sel.select(left) if left > 0 else []
            if not events:
                missing = sorted(set(procs) - set(ready))
                what = sorted({(kinds or {}).get(m, kind) for m in missing})
                raise ClusterError(f"{'/'.join(what)}(s) on {', '.join(missing)} not ready in "
                                   f"{timeout:g}"
                                   f" s (logs: {', '.join(procs[m][2] for m in missing)})")
            for key, _ in events:
                name = key.data
                p, t0, log_path = procs[name]
                line = key.fileobj.readline()  # type: ignore[union-attr]
                sel.unregister(key.fileobj)
                if not line.startswith(b"ready"):
                    p.wait(5)
                    with open(log_path, "rb") as f:
                        tail = f.read()[-600:].decode(errors="replace").strip()
                    raise ClusterError(f"{(kinds or {}).get(name, kind)} on {name} failed (exit "
                                       f"{p.returncode}): {tail}")
                ready[name] = time.monotonic() - t0
                if progress is not None:
                    progress.step(f"{(kinds or {}).get(name, kind)}s ready",
                                  served[name])  # per daemon
        return ready
    finally:
        sel.close()
        for p, _, _ in procs.values():
            if p.stdout is not None:
                p.stdout.close()


def daemon_timeout(hosts: int) -> float:
    """Seconds ``emu up`` waits for its daemons to say ready: 30, and more for many hosts
    (a NIC worker opens its hosts one after another, ~15 ms each here)."""
    return 30.0 + 0.05 * hosts


def _remember(kind: str, cluster: str) -> None:
    """This machine's memory per daemon of ``kind``, for the next size check."""
    from emu import limits

    limits.remember_daemon_memory(kind, [p["pid"] for p in (state.load(cluster) or {}).get(
        "pids", []) if p.get("what", "").startswith(kind + " ")])


def switch_jobs(cluster: str, plan: Plan) -> dict[str, tuple[list[str], str, str]]:
    """:func:`spawn_ready`'s jobs for every switch's ``emu switchd``: each one's
    configuration from ``plan``, written to its directory."""
    import json

    from emu.fabric.naming import ns_name

    jobs = {}
    for node, sw in plan.switches.items():
        d = switch_dir(cluster, node)
        os.makedirs(d, mode=0o700, exist_ok=True)
        cfg_path = os.path.join(d, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(sw.config, f, indent=1)
        # the plan's clock for the daemon (fabric time at a scale: emu.switch.daemon)
        jobs[node] = (["emu.switch.daemon", "--netns", ns_name(cluster, node), "--state-dir", d,
                       "--config", cfg_path, *sw.args], os.path.join(d, "daemon.log"),
                      f"switchd {node}")
    return jobs


def switch_request(cluster: str, node: str, request: dict, timeout: float = 5.0) -> dict:
    """One JSON-lines request to a switch daemon's control socket."""
    from emu.switch.client import request as ask

    path = os.path.join(switch_dir(cluster, node), "control.sock")
    if not os.path.exists(path):
        need_switch(cluster, node)
        raise ClusterError(f"no switch pipeline on {node} in cluster {cluster}: "
                           f"{_why_no_daemon(cluster)}")
    reply = ask(path, request, timeout)
    if reply.get("error"):
        raise ClusterError(f"{node}: {reply['error']}")
    return reply


def need_switch(cluster: str, node: str) -> None:
    """Raise ClusterError, listing the cluster's switches, unless ``node`` is one of them:
    a typo'd node or a host must be named as such, not read as a switch without a
    pipeline. A cluster without a model in its state file is not judged here."""
    try:
        topo = model(cluster)
    except ClusterError:
        return
    switches = ", ".join(n.name for n in topo.switches()) or "none"
    n = topo.nodes.get(node)
    if n is None:
        raise ClusterError(f"no node {node!r} in cluster {cluster} (its switches: {switches})")
    if n.kind != "switch":
        raise ClusterError(f"{node} is a {n.kind}, not a switch, in cluster {cluster} "
                           f"(its switches: {switches})")


def _why_no_daemon(cluster: str) -> str:
    """Why a switch of ``cluster`` has no daemon's control socket (its plan says whether
    the cluster has a switch pipeline at all)."""
    try:
        plan = plan_of(cluster)
    except ClusterError:
        return "no control socket (topology without [switch]?)"
    if not plan.switches:
        return "its topology has no [switch] section (or pipeline = false)"
    return "its daemon's control socket is gone (emu status shows whether it died)"


def switch_counters(cluster: str) -> dict[str, dict]:
    """The last counters every switch daemon of ``cluster`` wrote (empty without a pipeline)."""
    import json

    out = {}
    base = switch_dir(cluster)
    if os.path.isdir(base):
        for node in sorted(os.listdir(base)):
            try:
                with open(os.path.join(base, node, "counters.json")) as f:
                    out[node] = json.load(f)
            except (OSError, ValueError):
                continue
    return out


def _spawn_logged(cluster: str, argv: list[str], what: str) -> int:
    """A helper process of the cluster, its output in ``<event log>.<what>.log``; its pid
    journalled before the fork and recorded after (``emu down`` stops it)."""
    state.add_spawn(cluster, argv, what)
    log = open(f"{event_log(cluster)}.{what}.log", "ab")  # noqa: SIM115 - child keeps it
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True)
    log.close()
    state.add_pid(cluster, proc.pid, what)
    return proc.pid


def _start_scheduler(cluster: str) -> int:
    return _spawn_logged(cluster, [sys.executable, "-m", "emu.cluster.scheduler", cluster],
                         "scheduler")


def _start_stallwatch(cluster: str, daemons: list[int]) -> int:
    """The cluster's machine-stall watcher (:mod:`emu.credible.stallwatch`): it tells a
    stall of the whole machine from the daemons' own lateness in every overload report,
    and ends when the daemons it serves are gone."""
    from emu.credible import stallwatch

    out = stallwatch.path(cluster)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return _spawn_logged(cluster, [sys.executable, "-m", "emu.credible.stallwatch", out,
                                   "--watch", *map(str, daemons)], "stallwatch")


def down(cluster: str) -> dict[str, int]:
    """Tear ``cluster`` down by its state file: daemons, scheduler, namespaces, its
    sockets and run directories, and shared-memory files whose owner is dead."""
    st = state.load(cluster) or {}
    namespaces = [ns["name"] for ns in st.get("namespaces", [])]
    try:
        removed = fabric_down(cluster)
    except KeyError:
        raise ClusterError(f"no cluster {cluster!r} is up (no {state.path(cluster)})") from None
    remove_run_dirs(cluster, namespaces)
    removed["shm"] = len(collect_shm())
    return removed


def clean(all_clusters: bool = False, only: list[str] | None = None) -> tuple[list[str], int]:
    """``emu clean``: tear down every leftover cluster (:func:`state.leftover`: its ``up``
    died half way, or its processes are all dead; or every one, ``all_clusters``; or
    only those in ``only``), with its run directories; then remove state files written
    aside by dead writers and shared-memory files whose owner is dead. Returns the
    clusters cleaned and the files removed."""
    done = state.clean(all_clusters, only, after=lambda st: remove_run_dirs(
        st["cluster"], [ns["name"] for ns in st.get("namespaces", [])]))
    for c in (only if only is not None else [None]):
        state.remove_stale_tmps(c)  # written aside by an up/down killed before its rename
    return done, len(collect_shm())


def remove_run_dirs(cluster: str, namespaces: list[str]) -> None:
    """What a cluster keeps beside its state file: switch daemon directories, link
    snapshots, NIC daemon sockets (left behind when a daemon was SIGKILLed)."""
    import shutil

    from emu.fabric import linkctl

    shutil.rmtree(switch_dir(cluster), ignore_errors=True)
    for ns in namespaces:  # addresses/routes saved while links were down (linkctl)
        shutil.rmtree(linkctl.DEFAULT_STATE_DIR / ns, ignore_errors=True)
    shutil.rmtree(nic_dir(cluster), ignore_errors=True)
    # an up killed mid-probe also left the feature probe's scratch namespace (no state
    # file names it; its name carries the dead prober's pid)
    linkctl.remove_dead_probes()


def collect_shm() -> list[str]:
    """Remove memory-region files of dead processes (:func:`emu.core.shm.collect`)."""
    from emu.core import shm

    return shm.collect()


def resolve(cluster: str | None) -> str:
    """The cluster a command means (:func:`emu.fabric.state.resolve`), as a ClusterError."""
    try:
        return state.resolve(cluster)
    except UserError as e:
        raise ClusterError(str(e)) from None


def model(cluster: str) -> Topology:
    """The resolved topology ``cluster`` was built from."""
    st = state.load(cluster)
    if st is None or "model" not in st:
        raise ClusterError(f"cluster {cluster!r} has no model in its state file "
                           f"(still coming up, or built by an older emu)")
    return from_dict(st["model"])


def save_model(cluster: str, topology: Topology) -> None:
    """Record live changes (impairments, link state) so status shows them."""
    with state.locked():
        st = state.load(cluster)
        if st is not None:
            st["model"] = to_dict(topology)
            state.save(st)


def reconverge(cluster: str, topology: Topology) -> int:
    """Re-route around every link that is down, as a converged routing protocol would.

    Taking a veth down removes the kernel's single-path routes through it and
    only the local member of multipath routes; the far side of the fabric would
    keep hashing flows into a dead end. Returns the number of routes written.
    """
    down_links = {lk.name for lk in topology.links if not lk.up}
    return Fabric(topology, cluster=cluster).reconverge(down_links)


def set_links(cluster: str, topology: Topology, names: list[str], up: bool) -> None:
    """Record links as up/down in the model, re-route, and save the model."""
    for lk in topology.links:
        if lk.name in names:
            lk.up = up
    reconverge(cluster, topology)
    save_model(cluster, topology)


def split_node(spec: str, cluster: str | None) -> tuple[str, str]:
    """``C:node`` or ``node`` (with the default cluster) → (cluster, node)."""
    if ":" in spec:
        c, node = spec.split(":", 1)
        return resolve(c), node
    return resolve(cluster), spec


def remove_logs(cluster: str) -> None:
    for p in (event_log(cluster), *(f"{event_log(cluster)}.{w}.log"
                                    for w in ("scheduler", "stallwatch"))):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


# -- NIC daemons (emu/nic): one per host ------------------------------------------------


def nic_dir(cluster: str) -> str:
    """Where the hosts' NIC daemons put their control sockets (``<host>.sock``)."""
    from emu.nic.protocol import RUN_DIR

    return os.path.join(RUN_DIR, cluster)




def srv6_path_args(cluster: str, topology: Topology, host: str) -> tuple[str, ...]:
    """``--srv6-paths FILE`` for a host's NIC daemon in an SRv6 fabric: the controller's
    path table (:func:`emu.fabric.routes.srv6_paths`), written next to its control
    socket (gone with it at ``emu down``); nothing in an ECMP fabric."""
    if topology.routing != "srv6":
        return ()
    from emu.fabric.routes import srv6_paths

    table = {d: r["paths"] for d, r in srv6_paths(topology, host).items()}
    os.makedirs(nic_dir(cluster), exist_ok=True)
    path = os.path.join(nic_dir(cluster), f"{host}.srv6.json")
    with open(path, "w") as f:
        json.dump({"host": host, "paths": table}, f, indent=1)
    return ("--srv6-paths", path)


def trace_path(cluster: str, host: str) -> str:
    """Where ``emu up --trace`` has host ``host``'s NIC daemon write its event trace:
    next to its log, kept after ``emu down``."""
    return os.path.join(state.STATE_DIR, "logs", f"{cluster}.nicd-{host}.trace.jsonl")


def start_nic_daemons(cluster: str, args: dict[str, tuple[str, ...]], timeout: float = 20.0,
                      trace: bool = False, progress=None,
                      workers: dict[str, int | None] | None = None) -> dict[str, float]:
    """Start ``emu nicd`` in every host of ``args`` (:func:`nic_jobs`) and wait until each
    is ready; return each process's time to ready (seconds), by host for a process of
    its own, ``worker N (h1, h3)`` for a worker."""
    return spawn_ready(cluster, nic_jobs(cluster, args, trace, workers), timeout,
                       "NIC daemon", progress)


def nic_jobs(cluster: str, args: dict[str, tuple[str, ...]], trace: bool = False,
             workers: dict[str, int | None] | None = None
             ) -> dict[str, tuple[list[str], str, str | tuple[str, ...]]]:
    """:func:`spawn_ready`'s jobs for ``emu nicd`` in every host of ``args`` (host → its
    arguments after ``--cluster C --host H``: :attr:`emu.plan.NicPlan.args`).

    ``workers`` (host → :attr:`emu.plan.NicPlan.worker`): hosts with the same worker
    share one ``emu nicd serve`` process (:mod:`emu.nic.worker`), given a hosts file in
    the cluster's run directory; its pid is recorded once per host (``nicd h1``, ``nicd
    h3`` …), so every tool that finds a host's daemon finds the worker.

    Each pid is recorded (:func:`state.add_pid`) right after the spawn, before
    readiness, so ``emu down`` — or the rollback of a failed ``up`` — stops it
    (SIGTERM: the daemon drains and exits 0). They start in parallel; a daemon
    says ``ready …`` on stdout once its sockets and control socket exist.
    ``trace``: each writes its event trace to :func:`trace_path`.
    """
    import json

    from emu.nic.topology import hosts_label

    logdir = os.path.join(state.STATE_DIR, "logs")
    full = {h: [*a, *(("--trace", trace_path(cluster, h)) if trace else ())]
            for h, a in args.items()}
    served: dict[int, list[str]] = {}
    for h, w in (workers or {}).items():
        if w is not None and h in full:
            served.setdefault(w, []).append(h)
    jobs: dict[str, tuple[list[str], str, str | tuple[str, ...]]] = {
        h: (["emu.nic.daemon", "--cluster", cluster, "--host", h, *a],
            os.path.join(logdir, f"{cluster}.nicd-{h}.log"), f"nicd {h}")
        for h, a in full.items() if not any(h in hs for hs in served.values())}
    if served:
        os.makedirs(nic_dir(cluster), exist_ok=True)
    for w, hosts in sorted(served.items()):
        path = os.path.join(nic_dir(cluster), f"worker-{w}.json")
        with open(path, "w") as f:
            json.dump({"cluster": cluster, "hosts": {h: full[h] for h in hosts}}, f, indent=1)
        jobs[f"worker {w} ({hosts_label(hosts)})"] = (["emu.nic.worker", path],
                                       os.path.join(logdir, f"{cluster}.nicd-w{w}.log"),
                                       tuple(f"nicd {h}" for h in hosts))
    return jobs

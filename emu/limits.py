# SPDX-License-Identifier: GPL-2.0-only
"""Does a topology fit this machine? Checked when it loads, before any work.

Why before generation: a 10,000-host leaf-spine takes seconds just to
generate and gigabytes to plan its routes, and would go on to start 10,000
daemons. :func:`check` needs only the node, link and daemon counts, which the
loader computes from the parameters (:class:`emu.topology.Size`) before it
builds anything, so a topology that cannot fit is refused in milliseconds with
one line naming the limit and the numbers; ``emu up --force`` goes ahead anyway.

What is checked, each against what this machine has now:

* **memory**: namespaces (kernel memory per node with its veths, measured:
  ~400 KiB), each daemon (its proportional set size, measured on this machine
  by every ``emu up`` that started daemons and remembered in
  :data:`MEASURED`; a default until then), and ``emu up`` itself while it
  plans routes — against ``MemAvailable``;
* **namespaces**: ``user.max_net_namespaces``;
* **processes**: daemons (and their threads) against ``kernel.pid_max``,
  ``kernel.threads-max`` and ``RLIMIT_NPROC``;
* **open files**: ``emu up`` holds a namespace fd and a netlink socket per node
  while building and a pipe per daemon while they start: against
  ``RLIMIT_NOFILE`` (the soft limit is raised to the hard one when needed).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
from dataclasses import dataclass

#: kernel memory per node: its namespace, veth ends, routes (Slab+Percpu+PageTables growth
#: while building 140 nodes of a leaf-spine on the development VM: 396-407 KiB per node)
NAMESPACE_KIB = 400
#: emu up's own memory while it plans: per node, and per route (~1 KiB each, measured from
#: 40 to 532 nodes); a leaf-spine node has about 2 routes per switch
BUILD_KIB_PER_NODE = 30
BUILD_KIB_PER_ROUTE = 1
#: daemon memory until this machine has measured its own (README: idle nicd RSS 29 MiB):
#: a NIC daemon process with its first host, each further host a worker serves (64 hosts
#: in 2 workers: 103 MiB each, ~2 MiB a host), a switch daemon
DEFAULT_DAEMON_MIB = {"nicd": 40.0, "nicd_host": 4.0, "switchd": 45.0}
#: threads a daemon runs (trio's and the interpreter's), for the process limits
THREADS_PER_DAEMON = 4
#: what this machine measured (the largest per-daemon PSS seen), kept until reboot
MEASURED = "/run/emu/doctor/daemon-memory.json"


@dataclass(frozen=True)
class Need:
    """What a cluster will use: nodes (namespaces), links, daemons of each kind."""

    hosts: int
    switches: int
    links: int
    nicd: int  # hosts with a NIC daemon
    switchd: int
    #: processes serving those NIC daemons (``[nic] workers``); None: one per host
    nicd_procs: int | None = None

    @property
    def nicd_processes(self) -> int:
        return self.nicd if self.nicd_procs is None else min(self.nicd, self.nicd_procs)

    @property
    def namespaces(self) -> int:
        return self.hosts + self.switches

    @property
    def daemons(self) -> int:
        """Daemon processes."""
        return self.nicd_processes + self.switchd


class LimitError(Exception):
    """A topology this machine cannot run; the message is one line with the numbers."""


def daemon_mib() -> dict[str, float]:
    """Memory per daemon: what this machine measured, else the default."""
    out = dict(DEFAULT_DAEMON_MIB)
    with contextlib.suppress(OSError, ValueError, TypeError):
        with open(MEASURED) as f:
            out.update({k: float(v) for k, v in json.load(f).items() if k in out})
    return out


def _pss_mib(pid: int) -> float | None:
    """Proportional set size (shared pages split between their users), else RSS."""
    for path, key in ((f"/proc/{pid}/smaps_rollup", "Pss:"), (f"/proc/{pid}/status", "VmRSS:")):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key):
                        return int(line.split()[1]) / 1024
        except OSError:
            continue
    return None


def remember_daemon_memory(kind: str, pids: list[int]) -> None:
    """Record the largest memory of ``pids`` (daemons of ``kind`` just started; a pid
    listed k times serves k hosts: a NIC worker) as this machine's estimate for the next
    :func:`check`; never fails ``emu up``. A worker's memory past one host's daemon,
    shared by its other hosts, is what a further host costs (``<kind>_host``)."""
    served: dict[int, int] = {}
    for p in pids:
        served[p] = served.get(p, 0) + 1
    pss = {p: m for p, m in ((p, _pss_mib(p)) for p in served) if m}
    if not pss:
        return
    with contextlib.suppress(OSError, ValueError, TypeError):
        try:
            with open(MEASURED) as f:
                known = json.load(f)
        except (OSError, ValueError):
            known = {}
        alone = [m for p, m in pss.items() if served[p] == 1]
        if alone:
            known[kind] = round(max(alone), 1)
        base = float(known.get(kind, DEFAULT_DAEMON_MIB.get(kind, 0.0)))
        extra = [(m - base) / (served[p] - 1) for p, m in pss.items() if served[p] > 1]
        if extra:
            known[f"{kind}_host"] = round(max(0.5, max(extra)), 2)
        os.makedirs(os.path.dirname(MEASURED), exist_ok=True)
        tmp = f"{MEASURED}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(known, f)
        os.replace(tmp, MEASURED)


def _meminfo_kib(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _count(path: str) -> int:
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def memory_mib(need: Need) -> float:
    """The estimate :func:`check` compares with ``MemAvailable`` (MiB)."""
    per = daemon_mib()
    routes = need.namespaces * (2 * need.switches + 8)
    build = need.namespaces * BUILD_KIB_PER_NODE + routes * BUILD_KIB_PER_ROUTE
    procs = need.nicd_processes
    return (need.namespaces * NAMESPACE_KIB + build) / 1024 + procs * per["nicd"] \
        + (need.nicd - procs) * per["nicd_host"] + need.switchd * per["switchd"]


def check(need: Need) -> None:
    """Raise :class:`LimitError` naming the first limit ``need`` exceeds on this machine."""
    per = daemon_mib()
    avail = _meminfo_kib("MemAvailable")
    mem = memory_mib(need)
    if avail is not None and mem > avail / 1024:
        raise LimitError(
            f"memory: {need.namespaces} namespaces, {need.nicd} NIC daemons in "
            f"{need.nicd_processes} process(es) and {need.switchd} switch "
            f"daemons need ~{mem:,.0f} MiB ({per['nicd']:.0f} MiB per NIC daemon process, "
            f"{per['nicd_host']:.1f} per further host it serves, "
            f"{per['switchd']:.0f} MiB per switch daemon, {NAMESPACE_KIB} KiB per namespace) "
            f"but {avail / 1024:,.0f} MiB are available")
    max_ns = _read_int("/proc/sys/user/max_net_namespaces")
    if max_ns is not None and need.namespaces > max_ns:
        raise LimitError(f"namespaces: {need.namespaces} needed, user.max_net_namespaces is "
                         f"{max_ns}")
    tasks = need.daemons * THREADS_PER_DAEMON
    running = _count("/proc") if tasks else 0
    for what, limit in (("kernel.pid_max", _read_int("/proc/sys/kernel/pid_max")),
                        ("kernel.threads-max", _read_int("/proc/sys/kernel/threads-max")),
                        ("RLIMIT_NPROC", None if os.geteuid() == 0  # not enforced for root
                         else _soft_or_none(resource.RLIMIT_NPROC))):
        if limit is not None and running + tasks > limit:
            raise LimitError(f"processes: {need.daemons} daemons need ~{tasks} tasks, "
                             f"{running} run already, {what} is {limit}")
    fds = 2 * need.namespaces + 2 * need.daemons + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if fds > soft:
        top = hard if hard != resource.RLIM_INFINITY else fds
        if fds > top:
            raise LimitError(f"open files: emu up needs ~{fds} at once ({need.namespaces} "
                             f"namespaces, {need.daemons} daemons), RLIMIT_NOFILE is {top}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(top, max(fds, soft)), hard))


def _soft_or_none(which: int) -> int | None:
    soft, _hard = resource.getrlimit(which)
    return None if soft == resource.RLIM_INFINITY else soft


def describe(need: Need) -> str:
    """One line for ``emu up --force``'s warning and tests."""
    return (f"{need.hosts} hosts, {need.switches} switches, {need.links} links, "
            f"{need.daemons} daemons, ~{memory_mib(need):,.0f} MiB")

# SPDX-License-Identifier: GPL-2.0-only
"""``emu nicd serve HOSTS.json``: one process, one trio loop, the NIC daemons of many hosts.

Why: a NIC daemon per host is a Python interpreter per host (~40 MB, ~0.25 s to start)
and a process per host for the scheduler to juggle. ``emu up`` starts one worker per
core instead (``[nic] workers``, :mod:`emu.plan.build`) and spreads the hosts over them;
a host's daemon is still a :class:`~emu.nic.daemon.NicDaemon` of its own — its control
socket, counters, trace, memory regions, QPs and engines — only the process and the
event loop are shared.

What keeps the hosts apart is the network namespace each one's sockets are made in:
every namespace-bound thing (UDP sockets, frame rings, the PFC listeners, the
link-state watch, the nft stamping rule) is made with this thread inside the host's
namespace (:func:`emu.nic.udp.in_netns`), and later sockets (entropy source ports) go
through the namespace the daemon noted when it opened. Control sockets are paths in
``/run/emu/nic/<cluster>/``, as ever.

What is the process's, not a host's, and says so in ``emu nicd stats`` (``worker``):
the pid, the memory (``rss_kib``), the CPU time and the time waiting for a CPU
(``overload.cpu_*``), the scheduling policy. The time scale and epoch are the cluster's
and must be the same for every host (checked).

``HOSTS.json``: ``{"cluster": C, "hosts": {"h1": [ARGS…], …}}``, each host's ``ARGS``
what ``emu nicd run --cluster C --host H`` takes after those two. The worker prints one
line, ``ready <json>`` (every host's socket and readiness), once every host's daemon is
ready, then nothing more on stdout; a host that fails to start fails the worker (exit 1,
the error naming the host). SIGTERM/SIGINT drain every host and exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

from emu.fabricclock import FabricClock
from emu.nic import gcwatch
from emu.nic.cli import _run_args, config_from, reported, say_ready
from emu.nic.clock import TrioFabricClock
from emu.nic.udp import in_netns


def load_hosts(path: str) -> tuple[str, dict[str, list[str]]]:
    """``(cluster, host → its argv)`` from a hosts file (ValueError naming what is wrong)."""
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    if not isinstance(d, dict) or not isinstance(d.get("hosts"), dict) or not d["hosts"]:
        raise ValueError(f"{path}: expected {{\"cluster\": C, \"hosts\": {{HOST: [ARGS…]}}}}")
    cluster = str(d.get("cluster", ""))
    hosts = {}
    for h, argv in d["hosts"].items():
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"{path}: host {h!r}: expected a list of arguments")
        hosts[str(h)] = argv
    return cluster, hosts


def configs(cluster: str, hosts: dict[str, list[str]]) -> dict[str, tuple[Any, str | None, str]]:
    """host → ``(NicConfig, namespace to open its sockets in, sched)``, parsed by the same
    parser as ``emu nicd run``; ValueError where the hosts disagree on what one process can
    only have once (the clock, the scheduling policy)."""
    p = argparse.ArgumentParser(prog="emu nicd serve", add_help=False)
    _run_args(p)
    out: dict[str, tuple[Any, str | None, str]] = {}
    for h, argv in hosts.items():
        try:
            a = p.parse_args(["--cluster", cluster, "--host", h, *argv])
        except SystemExit as e:
            raise ValueError(f"host {h}: bad arguments {argv!r}") from e
        ns = a.netns or (f"{a.cluster}-{a.host}" if a.cluster and a.host else None)
        if ns and not os.path.exists(f"/run/netns/{ns}"):
            # (emu nicd run falls back to its own namespace; a worker serving several
            # hosts has none of theirs to fall back to)
            raise ValueError(f"host {h}: no network namespace {ns}")
        out[h] = (config_from(a), ns, a.sched)
    first = next(iter(out.values()))
    for h, (cfg, _, sched) in out.items():
        if (cfg.time_scale, cfg.time_epoch) != (first[0].time_scale, first[0].time_epoch):
            raise ValueError(f"host {h}: time scale/epoch {cfg.time_scale:g}/"
                             f"{cfg.time_epoch} differ from the other hosts' (one clock "
                             "per process)")
        if sched != first[2]:
            raise ValueError(f"host {h}: --sched {sched} differs from the other hosts' "
                             f"{first[2]} (one policy per process)")
    return out


#: hosts opened at once (threads): what a host's opening waits for is mostly the kernel's
#: RCU grace periods — each frame ring's ``PACKET_TX_RING`` and bind wait one
#: (``synchronize_net``), ~13 ms a ring here, six rings a host — and the nft runs of the
#: header-stamping rule; waits that overlap. Measured, 15 hosts of a leaf-spine one by one:
#: 1.9 s, 125 ms a host
OPEN_THREADS = 16


def _open_one(h: str, d: Any, ns: str | None) -> None:
    """Open ``d``'s sockets with this thread in namespace ``ns``."""
    fd = None
    try:
        if ns:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
        with in_netns(fd):
            d.open()
    except (OSError, RuntimeError, ValueError, ImportError) as e:
        raise type(e)(f"host {h}: {e}") from e
    finally:
        if fd is not None:
            os.close(fd)


def open_daemons(cfgs: dict[str, tuple[Any, str | None, str]]) -> dict[str, Any]:
    """Every host's :class:`NicDaemon`, its sockets opened inside its namespace, several
    hosts at once (:data:`OPEN_THREADS`; ``setns`` is per thread). All or none: when one
    fails, what opened is closed again and the first failure (in host order) is raised."""
    from concurrent.futures import ThreadPoolExecutor

    from emu.nic.daemon import NicDaemon

    daemons = {h: NicDaemon(cfg) for h, (cfg, _, _) in cfgs.items()}
    with ThreadPoolExecutor(min(OPEN_THREADS, len(cfgs))) as pool:
        futures = {h: pool.submit(_open_one, h, daemons[h], ns)
                   for h, (_, ns, _) in cfgs.items()}
    errors = [f.exception() for f in futures.values() if f.exception() is not None]
    if errors:
        for d in daemons.values():
            d.close()
        raise errors[0]  # type: ignore[misc]
    return daemons


def serve(daemons: dict[str, Any], clock: FabricClock) -> None:
    """Run every daemon in one trio loop until SIGTERM/SIGINT; print the ready line."""
    import trio

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as sigs:
            async with trio.open_nursery() as n:
                for d in daemons.values():
                    await n.start(d.run)
                hosts = sorted(daemons)
                ready: dict[str, Any] = {"pid": os.getpid(), "hosts": {}}
                for h, d in daemons.items():
                    d.worker = {"pid": os.getpid(), "hosts": hosts}
                    for w in d.warnings:
                        print(f"emu nicd {h}: {w}", file=sys.stderr, flush=True)
                    ready["hosts"][h] = {"sock": d.cfg.sock_path, "ready_after_s":
                                         d.ready_after, "transports": list(d.slots)}
                say_ready(ready)
                async for _ in sigs:
                    for d in daemons.values():
                        d.stop()
                    break

    for d in daemons.values():
        d.defer_close = True
    try:
        if clock.scale != 1 or clock.epoch:
            trio.run(main, clock=TrioFabricClock(clock))
        else:
            trio.run(main)
    finally:
        close_daemons(daemons)


def close_daemons(daemons: dict[str, Any]) -> None:
    """Close every host's sockets, several hosts at once: closing a packet socket (a
    frame ring, a PFC listener) waits for an RCU grace period in the kernel (~24 ms
    here), without the interpreter's lock — one host after another, a 128-host worker
    took 10 s to exit."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(OPEN_THREADS, max(1, len(daemons)))) as pool:
        for d in daemons.values():
            pool.submit(d.close)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="emu nicd serve",
                                description="run the NIC daemons of many hosts in one process")
    p.add_argument("hosts_file", metavar="HOSTS.json",
                   help='{"cluster": C, "hosts": {HOST: [emu nicd run ARGS after --host]}}')
    a = p.parse_args(argv)
    return serve_main(a.hosts_file)


def serve_main(path: str) -> int:
    def run() -> None:
        cluster, hosts = load_hosts(path)
        cfgs = configs(cluster, hosts)
        from emu.cpu import schedule_daemon

        first = next(iter(cfgs.values()))
        schedule_daemon(first[2])
        gcwatch.install()
        daemons = open_daemons(cfgs)
        serve(daemons, FabricClock(first[0].time_scale, first[0].time_epoch))

    return reported(run, "emu nicd serve")


if __name__ == "__main__":
    sys.exit(main())

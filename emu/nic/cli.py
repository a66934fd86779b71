# SPDX-License-Identifier: GPL-2.0-only
"""``emu nicd run|stats``: run a host's NIC daemon, or print its counters.

``python -m emu.nic.daemon ARGS`` is ``emu nicd run ARGS`` (what ``emu up``
starts: it imports no more than the daemon needs, so start-up stays fast).
Run prints one line ``ready <json>`` on stdout once the sockets and the
control socket exist, then never writes stdout again (the parent may close
the pipe); diagnostics go to stderr.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
from typing import Any

from emu.fabricclock import FabricClock, check_scale
from emu.nic.clock import TrioFabricClock
from emu.nic.protocol import DEFAULT_PORTS, RUN_DIR, daemon_hosts, overload_causes, sock_path


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", "-c", default="", help="cluster name (socket path, namespace)")
    p.add_argument("--host", default="", help="host node name (namespace <cluster>-<host>)")
    p.add_argument("--netns", help="namespace to enter (default: <cluster>-<host> if it exists)")
    p.add_argument("--sock", help=f"control socket (default {RUN_DIR}/<cluster>/<host>.sock)")
    p.add_argument("--transport", "-t", action="append", metavar="NAME",
                   help="engine to run (repeatable; default roce; 'loopback' = plumbing stub)")
    p.add_argument("--port", action="append", default=[], metavar="NAME=N",
                   help="UDP port of a transport, e.g. uet=4793")
    p.add_argument("--addr", action="append", metavar="IP",
                   help="NIC address to serve (repeatable; default: every global address)")
    p.add_argument("--rx-backlog", type=int, default=4096)
    p.add_argument("--tx-backlog", type=int, default=8192)
    p.add_argument("--event-queue", type=int, default=4096)
    p.add_argument("--rx-batch", type=int, default=64)
    p.add_argument("--gso", dest="gso", action="store_const", const=True, default=None,
                   help="GSO on IPv4 too (breaks the RoCE ICRC: IP IDs count up per segment)")
    p.add_argument("--no-gso", dest="gso", action="store_const", const=False)
    p.add_argument("--no-gro", dest="gro", action="store_false")
    p.add_argument("--no-frame-ring", dest="frame_ring", action="store_false",
                   help="send datagrams from a flow's own source port (UET's entropies, a "
                        "RoCEv2 QP's) through one UDP socket per source port instead of a "
                        "packet TX ring (emu.nic.frames); UET's set gets 64 sockets, its "
                        "other entropies leave by one of them (TxPath.preopen)")
    p.add_argument("--seed", type=int, help="RNG seed (QPNs, keys): reproducible runs")
    p.add_argument("--engine-opt", action="append", default=[], metavar="NAME.KEY=JSON",
                   help="engine option, e.g. roce.mtu=4096")
    p.add_argument("--allow-uid", type=int, action="append", default=[],
                   help="a uid besides root that may use the control socket")
    p.add_argument("--no-pfc", dest="pfc", action="store_false",
                   help="ignore PFC pause frames arriving on the ports")
    p.add_argument("--pfc-quantum", type=float, default=512e-9, metavar="SECONDS",
                   help="one pause quantum (default 512e-9: 512 bit times at 1 Gb/s, as switchd)")
    p.add_argument("--optional-transports", action="store_true",
                   help="skip (with a warning) transports whose engine is not installed")
    p.add_argument("--trace", metavar="FILE",
                   help="write every engine's event trace (JSON lines, emu.core.trace) to FILE")
    p.add_argument("--line-rate", action="append", default=[], metavar="[IFNAME=]RATE",
                   help="pace everything sent on a port (or every port) to this line rate, "
                        "e.g. 1gbit or eth0=10gbit (repeatable; default: unpaced)")
    p.add_argument("--tx-lead", type=_seconds, default=1e-3, metavar="SECONDS",
                   help="how far ahead of the wire a paced port's frames may go to the kernel "
                        "(default 1ms; emu up gives 2ms, having put the line rate in a tbf "
                        "on each host port)")
    p.add_argument("--sched", choices=("rt", "slice", "default"), default="rt",
                   help="how the kernel schedules this daemon: rt = SCHED_FIFO where the "
                        "kernel throttles real-time tasks, else as slice; slice = a 100 us "
                        "EEVDF slice; default = the kernel's (emu.cpu)")
    p.add_argument("--rx-coalesce", type=_coalesce, default=None, metavar="adaptive|0|TIME",
                   help="receive interrupt coalescing: adaptive (default: only streams at a "
                        "quarter of the line rate or more, and while the port's own transmit "
                        "queue covers the wait), 0 (read at every wake-up), or a wait after "
                        "every read that found data, e.g. 200us (latency tests pay it)")
    p.add_argument("--time-scale", type=_scale, default=1.0, metavar="N",
                   help="run on fabric time, N wall seconds per fabric second (emu up gives "
                        "the plan's; --line-rate and --tx-lead stay wall units; default 1)")
    p.add_argument("--time-epoch", type=float, default=0.0, metavar="MONOTONIC_S",
                   help="the cluster's fabric epoch (a CLOCK_MONOTONIC time; default 0)")
    p.add_argument("--path-delay", action="append", default=[], metavar="ADDR=SECONDS",
                   help="hold each datagram from ADDR (* = any other peer) until its kernel "
                        "receive stamp plus this many fabric seconds: the path's propagation, "
                        "switch and NIC latency (emu up gives the plan's; repeatable)")
    p.add_argument("--family", type=int, choices=(4, 6),
                   help="6: QPs and endpoints use the port's IPv6 address (default: IPv4)")
    p.add_argument("--srv6-paths", metavar="FILE",
                   help="the controller's SRv6 path table for this host (JSON: {\"paths\": "
                        "{destination address: [uSID container, ...]}}; emu up writes it for a "
                        "cluster with routing.mode = srv6): what MRC's srv6 EV format sends on")
    p.add_argument("--trimmed-dscp", type=int, action="append", metavar="DSCP",
                   help="a DSCP the switches write on trimmed packets (repeatable; default "
                        "30 and 31, switchd's trimmed_dscp and trimmed_lasthop)")


def _scale(v: str) -> float:
    """``--time-scale N`` (argparse type: a bad value is one line and exit 2)."""
    try:
        return check_scale(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _srv6_paths(path: str | None) -> dict[str, list[str]]:
    """``--srv6-paths FILE`` → {destination: [outer destination, ...]}, every address
    checked (a bad file is one line and exit 2, not a daemon that sends nowhere)."""
    if path is None:
        return {}
    import ipaddress

    try:
        with open(path) as f:
            table = json.load(f)["paths"]
        return {str(ipaddress.IPv6Address(d)): [str(ipaddress.IPv6Address(c)) for c in cs]
                for d, cs in table.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SystemExit(f"emu nicd: --srv6-paths {path}: not an SRv6 path table ({e})"
                         ) from None


def _path_delays(specs: list[str]) -> dict[str, float]:
    """``--path-delay ADDR=SECONDS`` (repeatable) → {addr or "*": fabric seconds}."""
    from emu.nic.delayline import parse_delays

    try:
        return parse_delays(specs)
    except ValueError as e:
        raise SystemExit(f"emu nicd: {e}") from None


def _line_rates(specs: list[str]) -> dict[str, float]:
    """``--line-rate [IFNAME=]RATE`` (repeatable) → {ifname or "*": bits/s}."""
    from emu.topology.units import UnitError, parse_rate

    out: dict[str, float] = {}
    for spec in specs:
        name, eq, val = spec.rpartition("=")
        try:
            bps = parse_rate(val)
        except UnitError as e:
            raise SystemExit(f"emu nicd: --line-rate {spec}: {e}") from None
        if bps is not None:
            out[name if eq else "*"] = float(bps)
    return out


def _seconds(spec: str) -> float:
    """``--tx-lead 4ms`` → 0.004 (argparse type: a bad value is one line and exit 2)."""
    from emu.topology.units import UnitError, parse_time

    try:
        t = parse_time(spec)
    except UnitError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not 0 < t <= 1:
        raise argparse.ArgumentTypeError(f"{spec!r} must be more than 0 and at most 1 s")
    return t


def _coalesce(spec: str) -> float | None:
    """``--rx-coalesce`` (argparse type: :func:`emu.nic.coalesce.parse_setting`)."""
    from emu.nic.coalesce import parse_setting

    try:
        return parse_setting(spec.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def config_from(a: argparse.Namespace) -> Any:
    from emu.nic.config import NicConfig

    ports = dict(DEFAULT_PORTS)
    for spec in a.port:
        k, _, v = spec.partition("=")
        ports[k] = int(v)
    opts: dict[str, dict[str, Any]] = {}
    for spec in a.engine_opt:
        k, _, v = spec.partition("=")
        eng, _, key = k.partition(".")
        try:
            val = json.loads(v)
        except ValueError:
            val = v
        opts.setdefault(eng, {})[key] = val
    for d in a.trimmed_dscp or ():
        if not 0 <= d < 64:
            raise SystemExit(f"emu nicd: --trimmed-dscp {d}: a DSCP is 0..63")
    if a.sock:
        path = a.sock
    elif a.cluster and a.host:
        path = sock_path(a.cluster, a.host)
    else:
        raise SystemExit("emu nicd: give --cluster and --host, or --sock")
    return NicConfig(sock_path=path, cluster=a.cluster, host=a.host,
                     transports=a.transport or ["roce"], optional_transports=a.optional_transports,
                     ports=ports, addresses=a.addr, rx_backlog=a.rx_backlog,
                     tx_backlog=a.tx_backlog, event_queue=a.event_queue, rx_batch=a.rx_batch,
                     gso=a.gso, gro=a.gro, frame_ring=a.frame_ring, seed=a.seed,
                     engine_options=opts,
                     allowed_uids=(0, *a.allow_uid), pfc=a.pfc, pfc_quantum=a.pfc_quantum,
                     trace=a.trace, line_rates=_line_rates(a.line_rate), family=a.family,
                     tx_lead=a.tx_lead, rx_coalesce=a.rx_coalesce,
                     time_scale=a.time_scale, time_epoch=a.time_epoch,
                     path_delays=_path_delays(a.path_delay),
                     srv6_paths=_srv6_paths(a.srv6_paths),
                     **({"trimmed_dscps": tuple(a.trimmed_dscp)}
                                       if a.trimmed_dscp else {}))


def enter_netns(name: str) -> None:
    """Move this (main) thread into ``/run/netns/<name>`` for good, before any socket exists.

    ctypes instead of :mod:`emu.fabric.netns`: importing ``emu.fabric`` pulls
    in pyroute2, which would double the daemon's start time.
    """
    path = f"/run/netns/{name}"
    if os.stat(path).st_ino == os.stat("/proc/thread-self/ns/net").st_ino:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, 0x40000000) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {path}: {os.strerror(e)}")
    finally:
        os.close(fd)


def run_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="emu nicd run", description="run a host's NIC daemon")
    _run_args(p)
    return _run(p.parse_args(argv))


def _run(a: argparse.Namespace) -> int:
    cfg = config_from(a)
    ns = a.netns or (f"{a.cluster}-{a.host}" if a.cluster and a.host else None)
    if ns and (a.netns or os.path.exists(f"/run/netns/{ns}")):
        enter_netns(ns)
    import trio

    from emu.cpu import schedule_daemon
    from emu.nic.daemon import NicDaemon

    schedule_daemon(a.sched)  # run as soon as it wakes, as the hardware it stands in for
    from emu.nic import gcwatch

    gcwatch.install()

    async def main() -> None:
        d = NicDaemon(cfg)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as sigs:
            async with trio.open_nursery() as n:
                await n.start(d.run)
                for w in d.warnings:
                    print(f"emu nicd: {w}", file=sys.stderr, flush=True)
                say_ready({"pid": os.getpid(), "sock": cfg.sock_path, "ready_after_s":
                           d.ready_after, "transports": list(d.slots)})
                async for _ in sigs:
                    d.stop()
                    break

    def run() -> None:
        if cfg.time_scale != 1 or cfg.time_epoch:
            # fabric time: trio.current_time() is the fabric clock (emu.nic.clock)
            trio.run(main, clock=TrioFabricClock(FabricClock(cfg.time_scale, cfg.time_epoch)))
        else:
            trio.run(main)

    return reported(run, "emu nicd")


#: what a daemon that fails to start says in one line each and exits 1 for
START_ERRORS = (OSError, RuntimeError, ValueError, ImportError)


def reported(run: Any, prog: str) -> int:
    """Run a daemon (``run()``) to its end: 0; a start-up error — also one a nursery
    wrapped — is a line on stderr each (``prog: error``) and 1."""
    try:
        run()
    except START_ERRORS as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as eg:  # a start-up error comes wrapped by the nursery
        rest = eg.split(START_ERRORS)[1]
        if rest is not None:
            raise
        for e in _leaves(eg):
            print(f"{prog}: {e}", file=sys.stderr)
        return 1
    return 0


def say_ready(ready: dict[str, Any]) -> None:
    """The one stdout line a daemon prints (``ready <json>``), then stdout goes to
    /dev/null: the parent may close the pipe now."""
    print("ready " + json.dumps(ready), flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _serve(path: str) -> int:
    from emu.nic.worker import serve_main

    return serve_main(path)


def _leaves(eg: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for e in eg.exceptions:
        out += _leaves(e) if isinstance(e, BaseExceptionGroup) else [e]
    return out


# -- stats -----------------------------------------------------------------------------


def _stats_paths(a: argparse.Namespace) -> list[str]:
    """The control sockets ``emu nicd stats`` asks: ``--sock``; a cluster's host or all its
    hosts (the cluster named, or the only one up, as every cluster command resolves it);
    without either, the daemon of the host namespace this runs in. UserError otherwise."""
    from emu.errors import UserError
    from emu.fabric import state
    from emu.nic.protocol import find_sock

    if a.sock:
        return [a.sock]
    if not a.cluster and not a.host:
        try:
            return [find_sock()]
        except FileNotFoundError:
            pass  # not inside a host: the only cluster up, if there is one
    cluster = state.resolve(a.cluster)
    # the daemons that listen, and those the state file says were started: one that died
    # and took its socket along is still asked, so its entry says it is not running
    started = [p["what"][5:] for p in (state.load(cluster) or {}).get("pids", [])
               if str(p.get("what", "")).startswith("nicd ")]
    hosts = sorted(set(daemon_hosts(cluster)) | set(started))
    if a.host:
        if a.host not in hosts:
            raise UserError(f"no NIC daemon for host {a.host!r} in cluster {cluster!r}"
                            + (f" (hosts: {', '.join(hosts)})" if hosts else ""))
        return [sock_path(cluster, a.host)]
    if not hosts:
        raise UserError(f"cluster {cluster!r} runs no NIC daemons")
    return [sock_path(cluster, h) for h in hosts]


def stats_main(a: argparse.Namespace) -> int:
    from emu.errors import UserError
    from emu.nic.protocol import DaemonDown, call_once

    if a.where:
        c, _, h = a.where.partition(":")
        if (a.cluster and a.cluster != c) or (h and a.host and a.host != h):
            print(f"emu nicd stats: {a.where!r} and --cluster/--host disagree", file=sys.stderr)
            return 2
        a.cluster, a.host = c, h or a.host
    try:
        paths = _stats_paths(a)
    except UserError as e:
        print(f"emu nicd stats: {e}", file=sys.stderr)
        return 2
    out = []
    for path in paths:
        try:
            out.append(call_once(path, "stats"))
        except DaemonDown as e:  # its sentence names the daemon: the path adds nothing
            out.append({"sock": path, "error": str(e), "running": False})
        except OSError as e:
            out.append({"sock": path, "error": str(e)})
    if a.json:
        print(json.dumps(out[0] if len(out) == 1 else out, indent=1))
    else:
        print("\n\n".join(render(s) for s in out))
    return 0 if all("error" not in s for s in out) else 1


def render(s: dict[str, Any]) -> str:
    from emu.nic.topology import hosts_label

    if "error" in s:
        return s["error"] if s.get("running") is False else f"{s['sock']}: {s['error']}"
    t, ctl = s["totals"], s["control"]
    sl = s.get("sched_slice_s")
    pol = s.get("sched") or ""
    lines = [f"nicd {s['cluster']}:{s['host']} pid {s['pid']} up {s['uptime_s']:.1f} s, "
             f"RSS {s['rss_kib'] / 1024:.1f} MiB, ready after {s['ready_after_s'] or 0:.3f} s, "
             + (f"scheduler {pol.replace('fifo', 'SCHED_FIFO')}" if pol.startswith("fifo")
                else f"scheduler slice {sl * 1e6:.0f} us" if sl else "default scheduler slice")
             + (f" (a worker serving {hosts_label(s['worker']['hosts'])}: pid, RSS and CPU are "
                "the process's)" if s.get("worker") else ""),
             f"  rx {t.get('rx_packets', 0)} pkts {t.get('rx_bytes', 0)} B   "
             f"tx {t.get('tx_packets', 0)} pkts {t.get('tx_bytes', 0)} B   "
             f"coalesced reads (rx_holds) {t.get('rx_holds', 0)}, rx_coalesce "
             f"{s.get('rx_coalesce', 'adaptive')}",
             f"  drops: rx_backlog {t.get('rx_backlog_drops', 0)}  tx_backlog "
             f"{t.get('tx_backlog_drops', 0)}  kernel {t.get('rx_kernel_drops', 0)}  events "
             f"{ctl['events_dropped']}  cq_overflows {ctl['cq_overflows']}  tx_errors "
             f"{t.get('tx_errors', 0)}",
             f"  clients {ctl['clients']} (total {ctl['clients_total']}, refused "
             f"{ctl['refused']})  QPs {ctl['qps']}  CQs {ctl['cqs']}  MRs {ctl['mrs']}  freed "
             f"qps/mrs/cqs {ctl['freed_qps']}/{ctl['freed_mrs']}/{ctl['freed_cqs']}"]
    for ifname, pc in (s.get("ports") or {}).items():
        rate = pc.get("line_rate")
        lines.append(f"  port {ifname}: line rate {rate / 1e9:g} Gb/s, {pc['frames']} frames "
                     f"{pc['bytes']} B, waited for the wire {pc['waits']} times, late "
                     f"{pc['late']} ({pc['late_s']:.3f} s)" if rate else
                     f"  port {ifname}: unpaced")
    ov = s.get("overload") or {}
    if ov:
        causes = "  ".join(f"{k} {v}" for k, v in overload_causes(ov).items())
        if ov.get("cpu_s") is not None:
            causes += (f"  (cpu {ov['cpu_s']:.1f} s, waited {ov.get('cpu_wait_s', 0):.3f} s "
                       f"over {ov.get('cpu_runs', 0)} wake-ups; port idle behind held ACKs "
                       f"{ov.get('ack_late_s', 0):.3f} s)")
        bad = " (NOT CREDIBLE: the emulator lost or delayed packets)" if ov.get("total") else ""
        lines.append(f"  overload {ov.get('total', 0)}{bad}: {causes}")
    for ifname, pc in (s.get("pause") or {}).items():
        lines.append(f"  pause {ifname}: frames {pc['frames']} (xoff {pc['xoff']}, xon "
                     f"{pc['xon']})  paused {pc['paused_s']:.3f} s"
                     + (f"  paused now: {pc['paused_now']}" if pc["paused_now"] else ""))
    for name, tr in s["transports"].items():
        eng = " ".join(f"{k}={v}" for k, v in sorted(tr["engine"].items()) if v)
        lines.append(f"  {name} (udp {tr['udp_port']}): {eng or 'idle'}")
        if tr.get("options_in_force"):  # configured and defaults: what the engine runs
            lines.append("    options: " + " ".join(
                f"{k}={_option(v)}" for k, v in sorted(tr["options_in_force"].items())))
        for port, fc in (tr.get("frame_rings") or {}).items():
            lines.append(f"    frame ring {port}: frames {fc['frames']} in {fc['kicks']} "
                         f"kicks, dropped on the way out {fc['dropped']}, by socket while "
                         f"unresolved {fc['unresolved']}, ring full {fc['ring_full']}, "
                         f"errors {fc['send_errors']}")
    return "\n".join(lines)


def _option(v: Any) -> str:
    """An engine option for the stats line: rates and times as people write them."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={_option(x)}" for k, x in v.items()) + "}"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def add_cli(sub: argparse._SubParsersAction) -> None:
    """``emu nicd``, registered by the ``emu`` command line."""
    p = sub.add_parser("nicd", help="the user-space NIC daemon of a host (run, serve, stats)")
    nsub = p.add_subparsers(dest="nicd_command", metavar="run|serve|stats", required=True)
    r = nsub.add_parser("run", help="run one host's daemon in a process of its own")
    _run_args(r)
    r.set_defaults(func=_run)
    w = nsub.add_parser("serve", help="run many hosts' daemons in one process (what emu up "
                                      "starts, one per core: [nic] workers)")
    w.add_argument("hosts_file", metavar="HOSTS.json",
                   help='{"cluster": C, "hosts": {HOST: [emu nicd run ARGS after --host]}}')
    w.set_defaults(func=lambda a: _serve(a.hosts_file))
    st = nsub.add_parser("stats", help="counters of a daemon (or of every host of a cluster)")
    st.add_argument("where", nargs="?", default="", metavar="CLUSTER[:HOST]",
                    help="as `emu status CLUSTER` and `emu exec CLUSTER:HOST` take it")
    st.add_argument("--cluster", "-c", default="")
    st.add_argument("--host", default="")
    st.add_argument("--sock")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=stats_main)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="emu nicd")
    sub = p.add_subparsers(dest="command", required=True)
    add_cli(sub)
    a = p.parse_args(["nicd", *(argv if argv is not None else sys.argv[1:])])
    return int(a.func(a) or 0)

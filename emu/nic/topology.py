# SPDX-License-Identifier: GPL-2.0-only
"""The ``[nic]`` section of a topology file: engine options for every host's NIC daemon.

    [nic]
    workers = "auto"              # processes serving the hosts: one per core; "host": one
                                  # per host; or a number (emu nicd serve, emu.nic.worker)
    rx_coalesce = "adaptive"      # or "off" (0), or "200us" (emu nicd run --rx-coalesce)
    sched = "rt"                  # or "slice", "default" (emu nicd run --sched; emu.cpu)
    [nic.uet]                     # options of the UET engine (emu nicd --engine-opt uet.K=V)
    cc = "rccc"                   # nscc (the daemons' default), rccc, or "none"
    paths = "reps"
    path_params = { penalty = 0.0005 }
    [nic.roce]
    line_rate = "25gbit"          # the engine's own rate (bits/s, or spelled as a link's)

or on the command line, ``emu up … --set nic.uet.paths=reps``. Why in the
topology: comparing transports under congestion means running the same
fabric with another controller or path policy, and the file is what a
person hands a colleague to reproduce a run. Every value is checked at load
time by building the engine it configures (engines are sans-IO, so that is
cheap), so a bad key or value is a one-line error naming it — not a daemon
that fails to start inside ``emu up``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from emu.topology import sections
from emu.topology.model import Topology
from emu.topology.units import UnitError, parse_rate

#: the transports every ``emu up`` daemon serves: RoCEv2 on UDP 4791, UET on 4793, MRC on
#: 4971 (emu.transports.mrc.engine.UDP_PORT: why not 4791)
NIC_TRANSPORTS = ("roce", "uet", "mrc")
#: engine options that are rates: spelled as a link's rate ("500mbit") or in bits/s
RATE_OPTIONS = frozenset({"line_rate"})


def engine_value(key: str, value: Any) -> Any:
    """An engine option's value as the engine takes it: a rate (:data:`RATE_OPTIONS`)
    spelled as a link's is bits/s (``UnitError`` when it is not a rate)."""
    if key in RATE_OPTIONS and isinstance(value, str):
        bps = parse_rate(value)
        if bps is None:
            raise UnitError(f"an engine's {key} cannot be {value!r}")
        return bps
    return value


@dataclass
class _Ctx:
    """The smallest EngineContext a factory accepts (no daemon behind it)."""

    memory: Any
    rng: random.Random
    options: dict[str, Any]
    addresses: list[str] = field(default_factory=lambda: ["10.0.0.1"])
    port: int = 0
    mtu: int = 9000


def _factory(transport: str) -> tuple[Any, tuple[str, ...]]:
    if transport == "roce":
        from emu.transports.roce import factory as f
    elif transport == "mrc":
        from emu.transports.mrc import factory as f  # type: ignore[no-redef]
    else:
        from emu.transports.uet import factory as f  # type: ignore[no-redef]
    return f.create_engine, tuple(f.ENGINE_OPTIONS)


def check_section(raw: dict[str, Any], topology: Topology | None = None
                  ) -> tuple[str, str] | None:
    """``(key path, reason)`` of the first problem in a ``[nic]`` table, or None (the
    topology is not needed: engine options are the same on every host)."""
    for transport, opts in raw.items():
        where = f"nic.{transport}"
        if transport == "line_rate":  # every NIC port's rate unless its link/switch says
            try:
                parse_rate(opts)
            except UnitError as e:
                return where, str(e)
            continue
        if transport == "rx_coalesce":  # emu nicd run --rx-coalesce (emu.nic.coalesce)
            from emu.nic.coalesce import parse_setting

            try:
                parse_setting(opts)
            except ValueError as e:
                return where, str(e)
            continue
        if transport == "workers":  # how many processes serve the hosts (emu.nic.worker)
            if opts not in ("auto", "host") and not (
                    isinstance(opts, int) and not isinstance(opts, bool) and opts >= 1):
                return where, f"expected \"auto\", \"host\" or a number >= 1, got {opts!r}"
            continue
        if transport == "sched":  # emu nicd run --sched (emu.cpu.schedule_daemon)
            from emu.cpu import SCHED_POLICIES

            if opts not in SCHED_POLICIES:
                return where, f"expected one of {', '.join(SCHED_POLICIES)}, got {opts!r}"
            continue
        if transport == "family":  # 6: transfers run over the ports' IPv6 addresses
            if opts not in (4, 6):
                return where, f"expected 4 or 6, got {opts!r}"
            continue
        if transport not in NIC_TRANSPORTS:
            return where, (f"unknown transport {transport!r} (the daemons run "
                           f"{', '.join(NIC_TRANSPORTS)})")
        if not isinstance(opts, dict):
            return where, f"expected a table ([{where}]), got {opts!r}"
        create, known = _factory(transport)
        taken: dict[str, Any] = {}  # the values as the engine takes them (engine_value)
        for key, value in opts.items():
            if key not in known:
                return f"{where}.{key}", (f"unknown {transport} engine option {key!r} "
                                          f"(known: {', '.join(known)})")
            try:
                json.dumps(value)
                taken[key] = engine_value(key, value)
            except UnitError as e:
                return f"{where}.{key}", str(e)
            except (TypeError, ValueError):
                return f"{where}.{key}", f"{value!r} cannot be passed to a daemon (not JSON)"
        err = _refused(create, taken)
        if err is not None:
            # name the option when one alone is refused (its line, or its --set)
            for key in taken:
                one = _refused(create, {key: taken[key]})
                if one is not None:
                    return f"{where}.{key}", f"the {transport} engine refuses it: {one}"
            return where, f"the {transport} engine refuses these options together: {err}"
    return None


def workers(nic: dict[str, Any], hosts: int, cores: int) -> int:
    """How many NIC daemon processes serve ``hosts`` hosts (a checked ``[nic]`` section's
    ``workers``): "auto" (the default) one per core, "host" one per host, or the number
    given — never more than there are hosts. Why one per core: a process per host is an
    interpreter per host (~40 MB, ~0.25 s to start; 64 hosts took 2.4 GB) and more
    runnable processes than cores for the scheduler to juggle."""
    v = nic.get("workers", "auto")
    n = hosts if v == "host" else cores if v == "auto" else int(v)
    return max(1, min(n, hosts))


def worker_of(hosts: list[str], n: int) -> dict[str, int | None]:
    """host → the worker that serves it (round robin in host order), None for every host
    when each gets a process of its own (``n`` ≥ hosts: ``emu nicd run``, as ever)."""
    if n >= len(hosts):
        return dict.fromkeys(hosts)
    return {h: i % n for i, h in enumerate(hosts)}


def hosts_label(hosts: list[str], most: int = 4) -> str:
    """A worker's hosts as a person reads them: all of them up to ``most``, else the first
    two, the last and how many (a 256-host cluster's workers serve 128 each)."""
    if len(hosts) <= most:
        return ", ".join(hosts)
    return f"{hosts[0]}, {hosts[1]} … {hosts[-1]} ({len(hosts)} hosts)"


def coalesce_arg(nic: dict[str, Any]) -> tuple[str, ...]:
    """The ``emu nicd run --rx-coalesce`` argument a checked ``[nic]`` section asks for."""
    v = nic.get("rx_coalesce")
    return () if v is None else ("--rx-coalesce", str(v))


def sched_arg(nic: dict[str, Any]) -> tuple[str, ...]:
    """The ``emu nicd run --sched`` argument a checked ``[nic]`` section asks for."""
    v = nic.get("sched")
    return () if v is None else ("--sched", str(v))


def _refused(create: Any, opts: dict[str, Any]) -> str | None:
    """Why the engine will not build with ``opts`` (None: it builds)."""
    from emu.core.memory import MemoryTable

    try:
        create(_Ctx(MemoryTable(random.Random(0)), random.Random(0), dict(opts)))
    except (ValueError, TypeError, KeyError) as e:
        return str(e)
    return None


sections.register("nic", check_section)


def daemon_args(nic: dict[str, dict[str, Any]]) -> tuple[str, ...]:
    """The ``emu nicd`` arguments that carry a checked ``[nic]`` section."""
    return tuple(a for t, opts in nic.items() if isinstance(opts, dict) for k, v in opts.items()
                 for a in ("--engine-opt", f"{t}.{k}={json.dumps(engine_value(k, v))}"))

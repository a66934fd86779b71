# SPDX-License-Identifier: GPL-2.0-only
"""What ``emu nicd stats`` returns for one host's NIC daemon (moved out of
:mod:`emu.nic.daemon`, which calls it): counters by transport, the ports' serializers,
PFC and link state, the overload by cause (:mod:`emu.nic.overloadstat`), and the
process's own figures — which a worker's hosts share (``worker``)."""

from __future__ import annotations

import os
from typing import Any

import trio

from emu.cpu import policy_in_force, slice_in_force
from emu.fabricclock import wall
from emu.nic import gcwatch
from emu.nic.coalesce import describe_coalesce
from emu.nic.overloadstat import ENGINE_OVERLOAD, ENGINE_OVERLOAD_TIME, overload
from emu.nic.slot import line_counters
from emu.proc import rss_kib


def daemon_stats(d: Any) -> dict[str, Any]:
    """What ``emu nicd stats`` shows of one host's daemon (:meth:`NicDaemon.stats`): per
    transport its counters, engine and sockets; the ports' pacers, PFC and link state;
    the overload by cause; the process's memory, scheduling and (a worker) hosts."""
    totals: dict[str, int] = {}
    transports = {}
    for slot in d.slots.values():
        slot.c["rx_kernel_drops"] = sum(p.kernel_drops for p in slot.tx.sockets())
        for k, v in slot.c.items():
            if k != "tx_last_errno":
                totals[k] = totals.get(k, 0) + v
        try:
            eng = slot.engine.counters()
        except Exception as e:  # noqa: BLE001
            eng = {"error": repr(e)}
        for k in ENGINE_OVERLOAD + ENGINE_OVERLOAD_TIME:  # an engine's own overload
            v = eng.get(k, 0)
            totals[k] = totals.get(k, 0) + (v if isinstance(v, int) else 0)
        transports[slot.name] = {"udp_port": slot.port, "rx_backlog": len(slot.backlog),
                                 "tx_queue": len(slot.tx.queue), "counters": dict(slot.c),
                                 "engine": eng,
                                 "engine_options": dict(
                                     d.cfg.engine_options.get(slot.name, {})),
                                 "options_in_force": slot.options_in_force,
                                 "icrc_ip_header": slot.ip_header or None,
                                 "sockets": [p.describe() for p in slot.tx.sockets()],
                                 "frame_rings": {f"{m.ifname} {m.address}": fx.counters()
                                                 for m, fx in slot.tx.rings.items()},
                                 "delay_line": line_counters(slot.delay)}
    try:
        now = trio.current_time()
    except RuntimeError:  # outside the daemon's trio run (tests)
        now = 0.0
    pause = {pp.ifname: pp.counters(now) for pp in d.pause_ports}
    totals["pause_frames"] = sum(p["frames"] for p in pause.values())
    totals["paused_s"] = round(sum(p["paused_s"] for p in pause.values()), 6)
    ports = {n: p.counters() for n, p in d.pacers.items()}
    lw = d.linkwatch
    links = ({} if lw is None else
             {"up": dict(zip(lw.ifnames, lw.up, strict=True)), "changes": lw.changes})
    return {"cluster": d.cfg.cluster, "host": d.cfg.host, "pid": os.getpid(),
            "uptime_s": round(wall() - d._t0, 3),
            "time": {"scale": d.clock.scale, "epoch": d.clock.epoch},
            "ready_after_s": d.ready_after, "rss_kib": rss_kib(),
            "sched_slice_s": slice_in_force(),
            "sched": policy_in_force(),
            "rx_coalesce": describe_coalesce(d.cfg.rx_coalesce),
            "totals": totals, "ports": ports, "links": links,
            "overload": overload(totals, ports, d.clock.scale),
            "transports": transports, "control": d.control.counters(),
            "pause": pause, "pause_errors": d.pause_errors,
            "memory": {"regions": len(d.memory)}, "warnings": d.warnings,
            "worker": d.worker, "gc": gcwatch.counters()}


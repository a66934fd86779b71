# SPDX-License-Identifier: GPL-2.0-only
"""Emulator overload across a cluster: every daemon's own losses and lateness, as deltas.

A result is **credible** when no daemon on the way lost or delayed anything
the emulated hardware would not have: NIC daemons count socket-buffer and
backlog drops and sends behind their port's schedule (``emu.nic.daemon``
``overload``); switch daemons count releases behind their departure times
and packets the kernel dropped before they reached the queue model
(``emu.switch.daemon`` ``overload``); a NIC daemon that spent more than
:data:`CPU_WAIT_MAX` of the run waiting for a CPU, in waits longer than a wake-up's
(:data:`CPU_WAIT_PER_RUN_MAX` on average), counts as ``cpu_wait``, one that
used more than :data:`CPU_BUSY_MAX` of a CPU as ``cpu_bound``, one whose UET senders
idled their port behind ACKs the daemons held for more than :data:`ACK_LATE_MAX` of
the run as ``ack_late``.
Tools take a :func:`snapshot` before and after a run and report
:func:`delta`, so a run is judged by what happened during it, not by an
earlier run's damage.

Also collected: each NIC engine's transmitted and retransmitted packets, so a
result can state its retransmitted fraction beside its overload; and the machine's
own stalls (:mod:`emu.credible.stallwatch`, every CPU stopped at once) with the
hypervisor's steal time. A late send that such a stall explains is not the
emulator's load: it counts as ``machine_stall`` instead of ``tx_late`` — still not
credible (the emulated link lost the time), with advice that fits (rerun; lower
rates would not help).

Control sockets are files, so this works from inside any host namespace
(the perf client runs in one) as well as from the root namespace.
"""

from __future__ import annotations

import glob
import math
import os
import time
from collections.abc import Collection
from typing import Any

from emu.credible import stallwatch
from emu.nic.protocol import RUN_DIR as NIC_RUN_DIR
from emu.nic.protocol import overload_causes

SWITCH_RUN_DIR = "/run/emu/switch"
#: engine counters that count retransmitted packets on the wire (RoCE go-back-N; UET RUD,
#: whatever the cause; RUDI). Not UET's ``rto_retransmits``: a cause, already inside
#: ``tx_retransmits`` (adding it counted every RTO resend twice)
RETX_KEYS = ("tx_retransmits", "tx_rudi_retransmits")
#: a NIC daemon that waited for a CPU (runnable, not running) longer than this share of a
#: run was starved: its port, timers and receive path ran late by the scheduler's doing,
#: whether or not a frame was queued at that moment (a deep transmit FIFO hides the gaps
#: from ``tx_late``; this does not). Short waits — a wake-up's latency — stay far below it
CPU_WAIT_MAX = 0.05
#: … and whose waits averaged more than this per time it got the CPU. Why: a daemon that
#: wakes for every packet pays a wake-up's latency each time (10–20 µs here on an idle
#: machine), which added up to 6 % of a leaf-spine run at 200 Mb/s (7,000 wake-ups a
#: second, the machine 60 % idle) without delaying anything by more than a fraction of
#: a frame time; starvation is waits of hundreds of µs to milliseconds each
CPU_WAIT_PER_RUN_MAX = 100e-6
#: a NIC daemon whose UET senders' port stood idle behind ACKs the daemons held (their
#: late reads, the target's holding: ``emu.transports.uet.flowctl``) for more than this
#: share of a run: its goodput was the emulator's. Why a share and not any: the window
#: allowance already takes the daemons' usual lateness out of the loop, and what is left
#: — single wake-ups a few hundred µs late — cost a 1 s run at 1 Gb/s 0–3 % (pair,
#: IPv4, idle machine); the same share as a CPU wait (:data:`CPU_WAIT_MAX`)
ACK_LATE_MAX = 0.05
#: a NIC daemon that used more than this share of one CPU over a run was the bottleneck
#: itself — it could not produce or take in packets as fast as its port and the path
#: allowed — even when no frame ever waited for the port (``tx_late`` sees only a port
#: behind on queued frames; a daemon slower than its port never queues any). A credible
#: run at a rate emu doctor proposes uses well under half a core per daemon
CPU_BUSY_MAX = 0.85
#: … while no frame waited for its port's serializer and its busier direction carried
#: less than this share of its line rate (a daemon that used a core and kept its port
#: full kept up: that is the rate it was given; the share is of the whole snapshot
#: window, set-up included, so the waits decide for a sender)
PORT_BUSY_MIN = 0.9
#: a run whose busiest port of its own carried less than this share of its line rate was
#: not limited by the rate: a lower rate helps only once it is below what the run carried
#: — for such a run four times lower and more, which is not what ``emu doctor``'s
#: proposals (what the machine sustains in bulk) offer. Its overload is told by what ran
#: out (:func:`warning`): the daemons' CPU per message, ACKs answered late, the machine
SMALL_SHARE = 0.25


def snapshot(cluster: str, timeout: float = 5.0) -> dict[str, Any]:
    """Every daemon's overload counters and packet counts now: ``{"nic": {host: …},
    "switch": {node: …}, "unreachable": [...]}`` (a NIC daemon's entry also holds its
    pid and each engine's counters; a switch daemon's its ``switch`` totals)."""
    from emu.nic.protocol import DaemonDown, call_once
    from emu.switch.client import request

    out: dict[str, Any] = {"nic": {}, "switch": {}, "unreachable": [], "t": time.monotonic(),
                           "steal_s": stallwatch.steal_seconds(),
                           "stallwatch": stallwatch.read(stallwatch.path(cluster))}
    for path in sorted(glob.glob(os.path.join(NIC_RUN_DIR, cluster, "*.sock"))):
        host = os.path.basename(path)[:-5]
        try:
            st = call_once(path, "stats", timeout=timeout)
        except DaemonDown as e:  # "nicd h2 of cluster … is not running (pid … exited)"
            out["unreachable"].append(str(e))
            continue
        except (OSError, ValueError) as e:
            out["unreachable"].append(f"nicd {host}: {e}")
            continue
        tx = retx = 0
        for tr in (st.get("transports") or {}).values():
            eng = tr.get("engine") or {}
            tx += int(eng.get("tx_packets", 0) or 0)
            retx += sum(int(eng.get(k, 0) or 0) for k in RETX_KEYS)
        out["nic"][host] = {"overload": st.get("overload") or {}, "tx_packets": tx,
                            "retransmits": retx, "pid": st.get("pid"),
                            "engines": {t: tr.get("engine") or {}
                                        for t, tr in (st.get("transports") or {}).items()}}
    for path in sorted(glob.glob(os.path.join(SWITCH_RUN_DIR, cluster, "*", "control.sock"))):
        node = os.path.basename(os.path.dirname(path))
        try:
            c = request(path, {"cmd": "counters"}, timeout)
        except (OSError, ValueError) as e:
            out["unreachable"].append(f"switchd {node}: {e}")
            continue
        out["switch"][node] = {"overload": c.get("overload") or {},
                               "switch": c.get("switch") or {}}
    return out


def _machine(before: dict[str, Any], after: dict[str, Any]) -> tuple[list, dict[str, Any]]:
    """The machine's whole-machine stalls between two snapshots, and their summary."""
    head, events = after.get("stallwatch") or (None, [])
    t0, t1 = before.get("t", 0.0), after.get("t", 0.0)
    # a watcher that ran real-time through the whole run (one that died says nothing)
    watched = (bool(head) and bool(head.get("rt")) and bool(head.get("alive"))
               and head.get("start", t1) <= t0)
    stalls = stallwatch.machine_stalls(events, head["cpus"], t0, t1) if watched else []
    return stalls, {"watched": watched, **stallwatch.summary(stalls),
                    "steal_s": round(after.get("steal_s", 0.0) - before.get("steal_s", 0.0), 3)}


def _diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    d = {}
    for k, v in b.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            x = v - (a.get(k, 0) or 0)
            d[k] = round(x, 6) if isinstance(x, float) else x
    return d


def delta(before: dict[str, Any], after: dict[str, Any],
          own: Collection[str] | None = None) -> dict[str, Any]:
    """What happened between two snapshots: per daemon and cause, the total, per NIC the
    packets sent and retransmitted and the share of its line rate its port carried, and
    ``credible`` (no overload, every daemon reachable).

    ``own``: the hosts whose NICs a run used (``emu perf``: the client's and the
    server's). The verdict stays the whole cluster's — overload anywhere on the machine
    makes any result measured on it suspect — but the packets sent and retransmitted
    (``tx_packets``, ``retransmits``, ``retransmitted_fraction``) and ``port_share`` are
    those NICs' alone: two runs at once each reported the other's retransmissions as
    theirs. ``counted_nics`` says whose they are (None: every NIC's)."""
    causes: dict[str, float] = {}
    daemons: dict[str, Any] = {}
    nics: dict[str, dict[str, Any]] = {}
    elapsed = after.get("t", 0.0) - before.get("t", 0.0)
    # fabric time (emu.fabricclock): the daemons' late times are fabric seconds, judged
    # against the run's fabric length; CPU times and the ports' wall rates, against the wall
    scale = max((float(b.get("overload", {}).get("time_scale") or 1.0)
                 for b in after.get("nic", {}).values()), default=1.0)
    elapsed_f = elapsed / scale
    stalls, machine = _machine(before, after)
    for kind in ("nic", "switch"):
        for name, b in after[kind].items():
            a = before[kind].get(name, {})
            d = _diff(a.get("overload", {}), b.get("overload", {}))
            if kind == "nic" and stalls and d.get("tx_late"):
                # late sends a stall of the whole machine explains are the machine's
                late = [e for e in b.get("overload", {}).get("late_events", ())
                        if e[2] > before.get("t", 0.0)]
                n = min(d["tx_late"], sum(stallwatch.explained(late, stalls)))
                if n:
                    d["tx_late"] -= n
                    d["machine_stall"] = n
            if kind == "nic":
                nics[name] = {"tx_packets": b["tx_packets"] - a.get("tx_packets", 0),
                              "retransmits": b["retransmits"] - a.get("retransmits", 0)}
            if d.get("total"):
                daemons[f"{'nicd' if kind == 'nic' else 'switchd'} {name}"] = {
                    k: v for k, v in d.items() if v}
            for k, v in overload_causes(d).items():
                if v:
                    causes[k] = causes.get(k, 0) + v
            waited = d.get("cpu_wait_s", 0.0)
            runs = d.get("cpu_runs", 0)
            if kind == "nic" and elapsed > 0 and waited > CPU_WAIT_MAX * elapsed \
                    and (not runs or waited / runs > CPU_WAIT_PER_RUN_MAX):
                causes["cpu_wait"] = causes.get("cpu_wait", 0) + 1
                who = f"nicd {name}"
                daemons[who] = {**daemons.get(who, {}), "cpu_wait": 1,
                                "cpu_wait_s": waited,
                                "cpu_wait_per_run_s": round(waited / runs, 6) if runs else None}
            late = d.get("ack_late_s", 0.0)
            if kind == "nic" and elapsed > 0 and late > ACK_LATE_MAX * elapsed_f:
                causes["ack_late"] = causes.get("ack_late", 0) + 1
                who = f"nicd {name}"
                daemons[who] = {**daemons.get(who, {}), "ack_late": 1, "ack_late_s": late}
            busy = d.get("cpu_s", 0.0)
            rate = float(b.get("overload", {}).get("line_rate") or 0.0)
            moved = max(d.get("tx_bytes", 0), d.get("rx_bytes", 0)) * 8
            port_busy = moved / (rate * elapsed) if rate and elapsed > 0 else 0.0
            if kind == "nic" and rate:
                nics[name]["port_share"] = round(port_busy, 6)
            if kind == "nic" and elapsed > 0 and busy > CPU_BUSY_MAX * elapsed \
                    and not d.get("port_waits") and port_busy < PORT_BUSY_MIN:
                causes["cpu_bound"] = causes.get("cpu_bound", 0) + 1
                who = f"nicd {name}"
                daemons[who] = {**daemons.get(who, {}), "cpu_bound": 1,
                                "cpu_share": round(busy / elapsed, 3),
                                "port_share": round(port_busy, 6)}
    counted = sorted(nics) if own is None else sorted(set(own) & set(nics))
    tx = sum(nics[n]["tx_packets"] for n in counted)
    retx = sum(nics[n]["retransmits"] for n in counted)
    shares = [nics[n]["port_share"] for n in counted if "port_share" in nics[n]]
    total = int(sum(causes.values()))
    unreachable = sorted(set(before.get("unreachable", []) + after.get("unreachable", [])))
    # link time the NIC ports stood idle while frames waited for a late daemon
    lost = sum(d.get("tx_late_s", 0.0) for d in daemons.values())
    return {"total": total, "causes": causes, "daemons": daemons, "elapsed_s": round(elapsed, 6),
            "time_scale": scale, "elapsed_fabric_s": round(elapsed_f, 9),
            "lost_link_s": round(lost, 6 if scale == 1 else 9), "machine": machine,
            "tx_packets": tx,
            "retransmits": retx, "retransmitted_fraction": retx / tx if tx else 0.0,
            "counted_nics": None if own is None else counted, "nics": nics,
            # the busiest of the counted ports: how near its line rate the run came
            "port_share": max(shares) if shares else None,
            "unreachable": unreachable, "credible": total == 0 and not unreachable}


def _ms(s: float) -> str:
    """A short duration for a person: ms down to 0.1 ms, µs below (0.0 ms read as none)."""
    return f"{s * 1e3:.1f} ms" if s >= 1e-4 else f"{s * 1e6:.0f} µs"


def _names(names: list[str], last: str = "and") -> str:
    """``h1``, ``h1 and h4``, ``h1, h2 and h4`` (or ``or``)."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


def retransmitted(d: dict[str, Any]) -> str:
    """The line a tool prints after every run: what the NICs resent, of all they sent
    — the first counter an engineer reads, credible run or not — and whose NICs those
    are (a run's own, :func:`delta`'s ``own``; else every NIC of the cluster: a run
    beside it counts there too)."""
    tx, retx = d.get("tx_packets", 0), d.get("retransmits", 0)
    share = f" ({100 * retx / tx:.2g} %)" if tx else ""
    nics = d.get("counted_nics")
    if nics is not None and not nics:
        return "no packets counted: the run's NIC daemons could not be read"
    whose = ("all NICs of the cluster" if nics is None
             else f"the NIC{'s' if len(nics) > 1 else ''} of {_names(list(nics))}")
    return f"{retx:,} of {tx:,} packets {whose} sent were retransmissions{share}"


def _pct(share: float) -> str:
    """A share as a person reads it: 97 %, 4.2 %, 0.02 %."""
    return f"{100 * share:.2g} %" if share < 0.1 else f"{100 * share:.0f} %"


def _slower(d: dict[str, Any]) -> str:
    """How to give this machine more time per packet: in real time, lower rates; on
    fabric time, a larger scale (the fabric stays as written)."""
    scale = float(d.get("time_scale", 1.0) or 1.0)
    if scale == 1:
        return "lower the rates, or run on fabric time (emu doctor proposes both)"
    return (f"run the fabric slower: emu up … --set time.scale={2 * scale:g} (this run's "
            f"was {scale:g}; emu doctor says what this machine needs)")


def _advice(d: dict[str, Any], starved: bool) -> tuple[str, str]:
    """The warning's head and the advice that fits the causes *and* the run.

    Lower rates help a run that came near its line rate: the machine could not keep up
    with the link. A run that carried a small share of it (:data:`SMALL_SHARE`: tiny
    messages, a ping-pong) was limited by something no lower rate touches — the daemons'
    CPU per message or packet (``cpu_bound``), ACKs a daemon answered late (``rto_held``,
    ``ack_late``), other work on the machine (``cpu_wait``) — so it is told that, and
    what would help, instead of "lower the rates" (which a 0.02 MB/s run was told)."""
    causes = set(d["causes"])
    share = d.get("port_share")
    if causes == {"machine_stall"}:
        return ("the machine stalled during this run",
                "not emu's load, lower rates would not avoid it: rerun, or use a quieter machine")
    head = "emulator overload during this run"
    if share is None or share >= SMALL_SHARE:
        if starved and causes <= {"cpu_wait", "machine_stall"}:
            return head, f"run on a quieter machine or {_slower(d)}"
        return head, _slower(d)
    limits, helps = [], []
    for n, v in sorted(d["daemons"].items()):
        if v.get("cpu_bound"):
            limits.append(f"{n} used {_pct(v.get('cpu_share', 0.0))} of a CPU while its port "
                          f"carried {_pct(v.get('port_share', 0.0))} of its line rate — the "
                          "daemons' CPU per message was the limit")
    if limits:
        helps.append("fewer, larger messages (-s)")
    late = sorted(causes & {"rto_held", "ack_late"})
    if late:
        limits.append(f"a daemon answered ACKs late ({', '.join(late)}: its CPU per packet, "
                      "or other work on this machine)")
        helps += ["a quieter machine", "a rerun"]
    if "cpu_wait" in causes:
        limits.append("the daemons waited for a CPU")
        helps.append("a quieter machine")
    if not limits:  # drops or late sends at a small share: bursts the daemons fell behind
        limits.append("the daemons fell behind their packets, not the link")
        helps += ["fewer, larger messages (-s)", "a quieter machine", "a rerun"]
    helps = list(dict.fromkeys(helps))
    return head, (f"the run carried {_pct(share)} of its line rate, so lower rates would not "
                  f"help: {'; '.join(limits)}; try {_names(helps, 'or')}")


def judge_scale(d: dict[str, Any], floor: float, what: str) -> None:
    """Flag a run (``d``, :func:`delta`'s verdict) made at a time scale below ``floor``,
    the smallest at which this machine gives ``what`` (the plan's rule: keeping up, or
    emu's own round trip within its share of the fabric's): there emu's own time is part
    of the result even with no packet lost or late, so the result is not credible."""
    scale = float(d.get("time_scale") or 1.0)
    if floor <= 0 or scale >= floor * (1 - 1e-9):
        return
    d["causes"]["scale_too_small"] = 1
    d["total"] += 1
    d["credible"] = False
    d["scale_floor"] = {"scale": scale, "floor": floor, "what": what}


def _scale_line(d: dict[str, Any]) -> str:
    f = d["scale_floor"]
    return (f"time scale {f['scale']:g} is below the {f['floor']:.3g} this fabric needs on "
            f"this machine for {f['what']}, so emu's own time is part of the result — NOT "
            f"CREDIBLE; run the fabric slower: --set time.scale={nice_scale(f['floor'])} "
            "(or leave [time] scale at \"auto\")")


def nice_scale(x: float) -> str:
    """``x`` rounded up to two significant digits, as a ``--set`` value."""
    if x <= 1:
        return "1"
    k = math.floor(math.log10(x)) - 1
    step = 10.0 ** k
    return f"{math.ceil(x / step * (1 - 1e-12)) * step:g}"


def warning(d: dict[str, Any]) -> str | None:
    """The one line a tool prints when a result is not credible (None when it is)."""
    if d["credible"]:
        return None
    if d.get("scale_floor"):
        rest = {k: v for k, v in d["causes"].items() if k != "scale_too_small"}
        line = f"warning: {_scale_line(d)}"
        if not rest:
            return line
        other = warning({**d, "causes": rest, "scale_floor": None})
        return f"{other}; and the {_scale_line(d)}" if other else line
    parts = [f"{k} {v:g}" for k, v in sorted(d["causes"].items())]
    where = ", ".join(sorted(d["daemons"]))
    lost = ""
    if d.get("lost_link_s") and d.get("elapsed_s"):
        # summed over the late daemons' ports: a share of *their* time, never over 100 %
        late = [n for n, v in d["daemons"].items()
                if v.get("tx_late") or v.get("machine_stall")] or [None]
        scale = d.get("time_scale", 1.0)
        share = d["lost_link_s"] / (d.get("elapsed_fabric_s", d["elapsed_s"]) * len(late))
        fabric = f" fabric (time scale {scale:g})" if scale != 1 else ""
        lost = (f"; {d['lost_link_s'] * 1e3:.1f} ms{fabric} of link time lost, "
                f"{min(100.0, 100 * share):.2g} % of the late ports' time")
    starved = [f"{n} waited for a CPU {100 * v['cpu_wait_s'] / d['elapsed_s']:.0f} % of the run"
               for n, v in sorted(d["daemons"].items())
               if v.get("cpu_wait") and d.get("elapsed_s")]
    why = (f"; {', '.join(starved)} — other work on this machine (any busy process; in a "
           "latency test, its own busy-polling applications), or more daemons than its "
           "cores serve" if starved else "")
    m = d.get("machine") or {}
    stalled = ""
    if m.get("stalls"):
        steal = f", the hypervisor's steal {m['steal_s'] * 1e3:.0f} ms" if m.get("steal_s") else ""
        stalled = (f"; the machine itself stalled {_ms(m['stalled_s'])} in all "
                   f"(every CPU at once, longest {_ms(m['longest_s'])}{steal})")
    if not parts:  # nothing counted, but a daemon's counters are missing from the verdict
        return (f"warning: the emulator's overload during this run is unknown — NOT "
                f"CREDIBLE; could not read {', '.join(d['unreachable'])}")
    head, advice = _advice(d, bool(starved))
    msg = (f"warning: {head} ({', '.join(parts)}"
           f"{' in ' + where if where else ''}{lost}{why}{stalled}): the result measures "
           f"this machine, not the emulated network — NOT CREDIBLE; {advice}")
    if d["unreachable"]:
        msg += f"; could not read {', '.join(d['unreachable'])}"
    return msg

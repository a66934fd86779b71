# SPDX-License-Identifier: GPL-2.0-only
"""The switch daemon: NFQUEUE in, the sans-IO pipeline, verdicts out (``emu switchd``).

``python -m emu.switch.daemon --netns NS --state-dir DIR [--config FILE.json]``
runs inside the switch's namespace. Why NFQUEUE: the kernel keeps routing
(ECMP, SRv6) and picks the egress port — ``NFQA_IFINDEX_OUTDEV`` tells us
which — and user space only decides *when* (and how) a packet leaves. The
daemon holds each packet's verdict until the queue model
(:mod:`emu.switch.queue`) says it has been serialized (and delayed), then
accepts it, with:

* **ECN CE** — verdict with ``NFQA_MARK`` carrying the ``ce_mark`` bit, and an
  nft table ``inet emu_switch_<q>`` whose postrouting rule turns that bit into
  ``ip ecn set ce`` / ``ip6 ecn set ce`` (the kernel fixes the IPv4 checksum).
  Chosen over rewriting the header in the verdict payload because that needs
  the whole packet copied to user space and back (copy_range 256 → 64 KiB),
  measured by :mod:`emu.switch.bench` (``--copy-range``);
* **trim** — the verdict carries the shorter, fixed-up packet (:mod:`.trim`);
* **drop** — ``NF_DROP`` (tail, random, trim-queue full).

Rules: ``iptables``/``ip6tables`` (the NFQUEUE *target*: this kernel lacks nft's
``queue`` expression) in a chain ``EMU_SW_<q>`` jumped to from FORWARD, one rule
per ``match`` entry (``udp:4791`` → ``-p udp --dport 4791``, ``proto:253`` →
``-p 253``), all with ``--queue-bypass`` so traffic flows if the daemon dies.
Everything else is never queued: never marked, trimmed or delayed.

Loop: one netlink socket; each round drains it until EAGAIN (≤ 1024), feeds
the pipeline, releases what is due, sends every verdict in one ``send``,
sends PFC frames, then sleeps in ``select`` until the next departure, a
packet, a control request or the counter period. Held packets are bounded by
the ports' ``depth`` and the kernel queue by ``queue_maxlen`` (fail-open).

Files in ``--state-dir``: ``control.sock`` (JSON lines, below), ``counters.json``
(atomically replaced every ``series_interval``), ``series.jsonl`` (one line
per port per period: ``t`` and the port counters; capped at 64 MiB),
``config.json`` (the live configuration). Control requests, one JSON object
per line, one JSON reply per line: ``{"cmd":"set","port":P,"settings":{…}}``
(P = a port's ifname or a shell wildcard over them, ``"*"`` for every port; a P that
names no port is refused with the switch's ports listed — nothing is stored under it),
``{"cmd":"counters"[, "qdisc": true]}``,
``{"cmd":"config"}``, ``{"cmd":"stop"}``.

Fabric time (``--time-scale N --time-epoch E``, from the cluster's plan; DESIGN.md,
Fabric time): the configuration is in fabric units (rates, delay, jitter, the PFC
quantum and refresh, the series period — exactly as the topology wrote them) and the
pipeline runs on the fabric clock (:class:`emu.fabricclock.FabricClock`): every
arrival, departure, release, pause and counter time it sees is fabric seconds, so it
makes the same decisions at any scale. Wall time enters at two boundaries only: the
``select`` that sleeps until the next fabric deadline sleeps until that deadline's
wall time (:meth:`FabricClock.wall_at`), so a packet leaves at the wall time of its
fabric departure; and the kernel datapath, whose tbf and BPF virtual queue run on
``CLOCK_MONOTONIC`` and therefore get the wall rate, ``rate / scale``
(:class:`emu.switch.kernel.KernelPort`). Byte thresholds (depth, ECN, XOFF/XON) are
the same in both. Counters carry ``t`` (fabric seconds since the epoch) and
``time_scale``; ``uptime`` is the process's, wall.

Start-up prints ``ready`` on stdout once the queue is bound and the rules are
in; SIGTERM/SIGINT or ``stop``: remove the iptables rules, accept every held
packet, unbind, remove the nft table, write final counters, exit 0.
``--cleanup`` only removes rules a crashed daemon left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from emu.cpu import SCHED_POLICIES, schedule_daemon
from emu.fabric import netns
from emu.fabricclock import FabricClock, check_scale, wall
from emu.ifinfo import if_mtu
from emu.switch import kernel as K
from emu.switch import trim as T
from emu.switch.config import (
    ConfigError,
    SwitchConfig,
    apply_settings,
    is_pattern,
    select_ports,
)
from emu.switch.counterfiles import CounterFiles, write_atomic
from emu.switch.kernel_pfc import KernelPfc
from emu.switch.nfqueue import (
    NF_ACCEPT,
    NF_DROP,
    NFQA_CFG_F_FAIL_OPEN,
    NFQA_CFG_F_GSO,
    NfQueue,
    QPacket,
)
from emu.switch.pfc import PauseListener, PfcSender, hold_quanta
from emu.switch.queue import RELEASE, Pipeline, Pkt
from emu.wire.errors import DecodeError

MAX_CLIENTS = 16
#: the longest the packet loop waits for the GIL held by another of its threads
GIL_SWITCH_S = 0.0002


def _chain(q: int) -> str:
    return f"EMU_SW_{q}"


def _nft_table(q: int) -> str:
    return f"emu_switch_{q}"


def _run(argv: list[str], input: str | None = None, check: bool = True) -> bool:
    p = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {(p.stderr or p.stdout).strip()}")
    return p.returncode == 0


def install_rules(cfg: SwitchConfig) -> None:
    """iptables NFQUEUE rules for the transport matches and the nft CE-mark table."""
    remove_rules(cfg.queue_num)
    chain = _chain(cfg.queue_num)
    for tool in ("iptables", "ip6tables"):
        _run([tool, "-w", "-N", chain])
        for m in cfg.match:
            kind, val = m.split(":")
            sel = ["-p", "udp", "--dport", val] if kind == "udp" else ["-p", val]
            _run([tool, "-w", "-A", chain, *sel, "-j", "NFQUEUE", "--queue-num",
                  str(cfg.queue_num), "--queue-bypass"])
        _run([tool, "-w", "-I", "FORWARD", "-j", chain])
    t, mk = _nft_table(cfg.queue_num), cfg.ce_mark
    _run(["nft", "-f", "-"], input=(
        f"table inet {t} {{\n  chain post {{\n"
        "    type filter hook postrouting priority 0; policy accept;\n"
        f"    meta mark & {mk:#x} == {mk:#x} ip ecn set ce\n"
        f"    meta mark & {mk:#x} == {mk:#x} ip6 ecn set ce\n  }}\n}}\n"))


def remove_rules(queue_num: int) -> None:
    """Remove our chain and nft table if present (idempotent)."""
    chain = _chain(queue_num)
    for tool in ("iptables", "ip6tables"):
        while _run([tool, "-w", "-D", "FORWARD", "-j", chain], check=False):
            pass
        _run([tool, "-w", "-F", chain], check=False)
        _run([tool, "-w", "-X", chain], check=False)
    _run(["nft", "delete", "table", "inet", _nft_table(queue_num)], check=False)


def kernel_queue_drops(queue_num: int) -> dict[str, int]:
    """What the kernel dropped on the way to this daemon: ``queue_dropped`` (the NFQUEUE
    was full) and ``user_dropped`` (its netlink socket buffer was), from
    ``/proc/self/net/netfilter/nfnetlink_queue`` of the switch's namespace. Both are
    the daemon behind the traffic — emulator overload, never switch behaviour."""
    try:
        with open("/proc/self/net/netfilter/nfnetlink_queue") as f:
            for line in f:
                v = line.split()
                if len(v) >= 7 and int(v[0]) == queue_num:
                    return {"queue_dropped": int(v[5]), "user_dropped": int(v[6])}
    except (OSError, ValueError):
        pass
    return {"queue_dropped": 0, "user_dropped": 0}


class SwitchDaemon:
    """The I/O driver around :class:`~emu.switch.queue.Pipeline` (see the module docstring)."""

    def __init__(self, cfg: SwitchConfig, state_dir: Path,
                 clock: FabricClock | None = None) -> None:
        self.cfg = cfg
        self.state_dir = state_dir
        #: the pipeline's clock: fabric time (real time at scale 1, epoch 0)
        self.clock = clock if clock is not None else FabricClock()
        self.pipe = Pipeline(cfg)
        self.names: dict[int, str] = {}
        self.g: dict[str, int] = dict.fromkeys(
            ("received", "gso", "malformed", "bypassed", "verdicts", "pfc_frames",
             "pfc_send_errors"), 0)
        self.stopping = False
        self.start = wall()  # uptime is the process's: wall
        self.next_write = 0.0  # the fabric time of the next counter snapshot
        self.clients: dict[socket.socket, bytearray] = {}
        self.kports: dict[str, K.KernelPort] = {}  # the kernel datapath's ports
        self.kprog: K.PortProgram | None = None    # … and their one BPF program
        self.datapath = "user"
        self.datapath_note = ""  # why the user-space path serves (or the kernel's error)
        self.nfq: NfQueue | None = None
        self.pfc: PfcSender | None = None
        #: the kernel datapath's PFC agent (lossless classes on kernel ports)
        self.kpfc: KernelPfc | None = None
        #: PFC frames the downstream neighbours send to the kernel ports (they hold them)
        self.kpause: dict[str, PauseListener] = {}
        self.next_poll = 0.0
        self.files = CounterFiles(state_dir)  # counters.json, series.jsonl
        self.sched = "default"  # the scheduling policy in force (emu.cpu.policy_in_force)
        #: the ports a `set` may name (emu.switch.config.select_ports): the configured ones
        #: until run() reads the namespace's interfaces, which are the switch's ports
        self.port_names = [p for p in cfg.ports if not is_pattern(p)]

    # ------------------------------------------------------------ packets

    def _ifname(self, idx: int) -> str:
        name = self.names.get(idx)
        if name is None:
            self.names = {i: n for i, n in socket.if_nameindex()}
            name = self.names.setdefault(idx, f"if{idx}")
        return name

    def _trimmer(self, pkt: Pkt) -> int | None:
        q: QPacket = pkt.handle
        cfg = self.cfg
        if q.gso or (cfg.trim_dscps is not None and pkt.dscp not in cfg.trim_dscps):
            return None
        dscp = cfg.trimmed_lasthop if self.pipe.ports[pkt.port].cfg.host_facing \
            else cfg.trimmed_dscp
        try:
            out = T.trim(q.data, dscp, cfg.trim_size)
        except DecodeError:
            self.g["malformed"] += 1
            pkt.ecn = 0             # never mark a packet we could not parse
            return None
        if out is None:
            return None
        q.out = out
        return len(out)

    def _verdict(self, pkt: Pkt) -> None:
        q: QPacket = pkt.handle
        mark = (q.mark | self.cfg.ce_mark) if pkt.marked else None
        assert self.nfq is not None
        self.nfq.verdict(q.id, NF_ACCEPT, mark, q.out if pkt.trimmed else None)

    def on_packets(self, now: float, pkts: list[QPacket]) -> None:
        arrive, g, nfq = self.pipe.arrive, self.g, self.nfq
        assert nfq is not None
        for q in pkts:
            g["received"] += 1
            d = q.data
            if len(d) < 20 or (d[0] >> 4) not in (4, 6):
                g["malformed"] += 1
                g["bypassed"] += 1
                nfq.verdict(q.id, NF_ACCEPT)
                continue
            tos = d[1] if d[0] >> 4 == 4 else ((d[0] & 0xF) << 4) | (d[1] >> 4)
            if q.skb_info & 2:
                g["gso"] += 1
            pkt = Pkt(q, q.length, tos >> 2, tos & 3, self._ifname(q.outdev), q.indev)
            r = arrive(now, pkt, self._trimmer)
            if r == RELEASE:
                self._verdict(pkt)
            elif r != "queued":
                nfq.verdict(q.id, NF_DROP)

    def release_due(self, now: float) -> None:
        for pkt in self.pipe.advance(now):
            self._verdict(pkt)
        for ev in self.pipe.take_pause_events():
            quanta = hold_quanta(self.cfg.pfc_refresh, self.cfg.pfc_quantum) if ev.pause \
                else 0
            try:
                assert self.pfc is not None
                self.pfc.send(self._ifname(ev.indev), {ev.cls % 8: quanta})
                self.g["pfc_frames"] += 1
            except OSError:  # the kernel refused the frame: the sender keeps sending
                self.g["pfc_send_errors"] += 1

    # ------------------------------------------------------------ counters

    def counters(self, now: float, qdisc: bool = True) -> dict[str, Any]:
        """Switch-wide and per-port counters and the overload in them. ``qdisc``: the
        kernel path also asks tc for tbf's own drops (on request and at exit, not every
        series period: a ``tc`` run costs milliseconds)."""
        if self.kports:
            ports = {n: kp.counters(self.cfg.port(n), qdisc) for n, kp in self.kports.items()}
            self.g["received"] = sum(p["seen"] for p in ports.values())
            if self.kpfc is not None:
                for n, c in ports.items():
                    c.update(self.kpfc.counters(n, now))
                self.g["pfc_frames"] = self.kpfc.frames
                self.g["pfc_send_errors"] = self.kpfc.send_errors
            # the pause frames the ports received (their neighbours held them)
            self.g["pfc_rx_frames"] = sum(ls.frames for ls in self.kpause.values())
            kq = {"queue_dropped": 0, "user_dropped": 0}
        else:
            ports = self.pipe.counters(now)
            kq = kernel_queue_drops(self.cfg.queue_num)
        if self.nfq is not None:
            self.g["verdicts"] = self.nfq.sent_verdicts
        over = {"late": int(sum(p["late"] for p in ports.values())),
                "late_s": round(sum(p["late_s"] for p in ports.values()), 6), **kq}
        over["pfc_send_errors"] = self.g["pfc_send_errors"]
        # tbf dropped what the virtual queue let through: model and kernel disagree
        over["qdisc_dropped"] = sum(int(p.get("qdisc_dropped", 0)) for p in ports.values())
        over["total"] = over["late"] + kq["queue_dropped"] + kq["user_dropped"] \
            + over["pfc_send_errors"] + over["qdisc_dropped"]
        errors = self.nfq.errors.items() if self.nfq is not None else ()
        return {"t": now, "time_scale": self.clock.scale, "uptime": wall() - self.start,
                "switch": dict(self.g),
                "datapath": self.datapath, "datapath_note": self.datapath_note,
                "sched": self.sched,
                # the writer thread's count of snapshots it could not write (a full /run)
                "counter_files": {"written": self.files.written, "skipped": self.files.skipped,
                                  "errors": self.files.errors},
                "netlink_errors": {os.strerror(k): v for k, v in errors},
                "overload": over, "ports": ports}

    def write_counters(self, now: float, qdisc: bool = False, wait: bool = True) -> None:
        """The counter files from a snapshot taken now: written before returning, or
        (``wait=False``, the packet loop's periods) by the writer thread."""
        c = self.counters(now, qdisc)
        if wait:
            self.files.write(c)
        else:
            self.files.post(c)

    # ------------------------------------------------------------ control

    def handle(self, req: dict[str, Any], now: float) -> dict[str, Any]:
        cmd = req.get("cmd")
        if cmd == "counters":  # "qdisc": also the kernel path's qdisc stats (a tc run)
            return {"ok": True, **self.counters(now, bool(req.get("qdisc")))}
        if cmd == "config":
            return {"ok": True, "config": self.cfg.to_dict()}
        if cmd == "stop":
            self.stopping = True
            return {"ok": True}
        if cmd == "set":
            port, settings = req.get("port"), req.get("settings")
            if not isinstance(port, str) or not isinstance(settings, dict):
                return {"ok": False, "error": "set needs 'port' (string) and 'settings' (object)"}
            before = copy.deepcopy(self.cfg.ports)
            try:
                targets = select_ports(port, self.port_names)
                for p in targets:
                    apply_settings(self.cfg.port(p), settings, where=f"port {p}")
                if self.kports:
                    why = K.reasons(self.cfg, {n: self.cfg.port(n) for n in self.kports})
                    if why:
                        raise ConfigError(f"the kernel datapath serves this switch and cannot "
                                          f"do: {'; '.join(why)} (start it with "
                                          f"switch.datapath=user)")
                    for p in targets:
                        if p in self.kports:
                            self.kports[p].configure(self.cfg, self.cfg.port(p))
                    self._kernel_pfc()
            except (ConfigError, K.KernelPathError, OSError) as e:
                self.cfg.ports = before
                for n, kp in self.kports.items():
                    kp.configure(self.cfg, self.cfg.port(n))
                return {"ok": False, "error": str(e)}
            for p in targets:
                if p in self.pipe.ports:
                    self.pipe.ports[p].cfg = self.cfg.port(p)
            write_atomic(self.state_dir / "config.json", json.dumps(self.cfg.to_dict(), indent=1))
            changed = {p: self.cfg.port(p).to_dict() for p in targets}
            # "config": the named port's, as before wildcards; a wildcard's ports are in "ports"
            return {"ok": True, "port": port, "ports": changed,
                    **({} if is_pattern(port) else {"config": changed[port]})}
        return {"ok": False, "error": f"unknown cmd {cmd!r} (set, counters, config, stop)"}

    def _client_io(self, s: socket.socket, now: float) -> None:
        buf = self.clients[s]
        try:
            data = s.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data or len(buf) + len(data) > 1 << 20:
            self._drop_client(s)
            return
        buf += data
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            try:
                req = json.loads(line)
                rep = self.handle(req, now) if isinstance(req, dict) else \
                    {"ok": False, "error": "a request is a JSON object"}
            except json.JSONDecodeError as e:
                rep = {"ok": False, "error": f"bad JSON: {e}"}
            except Exception as e:  # noqa: BLE001 - a bad request must not stop the switch
                rep = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            try:
                s.setblocking(True)
                s.sendall((json.dumps(rep) + "\n").encode())
                s.setblocking(False)
            except OSError:
                self._drop_client(s)
                return

    # ------------------------------------------------------------ main loop

    def _kernel_ports(self) -> dict[str, K.KernelPort]:
        """Attach the kernel datapath to every port with work (a rate or a loss), or
        return {} with ``datapath_note`` saying why the user-space path serves instead.
        ``datapath = "kernel"`` makes any reason an error."""
        cfg = self.cfg
        if cfg.datapath == "user":
            self.datapath_note = "datapath = user"
            return {}
        names = [n for _, n in socket.if_nameindex() if n != "lo"]
        K.remove_leftovers(names)  # a SIGKILLed predecessor's tbf and filter
        K.remove_stale_pins()      # … and its pinned program
        ports = {n: cfg.port(n) for n in names}
        why = K.reasons(cfg, ports)
        if why:
            self.datapath_note = "; ".join(why)
            if cfg.datapath == "kernel":
                raise K.KernelPathError(f"datapath = kernel cannot serve: {self.datapath_note}")
            return {}
        out: dict[str, K.KernelPort] = {}
        try:
            self.kprog = K.PortProgram(K.build_object())
            listed = K.qdiscs()
            work = [(n, p) for n, p in ports.items() if p.rate or p.loss]
            for n, p in work[:1]:  # loads the program and pins it
                out[n] = K.KernelPort(n, if_mtu(n), self.kprog, self.clock.scale)
                out[n].attach(cfg, p, listed.get(n, []))
            # the rest attach the pinned program, their tc changes as one batch (each
            # loads a copy of its own where nothing could be pinned)
            with K.batched() if self.kprog.pin else contextlib.nullcontext():
                for n, p in work[1:]:
                    out[n] = K.KernelPort(n, if_mtu(n), self.kprog, self.clock.scale)
                    out[n].attach(cfg, p, listed.get(n, []))
        except (K.KernelPathError, OSError, ValueError) as e:
            for kp in out.values():
                kp.detach()
            if self.kprog is not None:
                self.kprog.close()
                self.kprog = None
            if cfg.datapath == "kernel":
                raise K.KernelPathError(str(e)) from e
            self.datapath_note = f"kernel path failed: {e}"
            return {}
        return out

    def _kernel_pfc(self) -> None:
        """The PFC agent of the kernel ports (it polls only while some port has a lossless
        class; a live ``set`` may add or remove them)."""
        if self.kpfc is None:
            self.pfc = self.pfc or PfcSender()
            self.kpfc = KernelPfc(self.cfg, self.kports, self.clock, self.pfc.send)
        else:
            self.kpfc.reconfigure(self.kports)

    def step(self) -> float:
        """One round of the packet loop, at the fabric time it reads: take what the kernel
        queued, release what is due, send the verdicts and PFC frames, post the counters
        when their period is up. Returns the fabric time of the next thing to do."""
        now = self.clock.now()
        if self.nfq is not None:
            self.on_packets(now, self.nfq.receive(1024))
            now = self.clock.now()
            self.release_due(now)
            self.nfq.flush()
        held_until = self._honour_pauses(now) if self.kpause else None
        if self.kpfc is not None and self.kpfc.active and now >= self.next_poll:
            self.kpfc.poll(now)
            self.next_poll = now + self.kpfc.interval / self.clock.scale
        if now >= self.next_write:
            self.write_counters(now, wait=False)
            self.next_write = now + self.cfg.series_interval
        t = self.pipe.next_timer() if self.nfq is not None else None
        if self.kpfc is not None and self.kpfc.active:
            t = self.next_poll if t is None else min(t, self.next_poll)
        if held_until is not None:
            t = held_until if t is None else min(t, held_until)
        return self.next_write if t is None else min(self.next_write, t)

    def _honour_pauses(self, now: float) -> float | None:
        """Read the PFC frames the kernel ports received; hold a port while its neighbour
        pauses any priority, let it go when the last pause ends (an XON or its quanta run
        out). Returns when the earliest running pause ends (None: none)."""
        end: float | None = None
        for name, ls in self.kpause.items():
            ls.poll(now)
            until = [u for u in ls.state.until if u > now]
            self.kports[name].hold(bool(until))
            if until:
                end = min(until) if end is None else min(end, min(until))
        return end

    def wall_wait(self, deadline: float) -> float:
        """How long to sleep (wall seconds) until fabric time ``deadline``: the one place
        the pipeline's schedule meets the wall clock (a packet is released at the wall
        time of its fabric departure)."""
        return self.clock.wall_at(deadline) - wall()

    def run(self) -> int:
        cfg = self.cfg
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "series.jsonl").unlink(missing_ok=True)
        write_atomic(self.state_dir / "config.json", json.dumps(cfg.to_dict(), indent=1))
        ctl_path = self.state_dir / "control.sock"
        ctl_path.unlink(missing_ok=True)
        ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ctl.bind(str(ctl_path))
        ctl.listen(8)
        ctl.setblocking(False)
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)

        def on_signal(_sig: int, _frm: object) -> None:
            self.stopping = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        live = [n for _, n in socket.if_nameindex() if n != "lo"]  # in the switch's namespace
        self.port_names = [p for p in self.port_names if p in live] + \
            [n for n in live if n not in self.port_names]  # the topology's order first
        try:
            self.kports = self._kernel_ports()
            if self.kports:
                self.datapath = "kernel"
                self._kernel_pfc()
                self.kpause = {n: PauseListener(n, clock=self.clock) for n in self.kports}
            else:
                flags = NFQA_CFG_F_GSO | (NFQA_CFG_F_FAIL_OPEN if cfg.fail_open else 0)
                self.nfq = NfQueue(cfg.queue_num, cfg.copy_range, cfg.queue_maxlen, flags)
                self.pfc = PfcSender()
                install_rules(cfg)
            self.write_counters(self.clock.now())
            print(f"ready datapath={self.datapath}", flush=True)
            self.next_write = self.clock.now()
            while not self.stopping:
                wait = self.wall_wait(self.step())
                if wait > 0:
                    socks = [ctl, wake_r, *self.clients, *self.kpause.values()]
                    if self.nfq is not None:
                        socks.append(self.nfq.sock)
                    r, _, _ = select.select(socks, [], [], wait)
                    for s in r:
                        if s is ctl:
                            self._accept(ctl)
                        elif s is wake_r:
                            try:
                                wake_r.recv(64)
                            except BlockingIOError:
                                pass
                        elif s in self.clients:
                            self._client_io(s, self.clock.now())
                        # (a pause listener: read by the next step)
            return 0
        finally:
            self._shutdown(ctl, ctl_path)

    def _drop_client(self, s: socket.socket) -> None:
        self.clients.pop(s, None)
        s.close()

    def _accept(self, ctl: socket.socket) -> None:
        try:
            s, _ = ctl.accept()
        except BlockingIOError:
            return
        if len(self.clients) >= MAX_CLIENTS:
            s.close()
            return
        s.setblocking(False)
        self.clients[s] = bytearray()

    def _shutdown(self, ctl: socket.socket, ctl_path: Path) -> None:
        """No new packets, accept every held one, unbind, remove rules, final counters."""
        cfg = self.cfg
        if self.nfq is not None:
            for tool in ("iptables", "ip6tables"):
                while _run([tool, "-w", "-D", "FORWARD", "-j", _chain(cfg.queue_num)],
                           check=False):
                    pass
            for pkt in self.pipe.flush():
                self.nfq.verdict(pkt.handle.id, NF_ACCEPT)
            for _ in range(100):
                pkts = self.nfq.receive(4096)
                if not pkts:
                    break
                for q in pkts:
                    self.nfq.verdict(q.id, NF_ACCEPT)
            self.nfq.flush()
        self.files.close()
        self.write_counters(self.clock.now(), qdisc=True)
        for ls in self.kpause.values():
            ls.close()
        for kp in self.kports.values():
            kp.detach()
        if self.kprog is not None:
            self.kprog.close()
        if self.nfq is not None:
            self.nfq.close()
            remove_rules(cfg.queue_num)
        if self.pfc is not None:
            self.pfc.close()
        for s in self.clients:
            s.close()
        ctl.close()
        ctl_path.unlink(missing_ok=True)


def load_config(path: str | None) -> SwitchConfig:
    if path is None:
        return SwitchConfig()
    with open(path) as f:
        return SwitchConfig.from_dict(json.load(f))


def _scale(v: str) -> float:
    """``--time-scale N`` (argparse type: a bad value is one line and exit 2)."""
    try:
        return check_scale(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="emu switchd", description=__doc__.split("\n\n")[0])
    ap.add_argument("--netns", help="run inside this network namespace (default: current)")
    ap.add_argument("--state-dir", default=None, help="control socket, counters, series")
    ap.add_argument("--config", help="SwitchConfig as JSON (emu.switch.config)")
    ap.add_argument("--cleanup", action="store_true",
                    help="remove rules left by a crashed daemon of this queue number, exit")
    ap.add_argument("--sched", choices=SCHED_POLICIES, default="rt",
                    help="how the kernel schedules this daemon: rt (SCHED_FIFO where the "
                         "kernel throttles real-time tasks, as the NIC daemons), slice, "
                         "default (default: rt)")
    ap.add_argument("--time-scale", type=_scale, default=1.0, metavar="N",
                    help="run the pipeline on fabric time, N wall seconds per fabric second "
                         "(emu up gives the plan's; the configuration is in fabric units; "
                         "default 1: real time)")
    ap.add_argument("--time-epoch", type=float, default=0.0, metavar="MONOTONIC_S",
                    help="the cluster's fabric epoch (a CLOCK_MONOTONIC time; default 0)")
    a = ap.parse_args(argv)
    try:
        cfg = load_config(a.config)
    except (OSError, ValueError, ConfigError) as e:
        print(f"emu switchd: {e}", file=sys.stderr)
        return 2
    if a.state_dir is None and not a.cleanup:
        print("emu switchd: --state-dir is required", file=sys.stderr)
        return 2
    ctx = netns.entered(a.netns) if a.netns else None
    if ctx is not None:
        ctx.__enter__()
    try:
        if a.cleanup:
            remove_rules(cfg.queue_num)
            K.remove_leftovers([n for _, n in socket.if_nameindex() if n != "lo"])
            return 0
        # released at its departure times, as the hardware it stands in for: a daemon that
        # waited for a CPU behind the real-time NIC daemons released ~1 ms late
        d = SwitchDaemon(cfg, Path(a.state_dir), FabricClock(a.time_scale, a.time_epoch))
        d.sched = schedule_daemon(a.sched)
        # the packet loop takes the GIL back from the counter-file thread within 0.2 ms,
        # not the default 5 ms (emu.switch.counterfiles)
        sys.setswitchinterval(GIL_SWITCH_S)
        return d.run()
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: GPL-2.0-only
"""The switch pipeline's kernel datapath: a tc BPF virtual queue per egress port.

Why: the user-space pipeline (NFQUEUE → :mod:`emu.switch.queue` → verdict)
costs ~100 µs of Python per packet per hop; on a 2-core machine a 3-hop path
falls behind its own schedule even at 100 Mb/s, and emu then (rightly) marks
every result not credible. Here the per-packet work runs in the kernel:

* a **tbf** qdisc at the port's ``rate`` serializes (the real queue);
* a **tc BPF program** (``bpf/port.bpf.c``) on the port's clsact egress hook,
  in front of tbf, keeps a virtual FIFO of the same rate and decides per
  transport packet, in the reference pipeline's order: random ``loss``, tail
  drop beyond ``depth``, RED CE marking (``kmin``/``kmax``/``pmax`` of the
  packet's class) on the backlog the packet finds.

* **trimming** (a class's ``trim``, at its ``trim_threshold`` or where the packet
  would be tail-dropped): the program cuts the packet after its transport headers
  (or at ``trim_size``), rewrites its DSCP, lengths and checksums and recomputes a
  RoCEv2/MRC ICRC, as :mod:`emu.switch.trim` does (the tests compare the two byte
  for byte); how long the headers are it looks up in tables built from emu's codecs
  (:mod:`emu.switch.trim_tables`). A port that trims gets an htb qdisc under tbf
  with two classes in strict priority, and trimmed packets go to the first: ahead of
  data, within ``trim_depth``.

* **PFC**: for lossless classes the program notes which ingress port each packet came
  from and when it departs; the daemon's agent (:mod:`emu.switch.kernel_pfc`) polls
  that and the backlog and sends the pause frames by the reference's rule.

What it does not do — and :func:`reasons` therefore sends such a
configuration to the user-space datapath, which stays the reference:
``delay``/``jitter``, a ``trim_size`` above
:data:`TRIM_MAX`, a ``match`` beyond four UDP ports and two IP protocols, and a
port that already has a root qdisc. Differences are documented rather than
hidden: classes share one FIFO per port (no DRR), so RED and the trim threshold
read the port's data backlog, not the class's — the same thing when one class
carries the traffic; GSO super-packets, tunnelled packets (SRv6's outer IPv6
header) and IPv6 extension headers are not trimmed (they are queued as data).

Fabric time: the daemon's configuration is in fabric units; tbf and the program's
virtual queue run on ``CLOCK_MONOTONIC`` (tbf's timers, ``bpf_ktime_get_ns``), so
both get the port's *wall* rate, ``rate / scale`` (:func:`wall_rate`): the real
queue drains at the dilated wire's speed and the backlog the program computes,
``(t_free − now) × wall rate``, is the same number of bytes the fabric queue would
hold. Byte thresholds (depth, ``kmin``/``kmax``) are unchanged by dilation.

The object is built once per source version with Debian's clang
(:func:`build_object`, cached under ``~/.cache/emu/bpf``); tc loads it
(``tc filter … bpf da obj``); the daemon reaches the program's two maps by id
through the ``bpf(2)`` syscall — the generic pieces live in
:mod:`emu.fabric.bpfobj`, shared with the fabric's SRv6 datapath: one array holds
the port's configuration (written here), one its state and counters (written
by the program under a spin lock, read here with ``BPF_F_LOCK``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from emu.fabric import bpfobj
from emu.fabric.bpfobj import BpfError, BpfMap
from emu.fabric.naming import SWITCH_QDISC_MAJOR
from emu.fabricclock import wall
from emu.switch.config import PortConfig, SwitchConfig
from emu.switch.queue import NCLASS

SOURCE = Path(__file__).with_name("bpf") / "port.bpf.c"
#: the port's tbf: a root qdisc emu's link control knows as the switch's
ROOT_HANDLE = f"{SWITCH_QDISC_MAJOR:x}:"
#: a trimming port's strict priority under tbf: an htb qdisc (``prio`` is not on every
#: kernel we run on, htb is) with class 1 for trimmed packets (htb prio 0) and class 2,
#: its default, for the rest (prio 1), each with a byte FIFO. The classes' own rate is
#: far above the port's, so tbf alone shapes and htb only orders
PRIO_MAJOR = SWITCH_QDISC_MAJOR + 1
_PRIO, _BAND_TRIM, _BAND_DATA = (f"{m:x}:" for m in (PRIO_MAJOR, PRIO_MAJOR + 1, PRIO_MAJOR + 2))
_HTB_RATE = "400gbit"
CACHE = bpfobj.CACHE

#: struct port_cfg (port.bpf.c): ps_per_byte, depth, loss, udp_port[4], ip_proto[2],
#: dscp_class[64], then NCLASS x struct klass {ecn, kmin, kmax, pmax, trim,
#: trim_threshold, lossless}, 4 bytes of padding, the trimming fields (_CFG_TRIM) and the header
#: tables (:mod:`emu.switch.trim_tables`); padded to 8
_CFG_HEAD = struct.Struct("<QQI4I2I64s")
_KLASS = struct.Struct("<7I")
_CFG_TRIM = struct.Struct("<4xQQII2IIII512s64s32s16s64s256s3s")
#: hold_start, held_ns (a downstream PFC pause), after one byte of padding
_CFG_HOLD = struct.Struct("<xQQ")
CFG_SIZE = (_CFG_HEAD.size + NCLASS * _KLASS.size + _CFG_TRIM.size + _CFG_HOLD.size
            + 7) // 8 * 8
#: bytes of the IP packet a kernel trim keeps at most (port.bpf.c's TRIM_MAX)
TRIM_MAX = 256
#: a class's trim_threshold "unset": trim where the packet would be tail-dropped
_NO_THRESHOLD = (1 << 32) - 1
#: struct port_state: bpf_spin_lock (+4 pad), then these u64 fields in order
STATE_FIELDS = ("t_free", "seen", "enqueued", "bytes", "other", "marked", "dropped_tail",
                "dropped_random", "max_depth", "not_ip", "t_prio_free", "trimmed",
                "dropped_trim", "trim_failed", "t_last")
_STATE = struct.Struct("<II" + "Q" * len(STATE_FIELDS))
#: struct ingress_tab (PFC): ifindex[64], then t_last[64][8] (ns, bpf_ktime_get_ns)
INGRESS_SLOTS, PFC_PRIOS = 64, 8
_INGRESS = struct.Struct(f"<{INGRESS_SLOTS}I{INGRESS_SLOTS * PFC_PRIOS}Q")

_U32_MAX = (1 << 32) - 1
#: the tc filter's priority and handle on each port's egress hook (ours alone)
TC_PRIO, TC_HANDLE = "49151", "0xe1"
#: entries of the program's per-port maps: a port's are at its ifindex (bpf/port.bpf.c)
PORT_SLOTS = 256
#: where the switch's program is pinned while its daemon runs (tc attaches it by path)
PIN_DIR = "/sys/fs/bpf"
PIN_PREFIX = "emu-port-"

#: frames tbf's bucket holds. A real port sends back to back; tbf sends the next frame
#: when its timer fires, and on this VM that timer is late by some µs per frame (median
#: gap 249 µs, none under 246, for a 240 µs 9 KB frame at 300 Mb/s): with a one-frame
#: bucket every late fire was link time lost for good — a 9 KB-MTU port ran at
#: 0.87-0.92 of its rate (tests/switch/test_kernel.py) and UET on the leaf-spine could
#: not reach 0.9 of it, with nothing counted. Two frames let
#: a late fire catch up (a lateness up to one frame time); the real queue then runs at
#: most one frame ahead of the BPF model's backlog after an idle period.
TBF_BURST_FRAMES = 2


def ktime_ns() -> int:
    """Now on the programs' clock (``bpf_ktime_get_ns``: CLOCK_MONOTONIC, the wall)."""
    return int(wall() * 1e9)


def tbf_burst(mtu: int, frames: int = TBF_BURST_FRAMES) -> int:
    """tbf's bucket in bytes for a port of ``mtu`` (:data:`TBF_BURST_FRAMES` frames)."""
    return frames * (mtu + 14 + 64)


class KernelPathError(BpfError):
    """The kernel datapath cannot run here (no clang, no BPF, tc refused): the daemon
    says why and uses the user-space datapath."""


def reasons(cfg: SwitchConfig, ports: dict[str, PortConfig]) -> list[str]:
    """Why ``cfg`` needs the user-space datapath (empty: the kernel path serves it)."""
    out: list[str] = []
    udp = [m for m in cfg.match if m.startswith("udp:")]
    proto = [m for m in cfg.match if m.startswith("proto:")]
    if len(udp) > 4 or len(proto) > 2 or len(udp) + len(proto) != len(cfg.match):
        out.append(f"match {cfg.match} (the kernel path takes ≤ 4 udp:N and ≤ 2 proto:N)")
    for name, p in sorted(ports.items()):
        if trims(p) and cfg.trim_size is not None and cfg.trim_size > TRIM_MAX:
            out.append(f"port {name}: trimming at trim_size {cfg.trim_size} "
                       f"(the kernel path keeps ≤ {TRIM_MAX} bytes)")
        if p.delay or p.jitter:
            out.append(f"port {name}: delay/jitter")
    return out


def available() -> str | None:
    """None when this machine can build and load the kernel path, else why not."""
    return bpfobj.missing(SOURCE, CACHE)


def predict(cfg: SwitchConfig) -> str:
    """The datapath a daemon with ``cfg`` will choose (``kernel``/``user``), as far as
    it is known before it runs (a port that turns out to have a root qdisc already, or
    a kernel that refuses the program, still sends it to user space then)."""
    if cfg.datapath == "user" or reasons(cfg, cfg.ports) or available() is not None:
        return "user"
    return "kernel"


def _prob32(p: float) -> int:
    return max(0, min(_U32_MAX, round(p * _U32_MAX)))


def wall_rate(p: PortConfig, scale: float = 1.0) -> int | None:
    """The rate tbf and the program run a port at: its (fabric) rate / the time scale,
    in whole bits/s (None: no rate, no queue)."""
    return max(1, round(p.rate / scale)) if p.rate else None


def pack_config(cfg: SwitchConfig, p: PortConfig, scale: float = 1.0,
                prio_major: int = 0, hold: tuple[int, int] = (0, 0)) -> bytes:
    """The port's ``struct port_cfg`` as the program reads it (at the wall rate: the
    program's clock is ``bpf_ktime_get_ns``); ``prio_major``: the handle of the port's
    prio qdisc (0: none, trimmed packets then queue with data)."""
    rate = wall_rate(p, scale)
    udp = [int(m[4:]) for m in cfg.match if m.startswith("udp:")][:4]
    proto = [int(m[6:]) for m in cfg.match if m.startswith("proto:")][:2]
    dmap = bytes((cfg.dscp_map or {}).get(d, d >> 3) % NCLASS for d in range(64))
    head = _CFG_HEAD.pack(round(8e12 / rate) if rate else 0, p.depth, _prob32(p.loss),
                          *(udp + [0] * (4 - len(udp))), *(proto + [0] * (2 - len(proto))),
                          dmap)
    kl = b"".join(_KLASS.pack(int(k.ecn), min(k.kmin, _U32_MAX), min(k.kmax, _U32_MAX),
                              _prob32(k.pmax), int(k.trim),
                              _NO_THRESHOLD if k.trim_threshold is None
                              else min(k.trim_threshold, _NO_THRESHOLD - 1), int(k.lossless))
                  for k in (p.klass(c) for c in range(NCLASS)))
    return (head + kl + _trim_fields(cfg, p, prio_major) + _CFG_HOLD.pack(*hold)
            ).ljust(CFG_SIZE, b"\0")


def trims(p: PortConfig) -> bool:
    """Whether any class of the port trims (it then gets the prio qdisc)."""
    return any(k.trim for k in (p.default_class, *p.classes.values()))


def _trim_fields(cfg: SwitchConfig, p: PortConfig, prio_major: int) -> bytes:
    from emu.switch import trim_tables as TT
    from emu.switch.trim import MRC_PORT, ROCE_PORT, UET_PORT, UET_PROTO

    dscps = (1 << 64) - 1 if cfg.trim_dscps is None else \
        sum(1 << d for d in cfg.trim_dscps if 0 <= d < 64)
    matched = set(cfg.match)
    roce = [pt for pt in (ROCE_PORT, MRC_PORT) if f"udp:{pt}" in matched] + [0, 0]
    ses, req = TT.uet_ses()
    ext_op, cas, ext_sizes = TT.uet_ext()
    return _CFG_TRIM.pack(
        p.trim_depth, dscps, cfg.trim_size or 0,
        cfg.trimmed_lasthop if p.host_facing else cfg.trimmed_dscp, *roce[:2],
        UET_PORT if f"udp:{UET_PORT}" in matched else 0,
        UET_PROTO if f"proto:{UET_PROTO}" in matched else 0, prio_major << 16,
        TT.roce_ext(), TT.uet_pds(), ses, req, ext_op, cas, ext_sizes)


def build_object(cache: Path = CACHE) -> Path:
    """Compile ``port.bpf.c`` once per source (by hash, :func:`emu.fabric.bpfobj.build_object`).
    Raises :class:`KernelPathError` without clang."""
    try:
        return bpfobj.build_object(SOURCE, cache)
    except BpfError as e:
        raise KernelPathError(str(e)) from e


def maps_of_prog(prog_id: int) -> dict[str, BpfMap]:
    try:
        return bpfobj.maps_of_prog(prog_id)
    except BpfError as e:
        raise KernelPathError(str(e)) from e


# ------------------------------------------------------------------ one port

#: while :func:`batched` runs: the tc commands that change something, queued for one
#: ``tc -batch`` (None: each runs at once)
_BATCH: list[tuple[str, ...]] | None = None


def _tc(*args: str, check: bool = True) -> str:
    """``tc`` in the daemon's own namespace (it runs inside the switch's); inside
    :func:`batched`, a checked change is queued instead (it prints nothing)."""
    if _BATCH is not None and check and args[:1] in (("qdisc",), ("filter",), ("class",)) \
            and args[1:2] in (("replace",), ("add",), ("change",)):
        _BATCH.append(args)
        return ""
    try:
        return bpfobj.tc(list(args), check=check)
    except BpfError as e:
        raise KernelPathError(str(e)) from e


@contextlib.contextmanager
def batched() -> Iterator[None]:
    """Queue the checked tc changes made inside and run them as one ``tc -batch`` at the
    end (KernelPathError naming the first that failed). Why: a tc process per command,
    five or more per port, was ~7 s of a 256-host leaf-spine's start (20 switches, 352
    ports). Reads (``show``) still run at once — they must not depend on what is
    queued."""
    global _BATCH
    if _BATCH is not None:  # nested: the outer one runs them
        yield
        return
    _BATCH = []
    try:
        yield
        cmds, _BATCH = _BATCH, None
        if cmds:
            _run_batch(cmds)
    finally:
        _BATCH = None


def _run_batch(cmds: list[tuple[str, ...]]) -> None:
    import shlex
    import subprocess

    text = "".join(" ".join(shlex.quote(a) for a in c) + "\n" for c in cmds)
    p = subprocess.run(["tc", "-batch", "-"], input=text, capture_output=True, text=True)
    if p.returncode != 0:
        err = (p.stderr or p.stdout).strip()
        line = next((int(w.split(":")[-1]) for w in err.split()
                     if w.startswith("-:") and w.split(":")[-1].isdigit()), 0)
        what = " ".join(cmds[line - 1]) if 0 < line <= len(cmds) else "a batched command"
        raise KernelPathError(f"tc {what}: {err.splitlines()[0] if err else p.returncode}")


def qdiscs() -> dict[str, list[dict[str, Any]]]:
    """Every port's qdiscs in this namespace (one ``tc -j qdisc show``), by interface."""
    out: dict[str, list[dict[str, Any]]] = {}
    for q in json.loads(_tc("-j", "qdisc", "show") or "[]"):
        out.setdefault(str(q.get("dev", "")), []).append(q)
    return out


def root_qdisc(listed: list[dict[str, Any]]) -> str | None:
    """The kind of a port's root qdisc among its qdiscs (as :func:`qdiscs` lists them),
    None for the default (noqueue/none)."""
    for q in listed:
        if q.get("root") and q.get("kind") not in ("noqueue", "pfifo_fast", "mq"):
            return str(q.get("kind"))
    return None


def remove_leftovers(ifnames: list[str]) -> int:
    """Remove what a SIGKILLed daemon's kernel path left on these ports — only ours: the
    egress filter with our priority and handle, a root qdisc with our handle. Returns
    how many ports had some. One listing of the namespace's qdiscs first: a port with
    neither clsact nor our root (every port of a fresh switch) needs no more."""
    n = 0
    listed = qdiscs()
    for ifname in ifnames:
        hit = False
        mine = listed.get(ifname, [])
        if any(q.get("kind") == "clsact" for q in mine):
            out = _tc("-j", "filter", "show", "dev", ifname, "egress", check=False) or "[]"
            if any(str(f.get("pref")) == TC_PRIO and (f.get("options") or {}).get("handle")
                   == TC_HANDLE for f in json.loads(out)):
                _tc("filter", "del", "dev", ifname, "egress", "prio", TC_PRIO, "handle",
                    TC_HANDLE, "bpf", check=False)
                hit = True
        if any(q.get("root") and q.get("handle") == ROOT_HANDLE for q in mine):
            _tc("qdisc", "del", "dev", ifname, "root", check=False)
            hit = True
        n += hit
    return n


def _filter_prog(ifname: str) -> int:
    """The id of our program on the port's egress hook (KernelPathError: none)."""
    prog = None
    for f in json.loads(_tc("-j", "filter", "show", "dev", ifname, "egress") or "[]"):
        prog = (f.get("options") or {}).get("prog", {}).get("id") or prog
    if prog is None:
        raise KernelPathError(f"port {ifname}: no BPF program after tc filter add")
    return int(prog)


def remove_stale_pins(pin_dir: str = PIN_DIR) -> int:
    """Unlink the program pins of switch daemons that are gone (a SIGKILLed one leaves
    its pin: the file keeps the program loaded). Returns how many."""
    n = 0
    try:
        names = os.listdir(pin_dir)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(PIN_PREFIX):
            continue
        pid = name[len(PIN_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(pin_dir, name))
                n += 1
    return n


class PortProgram:
    """The switch's one tc BPF program, on every kernel port.

    Loaded once, by tc with the first port (the verifier's pass, ~90 ms here, had been
    paid per port: 15 s of a 256-host leaf-spine's start), pinned in the bpffs while the
    daemon runs so that tc attaches the same program to the other ports
    (``object-pinned``); its maps are shared, each port's entries at its ifindex
    (:data:`PORT_SLOTS`). Where pinning fails (no bpffs), each port loads its own copy,
    as before, and says nothing is lost but time."""

    def __init__(self, obj: Path, pin_dir: str = PIN_DIR) -> None:
        self.obj = obj
        self.pin_dir = pin_dir
        self.pin: str | None = None
        self.slots: dict[str, int] = {}            # port → its entries in the maps
        self.maps: dict[str, BpfMap] = {}      # the shared program's (owned)
        self.own: dict[str, dict[str, BpfMap]] = {}  # per port, where nothing is pinned
        self.loads = 0

    def attach(self, ifname: str) -> dict[str, BpfMap]:
        """Attach the program to ``ifname``'s egress; its entries of the maps."""
        idx = socket.if_nametoindex(ifname)
        slot = self.slots.get(ifname)
        if slot is None:
            free = sorted(set(range(PORT_SLOTS)) - set(self.slots.values()))
            if not free:
                raise KernelPathError(f"port {ifname}: the program serves {PORT_SLOTS} "
                                      "ports at most")
            slot = self.slots[ifname] = free[0]
        base = ["filter", "replace", "dev", ifname, "egress", "prio", TC_PRIO, "handle",
                TC_HANDLE, "bpf"]
        if self.pin is not None:
            _tc(*base, "object-pinned", self.pin, "da")
            maps = self.maps
        else:
            _tc(*base, "da", "obj", str(self.obj), "sec", "tc")
            self.loads += 1
            prog = _filter_prog(ifname)
            maps = maps_of_prog(prog)
            if not self.maps and not self.own:  # the first: pin it for the others
                path = os.path.join(self.pin_dir, f"{PIN_PREFIX}{os.getpid()}-{prog}")
                try:
                    bpfobj.pin_prog(prog, path)
                    self.pin = path
                except BpfError:
                    pass
            if self.pin is not None:
                self.maps = maps
            else:
                self.own[ifname] = maps
        for name, size in (("emu_port_cfg", CFG_SIZE), ("emu_port_state", _STATE.size),
                           ("emu_port_pfc", _INGRESS.size), ("emu_port_slot", 4)):
            m = maps.get(name)
            if m is None or m.value_size != size or m.max_entries != PORT_SLOTS:
                raise KernelPathError(
                    f"map {name}: {f'{m.value_size} bytes x {m.max_entries}' if m else 'missing'}"
                    f", expected {size} x {PORT_SLOTS} (object and loader disagree)")
        views = {name: maps[name].at(slot)
                 for name in ("emu_port_cfg", "emu_port_state", "emu_port_pfc")}
        # a fresh start for the slot (a port detached before had it), then open it
        views["emu_port_state"].write(b"")
        views["emu_port_pfc"].write(b"")
        maps["emu_port_slot"].at(idx, indexed=False).write(struct.pack("<I", slot))
        return views

    def release(self, ifname: str) -> None:
        """A port detached (its filter gone): its slot is free again, and a copy of the
        program of its own goes with it."""
        self.slots.pop(ifname, None)
        for m in self.own.pop(ifname, {}).values():
            m.close()

    def close(self) -> None:
        """Unpin (the attached copies stay until their filters go) and close the maps."""
        if self.pin is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.pin)
            self.pin = None
        for m in self.maps.values():
            m.close()
        self.maps = {}
        for name in list(self.own):
            self.release(name)


class KernelPort:
    """One egress port served by tbf + the BPF virtual queue (see the module docstring)."""

    def __init__(self, ifname: str, mtu: int, program: PortProgram,
                 scale: float = 1.0) -> None:
        self.ifname = ifname
        self.mtu = mtu
        self.program = program
        self.scale = scale  # the cluster's time scale: tbf and the program run at rate/scale
        self.rate: int | None = None  # the fabric rate in force (None: no tbf)
        self.prio = False  # the prio qdisc for trimmed packets is under tbf
        #: a downstream PFC pause holding the port: when it began (ns, the programs'
        #: clock; 0: not held) and how long earlier holds lasted
        self.hold_start = self.held_ns = 0
        self._last: tuple[SwitchConfig, PortConfig] | None = None
        self.maps: dict[str, BpfMap] = {}
        self.made_clsact = False

    def attach(self, cfg: SwitchConfig, p: PortConfig,
               known: list[dict[str, Any]] | None = None) -> None:
        """Attach the program and configure the port; ``known``: its qdiscs as
        :func:`qdiscs` listed them (else read here)."""
        listed = known if known is not None else json.loads(
            _tc("-j", "qdisc", "show", "dev", self.ifname) or "[]")
        kind = root_qdisc(listed)
        if kind is not None:
            raise KernelPathError(f"port {self.ifname} already has a root qdisc ({kind})")
        self.made_clsact = not any(q.get("kind") == "clsact" for q in listed)
        _tc("qdisc", "replace", "dev", self.ifname, "clsact")
        self.maps = self.program.attach(self.ifname)
        self.configure(cfg, p)

    def configure(self, cfg: SwitchConfig, p: PortConfig) -> None:
        """Write the port's configuration (``p`` in fabric units); a changed rate changes
        tbf too, at the wall rate; a port that trims gets the prio qdisc under tbf (tbf
        keeps its own byte FIFO otherwise)."""
        want_prio = bool(p.rate) and trims(p)
        if p.rate != self.rate or want_prio != self.prio:
            if p.rate:
                if self.prio and not want_prio:  # tbf without a child drops everything
                    _tc("qdisc", "del", "dev", self.ifname, "root", check=False)
                self._tbf(p)
                if want_prio:
                    _tc("qdisc", "replace", "dev", self.ifname, "parent", f"{ROOT_HANDLE}1",
                        "handle", _PRIO, "htb", "default", "2")
                    for minor in ("1", "2"):
                        _tc("class", "replace", "dev", self.ifname, "parent", _PRIO,
                            "classid", f"{_PRIO}{minor}", "htb", "rate", _HTB_RATE, "ceil",
                            _HTB_RATE, "prio", str(int(minor) - 1), "quantum", "9000")
            elif self.rate:
                _tc("qdisc", "del", "dev", self.ifname, "root", check=False)
            self.rate, self.prio = p.rate, want_prio
        if want_prio:  # the bands' room (the program decides drops; this only holds them)
            for parent, handle, room in ((f"{_PRIO}1", _BAND_TRIM, p.trim_depth + (64 << 10)),
                                         (f"{_PRIO}2", _BAND_DATA, self._limit(p))):
                _tc("qdisc", "replace", "dev", self.ifname, "parent", parent, "handle", handle,
                    "bfifo", "limit", str(room))
        self._last = (cfg, p)
        self._write_config()

    def _write_config(self) -> None:
        assert self._last is not None
        cfg, p = self._last
        self.maps["emu_port_cfg"].write(pack_config(cfg, p, self.scale,
                                                    PRIO_MAJOR if self.prio else 0,
                                                    (self.hold_start, self.held_ns)))

    def _limit(self, p: PortConfig) -> int:
        """Bytes the real data queue may hold: the model decides drops, this only holds."""
        return p.depth + tbf_burst(self.mtu) + (64 << 10)

    def _tbf(self, p: PortConfig) -> None:
        """tbf at the port's wall rate, or, while a downstream pause holds the port, at a
        crawl with a one-frame bucket (a tbf change fills the bucket: at most one MTU still
        leaves, the frame a real port finishes on the wire). A tbf change with a limit
        gives tbf a new byte FIFO as its child (a trimming port's htb is grafted again by
        the caller); with another child it only sets the rate. The size table: the qdiscs
        charge a packet's length as it is when enqueued — without one they keep the length
        taken before the program ran, and a trimmed packet would take a whole packet's
        time on the wire."""
        rate, frames = (8, 1) if self.hold_start else \
            (wall_rate(p, self.scale) or 8, TBF_BURST_FRAMES)
        _tc("qdisc", "replace", "dev", self.ifname, "root", "handle", ROOT_HANDLE,
            "stab", "mtu", "2048", "tsize", "2048", "overhead", "0", "linklayer", "ethernet",
            "tbf", "rate", f"{rate}bit", "burst", str(tbf_burst(self.mtu, frames)),
            "limit", str(self._limit(p)))

    def vnow(self, now_ns: int) -> int:
        """The port's own clock (what the program's model runs on): the programs' clock
        less the time downstream pauses held the port."""
        held = self.held_ns
        if self.hold_start and now_ns > self.hold_start:
            held += now_ns - self.hold_start
        return max(0, now_ns - held)

    def hold(self, on: bool) -> bool:
        """A downstream PFC pause holds the port (``on``) or lets it go: tbf at a crawl
        (what is queued stays, :meth:`_tbf`) and the model's clock stopped; back at its
        rate. Returns whether anything changed. The whole port is held — its classes
        share one FIFO here — where 802.1Qbb holds only the paused priority."""
        if on == bool(self.hold_start) or self._last is None:
            return False
        now = ktime_ns()
        if on:
            self.hold_start = now
        else:
            self.held_ns += max(0, now - self.hold_start)
            self.hold_start = 0
        if self.rate:
            self._tbf(self._last[1])
        self._write_config()
        return True

    def state(self) -> dict[str, int]:
        v = _STATE.unpack(self.maps["emu_port_state"].read(lock=True))
        return dict(zip(STATE_FIELDS, v[2:], strict=True))

    def backlog(self, p: PortConfig, s: dict[str, int] | None = None,
                now_ns: int | None = None) -> int:
        """Data bytes the program's virtual queue holds now (trimmed packets queue apart),
        from its clock (``bpf_ktime_get_ns``: CLOCK_MONOTONIC, wall) and the wall rate."""
        s = self.state() if s is None else s
        now = self.vnow(ktime_ns() if now_ns is None else now_ns)
        return max(0, self._bytes_until(p, s["t_free"], now)
                   - self._bytes_until(p, s["t_prio_free"], now))

    def _bytes_until(self, p: PortConfig, t: int, now: int) -> int:
        """Bytes the port sends between ``now`` and ``t`` (ns, its own clock) at its wall
        rate: what the virtual queue holds that empties at ``t``."""
        rate = wall_rate(p, self.scale)
        return int(max(0, t - now) * rate // int(8e9)) if rate else 0

    def ingress(self) -> dict[int, list[int]]:
        """PFC: ingress ifindex -> per priority (0..7) when the latest lossless packet it
        sent into this queue departs (ns, the program's clock; 0: none yet)."""
        v = _INGRESS.unpack(self.maps["emu_port_pfc"].read())
        idx, t = v[:INGRESS_SLOTS], v[INGRESS_SLOTS:]
        return {i: list(t[k * PFC_PRIOS:(k + 1) * PFC_PRIOS])
                for k, i in enumerate(idx) if i}

    def counters(self, p: PortConfig, qdisc: bool = False) -> dict[str, Any]:
        """The port's counters under the user-space pipeline's names (those the kernel
        path cannot have stay 0); ``qdisc``: also tbf's own drops and backlog (a
        ``tc -s`` call — on request, not every series period)."""
        s = self.state()
        # the backlog in bytes from the program's own clock (bpf_ktime_get_ns is
        # CLOCK_MONOTONIC: wall; less the time downstream pauses held the port) and the
        # rate it drains at (wall)
        real = ktime_ns()
        now = self.vnow(real)
        depth = self._bytes_until(p, s["t_free"], now)
        out: dict[str, Any] = {
            "enqueued": s["enqueued"], "bytes": s["bytes"], "released": s["enqueued"],
            "marked": s["marked"], "trimmed": s["trimmed"], "dropped_tail": s["dropped_tail"],
            "dropped_random": s["dropped_random"], "dropped_trim": s["dropped_trim"],
            "trim_failed": s["trim_failed"],
            # fabric seconds a downstream PFC pause held the port (802.1Qbb received)
            "held_time": round((real - now) / 1e9 / self.scale, 9), "xoff": 0, "xon": 0,
            "paused_time": 0.0, "depth": int(depth), "max_depth": s["max_depth"],
            "late": 0, "late_s": 0.0, "other": s["other"], "seen": s["seen"],
            "not_ip": s["not_ip"]}
        if qdisc and self.rate:
            for q in json.loads(_tc("-s", "-j", "qdisc", "show", "dev", self.ifname) or "[]"):
                if q.get("kind") == "tbf":
                    out["qdisc_dropped"] = int(q.get("drops", 0))
                    out["released"] = max(0, s["enqueued"] - int(q.get("qlen", 0)))
        return out

    def detach(self) -> None:
        self.maps = {}
        self.program.release(self.ifname)
        _tc("filter", "del", "dev", self.ifname, "egress", "prio", TC_PRIO, "handle", TC_HANDLE,
            "bpf", check=False)
        if self.rate:
            _tc("qdisc", "del", "dev", self.ifname, "root", check=False)
        self.prio = False
        if self.made_clsact:
            _tc("qdisc", "del", "dev", self.ifname, "clsact", check=False)
        self.rate = None

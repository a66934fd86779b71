# SPDX-License-Identifier: GPL-2.0-only
"""Capture links inside their namespaces and merge them into one pcapng named by link.

Mechanism: one ``AF_PACKET``/``SOCK_RAW`` socket per captured interface, opened
*inside* that interface's namespace (a short-lived thread ``setns``-es into the
namespace, creates and binds the socket, and exits; a socket stays in the
namespace it was created in), all read by one ``selectors`` loop in the calling
thread that writes a single pcapng through :class:`emu.wire.pcapio.PcapngWriter`.
Why not one ``dumpcap`` per namespace and a merge: no helper processes to reap
on Ctrl-C, one file written as packets arrive (readable up to the last flush
even if we are killed), interface names set once, and — the deciding point —
``PACKET_AUXDATA`` tells us which packets carry a not-yet-computed checksum
(``TP_STATUS_CSUMNOTREADY``, veth's checksum offload on locally sent packets),
so we complete UDP/TCP checksums in the capture and Wireshark shows them Good,
which a dumpcap capture of an offloading veth does not.

* Timestamps are the kernel's (``SO_TIMESTAMPNS``, nanosecond pcapng), kept as
  integer nanoseconds (a float of seconds since 1970 steps by ~238 ns).
* Fabric time (DESIGN.md, Fabric time): given a cluster's clock at a scale ≠ 1, every
  stamp is written as fabric time, :class:`FabricStamps`: nanoseconds since the
  cluster's fabric epoch (``emu up``), wall intervals divided by the scale, so
  Wireshark's deltas and I/O graphs show the fabric's rates; the section and
  interface comments say so, with the scale and the epoch. At scale 1 the stamps
  are the kernel's, unchanged, and no comment is added.
* Merge: each loop round drains every readable socket until ``EAGAIN`` and writes
  the round's packets sorted by kernel timestamp, then flushes the file.
* Directions and duplicates: a packet socket bound to one interface sees both
  directions on it (``PACKET_OUTGOING`` and incoming), each packet once. Capture
  each link **once, on its ``a`` end**, with the interface named after the link
  (:func:`targets_for` does this); capturing both ends of a link would record
  every packet twice, so :func:`capture` refuses two targets with the same
  display name.
* GSO/GRO super-packets are recorded as the kernel holds them (one frame larger
  than the MTU), as tcpdump does; their checksums are left alone.
* Stops after ``duration`` seconds, after ``count`` packets, on SIGINT/SIGTERM
  (when run in the main thread), or when ``stop`` (a ``threading.Event``) is set;
  then drains what is queued, flushes, and returns per-interface counts
  (written, kernel drops from ``PACKET_STATISTICS``, checksums completed).
* ``bpf``: a capture filter in pcap syntax, compiled with libpcap
  (``pcap_compile`` through ctypes) and attached with ``SO_ATTACH_FILTER``.

Command line: ``python -m emu.fabric.capture -w out.pcapng [--duration S]
[--count N] [--filter BPF] NS:IFNAME[=NAME] ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import errno
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from emu.fabricclock import FabricClock
from emu.outpath import cannot_write
from emu.wire.pcapio import LINKTYPE_ETHERNET, PcapngWriter

#: packets read from one socket per loop round (see ``drain`` in :func:`capture`)
DRAIN_READS = 1024

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_AUXDATA = 8
PACKET_STATISTICS = 6
PACKET_OUTGOING = 4
TP_STATUS_CSUMNOTREADY = 1 << 3
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
SO_ATTACH_FILTER = 26
_CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
_libc = ctypes.CDLL(None, use_errno=True)
_AUX = struct.Struct("=IIIHHHH")
_TS = struct.Struct("=qq")


class CaptureFailed(RuntimeError):
    """A capture that could not be set up (missing namespace, interface, bad filter)."""


@dataclass(frozen=True)
class Target:
    """Capture ``ifname`` in namespace ``ns``; call it ``name`` in the pcapng."""

    ns: str
    ifname: str
    name: str


@dataclass
class IfaceStats:
    packets: int = 0
    outgoing: int = 0
    kernel_drops: int = 0
    checksums_completed: int = 0
    link_down_events: int = 0


@dataclass(frozen=True)
class FabricStamps:
    """Kernel receive stamps (``CLOCK_REALTIME`` ns) as fabric time (ns since the
    cluster's fabric epoch), for a capture at time scale ``scale``.

    Why: the emulated fabric runs ``scale`` times slower than the wall clock, so a
    capture stamped on the wall clock shows 400 Gb/s packets ``scale`` times too far
    apart. The epoch is a ``CLOCK_MONOTONIC`` time (the plan's) and the stamps are
    ``CLOCK_REALTIME``: one pair of readings of the two clocks, taken together
    (:meth:`now`, as :meth:`emu.fabricclock.FabricClock.stamp` does for the NIC
    daemons), gives the ``CLOCK_REALTIME`` of the epoch, ``realtime_epoch_ns``; then
    ``fabric = (stamp - realtime_epoch_ns) / scale``. Integers throughout, so a
    nanosecond gap survives (84 ns is 4 KiB at 400 Gb/s). Should the wall clock be
    stepped during the capture, its stamps move with it (as tcpdump's would)."""

    scale: float
    realtime_epoch_ns: int
    #: the clock's epoch as given (CLOCK_MONOTONIC seconds), for the comments
    epoch: float = 0.0

    @classmethod
    def now(cls, clock: FabricClock) -> FabricStamps:
        """The conversion for ``clock``, from one pair of clock readings taken now."""
        real = time.time_ns()
        mono = time.monotonic_ns()
        return cls(clock.scale, real - (mono - round(clock.epoch * 1e9)), clock.epoch)

    def fabric_ns(self, realtime_ns: int) -> int:
        """A ``CLOCK_REALTIME`` stamp (ns) as fabric ns since the epoch (≥ 0: a stamp
        before the epoch, which a capture cannot hold, is written as 0)."""
        return max(0, round((realtime_ns - self.realtime_epoch_ns) / self.scale))

    def comments(self) -> list[str]:
        """The pcapng section comments that say what the timestamps mean: one for
        people, one ``key=value`` line for programs."""
        epoch_utc = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(
            self.realtime_epoch_ns // 1_000_000_000))
        frac = self.realtime_epoch_ns % 1_000_000_000
        return [
            f"Timestamps are FABRIC time at time scale {self.scale:g}: the emulated fabric "
            f"runs {self.scale:g} times slower than the wall clock, and every interval "
            f"here is the fabric's (the wall interval / {self.scale:g}), so time deltas "
            "and I/O graphs show the fabric's rates. A timestamp is seconds since the "
            "cluster's fabric epoch (fabric time 0 = when emu up made its plan), the "
            "same fabric time as the cluster's event log and the NIC daemons' traces; "
            "read as a date it is 1970-01-01 plus that, not a wall date. The fabric "
            f"epoch was CLOCK_MONOTONIC {self.epoch:.9f} s = {epoch_utc}.{frac:09d} UTC "
            "(wall clock). Kernel stamps (CLOCK_REALTIME) were converted with one pair "
            "of clock readings at the capture's start: fabric = (stamp - epoch) / scale.",
            f"emu-time: units=fabric scale={self.scale:g} epoch_monotonic={self.epoch:.9f} "
            f"epoch_realtime_ns={self.realtime_epoch_ns} resolution_ns=1",
        ]

    def interface_comment(self) -> str:
        return (f"timestamps: fabric time (ns since the fabric epoch), time scale "
                f"{self.scale:g}")


def stamps_for(clock: FabricClock | None) -> FabricStamps | None:
    """The conversion a capture on ``clock`` needs (None at real time: at scale 1 the
    kernel's stamps are written as they are)."""
    if clock is None or clock.scale == 1:
        return None
    return FabricStamps.now(clock)


@dataclass
class CaptureResult:
    path: str
    stats: dict[str, IfaceStats] = field(default_factory=dict)
    stopped_by: str = ""
    elapsed_s: float = 0.0
    #: the cluster's time scale (1: the stamps are wall time)
    scale: float = 1.0

    @property
    def counts(self) -> dict[str, int]:
        return {k: v.packets for k, v in self.stats.items()}

    @property
    def total(self) -> int:
        return sum(v.packets for v in self.stats.values())

    @property
    def kernel_drops(self) -> int:
        return sum(v.kernel_drops for v in self.stats.values())

    def report(self) -> str:
        took = f"{self.elapsed_s:.2f}s"
        if self.scale != 1:
            took = (f"{self.elapsed_s / self.scale:.4g} fabric s ({self.elapsed_s:.2f} s of "
                    f"wall time at time scale {self.scale:g}; timestamps are fabric time)")
        lines = [f"{self.path}: {self.total} packets in {took} (stopped by {self.stopped_by})"]
        for name, s in self.stats.items():
            lines.append(f"  {name}: {s.packets} packets ({s.outgoing} out, "
                         f"{s.packets - s.outgoing} in), kernel drops {s.kernel_drops}, "
                         f"checksums completed {s.checksums_completed}")
        if self.kernel_drops:
            lines.append(f"warning: the capture is INCOMPLETE: the kernel dropped "
                         f"{self.kernel_drops} packet(s) that it could not read in time "
                         f"(these links carried more than one Python reader keeps up "
                         f"with); capture fewer links, or use --filter")
        return "\n".join(lines)


# --------------------------------------------------------------------------- setup


def in_netns(ns: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a thread that has entered namespace ``ns``; return its result."""
    path = NETNS_DIR / ns
    if "/" in ns or not path.exists():
        raise CaptureFailed(f"network namespace {ns!r} does not exist")
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({ns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            box["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, name=f"setns-{ns}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _BpfProgram(ctypes.Structure):
    _fields_ = [("bf_len", ctypes.c_uint), ("bf_insns", ctypes.c_void_p)]


def compile_bpf(expr: str, snaplen: int = 262144) -> bytes:
    """Compile a pcap filter for Ethernet into classic BPF instructions (8 bytes each)."""
    name = ctypes.util.find_library("pcap")
    if not name:
        raise CaptureFailed("a capture filter needs libpcap, which is not installed")
    pcap = ctypes.CDLL(name)
    pcap.pcap_open_dead.restype = ctypes.c_void_p
    pcap.pcap_open_dead.argtypes = [ctypes.c_int, ctypes.c_int]
    pcap.pcap_compile.argtypes = [ctypes.c_void_p, ctypes.POINTER(_BpfProgram), ctypes.c_char_p,
                                  ctypes.c_int, ctypes.c_uint32]
    pcap.pcap_geterr.restype = ctypes.c_char_p
    pcap.pcap_geterr.argtypes = [ctypes.c_void_p]
    pcap.pcap_freecode.argtypes = [ctypes.POINTER(_BpfProgram)]
    pcap.pcap_close.argtypes = [ctypes.c_void_p]
    p = pcap.pcap_open_dead(LINKTYPE_ETHERNET, snaplen)
    prog = _BpfProgram()
    try:
        if pcap.pcap_compile(p, ctypes.byref(prog), expr.encode(), 1, 0xFFFFFFFF) != 0:
            raise CaptureFailed(f"bad capture filter {expr!r}: "
                                f"{pcap.pcap_geterr(p).decode(errors='replace')}")
        code = ctypes.string_at(prog.bf_insns, prog.bf_len * 8)
        pcap.pcap_freecode(ctypes.byref(prog))
        return code
    finally:
        pcap.pcap_close(p)


def open_packet_socket(ns: str, ifname: str, bpf_code: bytes | None = None,
                       rcvbuf: int = 32 << 20) -> socket.socket:
    """An AF_PACKET socket bound to ``ifname`` inside ``ns`` (timestamps + auxdata on)."""

    def make() -> socket.socket:
        try:
            socket.if_nametoindex(ifname)
        except OSError:
            raise CaptureFailed(f"{ns}: no interface {ifname!r}") from None
        # protocol 0: receives nothing until bound, so no other interface leaks in
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            if bpf_code is not None:
                buf = ctypes.create_string_buffer(bpf_code)
                fprog = _SockFprog(len(bpf_code) // 8, ctypes.addressof(buf))
                s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(fprog))
            s.bind((ifname, ETH_P_ALL))
            s.setblocking(False)
        except BaseException:
            s.close()
            raise
        return s

    return in_netns(ns, make)


# --------------------------------------------------------------------------- checksums


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def complete_checksum(frame: bytes) -> bytes | None:
    """``frame`` with its UDP/TCP checksum computed, or None when it cannot be done."""
    off = 12
    etype = struct.unpack_from("!H", frame, off)[0] if len(frame) >= 14 else 0
    off += 2
    while etype in (0x8100, 0x88A8) and len(frame) >= off + 4:
        etype = struct.unpack_from("!H", frame, off + 2)[0]
        off += 4
    if etype == 0x0800 and len(frame) >= off + 20:
        ihl = (frame[off] & 0x0F) * 4
        total = struct.unpack_from("!H", frame, off + 2)[0]
        if struct.unpack_from("!H", frame, off + 6)[0] & 0x3FFF:
            return None  # a fragment
        proto = frame[off + 9]
        l4, end = off + ihl, off + total
        pseudo = frame[off + 12:off + 20] + struct.pack("!BBH", 0, proto, total - ihl)
    elif etype == 0x86DD and len(frame) >= off + 40:
        plen = struct.unpack_from("!H", frame, off + 4)[0]
        nh, l4, end = frame[off + 6], off + 40, off + 40 + plen
        dst = frame[off + 24:off + 40]
        while nh in (0, 43, 60) and len(frame) >= l4 + 8:
            if nh == 43 and frame[l4 + 2] == 4 and len(frame) >= l4 + 24:
                dst = frame[l4 + 8:l4 + 24]  # SRH: segment list[0] is the final destination
            nh, l4 = frame[l4], l4 + (frame[l4 + 1] + 1) * 8
        proto = nh
        pseudo = frame[off + 8:off + 24] + dst + struct.pack("!IxxxB", end - l4, proto)
    else:
        return None
    if end != len(frame) or l4 >= end:
        return None  # truncated, padded or a GSO super-packet
    if proto == 17:
        pos = l4 + 6
    elif proto == 6:
        pos = l4 + 16
    else:
        return None
    if end < pos + 2:
        return None
    seg = bytearray(frame[l4:end])
    seg[pos - l4:pos - l4 + 2] = b"\0\0"
    c = (~_csum(pseudo + bytes(seg))) & 0xFFFF
    if proto == 17 and c == 0:
        c = 0xFFFF
    out = bytearray(frame)
    struct.pack_into("!H", out, pos, c)
    return bytes(out)


# --------------------------------------------------------------------------- the loop


@contextlib.contextmanager
def _writing(path: str) -> Iterator[None]:
    """A failed write of the capture file (full disk, no such directory) as one line:
    the command that captures reports it like any CaptureFailed, not as a traceback."""
    try:
        yield
    except OSError as e:
        raise CaptureFailed(cannot_write(path, e)) from None


def capture(targets: Iterable[Target], out: str | os.PathLike[str] | BinaryIO, *,
            duration: float | None = None, count: int | None = None, bpf: str | None = None,
            stop: threading.Event | None = None, snaplen: int = 262144,
            on_ready: Callable[[], None] | None = None,
            handle_signals: bool = True, clock: FabricClock | None = None,
            comments: Iterable[str] = ()) -> CaptureResult:
    """Capture ``targets`` into one pcapng at ``out`` until duration/count/signal/stop.

    ``on_ready`` is called once every socket is open (packets sent after it are
    captured). SIGINT and SIGTERM stop the capture cleanly when called from the
    main thread with ``handle_signals``. ``duration`` is wall seconds (the caller
    converts a fabric duration). ``clock``: the cluster's fabric clock; at a scale
    ≠ 1 the timestamps are written as fabric time (:class:`FabricStamps`) and the
    comments say so. ``comments``: more section comments (what was captured).
    """
    tlist = list(targets)
    if not tlist:
        raise CaptureFailed("nothing to capture")
    names = [t.name for t in tlist]
    if len(set(names)) != len(names):
        raise CaptureFailed(f"two capture targets share a name: {names}")
    code = compile_bpf(bpf, snaplen) if bpf else None
    socks: list[tuple[socket.socket, Target]] = []
    own_file = not hasattr(out, "write")
    path = str(out) if own_file else getattr(out, "name", "<stream>")
    with _writing(path):
        f: BinaryIO = open(out, "wb") if own_file else out  # type: ignore[arg-type,assignment]
    sel = selectors.DefaultSelector()
    rsock = wsock = None
    old_handlers: dict[int, Any] = {}
    old_wakeup = -1
    result = CaptureResult(path=str(path), scale=1.0 if clock is None else clock.scale)
    stopped: list[str] = []
    stamps = stamps_for(clock)
    try:
        for t in tlist:
            socks.append((open_packet_socket(t.ns, t.ifname, code), t))
        with _writing(path):
            writer = PcapngWriter(f, [*comments, *(stamps.comments() if stamps else [])],
                                  application="emu capture" if stamps else None)
            for t in tlist:  # every one named, even if quiet
                writer.interface(t.name, LINKTYPE_ETHERNET,
                                 [stamps.interface_comment()] if stamps else [])
                result.stats[t.name] = IfaceStats()
            f.flush()
        for s, t in socks:
            sel.register(s, selectors.EVENT_READ, t)
        if handle_signals and threading.current_thread() is threading.main_thread():
            rsock, wsock = socket.socketpair()
            rsock.setblocking(False)
            wsock.setblocking(False)
            sel.register(rsock, selectors.EVENT_READ, None)

            def on_signal(signum: int, _frame: object) -> None:
                stopped.append(signal.Signals(signum).name)

            old_wakeup = signal.set_wakeup_fd(wsock.fileno(), warn_on_full_buffer=False)
            for sig in (signal.SIGINT, signal.SIGTERM):
                old_handlers[sig] = signal.signal(sig, on_signal)
        t0 = time.monotonic()
        deadline = None if duration is None else t0 + duration
        if on_ready is not None:
            on_ready()
        bufsize = max(snaplen, 65536 + 256)
        remaining = count

        def drain(s: socket.socket, t: Target, batch: list,
                  until: int | None = None) -> bool:
            """Read what ``s`` holds; True if it may hold more (DRAIN_READS were read).
            ``until``: stop after the first packet the kernel stamped later (the rest
            arrived after the capture was told to stop)."""
            nonlocal remaining
            st = result.stats[t.name]
            # at most DRAIN_READS a call: a link busier than this loop can read never
            # runs dry, and the duration (and the other sockets) must still be served
            for _ in range(DRAIN_READS):
                if remaining is not None and remaining <= 0:
                    return False
                try:
                    data, anc, flags, addr = s.recvmsg(bufsize, 256)
                except (BlockingIOError, InterruptedError):
                    return False
                except OSError as e:
                    # A link taken down mid-capture (emu link … down) reports ENETDOWN
                    # once; the socket stays bound and resumes when the link is up.
                    if e.errno in (errno.ENETDOWN, errno.ENXIO):
                        st.link_down_events += 1
                        return False
                    raise
                ts: int | None = None  # CLOCK_REALTIME ns
                status = 0
                orig = len(data)
                for level, typ, val in anc:
                    if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
                        sec, nsec = _TS.unpack_from(val)
                        ts = sec * 1_000_000_000 + nsec
                    elif level == SOL_PACKET and typ == PACKET_AUXDATA:
                        status, orig = _AUX.unpack_from(val)[:2]
                if ts is None:
                    ts = time.time_ns()
                if status & TP_STATUS_CSUMNOTREADY:
                    fixed = complete_checksum(data)
                    if fixed is not None:
                        data = fixed
                        st.checksums_completed += 1
                st.packets += 1
                if addr[2] == PACKET_OUTGOING:
                    st.outgoing += 1
                batch.append((ts, t.name, data, max(orig, len(data))))
                if remaining is not None:
                    remaining -= 1
                if until is not None and ts > until:
                    return False
            return True

        def flush_batch(batch: list) -> None:
            batch.sort(key=lambda r: r[0])
            with _writing(path):
                for ts, name, data, orig in batch:
                    writer.write(data, 0.0, name, LINKTYPE_ETHERNET, orig,
                                 time_ns=stamps.fabric_ns(ts) if stamps else ts)
                f.flush()

        while True:
            if stopped:
                result.stopped_by = stopped[0]
                break
            if stop is not None and stop.is_set():
                result.stopped_by = "stop"
                break
            if remaining is not None and remaining <= 0:
                result.stopped_by = "count"
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                result.stopped_by = "duration"
                break
            timeout = 0.2 if deadline is None else min(0.2, deadline - now)
            batch: list = []
            for key, _ in sel.select(timeout):
                if key.data is None:
                    with contextlib.suppress(OSError):
                        while rsock.recv(512):  # type: ignore[union-attr]
                            pass
                    continue
                drain(key.fileobj, key.data, batch)  # type: ignore[arg-type]
            if batch:
                flush_batch(batch)
        # final drain: every packet the kernel queued before we stopped — a socket is
        # done at EAGAIN or at its first packet stamped after the stop (a busy link
        # keeps queueing, and a capture must end when told; what it had queued is
        # bounded by its buffer, so this ends even under a flood)
        stop_at = time.time_ns()
        pending = list(socks)
        while pending:
            batch = []
            pending = [(s, t) for s, t in pending if drain(s, t, batch, stop_at)]
            if batch:
                flush_batch(batch)
        result.elapsed_s = time.monotonic() - t0
        for s, t in socks:
            with contextlib.suppress(OSError):
                _pk, drops = struct.unpack("=II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
                result.stats[t.name].kernel_drops = drops
        if own_file:
            with _writing(path):
                f.close()
        return result
    finally:
        for sig, h in old_handlers.items():
            signal.signal(sig, h)
        if rsock is not None:
            signal.set_wakeup_fd(old_wakeup)
            rsock.close()
            wsock.close()  # type: ignore[union-attr]
        sel.close()
        for s, _ in socks:
            s.close()
        if own_file:
            with contextlib.suppress(OSError):
                f.close()  # closed above unless a write failed, which _writing reported
        else:
            f.flush()


# --------------------------------------------------------------------------- model glue


def targets_for(topology: Any, which: str = "all", cluster: str | None = None) -> list[Target]:
    """Capture targets for ``all`` links, one link (``h1-leaf1`` / ``h1:leaf1``) or a node.

    Each link is captured once, on its ``a`` end, and named after the link.
    """
    cl = cluster or topology.name
    if which == "all":
        links = list(topology.links)
    elif which in topology.nodes:
        links = topology.links_of(which)
    else:
        links = [topology.link(which)]
    return [Target(f"{cl}-{lk.a.node}", lk.a.ifname, lk.name) for lk in links]


def parse_target(spec: str) -> Target:
    """``NS:IFNAME`` or ``NS:IFNAME=NAME`` (name defaults to ``NS:IFNAME``)."""
    where, _, name = spec.partition("=")
    ns, sep, ifname = where.partition(":")
    if not sep or not ns or not ifname:
        raise argparse.ArgumentTypeError(f"bad target {spec!r}: expected NS:IFNAME[=NAME]")
    return Target(ns, ifname, name or where)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emu.fabric.capture",
                                 description="capture interfaces in namespaces into one pcapng")
    ap.add_argument("-w", "--write", required=True, help="output pcapng")
    ap.add_argument("--duration", type=float)
    ap.add_argument("--count", type=int)
    ap.add_argument("--filter", help="capture filter (pcap syntax)")
    ap.add_argument("targets", nargs="+", type=parse_target, metavar="NS:IFNAME[=NAME]")
    a = ap.parse_args(argv)
    try:
        res = capture(a.targets, a.write, duration=a.duration, count=a.count, bpf=a.filter,
                      on_ready=lambda: print("capturing", flush=True, file=sys.stderr))
    except (CaptureFailed, OSError) as e:
        print(f"capture: {e}", file=sys.stderr)
        return 1
    print(res.report(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

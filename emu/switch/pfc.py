# SPDX-License-Identifier: GPL-2.0-only
"""IEEE 802.1Qbb priority flow control (PFC) frames: build, parse, send, and honour them.

Why real PFC frames: the pause a lossless class needs must reach whoever feeds
the congested queue — a host's NIC daemon, a test sender or an upstream
switch — through the cable it arrives on, as on real hardware, and a capture
must show it (Wireshark decodes ethertype 0x8808 opcode 0x0101 as "MAC
Control / Class Based Flow Control"). The switch daemon sends one out of each
ingress port that feeds a paused queue; :class:`PauseListener` on the other
end tracks which priorities are paused.

Frame (60 bytes, no FCS on veth)::

    dst 01:80:c2:00:00:01 | src | 0x8808 | opcode 0x0101 | class-enable vector u16
    | 8 × quanta u16 (priority 0..7) | zero padding

A quantum is 512 bit times of the link; emu's links have emulated rates, so
both ends agree on ``quantum`` seconds (default 512 ns: 1 Gb/s). Quanta 0
for an enabled priority means "resume now" (XON). emu classes map to PFC
priorities as ``cls % 8`` (the default class map, DSCP >> 3, gives 0..7).
"""

from __future__ import annotations

import contextlib
import fcntl
import select
import socket
import struct
import time

from emu.fabric import netns

ETH_P_PAUSE = 0x8808
PFC_OPCODE = 0x0101
PFC_DST = bytes.fromhex("0180c2000001")
DEFAULT_QUANTUM = 512 / 1e9
MAX_QUANTA = 0xFFFF
SIOCGIFHWADDR = 0x8927
_BODY = struct.Struct("!HH8H")


def build(src_mac: bytes, quanta: dict[int, int]) -> bytes:
    """A PFC frame: ``quanta`` maps priority (0..7) to pause quanta (0 = resume)."""
    vec = 0
    q = [0] * 8
    for prio, n in quanta.items():
        if not 0 <= prio < 8:
            raise ValueError(f"PFC priority {prio} is not 0..7")
        if not 0 <= n <= MAX_QUANTA:
            raise ValueError(f"PFC quanta {n} is not 0..65535")
        vec |= 1 << prio
        q[prio] = n
    frame = PFC_DST + src_mac + struct.pack("!H", ETH_P_PAUSE) + _BODY.pack(PFC_OPCODE, vec, *q)
    return frame + b"\0" * (60 - len(frame))


def parse(frame: bytes | bytearray | memoryview) -> dict[int, int] | None:
    """Priority -> quanta of the enabled priorities, or None if not a PFC frame."""
    if len(frame) < 14 + _BODY.size or struct.unpack_from("!H", frame, 12)[0] != ETH_P_PAUSE:
        return None
    op, vec, *q = _BODY.unpack_from(frame, 14)
    if op != PFC_OPCODE:
        return None
    return {p: q[p] for p in range(8) if vec >> p & 1}


def mac_of(ifname: str) -> bytes:
    """The interface's MAC address in the namespace this thread is in.

    An ioctl, not ``/sys/class/net``: sysfs shows the namespace it was mounted
    in, not the one a ``setns``-ed thread is in.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        res = fcntl.ioctl(s.fileno(), SIOCGIFHWADDR, struct.pack("256s", ifname.encode()[:15]))
    return res[18:24]


class PfcSender:
    """Sends PFC frames out of interfaces of the current namespace (one AF_PACKET socket)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self._macs: dict[str, bytes] = {}
        self.sent = 0

    def send(self, ifname: str, quanta: dict[int, int]) -> None:
        mac = self._macs.get(ifname)
        if mac is None:
            mac = self._macs[ifname] = mac_of(ifname)
        self.sock.sendto(build(mac, quanta), (ifname, ETH_P_PAUSE))
        self.sent += 1

    def close(self) -> None:
        self.sock.close()


class PauseListener:
    """Tracks which priorities the peer has paused on one interface.

    Open it inside a namespace (``ns``) or the current one. Call :meth:`poll`
    (or :meth:`wait_until_resumed`) from the sending loop: it drains received
    PFC frames; ``paused(prio)`` says whether to hold that priority now. A
    pause expires after its quanta unless refreshed; quanta 0 resumes at once.
    Counts frames, XOFF/XON frames and total paused time per priority.
    """

    def __init__(self, ifname: str, ns: str | None = None,
                 quantum: float = DEFAULT_QUANTUM) -> None:
        self.ifname = ifname
        self.quantum = quantum
        ctx = netns.entered(ns) if ns else contextlib.nullcontext()
        with ctx:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                      socket.htons(ETH_P_PAUSE))
            self.sock.bind((ifname, ETH_P_PAUSE))
        self.sock.setblocking(False)
        self.until = [0.0] * 8
        self._since: list[float | None] = [None] * 8
        self.paused_time = [0.0] * 8
        self.frames = self.xoff = self.xon = 0
        self.log: list[tuple[float, int, int]] = []   # (time, prio, quanta), bounded

    def fileno(self) -> int:
        return self.sock.fileno()

    def poll(self, now: float | None = None) -> None:
        """Drain PFC frames received so far and update the paused priorities."""
        now = time.monotonic() if now is None else now
        self._expire(now)
        while True:
            try:
                frame = self.sock.recv(256)
            except BlockingIOError:
                break
            q = parse(frame)
            if q is None:
                continue
            self.frames += 1
            for prio, n in q.items():
                if len(self.log) < 100_000:
                    self.log.append((now, prio, n))
                if n:
                    self.xoff += 1
                    self.until[prio] = now + n * self.quantum
                    if self._since[prio] is None:
                        self._since[prio] = now
                else:
                    self.xon += 1
                    self.until[prio] = now
                    self._end(prio, now)

    def _expire(self, now: float) -> None:
        for p in range(8):
            if self._since[p] is not None and self.until[p] <= now:
                self._end(p, self.until[p])

    def _end(self, prio: int, t: float) -> None:
        s = self._since[prio]
        if s is not None:
            self.paused_time[prio] += max(0.0, t - s)
            self._since[prio] = None

    def paused(self, prio: int, now: float | None = None) -> bool:
        """Whether ``prio`` is paused now (call :meth:`poll` first to see new frames)."""
        now = time.monotonic() if now is None else now
        return self.until[prio] > now

    def wait_until_resumed(self, prio: int, timeout: float) -> bool:
        """Block while ``prio`` is paused (at most ``timeout`` s); True if it is not paused."""
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            self.poll(now)
            if not self.paused(prio, now):
                return True
            if now >= deadline:
                return False
            select.select([self.sock], [], [], min(deadline, self.until[prio]) - now)

    def close(self) -> None:
        self.sock.close()

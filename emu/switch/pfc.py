# SPDX-License-Identifier: GPL-2.0-only
"""IEEE 802.1Qbb priority flow control (PFC) frames: build, parse, send, and honour them.

Why real PFC frames: the pause a lossless class needs must reach whoever feeds
the congested queue — a host's NIC daemon, a test sender or an upstream
switch — through the cable it arrives on, as on real hardware, and a capture
must show it (Wireshark decodes ethertype 0x8808 opcode 0x0101 as "MAC
Control / Class Based Flow Control"). The switch daemon sends one out of each
ingress port that feeds a paused queue; :class:`PauseListener` on the other
end tracks which priorities are paused.

The frame format and the pause bookkeeping live in :mod:`emu.wire.pfc`
(shared with the NIC daemon, which must not import this module's pyroute2);
``build``/``parse`` and the constants are re-exported here. emu classes map to
PFC priorities as ``cls % 8`` (the default class map, DSCP >> 3, gives 0..7).
"""

from __future__ import annotations

import contextlib
import fcntl
import select
import socket
import struct

from emu.fabric import netns
from emu.fabricclock import FabricClock
from emu.wire.pfc import (  # noqa: F401 - the frame format, re-exported for the switch
    DEFAULT_QUANTUM,
    ETH_P_PAUSE,
    MAX_QUANTA,
    PFC_DST,
    PFC_OPCODE,
    PauseState,
    build,
    parse,
)

SIOCGIFHWADDR = 0x8927


def mac_of(ifname: str) -> bytes:
    """The interface's MAC address in the namespace this thread is in.

    An ioctl, not ``/sys/class/net``: sysfs shows the namespace it was mounted
    in, not the one a ``setns``-ed thread is in.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        res = fcntl.ioctl(s.fileno(), SIOCGIFHWADDR, struct.pack("256s", ifname.encode()[:15]))
    return res[18:24]


def hold_quanta(refresh: float, quantum: float) -> int:
    """The quanta an XOFF carries: two refresh periods (one refresh may be lost), as
    many as the frame holds at most."""
    return min(MAX_QUANTA, int(2 * refresh / quantum) + 1)


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
    PFC frames; ``paused(prio)`` says whether to hold that priority now. The
    bookkeeping (expiry, refresh, XOFF/XON and paused-time counts) is
    :class:`emu.wire.pfc.PauseState`, the NIC daemon's too; :attr:`log` keeps
    ``(time, priority, quanta)`` of what arrived (bounded). Times are ``clock``'s: the
    quantum is fabric seconds, as the switch that sends the frames counts it (default:
    real time).
    """

    def __init__(self, ifname: str, ns: str | None = None,
                 quantum: float = DEFAULT_QUANTUM, clock: FabricClock | None = None) -> None:
        self.ifname = ifname
        self.clock = clock if clock is not None else FabricClock()
        ctx = netns.entered(ns) if ns else contextlib.nullcontext()
        with ctx:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                      socket.htons(ETH_P_PAUSE))
            self.sock.bind((ifname, ETH_P_PAUSE))
        self.sock.setblocking(False)
        self.state = PauseState(quantum)
        self.log: list[tuple[float, int, int]] = []   # (time, prio, quanta), bounded

    @property
    def xoff(self) -> int:
        return self.state.xoff

    @property
    def xon(self) -> int:
        return self.state.xon

    @property
    def frames(self) -> int:
        return self.state.frames

    def fileno(self) -> int:
        return self.sock.fileno()

    def poll(self, now: float | None = None) -> None:
        """Drain PFC frames received so far and update the paused priorities."""
        now = self.clock.now() if now is None else now
        st = self.state
        st.expire(now)
        while True:
            try:
                frame = self.sock.recv(256)
            except BlockingIOError:
                break
            for prio, n, _ in st.on_frame(frame, now):
                if len(self.log) < 100_000:
                    self.log.append((now, prio, n))

    def paused(self, prio: int, now: float | None = None) -> bool:
        """Whether ``prio`` is paused now (call :meth:`poll` first to see new frames)."""
        return self.state.paused(prio, self.clock.now() if now is None else now)

    def wait_until_resumed(self, prio: int, timeout: float) -> bool:
        """Block while ``prio`` is paused (at most ``timeout`` fabric seconds); True if it
        is not paused."""
        deadline = self.clock.now() + timeout
        while True:
            now = self.clock.now()
            self.poll(now)
            if not self.paused(prio, now):
                return True
            if now >= deadline:
                return False
            select.select([self.sock], [], [],
                          self.clock.to_wall(min(deadline, self.state.until[prio]) - now))

    def close(self) -> None:
        self.sock.close()

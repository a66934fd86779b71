# SPDX-License-Identifier: GPL-2.0-only
"""A NIC port's link state, as the NIC hardware sees it: up or down, told at once.

A real NIC knows when its cable's far end goes away (loss of signal) and an MRC NIC
then takes that port's EVs out of every QP's rotation and tells its peers
(``specs/mrc.md``: "Port down → remap EVs to live planes and notify peers"). emu's
ports are veths: ``emu link … down`` (or a failed switch or plane) sets both ends of
a link down, and the host's end loses its carrier. The kernel announces every such
change on the rtnetlink multicast group ``RTMGRP_LINK``; :class:`LinkWatch` listens
on one netlink socket (the standard library's ``AF_NETLINK``; no polling) inside the
host's namespace and reports ``(port index, up)`` for the NIC's ports only.

Up means what carries packets: administratively up *and* the lower layer up
(``IFF_UP`` and ``IFF_LOWER_UP``). The parser is sans-IO (:func:`parse_link_messages`)
and tested on built messages; the socket part is a trio task the daemon starts.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from collections.abc import Callable, Iterator

import trio

from emu.nic.udp import in_netns

NETLINK_ROUTE = 0
RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000

_NLMSG = struct.Struct("=IHHII")      # len, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")    # family, pad, type, index, flags, change


def parse_link_messages(data: bytes) -> Iterator[tuple[int, bool]]:
    """``(ifindex, up)`` for every RTM_NEWLINK / RTM_DELLINK in one netlink datagram;
    anything else, or a truncated message, is skipped (never an exception)."""
    off = 0
    while off + _NLMSG.size <= len(data):
        length, kind, _, _, _ = _NLMSG.unpack_from(data, off)
        if length < _NLMSG.size or off + length > len(data):
            return
        body = off + _NLMSG.size
        if kind in (RTM_NEWLINK, RTM_DELLINK) and body + _IFINFO.size <= off + length:
            _, _, index, flags, _ = _IFINFO.unpack_from(data, body)
            up = kind == RTM_NEWLINK and flags & IFF_UP != 0 and flags & IFF_LOWER_UP != 0
            yield index, up
        off += (length + 3) & ~3


class LinkWatch:
    """The link state of a NIC's ports (``ifnames`` in port order), changes only.

    ``on_change(port, up)`` is called once per change; the states start as the kernel
    has them when the watch opens (``SIOCGIFFLAGS``: up and running; a port that cannot
    be read starts up). ``netns_fd``: the host's namespace, where the ports are looked
    up and the socket is made (a worker serving several hosts runs in none of theirs)."""

    def __init__(self, ifnames: list[str], on_change: Callable[[int, bool], None],
                 netns_fd: int | None = None) -> None:
        self.netns_fd = netns_fd
        self.ports: dict[int, int] = {}    # ifindex -> port
        with in_netns(netns_fd):
            for p, name in enumerate(ifnames):
                try:
                    self.ports[socket.if_nametoindex(name)] = p
                except OSError:
                    continue
            self.up = [_is_up(n) for n in ifnames]
        self.ifnames = ifnames
        self.on_change = on_change
        self.changes = 0
        self.sock: socket.socket | None = None

    def open(self) -> None:
        with in_netns(self.netns_fd):
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK,
                              NETLINK_ROUTE)
        s.bind((0, RTMGRP_LINK))
        self.sock = s

    def feed(self, data: bytes) -> None:
        """One netlink datagram: report the NIC's ports whose state it changes."""
        for index, up in parse_link_messages(data):
            p = self.ports.get(index)
            if p is not None and self.up[p] != up:
                self.up[p] = up
                self.changes += 1
                self.on_change(p, up)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        if self.sock is None:
            self.open()
        assert self.sock is not None
        task_status.started()
        try:
            while True:
                await trio.lowlevel.wait_readable(self.sock)
                try:
                    data = self.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:  # ENOBUFS: events were lost; re-read every port's state
                    with in_netns(self.netns_fd):
                        now_up = [_is_up(name) for name in self.ifnames]
                    for p, up in enumerate(now_up):
                        if up != self.up[p]:
                            self.up[p] = up
                            self.changes += 1
                            self.on_change(p, up)
                    continue
                self.feed(data)
        finally:
            self.close()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


SIOCGIFFLAGS, IFF_RUNNING = 0x8913, 0x40


def _is_up(ifname: str) -> bool:
    """Up and running now (SIOCGIFFLAGS in this namespace: sysfs may be another's)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("16sH14x", ifname.encode()[:15], 0)
            flags = struct.unpack_from("16sH", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
    except OSError:
        return True
    return flags & IFF_UP != 0 and flags & IFF_RUNNING != 0


async def start(nursery: trio.Nursery, ifnames: list[str],
                on_change: Callable[[int, bool], None],
                netns_fd: int | None = None) -> tuple[LinkWatch | None, str]:
    """A watch of ``ifnames`` (in namespace ``netns_fd``; None: this thread's) running in
    ``nursery``; ``(None, why)`` where the namespace refuses a netlink socket (then a
    failed port is found by the transports' timeouts)."""
    watch = LinkWatch(ifnames, on_change, netns_fd)
    try:
        watch.open()
    except OSError as e:
        return None, (f"port link state not watched ({e}): a failed port is found by the "
                      "transports' timeouts only")
    await nursery.start(watch.run)
    return watch, ""

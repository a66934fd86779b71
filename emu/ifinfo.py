# SPDX-License-Identifier: GPL-2.0-only
"""An interface's MTU in this thread's network namespace, by ioctl.

Why an ioctl and not ``/sys/class/net`` or netlink: sysfs shows the namespace
it was mounted in, not the caller's; pyroute2's import alone costs ~100 ms and
MiBs, which the NIC daemon (:func:`emu.nic.udp.interfaces`) and the switch's
kernel datapath (:mod:`emu.switch.kernel`) do not pay.
"""

from __future__ import annotations

import fcntl
import socket
import struct

SIOCGIFMTU = 0x8921


def if_mtu(ifname: str, sock: socket.socket | None = None) -> int:
    """``ifname``'s MTU (OSError if there is no such interface); ``sock``: any socket of
    this namespace to ask through (one is opened otherwise)."""
    req = struct.pack("16s16x", ifname.encode()[:15])
    if sock is not None:
        return int(struct.unpack_from("=i", fcntl.ioctl(sock, SIOCGIFMTU, req), 16)[0])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return int(struct.unpack_from("=i", fcntl.ioctl(s, SIOCGIFMTU, req), 16)[0])

# SPDX-License-Identifier: GPL-2.0-only
"""An interface's MTU and offload features in this thread's network namespace, by ioctl.

Why an ioctl and not ``/sys/class/net`` or netlink: sysfs shows the namespace
it was mounted in, not the caller's; pyroute2's import alone costs ~100 ms and
MiBs, which the NIC daemon (:func:`emu.nic.udp.interfaces`) and the switch's
kernel datapath (:mod:`emu.switch.kernel`) do not pay.
"""

from __future__ import annotations

import array
import fcntl
import socket
import struct

SIOCGIFMTU = 0x8921
SIOCETHTOOL = 0x8946
#: legacy ethtool feature commands (get, set) = ``ethtool -k/-K`` tx, tso, gro
FEATURES = {"tx": (0x16, 0x17), "tso": (0x1E, 0x1F), "gro": (0x2B, 0x2C)}


def if_mtu(ifname: str, sock: socket.socket | None = None) -> int:
    """``ifname``'s MTU (OSError if there is no such interface); ``sock``: any socket of
    this namespace to ask through (one is opened otherwise)."""
    req = struct.pack("16s16x", ifname.encode()[:15])
    if sock is not None:
        return int(struct.unpack_from("=i", fcntl.ioctl(sock, SIOCGIFMTU, req), 16)[0])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return int(struct.unpack_from("=i", fcntl.ioctl(s, SIOCGIFMTU, req), 16)[0])


def _ethtool(sock: socket.socket, ifname: str, cmd: int, value: int = 0) -> int:
    buf = array.array("I", [cmd, value])
    ifr = struct.pack("16sP", ifname.encode()[:15], buf.buffer_info()[0]) + bytes(16)
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifr)
    return int(buf[1])


def feature(ifname: str, name: str, sock: socket.socket | None = None) -> bool:
    """Whether offload feature ``name`` (:data:`FEATURES`) is on (OSError: no such device)."""
    if sock is not None:
        return bool(_ethtool(sock, ifname, FEATURES[name][0]))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return bool(_ethtool(s, ifname, FEATURES[name][0]))


def set_feature(sock: socket.socket, ifname: str, name: str, on: bool) -> None:
    """``ethtool -K ifname name on|off`` through ``sock`` (a socket of the device's namespace)."""
    _ethtool(sock, ifname, FEATURES[name][1], 1 if on else 0)

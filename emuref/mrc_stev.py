# SPDX-License-Identifier: GPL-2.0-only
"""Where emu-ref's MRC entropy values ride: the UDP source port alone, or (STEV) the source
port and the IPv6 flow label — and the kernel calls that put a chosen flow label on a
datagram and read it back.

emu-ref's own reading of ``specs/mrc.md`` (EV formats), written apart from emu's: in
STEV an EV of ``sport_bits + label_bits`` bits is cut in two, the low ``label_bits`` into
the flow label, the rest into the low bits of the source port above a fixed ``base``. The
page knows two cuts (its "Where the reconstructions disagree"): 16 + 16, and a 20-bit
flow label (here 12 + 20 above 0xD000). Both ends must cut alike, or the EV a receiver
echoes is not the one the sender sent on.

A flow label of one's choosing needs a lease on Linux: ``IPV6_FLOWLABEL_MGR`` takes
it for a destination, ``IPV6_FLOWINFO_SEND`` lets ``sendto`` name it in the address's
flowinfo. ``IPV6_FLOWINFO`` on the receiving socket hands each datagram's label over
as a control message.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

IPV6_FLOWINFO = 11
IPV6_FLOWLABEL_MGR = 32
IPV6_FLOWINFO_SEND = 33
_FL_A_GET, _FL_F_CREATE, _FL_S_ANY = 0, 1, 255
LABEL_MASK = 0xFFFFF
FORMATS = ("udp", "stev")


@dataclass(frozen=True)
class EvFormat:
    """One way of carrying EVs; the default is the UDP format (EV = source port)."""

    stev: bool = False
    sport_bits: int = 16
    label_bits: int = 16
    base: int = 0

    def fields(self, ev: int) -> tuple[int, int]:
        """``(source port, flow label)`` that carry ``ev`` (label 0 in the UDP format)."""
        if not self.stev:
            return ev & 0xFFFF, 0
        lo = ev & ((1 << self.label_bits) - 1)
        hi = (ev >> self.label_bits) & ((1 << self.sport_bits) - 1)
        return self.base | hi, lo

    def ev(self, sport: int, label: int | None) -> int:
        """The EV a datagram from ``sport`` with flow label ``label`` carried."""
        if not self.stev:
            return sport
        hi = sport & ((1 << self.sport_bits) - 1)
        return (hi << self.label_bits) | ((label or 0) & ((1 << self.label_bits) - 1))

    def describe(self) -> str:
        if not self.stev:
            return "udp"
        return f"stev {self.sport_bits}+{self.label_bits}" + (
            f"@{self.base:#x}" if self.base else "")


def parse(fmt: str, split: str = "") -> EvFormat:
    """``EMUREF_MRC_EV_FORMAT`` and ``EMUREF_MRC_STEV_SPLIT`` (``S+L`` or ``S+L@BASE``)."""
    fmt = (fmt or "udp").lower()
    if fmt not in FORMATS:
        raise ValueError(f"EV format {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "udp":
        if split:
            raise ValueError("a STEV split is for the stev format")
        return EvFormat()
    cut, _, base_s = (split or "16+16").partition("@")
    s_s, plus, l_s = cut.partition("+")
    try:
        s, lb, base = int(s_s), int(l_s), int(base_s, 0) if base_s else 0
    except ValueError:
        raise ValueError(f"STEV split {split!r}: S+L or S+L@BASE, e.g. 12+20@0xd000") from None
    if not plus or not 1 <= s <= 16 or not 0 <= lb <= 20 or s + lb > 32:
        raise ValueError(f"STEV split {split!r}: 1..16 port bits, 0..20 label bits, "
                         f"at most 32 in all")
    if not 0 <= base <= 0xFFFF or base & ((1 << s) - 1):
        raise ValueError(f"STEV split {split!r}: the base must be a port whose low {s} bits "
                         f"are zero")
    return EvFormat(True, s, lb, base)


def lease(sock: socket.socket, dst: str, label: int) -> None:
    """Take flow label ``label`` toward ``dst`` on ``sock`` (shared: any socket may hold it)
    and let ``sendto`` name it. OSError if the kernel refuses (e.g. a label in the range
    ``net.ipv6.flowlabel_state_ranges`` keeps for the stateless)."""
    req = (socket.inet_pton(socket.AF_INET6, dst) + struct.pack("!I", label & LABEL_MASK)
           + struct.pack("=BBHHH4x", _FL_A_GET, _FL_S_ANY, _FL_F_CREATE, 0, 0))
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWLABEL_MGR, req)
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWINFO_SEND, 1)


def want_labels(sock: socket.socket) -> None:
    """Ask for each received datagram's flow label (a control message)."""
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWINFO, 1)


def label_of(level: int, kind: int, data: bytes) -> int | None:
    """The flow label in one control message, or None if it is not that message."""
    if level == socket.IPPROTO_IPV6 and kind == IPV6_FLOWINFO and len(data) >= 4:
        return struct.unpack("!I", data[:4])[0] & LABEL_MASK
    return None

# SPDX-License-Identifier: GPL-2.0-only
"""The IPv4 header words a UDP socket hides, stamped by the kernel on each datagram.

Why: the RoCEv2 ICRC covers the IPv4 identification and flags (only TOS, TTL
and the header checksum are masked), and a UDP socket hands the daemon the
payload without its IP header. emu's own senders send ID 0 with DF, but
Linux rxe — like any sender that builds its own IP header — counts its IDs up
(``/work/shared/vectors/rxe/``): a receiver that assumes ID 0 drops every
packet such a peer sends as a bad ICRC.

How: one nftables rule in the host's namespace copies the 32-bit word at
IPv4 header offset 4 — identification, flags, fragment offset, as received —
into the packet's mark at ``prerouting`` (before any routing, on the frame
the cable delivered); the socket asks for the mark of each datagram
(``SO_RCVMARK``, Linux 5.19) and gets it as a control message next to the
TOS it already reads. Nothing is copied, and the datagram path is unchanged:
the kernel does the per-packet work (one rule: a payload load and a mark
store), the daemon one more control message per read. The mark never leaves
the namespace (a veth crossing scrubs it), and no other rule of emu's reads
the mark in a host's ingress path.

Measured alternatives (``docs/measurements.md``, "The ICRC over the header as
received"): an ``AF_PACKET`` or raw socket sees the header but receives a
second copy of every datagram beside the UDP socket; a tc BPF program would
need clang at run time for a two-instruction job that nftables, already one
of emu's dependencies, does.

Where the rule cannot be installed (no ``nft``, a kernel without
``SO_RCVMARK``), :func:`install` says why and the check falls back to the
header emu's own senders use (ID 0, DF) — named as such in ``emu nicd
stats`` (``icrc_ip_header``) and in the daemon's warnings, never silently.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Sequence
from typing import Any

#: SO_RCVMARK (asm-generic/socket.h): each read carries the datagram's mark as an
#: ``SO_MARK`` control message
SO_RCVMARK = 75
SO_MARK = getattr(socket, "SO_MARK", 36)

#: the receive check's modes, as ``emu nicd stats`` names them
AS_RECEIVED = "as received (nftables mark)"
ASSUMED = "assumed ID 0, DF (emu's own senders)"


def table_name(port: int) -> str:
    """One table per UDP port, so two daemons in one namespace (tests) do not clash."""
    return f"emu_nic_rx_{port}"


def ruleset(port: int) -> str:
    """The nftables script that stamps IPv4 header bytes 4..7 of every UDP datagram to
    ``port`` into its mark. ``@nh,32,32`` is 32 bits at bit 32 of the network header:
    the word lands in the mark in wire byte order, so the control message's four
    bytes are the header's own on any host byte order."""
    t = table_name(port)
    return (f"table ip {t} {{}}\n"
            f"delete table ip {t}\n"
            f"table ip {t} {{\n"
            "  chain stamp {\n"
            "    type filter hook prerouting priority raw; policy accept;\n"
            f"    udp dport {port} meta mark set @nh,32,32\n"
            "  }\n"
            "}\n")


def _nft(script: str) -> str | None:
    nft = shutil.which("nft") or next(
        (p for p in ("/usr/sbin/nft", "/sbin/nft") if os.access(p, os.X_OK)), None)
    if nft is None:
        return "nft not found"
    try:
        p = subprocess.run([nft, "-f", "-"], input=script, text=True, capture_output=True,
                           timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"nft failed: {e}"
    if p.returncode:
        return f"nft: {(p.stderr or p.stdout).strip().splitlines()[-1:] or p.returncode}"
    return None


def install(port: int) -> str | None:
    """Stamp the IPv4 header word of UDP datagrams to ``port`` in this namespace.

    Returns None when done, else why not (the caller falls back and says so).
    Idempotent: a table left by a killed daemon is replaced, not doubled."""
    return _nft(ruleset(port))


def remove(port: int) -> None:
    """Remove :func:`install`'s table (quietly: the namespace may be gone already)."""
    t = table_name(port)
    _nft(f"table ip {t} {{}}\ndelete table ip {t}\n")


def enable(sock: socket.socket) -> bool:
    """Ask ``sock`` for each datagram's mark; False if the kernel has no ``SO_RCVMARK``."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVMARK, 1)
    except OSError:
        return False
    return True


def stamp(port: int, socks: Sequence[Any]) -> tuple[str, str | None]:
    """Have the IPv4 sockets among ``socks`` (:class:`emu.nic.udp.PortSocket`) read each
    datagram's header word as received, installing the rule for ``port`` first, and the
    IPv6 ones take a zero UDP checksum (the ICRC is the check: Linux rxe sends 0).

    Returns the mode in force (:data:`AS_RECEIVED` or :data:`ASSUMED`) and, for the
    fallback, a warning saying why and what it costs — never a silent downgrade."""
    for ps in socks:  # the ICRC covers what a zero UDP checksum leaves unchecked
        ps.accept_zero_checksum()
    v4 = [ps for ps in socks if ps.family == socket.AF_INET]
    if not v4:
        return AS_RECEIVED, None  # IPv6: the ICRC masks every field a socket hides
    why = install(port)
    if why is None:
        if all(ps.enable_ip_word() for ps in v4):
            return AS_RECEIVED, None
        remove(port)
        why = "the kernel has no SO_RCVMARK"
    return ASSUMED, (f"IPv4 ICRC checked with the IP header {ASSUMED} ({why}): packets "
                     "from senders that count IP IDs up (Linux rxe) are dropped as "
                     "rx_bad_icrc")

# SPDX-License-Identifier: GPL-2.0-only
"""emu.nic.udp without namespaces or root: IPv4 GSO off for the ICRC, reads lent from
chunks, the quick path after kernel drops."""

from __future__ import annotations

import contextlib
import socket
from collections import deque

from emu.nic.udp import PortSocket


def test_ipv4_gso_is_off_by_default_for_the_icrc():
    ps = PortSocket("127.0.0.1", 0)
    try:
        assert ps.gso is False  # IP IDs would count up per segment: RoCE ICRC breaks
    finally:
        ps.close()


def test_reads_are_lent_from_chunks_never_overwritten_while_held():
    """Without a framing check every datagram is a view of a receive chunk: views kept
    across many chunks' worth of reads keep their bytes; chunks nobody holds are
    reused; the counts and the TOS are those of the general path."""
    import collections
    import os

    from emu.nic import udp

    rx = PortSocket("::1", 0, gro=False, rcvbuf=8 << 20)
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IPV6, udp.IPV6_TCLASS, 0x2A << 2 | 2)
    try:
        c = collections.Counter()
        kept = []
        for rnd in range(6):  # each round fills ~2 chunks
            sent = [os.urandom(4000 + (i * 37) % 4000) for i in range(100)]
            for d in sent:
                tx.sendto(d, ("::1", rx.sport))
            out: collections.deque = collections.deque()
            while True:
                try:
                    rx.recv_batch(out, 64, 10_000, c)
                except BlockingIOError:
                    break
            got = list(out)
            assert [bytes(g[0]) for g in got] == sent
            assert all(type(g[0]) is memoryview and g[2] == 0x2A << 2 | 2 for g in got)
            if rnd < 2:
                kept.append((sent, [g[0] for g in got]))  # held across later rounds
        for sent, views in kept:
            assert [bytes(v) for v in views] == sent  # never overwritten
        assert c["rx_packets"] == 600 and c["rx_bytes"] == sum(
            4000 + (i * 37) % 4000 for i in range(100)) * 6
        assert len(rx._spare) <= udp.RX_SPARE + 1
        made = {id(ch) for ch in rx._spare} | {id(rx._chunk)}
        assert len(made) < 12  # the unheld ones went round again
    finally:
        rx.close()
        tx.close()


def test_reads_after_a_kernel_drop_stay_on_the_quick_path_and_count_the_drops():
    """Once a socket's receive buffer has overflowed, every read carries the kernel's drop
    count (SO_RXQ_OVFL) beside its TOS: the reads still take the common path — an
    overloaded daemon must not get slower per datagram — and the count is kept."""
    ps = PortSocket("::1", 0, mtu=65536, gro=False, rcvbuf=4096)
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        dst = ("::1", ps.sock.getsockname()[1])
        out: deque = deque()
        c = dict.fromkeys(("rx_packets", "rx_bytes", "rx_backlog_drops", "rx_bad_icrc",
                           "rx_truncated"), 0)
        for i in range(400):  # far beyond a 4 KiB buffer: the kernel drops most
            tx.sendto(bytes([i & 0xFF]) * 700, dst)
        with contextlib.suppress(BlockingIOError):
            ps.recv_batch(out, 1000, 1000, c)
        first = len(out)
        general = []
        real = ps._read_general
        ps._read_general = lambda *a, **k: (general.append(a), real(*a, **k))[1]
        for _ in range(2):  # queued after the drops: they carry the count
            tx.sendto(b"x" * 700, dst)
        with contextlib.suppress(BlockingIOError):
            ps.recv_batch(out, 1000, 1000, c)
        assert len(out) == first + 2 and not general
        assert ps.kernel_drops + first == 400
        assert c["rx_packets"] == len(out)
        assert all(len(d) == 700 and tos == 0 for d, _, tos in out)
    finally:
        tx.close()
        ps.close()


def test_framed_reads_are_checked_in_the_chunk_and_lent_and_bad_ones_counted():
    """With a framing check (the RoCEv2 ICRC) reads take the same short path: each
    datagram is checked in place in its receive chunk and lent as a view, never copied;
    one whose ICRC does not match is dropped and counted (``rx_bad_icrc``) and its place
    in the chunk goes to the next read; the rest keep their bytes while held."""
    import collections
    import os

    from emu.nic.framing import RoceIcrc

    framer = RoceIcrc()
    rx = PortSocket("::1", 0, gro=False, rcvbuf=8 << 20)
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    tx.bind(("::1", 0))
    sport = tx.getsockname()[1]
    try:
        c = collections.Counter()
        sent, bad = [], set()
        for i in range(300):
            d = bytearray(os.urandom(12)) + os.urandom(4000 + (i * 53) % 200) + bytes(4)
            d[4] = 0  # BTH byte 4: reserved
            framer.seal(d, "::1", sport, "::1", rx.sport)
            if i % 7 == 3:
                d[20] ^= 0x40  # corrupted after sealing: the ICRC no longer matches
                bad.add(i)
            sent.append(bytes(d))
            tx.sendto(d, ("::1", rx.sport))
        out: collections.deque = collections.deque()
        while True:
            try:
                rx.recv_batch(out, 64, 10_000, c, framer.check, framer.check_buf)
            except BlockingIOError:
                break
        got = [g[0] for g in out]
        assert all(type(g) is memoryview for g in got)
        assert [bytes(g) for g in got] == [d for i, d in enumerate(sent) if i not in bad]
        assert c["rx_bad_icrc"] == len(bad) and c["rx_packets"] == 300
    finally:
        rx.close()
        tx.close()


def test_receive_stamps_stay_raw_until_an_engine_reads_one():
    """With stamps on, each read carries its kernel receive time as the raw control
    message (converting every datagram's cost more than the one per run a UET target
    reads); ArrivalTimes converts on access, onto the engine's clock, and a read
    without a stamp is None."""
    import time

    import pytest

    from emu.nic.udp import ArrivalTimes, arrival, stamp_seconds

    ps = PortSocket("127.0.0.1", 0)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        assert ps.enable_stamps()
        dst = ("127.0.0.1", ps.sock.getsockname()[1])
        t0 = time.time()
        for _ in range(3):
            tx.sendto(b"x" * 100, dst)
        time.sleep(0.05)
        out: deque = deque()
        times: deque = deque()
        c = dict.fromkeys(("rx_packets", "rx_bytes", "rx_backlog_drops", "rx_bad_icrc",
                           "rx_truncated"), 0)
        with contextlib.suppress(BlockingIOError):
            ps.recv_batch(out, 100, 100, c, times=times)
        t1 = time.time()  # after the read
        assert len(out) == len(times) == 3
        assert all(type(r) is bytes for r in times)
        got = ArrivalTimes(list(times), skew=t0)  # seconds after t0
        # each stamp is the kernel's arrival: after the first send, in order, and no later
        # than the read — the kernel turns software stamping on from a deferred work item
        # (net_enable_timestamp), and a datagram that beat it is stamped when it is read.
        # An ordering, not a bound on how fast a loaded machine delivers
        assert len(got) == 3 and 0 <= got[0] <= got[1] <= got[2] <= t1 - t0
        assert got[0] == pytest.approx(stamp_seconds(times[0]) - t0)
        assert arrival(None, 1.0) is None and ArrivalTimes([None], 0.0)[0] is None
    finally:
        tx.close()
        ps.close()

# SPDX-License-Identifier: GPL-2.0-only
"""emu.nic.txpath without namespaces or root: the bounded queue, GSO grouping and
entropy sockets on ::1, framing of gathered datagrams, whether the ports are busy."""

from __future__ import annotations

import random
import socket

import pytest

from emu.core.datagram import Run
from emu.nic.txpath import TxPath
from emu.nic.udp import PortSocket
from emu.transports.base import TxMeta


def test_tx_queue_is_bounded_and_counts():
    c = {k: 0 for k in ("tx_backlog_drops",)}
    tx = TxPath([], c, max_queue=5)
    tx.put([(b"x", ("::1", 1), None)] * 3)
    tx.put([(b"y", ("::1", 1), None)] * 4)
    assert len(tx.queue) == 5 and c["tx_backlog_drops"] == 2


def test_tx_queue_counts_a_run_as_its_datagrams_and_takes_it_whole():
    c = {k: 0 for k in ("tx_backlog_drops",)}
    tx = TxPath([], c, max_queue=10)

    def run(n: int) -> Run:
        return Run(bytearray(4 * n), 4, memoryview(bytes(8 * n)), 8, [TxMeta(5000)] * n)

    tx.put([(run(4), ("::1", 1), None), (b"x", ("::1", 1), None), (run(6), ("::1", 1), None),
            (b"y", ("::1", 1), None)])
    # 4 + 1 fit; the 6-datagram run does not (5 left): it and what follows are dropped
    assert [type(d) for d, _, _ in tx.queue] == [Run, bytes]
    assert c["tx_backlog_drops"] == 7


def tx_counters_and_receiver() -> tuple[dict[str, int], socket.socket, int]:
    """A TxPath's counters and a UDP receiver on ::1 (and its port) for send tests."""
    c = dict.fromkeys(("tx_packets", "tx_bytes", "tx_gso_sends", "tx_gso_disabled",
                       "tx_errors", "tx_entropy_fallback", "tx_backlog_drops"), 0)
    rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    rx.bind(("::1", 0))
    rx.settimeout(5)
    return c, rx, rx.getsockname()[1]


def test_gso_groups_equal_datagrams_to_one_destination():
    c, rx, port = tx_counters_and_receiver()
    ps = PortSocket("::1", 0, mtu=65536, gro=False)
    if not ps.gso:
        pytest.skip("no UDP GSO on this kernel")
    tx = TxPath([ps], c, max_queue=100)
    meta = TxMeta(ps.sock.getsockname()[1])
    other = TxMeta(ps.sock.getsockname()[1], ecn=2)
    items = [(bytes([i]) * 1000, ("::1", port), meta) for i in range(10)]
    items.append((b"z" * 500, ("::1", port), meta))  # shorter last segment joins the group
    items.append((b"w" * 1000, ("::1", port), other))  # another meta: another send
    tx.put(items)
    tx.flush()
    got = [rx.recv(65536) for _ in range(12)]
    assert got == [d for d, _, _ in items]
    assert c["tx_gso_sends"] == 1 and c["tx_packets"] == 12
    ps.close()
    rx.close()


def test_a_run_without_a_frame_ring_leaves_datagram_by_datagram_on_its_entropies():
    """No frame ring (``--no-frame-ring``, or a port without one): a Run at the head of the
    queue is opened into its datagrams, each sent from the socket bound to its entropy."""
    c, rx, port = tx_counters_and_receiver()
    ps = PortSocket("::1", 0, mtu=65536, gro=False)
    tx = TxPath([ps], c, max_queue=100)
    try:
        own = ps.port = ps.sock.getsockname()[1]
        ents = [own, 0, 0]  # the port's own, then two other free source ports
        for i in (1, 2):
            probe = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            probe.bind(("::1", 0))
            ents[i] = probe.getsockname()[1]
            probe.close()
        pay = bytes(range(256)) * 12
        heads = b"".join(b"hd%d" % i for i in range(3))
        run = Run(bytearray(heads), 3, memoryview(pay), 1000, [TxMeta(e) for e in ents])
        tx.put([(b"first", ("::1", port), TxMeta(own)), (run, ("::1", port), None)])
        tx.flush()
        got = [rx.recvfrom(65536) for _ in range(4)]
        assert [g[0] for g in got] == [b"first"] + [b"hd%d" % i + pay[i * 1000:(i + 1) * 1000]
                                                   for i in range(3)]
        assert [g[1][1] for g in got] == [own, *ents]
        assert c["tx_packets"] == 4 and not tx.queue
    finally:
        tx.close()
        ps.close()
        rx.close()


@pytest.mark.parametrize("gso", [True, False])
def test_gather_datagrams_are_sealed_and_sent_whole(gso):
    """Scatter-gather datagrams (header, payload view, pad + ICRC tail) leave as the
    same bytes a joined buffer would, with the ICRC over the real headers — in a GSO
    batch mixed with plain buffers and one by one."""
    from emu.nic.framing import RoceIcrc
    from emu.transports.roce import packets as P

    c, rx, port = tx_counters_and_receiver()
    ps = PortSocket("::1", 0, mtu=65536, gro=False, gso=gso)
    if gso and not ps.gso:
        pytest.skip("no UDP GSO on this kernel")
    icrc = RoceIcrc()
    tx = TxPath([ps], c, max_queue=100, seal=icrc.seal, seal_many=icrc.seal_many)
    meta = TxMeta(ps.sport)
    memory = bytearray(random.Random(7).randbytes(4096 * 4))
    dst = ("::1", port)
    items = [(P.build_gather(P.WRITE_MIDDLE, 0x12, i, memoryview(memory)[i * 4096:(i + 1)
                                                                         * 4096]), dst, meta)
             for i in range(3)]
    items.append((P.build(P.WRITE_MIDDLE, 0x12, 3, b"", memory[3 * 4096:]), dst, meta))
    items.append((P.build_gather(P.WRITE_LAST, 0x12, 4, memoryview(memory)[5:1002]), dst,
                  meta))  # 997 B: 3 pad bytes in the tail, shorter last segment
    tx.put(items)
    tx.flush()
    got = [rx.recv(65536) for _ in range(len(items))]
    assert c["tx_packets"] == len(items) and c["tx_gso_sends"] == (1 if gso else 0)
    for (d, _, _), g in zip(items, got, strict=True):
        assert g == bytes(d) and len(g) == len(d)
        assert icrc.check(g, "::1", ps.sport, "::1", port), "bad ICRC"
    assert got[4][12:12 + 997] == memory[5:1002] and got[4][12 + 997:-4] == bytes(3)
    ps.close()
    rx.close()


def test_entropy_sockets_open_up_front_and_carry_their_source_port():
    """A spraying engine's entropy set gets its sockets at start (preopen); sends then
    leave from them — the UDP source port is the entropy — without opening more."""
    c, rx, port = tx_counters_and_receiver()
    ps = PortSocket("::1", 0, mtu=65536, gro=False)
    tx = TxPath([ps], c, max_queue=100)
    free = []
    for _ in range(3):  # three free ports to use as the entropy set
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as t:
            t.bind(("::1", 0))
            free.append(t.getsockname()[1])
    try:
        assert tx.preopen(free) == 3 and tx.preopen(free) == 0  # idempotent
        opened = len(tx.sockets())
        tx.put([(b"x%d" % e, ("::1", port), TxMeta(e)) for e in free])
        tx.flush()
        got = sorted(rx.recvfrom(100)[1][1] for _ in free)
        assert got == sorted(free) and len(tx.sockets()) == opened
        assert c["tx_entropy_fallback"] == 0
    finally:
        tx.close()
        ps.close()
        rx.close()


def test_a_large_entropy_set_opens_a_bounded_number_of_sockets_and_folds_the_rest():
    """UET's 4096 entropies on the socket path: sockets for the first ``limit`` only
    (here 2 of 5, by default 64 of 4096), and the set's other members leave from one of
    those — a port of the set, so the peer's echo is still one the engine knows —
    counted ``tx_entropy_folded``; no socket is opened mid-burst, nothing falls back to
    the port's own source port."""
    c, rx, port = tx_counters_and_receiver()
    c["tx_entropy_folded"] = 0
    ps = PortSocket("::1", 0, mtu=65536, gro=False)
    tx = TxPath([ps], c, max_queue=100)
    free = []
    for _ in range(5):
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as t:
            t.bind(("::1", 0))
            free.append(t.getsockname()[1])
    try:
        assert tx.preopen(free, limit=2) == 2
        opened = len(tx.sockets())
        tx.put([(b"x%d" % e, ("::1", port), TxMeta(e)) for e in free])
        tx.flush()
        got = [rx.recvfrom(100)[1][1] for _ in free]
        assert got[:2] == free[:2] and set(got) <= set(free[:2])
        assert c["tx_entropy_folded"] == 3 and c["tx_entropy_fallback"] == 0
        assert len(tx.sockets()) == opened
    finally:
        tx.close()
        ps.close()
        rx.close()


def test_preopen_of_the_default_uet_set_stops_at_64():
    from emu.nic.txpath import PREOPEN_MAX
    from emu.transports.uet.engine import ENTROPY_BASE, ENTROPY_COUNT

    c, rx, _ = tx_counters_and_receiver()
    ps = PortSocket("::1", 0, mtu=65536, gro=False)
    tx = TxPath([ps], c, max_queue=10)
    try:
        n = tx.preopen(range(ENTROPY_BASE, ENTROPY_BASE + ENTROPY_COUNT))
        # (a port of the first 64 another process holds is skipped, not replaced)
        assert PREOPEN_MAX == 64 and 0 < n <= 64 and len(tx.sockets()) == 1 + n
    finally:
        tx.close()
        ps.close()
        rx.close()


def test_ports_are_busy_while_every_paced_port_still_has_frames_to_serialize():
    """What decides whether a RoCEv2 pacer served late cost link time (pacer_late): while
    every port's serializer still has frames, it did not."""
    import time
    from types import SimpleNamespace

    from emu.nic.pacer import PortPacer
    from emu.nic.txpath import TxPath

    a, b = PortPacer("eth0", 1e9), PortPacer("eth1", 1e9)
    tx = TxPath([SimpleNamespace(pacer=a), SimpleNamespace(pacer=b)], {}, max_queue=8)
    now = time.monotonic()
    a.charge(now, 10**6, 100, waited=False)  # 8 ms of frames on eth0
    assert not tx.ports_busy()  # eth1 has none
    b.charge(now, 10**6, 100, waited=False)
    assert tx.ports_busy()
    a.t_free = b.t_free = now  # both have run dry
    assert not tx.ports_busy()
    assert not TxPath([SimpleNamespace(pacer=None)], {}, max_queue=8).ports_busy()  # unpaced


def test_a_full_port_is_topped_up_once_a_quarter_of_its_fifo_has_drained():
    """Not as soon as one frame fits: a daemon woken per frame spent its CPU on wake-ups.
    Three quarters of a FIFO still on its way to the wire cover a late turn."""
    from emu.nic.pacer import PortPacer

    p = PortPacer("eth0", 1e9, burst_s=2e-3)
    p.charge(0.0, 250_000, 60, waited=False)  # 2 ms of frames: full
    assert p.room(0.0) <= 0
    # woken with a batch's room (≥ a quarter of the FIFO, ~15 frames), not one frame's …
    assert p.room(p.due()) >= 250_000 / 4
    # … and with frames left for the wire meanwhile: three quarters of the FIFO
    assert p.t_free - p.due() == pytest.approx(2e-3 * 3 / 4)
    # … and lateness is still judged against the wire: only a port that ran dry lost time
    p.charge(p.due() + 0.9e-3, 8000, 1, waited=True)
    assert p.c["late"] == 0
    p.charge(p.t_free + 0.5e-3, 8000, 1, waited=True)
    assert p.c["late"] == 1

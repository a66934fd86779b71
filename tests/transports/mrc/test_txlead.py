# SPDX-License-Identifier: GPL-2.0-only
"""Behind a paced port MRC emits no more than the port's FIFO ahead of each plane's wire
(emu.transports.mrc.txlead): a window of a bandwidth-delay product at a long round trip
— what overflowed the daemon's transmit queue in the cross-site scenario — stays in the
engine until its port has room, the transfer still completes byte-exact, and without
``tx_hold`` the whole window goes at once, as before. Sans-IO: two engines over the
in-memory wire, no sockets."""

from __future__ import annotations

from collections import Counter

import pytest
from lossy_link import mrc_pair

from emu.core.cq import WcStatus
from emu.core.portsched import EPS
from emu.core.verbs import RecvWR, SendWR, Sge
from emu.transports.mrc import MrcEngine
from emu.transports.mrc.factory import create_engine
from emu.transports.mrc.txlead import DATA_HEADERS
from emu.wire.codec.mrc import WRITE_OPCODES
from emu.wire.codec.roce import BTH

PMTU = 1024
RATE = 10e9  # each plane's port
HOLD = 50e-6  # the port's FIFO: 62.5 kB at 10 Gb/s, ~57 packets
OVERHEAD = 62  # IPv6 + UDP + Ethernet: what the port adds to each datagram
SIZE = 4 << 20


def _connected(hold: float, loss: float = 0.0, seed: int = 1):
    """The two-plane pair of :func:`_transfer`, connected, nothing sent yet."""
    kw = {"planes": 2, "mpr": 16384, "base_rtt": 1e-3, "line_rate": RATE, "timeout": 14,
          "tx_hold": hold, "frame_overhead": OVERHEAD}
    link, ea, eb, _, _, src, dst, data = mrc_pair(seed, SIZE, pmtu=PMTU, engine_kw=kw,
                                                  loss=loss)
    ea.local_addrs, eb.local_addrs = ["10.0.0.1", "10.1.0.1"], ["10.0.0.2", "10.1.0.2"]
    qa, qb = ea.create_qp(send_cq="a.s"), eb.create_qp(send_cq="b.s")
    ia, ib = ea.query_qp(qa), eb.query_qp(qb)
    ea.connect(qa, {**ib, "port": 4791})
    eb.connect(qb, {**ia, "port": 4791})
    link.delay, link.rate = 0.5e-3, 2 * RATE
    return link, ea, qa, src, dst, data


def _transfer(hold: float, loss: float = 0.0, seed: int = 1):
    """A 4 MiB WRITE over a two-plane pair 1 ms apart (round trip), MPR 16384 and NSCC's
    window a bandwidth-delay product (~1,200 packets): the cross-site scenario scaled
    down; A's output leaves through a serializer of both planes' rate. Returns the link
    (its ``wire`` holds every datagram as sent), A's engine, the completions and
    whether the data arrived intact."""
    link, ea, qa, src, dst, data = _connected(hold, loss, seed)
    link.wire = []
    ea.post_send(qa, SendWR.write(1, [Sge(src.va, SIZE, src.lkey)], dst.va, dst.rkey))
    link.run()
    return link, ea, link.completions("a", "a.s"), bytes(dst.view) == data


def _fifo_fill(link) -> tuple[list[float], Counter]:
    """Replays what A emitted on each plane through a line-rate wire of its own (the
    test's model, not the engine's): the most that was ever ahead of each plane's wire
    (seconds) and how many data packets went at time 0."""
    free, worst, first = [float("-inf")] * 2, [0.0, 0.0], Counter()
    for t, side, d, addr, _ in link.wire:
        if side != "a" or BTH.decode(d).opcode not in WRITE_OPCODES:
            continue
        p = 0 if addr[0].startswith("10.0.") else 1
        free[p] = max(free[p], t) + (len(d) + OVERHEAD) * 8 / RATE
        worst[p] = max(worst[p], free[p] - t)
        first[p] += t == 0.0
    return worst, first


def test_a_window_far_larger_than_the_fifo_waits_in_the_engine_not_the_port():
    """At no time is more than the FIFO ahead of either plane's wire (data, resends and
    ACK requests: the initiator's side sends nothing else here); the FIFO is kept nearly
    full, so the ports never wait on the engine and the transfer takes no longer than
    with the whole window handed over at once; it completes byte-exact, no timeout."""
    link, ea, wcs, intact = _transfer(HOLD)
    assert intact and [wc.status for wc in wcs] == [WcStatus.SUCCESS]
    worst, first = _fifo_fill(link)
    for w in worst:
        assert HOLD * 0.9 < w <= HOLD + EPS, worst
    assert all(n * (PMTU + OVERHEAD) * 8 / RATE <= HOLD for n in first.values()), first
    c = ea.counters()
    assert c["tx_lead_held"] > 0 and c["rto"] == 0 and c["tx_retransmits"] == 0, c
    unpaced, *_ = _transfer(0.0)
    assert link.now < unpaced.now * 1.05, (link.now, unpaced.now)


@pytest.mark.parametrize("seed", [1, 2])
def test_resends_wait_their_turn_in_the_fifo_and_are_not_starved(seed):
    """Through 1 % loss the resends keep within the FIFO too and the transfer completes
    byte-exact (a resend lost at the tail, with nothing sent after it to show it, is
    left to the timeout, as without the lead)."""
    link, ea, wcs, intact = _transfer(HOLD, 0.01, seed)
    assert intact and [wc.status for wc in wcs] == [WcStatus.SUCCESS]
    worst, _ = _fifo_fill(link)
    assert max(worst) <= HOLD + EPS, worst
    c = ea.counters()
    assert c["tx_retransmits"] > 0 and c["retx_sack"] > 0 and c["tx_lead_held"] > 0, c


def test_a_failed_planes_resends_go_to_the_live_plane_within_its_fifo():
    """Plane 1 fails with ~300 packets in flight on it, all owed a resend at once
    (``retx_plane``): five FIFOs' worth, which the live plane takes as its FIFO drains,
    not in one turn; the transfer completes byte-exact."""
    link, ea, qa, src, dst, data = _connected(HOLD)
    failed = False
    link.drop_sent = lambda side, d, addr, meta: failed and addr[0].startswith("10.1.")
    link.wire = []
    ea.post_send(qa, SendWR.write(1, [Sge(src.va, SIZE, src.lkey)], dst.va, dst.rkey))
    while link.sent["a"] < 600:
        assert link.step()
    failed = True
    ea.port_link(1, False, link.now)
    link.b.port_link(1, False, link.now)
    link.run()
    assert bytes(dst.view) == data
    worst, _ = _fifo_fill(link)
    assert max(worst) <= HOLD + EPS, worst
    c = ea.counters()
    assert c["retx_plane"] > 250 and c["rto"] == 0, c


def test_without_tx_hold_the_whole_window_goes_at_once_as_before():
    link, ea, wcs, intact = _transfer(0.0)
    assert intact and [wc.status for wc in wcs] == [WcStatus.SUCCESS]
    worst, first = _fifo_fill(link)
    assert sum(first.values()) > 1000  # NSCC's first window, in one turn
    assert min(worst) > 10 * HOLD
    assert ea.lead is None and ea.counters()["tx_lead_held"] == 0


def test_a_pause_while_held_waits_for_its_end_without_spinning():
    """PFC pauses the NIC while the FIFO holds the QP back: the held QP's resume time
    passes during the pause and must not stay due (the engine does not pull while
    paused; a timer due for ever would spin the daemon) — it sends when the pause ends."""
    link, ea, qa, src, dst, data = _connected(HOLD)
    ea.post_send(qa, SendWR.write(1, [Sge(src.va, SIZE, src.lkey)], dst.va, dst.rkey))
    link.step()
    ini = ea._qp(qa).ini
    assert ini.held
    ea.pause(0, link.now + 200e-6)
    link.run(until=link.now + 100e-6)  # the resume time passed: not due any more
    t = ea.get_timer()
    assert t is not None and t > link.now
    link.run()
    assert bytes(dst.view) == data


def test_the_timers_cover_the_fifo():
    """The local ACK timeout (and a tail packet's age) counts from the wire: ``tx_hold``
    longer, as UET's, so no packet times out while still in its own port's FIFO."""
    (_, ea, qa, *_), (_, eb, qb, *_) = _connected(HOLD), _connected(0.0)
    ia, ib = ea._qp(qa).ini, eb._qp(qb).ini
    assert ia.rto == pytest.approx(ib.rto + HOLD) and ia.tx_hold == HOLD


def test_the_daemons_options_reach_the_engine_with_the_ports_bytes_per_frame():
    """The daemon passes ``tx_hold`` and ``frame_overhead`` (of its first address's
    family): MRC takes both, correcting the overhead to the family its EVs ride (STEV
    and SRv6: IPv6) and adding SRv6's outer header."""
    import random

    from emu.core.memory import MemoryTable

    class Ctx:
        def __init__(self, fmt: str) -> None:
            self.memory, self.rng = MemoryTable(random.Random(1)), random.Random(2)
            self.addresses = ["10.0.0.1", "fd00::1"]
            self.port, self.mtu = 4971, 9000
            self.options = {"tx_hold": HOLD, "frame_overhead": 42, "line_rate": RATE,
                            "ev_format": fmt}

    for fmt, overhead in (("udp", 42), ("stev", 62), ("srv6", 102)):
        e = create_engine(Ctx(fmt))
        assert e.lead is not None, fmt
        port = e.lead.ports[0]
        assert (port.lead_s, port.overhead, port.rate) == (HOLD, overhead, RATE), fmt


def test_a_held_engine_is_woken_once_per_half_fifo_not_per_packet(monkeypatch):
    """The timer that resumes a held QP comes when half the FIFO has drained: ~55
    packets a turn over the two planes here, so the first window (~1,800 packets, before
    any SACK clocks the sender) takes a few dozen wake-ups, not one per packet."""
    calls: list[float] = []
    real = MrcEngine.handle_timer

    def spy(self, now):
        calls.append(now)
        return real(self, now)

    monkeypatch.setattr(MrcEngine, "handle_timer", spy)
    _transfer(HOLD)
    assert 0 < len(calls) <= SIZE // PMTU // 50, len(calls)


def test_the_gate_keeps_room_for_the_largest_data_packet():
    """A full packet the gate makes room for is the largest MRC data datagram there is: a
    PMTU of payload in a WRITE_LAST with immediate (so an admitted packet always fits)."""
    link, ea, eb, qa, qb, src, dst, _ = mrc_pair(1, 4 * PMTU, pmtu=PMTU)
    eb.post_recv(qb, RecvWR(1))
    link.wire = []
    ea.post_send(qa, SendWR.write(1, [Sge(src.va, 4 * PMTU, src.lkey)], dst.va, dst.rkey,
                                  imm=7))
    link.run()
    assert max(len(d) for _, side, d, _, _ in link.wire if side == "a") == PMTU + DATA_HEADERS


def test_qps_sharing_the_ports_take_turns():
    """Two QPs of one NIC write 2 MiB each through the same two ports: the ports' room
    goes round, so both finish together rather than one after the other."""
    link, ea, _, src, dst, data = _connected(HOLD)
    half = SIZE // 2
    qps = []
    for _ in range(2):
        qa, qb = ea.create_qp(send_cq="a.s"), link.b.create_qp(send_cq="b.s")
        ia, ib = ea.query_qp(qa), link.b.query_qp(qb)
        ea.connect(qa, {**ib, "port": 4791})
        link.b.connect(qb, {**ia, "port": 4791})
        qps.append(qa)
    for i, qa in enumerate(qps):
        ea.post_send(qa, SendWR.write(i, [Sge(src.va + i * half, half, src.lkey)],
                                      dst.va + i * half, dst.rkey))
    done: dict[int, float] = {}
    while link.step():
        for wc in link.completions("a", "a.s"):
            done.setdefault(wc.wr_id, link.now)
    assert bytes(dst.view) == data and set(done) == {0, 1}
    first, last = sorted(done.values())
    assert first > 0.8 * last, done

# SPDX-License-Identifier: GPL-2.0-only
"""RoCE engine parts: wire layout vs the codec, QP states, timer codes (the sans-IO import
rule is the layer contract: tests/test_layers.py)."""

from __future__ import annotations

import pathlib
import random
from typing import Any

import pytest
from lossy_link import register

from emu.core.memory import MemoryTable
from emu.transports.base import Engine, VerbsError
from emu.transports.roce import QpState, RecvWR, RoceEngine, SendWR, Sge
from emu.transports.roce import packets as P
from emu.transports.roce.qp import ack_timeout, rnr_delay
from emu.wire.codec.roce import (
    AETH,
    BTH,
    CHAINS,
    CNP_OPCODE,
    IETH,
    OPERATIONS,
    RETH,
    TRANSPORT_PREFIX,
    AtomicAckETH,
    AtomicETH,
    CNPPadding,
    ImmDt,
    decode_packet,
    encode_packet,
)
from emu.wire.icrc import compute_icrc

ROOT = pathlib.Path(__file__).resolve().parents[3] / "emu"


def test_engine_implements_the_contract():
    assert issubclass(RoceEngine, Engine)
    e = RoceEngine(MemoryTable(random.Random(1)), random.Random(2))
    assert e.get_timer() is None and e.next_event() is None and e.datagrams_to_send(0) == []
    assert e.counters()["qps"] == 0


# -- our hot-path builder/parser vs the reference codec -----------------------------------


@pytest.mark.parametrize("opcode,ext,hdrs", [
    (P.SEND_ONLY_IMM, P.u32(0xCAFEBABE), [ImmDt(0xCAFEBABE)]),
    (P.WRITE_FIRST, P.reth(0x7F00_0000_1000, 0x1234, 5000), [RETH(0x7F00_0000_1000, 0x1234,
                                                                  5000)]),
    (P.WRITE_ONLY_IMM, P.reth(1, 2, 3) + P.u32(4), [RETH(1, 2, 3), ImmDt(4)]),
    (P.READ_RESP_FIRST, P.aeth(P.ack_syndrome(), 77), [AETH(P.ack_syndrome(), 77)]),
    (P.ATOMIC_ACK, P.aeth(P.ack_syndrome(), 9) + P.atomic_ack_eth(2**64 - 1),
     [AETH(P.ack_syndrome(), 9), AtomicAckETH(2**64 - 1)]),
    (P.CMP_SWAP, P.atomic_eth(8, 9, 10, 11), [AtomicETH(8, 9, 10, 11)]),
    (P.ACKNOWLEDGE, P.aeth(P.nak_syndrome(P.NAK_PSN_SEQ), 5),
     [AETH(P.nak_syndrome(P.NAK_PSN_SEQ), 5)]),
])
def test_packets_match_the_codec(opcode, ext, hdrs):
    payload = bytes(range(7))
    buf = P.build(opcode, 0xABCDEF, 0x123456, ext, payload if opcode < 0x11 else b"",
                  ackreq=1, se=1)
    ref = decode_packet(buf)
    assert (ref.bth.opcode, ref.bth.dqpn, ref.bth.psn, ref.bth.ackreq, ref.bth.solicited) == (
        opcode, 0xABCDEF, 0x123456, 1, 1)
    assert ref.headers == hdrs
    mine = P.parse(buf)
    assert (mine.opcode, mine.dqpn, mine.psn, mine.ackreq) == (opcode, 0xABCDEF, 0x123456, 1)
    assert bytes(mine.payload) == bytes(ref.payload)
    assert len(buf) % 4 == 0  # padded to 4 bytes before the ICRC


#: a header of each kind with distinct field values, and what the parser must read from it
_SAMPLES = {
    RETH: (RETH(0x7F00_0000_1000, 0x1234, 5000), {"va": 0x7F00_0000_1000, "rkey": 0x1234,
                                                  "dmalen": 5000}),
    AETH: (AETH(0x1F, 0xABCDE), {"syndrome": 0x1F, "msn": 0xABCDE}),
    ImmDt: (ImmDt(0xCAFEBABE), {"imm": 0xCAFEBABE}),
    IETH: (IETH(0x5151), {}),
    AtomicETH: (AtomicETH(0x1000, 0x77, 2**63 + 5, 9), {"va": 0x1000, "rkey": 0x77,
                                                        "swap_add": 2**63 + 5, "compare": 9}),
    AtomicAckETH: (AtomicAckETH(2**64 - 2), {"orig": 2**64 - 2}),
    CNPPadding: (CNPPadding(0, 0), {}),
}
_RC = sorted(TRANSPORT_PREFIX["RC"] | op for op in OPERATIONS)


def test_every_rc_opcode_is_parsed():
    assert len(_RC) == 23 and set(P._LAYOUT) == {*_RC, CNP_OPCODE}


@pytest.mark.parametrize("opcode", [*_RC, CNP_OPCODE], ids=hex)
def test_parser_reads_every_opcode_as_the_codec_lays_it_out(opcode):
    """The hot-path parser's layouts come from the codec's chains: a packet the codec
    encodes, with every extension header the opcode has, parses to the same fields."""
    chain = CHAINS[opcode]
    payload = b"" if opcode == CNP_OPCODE else bytes(range(7))
    bth = BTH(opcode=opcode, solicited=1, padcount=-len(payload) & 3, dqpn=0xABCDEF,
              ackreq=1, psn=0x123456)
    buf = encode_packet(bth, [_SAMPLES[h][0] for h in chain], payload)
    mine = P.parse(buf)
    assert (mine.opcode, mine.se, mine.dqpn, mine.ackreq, mine.psn) == (
        opcode, 1, 0xABCDEF, 1, 0x123456)
    for h in chain:
        for field, value in _SAMPLES[h][1].items():
            assert getattr(mine, field) == value, (h.__name__, field)
    assert bytes(mine.payload) == payload
    if ImmDt not in chain:
        assert mine.imm is None


def test_cnp_layout():
    buf = P.cnp(0x118)
    ref = decode_packet(buf)
    assert ref.bth.opcode == 0x81 and ref.bth.becn == 1 and ref.bth.dqpn == 0x118
    assert ref.headers == [CNPPadding(0, 0)]


def test_pseudo_header_icrc_is_the_real_icrc_over_an_ipv6_packet():
    """The test ICRC is emu.wire.icrc over a fixed IPv6/UDP header, nothing home-made."""
    import struct
    buf = P.build(P.SEND_ONLY, 5, 6, b"", b"payload!")
    P.seal(buf, P.pseudo_header_icrc)
    udp_len = 8 + len(buf)
    ip = struct.pack("!IHBB", 6 << 28, udp_len, 17, 64) + bytes(15) + b"\1" + bytes(15) + b"\2"
    udp = struct.pack("!HHHH", 0xC000, 4791, udp_len, 0)
    whole = ip + udp + bytes(buf)
    assert compute_icrc(whole) == struct.unpack("<I", buf[-4:])[0]
    assert P.icrc_ok(buf, P.pseudo_header_icrc)


# -- QP state machine and verbs errors ------------------------------------------------------


def test_qp_state_machine():
    e = RoceEngine(MemoryTable(random.Random(1)), random.Random(2))
    q = e.create_qp()
    assert e.qp_attr(q)[0] is QpState.RESET
    with pytest.raises(VerbsError):
        e.modify_qp(q, QpState.RTS)  # RESET -> RTS skips INIT/RTR
    with pytest.raises(VerbsError):
        e.post_send(q, SendWR.send(1, []))  # nothing posts in RESET
    e.modify_qp(q, "INIT")
    e.post_recv(q, RecvWR(1))  # receives may be posted from INIT on
    e.modify_qp(q, "RTR", dest_qp_num=5, rq_psn=10, dest_addr=("h2", 4791))
    with pytest.raises(VerbsError, match="RTR -> RTR"):
        e.modify_qp(q, timeout=3)  # as in IB: attributes alone may not change in RTR
    e.modify_qp(q, "RTS")
    with pytest.raises(VerbsError, match="pmtu"):
        e.modify_qp(q, pmtu=1500)
    with pytest.raises(VerbsError, match="unknown QP attribute"):
        e.modify_qp(q, mtu=1024)
    e.modify_qp(q, retry_cnt=3)
    assert e.qp_attr(q)[1].retry_cnt == 3
    with pytest.raises(VerbsError, match="RTS -> SQE"):
        e.modify_qp(q, "SQE")  # only the NIC enters SQE (and RC never does)
    e.modify_qp(q, "SQD")
    e.modify_qp(q, "RTS")
    e.modify_qp(q, "ERR")
    with pytest.raises(VerbsError):
        e.modify_qp(q, "RTS")
    e.modify_qp(q, "RESET")
    e.destroy_qp(q)
    with pytest.raises(VerbsError):
        e.post_recv(q, RecvWR(1))


def test_post_send_validation():
    mem = MemoryTable(random.Random(1))
    e = RoceEngine(mem, random.Random(2))
    q = e.create_qp(max_send_wr=1)
    e.connect(q, {"qpn": 5, "psn": 0, "address": "h2"})
    with pytest.raises(VerbsError, match="bad SGE"):
        e.post_send(q, SendWR.send(1, [Sge(0x1000, 10, 0xBAD)]))
    with pytest.raises(VerbsError, match="imm"):
        e.post_send(q, SendWR(1, SendWR.send(1, []).opcode, imm=5))
    e.post_send(q, SendWR.send(1, []))
    with pytest.raises(VerbsError, match="full"):
        e.post_send(q, SendWR.send(2, []))


def test_timer_codes():
    assert ack_timeout(0) is None  # infinite
    assert ack_timeout(14) == pytest.approx(4.096e-6 * 2**14)  # 67 ms
    assert rnr_delay(0) == pytest.approx(0.65536)
    assert rnr_delay(1) == pytest.approx(10e-6)
    assert rnr_delay(14) == pytest.approx(1.28e-3)


# -- the daemon-facing surface ---------------------------------------------------------------


class _Ctx:
    """Duck-typed stand-in for emu.nic.engines.EngineContext."""

    def __init__(self, mtu: int, options: dict | None = None) -> None:
        self.memory = MemoryTable(random.Random(1))
        self.rng = random.Random(2)
        self.addresses = ["fd00::1", "10.0.0.1"]
        self.port = 4791
        self.mtu = mtu
        self.options = options or {}


@pytest.mark.parametrize("mtu,pmtu", [(1500, 1024), (9000, 4096), (4000, 2048), (300, 256)])
def test_create_engine_factory_picks_pmtu_from_ip_mtu(mtu, pmtu):
    from emu.transports.roce import create_engine
    e = create_engine(_Ctx(mtu, {"line_rate": 25e9, "cc": None, "rto": 1}))  # unknown: ignored
    assert isinstance(e, RoceEngine) and e.line_rate == 25e9 and e.cc_name is None
    q = e.create_qp(pd=None, send_cq=1, recv_cq=2, attrs={"dscp": 10})
    info = e.query_qp(q)
    assert info == {"qpn": q, "psn": info["psn"], "pmtu": pmtu, "address": "fd00::1",
                    "port": 4791, "state": "RESET", "transport": "roce"}
    assert e.qp_attr(q)[1].dscp == 10


def test_connect_takes_the_peer_query_dict_and_the_smaller_pmtu():
    e = RoceEngine(MemoryTable(random.Random(1)), random.Random(2))
    q = e.create_qp()
    e.connect(q, {"qpn": 7, "psn": 99, "address": "fd00::2", "pmtu": 1024, "port": 5000})
    st, a = e.qp_attr(q)
    assert (st, a.dest_qp_num, a.rq_psn, a.dest_addr, a.pmtu) == (
        QpState.RTS, 7, 99, ("fd00::2", 5000), 1024)
    with pytest.raises(VerbsError, match="qpn, psn and address"):
        e.connect(e.create_qp(), {"qpn": 1})


def test_source_address_forms_are_normalised():
    """recvfrom may give a scoped or v4-mapped form of the peer's address: still the peer."""
    e = RoceEngine(MemoryTable(random.Random(1)), random.Random(2), cc=None)
    q = e.create_qp()
    e.connect(q, {"qpn": 7, "psn": 0, "address": "10.0.0.2"})
    e.post_recv(q, RecvWR(1))
    for i, src in enumerate([("::ffff:10.0.0.2", 4791, 0, 0), ("10.0.0.2", 1)]):
        e.receive_datagram(P.build(P.SEND_ONLY, q, i, ackreq=1), src, 0.0)
    e.receive_datagram(P.build(P.SEND_ONLY, q, 2), ("10.0.0.3", 4791), 0.0)
    assert e.counters()["rx_drop_wrong_source"] == 1
    assert e.counters().get("rx_out_of_sequence", 0) == 0


def test_a_destroyed_qp_lets_go_of_registered_memory_without_the_cyclic_collector(tmp_path):
    """A QP's work requests and the message it receives hold views of registered memory,
    and a QP and its halves form a reference cycle: destroy_qp must drop those views, so
    closing the region's buffer really unmaps it (in the NIC daemon, a closed client's
    16 MiB stayed mapped after every perf run until a full collection)."""
    import gc

    from emu.core.memory import Access, SharedBuffer

    mem = MemoryTable(random.Random(1))
    e = RoceEngine(mem, random.Random(2))
    buf = SharedBuffer.create(1 << 20, shm_dir=str(tmp_path))
    mr = mem.register(mem.alloc_pd(), buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE
                      | Access.REMOTE_READ)
    qa, qb = e.create_qp(), e.create_qp()
    e.connect(qa, {"qpn": qb, "psn": 0, "address": "h2"})
    e.connect(qb, {"qpn": qa, "psn": 0, "address": "h1"})
    e.post_recv(qb, RecvWR(7, [Sge(mr.va, 1 << 19, mr.lkey)]))
    e.post_send(qa, SendWR.write(1, [Sge(mr.va, 1 << 19, mr.lkey)], mr.va + (1 << 19),
                                 mr.rkey))
    e.datagrams_to_send(0.0)  # the WRITE under way: its WQE holds views of the region
    mm = buf._mmap
    gc.disable()
    try:
        e.destroy_qp(qa)
        e.destroy_qp(qb)
        mem.deregister(mr)
        buf.close()
        assert mm.closed, "a view of the region outlived the QPs that held it"
    finally:
        gc.enable()


def _paced_writer(burst: int = 16384):
    """An engine whose one QP has 1 MiB to WRITE at 1 Gb/s, cc off, as a daemon builds it
    (Gather bursts); the first drain at t = 0 spends the burst, then the pacer holds."""
    mem = MemoryTable(random.Random(1))
    e = RoceEngine(mem, random.Random(2), line_rate=1e9, cc=None, icrc=None, gather=True,
                   burst_bytes=burst)
    mr = register(mem, 2 << 20)
    q = e.create_qp(pmtu=4096)
    e.connect(q, {"qpn": 0x99, "psn": 0, "address": "10.0.0.2"})
    e.post_send(q, SendWR.write(1, [Sge(mr.va, 1 << 20, mr.lkey)], mr.va + (1 << 20),
                                mr.rkey))
    assert e.datagrams_to_send(0.0)
    due = e.get_timer()
    assert due is not None and 0 < due < 1e-3  # the pacer's timer: the QP waits for it
    return e, due


def test_a_pacer_served_later_than_its_credit_covers_is_overload():
    """A hardware rate limiter is never late. The pacer's saved credit (burst_bytes, here
    16 KiB = 131 µs at 1 Gb/s) absorbs a late daemon; beyond it the QP lost time, which
    counts as emulator overload (pacer_late, pacer_late_us) — unless the port held the
    engine's output meanwhile (port_held): then the QP waited for the port."""
    e, due = _paced_writer()
    e.handle_timer(due + 100e-6)  # late, but within the credit: nothing lost
    assert e.datagrams_to_send(due + 100e-6)
    assert e.counters().get("pacer_late", 0) == 0
    due = e.get_timer()
    e.handle_timer(due + 2e-3)  # 2 ms late: ~1.87 ms beyond the credit
    assert e.datagrams_to_send(due + 2e-3)
    c = e.counters()
    assert c["pacer_late"] == 1 and 1800 <= c["pacer_late_us"] <= 1900, c
    due = e.get_timer()
    e.port_held()  # the port, not the daemon, held the output meanwhile
    e.handle_timer(due + 2e-3)
    assert e.datagrams_to_send(due + 2e-3)
    assert e.counters()["pacer_late"] == 1
    due = e.get_timer()
    e.handle_timer(due)  # on time
    e.datagrams_to_send(due)
    assert e.counters()["pacer_late"] == 1


def _writer_at_line_rate(lead: int, overhead: int = 42, **cc: Any):
    """An engine as a daemon behind a paced 1 Gb/s port builds it (burst and lead of its
    2 ms FIFO, the port's IPv4 bytes per frame), DCQCN on; one QP with 4 MiB to WRITE."""
    mem = MemoryTable(random.Random(1))
    e = RoceEngine(mem, random.Random(2), line_rate=1e9, icrc=None, gather=True, runs=True,
                   burst_bytes=125_000, lead_bytes=lead, frame_overhead=overhead,
                   cc_params=cc or None)
    mr = register(mem, 8 << 20)
    q = e.create_qp(pmtu=4096)
    e.connect(q, {"qpn": 0x99, "psn": 0, "address": "10.0.0.2"})
    e.post_send(q, SendWR.write(1, [Sge(mr.va, 4 << 20, mr.lkey)], mr.va + (4 << 20),
                                mr.rkey))
    return e


def _frames(out) -> int:
    from emu.core.datagram import Run

    return sum(b.count if isinstance(b, Run) else 1 for b, _, _ in out)


def test_a_qp_at_line_rate_runs_ahead_into_the_port_and_is_served_per_half_lead():
    """At the line rate the QP's schedule is the port's: it may hand over ``lead`` ahead
    of it, and its timer comes when half of that has drained — one turn per ~15 packets
    at 1 Gb/s, not one per packet — while the bytes per second stay the line rate's,
    counted as the port counts them (frame bytes)."""
    frame = 4096 + 12 + 4 + 42  # BTH + ICRC + IPv4/UDP/Ethernet
    pkt_s = frame * 8 / 1e9
    e = _writer_at_line_rate(lead=250_000)  # 2 ms
    now, turns, sent = 0.0, 0, 0
    sent += _frames(e.datagrams_to_send(now))
    assert sent * pkt_s >= 2e-3  # the first turn fills the lead
    while now < 0.02:
        t = e.get_timer()
        assert t is not None and t - now >= 0.9e-3 - pkt_s, (now, t)  # ~ half the lead
        now = t
        e.handle_timer(now)
        n = _frames(e.datagrams_to_send(now))
        assert n >= 25  # ~1 ms of packets a turn
        sent += n
        turns += 1
    qp = next(iter(e._qps.values()))
    # never further ahead of the wire than its lead: no idle credit on top, which would
    # only overfill the port's FIFO
    assert qp.next_tx - now <= 2e-3 + pkt_s
    # the long-run rate is the line rate, in the port's frame bytes
    assert abs(qp.next_tx - sent * pkt_s) <= pkt_s
    assert e.counters().get("pacer_late", 0) == 0 and turns <= 25


def test_below_the_line_rate_the_qp_spaces_every_packet_itself():
    """A DCQCN cut takes the lead away: frames handed over early would reach the wire
    back to back, the burst a rate limiter exists to prevent."""
    # DCQCN's recovery slowed down, so that the rate stays cut through the test
    e = _writer_at_line_rate(lead=250_000, increase_period=1.0, byte_counter=1 << 40)
    e.datagrams_to_send(0.0)
    qp = next(iter(e._qps.values()))
    qp.cc.on_cnp(0.0)  # halve the rate
    assert qp.rate < qp.line_rate and qp.lead() == 0.0
    for _ in range(3):
        t = qp.next_tx  # the pacer's time for the next packet: no earlier
        assert not _frames(e.datagrams_to_send(t - 1e-6))
        e.handle_timer(t)
        assert _frames(e.datagrams_to_send(t)) == 1  # on schedule: one packet per turn
        assert qp.timers.get("pace") == qp.next_tx


def test_a_qp_running_ahead_has_no_credit_to_spend_when_served_late():
    """At the line rate a pacer served after its schedule has passed left the port
    without frames for the whole time: all of it is lost link time (pacer_late), not
    only what exceeds the idle credit (the rule below the line rate)."""
    e = _writer_at_line_rate(lead=250_000)
    e.datagrams_to_send(0.0)
    qp = next(iter(e._qps.values()))
    due = e.get_timer()
    e.handle_timer(due + 0.5e-3)  # late, but the FIFO still had ~0.5 ms: nothing lost
    e.datagrams_to_send(due + 0.5e-3)
    assert e.counters().get("pacer_late", 0) == 0
    due = e.get_timer()
    dry = qp.next_tx
    late = dry + 0.3e-3  # 0.3 ms after the port ran out: within the 1 ms idle credit
    e.handle_timer(late)
    e.datagrams_to_send(late)
    c = e.counters()
    assert c["pacer_late"] == 1 and 290 <= c["pacer_late_us"] <= 300, c


def test_a_qp_held_below_the_line_rate_is_judged_as_held_when_its_rate_recovers():
    """Held at a DCQCN rate (its next packet's own time, no lead), then the rate is back
    at the line rate by its turn: a turn 0.2 ms late is within the idle credit it was
    held with — the port stood idle between its packets by design — not pacer_late."""
    e = _writer_at_line_rate(lead=250_000, increase_period=1.0, byte_counter=1 << 40)
    e.datagrams_to_send(0.0)
    qp = next(iter(e._qps.values()))
    qp.cc.on_cnp(0.0)
    t = qp.next_tx
    e.handle_timer(t)
    e.datagrams_to_send(t)  # one packet at the cut rate; held for the next
    assert qp.pace_held and not qp.held_ahead
    qp.cc._rate = qp.cc.target = qp.cc.line_rate  # DCQCN recovered meanwhile
    late = qp.next_tx + 0.2e-3
    e.handle_timer(late)
    assert _frames(e.datagrams_to_send(late)) > 1  # back at the line rate: ahead again
    assert e.counters().get("pacer_late", 0) == 0

# SPDX-License-Identifier: GPL-2.0-only
"""emu-ref's MRC (the independent reference peer): its codecs against emu's codec and
scapy layers, two emu-ref QPs against each other over a seeded misbehaving in-memory
link, and — what proves the two codebases agree on the wire — an emu-ref QP against
emu's sans-IO :class:`~emu.transports.mrc.engine.MrcEngine` in both directions.

The tests may import emu to cross-check; the ``emuref`` package itself must not
(``test_emuref.py`` checks every module of it, these included).
"""

from __future__ import annotations

import heapq
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest
from lossy_link import register
from scapy.layers.inet import IP, UDP

from emu.core.cq import WcOpcode, WcStatus
from emu.core.datagram import expand
from emu.core.memory import MemoryTable
from emu.core.verbs import RecvWR, SendWR, Sge
from emu.nic.framing import RoceIcrc
from emu.switch.trim import trim as switch_trim
from emu.transports.base import Completion as EmuCompletion
from emu.transports.mrc import MrcEngine
from emu.wire import mrc as SM
from emu.wire import roce as SR
from emu.wire.codec import mrc as EM
from emu.wire.codec.roce import AETH, BTH, RETH, ImmDt, decode_packet, encode_packet
from emu.wire.icrc import verify_icrc
from emuref import mrc_wire as MW
from emuref.memory import Memory
from emuref.mrc_nic import MrcNic

A, B = "10.0.1.11", "10.0.1.12"
PORT = MW.UDP_PORT
EVS_A = list(range(50176, 50184))
EVS_B = list(range(50432, 50440))


# -- codecs ------------------------------------------------------------------------------


def _ip(body: bytes, src: str = A, dst: str = B, sport: int = 50177) -> bytes:
    """The IPv4 packet the kernel sends for ``body`` from an unconnected DF socket."""
    return bytes(IP(src=src, dst=dst, flags="DF", id=0) / UDP(sport=sport, dport=PORT) / body)


def _samples() -> list[MW.Packet]:
    return [
        MW.Packet(MW.WRITE_FIRST, 0xABCDEF, 0xFFFFFE, ackreq=True, rtx=True, rqmsn=7,
                  msn=0xBEEF, va=0x1122334455667788, rkey=0xDEADBEEF, dma_len=10000,
                  payload=bytes(range(256)) * 16),
        MW.Packet(MW.WRITE_LAST_IMM, 3, 5, ts=True, tx_timestamp=0x1234, tsr=1, msn=1,
                  va=0x1000, rkey=9, dma_len=5000, imm=0xCAFEF00D, payload=b"x" * 903),
        MW.Packet(MW.WRITE_ONLY, 3, 6, msn=2, va=0x2000, rkey=9, dma_len=1, payload=b"z"),
        MW.Packet(MW.TRANSPORT_ACK, 0x42, 0, syndrome=MW.NAK_REMOTE_ACCESS, aeth_msn=0x777),
        MW.Packet(MW.RELIABILITY_SACK, 0x42, 0x100, seth=MW.Seth(
            ev=0xD00D, cack_psn=0x100, sack_offset=-3, sack_bitmap=0x8000_0000_0000_0005,
            ack_psn_offset=-2, m=MW.M_SKIP_ONCE, pr=True, spdcid=0x1234, dpdcid=0x5678,
            cc_type=1, cc_flags=1, mpr=8, tx_timestamp=0x4321, ooo_count=0x7001, r_c=1,
            rcv_cwnd_pen=0x55, rcvd_bytes=0xABCDEF)),
        MW.Packet(MW.RELIABILITY_NACK, 0x42, 0x99, neth=MW.Neth(
            reason=MW.NACK_TRIMMED_LASTHOP, nack_psn=0x99, ev=0xFFFF0001, spdcid=1, dpdcid=2,
            vendor_info=3, cc_type=1, cc_flags=1, tx_timestamp=0xBEE)),
        MW.Packet(MW.RELIABILITY_PROBE, 0x42, 0x55, peth=MW.Peth(
            probe_id=0x77, spdcid=5, dpdcid=6, vendor_info=8, tx_timestamp=0x999, tsr=1)),
        MW.Packet(MW.ENDPOINT_REQUEST, MW.ENDPOINT_QPN, 0x1234, erth=MW.Erth(
            op=MW.ERTH_EV_PROBE, vendor_info=4, port_status_mask=0b1011, tx_timestamp=0x77)),
        MW.Packet(MW.ENDPOINT_RESPONSE, MW.ENDPOINT_QPN, 0x1234, eeth=MW.Eeth(
            op=1, status=1, vendor_info=2, request_id=0x1234, num_ports=3,
            port_status_mask=0b101, ev=0xC400, tx_timestamp=0x88, port_states=(2 << 64) | 0x121)),
    ]


@pytest.mark.parametrize("p", _samples(), ids=lambda p: f"{p.opcode:#x}")
def test_our_packets_decode_with_emus_codec_and_pass_its_icrc(p: MW.Packet) -> None:
    """Each MRC packet emu-ref builds, in the IP/UDP headers the kernel writes, passes
    emu's ICRC check (over the EV source port) and decodes with emu's struct codec to the
    same field values; scapy's generated layers dissect it too."""
    body = MW.encode(p, A, B, 50177)
    assert verify_icrc(_ip(body))
    assert RoceIcrc().check(body, A, 50177, B, PORT)
    e = decode_packet(body)
    assert (e.bth.opcode, e.bth.dqpn, e.bth.psn, e.bth.ackreq, e.bth.rtx, e.bth.ts) == \
        (p.opcode, p.dqpn, p.psn, p.ackreq, p.rtx, p.ts)
    assert bytes(e.payload) == p.payload
    h = {type(x).__name__: x for x in e.headers}
    if p.is_write:
        assert (h["METH"].rqmsn, h["METH"].msn) == (p.rqmsn, p.msn)
        assert (h["RETH"].va, h["RETH"].rkey, h["RETH"].dmalen) == (p.va, p.rkey, p.dma_len)
        assert ("ImmDt" in h) == (p.imm is not None)
        if p.imm is not None:
            assert h["ImmDt"].imm == p.imm
        if p.ts:
            assert (h["TSETH"].tx_timestamp, h["TSETH"].tsr, h["TSETH"].ftype) == \
                (p.tx_timestamp, p.tsr, 1)
    elif p.opcode == MW.TRANSPORT_ACK:
        assert (h["AETH"].syndrome, h["AETH"].msn) == (p.syndrome, p.aeth_msn)
    elif p.seth is not None:
        s, es, cc = p.seth, h["SETH"], h["CC_STATE"]
        assert (es.m, es.pr, es.ack_psn_offset, es.ev, es.spdcid, es.dpdcid, es.cack_psn,
                es.cc_type, es.cc_flags, es.mpr, es.sack_offset, es.sack_bitmap) == \
            (s.m, s.pr, s.ack_psn_offset, s.ev, s.spdcid, s.dpdcid, s.cack_psn, s.cc_type,
             s.cc_flags, s.mpr, s.sack_offset, s.sack_bitmap)
        assert (cc.tx_timestamp, cc.ooo_count, cc.r_c, cc.rcv_cwnd_pen, cc.rcvd_bytes) == \
            (s.tx_timestamp, s.ooo_count, s.r_c, s.rcv_cwnd_pen, s.rcvd_bytes)
        assert es.psns() == s.psns()
    elif p.neth is not None:
        n, en = p.neth, h["NETH"]
        assert (en.nack_reason, en.nack_psn, en.ev, en.spdcid, en.dpdcid, en.vendor_info,
                en.cc_type, en.cc_flags, en.tx_timestamp) == \
            (n.reason, n.nack_psn, n.ev, n.spdcid, n.dpdcid, n.vendor_info, n.cc_type,
             n.cc_flags, n.tx_timestamp)
    elif p.peth is not None:
        r, er = p.peth, h["PETH"]
        assert (er.probe_id, er.spdcid, er.dpdcid, er.vendor_info, er.tx_timestamp, er.tsr,
                er.ftype) == (r.probe_id, r.spdcid, r.dpdcid, r.vendor_info, r.tx_timestamp,
                              r.tsr, r.ftype)
    elif p.erth is not None:
        q, eq = p.erth, h["ERTH"]
        assert (eq.op, eq.vendor_info, eq.port_status_mask, eq.tx_timestamp, eq.ftype) == \
            (q.op, q.vendor_info, q.port_status_mask, q.tx_timestamp, q.ftype)
    else:
        assert p.eeth is not None
        q2, ee = p.eeth, h["EETH"]
        assert (ee.op, ee.status, ee.vendor_info, ee.request_id, ee.num_ports,
                ee.port_status_mask, ee.ev, ee.tx_timestamp, ee.port_states) == \
            (q2.op, q2.status, q2.vendor_info, q2.request_id, q2.num_ports,
             q2.port_status_mask, q2.ev, q2.tx_timestamp, q2.port_states)
    # the scapy layers (generated from emu's layout table) see the same headers
    sp = SR.BTH(body)
    assert sp[SR.BTH].opcode == p.opcode and sp[SR.BTH].psn == p.psn
    if p.is_write:
        assert (sp[SM.METH].msn, sp[SR.RETH].va, sp[SR.RETH].dmalen) == (p.msn, p.va, p.dma_len)
    if p.seth is not None:
        assert (sp[SM.SETH].cack_psn, sp[SM.SETH].sack_bitmap, sp[SM.SETH].ev) == \
            (p.seth.cack_psn, p.seth.sack_bitmap, p.seth.ev)
    if p.neth is not None:
        assert (sp[SM.NETH].nack_reason, sp[SM.NETH].nack_psn) == (p.neth.reason,
                                                                    p.neth.nack_psn)
    # and our own decoder gives the packet back
    assert MW.decode(body, A, B, 50177) == p


def test_emus_packets_decode_with_ours() -> None:
    """emu's encoder (sealed by its daemon's ICRC) → our decoder, one of each header."""
    framing = RoceIcrc()
    cases = [
        (BTH(opcode=EM.MRC_WRITE_ONLY_IMM, dqpn=77, psn=0xFFFFFF, ackreq=1, rtx=1, padcount=1),
         [EM.METH(rqmsn=3, msn=4), RETH(va=0xFEEDF00D, rkey=0x1234, dmalen=3),
          ImmDt(imm=0xABCD)], b"abc"),
        (BTH(opcode=EM.MRC_WRITE_MIDDLE, dqpn=77, psn=5, ts=1),
         [EM.METH(msn=9), EM.TSETH(tx_timestamp=0x3333, tsr=1),
          RETH(va=0x10, rkey=1, dmalen=9000)], b"q" * 4096),
        (BTH(opcode=EM.MRC_TRANSPORT_ACK, dqpn=77), [AETH(syndrome=0x1F, msn=0x0102)], b""),
        (BTH(opcode=EM.MRC_RELIABILITY_SACK, dqpn=77, psn=100),
         [EM.SETH(m=2, pr=1, ack_psn_offset=5, ev=0xE000, spdcid=1, dpdcid=2, cack_psn=100,
                  cc_type=1, cc_flags=1, mpr=16, sack_offset=1, sack_bitmap=0b1010),
          EM.CC_STATE(tx_timestamp=7, ooo_count=3, rcvd_bytes=99)], b""),
        (BTH(opcode=EM.MRC_RELIABILITY_NACK, dqpn=77, psn=12),
         [EM.NETH(nack_reason=EM.NACK_TRIMMED, ev=0xE001, nack_psn=12, tx_timestamp=4)], b""),
        (BTH(opcode=EM.MRC_RELIABILITY_PROBE, dqpn=77, psn=13),
         [EM.PETH(probe_id=9, spdcid=3, dpdcid=4, tx_timestamp=5)], b""),
        (BTH(opcode=EM.MRC_ENDPOINT_REQUEST, dqpn=2, psn=0x4444),
         [EM.ERTH(op=0, vendor_info=1, port_status_mask=0b11)], b""),
        (BTH(opcode=EM.MRC_ENDPOINT_RESPONSE, dqpn=2, psn=0x4444),
         [EM.EETH(op=0, status=0, request_id=0x4444, num_ports=2, port_status_mask=3,
                  ev=0xE002, port_states=0x11)], b""),
    ]
    for bth, hdrs, payload in cases:
        buf = encode_packet(bth, hdrs, payload)
        framing.seal(buf, B, 0xE000, A, PORT)
        p = MW.decode(bytes(buf), B, A, 0xE000)
        assert (p.opcode, p.dqpn, p.psn, p.ackreq, p.rtx, p.ts) == \
            (bth.opcode, bth.dqpn, bth.psn, bool(bth.ackreq), bool(bth.rtx), bool(bth.ts))
        assert p.payload == payload
        h = {type(x).__name__: x for x in hdrs}
        if "METH" in h:
            assert (p.rqmsn, p.msn, p.va, p.rkey, p.dma_len) == (
                h["METH"].rqmsn, h["METH"].msn, h["RETH"].va, h["RETH"].rkey,
                h["RETH"].dmalen)
            assert p.imm == (h["ImmDt"].imm if "ImmDt" in h else None)
            if "TSETH" in h:
                assert (p.tx_timestamp, p.tsr) == (0x3333, 1)
        if "AETH" in h:
            assert (p.syndrome, p.aeth_msn) == (0x1F, 0x0102)
        if "SETH" in h:
            assert p.seth is not None
            s = p.seth
            assert (s.m, s.pr, s.ack_psn_offset, s.ev, s.cack_psn, s.mpr, s.sack_offset,
                    s.sack_bitmap, s.cc_flags, s.tx_timestamp, s.ooo_count, s.rcvd_bytes) == \
                (2, True, 5, 0xE000, 100, 16, 1, 0b1010, 1, 7, 3, 99)
            assert s.psns() == [102, 104]
        if "NETH" in h:
            assert p.neth is not None and (p.neth.reason, p.neth.ev, p.neth.nack_psn,
                                           p.neth.tx_timestamp) == (1, 0xE001, 12, 4)
        if "PETH" in h:
            assert p.peth is not None and (p.peth.probe_id, p.peth.spdcid, p.peth.dpdcid,
                                           p.peth.tx_timestamp, p.peth.ftype) == (9, 3, 4, 5, 1)
        if "ERTH" in h:
            assert p.erth is not None and (p.erth.op, p.erth.vendor_info,
                                           p.erth.port_status_mask) == (0, 1, 3)
        if "EETH" in h:
            assert p.eeth is not None and (p.eeth.request_id, p.eeth.num_ports, p.eeth.ev,
                                           p.eeth.port_states) == (0x4444, 2, 0xE002, 0x11)
        # one flipped bit breaks the ICRC
        bad = bytearray(buf)
        bad[13] ^= 1
        with pytest.raises(MW.WireError, match="ICRC"):
            MW.decode(bytes(bad), B, A, 0xE000)


def test_garbage_is_counted_not_raised() -> None:
    nic = MrcNic(B, Memory(), random.Random(1), evs=EVS_B)
    junk = [b"", b"\xc6" * 5, bytes(20), b"\xdc" + bytes(40),
            MW.encode(MW.Packet(MW.WRITE_ONLY, 99, 1, payload=b"x", dma_len=1), A, B, 1)[:20],
            MW.encode(MW.Packet(MW.TRANSPORT_ACK, 12345, 0), A, B, 50000)]
    for j in junk:
        nic.receive_datagram(j, A, 50000, 0.0)
    nic.receive_datagram(bytes([0x42]) + bytes(30), A, 50000, 0.0, tos=30 << 2)
    c = nic.counters()
    assert c["rx_datagrams"] == 7
    assert sum(v for k, v in c.items() if k.startswith("rx_drop_")) == 7


def test_mutated_packets_never_raise() -> None:
    """Every byte of valid packets flipped at random, delivered as trimmed (no ICRC
    check, so the mutations reach the QP) and with a made-good ICRC: counted, not raised."""
    a, b, qa, qb = _ref_pair(11)
    b.memory.register(0x77, 0, bytearray(1 << 16))
    rnd = random.Random(11)
    base = [MW.encode(p, A, B, 50177) for p in _samples()]
    base += [MW.encode(MW.Packet(op, qb.qpn, qa.next_psn + k, msn=k % 3, va=k * 1024,
                                 rkey=0x77, dma_len=3000, imm=5, payload=b"p" * 1024), A, B,
                       50177) for k, op in enumerate(sorted(MW.WRITE_OPS))]
    for i in range(3000):
        d = bytearray(rnd.choice(base))
        for _ in range(rnd.randrange(1, 4)):
            d[rnd.randrange(len(d))] = rnd.randrange(256)
        if i % 2:
            d = bytearray(d[:rnd.randrange(len(d) + 1)])
        body = bytes(d[:-4]) + MW.icrc(A, B, 50177, PORT, bytes(d[:-4])) if len(d) > 16 \
            else bytes(d)
        b.receive_datagram(body, A, 50177, i * 1e-4, tos=(30 << 2) if i % 3 == 0 else 0)
        b.datagrams_to_send(i * 1e-4)
        t = b.get_timer()
        if t is not None and t <= i * 1e-4:
            b.handle_timer(i * 1e-4)
    assert b.counters()["rx_datagrams"] == 3000


# -- an in-memory wire ------------------------------------------------------------------


class Wire:
    """Two endpoints joined by a seeded, misbehaving wire with a hand clock. An endpoint
    is (``send(now)`` → [(udp payload, sport, dport, tos)], ``recv(data, sport, dport,
    now, tos)``, ``timer()``, ``fire(now)``); ``cut`` decides per datagram whether the
    "switch" trims it (IPv4, through emu's real trimming code); ``lossy`` which datagrams
    the ``loss`` dice apply to (default: all); ``drop`` loses chosen ones; ``mark``
    CE-marks chosen write packets (``(side, data, tos)``: a switch marks only ECT ones)."""

    def __init__(self, ends: dict[str, tuple[Callable, Callable, Callable, Callable]],
                 addrs: dict[str, str], seed: int = 1, *, loss: float = 0.0,
                 reorder: float = 0.0, dup: float = 0.0,
                 cut: Callable[[str, bytes], bool] | None = None,
                 drop: Callable[[str, bytes], bool] | None = None,
                 lossy: Callable[[str, bytes], bool] | None = None,
                 mark: Callable[[str, bytes, int], bool] | None = None) -> None:
        self.ends, self.addrs = ends, addrs
        self.rng = random.Random(seed)
        self.loss, self.reorder, self.dup, self.cut, self.drop = loss, reorder, dup, cut, drop
        self.lossy, self.mark = lossy, mark
        self.now = 0.0
        self.q: list[tuple[float, int, str, bytes, int, int, int]] = []
        self.seq = 0
        self.dropped = self.trimmed = self.marked = 0
        self.sent: list[tuple[str, bytes, int]] = []

    def _pump(self) -> bool:
        moved = False
        for side, (send, _, _, _) in self.ends.items():
            to = "b" if side == "a" else "a"
            for data, sport, dport, tos in send(self.now):
                moved = True
                self.sent.append((side, data, sport))
                r = self.rng
                lose = r.random() < self.loss and (self.lossy is None or self.lossy(side, data))
                if lose or (self.drop is not None and self.drop(side, data)):
                    self.dropped += 1
                    continue
                if self.cut is not None and self.cut(side, data):
                    ip = _ip(data, self.addrs[side], self.addrs[to], sport)
                    ip = ip[:22] + struct.pack("!H", dport) + ip[24:]
                    t = switch_trim(ip, 30)
                    if t is not None:
                        data, tos = bytes(t[28:]), t[1]
                        self.trimmed += 1
                if self.mark is not None and data[0] in MW.WRITE_OPS and \
                        self.mark(side, data, tos):
                    tos |= 3  # ECN CE
                    self.marked += 1
                at = self.now + 5e-6
                if r.random() < self.reorder:
                    at += 50e-6 * r.random()
                for k in range(2 if r.random() < self.dup else 1):
                    heapq.heappush(self.q, (at + k * 1e-6, self.seq, to, data, sport, dport,
                                            tos))
                    self.seq += 1
        return moved

    def run(self, done: Callable[[], bool], limit: float = 60.0) -> None:
        for _ in range(2_000_000):
            self._pump()
            if done() and not self.q:
                return
            cand = [t for t in (e[2]() for e in self.ends.values()) if t is not None]
            if self.q:
                cand.append(self.q[0][0])
            assert cand, "both ends idle with work outstanding"
            self.now = max(self.now, min(cand))
            assert self.now < limit, "no progress"
            while self.q and self.q[0][0] <= self.now:
                _, _, to, data, sport, dport, tos = heapq.heappop(self.q)
                self.ends[to][1](data, sport, dport, self.now, tos)
            for e in self.ends.values():
                t = e[2]()
                if t is not None and t <= self.now:
                    e[3](self.now)
        raise AssertionError("no quiescence")


def ref_end(nic: MrcNic) -> tuple[Callable, Callable, Callable, Callable]:
    def send(now: float) -> list[tuple[bytes, int, int, int]]:
        return [(d, sport, dport, 0) for d, _, dport, sport in nic.datagrams_to_send(now)]

    def recv(data: bytes, sport: int, dport: int, now: float, tos: int) -> None:
        src = A if nic.local == B else B
        nic.receive_datagram(data, src, sport, now, dport=dport, tos=tos)

    return send, recv, nic.get_timer, nic.handle_timer


def _ref_pair(seed: int = 1, pmtu: int = 1024) -> tuple[MrcNic, MrcNic, Any, Any]:
    ma, mb = Memory(), Memory()
    a = MrcNic(A, ma, random.Random(seed), evs=EVS_A, pmtu=pmtu, mpr=256, rto=0.01)
    b = MrcNic(B, mb, random.Random(seed + 1), evs=EVS_B, pmtu=pmtu, mpr=256, rto=0.01)
    qa, qb = a.create_qp(), b.create_qp()
    qa.connect(B, PORT, qb.qpn, qb.next_psn, qb.mpr)
    qb.connect(A, PORT, qa.qpn, qa.next_psn, qa.mpr)
    return a, b, qa, qb


def _every(n: int) -> Callable[[str, bytes], bool]:
    """Trim every ``n``-th data packet A sends (its first 400)."""
    count = {"n": 0}

    def cut(side: str, data: bytes) -> bool:
        if side != "a" or data[0] not in MW.WRITE_OPS or count["n"] >= 400:
            return False
        count["n"] += 1
        return count["n"] % n == 0

    return cut


@pytest.mark.parametrize("seed,loss,reorder,dup,trim", [
    (1, 0.0, 0.0, 0.0, False), (2, 0.03, 0.0, 0.0, False), (3, 0.0, 0.3, 0.0, False),
    (4, 0.0, 0.0, 0.3, False), (5, 0.0, 0.0, 0.0, True), (6, 0.02, 0.2, 0.05, True)])
def test_two_emuref_qps_byte_exact_through_a_bad_wire(seed: int, loss: float, reorder: float,
                                                      dup: float, trim: bool) -> None:
    a, b, qa, qb = _ref_pair(seed)
    rnd = random.Random(seed)
    region = bytearray(1 << 20)
    b.memory.register(0x77, 0x10000, region)
    data = rnd.randbytes(1 << 20)
    for i in range(4):  # four 256 KiB WRITEs, the last three with immediates
        off = i << 18
        qa.post_write(i, memoryview(data)[off:off + (1 << 18)], 0x10000 + off, 0x77,
                      imm=None if i == 0 else 0xA0 + i)
    for j in range(3):
        qb.post_recv(100 + j)
    w = Wire({"a": ref_end(a), "b": ref_end(b)}, {"a": A, "b": B}, seed, loss=loss,
             reorder=reorder, dup=dup, cut=_every(10) if trim else None)
    w.run(lambda: sum(c.op == "WRITE" for c in a.completions) == 4)
    assert region == data
    assert [(c.wr_id, c.status) for c in a.completions] == [(i, "SUCCESS") for i in range(4)]
    assert [(c.wr_id, c.imm, c.length) for c in b.completions] == [
        (100 + j, 0xA1 + j, 1 << 18) for j in range(3)]
    ca, cb = a.counters(), b.counters()
    assert cb["tx_sacks"] >= 1024 and cb["rx_drop_icrc"] == 0
    if loss:
        assert ca["tx_retransmits"] > 0
    if dup:
        assert cb["rx_duplicate"] > 0
    if reorder:
        assert cb["rx_ooo"] > 0
    if trim and not dup:
        assert w.trimmed > 0 and cb["rx_trimmed"] == w.trimmed == cb["tx_nacks"]
        assert ca["retx_trim"] == w.trimmed and cb["rx_trimmed_dscp"] == w.trimmed
    elif trim:  # a trimmed packet's copy is NACKed too (or SACKed, if the resend won)
        assert cb["rx_trimmed"] > w.trimmed > 0 and ca["retx_trim"] > 0
    # sprayed: every EV carried data
    evs = {sport for side, d, sport in w.sent if side == "a" and d[0] in MW.WRITE_OPS}
    assert evs == set(EVS_A)


def test_a_short_datagram_is_trimmed_even_without_the_dscp() -> None:
    """A datagram shorter than its opcode and RETH say (the payload cut, the ICRC made
    good again, but the DSCP lost on the way) is NACKed TRIMMED like a marked one."""
    a, b, qa, qb = _ref_pair(9)
    region = bytearray(64 * 1024)
    b.memory.register(0x77, 0, region)
    data = random.Random(9).randbytes(len(region))
    qa.post_write(1, data, 0, 0x77)
    send_b, recv_b, timer_b, fire_b = ref_end(b)

    def recv_without_dscp(d: bytes, sport: int, dport: int, now: float, tos: int) -> None:
        recv_b(d, sport, dport, now, 0)

    w = Wire({"a": ref_end(a), "b": (send_b, recv_without_dscp, timer_b, fire_b)},
             {"a": A, "b": B}, cut=_every(5))
    w.run(lambda: len(a.completions) == 1)
    assert region == data and a.completions[0].status == "SUCCESS"
    cb = b.counters()
    assert cb["rx_trimmed_short"] == w.trimmed > 0 and cb["rx_trimmed_dscp"] == 0


def test_a_bad_key_is_transport_naked_and_nothing_is_written() -> None:
    a, b, qa, qb = _ref_pair(3)
    target = bytearray(b"T" * 4096)
    b.memory.register(0x77, 0x5000, target)
    qa.post_write(1, b"w" * 4096, 0x5000, 0x77 ^ 0x5A5A)
    qa.post_write(2, b"v" * 10, 0x5000, 0x77)  # flushed: the QP is in error
    w = Wire({"a": ref_end(a), "b": ref_end(b)}, {"a": A, "b": B})
    w.run(lambda: len(a.completions) == 2)
    assert [(c.wr_id, c.status) for c in a.completions] == [(1, "REM_ACCESS_ERR"),
                                                           (2, "WR_FLUSH_ERR")]
    assert target == b"T" * 4096
    assert b.counters()["tx_naks"] == 1
    naks = [d for s, d, _ in w.sent if s == "b" and d[0] == MW.TRANSPORT_ACK]
    assert naks and MW.decode(naks[0], B, A, EVS_B[0]).syndrome == MW.NAK_REMOTE_ACCESS


def test_a_lost_transport_ack_is_asked_for_again() -> None:
    """Every packet SACKed, the AETH lost: the requester resends the last packet (RTX,
    AckReq) and the responder, seeing a duplicate of a finished message, ACKs again."""
    a, b, qa, qb = _ref_pair(4)
    qb.ack_repeats = 0  # the responder's own repeat would hide the requester's asking
    b.memory.register(0x77, 0, bytearray(8192))
    qa.post_write(1, b"a" * 8192, 0, 0x77)
    lost = {"n": 0}

    def drop(side: str, data: bytes) -> bool:
        if side == "b" and data[0] == MW.TRANSPORT_ACK and lost["n"] == 0:
            lost["n"] = 1
            return True
        return False

    w = Wire({"a": ref_end(a), "b": ref_end(b)}, {"a": A, "b": B}, drop=drop)
    w.run(lambda: len(a.completions) == 1)
    assert a.completions[0].status == "SUCCESS"
    assert a.counters()["ack_asks"] == 1 and b.counters()["ack_repeats"] == 1


def _emu_write_losing_its_transport_ack(ack_repeats: bool):
    """emu requester -> emu-ref responder, an 8 KiB WRITE whose one transport ACK is lost;
    ``ack_repeats``: emu-ref's responder may say its last ACK again when emu goes quiet."""
    nic, qa, eng, qb, mem = _cross(9)
    if not ack_repeats:
        qa.ack_repeats = 0
    src = register(mem, 8192)
    nic.memory.register(0x99, 0, bytearray(8192))
    eng.post_send(qb, SendWR.write(1, [Sge(src.va, 8192, src.lkey)], 0, 0x99))
    events: list = []
    poll = _collect(eng, events)
    lost = {"n": 0}

    def drop(side: str, data: bytes) -> bool:
        if side == "a" and data[0] == MW.TRANSPORT_ACK and not lost["n"]:
            lost["n"] = 1
            return True
        return False

    w = Wire({"a": ref_end(nic), "b": emu_end(eng, B, A)}, {"a": A, "b": B}, drop=drop)
    w.run(lambda: poll() and len(_emu_wcs(events)) == 1, limit=5.0)
    assert [(c.wr_id, c.status) for c in _emu_wcs(events)] == [(1, WcStatus.SUCCESS)]
    assert lost["n"] == 1
    return nic, eng


def test_emuref_repeats_its_last_transport_ack_for_a_quiet_emu() -> None:
    """emu-ref's responder says its last transport ACK again when the requester goes
    quiet, so a WRITE whose ACK was lost completes whatever the requester does."""
    nic, _ = _emu_write_losing_its_transport_ack(ack_repeats=True)
    assert nic.counters()["ack_repeats"] >= 1


def test_a_probe_is_answered_with_a_sack_pr() -> None:
    a, b, qa, qb = _ref_pair(5)
    probe = MW.encode(MW.Packet(MW.RELIABILITY_PROBE, qb.qpn, 0, peth=MW.Peth(
        probe_id=3, tx_timestamp=0x1357)), A, B, 50999)
    b.receive_datagram(probe, A, 50999, 0.0)
    (out,) = b.datagrams_to_send(0.0)
    p = MW.decode(out[0], B, A, out[3])
    assert p.opcode == MW.RELIABILITY_SACK and p.seth is not None
    assert (p.seth.pr, p.seth.ev, p.seth.tx_timestamp, out[1], out[2]) == (
        True, 50999, 0x1357, A, PORT)


# -- emu-ref against emu's MRC engine ---------------------------------------------------


def emu_end(eng: MrcEngine, local: str, peer: str) -> tuple[Callable, Callable, Callable,
                                                              Callable]:
    """emu's sans-IO engine on the wire: its datagrams sealed with its daemon's ICRC code
    (the engine leaves the slot empty), ours checked with it before emu reads them."""
    framing = RoceIcrc()

    def send(now: float) -> list[tuple[bytes, int, int, int]]:
        out = []
        for d, addr, meta in expand(eng.datagrams_to_send(now)):
            buf = bytearray(d)
            framing.seal(buf, local, meta.entropy, addr[0], addr[1])
            out.append((bytes(buf), meta.entropy, addr[1], meta.dscp << 2 | meta.ecn))
        return out

    def recv(data: bytes, sport: int, dport: int, now: float, tos: int) -> None:
        assert framing.check(data, peer, sport, local, dport), "emu-ref sent a bad ICRC"
        eng.receive_datagram(data, (peer, sport), now, ecn=tos & 3,
                             trimmed=tos >> 2 in (30, 31))

    return send, recv, eng.get_timer, eng.handle_timer


def _cross(seed: int, pmtu: int = 1024, m_field: str = "skip"
           ) -> tuple[MrcNic, Any, MrcEngine, int, MemoryTable]:
    nic = MrcNic(A, Memory(), random.Random(seed), evs=EVS_A, pmtu=pmtu, mpr=256, rto=0.01,
                 m_field=m_field)
    qa = nic.create_qp()
    mem = MemoryTable(random.Random(seed))
    eng = MrcEngine(mem, random.Random(seed + 1), local_addr=(B, PORT), line_rate=10e9,
                    base_rtt=20e-6, pmtu=pmtu, timeout=10)
    qb = eng.create_qp(send_cq="s", recv_cq="r")
    ib = eng.query_qp(qb)
    qa.connect(B, int(ib["port"]), qb, int(ib["psn"]), int(ib["mpr"]))
    eng.connect(qb, {"qpn": qa.qpn, "psn": qa.next_psn, "address": A, "port": PORT,
                     "mpr": qa.mpr, "pmtu": pmtu})
    return nic, qa, eng, qb, mem


def _emu_wcs(events: list) -> list:
    return [e.wc for e in events if isinstance(e, EmuCompletion)]


def _collect(eng: MrcEngine, into: list) -> Callable[[], bool]:
    def poll() -> bool:
        while (ev := eng.next_event()) is not None:
            into.append(ev)
        return True
    return poll


def _not_ack(side: str, data: bytes) -> bool:
    """The transport ACK is kept off the loss dice where emu is the requester: emu has no
    way to ask for a lost one again (test_emu_requester_recovers_a_lost_transport_ack)."""
    return data[0] != MW.TRANSPORT_ACK


@pytest.mark.parametrize("seed,loss,reorder,dup,trim", [
    (1, 0.0, 0.0, 0.0, False), (2, 0.03, 0.2, 0.05, False), (3, 0.0, 0.0, 0.0, True),
    (4, 0.02, 0.3, 0.0, True)])
def test_emuref_writes_into_emu(seed: int, loss: float, reorder: float, dup: float,
                                trim: bool) -> None:
    """emu-ref requester → emu responder: WRITEs and WRITEs with immediate land
    byte-exact, immediates complete at emu in order, emu-ref completes from emu's ACKs."""
    nic, qa, eng, qb, mem = _cross(seed)
    dst = register(mem, 1 << 20)
    data = random.Random(seed).randbytes(1 << 20)
    for j in range(3):
        eng.post_recv(qb, RecvWR(100 + j))
    for i in range(4):
        off = i << 18
        qa.post_write(i, data[off:off + (1 << 18)], dst.va + off, dst.rkey,
                      imm=None if i == 0 else 0xB0 + i)
    events: list = []
    poll = _collect(eng, events)
    w = Wire({"a": ref_end(nic), "b": emu_end(eng, B, A)}, {"a": A, "b": B}, seed,
             loss=loss, reorder=reorder, dup=dup, cut=_every(7) if trim else None)
    w.run(lambda: poll() and len(nic.completions) == 4)
    assert bytes(dst.view) == data
    assert [(c.wr_id, c.status) for c in nic.completions] == [(i, "SUCCESS") for i in range(4)]
    wcs = _emu_wcs(events)
    assert [(c.wr_id, c.imm, c.byte_len, c.opcode) for c in wcs] == [
        (100 + j, 0xB1 + j, 1 << 18, WcOpcode.RECV_RDMA_WITH_IMM) for j in range(3)]
    c = eng.counters()
    assert c["rx_drop_malformed"] == 0 and c["tx_sacks"] >= 1024
    if trim:  # each trim NACKed; resent unless a spurious resend's original was SACKed
        cn = nic.counters()
        assert c["rx_trimmed"] == w.trimmed > 0
        assert cn["retx_trim"] + cn["rx_nack_stale"] == cn["rx_nacks"] and cn["retx_trim"] > 0
        assert cn["rx_nacks"] == w.trimmed or loss  # a NACK may be lost
    if loss:
        assert nic.counters()["tx_retransmits"] > 0


@pytest.mark.parametrize("seed,loss,reorder,dup,trim", [
    (1, 0.0, 0.0, 0.0, False), (2, 0.03, 0.2, 0.05, False), (3, 0.0, 0.0, 0.0, True),
    (4, 0.02, 0.3, 0.0, True)])
def test_emu_writes_into_emuref(seed: int, loss: float, reorder: float, dup: float,
                                trim: bool) -> None:
    """emu requester → emu-ref responder: emu's sprayed WRITEs land byte-exact, our SACKs
    release them, our NACK TRIMMED makes it resend, our AETH completes them."""
    nic, qa, eng, qb, mem = _cross(seed)
    src = register(mem, 1 << 20)
    data = random.Random(seed).randbytes(1 << 20)
    src.view[:] = data
    region = bytearray(1 << 20)
    nic.memory.register(0x99, 0x40000, region)
    for j in range(3):
        qa.post_recv(200 + j)
    for i in range(4):
        off = i << 18
        eng.post_send(qb, SendWR.write(i, [Sge(src.va + off, 1 << 18, src.lkey)],
                                       0x40000 + off, 0x99, imm=None if i == 0 else 0xC0 + i))
    events: list = []
    poll = _collect(eng, events)
    every = _every(7)
    w = Wire({"a": ref_end(nic), "b": emu_end(eng, B, A)}, {"a": A, "b": B}, seed,
             loss=loss, reorder=reorder, dup=dup, lossy=_not_ack,
             cut=(lambda s, d: s == "b" and every("a", d)) if trim else None)
    w.run(lambda: poll() and len(_emu_wcs(events)) == 4)
    assert region == data
    wcs = _emu_wcs(events)
    assert [(c.wr_id, c.status) for c in wcs] == [(i, WcStatus.SUCCESS) for i in range(4)]
    assert [(c.wr_id, c.imm, c.length) for c in nic.completions] == [
        (200 + j, 0xC1 + j, 1 << 18) for j in range(3)]
    cn = nic.counters()
    assert cn["rx_drop_icrc"] == 0 and cn["rx_drop_cut"] == 0
    evs = {sport for side, d, sport in w.sent if side == "b" and d[0] in MW.WRITE_OPS}
    assert len(evs) > 8  # emu sprays over its EV set
    if trim:  # NACKed, or SACKed again when a spurious resend was cut
        assert w.trimmed > 0 and cn["tx_nacks"] + cn["rx_trimmed_dup"] == w.trimmed
        assert 0 < eng.counters()["retx_trim"] <= cn["tx_nacks"]
        assert eng.counters()["retx_trim"] == cn["tx_nacks"] or loss  # a NACK may be lost
    if loss:
        assert eng.counters()["tx_retransmits"] > 0


def test_bad_key_both_ways() -> None:
    """A WRITE with a key the responder never gave completes REM_ACCESS_ERR at the
    requester, through the AETH NAK, in both directions; nothing is written."""
    nic, qa, eng, qb, mem = _cross(7)
    dst = register(mem, 4096)
    dst.view[:] = b"E" * 4096
    qa.post_write(1, b"x" * 4096, dst.va, dst.rkey ^ 0x5A5A)
    region = bytearray(b"R" * 4096)
    nic.memory.register(0x99, 0x8000, region)
    src = register(mem, 4096)
    eng.post_send(qb, SendWR.write(5, [Sge(src.va, 4096, src.lkey)], 0x8000, 0x99 ^ 0x5A5A))
    events: list = []
    poll = _collect(eng, events)
    w = Wire({"a": ref_end(nic), "b": emu_end(eng, B, A)}, {"a": A, "b": B})
    w.run(lambda: poll() and len(nic.completions) == 1 and len(_emu_wcs(events)) == 1)
    assert [(c.wr_id, c.status) for c in nic.completions] == [(1, "REM_ACCESS_ERR")]
    assert [(c.wr_id, c.status) for c in _emu_wcs(events)] == [(5, WcStatus.REM_ACCESS_ERR)]
    assert bytes(dst.view) == b"E" * 4096 and region == b"R" * 4096


def test_emu_answers_our_probe_and_endpoint_request() -> None:
    nic, qa, eng, qb, mem = _cross(8)
    framing = RoceIcrc()
    peth = MW.Peth(probe_id=3, spdcid=qa.qpn & 0xFFFF, dpdcid=qb & 0xFFFF, tx_timestamp=0x2468)
    probe = MW.encode(MW.Packet(MW.RELIABILITY_PROBE, qb, 0, peth=peth), A, B, EVS_A[3])
    eng.receive_datagram(probe, (A, EVS_A[3]), 0.0)
    req = MW.encode(MW.Packet(MW.ENDPOINT_REQUEST, MW.ENDPOINT_QPN, 0x77, erth=MW.Erth(
        op=MW.ERTH_PORT_STATUS_UPDATE, port_status_mask=1)), A, B, EVS_A[0])
    eng.receive_datagram(req, (A, EVS_A[0]), 0.0)
    got = {}
    for d, addr, meta in expand(eng.datagrams_to_send(0.0)):
        buf = bytearray(d)
        framing.seal(buf, B, meta.entropy, addr[0], addr[1])
        p = MW.decode(bytes(buf), B, A, meta.entropy, addr[1])
        got[p.opcode] = p
    s = got[MW.RELIABILITY_SACK].seth
    assert s is not None and (s.pr, s.ev, s.tx_timestamp) == (True, EVS_A[3], 0x2468)
    e = got[MW.ENDPOINT_RESPONSE].eeth
    assert e is not None and (e.request_id, e.status) == (0x77, MW.EETH_OK)
    # and ours answers emu's endpoint request the same way
    erq = bytearray(encode_packet(BTH(opcode=EM.MRC_ENDPOINT_REQUEST, dqpn=2, psn=0x55),
                                  [EM.ERTH(op=0, port_status_mask=1)]))
    framing.seal(erq, B, PORT, A, PORT)
    nic.receive_datagram(bytes(erq), B, PORT, 0.0)
    (d, to, dport, sport), = nic.datagrams_to_send(0.0)
    assert framing.check(d, A, sport, B, dport)
    r = decode_packet(d)
    assert (r.bth.opcode, r.header(EM.EETH).request_id, r.header(EM.EETH).status) == (
        EM.MRC_ENDPOINT_RESPONSE, 0x55, EM.EETH_OK)


def test_emu_requester_recovers_a_lost_transport_ack() -> None:
    """Every packet SACKed, the one transport ACK lost: emu's requester asks again after
    its timeout (the message's last packet resent with AckReq; the responder re-ACKs a
    duplicate) and the WRITE completes. (emu-ref's repeats are switched off here to show
    emu's requester alone.)"""
    nic, eng = _emu_write_losing_its_transport_ack(ack_repeats=False)
    # one request, answered by one repeated ACK (the duplicate asked for it)
    assert eng.counters()["ack_requests"] == 1 and nic.counters()["ack_repeats"] == 1


# -- SETH's M field: the skip hint (reading A) or the ECN echo (reading B) ---------------


def _fifth(side: str, data: bytes, tos: int) -> bool:
    """Every fifth write packet by PSN (BTH byte 11: its low byte), ECT or not: emu-ref
    sends Not-ECT, which no switch marks — this tests how its requester *reads* an echo,
    not a network."""
    return data[11] % 5 == 0


@pytest.fixture
def emu_m_field():
    """emu's side of a cross-test in reading ``"ecn"`` or ``"skip"`` (restored after)."""
    from emu.wire import mrc_defs
    saved = mrc_defs.settings()
    yield lambda v: mrc_defs.configure(m_field=v)
    mrc_defs.configure(**saved)


def _sacks(w: Wire, side: str) -> list[Any]:
    return [decode_packet(d).header(EM.SETH) for s, d, _ in w.sent
            if s == side and d[0] == MW.RELIABILITY_SACK]


@pytest.mark.parametrize("emu_reading,ref_reading", [
    ("ecn", "ecn"), ("skip", "skip"), ("ecn", "skip"), ("skip", "ecn")])
def test_emu_writes_into_emuref_with_either_m_field_reading(emu_reading: str, ref_reading: str,
                                                            emu_m_field) -> None:
    """emu requester → emu-ref responder over a wire that CE-marks emu's ECT data. Same
    reading: the echo reaches emu's EV set and NSCC (reading B: M = 1, cc_flags 0).
    Mismatched: the data still lands byte-exact, but the echo is lost — emu in B ignores
    emu-ref's cc_flags, emu in A reads emu-ref's M = 1 as SKIP_ONCE and skips the EV."""
    emu_m_field(emu_reading)
    nic, qa, eng, qb, mem = _cross(11, m_field=ref_reading)
    src = register(mem, 1 << 19)
    data = random.Random(11).randbytes(1 << 19)
    src.view[:] = data
    region = bytearray(1 << 19)
    nic.memory.register(0x99, 0x40000, region)
    eng.post_send(qb, SendWR.write(1, [Sge(src.va, 1 << 19, src.lkey)], 0x40000, 0x99))
    events: list = []
    poll = _collect(eng, events)
    w = Wire({"a": ref_end(nic), "b": emu_end(eng, B, A)}, {"a": A, "b": B}, 11,
             mark=lambda s, d, tos: s == "b" and tos & 3 in (1, 2) and d[11] % 5 == 0)
    w.run(lambda: poll() and len(_emu_wcs(events)) == 1)
    assert region == data and w.marked > 50
    seths = _sacks(w, "a")
    ce_m = sum(s.m == 1 for s in seths)
    ce_flags = sum(s.cc_flags & 1 for s in seths)
    if ref_reading == "ecn":  # emu-ref's echo in M, nothing in cc_flags
        assert ce_m == w.marked and ce_flags == 0
    else:
        assert ce_flags == w.marked and ce_m == 0
    ini = eng._qps[qb].ini
    ecn_seen = sum(e.counts["ecn"] for e in ini.evs.slots + ini.evs.retired)
    skips = [e for e in ini.evs.events()[0] if "SACK M=" in e.cause]
    if emu_reading == ref_reading:
        assert ecn_seen == w.marked and skips == []
    elif emu_reading == "ecn":
        assert ecn_seen == 0 and skips == []     # cc_flags unread: no echo at all
    else:
        assert ecn_seen == 0 and len(skips) > 0  # M = 1 read as SKIP_ONCE


@pytest.mark.parametrize("emu_reading,ref_reading", [("ecn", "ecn"), ("skip", "ecn"),
                                                     ("ecn", "skip")])
def test_emuref_writes_into_emu_with_either_m_field_reading(emu_reading: str, ref_reading: str,
                                                            emu_m_field) -> None:
    """emu-ref requester → emu responder, every fifth write CE-marked (Not-ECT included:
    this is about reading the echo). emu writes the echo where its reading says; emu-ref
    takes it (a window cut per echo it reads) only when the readings agree — emu-ref in B
    reading emu's A SACK sees M = 0; emu-ref in A reading emu's M = 1 skips the EV."""
    emu_m_field(emu_reading)
    nic, qa, eng, qb, mem = _cross(12, m_field=ref_reading)
    dst = register(mem, 1 << 19)
    data = random.Random(12).randbytes(1 << 19)
    qa.post_write(1, data, dst.va, dst.rkey)
    events: list = []
    poll = _collect(eng, events)
    w = Wire({"a": ref_end(nic), "b": emu_end(eng, B, A)}, {"a": A, "b": B}, 12,
             mark=lambda s, d, tos: s == "a" and _fifth(s, d, tos))
    w.run(lambda: poll() and len(nic.completions) == 1)
    assert bytes(dst.view) == data and w.marked > 50
    seths = _sacks(w, "b")
    if emu_reading == "ecn":
        assert sum(s.m == 1 for s in seths) == w.marked and not any(s.cc_flags for s in seths)
    else:
        assert sum(s.cc_flags & 1 for s in seths) == w.marked and not any(s.m for s in seths)
    echoes = nic.counters()["rx_ce_echo"]
    assert echoes == (w.marked if emu_reading == ref_reading else 0)


# -- the STEV split, emu-ref's own (emuref.mrc_stev) -------------------------------------


def test_emuref_cuts_stev_evs_both_ways_and_refuses_bad_splits() -> None:
    from emuref import mrc_stev

    a, b = mrc_stev.parse("stev", "16+16"), mrc_stev.parse("stev", "12+20@0xd000")
    assert a.fields(0xC4000001) == (0xC400, 1) and a.ev(0xC400, 1) == 0xC4000001
    assert b.fields(0x40000001) == (0xD400, 1) and b.ev(0xD400, 1) == 0x40000001
    # the other cut reads the same fields as another EV: what the matrix catches
    assert b.ev(*a.fields(0xC4000001)) != 0xC4000001
    assert mrc_stev.parse("udp").ev(0xC400, 77) == 0xC400
    for fmt, split in (("stev", "12-20"), ("stev", "17+16"), ("stev", "12+20@0xd001"),
                       ("srv6", ""), ("udp", "16+16")):
        with pytest.raises(ValueError):
            mrc_stev.parse(fmt, split)


def test_emuref_sends_a_leased_flow_label_and_reads_it_back() -> None:
    """What its STEV sockets do, on the loopback: lease a label toward the peer, name it
    in sendto's flowinfo, read it from the receiver's control message."""
    import socket

    from emuref import mrc_stev

    try:
        rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        rx.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with rx, tx:
        tx.bind(("::1", 0))
        mrc_stev.want_labels(rx)
        mrc_stev.lease(tx, "::1", 0x4D2F3)
        tx.sendto(b"x", ("::1", rx.getsockname()[1], 0x4D2F3, 0))
        _, anc, _, _ = rx.recvmsg(16, 64)
        assert [mrc_stev.label_of(*m) for m in anc] == [0x4D2F3]

# SPDX-License-Identifier: GPL-2.0-only
"""The UET traffic our engines really emit, as Wireshark (tshark + uet.lua) sees it.

Issue #6 acceptance: "captures decode in tshark with our UET Lua dissector with
zero expert errors". Hand-built packets (test_wireshark_lua.py) only show that
the dissector reads the layouts we thought of; this test captures what
:class:`~emu.transports.uet.UetEngine` pairs actually put on the wire while they
run every delivery mode, PDC setup and teardown, ACK_CC with SACK, NACKs
(trimmed packets cut by :func:`emu.switch.trim.trim` included), every control
packet type and the SES operations, and checks:

* every frame is UET, with no expert info, no malformed mark, no Lua error,
  and good IPv4/UDP checksums (the capture is wrapped as the daemon's kernel
  would send it: the TxMeta entropy is the UDP source port, dscp/ecn the TOS);
* for every frame, each header field tshark shows equals what our struct codec
  (:func:`emu.wire.codec.uet.decode_packet`) decodes — and fields the codec
  says are absent are absent in tshark;
* coverage: the (PDS type, control type / NACK code / SES opcode / header shape)
  kinds seen include everything the scenarios were written to produce, so the
  test fails when traffic generation silently stops producing something.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lossy_link import register
from uet_pair import A, B, UetPair, ok, uet_pair, write

from emu.core.verbs import Sge
from emu.switch.trim import checksum, trim
from emu.transports.uet import pdc as D
from emu.wire import wireshark
from emu.wire.codec import uet as C
from emu.wire.pcapio import PcapngWriter
from emu.wire.uet_defs import PDS_TYPES

TSHARK = shutil.which("tshark")
pytestmark = [
    pytest.mark.tshark,
    pytest.mark.skipif(TSHARK is None, reason="tshark is not installed"),
]

TRIMMED_DSCP = 30  # emu.switch.config default
MAC = {A[0]: bytes.fromhex("020000000001"), B[0]: bytes.fromhex("020000000002")}


# --------------------------------------------------------------------------- capture


@dataclass
class Frame:
    """One datagram on the wire: the IP packet and what the sender asked for."""

    time: float
    ip: bytes
    udp_payload: bytes
    entropy: int
    dscp: int
    ecn: int
    v6: bool
    label: str
    src: str = A[0]
    dst: str = B[0]


def _v6(addr: str) -> bytes:
    """10.0.0.x → fd00::x (the IPv6 twin of the pair's IPv4 addresses)."""
    return ipaddress.IPv6Address(f"fd00::{addr.rsplit('.', 1)[1]}").packed


def ip_udp(payload: bytes, src: str, dst: str, sport: int, dscp: int, ecn: int,
           v6: bool) -> bytes:
    """IP/UDP to port 4793 around ``payload``, lengths and checksums as the kernel sets them."""
    ulen = 8 + len(payload)
    if v6:
        s, d = _v6(src), _v6(dst)
        pseudo = s + d + struct.pack("!IxxxB", ulen, 17)
        ip = struct.pack("!IHBB", (6 << 28) | ((dscp << 2 | ecn) << 20), ulen, 17, 64) + s + d
    else:
        s, d = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed
        pseudo = s + d + struct.pack("!BBH", 0, 17, ulen)
        hdr = bytearray(struct.pack("!BBHHHBBH", 0x45, dscp << 2 | ecn, 20 + ulen, 0, 0x4000,
                                    64, 17, 0) + s + d)
        struct.pack_into("!H", hdr, 10, checksum(hdr))
        ip = bytes(hdr)
    udp = bytearray(struct.pack("!HHHH", sport, C.UET_UDP_PORT, ulen, 0) + payload)
    pseudo_sum = sum(struct.unpack(f"!{len(pseudo) // 2}H", pseudo))
    struct.pack_into("!H", udp, 6, checksum(udp, pseudo_sum) or 0xFFFF)
    return ip + bytes(udp)


class Tap:
    """Records every datagram two engines emit (as :class:`Frame`) and, like the daemon,
    hands the receiver the sender's entropy as the UDP source port. ``trim_if`` picks
    requests from A that a switch trims on the way (both copies are captured)."""

    def __init__(self, frames: list[Frame], p: UetPair, label: str, *, v6: bool, t0: float,
                 trim_if: Callable[[bytes], bool] | None = None) -> None:
        self.frames, self.p, self.label, self.v6, self.t0 = frames, p, label, v6, t0
        self.trim_if = trim_if
        self.trimmed = 0
        self._ent: dict[bytes, int] = {}
        for eng, me, peer in ((p.ea, A[0], B[0]), (p.eb, B[0], A[0])):
            self._wrap(eng, me, peer)

    def _wrap(self, eng: Any, me: str, peer: str) -> None:
        send, recv = eng.datagrams_to_send, eng.receive_datagram

        def datagrams_to_send(now: float) -> list:
            out = []
            for data, addr, meta in send(now):
                data = bytes(data)
                assert addr == (peer, C.UET_UDP_PORT), f"{self.label}: sent to {addr}"
                t = self.t0 + now
                ip = ip_udp(data, me, peer, meta.entropy, meta.dscp, meta.ecn, self.v6)
                self.frames.append(Frame(t, ip, data, meta.entropy, meta.dscp, meta.ecn,
                                         self.v6, self.label, me, peer))
                if me == A[0] and self.trim_if is not None and self.trim_if(data):
                    cut = trim(ip, TRIMMED_DSCP)
                    assert cut is not None, "nothing to trim"
                    hl = 40 if self.v6 else 20
                    data = bytes(cut[hl + 8:])
                    self.frames.append(Frame(t + 1e-6, bytes(cut), data, meta.entropy,
                                             TRIMMED_DSCP, meta.ecn, self.v6,
                                             self.label + "/trimmed", me, peer))
                    self.trimmed += 1
                self._ent[data] = meta.entropy
                out.append((data, addr, meta))
            return out

        def receive_datagram(data: Any, addr: Any, now: float, **kw: Any) -> None:
            port = self._ent.get(bytes(data), addr[1])
            recv(data, (addr[0], port), now, **kw)

        eng.datagrams_to_send = datagrams_to_send
        eng.receive_datagram = receive_datagram


def write_pcapng(path: Path, frames: list[Frame]) -> None:
    """Ethernet frames into a pcapng, one named interface per scenario (what a user would
    open in Wireshark)."""
    with path.open("wb") as f:
        w = PcapngWriter(f)
        for fr in frames:
            etype = b"\x86\xdd" if fr.v6 else b"\x08\x00"
            eth = MAC[fr.dst] + MAC[fr.src] + etype
            w.write(eth + fr.ip, fr.time, fr.label.split("/")[0])


# --------------------------------------------------------------------------- scenarios


def sc_rud(frames: list[Frame], t0: float) -> None:
    """RUD through loss/reorder/dup/CE: SYN, ACK_CC with SACK, M, RETX; WRITE, SEND
    (standard, medium, small), NO_SES_MSG_AVAIL for a SEND before its buffer; CLOSE."""
    p = uet_pair(101, ekw={"mtu": 1024, "small_sends": True}, loss=0.05, reorder=0.2,
                 dup=0.05, ce=0.2)
    Tap(frames, p, "rud", v6=False, t0=t0)
    _, dst, data = write(p, 1, 96 * 1024)
    src = register(p.ma, 8000)
    src.view[:] = random.Random(5).randbytes(8000)
    rb = register(p.mb, 20_000)
    # a SEND with no receive posted yet: NACK NO_SES_MSG_AVAIL until the buffer comes
    p.ea.post_send(p.a, 2, [Sge(src.va, 6000, src.lkey)], (B[0], p.b))
    p.link.run(until=p.link.now + 300e-6)
    p.eb.post_recv(p.b, 20, [Sge(rb.va, 6000, rb.lkey)])
    p.eb.post_recv(p.b, 21, [Sge(rb.va + 6000, 1000, rb.lkey)])
    p.eb.post_recv(p.b, 22, [Sge(rb.va + 7000, 1000, rb.lkey)])
    p.ea.post_send(p.a, 3, [Sge(src.va, 100, src.lkey)], (B[0], p.b))  # small
    p.ea.post_write(p.a, 4, [Sge(src.va, 700, src.lkey)], (B[0], p.b), rb.va + 9000,
                    rb.rkey)  # medium
    p.link.run()
    assert sorted(w.wr_id for w in p.link.completions("a")) == [1, 2, 3, 4]
    assert bytes(dst.view[:len(data)]) == data
    (ini,) = p.ea.pdcs()
    p.ea.close_pdc(ini["pdcid"], p.link.now)
    p.link.run()
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []


class WrapRng(random.Random):
    """An RNG whose first 32-bit draw (the Start_PSN) sits just below 2^32, so the
    PSNs, CLEAR_PSN, ACK and SACK arithmetic wrap within the transfer."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.first = True

    def getrandbits(self, k: int) -> int:
        if k == 32 and self.first:
            self.first = False
            return (1 << 32) - 24
        return super().getrandbits(k)


def sc_rod(frames: list[Frame], t0: float) -> None:
    """ROD (IPv6) through loss, PSNs wrapping past 2^32: ROD_OOO NACKs, go-back-N RETX,
    ISROD on its CLOSE."""
    p = uet_pair(102, ekw={"mtu": 1024}, loss=0.05, reorder=0.1)
    p.ea.rng = WrapRng(102)
    Tap(frames, p, "rod", v6=True, t0=t0)
    _, dst, data = write(p, 1, 64 * 1024, mode="rod")
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    assert p.eb.counters()["tx_nack_0x0d"] > 0
    (ini,) = p.ea.pdcs()
    p.ea.close_pdc(ini["pdcid"], p.link.now)
    p.link.run()


def sc_rudi_uud(frames: list[Frame], t0: float) -> None:
    """RUDI WRITEs (one trimmed → NACK with NT) and UUD datagrams."""
    first: list[int] = []

    def trim_first_rudi(d: bytes) -> bool:
        if d[0] >> 3 == 4 and not first:
            first.append(1)
            return True
        return False

    p = uet_pair(103, ekw={"mtu": 2048}, loss=0.05)
    tap = Tap(frames, p, "rudi", v6=False, t0=t0, trim_if=trim_first_rudi)
    _, dst, data = write(p, 1, 9000, mode="rudi")
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data and tap.trimmed == 1
    p.link.loss = 0.0
    src, rb = register(p.ma, 300), register(p.mb, 300)
    for i in range(3):
        p.eb.post_recv(p.b, 10 + i, [Sge(rb.va + 100 * i, 100, rb.lkey)])
        p.ea.post_send(p.a, 5 + i, [Sge(src.va + 100 * i, 100, src.lkey)], (B[0], p.b),
                       mode="uud")
    p.link.run()
    assert len(p.link.completions("b")) == 3


def sc_trim_rud(frames: list[Frame], t0: float) -> None:
    """RUD (IPv6) with two requests trimmed by the switch → NACK TRIMMED, RETX at once."""
    n = [0]

    def trim_two(d: bytes) -> bool:
        if d[0] >> 3 == 2 and len(d) > 200:
            n[0] += 1
            return n[0] in (2, 5)
        return False

    p = uet_pair(104, ekw={"mtu": 1024})
    tap = Tap(frames, p, "trim", v6=True, t0=t0, trim_if=trim_two)
    _, dst, data = write(p, 1, 8 * 1024)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data and tap.trimmed == 2
    assert p.ea.counters()["rx_nack_0x01"] == 2


def sc_control(frames: list[Frame], t0: float) -> None:
    """Every CP: PROBE (with SYN before the first ACK, and without), CREDIT_REQ/CREDIT,
    ACK REQ=CLEAR → CLEAR, CLEAR_REQ, CLOSE_REQ → CLOSE; ACK with P."""
    p = uet_pair(105)
    Tap(frames, p, "control", v6=False, t0=t0)
    write(p, 1, 5000)
    (ini,) = p.ea.pdcs()
    ipid = ini["pdcid"]
    p.ea.probe_pdc(ipid, p.link.now)  # before any ACK: the CP carries SYN
    p.link.run()
    ok(p.link.completions("a"), 1)
    (tgt,) = p.eb.pdcs()
    tpid = tgt["pdcid"]
    p.ea.probe_pdc(ipid, p.link.now)
    p.ea.request_credit(ipid, p.link.now)
    p.link.run()
    p.eb.grant_credit(tpid, 4242, p.link.now)
    t = p.eb.target.pdcs[tpid]
    p.eb.target.ack(t, t.first_missing - 1, None, False, 0, None, req=D.ACK_REQ_CLEAR)
    p.link.run()
    p.eb.control._send_cp(t, D.CP_CLEAR_REQ, 0, None)
    p.link.run()
    p.eb.request_close(tpid, p.link.now)
    p.link.run()
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []
    c = p.ea.counters()
    assert c["rx_probe_reply"] == 2 and c["rx_credit"] == 2 and c["rx_close_req"] == 1


def sc_errors(frames: list[Frame], t0: float) -> None:
    """NACKs the target sends on its own: INV_DPDCID (PDC forgotten) and PSN_OOR_WINDOW
    (an initiator with a wider window than its target's)."""
    p = uet_pair(106, ekw={"mtu": 512, "mpr": 2, "rto": 1e-3},
                 ekw_b={"mtu": 512, "mpr": 1})
    lost: list[int] = []
    first_req = [True]

    def drop(d: bytes, s: tuple, _t: tuple) -> bool:  # lose the 1st data packet once
        if s == A and d[0] >> 3 == 2 and first_req[0] and len(d) > 100:
            first_req[0] = False
            lost.append(1)
            return True
        return False

    p.link.drop = drop
    Tap(frames, p, "errors", v6=True, t0=t0)
    _, dst, data = write(p, 1, 131 * 512)  # 3 packets beyond the target's 128-PSN window
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data and lost
    assert p.eb.counters()["rx_psn_oor_window"] > 0
    (tgt,) = p.eb.pdcs()
    p.eb.destroy_pdc(tgt["pdcid"])
    write(p, 2, 3000)
    p.link.run()
    assert p.eb.counters()["tx_nacks"] > 0


def sc_ses_ops(frames: list[Frame], t0: float) -> None:
    """READ (multi-packet RSP_DATA, one response lost → ACK_REQ), a READ error (plain
    response with a return code), (fetching) atomics with atomic and CAS extension
    headers, tagged sends (medium and standard)."""
    lost: list[int] = []

    def drop(d: bytes, s: tuple, _t: tuple) -> bool:
        if s == B and d[0] >> 3 == 8 and (d[1] >> 7 | (d[0] & 7) << 1) == 5 and not lost:
            lost.append(1)
            return True
        return False

    p = uet_pair(107, ekw={"mtu": 1024}, drop=drop)
    Tap(frames, p, "ses", v6=False, t0=t0)
    rem = register(p.mb, 20_000)
    rem.view[:] = random.Random(7).randbytes(20_000)
    loc = register(p.ma, 20_000)
    # 20000 B: request_length beyond 14 bits → standard header; 300 B: medium
    p.ea.post_read(p.a, 1, [Sge(loc.va, 20_000, loc.lkey)], (B[0], p.b), rem.va, rem.rkey)
    p.link.run()
    p.ea.post_read(p.a, 2, [Sge(loc.va, 300, loc.lkey)], (B[0], p.b), rem.va + 100, rem.rkey)
    p.link.run()
    ok(p.link.completions("a"), 1, 2)
    assert bytes(loc.view[:300]) == bytes(rem.view[100:400]) and lost
    p.ea.post_read(p.a, 3, [Sge(loc.va, 100, loc.lkey)], (B[0], p.b), rem.va, rem.rkey + 1)
    res = register(p.ma, 64)
    p.ea.post_atomic(p.a, 4, [Sge(res.va, 8, res.lkey)], (B[0], p.b), rem.va + 8, rem.rkey,
                     "fetch_add", 5)
    p.ea.post_atomic(p.a, 5, [Sge(res.va + 8, 8, res.lkey)], (B[0], p.b), rem.va + 16,
                     rem.rkey, "cmp_swap", struct.unpack_from("=Q", rem.view, 16)[0], 99)
    p.ea.post_atomic(p.a, 6, [], (B[0], p.b), rem.va + 24, rem.rkey, "SUM", 1)
    tb = register(p.mb, 20_000)
    p.eb.post_trecv(p.b, 30, [Sge(tb.va, 10_000, tb.lkey)], 0xABC)
    p.eb.post_trecv(p.b, 31, [Sge(tb.va + 10_000, 10_000, tb.lkey)], 0xDEF)
    src = register(p.ma, 5000)
    p.ea.post_tsend(p.a, 7, [Sge(src.va, 5000, src.lkey)], (B[0], p.b), 0xDEF)
    p.ea.post_tsend(p.a, 8, [Sge(src.va, 50, src.lkey)], (B[0], p.b), 0xABC)
    # RENDEZVOUS_SEND: one eager packet with the rendezvous header, B READs the rest
    src.view[:] = random.Random(8).randbytes(5000)
    rb = register(p.mb, 5000)
    p.eb.post_recv(p.b, 40, [Sge(rb.va, 5000, rb.lkey)])
    p.ea.post_send(p.a, 9, [Sge(src.va, 5000, src.lkey)], (B[0], p.b), rendezvous=True)
    p.link.run()
    wcs = {w.wr_id: w for w in p.link.completions("a")}
    assert set(wcs) == set(range(1, 10)) and not wcs[3].ok
    assert all(wcs[i].ok for i in (4, 5, 6, 7, 8, 9))
    assert bytes(rb.view) == bytes(src.view)


SCENARIOS = [sc_rud, sc_rod, sc_rudi_uud, sc_trim_rud, sc_control, sc_errors, sc_ses_ops]

#: what the scenarios above must put on the wire (see kinds())
EXPECTED_KINDS = {
    # requests: (type, "req", shape next_hdr, opcode)
    (2, "req", 3, 0x01), (2, "req", 2, 0x01), (2, "req", 3, 0x05), (2, "req", 1, 0x05),
    (3, "req", 3, 0x01), (4, "req", 3, 0x01), (6, "req", 3, 0x05),
    (2, "req", 3, 0x02), (2, "req", 2, 0x02), (2, "req", 2, 0x04), (2, "req", 2, 0x03),
    (2, "req", 3, 0x09), (2, "req", 2, 0x09),
    # replies: (type, "rsp", next_hdr, response opcode, return code)
    (8, "rsp", 0, None, None), (8, "rsp", 4, 1, 0x01), (8, "rsp", 4, 1, 0x1C),
    (8, "rsp", 5, 2, 0x01), (5, "rsp", 4, 1, 0x01),
    # NACKs: (10, "nack", code, nt)
    (10, "nack", 0x01, 0), (10, "nack", 0x01, 1), (10, "nack", 0x09, 0),
    (10, "nack", 0x0B, 0), (10, "nack", 0x0D, 0), (10, "nack", 0x0E, 0),
    # CPs: (11, "cp", ctl_type, syn)
    (11, "cp", D.CP_ACK_REQ, 0), (11, "cp", D.CP_CLEAR, 0), (11, "cp", D.CP_CLEAR_REQ, 0),
    (11, "cp", D.CP_CLOSE, 0), (11, "cp", D.CP_CLOSE_REQ, 0), (11, "cp", D.CP_PROBE, 0),
    (11, "cp", D.CP_PROBE, 1), (11, "cp", D.CP_CREDIT, 0), (11, "cp", D.CP_CREDIT_REQ, 0),
    # extension headers
    ("ext", "atomic"), ("ext", "cas"), ("ext", "rendezvous"), (2, "req", 3, 0x06),
    # flags
    ("flag", 2, "syn"), ("flag", 2, "retx"), ("flag", 2, "ar"), ("flag", 3, "retx"),
    ("flag", 8, "m"), ("flag", 8, "p"), ("flag", 8, "req=1"), ("flag", 8, "sack"),
    ("flag", 11, "isrod"), ("flag", 4, "retx"), ("trimmed", 2), ("trimmed", 4),
}


# --------------------------------------------------------------------------- expectations

PDS_FIELDS = [
    "uet.pds.type", "uet.pds.nh", "uet.pds.ctl_type", "uet.pds.flags", "uet.pds.flags.m",
    "uet.pds.flags.isrod", "uet.pds.flags.retx", "uet.pds.flags.ar", "uet.pds.flags.p",
    "uet.pds.flags.nt", "uet.pds.flags.syn", "uet.pds.flags.req", "uet.pds.clear_psn",
    "uet.pds.clear_psn_offset", "uet.pds.psn", "uet.pds.ack_psn", "uet.pds.ack_psn_offset",
    "uet.pds.cack_psn", "uet.pds.spdcid", "uet.pds.dpdcid", "uet.pds.pdc_mode",
    "uet.pds.psn_offset", "uet.pds.start_psn", "uet.pds.ctrl_probe_opaque",
    "uet.pds.ctrl_payload", "uet.pds.rudi.pkt_id", "uet.pds.reserved", "uet.pds.nack.code",
    "uet.pds.nack.vendor_code", "uet.pds.nack.psn", "uet.pds.nack.max_recv_psn_plus_1",
    "uet.pds.ack.cc_type", "uet.pds.ack.cc_flags", "uet.pds.ack.mpr",
    "uet.pds.ack.sack_offset", "uet.pds.ack.sack_base_psn", "uet.pds.ack.sack_bitmap",
    "uet.pds.ack.cc_state.service_time", "uet.pds.ack.cc_state.rc",
    "uet.pds.ack.cc_state.rcv_cwnd_pend", "uet.pds.ack.cc_state.rcvd_bytes",
    "uet.pds.ack.cc_state.ooo_count", "uet.pds.ack.cc_state.credit",
]
_STD = "uet.ses.std."
_SM = "uet.ses.small_req."
_MD = "uet.ses.med_req."
_RSP = "uet.ses.rsp."
_AMO = "uet.ses.atomic_op_ext_hdr."
_CAS = "uet.ses.comp_swap_ext_hdr."
_RDV = "uet.ses.rendv_ext_hdr."
SES_FIELDS = [
    _STD + f for f in ("opcode", "flags", "ver", "dc", "ie", "rel", "hd", "eom", "som",
                       "message_id", "index_generation", "job_id", "pidonfep",
                       "resource_index", "buffer_offset", "restart_token", "initiator",
                       "mem_key_match_bits", "header_data", "payload_length",
                       "message_offset", "request_length")
] + [
    _SM + f for f in ("flags", "som", "eom", "req_length", "index_generation", "job_id",
                      "pidonfep", "resource_index", "buffer_offset")
] + [
    _MD + f for f in ("flags", "flags.hd", "som", "eom", "req_length",
                      "resource_index_generation", "job_id", "pidonfep", "resource_index",
                      "buffer_offset", "header_data", "initiator", "mem_key_match_bits")
] + [
    _RSP + f for f in ("list", "opcode", "ver", "return_code", "message_id",
                       "resource_index_gen", "job_id", "mod_length", "read_req_message_id",
                       "payload_length", "message_offset", "orig_req_psn")
] + [
    _AMO + f for f in ("atomic_opcode", "atomic_data_type", "sem_ctl")
] + [
    _CAS + f for f in ("atomic_opcode", "atomic_data_type", "sem_ctl", "comp_value",
                       "swap_value")
] + [
    _RDV + f for f in ("eager_length", "read_pid_on_fep", "read_resource_index",
                       "read_offset", "read_match_bits")
]
FRAME_FIELDS = [
    "frame.number", "frame.protocols", "_ws.col.Protocol", "_ws.col.Info", "_ws.expert",
    "_ws.malformed", "_ws.lua.error", "ip.checksum.status", "udp.checksum.status",
    "udp.srcport", "udp.dstport", "udp.length", "ip.dsfield.dscp", "ip.dsfield.ecn",
    "ipv6.tclass.dscp", "ipv6.tclass.ecn", "uet.pds.entropy", "data.len",
]
CHECKED = PDS_FIELDS + SES_FIELDS + ["data.len"]

Want = dict[str, int | bytes]


def _flags(h: Any) -> int:
    """The 7-bit PDS flags field, rebuilt from the codec's per-type flag fields."""
    if isinstance(h, C.PdsRudi):
        return h.flag_rsvd0 << 6 | h.m << 5 | h.retx << 4 | h.flag_rsvd1
    if isinstance(h, C.PdsUud):
        return h.flag_rsvd0
    if isinstance(h, (C.PdsNack, C.PdsNackCcx)):
        return h.flag_rsvd0 << 6 | h.m << 5 | h.retx << 4 | h.nt << 3 | h.flag_rsvd1
    if isinstance(h, (C.PdsControl, C.PdsControlSyn)):
        return (h.flag_rsvd0 << 6 | h.isrod << 5 | h.retx << 4 | h.ar << 3 | h.syn << 2
                | h.flag_rsvd1)
    if hasattr(h, "req"):  # every ACK flavour
        return (h.flag_rsvd0 << 6 | h.m << 5 | h.retx << 4 | h.p << 3 | h.req << 1
                | h.flag_rsvd1)
    return h.flag_rsvd0 << 5 | h.retx << 4 | h.ar << 3 | h.syn << 2 | h.flag_rsvd1


def pds_want(h: Any) -> Want:
    """What tshark must show for a PDS header, from the codec's decode."""
    p = "uet.pds."
    w: Want = {p + "type": h.type, p + "flags": _flags(h)}
    if isinstance(h, (C.PdsControl, C.PdsControlSyn)):
        w.update({p + "ctl_type": h.ctl_type, p + "flags.isrod": h.isrod,
                  p + "flags.retx": h.retx, p + "flags.ar": h.ar, p + "flags.syn": h.syn,
                  p + "ctrl_probe_opaque": h.probe_opaque, p + "psn": h.psn,
                  p + "spdcid": h.spdcid, p + "ctrl_payload": h.ctl_payload})
    else:
        w[p + "nh"] = h.next_hdr
    if isinstance(h, (C.PdsRequest, C.PdsRequestSyn, C.PdsCcRequest, C.PdsCcRequestSyn)):
        w.update({p + "flags.retx": h.retx, p + "flags.ar": h.ar, p + "flags.syn": h.syn,
                  p + "clear_psn_offset": h.clear_psn_offset, p + "clear_psn": h.clear_psn(),
                  p + "psn": h.psn, p + "spdcid": h.spdcid})
    if isinstance(h, (C.PdsRequestSyn, C.PdsCcRequestSyn, C.PdsControlSyn)):
        w.update({p + "pdc_mode": h.pdc_info, p + "psn_offset": h.psn_offset,
                  p + "start_psn": h.start_psn()})
    elif isinstance(h, (C.PdsRequest, C.PdsCcRequest, C.PdsControl)):
        w[p + "dpdcid"] = h.dpdcid
    if isinstance(h, C.PdsRudi):
        w.update({p + "flags.m": h.m, p + "flags.retx": h.retx, p + "reserved": h.rsvd,
                  p + "rudi.pkt_id": h.pkt_id})
    if isinstance(h, C.PdsUud):
        w[p + "reserved"] = h.rsvd
    if hasattr(h, "cack_psn"):  # ACK, ACK_CC*, ACK_CCX
        w.update({p + "flags.m": h.m, p + "flags.retx": h.retx, p + "flags.p": h.p,
                  p + "flags.req": h.req, p + "cack_psn": h.cack_psn, p + "spdcid": h.spdcid,
                  p + "dpdcid": h.dpdcid})
        if h.p:
            w[p + "ctrl_probe_opaque"] = h.ack_psn_offset & 0xFFFF
        else:
            w.update({p + "ack_psn_offset": h.ack_psn_offset, p + "ack_psn": h.ack_psn()})
    if hasattr(h, "sack_bitmap"):
        a = p + "ack."
        w.update({a + "cc_type": h.cc_type, a + "cc_flags": h.cc_flags, a + "mpr": h.mpr,
                  a + "sack_offset": h.sack_psn_offset, a + "sack_base_psn": h.sack_base(),
                  a + "sack_bitmap": h.sack_bitmap})
    if isinstance(h, C.PdsAckCcNscc):
        s = p + "ack.cc_state."
        w.update({s + "service_time": h.service_time, s + "rc": h.restore_cwnd,
                  s + "rcv_cwnd_pend": h.rcv_cwnd_pend, s + "rcvd_bytes": h.rcvd_bytes,
                  s + "ooo_count": h.ooo_count})
    if isinstance(h, C.PdsAckCcCredit):
        s = p + "ack.cc_state."
        w.update({s + "credit": h.credit, s + "ooo_count": h.ooo_count})
    if isinstance(h, (C.PdsNack, C.PdsNackCcx)):
        w.update({p + "flags.m": h.m, p + "flags.retx": h.retx, p + "flags.nt": h.nt,
                  p + "nack.code": h.nack_code, p + "nack.vendor_code": h.vendor_code,
                  p + "nack.psn": h.nack_psn, p + "spdcid": h.spdcid, p + "dpdcid": h.dpdcid,
                  p + "nack.max_recv_psn_plus_1": h.nack_payload})
        if h.nt:
            w[p + "rudi.pkt_id"] = h.nack_psn
    return w


def _req_flags(s: Any, hd: int) -> int:
    return s.ver << 6 | s.dc << 5 | s.ie << 4 | s.rel << 3 | hd << 2 | s.eom << 1 | s.som


def ses_want(s: Any, ext: Any) -> Want:
    """What tshark must show for a SES header and its extension header."""
    w: Want = {}
    if isinstance(s, (C.SesStandardRequest, C.SesStandardRequestSom)):
        w.update({_STD + "opcode": s.opcode, _STD + "flags": _req_flags(s, s.hd),
                  _STD + "ver": s.ver, _STD + "dc": s.dc, _STD + "ie": s.ie,
                  _STD + "rel": s.rel, _STD + "hd": s.hd, _STD + "eom": s.eom,
                  _STD + "som": s.som, _STD + "message_id": s.message_id,
                  _STD + "index_generation": s.ri_generation, _STD + "job_id": s.job_id,
                  _STD + "pidonfep": s.pid_on_fep, _STD + "resource_index": s.resource_index,
                  _STD + "initiator": s.initiator, _STD + "request_length": s.request_length})
        deferrable = s.opcode in (0x08, 0x0B)
        w[_STD + ("restart_token" if deferrable else "buffer_offset")] = s.buffer_offset
        if s.opcode == 0x0C:
            w[_STD + "restart_token"] = s.mem_key_match_bits
        else:
            w[_STD + "mem_key_match_bits"] = s.mem_key_match_bits
        if s.som:
            w[_STD + "header_data"] = s.header_data
        else:
            w.update({_STD + "payload_length": s.payload_length,
                      _STD + "message_offset": s.message_offset})
    elif isinstance(s, C.SesSmallRequest):
        w.update({_STD + "opcode": s.opcode, _SM + "flags": _req_flags(s, s.flag_rsvd),
                  _SM + "som": s.som, _SM + "eom": s.eom, _SM + "req_length": s.request_length,
                  _SM + "index_generation": s.ri_generation, _SM + "job_id": s.job_id,
                  _SM + "pidonfep": s.pid_on_fep, _SM + "resource_index": s.resource_index,
                  _SM + "buffer_offset": s.buffer_offset})
    elif isinstance(s, C.SesMediumRequest):
        w.update({_STD + "opcode": s.opcode, _MD + "flags": _req_flags(s, s.hd),
                  _MD + "flags.hd": s.hd, _MD + "som": s.som, _MD + "eom": s.eom,
                  _MD + "req_length": s.request_length,
                  _MD + "resource_index_generation": s.ri_generation, _MD + "job_id": s.job_id,
                  _MD + "pidonfep": s.pid_on_fep, _MD + "resource_index": s.resource_index,
                  _MD + ("header_data" if s.hd else "buffer_offset"): s.buffer_offset,
                  _MD + "initiator": s.initiator,
                  _MD + "mem_key_match_bits": s.mem_key_match_bits})
    elif s is not None:  # responses
        w.update({_RSP + "list": s.list, _RSP + "opcode": s.opcode, _RSP + "ver": s.ver,
                  _RSP + "return_code": s.return_code})
        if isinstance(s, C.SesResponse):
            w.update({_RSP + "message_id": s.message_id,
                      _RSP + "resource_index_gen": s.ri_generation, _RSP + "job_id": s.job_id,
                      _RSP + "mod_length": s.modified_length})
        elif isinstance(s, C.SesResponseData):
            w.update({_RSP + "message_id": s.message_id, _RSP + "job_id": s.job_id,
                      _RSP + "read_req_message_id": s.read_req_message_id,
                      _RSP + "payload_length": s.payload_length,
                      _RSP + "mod_length": s.modified_length,
                      _RSP + "message_offset": s.message_offset})
        else:
            w[_RSP + "payload_length"] = s.payload_length
            if isinstance(s, C.SesSmallResponseData12):
                w.update({_RSP + "job_id": s.job_id,
                          _RSP + "orig_req_psn": s.original_request_psn})
    if isinstance(ext, C.SesCompareSwap):
        w.update({_CAS + "atomic_opcode": ext.amo_opcode, _CAS + "atomic_data_type":
                  ext.datatype, _CAS + "sem_ctl": ext.sem_ctl,
                  _CAS + "comp_value": ext.compare.to_bytes(16, "big"),
                  _CAS + "swap_value": ext.swap.to_bytes(16, "big")})
    elif isinstance(ext, C.SesAtomic):
        w.update({_AMO + "atomic_opcode": ext.amo_opcode, _AMO + "atomic_data_type":
                  ext.datatype, _AMO + "sem_ctl": ext.sem_ctl})
    elif isinstance(ext, C.SesRendezvous):
        w.update({_RDV + "eager_length": ext.eager_length,
                  _RDV + "read_pid_on_fep": ext.read_pid_on_fep,
                  _RDV + "read_resource_index": ext.read_resource_index,
                  _RDV + "read_offset": ext.read_offset,
                  _RDV + "read_match_bits": ext.read_match_bits})
    return w


def want_of(fr: Frame) -> tuple[C.UetPacket, Want]:
    pkt = C.decode_packet(fr.udp_payload)
    w = pds_want(pkt.pds)
    w.update(ses_want(pkt.ses, pkt.ext))
    if len(pkt.payload):
        w["data.len"] = len(pkt.payload)
    return pkt, w


def kinds(row: dict[str, str], trimmed: bool) -> set[tuple]:
    """Coverage keys of one frame, read from tshark's fields (see EXPECTED_KINDS)."""
    def v(name: str) -> int | None:
        x = row[name]
        return int(x, 0) if x else None

    typ = v("uet.pds.type")
    out: set[tuple] = set()
    if typ in (2, 3, 4, 6):
        out.add((typ, "req", v("uet.pds.nh"), v(_STD + "opcode")))
        if trimmed:
            out.add(("trimmed", typ))
    elif typ in (5, 7, 8, 9):
        out.add((typ, "rsp", v("uet.pds.nh"), v(_RSP + "opcode"), v(_RSP + "return_code")))
    elif typ == 10:
        out.add((10, "nack", v("uet.pds.nack.code"), v("uet.pds.flags.nt")))
    elif typ == 11:
        out.add((11, "cp", v("uet.pds.ctl_type"), v("uet.pds.flags.syn")))
    if row[_AMO + "atomic_opcode"]:
        out.add(("ext", "atomic"))
    if row[_CAS + "atomic_opcode"]:
        out.add(("ext", "cas"))
    if row[_RDV + "eager_length"]:
        out.add(("ext", "rendezvous"))
    for f in ("syn", "retx", "ar", "m", "p", "isrod"):
        if v("uet.pds.flags." + f):
            out.add(("flag", typ, f))
    if v("uet.pds.flags.req"):
        out.add(("flag", typ, f"req={v('uet.pds.flags.req')}"))
    if v("uet.pds.ack.sack_bitmap"):
        out.add(("flag", typ, "sack"))
    for f in ("uet.pds.clear_psn_offset", "uet.pds.ack_psn_offset", "uet.pds.ack.sack_offset"):
        if (v(f) or 0) < 0:
            out.add(("neg", f))
    psns = [v(f) for f in ("uet.pds.psn", "uet.pds.cack_psn", "uet.pds.nack.psn")]
    if any(x is not None and x < 0x100 for x in psns):
        out.add(("wrap", typ))
    return out


# --------------------------------------------------------------------------- tshark


def run_tshark(pcap: Path, home: Path) -> list[dict[str, str]]:
    fields = FRAME_FIELDS + [f for f in CHECKED if f not in FRAME_FIELDS]
    cmd = [TSHARK, "-n", "-r", str(pcap), *wireshark.tshark_args(),
           "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
           "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in fields:
        cmd += ["-e", f]
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), LC_ALL="C")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Lua" not in proc.stderr, proc.stderr
    return [dict(zip(fields, line.split("\t"), strict=True))
            for line in proc.stdout.splitlines()]


def _same(name: str, shown: str, want: int | bytes) -> bool:
    if isinstance(want, bytes):
        return shown.replace(":", "") == want.hex()
    if shown in ("True", "False"):
        return int(shown == "True") == want
    return int(shown, 0) == want


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Frame], list[dict]]:
    frames: list[Frame] = []
    for i, sc in enumerate(SCENARIOS):
        sc(frames, float(i))
    assert len(frames) < 5000, "keep the capture (and the test) small"
    tmp = tmp_path_factory.mktemp("uet-wire")
    pcap = tmp / "uet_engines.pcapng"
    write_pcapng(pcap, frames)
    rows = run_tshark(pcap, tmp)
    assert len(rows) == len(frames)
    return frames, rows


# --------------------------------------------------------------------------- tests


def test_every_frame_is_clean_uet_with_good_ip_and_udp(capture):
    frames, rows = capture
    for fr, row in zip(frames, rows, strict=True):
        where = f"frame {row['frame.number']} ({fr.label}): {row['_ws.col.Info']}"
        assert row["_ws.lua.error"] == "", where + " " + row["_ws.lua.error"]
        assert row["_ws.expert"] == "" and row["_ws.malformed"] == "", where
        assert row["_ws.col.Protocol"] == "UET", where
        typ = C.decode_packet(fr.udp_payload).pds.type
        assert row["_ws.col.Info"].startswith(PDS_TYPES[typ] + " "), where
        assert row["frame.protocols"].split(":")[-2:] in (["udp", "uet"], ["uet", "data"]), (
            where, row["frame.protocols"])
        assert row["udp.checksum.status"] == "1", where
        assert row["ip.checksum.status"] == ("" if fr.v6 else "1"), where
        assert int(row["udp.srcport"]) == fr.entropy == int(row["uet.pds.entropy"], 0), where
        assert int(row["udp.dstport"]) == C.UET_UDP_PORT, where
        assert int(row["udp.length"]) == 8 + len(fr.udp_payload), where
        ip = "ipv6.tclass." if fr.v6 else "ip.dsfield."
        assert (int(row[ip + "dscp"]), int(row[ip + "ecn"])) == (fr.dscp, fr.ecn), where


def test_every_field_matches_the_codec(capture):
    frames, rows = capture
    checked = 0
    for fr, row in zip(frames, rows, strict=True):
        _, want = want_of(fr)
        where = f"frame {row['frame.number']} ({fr.label}): {row['_ws.col.Info']}"
        for name in CHECKED:
            shown = row[name]
            if name not in want:
                assert shown == "", f"{where}: {name} shown as {shown!r}, codec has none"
                continue
            vals = shown.split("|")
            assert len(vals) == 1, f"{where}: {name} shown {len(vals)} times: {shown!r}"
            assert _same(name, vals[0], want[name]), (
                f"{where}: {name} = {vals[0]!r}, codec says {want[name]!r}")
            checked += 1
    assert checked > 20 * len(frames)


def test_the_traffic_covers_every_kind_it_was_written_to_produce(capture):
    frames, rows = capture
    seen: set[tuple] = set()
    for fr, row in zip(frames, rows, strict=True):
        seen |= kinds(row, fr.label.endswith("/trimmed"))
    missing = EXPECTED_KINDS - seen
    assert not missing, f"never on the wire: {sorted(missing, key=str)}"


def test_trimmed_frames_keep_all_headers_and_lose_the_payload(capture):
    frames, rows = capture
    pairs = [(frames[i - 1], fr) for i, fr in enumerate(frames) if fr.label.endswith("/trimmed")]
    assert len(pairs) == 3
    for orig, cut in pairs:
        po, pc = C.decode_packet(orig.udp_payload), C.decode_packet(cut.udp_payload)
        assert len(po.payload) > 0 and len(pc.payload) == 0
        assert (po.pds, po.ses, po.ext) == (pc.pds, pc.ses, pc.ext)
        assert cut.dscp == TRIMMED_DSCP and cut.ecn == orig.ecn

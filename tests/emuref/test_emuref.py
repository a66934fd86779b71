# SPDX-License-Identifier: GPL-2.0-only
"""emu-ref (the independent reference peer): codecs against the spec pages' vectors and
emu's own scapy layers / codecs, and its sans-IO cores against each other over a lossy,
reordering, duplicating in-memory link.

The tests may import emu to cross-check; the ``emuref`` package itself must not.
"""

from __future__ import annotations

import ast
import pathlib
import random

import pytest
from scapy.layers.inet import IP, UDP

from emu.wire import roce as SR
from emu.wire.codec import uet as EU
from emu.wire.icrc import verify_icrc
from emuref import roce_wire as RW
from emuref import uet_wire as UW
from emuref.memory import Memory
from emuref.roce_rc import RcQp
from emuref.uet_rud import UetEngine

PKG = pathlib.Path(__file__).resolve().parents[2] / "emuref"


def test_emuref_imports_nothing_from_emu() -> None:
    """The point of a reference peer is a second codebase: no ``emu`` import anywhere."""
    for f in PKG.glob("*.py"):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for n in names:
                assert n.split(".")[0] != "emu", f"{f.name} imports {n}"


# -- RoCEv2 ------------------------------------------------------------------------------

CX4_CNP = bytes.fromhex(
    "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161"
    "0a0011010a001201000012b7002800008100ffff40000118"
    "0000000000000000000000000000000000000000" "82fd002a")


def test_icrc_matches_the_connectx_capture() -> None:
    udp_payload = CX4_CNP[14 + 28:]
    assert RW.icrc("10.0.17.1", "10.0.18.1", 0, 4791, udp_payload[:-4], ip_id=0x718C) \
        == bytes.fromhex("82fd002a")
    # one flipped bit anywhere in the covered bytes breaks it
    bad = bytearray(udp_payload[:-4])
    bad[20] ^= 1
    assert RW.icrc("10.0.17.1", "10.0.18.1", 0, 4791, bytes(bad), ip_id=0x718C) \
        != bytes.fromhex("82fd002a")


@pytest.mark.parametrize("src,dst", [("10.0.1.11", "10.0.1.12"), ("fd00:0:1::11", "fd00:0:1::12")])
def test_roce_packets_agree_with_emu_layers_and_icrc(src: str, dst: str) -> None:
    """Our WRITE_FIRST and ACK, in the IP/UDP headers the kernel writes (ID 0, DF), decode
    field by field with emu's scapy layers and pass emu's ICRC check."""
    from scapy.layers.inet6 import IPv6
    w = RW.Packet(RW.WRITE_FIRST, 0xABCDEF, 0xFFFFFE, ackreq=True, va=0x1122334455667788,
                  rkey=0xDEADBEEF, dma_len=10000, payload=bytes(range(256)) * 16)
    a = RW.Packet(RW.ACKNOWLEDGE, 0x123456, 0x42, syndrome=RW.NAK_PSN_SEQ_ERR, msn=0x777)
    for p in (w, a):
        body = RW.encode(p, src, dst, 50000, 4791)
        ip = (IP(src=src, dst=dst, flags="DF", id=0) if ":" not in src
              else IPv6(src=src, dst=dst)) / UDP(sport=50000, dport=4791) / body
        raw = bytes(ip)
        assert verify_icrc(raw)
        pkt = (IP if ":" not in src else IPv6)(raw)
        bth = pkt[SR.BTH]
        assert (bth.opcode, bth.dqpn, bth.psn) == (p.opcode, p.dqpn, p.psn)
        if p is w:
            assert bth.ackreq == 1
            assert (pkt[SR.RETH].va, pkt[SR.RETH].rkey, pkt[SR.RETH].dmalen) == \
                (p.va, p.rkey, p.dma_len)
        else:
            assert (pkt[SR.AETH].syndrome, pkt[SR.AETH].msn) == (0x60, 0x777)
        assert RW.decode(body, src, dst, 50000, 4791).payload == p.payload


def test_roce_decode_rejects_bad_icrc_and_short_packets() -> None:
    body = bytearray(RW.encode(RW.Packet(RW.SEND_ONLY, 1, 2, payload=b"abc"), "10.0.0.1",
                               "10.0.0.2"))
    assert RW.decode(bytes(body), "10.0.0.1", "10.0.0.2").payload == b"abc"
    body[13] ^= 0xFF
    with pytest.raises(RW.WireError, match="ICRC"):
        RW.decode(bytes(body), "10.0.0.1", "10.0.0.2")
    with pytest.raises(RW.WireError, match="shorter"):
        RW.decode(b"\x00" * 10, "10.0.0.1", "10.0.0.2")


# -- UET ---------------------------------------------------------------------------------


def test_uet_spec_vectors() -> None:
    """The spec page's PDS vectors (from X's generator) decode to their fields, and our
    encoder gives the same bytes back."""
    r = UW.decode_pds(bytes.fromhex("119012349876543234569abc"))
    assert (r.type, r.next_hdr, r.flags, r.offset, r.psn, r.spdcid, r.dpdcid) == \
        (2, 3, UW.F_RETX, 0x1234, 0x98765432, 0x3456, 0x9ABC)
    assert UW.encode_request(3, UW.F_RETX, 0x1234, 0x98765432, 0x3456, 0x9ABC) == \
        bytes.fromhex("119012349876543234569abc")
    s = UW.decode_pds(bytes.fromhex("119412349876543234568876"))
    assert s.syn and (s.pdc_info, s.syn_offset) == (8, 0x876)
    a = UW.decode_pds(bytes.fromhex("3a3286422468ace03456789a"))
    assert (a.type, a.next_hdr, a.flags & UW.F_M, a.psn, a.spdcid, a.dpdcid) == \
        (UW.T_ACK, 4, UW.F_M, 0x2468ACE0, 0x3456, 0x789A)


def test_uet_headers_agree_with_emu_codec() -> None:
    """A request (SYN and not, SOM and not), an ACK_CC with SACK and a response with
    data, built by us, read by emu's codec with the same field values — and back."""
    ses = UW.SesRequest(UW.OP_WRITE, False, True, 77, 0x123456, 0xABC, 5, 0x1000_0000, 9,
                        0xFEEDFACE, payload_length=100, message_offset=8192,
                        request_length=8292)
    pkt = UW.encode_request(3, UW.F_AR, -3, 0xFFFFFFF0, 0x1111, 0x2222) \
        + UW.encode_standard(ses) + b"x" * 100
    e = EU.decode_packet(pkt)
    assert (e.pds.psn, e.pds.spdcid, e.pds.dpdcid, e.pds.ar, e.pds.clear_psn_offset) == \
        (0xFFFFFFF0, 0x1111, 0x2222, 1, -3)
    assert (e.ses.opcode, e.ses.message_id, e.ses.job_id, e.ses.pid_on_fep,
            e.ses.resource_index, e.ses.buffer_offset, e.ses.initiator,
            e.ses.mem_key_match_bits, e.ses.payload_length, e.ses.message_offset,
            e.ses.request_length, e.ses.eom, e.ses.som) == \
        (1, 77, 0x123456, 0xABC, 5, 0x1000_0000, 9, 0xFEEDFACE, 100, 8192, 8292, 1, 0)
    assert bytes(e.payload) == b"x" * 100
    syn = UW.encode_request(3, 0, 0, 1000, 0x1111, 0, syn_offset=7)
    ses.som, ses.payload_length, ses.header_data = True, None, 0x55
    e = EU.decode_packet(syn + UW.encode_standard(ses))
    assert e.pds.syn == 1 and e.pds.psn_offset == 7 and e.ses.header_data == 0x55
    ack = UW.encode_ack_cc(UW.NH_RSP_DATA, UW.F_RETX, 2, 500, 3, 4, 1, 1, 0b1011, 0) \
        + UW.encode_response(UW.SesResponse(2, UW.RC_OK, 77, 0, 4096, True, 77, 3, 4093)) \
        + b"abc"
    e = EU.decode_packet(ack)
    assert (e.pds.cack_psn, e.pds.ack_psn_offset, e.pds.sack_psn_offset, e.pds.sack_bitmap,
            e.pds.mpr, e.pds.retx) == (500, 2, 1, 0b1011, 1, 1)
    assert (e.ses.message_id, e.ses.read_req_message_id, e.ses.payload_length,
            e.ses.modified_length, e.ses.message_offset, e.ses.return_code) == \
        (77, 77, 3, 4096, 4093, 1)
    # emu's encoder → our decoder: a NACK and a medium request (what emu sends for
    # single-packet messages)
    nack = EU.encode_packet(EU.PdsNack(nack_code=0x0B, nack_psn=99, spdcid=1, dpdcid=2,
                                       nack_payload=5))
    n = UW.decode_pds(bytes(nack))
    assert (n.type, n.code, n.psn, n.spdcid, n.dpdcid, n.payload) == (UW.T_NACK, 0x0B, 99, 1,
                                                                      2, 5)
    med = bytes(EU.encode_packet(
        EU.PdsRequest(type=2, next_hdr=2, psn=5, spdcid=1, dpdcid=2),
        EU.SesMediumRequest(opcode=1, som=1, eom=1, request_length=1, job_id=3, pid_on_fep=4,
                            buffer_offset=0x2000, initiator=6, mem_key_match_bits=0x77),
        None, b"z"))
    p = UW.decode_pds(med)
    r = UW.decode_request(p.next_hdr, med[p.size:])
    assert (r.opcode, r.message_id, r.request_length, r.buffer_offset, r.mem_key,
            r.pid_on_fep, r.size) == (1, None, 1, 0x2000, 0x77, 4, 32)
    with pytest.raises(UW.WireError):
        UW.decode_request(3, med[p.size:p.size + 10])


# -- the cores over an in-memory link ------------------------------------------------------


def _drive(a, b, deliver_a, deliver_b, done, rnd: random.Random, loss: float,
           dup: float = 0.0, shuffle: bool = False) -> None:
    """Step both cores with a hand clock until ``done()``; a stuck core fails the test."""
    now = 0.0
    for _ in range(200_000):
        moved = False
        for x, deliver in ((a, deliver_b), (b, deliver_a)):
            out = x.datagrams_to_send(now)
            if shuffle:
                rnd.shuffle(out)
            for d in out:
                moved = True
                if rnd.random() >= loss:
                    deliver(d, now)
                if rnd.random() < dup:
                    deliver(d, now)
        if done() and not moved:
            return
        if not moved:
            ts = [t for t in (a.get_timer(), b.get_timer()) if t is not None]
            assert ts, "both cores idle with work outstanding"
            now = max(now, min(ts))
            a.handle_timer(now)
            b.handle_timer(now)
        now += 1e-5
    raise AssertionError("no progress")


@pytest.mark.parametrize("loss", [0.0, 0.03])
def test_rc_write_read_send_with_go_back_n(loss: float) -> None:
    rnd = random.Random(7)
    ma, mb = Memory(), Memory()
    a = RcQp(0x11, 0xFFFFF0, ma, "10.0.1.11")  # PSNs wrap during the run
    b = RcQp(0x22, 0x123, mb, "10.0.1.12")
    a.connect("10.0.1.12", 0x22, 0x123)
    b.connect("10.0.1.11", 0x11, 0xFFFFF0)
    target = bytearray(1 << 20)
    mb.register(0x77, 0x1000, target)
    source = bytearray(rnd.randbytes(300_000))
    mb.register(0x78, 0x900000, source)
    data = rnd.randbytes(1 << 20)
    a.post_write(1, data, 0x1000, 0x77)
    dest = bytearray(len(source))
    a.post_read(2, dest, 0x900000, 0x78)
    rbuf = bytearray(70_000)
    b.post_recv(9, rbuf)
    a.post_send(3, data[:65_536])
    a.post_write(4, b"x", 0x1000, 0x99)  # wrong key: remote access error
    _drive(a, b, lambda d, t: a.receive_datagram(d, t), lambda d, t: b.receive_datagram(d, t),
           lambda: len(a.completions) == 4, rnd, loss)
    st = {c.wr_id: c.status for c in a.completions}
    assert st == {1: "SUCCESS", 2: "SUCCESS", 3: "SUCCESS", 4: "REM_ACCESS_ERR"}
    assert target == data and dest == source and rbuf[:65_536] == data[:65_536]
    assert [(c.op, c.length) for c in b.completions] == [("RECV", 65_536)]
    if loss:
        assert b.c.naks_sent > 0 and a.c.retransmits > 0  # go-back-N was exercised


@pytest.mark.parametrize("loss,dup", [(0.0, 0.0), (0.03, 0.03)])
def test_rud_write_read_send_with_sack_and_nack(loss: float, dup: float) -> None:
    rnd = random.Random(11)
    ma, mb = Memory(), Memory()
    A, B = "10.0.1.11", "10.0.1.12"
    a, b = UetEngine(A, ma, random.Random(1)), UetEngine(B, mb, random.Random(2))
    target = bytearray(1 << 20)
    mb.register(0x77, 0x1000, target)
    source = bytearray(rnd.randbytes(300_000))
    mb.register(0x78, 0x900000, source)
    data = rnd.randbytes(1 << 20)
    b.post_recv(5, 9, bytearray(70_000))
    a.post_write(1, B, 5, data, 0x1000, 0x77)
    dest = bytearray(len(source))
    a.post_read(2, B, 5, dest, 0x900000, 0x78)
    a.post_send(3, B, 5, data[:65_536])
    a.post_write(4, B, 5, b"x", 0x1000, 0x99)
    a.post_send(6, B, 5, b"no receive posted for this one")  # NO_SES_MSG_AVAIL until posted
    posted = []

    def to_b(d, t):
        b.receive_datagram(d[0], A, t)
        if not posted and b.stats.get("tx_nack_0x09"):
            posted.append(bytearray(64))
            b.post_recv(5, 10, posted[0])

    _drive(a, b, lambda d, t: a.receive_datagram(d[0], B, t), to_b,
           lambda: len(a.completions) == 5, rnd, loss, dup, shuffle=True)
    st = {c.wr_id: c.status for c in a.completions}
    assert st == {1: "SUCCESS", 2: "SUCCESS", 3: "SUCCESS", 4: f"SES_RC_{UW.RC_BAD_KEY:#04x}",
                  6: "SUCCESS"}
    assert target == data and dest == source
    assert posted[0][:30] == b"no receive posted for this one"
    if loss:
        assert a.stats.get("tx_retransmits", 0) > 0

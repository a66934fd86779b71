# SPDX-License-Identifier: GPL-2.0-only
"""MRC scapy layers: spec anchors, every opcode round-trips with a valid ICRC, SRv6,
no interference with RoCEv2, truncation errors, SACK bitmap rule."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.packet import Raw

from emu.wire import mrc as M
from emu.wire import roce as R
from emu.wire.codec import mrc as C
from emu.wire.codec import roce as CR
from emu.wire.errors import DecodeError
from emu.wire.ev import EVMode, packet_ev
from emu.wire.icrc import verify_icrc

A, B = "fd00:1::1", "fd00:2::1"
EV = 0xBEEF1234


def _one_of_each(ts: int = 0) -> list:
    """One MRC packet per opcode (BTH and headers, no IP)."""
    out = []
    for op in sorted(C.WRITE_OPCODES):
        imm = 0xDEADBEEF if op in C.WRITE_IMM_OPCODES else None
        out.append(M.write(op, dqpn=0x11, psn=0x100 + op, rqmsn=3, msn=4, va=0x7F0000001000,
                           rkey=0x1234, dmalen=4096, payload=bytes(range(37)), imm=imm,
                           tx_timestamp=0x55 if ts else None, rtx=op & 1, ackreq=1))
    bth = {"ts": ts}
    out.append(M.transport_ack(dqpn=0x11, psn=7, syndrome=R.aeth_syndrome(R.AETH_NAK, 2),
                               msn=9, **bth))
    out.append(M.endpoint_request(request_id=0xABCD, op=C.ERTH_PORT_STATUS_UPDATE,
                                  port_status_mask=0xFD, tx_timestamp=9, bth_fields=bth))
    out.append(M.endpoint_response(request_id=0xABCD, op=C.ERTH_EV_PROBE, ev=EV, num_ports=8,
                                   port_status_mask=0xFD, bth_fields=bth,
                                   port_states=C.pack_port_states([1, 2] + [1] * 6)))
    out.append(M.sack(dqpn=0x11, m=C.SACK_M_SKIP_ONCE, pr=1, ev=EV, cack_psn=0xFFFFF0,
                      sack_offset=2, sack_bitmap=0b1011, mpr=4, ack_psn_offset=-5,
                      cc={"ooo_count": 3, "rcvd_bytes": 0x123456}, bth_fields=bth))
    out.append(M.nack(dqpn=0x11, nack_reason=C.NACK_TRIMMED, ev=EV, nack_psn=0x42,
                      bth_fields=bth))
    out.append(M.probe(dqpn=0x11, probe_id=77, tx_timestamp=5, bth_fields=bth))
    assert sorted(p.opcode for p in out) == sorted(C.MRC_OPCODES)
    return out


def _layer_names(pkt) -> list[str]:
    names = []
    layer = pkt
    while layer:
        names.append(type(layer).__name__)
        layer = layer.payload
    return names


# ---------------------------------------------------------------- spec anchors

@pytest.mark.parametrize("name,size", [("METH", 4), ("TSETH", 4), ("SETH", 28), ("CC_STATE", 8),
                                       ("NETH", 20), ("PETH", 16), ("ERTH", 16), ("EETH", 36)])
def test_header_sizes(name, size):
    assert len(bytes(getattr(M, name)())) == size == C.HEADERS[name].SIZE


def test_bit_positions_follow_the_spec_page():
    """Byte offsets and bit positions from ``specs/mrc.md``, one probe per field."""
    def word(cls, off, fmt="!H", **kw):
        return struct.unpack_from(fmt, bytes(cls(**kw)), off)[0]

    assert bytes(M.TSETH()) == b"\0\0\0\x01"  # ftype = 1
    assert word(M.TSETH, 2, tsr=1, ftype=0) == 0x8000
    assert word(M.SETH, 0, m=C.SACK_M_ALWAYS_SKIP) == 2 << 5
    assert word(M.SETH, 0, pr=1) == 1 << 1
    assert word(M.SETH, 2, "!h", ack_psn_offset=-2) == -2
    assert word(M.SETH, 4, "!I", ev=EV) == EV
    assert word(M.SETH, 8, spdcid=0x1111) == 0x1111
    assert word(M.SETH, 10, dpdcid=0x2222) == 0x2222
    assert word(M.SETH, 12, "!I", cack_psn=0xABCDEF) == 0xABCDEF
    assert bytes(M.SETH(cc_type=0xA, cc_flags=0x5))[16] == 0xA5
    assert bytes(M.SETH(mpr=9))[17] == 9
    assert word(M.SETH, 18, "!h", sack_offset=-1) == -1
    assert word(M.SETH, 20, "!Q", sack_bitmap=1) == 1
    assert word(M.CC_STATE, 2, ooo_count=0x7FFF) == 0x7FFF
    assert bytes(M.CC_STATE(r_c=1, rcv_cwnd_pen=3))[4] == 0x83
    assert word(M.CC_STATE, 4, "!I", rcvd_bytes=0xABCDEF) == 0xABCDEF
    neth = bytes(M.NETH(nack_reason=0x19, vendor_info=7, ev=EV, nack_psn=0x123456,
                        cc_type=1, tx_timestamp=0xBEEF))
    assert neth[2] == 0x19 and neth[3] == 7 and neth[4:8] == EV.to_bytes(4, "big")
    assert neth[13:16] == b"\x12\x34\x56" and neth[16] == 0x10 and neth[18:20] == b"\xbe\xef"
    peth = bytes(M.PETH(vendor_info=3, probe_id=0x0102, spdcid=5, dpdcid=6, tx_timestamp=7))
    assert peth == bytes.fromhex("00000003 0102 0000 0005 0006 0007 0001")
    erth = bytes(M.ERTH(op=C.ERTH_EV_PROBE, vendor_info=4, port_status_mask=0xF0F0F0F0,
                        tx_timestamp=8))
    assert erth == bytes.fromhex("00010004 f0f0f0f0 00000000 0008 0001")
    eeth = M.EETH(port_states=C.pack_port_states({0: C.PORT_UP, 31: C.PORT_DOWN}))
    assert eeth.port_state(0) == C.PORT_UP and eeth.port_state(31) == C.PORT_DOWN
    assert bytes(eeth)[20] == 0x20 and bytes(eeth)[35] == 0x01


def test_code_points():
    assert C.NACK_REASONS == {0x01: "TRIMMED", 0x02: "TRIMMED_LASTHOP", 0x06: "NO_BITMAP",
                              0x07: "NO_PKT_BUFFER", 0x0A: "NO_RESOURCE",
                              0x0B: "PSN_OOR_WINDOW", 0x19: "UNEXP_EVENT"}
    assert C.SACK_M == {0: "NONE", 1: "SKIP_ONCE", 2: "ALWAYS_SKIP"}
    assert C.ERTH_OPS == {0: "PORT_STATUS_UPDATE", 1: "EV_PROBE"}
    assert {v: k for k, v in C.MRC_OPCODES.items()} == {
        "MRC_WRITE_FIRST": 0xC6, "MRC_WRITE_MIDDLE": 0xC7, "MRC_WRITE_LAST": 0xC8,
        "MRC_WRITE_LAST_IMM": 0xC9, "MRC_WRITE_ONLY": 0xCA, "MRC_WRITE_ONLY_IMM": 0xCB,
        "MRC_TRANSPORT_ACK": 0xD1, "MRC_ENDPOINT_REQUEST": 0xD8, "MRC_ENDPOINT_RESPONSE": 0xD9,
        "MRC_RELIABILITY_SACK": 0xDC, "MRC_RELIABILITY_NACK": 0xDD,
        "MRC_RELIABILITY_PROBE": 0xDE}
    assert isinstance(C.MRC_WIRE_VERSION, int) and M.MRC_WIRE_VERSION == C.MRC_WIRE_VERSION
    assert "ALWAYS_SKIP" in M.SETH(m=2).sprintf("%SETH.m%")
    assert "TRIMMED" in M.NETH(nack_reason=1).sprintf("%NETH.nack_reason%")


# ---------------------------------------------------------------- round trips with ICRC

@pytest.mark.parametrize("ts", [0, 1])
def test_every_opcode_round_trips_with_valid_icrc(ts):
    for mrc in _one_of_each(ts):
        pkt = M.ip6_udp(A, B, EV) / mrc
        wire = bytes(pkt)
        assert verify_icrc(wire), mrc.sprintf("%BTH.opcode%")
        back = IPv6(wire)
        assert _layer_names(back) == _layer_names(IPv6(bytes(pkt)))
        headers = [n for n in _layer_names(back)[3:] if n != "Raw"]
        assert _layer_names(back)[:3] == ["IPv6", "UDP", "BTH"]
        assert headers == [c.__name__ for c in M.header_classes(mrc.opcode, mrc.ts)]
        assert bytes(back) == wire  # dissected fields rebuild the same bytes
        assert packet_ev(back) == EV
        # and the codec sees the same headers
        decoded = CR.decode_packet(bytes(back[UDP].payload))
        assert [type(h).__name__ for h in decoded.headers] == headers


def test_ipv4_udp_mode_round_trip():
    pkt = IP(src="10.0.1.1", dst="10.0.2.1", flags="DF", id=0) / UDP(sport=0x1234, dport=4791) \
        / M.write(C.MRC_WRITE_ONLY_IMM, dqpn=1, psn=2, imm=3, payload=b"x" * 8)
    wire = bytes(pkt)
    assert verify_icrc(wire)
    assert packet_ev(IP(wire), EVMode.UDP) == 0x1234


def test_corrupted_packet_fails_icrc():
    wire = bytearray(bytes(M.ip6_udp(A, B, EV) / _one_of_each()[0]))
    wire[-10] ^= 1
    assert not verify_icrc(bytes(wire))


def test_retransmission_and_ts_bits():
    pkt = M.write(C.MRC_WRITE_FIRST, dqpn=1, psn=2, rtx=1, tx_timestamp=0x1FF)
    raw = bytes(pkt)
    assert raw[8] == 0b0011_0000  # RTX = b5, TS = b4
    back = R.BTH(raw)
    assert back.rtx == 1 and back.ts == 1 and back[M.TSETH].tx_timestamp == 0x1FF
    no_ts = R.BTH(bytes(M.write(C.MRC_WRITE_FIRST, dqpn=1, psn=2)))
    assert M.TSETH not in no_ts and no_ts[M.METH].payload.__class__ is R.RETH


def test_builders_validate():
    with pytest.raises(ValueError, match="imm required"):
        M.write(C.MRC_WRITE_ONLY_IMM, dqpn=1, psn=1)
    with pytest.raises(ValueError, match="imm not allowed"):
        M.write(C.MRC_WRITE_ONLY, dqpn=1, psn=1, imm=1)
    with pytest.raises(ValueError, match="not an MRC write"):
        M.write(0x0A, dqpn=1, psn=1)
    with pytest.raises(ValueError, match="request id"):
        M.endpoint_request(request_id=1 << 16)
    req = M.endpoint_request(request_id=0x1234)
    assert req.dqpn == C.ENDPOINT_QP and req.psn == 0x1234
    with pytest.raises(ValueError, match="not an MRC opcode"):
        M.header_classes(0x0A)


# ---------------------------------------------------------------- SRv6

@pytest.mark.parametrize("segments", [None, ["fc00:0:2::", "fc00:0:1::"]])
def test_srv6_icrc_covers_inner_packet_only(segments):
    inner = M.ip6_udp(A, B, EV, EVMode.SRV6) / M.sack(dqpn=5, ev=EV, cack_psn=10)
    outer = M.srv6_encap(inner, outer_src="fc00:0:9::1", outer_dst="fc00:0:1:2:3::",
                         segments=segments)
    wire = bytes(outer)
    back = IPv6(wire)
    if segments:
        assert IPv6ExtHdrSegmentRouting in back
    inner_back = back.getlayer(IPv6, 2)
    assert inner_back.dst == B and inner_back[M.SETH].ev == EV
    inner_bytes = bytes(inner_back)
    assert verify_icrc(inner_bytes)
    assert packet_ev(back, EVMode.SRV6) == EV
    # a switch shifts the uSIDs and decrements the hop limit: the inner packet is untouched
    back.hlim = 3
    back.dst = "fc00:0:2:3::"
    hopped = IPv6(bytes(back))
    assert hopped.hlim == 3 and hopped.dst == "fc00:0:2:3::"
    assert bytes(hopped.getlayer(IPv6, 2)) == inner_bytes
    assert verify_icrc(bytes(hopped.getlayer(IPv6, 2)))


# ---------------------------------------------------------------- no interference with RoCEv2

def test_roce_opcodes_unchanged():
    for op in (o for o in R.OPCODE_CHAINS if o < 0xC0):
        chain = R.header_chain(R.BTH(opcode=op))
        if op == R.CNP_OPCODE:
            assert tuple(chain) == (R.CNPPadding,)
            continue
        base = R.OPERATION_CHAINS[op & 0x1F]
        assert tuple(chain) == ((R.DETH, *base) if op >= 0x60 else base), hex(op)
        assert R.OPCODE_NAMES[op].split("_", 1)[0] in R.TRANSPORT_PREFIX
    pkt = IPv6(src=A, dst=B) / UDP(sport=1, dport=4791) / R.BTH(opcode=0x0B, ts=0) / \
        R.RETH(va=1, rkey=2, dmalen=3) / R.ImmDt(imm=4) / Raw(b"abcd")
    back = IPv6(bytes(pkt))
    assert verify_icrc(bytes(back))
    assert _layer_names(back)[2:] == ["BTH", "RETH", "ImmDt", "Raw"]
    assert M.METH not in back


# ---------------------------------------------------------------- truncation

@pytest.mark.parametrize("ts", [0, 1])
def test_truncation_names_header_and_offset(ts):
    for mrc in _one_of_each(ts):
        wire = bytes(mrc)
        full = CR.decode_packet(wire)
        offsets = {}
        off = 12
        for h in full.headers:
            offsets[h.NAME] = off
            off += h.SIZE
        for name, start in offsets.items():
            with pytest.raises(DecodeError) as e:
                CR.decode_packet(wire[:start + 1])
            assert e.value.header == name and e.value.offset == start
            assert str(e.value).startswith(f"{name} at offset {start}: truncated")
        with pytest.raises(DecodeError) as e:
            CR.decode_packet(wire[:off])  # headers complete, ICRC missing
        assert e.value.header == "ICRC"


@pytest.mark.parametrize("name", list(C.HEADERS))
def test_each_header_decode_truncated(name):
    cls = C.HEADERS[name]
    for cut in range(cls.SIZE):
        with pytest.raises(DecodeError, match=f"^{name} at offset 5"):
            cls.decode(b"\0" * 5 + b"\0" * cut, 5)


# ---------------------------------------------------------------- SACK bitmap

def test_sack_bitmap_lsb_first():
    assert C.sack_bitmap_psns(100, 2, 0b1011) == [102, 103, 105]
    assert C.sack_bitmap_psns(100, -3, 1) == [97]
    assert C.sack_bitmap_psns(0xFFFFFE, 1, 0b111) == [0xFFFFFF, 0, 1]  # PSN wraps at 2^24
    assert C.sack_bitmap_psns(0, -1, 1) == [0xFFFFFF]
    assert C.sack_bitmap_psns(5, 0, 0) == []
    assert C.sack_bitmap_psns(5, 1, 1 << 63) == [69]
    assert M.SETH(cack_psn=10, sack_offset=1, sack_bitmap=0b101).psns() == [11, 13]
    assert C.SETH(cack_psn=10, sack_offset=1, sack_bitmap=0b101).psns() == [11, 13]
    for bad in [(-1, 0, 0), (1 << 24, 0, 0), (0, 1 << 15, 0), (0, 0, 1 << 64)]:
        with pytest.raises(ValueError):
            C.sack_bitmap_psns(*bad)
    with pytest.raises(ValueError, match="outside the SACK window"):
        C.sack_bitmap_from_psns(100, 1, [165])


@given(st.integers(0, (1 << 24) - 1), st.integers(-(1 << 15), (1 << 15) - 1),
       st.integers(0, (1 << 64) - 1))
def test_sack_bitmap_round_trip(cack, offset, bitmap):
    psns = C.sack_bitmap_psns(cack, offset, bitmap)
    assert len(psns) == bin(bitmap).count("1")
    assert C.sack_bitmap_from_psns(cack, offset, psns) == bitmap


def test_port_state_helpers_validate():
    with pytest.raises(ValueError):
        C.pack_port_states({32: 1})
    with pytest.raises(ValueError):
        C.pack_port_states([16])
    with pytest.raises(ValueError):
        C.port_state(0, -1)

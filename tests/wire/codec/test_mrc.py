# SPDX-License-Identifier: GPL-2.0-only
"""MRC struct codecs ≡ scapy layers, header by header, and whole packets both ways."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw
from wirecheck import check_pair, field_values, scapy_fields

from emu.wire import icrc
from emu.wire import mrc as S
from emu.wire import roce as SR
from emu.wire.codec import mrc as C
from emu.wire.codec import roce as CR
from emu.wire.errors import FieldRangeError

PAIRS = [(getattr(S, name), C.HEADERS[name]) for name in C.LAYOUTS]
MRC_OPS = sorted(C.MRC_OPCODES)


@pytest.mark.parametrize("scapy_cls,codec_cls", PAIRS, ids=[p[1].__name__ for p in PAIRS])
def test_codec_equals_scapy(scapy_cls, codec_cls):
    @given(field_values(scapy_cls))
    def prop(values):
        check_pair(scapy_cls, codec_cls, values)

    prop()


@pytest.mark.parametrize("name", list(C.LAYOUTS))
def test_both_sides_follow_the_layout_table(name):
    """Codec names/widths/defaults and scapy fields all come from LAYOUTS."""
    codec_cls, scapy_cls = C.HEADERS[name], getattr(S, name)
    assert codec_cls.FIELDS == C.layout_names(name)
    assert codec_cls.WIDTHS == C.layout_widths(name)
    assert [(n, -b if s else b) for n, b, s in scapy_fields(scapy_cls)] == list(
        zip(C.layout_names(name), C.layout_widths(name), strict=True))
    defaults = {n: 0 for n in C.layout_names(name)} | C.layout_defaults(name)
    assert codec_cls().values() == defaults
    assert {n: scapy_cls().getfieldval(n) for n in defaults} == defaults
    assert codec_cls().encode() == bytes(scapy_cls())


def test_chains_match_scapy_for_every_mrc_opcode():
    assert {op for op in CR.CHAINS if op >= 0xC0} == set(MRC_OPS)
    assert {op for op in SR.OPCODE_CHAINS if op >= 0xC0} == set(MRC_OPS)
    for op in MRC_OPS:
        for ts in (0, 1):
            want = [c.__name__ for c in SR.header_chain(SR.BTH(opcode=op, ts=ts))]
            got = [c.__name__ for c in CR.chain_for(CR.BTH(opcode=op, ts=ts))]
            assert got == want, (hex(op), ts)
            assert want == [c.__name__ for c in S.header_classes(op, ts)]
    assert SR.OPCODE_NAMES[0xCA] == "MRC_WRITE_ONLY" == C.MRC_OPCODES[0xCA]


def _bth_values(data, opcode: int, ts: int) -> dict[str, int]:
    v = data.draw(field_values(SR.BTH))
    v.update(opcode=opcode, ts=ts, padcount=0)
    return v


@given(st.sampled_from(MRC_OPS), st.integers(0, 1), st.binary(max_size=64), st.data())
def test_whole_packet_scapy_to_codec(opcode, ts, payload, data):
    """scapy-built packets of every opcode, with and without TS, decode identically."""
    bth_values = _bth_values(data, opcode, ts)
    layers = SR.BTH(**bth_values)
    expect = []
    for cls in SR.header_chain(layers):
        values = data.draw(field_values(cls))
        expect.append((cls.__name__, values))
        layers = layers / cls(**values)
    wire = bytes(layers / Raw(payload))
    pkt = CR.decode_packet(wire)
    assert pkt.bth.values() == bth_values
    assert [(type(h).__name__, h.values()) for h in pkt.headers] == expect
    assert bytes(pkt.payload) == payload
    assert CR.encode_packet(pkt.bth, pkt.headers, pkt.payload, pkt.icrc) == wire


def _codec_values(data, cls) -> dict[str, int]:
    """Random values for a codec header's fields, using the layout widths."""
    out = {}
    for name, bits in zip(cls.FIELDS, cls.WIDTHS, strict=True):
        if bits < 0:
            out[name] = data.draw(st.integers(-(1 << (-bits - 1)), (1 << (-bits - 1)) - 1))
        else:
            out[name] = data.draw(st.integers(0, (1 << bits) - 1))
    return out


@given(st.sampled_from(MRC_OPS), st.integers(0, 1), st.binary(max_size=64), st.data())
def test_whole_packet_codec_to_scapy(opcode, ts, payload, data):
    """Codec-encoded packets dissect in scapy into the same layers, fields and payload."""
    bth = CR.BTH(**_bth_values(data, opcode, ts))
    headers = [cls(**_codec_values(data, cls)) for cls in CR.chain_for(bth)]
    wire = bytes(CR.encode_packet(bth, headers, payload, icrc=0x12345678))
    parsed = SR.BTH(wire)
    assert {n: parsed.getfieldval(n) for n in bth.FIELDS} == bth.values()
    assert parsed.icrc == 0x12345678
    layer = parsed.payload
    for h in headers:
        assert type(layer).__name__ == type(h).__name__
        assert {n: layer.getfieldval(n) for n in h.FIELDS} == h.values()
        layer = layer.payload
    assert (bytes(layer) if payload else b"") == payload


@given(st.sampled_from(MRC_OPS), st.integers(0, 1), st.integers(0, 0xFFFFFFFF),
       st.binary(max_size=40))
def test_codec_icrc_matches_scapy_over_ipv6(opcode, ts, ev, payload):
    """A daemon-built packet (codec + icrc_parts) carries the ICRC scapy computes."""
    sport, fl = ev >> 16, ev & 0xFFFF
    bth = CR.BTH(opcode=opcode, ts=ts, dqpn=0x42, psn=0x1234)
    headers = [cls() for cls in CR.chain_for(bth)]
    udp_payload = CR.encode_packet(bth, headers, payload)
    ip = IPv6(src="fd00::1", dst="fd00::2", fl=fl, nh=17, plen=8 + len(udp_payload))
    udp = UDP(sport=sport, dport=4791, len=8 + len(udp_payload), chksum=0)
    iph, udph = bytes(ip)[:40], bytes(udp)[:8]
    udp_payload[-4:] = icrc.pack_icrc(icrc.icrc_parts(
        iph, udph, udp_payload[:12], memoryview(udp_payload)[12:-4]))
    whole = iph + udph + bytes(udp_payload)
    assert icrc.verify_icrc(whole)
    scapy_pkt = IPv6(src="fd00::1", dst="fd00::2", fl=fl) / UDP(sport=sport, dport=4791) / \
        SR.BTH(wire := bytes(udp_payload))
    scapy_pkt[SR.BTH].icrc = None
    assert bytes(scapy_pkt[SR.BTH]) == wire


def test_padding_is_stripped_by_the_codec():
    pkt = S.write(C.MRC_WRITE_ONLY, dqpn=1, psn=2, payload=b"abcde")
    decoded = CR.decode_packet(bytes(pkt))
    assert decoded.bth.padcount == 3 and bytes(decoded.payload) == b"abcde"


@pytest.mark.parametrize("cls,field,value", [
    (C.SETH, "ack_psn_offset", 1 << 15), (C.SETH, "sack_offset", -(1 << 15) - 1),
    (C.SETH, "m", 4), (C.SETH, "cack_psn", 1 << 24), (C.NETH, "nack_psn", -1),
    (C.EETH, "port_states", 1 << 128), (C.ERTH, "op", 4), (C.TSETH, "ftype", 16),
])
def test_out_of_range_fields_refused(cls, field, value):
    with pytest.raises(FieldRangeError, match=field):
        cls(**{field: value})


def test_codec_modules_do_not_import_scapy():
    code = ("import sys, emu.wire.codec.roce as r, emu.wire.ev;"
            "assert 0xDC in r.CHAINS, 'MRC not registered by importing the codec package';"
            "assert not any(m.startswith('scapy') for m in sys.modules), 'scapy imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_emu_dissect_reads_mrc_on_emus_port_and_on_rocev2s():
    """emu's MRC runs on UDP 4971 (docs/architecture.md, Deviation): ``emu dissect`` and
    the interop runner's capture checks decode it there as MRC, ICRC checked, and still
    tell MRC from RoCEv2 by opcode on 4791; any other port is plain UDP."""
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether

    from emu.wire import dissect, pcapio

    def rec(dport: int, sport: int = 0xD123) -> dissect.Record:
        pkt = Ether() / IP(src="10.0.1.11", dst="10.0.1.12", flags="DF") / \
            UDP(sport=sport, dport=dport) / S.write(C.MRC_WRITE_ONLY, dqpn=3, psn=7,
                                                    payload=b"x" * 64)
        return dissect.summarise(1, pcapio.Frame(0.0, 1, bytes(pkt)))

    for port in (4971, 4791):
        r = rec(port)
        assert (r.protocol, r.type, r.fields["ev"], r.fields["len"]) == (
            "MRC", "MRC_WRITE_ONLY", 0xD123, 64), r.line()
        assert r.icrc == "ok" and r.error is None
    assert rec(4972).type == "UDP"

# SPDX-License-Identifier: GPL-2.0-only
"""UET scapy layers: round trips, the spec page's vectors, truncation, settings, bindings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from wirecheck import field_values

from emu.wire import uet as S
from emu.wire import uet_defs as D
from emu.wire.codec import uet as C
from emu.wire.errors import DecodeError

NAMES = sorted(S.LAYERS)


@pytest.mark.parametrize("name", NAMES)
def test_every_header_round_trips(name):
    cls = S.LAYERS[name]

    @given(field_values(cls))
    def prop(values):
        wire = bytes(cls(**values))
        assert len(wire) == C.HEADER_CLASSES[name].SIZE
        again = cls(wire)
        assert {k: again.getfieldval(k) for k in values} == values
        assert bytes(again) == wire

    prop()


# --------------------------------------------------------------------------
# Vectors from specs/uet.md (PDS only), expected fields worked out by hand
# --------------------------------------------------------------------------

VECTORS = {
    # 0x1190: type 00010 = RUD_REQ, next_hdr 0011 = REQ_STD, flags 0x10 = RETX
    "RUD_REQ": ("119012349876543234569abc", "PdsRequest", {
        "type": 2, "next_hdr": 3, "flag_rsvd0": 0, "retx": 1, "ar": 0, "syn": 0,
        "flag_rsvd1": 0, "clear_psn_offset": 0x1234, "psn": 0x98765432, "spdcid": 0x3456,
        "dpdcid": 0x9ABC}),
    # flags 0x14 = RETX | SYN; bytes 10-11 0x8876 = pdc_info 8 | psn_offset 0x876
    "RUD_REQ+SYN": ("119412349876543234568876", "PdsRequestSyn", {
        "type": 2, "next_hdr": 3, "flag_rsvd0": 0, "retx": 1, "ar": 0, "syn": 1,
        "flag_rsvd1": 0, "clear_psn_offset": 0x1234, "psn": 0x98765432, "spdcid": 0x3456,
        "pdc_info": 0x8, "psn_offset": 0x876}),
    # 0x3a32: type 00111 = ACK, next_hdr 0100 = RSP, flags 0x32 = M | RETX | REQ=1 (clear)
    "ACK": ("3a3286422468ace03456789a", "PdsAck", {
        "type": 7, "next_hdr": 4, "flag_rsvd0": 0, "m": 1, "retx": 1, "p": 0, "req": 1,
        "flag_rsvd1": 0, "ack_psn_offset": -0x79BE, "cack_psn": 0x2468ACE0, "spdcid": 0x3456,
        "dpdcid": 0x789A}),
    # 0x21a0: type 00100 = RUDI_REQ, next_hdr 3, flags 0x20 = M
    "RUDI": ("21a0000099887766", "PdsRudi", {
        "type": 4, "next_hdr": 3, "flag_rsvd0": 0, "m": 1, "retx": 0, "flag_rsvd1": 0,
        "rsvd": 0, "pkt_id": 0x99887766}),
    # 0x3180: type 00110 = UUD_REQ, next_hdr 3, no flags
    "UUD": ("31800000", "PdsUud", {"type": 6, "next_hdr": 3, "flag_rsvd0": 0, "rsvd": 0}),
}


@pytest.mark.parametrize("key", VECTORS)
def test_spec_vectors_decode_with_scapy_and_codec(key):
    hexstr, cls_name, want = VECTORS[key]
    wire = bytes.fromhex(hexstr)
    parsed = S.UetPds(wire)
    assert type(parsed).__name__ == cls_name
    assert {k: parsed.getfieldval(k) for k in want} == want
    assert bytes(parsed) == wire
    hdr = C.decode_pds(wire)
    assert type(hdr).__name__ == cls_name
    assert hdr.values() == want
    assert hdr.encode() == wire


def test_vector_derived_values():
    req = C.decode_pds(bytes.fromhex(VECTORS["RUD_REQ"][0]))
    assert req.clear_psn() == 0x98766666
    syn = C.decode_pds(bytes.fromhex(VECTORS["RUD_REQ+SYN"][0]))
    assert syn.start_psn() == 0x98764BBC
    assert S.UetPds(bytes.fromhex(VECTORS["RUD_REQ+SYN"][0])).start_psn() == 0x98764BBC
    assert syn.use_rsv_pdc() is True  # W: bit 15 = top bit of pdc_info 0x8
    ack = C.decode_pds(bytes.fromhex(VECTORS["ACK"][0]))
    assert ack.ack_psn() == 0x24683322


def test_start_psn_wraps():
    assert D.start_psn(5, 0x10) == 0xFFFFFFF5
    assert C.PdsRequestSyn(psn=3, psn_offset=4).start_psn() == 0xFFFFFFFF


def test_sack_helpers():
    h = C.PdsAckCcNscc(cack_psn=0xFFFFFFFE, sack_psn_offset=1, sack_bitmap=0b101)
    assert h.sack_base() == 0xFFFFFFFF
    assert h.sacked_psns() == [0xFFFFFFFF, 1]


# --------------------------------------------------------------------------
# Truncation: every header, at every length, names itself and its offset
# --------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(C.HEADER_CLASSES))
def test_truncated_header_raises_decode_error(name):
    cls = C.HEADER_CLASSES[name]
    wire = cls().encode()
    for cut in range(cls.SIZE):
        for prefix in (0, 7):
            buf = bytes(prefix) + wire[:cut]
            with pytest.raises(DecodeError) as ei:
                cls.decode(buf, prefix)
            assert ei.value.header == cls.NAME and ei.value.offset == prefix
            assert str(ei.value).startswith(f"{cls.NAME} at offset {prefix}: truncated")


def _sample_packets():
    yield "req+std+cas", (S.PdsRequestSyn(next_hdr=3, psn=1)
                          / S.SesStandardRequestSom(opcode=0x04)
                          / S.SesCompareSwap(amo_opcode=0x0D))
    yield "cc_req+std+rdv", (S.PdsCcRequest(type=14, next_hdr=3)
                             / S.SesStandardRequest(opcode=0x06) / S.SesRendezvous())
    yield "ack_cc+rsp_data", S.PdsAckCcNscc(next_hdr=5) / S.SesResponseData()
    yield "nack_ccx+rsp", S.PdsNackCcx(next_hdr=4) / S.SesResponse()
    yield "uud+small+amo", S.PdsUud(next_hdr=1) / S.SesSmallRequest(opcode=3) / S.SesAtomic()
    yield "rudi+medium", S.PdsRudi(next_hdr=2) / S.SesMediumRequest(opcode=1)
    yield "ack+small_rsp", S.PdsAck(next_hdr=6) / S.SesSmallResponseData()
    yield "cp", S.PdsControl(ctl_type=4)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("key,layers", list(_sample_packets()),
                         ids=[k for k, _ in _sample_packets()])
def test_truncated_packet_names_the_header_it_cut(key, layers, native):
    if native:
        layers = S.UetEntropy(entropy=1) / layers
    wire = bytes(layers)
    full = C.decode_packet(wire, native_ip=native)
    assert len(full.payload) == 0
    # where each header starts, from the full decode
    starts, off = [], 0
    for h in full.headers:
        starts.append((off, off + h.SIZE, h))
        off += h.SIZE
    for cut in range(len(wire)):
        with pytest.raises(DecodeError) as ei:
            C.decode_packet(wire[:cut], native_ip=native)
        begin, _end, h = next(s for s in starts if s[0] <= cut < s[1])
        assert ei.value.offset == begin
        if h is full.pds:
            assert ei.value.header.startswith("UET PDS")
        elif cut - begin < 2 and h.NAME != ei.value.header:
            # the bytes that pick the variant (SOM flag, AMO opcode) are cut off too:
            # the error names the base variant
            assert ei.value.header in ("UET SES standard request", "UET SES atomic ext")
        else:
            assert ei.value.header == h.NAME


def test_truncated_pds_message_names_the_type():
    with pytest.raises(DecodeError, match=r"^UET PDS ROD_REQ at offset 0: truncated: need 12"):
        C.decode_packet(bytes(S.PdsRequest(type=3))[:7])
    with pytest.raises(DecodeError, match=r"^UET PDS at offset 4: truncated: need 2 bytes"):
        C.decode_packet(b"\0\0\0\0\x10", native_ip=True)


@pytest.mark.parametrize("t", [0, 15, 16, 31])
def test_unknown_pds_type(t):
    with pytest.raises(DecodeError, match=rf"^UET PDS at offset 0: unknown PDS type {t}"):
        C.decode_packet(bytes([t << 3, 0]) + bytes(40))
    assert type(S.UetPds(bytes([t << 3, 0]) + bytes(40))) is S.UetPds


@pytest.mark.parametrize("nh", range(7, 16))
def test_unknown_next_hdr(nh):
    wire = bytes(S.PdsAck(next_hdr=nh)) + bytes(40)
    with pytest.raises(DecodeError, match=rf"^UET PDS ACK at offset 0: unknown next_hdr {nh}"):
        C.decode_packet(wire)


@given(st.binary(max_size=120), st.booleans())
def test_garbage_never_leaks_other_exceptions(data, native):
    try:
        C.decode_packet(data, native_ip=native)
    except DecodeError:
        pass


# --------------------------------------------------------------------------
# Settings where the sources disagree
# --------------------------------------------------------------------------

@pytest.fixture
def restore_settings():
    saved = {k: getattr(D, k.upper()) for k in D._SETTINGS}
    yield
    D.configure(**saved)


def test_use_rsv_pdc_bit_setting(restore_settings):
    assert D.make_pdc_info(True) == 0x8 and D.pdc_info_use_rsv_pdc(0x8)
    D.configure(use_rsv_pdc_bit=D.USE_RSV_PDC_BIT_R)
    assert D.make_pdc_info(True) == 0x1 and not D.pdc_info_use_rsv_pdc(0x8)
    syn = C.decode_pds(bytes.fromhex(VECTORS["RUD_REQ+SYN"][0]))
    assert syn.use_rsv_pdc() is False
    with pytest.raises(ValueError):
        D.configure(use_rsv_pdc_bit=14)
    with pytest.raises(KeyError):
        D.configure(no_such_setting=1)


def test_small_rsp_data_setting(restore_settings):
    layers = S.PdsAck(next_hdr=6) / S.SesSmallResponseData12(job_id=5, original_request_psn=9)
    wire = bytes(layers)
    assert type(C.decode_packet(wire).ses).__name__ == "SesSmallResponseData"
    assert len(C.decode_packet(wire).payload) == 8
    D.configure(small_rsp_data_size=12)
    pkt = C.decode_packet(wire)
    assert type(pkt.ses).__name__ == "SesSmallResponseData12" and pkt.ses.job_id == 5
    assert S.UetPds(wire)[S.SesSmallResponseData12].original_request_psn == 9


def test_mswap_setting(restore_settings):
    layers = (S.PdsRequest(next_hdr=3) / S.SesStandardRequestSom(opcode=3)
              / S.SesCompareSwap(amo_opcode=0x13, swap=1))
    wire = bytes(layers)
    assert type(C.decode_packet(wire).ext).__name__ == "SesAtomic"  # W: MSWAP is 4 bytes
    D.configure(mswap_uses_cas=True)
    assert C.decode_packet(wire).ext.swap == 1
    assert S.UetPds(wire)[S.SesCompareSwap].swap == 1


def test_tsend_atomic_carries_the_atomic_header():
    wire = bytes(S.PdsRequest(next_hdr=3) / S.SesStandardRequestSom(opcode=0x0D)
                 / S.SesAtomic(amo_opcode=2))
    assert C.decode_packet(wire).ext.amo_opcode == 2


# --------------------------------------------------------------------------
# Bindings
# --------------------------------------------------------------------------

def test_bind_native_ip():
    layers = S.UetEntropy(entropy=3) / S.PdsUud()
    try:
        S.bind_native_ip(254)
        assert IP(bytes(IP() / layers)).proto == 254
        assert IP(bytes(IP() / layers)).haslayer(S.PdsUud)
        assert IPv6(bytes(IPv6() / layers)).haslayer(S.PdsUud)
        assert not IP(bytes(IP(proto=253) / bytes(layers))).haslayer(S.UetEntropy)
    finally:
        S.bind_native_ip(D.UET_IP_PROTO_DEFAULT)
    assert IP(bytes(IP() / layers)).proto == 253
    with pytest.raises(ValueError):
        S.bind_native_ip(256)


def test_enum_names_show_and_parse():
    p = S.PdsRequest(type="ROD_REQ", next_hdr="REQ_STD")
    assert (p.type, p.next_hdr) == (3, 3)
    assert "ROD_REQ" in p.sprintf("%type%")
    assert S.PdsNack(nack_code="NEW_START_PSN").nack_code == 0x17
    assert set(range(0x01, 0x1B)) - {0x0C} <= set(D.NACK_CODES)

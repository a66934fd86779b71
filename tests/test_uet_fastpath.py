# SPDX-License-Identifier: GPL-2.0-only
"""The UET engines' one-``struct`` fast path equals the checked codec, byte for byte and
field for field, and declines (→ the generic decoder) whatever it does not cover."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from emu.transports.base import Gather
from emu.transports.uet import fastpath as F
from emu.wire.codec.uet import decode_packet, encode_packet
from emu.wire.codec.uet_pds import PdsAckCcNscc, PdsRequest, PdsRequestSyn
from emu.wire.codec.uet_ses import SesAtomic, SesStandardRequest, SesStandardRequestSom

u = st.integers
req_fields = st.fixed_dictionaries({
    "typ": st.sampled_from([2, 3]), "retx": u(0, 1), "ar": u(0, 1),
    "clear_psn_offset": u(-(1 << 15), (1 << 15) - 1), "psn": u(0, (1 << 32) - 1),
    "spdcid": u(0, 0xFFFF), "dpdcid": u(0, 0xFFFF),
    "opcode": st.sampled_from([0x01, 0x05, 0x09]), "eom": u(0, 1), "som": u(0, 1),
    "message_id": u(0, 0xFFFF), "job_id": u(0, (1 << 24) - 1), "pid_on_fep": u(0, 0xFFF),
    "buffer_offset": u(0, (1 << 64) - 1), "initiator": u(0, (1 << 32) - 1),
    "mem_key": u(0, (1 << 64) - 1), "message_offset": u(0, (1 << 32) - 1),
    "request_length": u(0, (1 << 32) - 1)})


def codec_request(f: dict, payload: bytes) -> bytearray:
    pds = PdsRequest(type=f["typ"], next_hdr=3, retx=f["retx"], ar=f["ar"],
                     clear_psn_offset=f["clear_psn_offset"], psn=f["psn"], spdcid=f["spdcid"],
                     dpdcid=f["dpdcid"])
    common = {"opcode": f["opcode"], "eom": f["eom"], "message_id": f["message_id"],
              "job_id": f["job_id"], "pid_on_fep": f["pid_on_fep"],
              "buffer_offset": f["buffer_offset"], "initiator": f["initiator"],
              "mem_key_match_bits": f["mem_key"], "request_length": f["request_length"]}
    if f["som"]:
        ses = SesStandardRequestSom(som=1, **common)
    else:
        ses = SesStandardRequest(som=0, payload_length=len(payload),
                                 message_offset=f["message_offset"], **common)
    return encode_packet(pds, ses, None, payload)


def fast_request(f: dict, payload: bytes, gather: bool):
    return F.request(f["typ"], f["retx"], f["ar"], f["clear_psn_offset"], f["psn"],
                     f["spdcid"], f["dpdcid"], f["opcode"], f["eom"], f["som"],
                     f["message_id"], f["job_id"], f["pid_on_fep"], f["buffer_offset"],
                     f["initiator"], f["mem_key"], len(payload), f["message_offset"],
                     f["request_length"], memoryview(payload), gather)


@given(req_fields, st.binary(max_size=300), st.booleans())
def test_request_bytes_equal_the_codec(f, payload, gather):
    b = fast_request(f, payload, gather)
    if gather:
        assert type(b) is Gather and len(b) == F.REQ_SIZE + len(payload)
        b = bytes(b)
    assert bytes(b) == bytes(codec_request(f, payload))


@given(req_fields, st.binary(max_size=300))
def test_decoded_request_equals_the_generic_decoder(f, payload):
    data = bytes(codec_request(f, payload))
    fast, slow = F.decode_request(data), decode_packet(data)
    assert fast is not None
    assert type(fast.pds) is type(slow.pds) and fast.pds.values() == slow.pds.values()
    assert type(fast.ses) is type(slow.ses) and fast.ses.values() == slow.ses.values()
    assert fast.ext is None and bytes(fast.payload) == bytes(slow.payload) == payload


def test_it_declines_what_it_does_not_cover():
    syn = encode_packet(PdsRequestSyn(next_hdr=3, syn=1, psn=5, spdcid=1),
                        SesStandardRequestSom(opcode=1, som=1), None, b"x")
    assert F.decode_request(bytes(syn)) is None  # SYN: the generic decoder
    atomic = encode_packet(PdsRequest(next_hdr=3, psn=5), SesStandardRequestSom(opcode=4, som=1),
                           SesAtomic(), b"x" * 8)
    assert F.decode_request(bytes(atomic)) is None  # an extension header follows
    zero = dict.fromkeys(("retx", "ar", "clear_psn_offset", "psn", "spdcid", "dpdcid", "eom",
                          "som", "message_id", "job_id", "pid_on_fep", "buffer_offset",
                          "initiator", "mem_key", "message_offset", "request_length"), 0)
    medium = bytearray(codec_request({**zero, "typ": 2, "opcode": 1}, b"y" * 60))
    medium[1] = (medium[1] & 0x7F)  # next_hdr 3 → 2 (low bit of the nibble)
    assert F.decode_request(bytes(medium)) is None
    assert F.decode_request(b"\x10" * 40) is None  # short
    assert F.decode_request(bytes(F.ack_cc_nscc(0, 0, 0, 0, 0, 1, 2, 3, 1, 1, 1, 0, 0))) is None


@given(u(0, 15), u(0, 1), u(0, 1), u(0, 3), u(-(1 << 15), (1 << 15) - 1), u(0, (1 << 32) - 1),
       u(0, 0xFFFF), u(0, 0xFFFF), u(0, 255), u(-(1 << 15), (1 << 15) - 1),
       u(0, (1 << 64) - 1), u(0, (1 << 24) - 1), u(0, 0xFFFF))
def test_ack_bytes_equal_the_codec(nh, m, retx, req, off, cack, s, d, mpr, soff, bm, rb, ooo):
    h = PdsAckCcNscc(next_hdr=nh, m=m, retx=retx, req=req, ack_psn_offset=off, cack_psn=cack,
                     spdcid=s, dpdcid=d, cc_type=0, mpr=mpr, sack_psn_offset=soff,
                     sack_bitmap=bm, rcvd_bytes=rb, ooo_count=ooo)
    assert bytes(F.ack_cc_nscc(nh, m, retx, req, off, cack, s, d, mpr, soff, bm, rb, ooo)) == \
        bytes(encode_packet(h))

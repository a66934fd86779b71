# SPDX-License-Identifier: GPL-2.0-only
"""RoCEv2 struct codecs ≡ scapy layers, header by header, and whole packets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wirecheck import check_pair, field_values

from emu.wire import roce as S
from emu.wire.codec import roce as C

PAIRS = [
    (S.BTH, C.BTH), (S.RETH, C.RETH), (S.AETH, C.AETH), (S.ImmDt, C.ImmDt),
    (S.IETH, C.IETH), (S.AtomicETH, C.AtomicETH), (S.AtomicAckETH, C.AtomicAckETH),
    (S.DETH, C.DETH), (S.CNPPadding, C.CNPPadding),
]


@pytest.mark.parametrize("scapy_cls,codec_cls", PAIRS, ids=[p[1].__name__ for p in PAIRS])
def test_codec_equals_scapy(scapy_cls, codec_cls):
    @given(field_values(scapy_cls))
    def prop(values):
        check_pair(scapy_cls, codec_cls, values)

    prop()


def test_chains_match_scapy_for_every_opcode():
    """The codec's opcode → header table is the scapy table, name for name."""
    codec_ops = {op for op in C.CHAINS if op < 0xC0}
    scapy_ops = {op for op in S.OPCODE_CHAINS if op < 0xC0}
    assert codec_ops == scapy_ops
    for op in scapy_ops:
        bth = S.BTH(opcode=op)
        want = [c.__name__ for c in S.header_chain(bth)]
        got = [c.__name__ for c in C.chain_for(C.BTH(opcode=op))]
        assert got == want, hex(op)


@given(st.sampled_from(sorted(op for op in S.OPCODE_CHAINS if op < 0xC0)),
       st.binary(max_size=64), st.data())
def test_whole_packet_scapy_to_codec(opcode, payload, data):
    """A scapy-built packet of every opcode decodes with the codec to the same headers."""
    bth_values = data.draw(field_values(S.BTH))
    bth_values.update(opcode=opcode, padcount=0)
    layers = S.BTH(**bth_values)
    for cls in S.header_chain(layers):
        layers = layers / cls(**data.draw(field_values(cls)))
    wire = bytes(layers / payload)
    pkt = C.decode_packet(wire)
    assert pkt.bth.values() == bth_values | {"opcode": opcode}
    assert [type(h).__name__ for h in pkt.headers] == [c.__name__ for c in S.header_chain(layers)]
    assert bytes(pkt.payload) == payload
    assert C.encode_packet(pkt.bth, pkt.headers, pkt.payload, pkt.icrc) == wire

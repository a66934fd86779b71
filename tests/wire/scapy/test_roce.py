# SPDX-License-Identifier: GPL-2.0-only
"""RoCEv2 scapy layers: every opcode carries exactly its headers and round-trips."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

from emu.wire import icrc
from emu.wire import roce as R

# specs/rocev2.md: opcode -> headers after the BTH, written out independently of the module's table
EXPECTED = {
    "RC_SEND_FIRST": [], "RC_SEND_MIDDLE": [], "RC_SEND_LAST": [],
    "RC_SEND_LAST_IMM": ["ImmDt"], "RC_SEND_ONLY": [], "RC_SEND_ONLY_IMM": ["ImmDt"],
    "RC_WRITE_FIRST": ["RETH"], "RC_WRITE_MIDDLE": [], "RC_WRITE_LAST": [],
    "RC_WRITE_LAST_IMM": ["ImmDt"], "RC_WRITE_ONLY": ["RETH"],
    "RC_WRITE_ONLY_IMM": ["RETH", "ImmDt"], "RC_READ_REQUEST": ["RETH"],
    "RC_READ_RESP_FIRST": ["AETH"], "RC_READ_RESP_MIDDLE": [], "RC_READ_RESP_LAST": ["AETH"],
    "RC_READ_RESP_ONLY": ["AETH"], "RC_ACKNOWLEDGE": ["AETH"],
    "RC_ATOMIC_ACK": ["AETH", "AtomicAckETH"], "RC_CMP_SWAP": ["AtomicETH"],
    "RC_FETCH_ADD": ["AtomicETH"], "RC_SEND_LAST_INV": ["IETH"], "RC_SEND_ONLY_INV": ["IETH"],
    "UD_SEND_ONLY": ["DETH"], "UD_SEND_ONLY_IMM": ["DETH", "ImmDt"], "CNP": ["CNPPadding"],
}
OPCODE_VALUES = {
    "RC_SEND_FIRST": 0x00, "RC_WRITE_ONLY_IMM": 0x0B, "RC_READ_REQUEST": 0x0C,
    "RC_ACKNOWLEDGE": 0x11, "RC_ATOMIC_ACK": 0x12, "RC_CMP_SWAP": 0x13, "RC_FETCH_ADD": 0x14,
    "RC_SEND_LAST_INV": 0x16, "RC_SEND_ONLY_INV": 0x17, "UD_SEND_ONLY": 0x64,
    "UD_SEND_ONLY_IMM": 0x65, "CNP": 0x81,
}


def test_opcode_values():
    for name, value in OPCODE_VALUES.items():
        assert R.OPCODES[name] == value


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("ipv6", [False, True], ids=["v4", "v6"])
def test_every_opcode_round_trips(name, ipv6):
    op = R.OPCODES[name]
    ip = IPv6(src="fd00::1", dst="fd00::2") if ipv6 else IP(src="10.0.0.1", dst="10.0.0.2",
                                                             flags="DF")
    pkt = ip / UDP(sport=49152 + op, dport=4791) / R.BTH(opcode=op, dqpn=0x123456, psn=0xABCDEF,
                                                         ackreq=1)
    values = {}
    for i, hname in enumerate(EXPECTED[name]):
        cls = getattr(R, hname)
        fields = {f.name: (i + 1) * 3 + j for j, f in enumerate(cls.fields_desc)}
        values[hname] = fields
        pkt = pkt / cls(**fields)
    pkt = pkt / Raw(b"payload!")
    wire = bytes(pkt)
    assert icrc.verify_icrc(wire)
    back = (IPv6 if ipv6 else IP)(wire)
    bth = back[R.BTH]
    assert (bth.opcode, bth.dqpn, bth.psn, bth.ackreq) == (op, 0x123456, 0xABCDEF, 1)
    layers = []
    layer = bth.payload
    while not isinstance(layer, Raw):
        layers.append(type(layer).__name__)
        assert {k: layer.getfieldval(k) for k in values[type(layer).__name__]} == \
            values[type(layer).__name__]
        layer = layer.payload
    assert layers == EXPECTED[name]
    assert layer.load == b"payload!"


def test_every_table_opcode_is_covered():
    assert {R.OPCODES[n] for n in EXPECTED} == {op for op in R.OPCODE_CHAINS if op < 0xC0} - {
        op for op in R.OPCODE_CHAINS if 0x20 <= op < 0x40}


def test_cnp_helper():
    pkt = IP(src="10.0.17.1", dst="10.0.18.1", flags="DF", tos=0xC2, id=0x718C) / UDP(
        sport=0, dport=4791) / R.cnp(0x118)
    assert bytes(pkt)[-4:] == bytes.fromhex("82fd002a")


def test_aeth_syndrome_helpers():
    s = R.aeth_syndrome(R.AETH_NAK, 2)
    assert R.aeth_kind(s) == (R.AETH_NAK, 2) and R.NAK_CODES[2] == "REMOTE_ACCESS_ERROR"
    assert R.aeth_kind(R.aeth_syndrome(R.AETH_RNR_NAK, 14)) == (R.AETH_RNR_NAK, 14)

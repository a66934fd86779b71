# SPDX-License-Identifier: GPL-2.0-only
"""Our ICRC against a real NIC's capture and against scapy's contrib implementation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emu.wire import icrc
from emu.wire.errors import DecodeError

# A CNP captured from a ConnectX-4 Lx (scapy's test/contrib/roce.uts, specs/rocev2.md).
CX4_CNP = bytes.fromhex(
    "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161"
    "0a0011010a001201000012b7002800008100ffff40000118"
    "0000000000000000000000000000000000000000"
    "82fd002a"
)


def test_connectx_cnp_vector_verifies():
    ip_packet = CX4_CNP[14:]
    assert icrc.verify_icrc(ip_packet)
    assert icrc.pack_icrc(icrc.compute_icrc(ip_packet)) == bytes.fromhex("82fd002a")


def test_one_flipped_payload_byte_breaks_it():
    ip_packet = bytearray(CX4_CNP[14:])
    ip_packet[-6] ^= 0x01
    assert not icrc.verify_icrc(ip_packet)


def test_variant_fields_do_not_matter():
    """TOS, TTL, IP checksum, UDP checksum and FECN/BECN change in flight; the ICRC must not."""
    p = bytearray(CX4_CNP[14:])
    p[1] = 0x03          # ECN CE mark
    p[8] = 7             # TTL after some hops
    p[10:12] = b"\x12\x34"
    p[26:28] = b"\xab\xcd"  # UDP checksum
    p[32] = 0x80          # FECN
    assert icrc.verify_icrc(p)
    p[12] ^= 1            # but the source address is invariant
    assert not icrc.verify_icrc(p)


def _contrib():
    contrib = pytest.importorskip("scapy.contrib.roce")
    from scapy.packet import split_layers
    # contrib binds UDP/4791 to its own BTH; keep ours as the default dissector.
    split_layers(UDP, contrib.BTH, dport=4791)
    return contrib


@given(
    v6=st.booleans(),
    tos=st.integers(0, 255), ttl=st.integers(1, 255), sport=st.integers(0, 65535),
    opcode=st.integers(0, 255), dqpn=st.integers(0, (1 << 24) - 1),
    psn=st.integers(0, (1 << 24) - 1), fecn=st.integers(0, 1),
    payload=st.binary(max_size=300),
)
def test_matches_scapy_contrib(v6, tos, ttl, sport, opcode, dqpn, psn, fecn, payload):
    """scapy's contrib BTH computes the ICRC by building a masked copy; ours masks bytes."""
    contrib = _contrib()
    if v6:
        ip = IPv6(src="fd00::1", dst="fd00::2", tc=tos, hlim=ttl, fl=sport * 7)
    else:
        ip = IP(src="10.0.0.1", dst="10.0.0.2", tos=tos, ttl=ttl, flags="DF", id=0)
    pkt = ip / UDP(sport=sport, dport=4791) / contrib.BTH(
        opcode=opcode, dqpn=dqpn, psn=psn, fecn=fecn) / Raw(payload)
    wire = bytes(pkt)
    assert icrc.verify_icrc(wire)
    # and our own BTH layer writes exactly the same bytes
    from emu.wire.roce import BTH
    ours = ip / UDP(sport=sport, dport=4791) / BTH(opcode=opcode, dqpn=dqpn, psn=psn,
                                                   fecn=fecn) / Raw(payload)
    assert bytes(ours) == wire


def test_parts_equal_whole():
    ip_packet = CX4_CNP[14:]
    whole = icrc.compute_icrc(ip_packet)
    assert icrc.icrc_parts(ip_packet[:20], ip_packet[20:28], ip_packet[28:40],
                           ip_packet[40:-4]) == whole


@pytest.mark.parametrize("data", [b"", b"\x45", CX4_CNP[14:40], b"\x95" + bytes(60)])
def test_garbage_raises_decode_error(data):
    with pytest.raises(DecodeError):
        icrc.compute_icrc(data)


def test_seal_fixes_a_packet():
    p = bytearray(Ether(CX4_CNP)[IP].build())
    p[-4:] = b"\0\0\0\0"
    assert not icrc.verify_icrc(p)
    assert icrc.verify_icrc(icrc.seal(p))


@given(st.binary(max_size=9000), st.integers(0, 2**32 - 1), st.integers(0, 64))
def test_fast_crc32_is_zlibs_crc32(data, start, cut):
    """The accelerated CRC (isal when installed) is exactly zlib's, chained and on views."""
    import zlib

    from emu.wire.crc32 import crc32

    assert crc32(data, start) == zlib.crc32(data, start)
    buf = bytearray(data)
    mv = memoryview(buf)[min(cut, len(buf)):]
    assert crc32(mv, start) == zlib.crc32(mv, start)
    # chaining piece by piece equals one pass (the daemon seals header, payload, tail apart)
    head, tail = data[:cut], data[cut:]
    assert crc32(tail, crc32(head, start)) == zlib.crc32(data, start)


def test_fast_crc32_is_in_use_when_installed():
    """isal is a declared dependency: a fresh install must get the fast path, not zlib."""
    from emu.wire import crc32 as mod

    pytest.importorskip("isal")
    assert mod.IMPLEMENTATION == "isal"

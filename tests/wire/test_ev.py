# SPDX-License-Identifier: GPL-2.0-only
"""EV placement: every mode and split round-trips; out-of-range values are refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6

from emu.wire import mrc as M
from emu.wire.ev import (
    DEFAULT_SPLIT,
    EVMode,
    EVSplit,
    apply_ev,
    ev_from_fields,
    ev_to_fields,
    packet_ev,
)
from emu.wire.icrc import verify_icrc


@st.composite
def splits(draw) -> EVSplit:
    sport_bits = draw(st.integers(1, 16))
    fl_bits = draw(st.integers(0, min(20, 32 - sport_bits)))
    base = draw(st.integers(0, (1 << (16 - sport_bits)) - 1)) << sport_bits
    return EVSplit(sport_bits, fl_bits, base)


def test_default_split():
    assert DEFAULT_SPLIT == EVSplit(16, 16)
    assert ev_to_fields(0x12345678) == (0x1234, 0x5678)
    assert ev_to_fields(0x12345678, "srv6") == (0x1234, 0x5678)
    assert ev_from_fields(0x1234, 0x5678) == 0x12345678


@given(st.integers(0, 0xFFFFFFFF), st.sampled_from([EVMode.STEV, EVMode.SRV6, "stev", "SRv6"]))
def test_default_split_round_trip(ev, mode):
    sport, fl = ev_to_fields(ev, mode)
    assert 0 <= sport < 1 << 16 and 0 <= fl < 1 << 16
    assert ev_from_fields(sport, fl, mode) == ev


@given(splits(), st.data(), st.sampled_from([EVMode.STEV, EVMode.SRV6]))
def test_any_split_round_trip(split, data, mode):
    ev = data.draw(st.integers(0, (1 << split.ev_bits) - 1))
    sport, fl = ev_to_fields(ev, mode, split)
    assert 0 <= sport < 1 << 16 and 0 <= fl < 1 << split.flow_label_bits
    assert sport >> split.sport_bits == split.sport_base >> split.sport_bits
    assert ev_from_fields(sport, fl, mode, split) == ev


@given(splits(), st.data())
def test_bits_outside_the_split_are_ignored(split, data):
    ev = data.draw(st.integers(0, (1 << split.ev_bits) - 1))
    sport, fl = ev_to_fields(ev, EVMode.STEV, split)
    noise_sport = data.draw(st.integers(0, 0xFFFF)) & ~((1 << split.sport_bits) - 1)
    noise_fl = data.draw(st.integers(0, 0xFFFFF)) & ~((1 << split.flow_label_bits) - 1)
    assert ev_from_fields(sport ^ noise_sport, fl | noise_fl, EVMode.STEV, split) == ev


@given(st.integers(0, 0xFFFF), st.one_of(st.none(), st.integers(0, 0xFFFFF)))
def test_udp_mode_round_trip(ev, fl):
    assert ev_to_fields(ev, EVMode.UDP) == (ev, None)
    assert ev_from_fields(ev, fl, "udp") == ev  # flow label ignored


@pytest.mark.parametrize("ev", [0x10000, 0xFFFFFFFF])
def test_udp_mode_refuses_evs_above_16_bits(ev):
    with pytest.raises(ValueError, match="UDP mode"):
        ev_to_fields(ev, EVMode.UDP)


@pytest.mark.parametrize("args,match", [
    ((-1,), "32-bit"), ((1 << 32,), "32-bit"), (("1",), "32-bit"),
    ((0x10000, EVMode.STEV, EVSplit(8, 8)), "8\\+8-bit STEV"),
    ((0, "ecmp"), "unknown EV mode"),
])
def test_ev_to_fields_errors(args, match):
    with pytest.raises(ValueError, match=match):
        ev_to_fields(*args)


@pytest.mark.parametrize("args,match", [
    ((1 << 16, 0), "16-bit"), ((-1, 0), "16-bit"),
    ((0, 1 << 20), "20-bit"), ((0, -1), "20-bit"),
    ((0, None, EVMode.STEV), "flow label"),
    ((0, None, EVMode.SRV6), "flow label"),
])
def test_ev_from_fields_errors(args, match):
    with pytest.raises(ValueError, match=match):
        ev_from_fields(*args)


@pytest.mark.parametrize("kw,match", [
    ({"sport_bits": 0}, "sport_bits"), ({"sport_bits": 17}, "sport_bits"),
    ({"flow_label_bits": 21}, "flow_label_bits"), ({"flow_label_bits": -1}, "flow_label_bits"),
    ({"sport_bits": 16, "flow_label_bits": 20}, "exceeds 32"),
    ({"sport_bits": 12, "flow_label_bits": 20, "sport_base": 0x0800}, "overlaps"),
    ({"sport_bits": 12, "flow_label_bits": 20, "sport_base": 1 << 16}, "not a UDP port"),
])
def test_split_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        EVSplit(**kw)


def test_20_bit_flow_label_split():
    split = EVSplit(sport_bits=12, flow_label_bits=20, sport_base=0xC000)
    sport, fl = ev_to_fields(0xABCDE123, EVMode.STEV, split)
    assert (sport, fl) == (0xCABC, 0xDE123)
    assert ev_from_fields(sport, fl, EVMode.STEV, split) == 0xABCDE123


# ---------------------------------------------------------------- scapy helpers

@given(st.integers(0, 0xFFFFFFFF))
def test_apply_and_read_back_on_a_dissected_packet(ev):
    """apply_ev rewrites sport (ICRC-covered) and flow label, and reseals the ICRC."""
    wire = bytes(M.ip6_udp("fd00::1", "fd00::2", 1) / M.probe(dqpn=3, probe_id=4))
    pkt = IPv6(wire)
    apply_ev(pkt, ev)
    rebuilt = bytes(pkt)
    assert verify_icrc(rebuilt)
    back = IPv6(rebuilt)
    assert packet_ev(back) == ev
    assert (back[UDP].sport, back.fl) == ev_to_fields(ev)


def test_apply_ev_udp_mode_keeps_flow_label_and_works_over_ipv4():
    pkt = IPv6(src="fd00::1", dst="fd00::2", fl=0xFFFFF) / UDP(dport=4791) / M.probe(dqpn=1)
    apply_ev(pkt, 0x4321, EVMode.UDP)
    back = IPv6(bytes(pkt))
    assert back.fl == 0xFFFFF and back[UDP].sport == 0x4321 and verify_icrc(bytes(back))
    v4 = IP(src="10.0.0.1", dst="10.0.0.2", flags="DF") / UDP(dport=4791) / M.probe(dqpn=1)
    apply_ev(v4, 0x4321, "udp")
    assert packet_ev(IP(bytes(v4)), "udp") == 0x4321
    with pytest.raises(ValueError, match="needs IPv6"):
        apply_ev(v4, 1, EVMode.STEV)
    with pytest.raises(ValueError, match="flow label"):
        packet_ev(IP(bytes(v4)), EVMode.STEV)
    with pytest.raises(ValueError, match="no UDP"):
        packet_ev(IPv6())


def test_apply_ev_targets_the_inner_packet_of_srv6():
    inner = M.ip6_udp("fd00::1", "fd00::2", 0, EVMode.SRV6) / M.probe(dqpn=1)
    outer = M.srv6_encap(inner, outer_src="fc00::1", outer_dst="fc00:0:1::")
    apply_ev(outer, 0xCAFEF00D, EVMode.SRV6)
    back = IPv6(bytes(outer))
    assert back.fl == 0 and back.getlayer(IPv6, 2).fl == 0xF00D
    assert packet_ev(back, EVMode.SRV6) == 0xCAFEF00D
    assert verify_icrc(bytes(back.getlayer(IPv6, 2)))

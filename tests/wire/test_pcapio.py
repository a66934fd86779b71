# SPDX-License-Identifier: GPL-2.0-only
"""pcap/pcapng reading and writing, checked against scapy's and tshark's readers."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Dot1Q, Ether
from scapy.utils import PcapNgWriter, rdpcap, wrpcap

from emu.wire import frames, pcapio
from emu.wire.errors import DecodeError


def test_pcapng_writer_round_trips_through_scapy_and_tshark(tmp_path):
    path = tmp_path / "x.pcapng"
    pkts = [bytes(Ether() / IP(dst=f"10.0.0.{i}") / UDP() / (b"x" * i)) for i in range(1, 4)]
    with path.open("wb") as f:
        w = pcapio.PcapngWriter(f)
        w.write(pkts[0], 1.5, "h1-leaf1")
        w.write(pkts[1], 2.000000001, "leaf1-spine1")
        w.write(pkts[2], 3.25, "h1-leaf1")
    got = list(pcapio.read_frames(path))
    assert [f.interface for f in got] == ["h1-leaf1", "leaf1-spine1", "h1-leaf1"]
    assert [f.data for f in got] == pkts
    assert got[1].time == pytest.approx(2.000000001, abs=1e-9)
    assert [bytes(p) for p in rdpcap(str(path))] == pkts
    if shutil.which("tshark"):
        out = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-e",
                              "frame.interface_name"], capture_output=True, text=True,
                             check=True).stdout.split()
        assert out == ["h1-leaf1", "leaf1-spine1", "h1-leaf1"]


def test_reads_scapy_pcap_and_pcapng(tmp_path):
    pkts = [Ether() / IP() / UDP(dport=4791) / b"abc", Ether() / IPv6() / UDP() / b"de"]
    wrpcap(str(tmp_path / "a.pcap"), pkts)
    w = PcapNgWriter(str(tmp_path / "a.pcapng"))
    for p in pkts:
        w.write(p)
    w.close()
    for name in ("a.pcap", "a.pcapng"):
        got = list(pcapio.read_frames(tmp_path / name))
        assert [f.data for f in got] == [bytes(p) for p in pkts]
        assert all(f.linktype == pcapio.LINKTYPE_ETHERNET for f in got)


@pytest.mark.parametrize("content", [b"", b"hello world, not a capture", b"\xd4\xc3\xb2\xa1\x02"])
def test_not_a_capture_is_one_clear_error(tmp_path, content):
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    with pytest.raises(pcapio.CaptureError, match="bad.pcap"):
        list(pcapio.read_frames(path))


def test_cut_short_capture_is_reported(tmp_path):
    wrpcap(str(tmp_path / "a.pcap"), [Ether() / IP() / UDP() / (b"x" * 100)] * 2)
    data = (tmp_path / "a.pcap").read_bytes()
    (tmp_path / "cut.pcap").write_bytes(data[:-10])
    with pytest.raises(pcapio.CaptureError, match="cut short"):
        list(pcapio.read_frames(tmp_path / "cut.pcap"))


def test_frame_walk_vlan_padding_and_srv6():
    inner = IPv6(src="fd00::1", dst="fd00::2", fl=0xABCDE) / UDP(sport=1234, dport=4791) / b"abcd"
    outer = Ether() / Dot1Q(vlan=5) / IPv6(src="fc00::1", dst="fc00:0:1:2::") / \
        IPv6ExtHdrSegmentRouting(addresses=["fc00:0:9::"], segleft=0) / inner
    raw = bytes(outer)
    dg = frames.parse_ip(memoryview(raw)[frames.ip_start(raw, pcapio.LINKTYPE_ETHERNET):])
    assert (dg.src, dg.dst, dg.sport, dg.dport, dg.flow_label) == ("fd00::1", "fd00::2", 1234,
                                                                   4791, 0xABCDE)
    assert bytes(dg.l4) == b"abcd" and bytes(dg.ip) == bytes(inner)
    assert dg.encap and dg.segments == ["fc00:0:9::"]
    # Ethernet padding after a short IPv4 packet never reaches the payload
    small = bytes(Ether() / IP(src="1.1.1.1", dst="2.2.2.2") / UDP(dport=4793) / b"\x31\x80\0\0")
    dg = frames.parse_ip(memoryview(small + bytes(10))[14:])
    assert bytes(dg.l4) == b"\x31\x80\0\0" and len(dg.ip) == 32


@pytest.mark.parametrize("cut", range(0, 35, 2))
def test_frame_walk_truncation_is_decode_error(cut):
    raw = bytes(IP() / UDP() / b"payload")
    with pytest.raises(DecodeError):
        frames.parse_ip(raw[:cut])


def test_pcapng_comments_and_nanosecond_times_read_back(tmp_path):
    """Section and interface comments (what ``emu capture`` says its timestamps mean) come
    back through read_info and capinfos; integer-ns times keep gaps of 84 ns (4 KiB at
    400 Gb/s), also far from 0, where a float of seconds steps by ~238 ns."""
    path = tmp_path / "c.pcapng"
    pkt = bytes(Ether() / IP() / UDP(dport=4791) / b"x")
    base = 1_796_000_000_123_456_789
    with path.open("wb") as f:
        w = pcapio.PcapngWriter(f, ["first comment", "emu-time: units=fabric scale=100"],
                                application="emu capture")
        w.interface("h1-h2", comments=["timestamps: fabric time"])
        for i in range(3):
            w.write(pkt, interface="h1-h2", time_ns=base + 84 * i)
    info = pcapio.read_info(path)
    assert info.comments == ["first comment", "emu-time: units=fabric scale=100"]
    assert info.application == "emu capture"
    assert [(i.name, i.tick, i.comments) for i in info.interfaces] == [
        ("h1-h2", 1e-9, ["timestamps: fabric time"])]
    assert [fr.time_ns for fr in pcapio.read_frames(path)] == [base, base + 84, base + 168]
    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed")
    out = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-e", "frame.time_epoch",
                          "-e", "frame.time_delta"], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    rows = [ln.split("\t") for ln in out if ln]
    assert [r[0] for r in rows] == ["1796000000.123456789", "1796000000.123456873",
                                    "1796000000.123456957"]
    assert [r[1] for r in rows] == ["0.000000000", "0.000000084", "0.000000084"]
    caps = subprocess.run(["capinfos", "-k", str(path)], capture_output=True, text=True,
                          check=True).stdout
    assert "first comment" in caps and "emu-time: units=fabric scale=100" in caps


def test_a_plain_pcapng_has_no_options_in_its_section_header(tmp_path):
    """No comments given: the section header is what it always was (28 bytes)."""
    path = tmp_path / "p.pcapng"
    with path.open("wb") as f:
        pcapio.PcapngWriter(f)
    assert len(path.read_bytes()) == 28
    assert pcapio.read_info(path).comments == []

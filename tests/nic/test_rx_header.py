# SPDX-License-Identifier: GPL-2.0-only
"""The RoCEv2 ICRC checked over the IPv4 header as received (issue #33, item 1).

Third-party packets: Linux rxe's (``/work/shared/vectors/rxe/``, IP IDs counting up,
DF set) and a ConnectX-4 Lx CNP (ID 0x718c). First the daemon's check itself, fed
each frame's header word; then the whole receive path: the frames injected on a
veth, stamped by the namespace's rule (:mod:`emu.nic.rxheader`), read by a
:class:`~emu.nic.udp.PortSocket` and checked as the daemon checks them.
"""

from __future__ import annotations

import collections
import contextlib
import os
import secrets
import select
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from emu.nic import rxheader
from emu.nic.framing import RoceIcrc
from emu.wire.pcapio import read_frames

RXE = Path(__file__).resolve().parents[2].parent / "shared" / "vectors" / "rxe" / \
    "linux-rxe-rc-pingpong.pcap"
CX4_CNP = bytes.fromhex(
    "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161"
    "0a0011010a001201000012b7002800008100ffff40000118"
    "0000000000000000000000000000000000000000"
    "82fd002a")

needs_vectors = pytest.mark.skipif(not RXE.exists(), reason=f"{RXE} not found "
                                   "(../shared beside the checkout)")


def _roce(frame: bytes) -> tuple[bytes, str, int, str, int, bytes] | None:
    """(UDP payload, src, sport, dst, dport, IPv4 header bytes 4..7) of a RoCEv2 frame."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0xF) * 4
    if ip[9] != 17:
        return None
    sport, dport, ulen = struct.unpack_from("!HHH", ip, ihl)
    if dport != 4791:
        return None
    return (bytes(ip[ihl + 8:ihl + ulen]), socket.inet_ntoa(ip[12:16]), sport,
            socket.inet_ntoa(ip[16:20]), dport, bytes(ip[4:8]))


def _rxe_frames() -> list[bytes]:
    return [bytes(f.data) for f in read_frames(RXE)]


@needs_vectors
def test_every_rxe_packet_verifies_with_its_header_as_received():
    """All 385 RoCEv2 packets of the rxe capture pass; with the old assumption (ID 0,
    DF) every one of them whose ID is not 0 was dropped as a bad ICRC."""
    framer = RoceIcrc()
    pkts = [p for p in map(_roce, _rxe_frames()) if p is not None]
    assert len(pkts) == 385
    assert all(framer.check(d, s, sp, t, tp, word) for d, s, sp, t, tp, word in pkts)
    assumed = [framer.check(d, s, sp, t, tp) for d, s, sp, t, tp, word in pkts]
    assert sum(not ok for ok in assumed) == sum(w[:2] != b"\0\0" for *_, w in pkts) > 300
    # the in-place form the daemon's receive loop uses agrees
    for d, s, sp, t, tp, word in pkts[:50]:
        buf = bytearray(b"x" * 7 + d)
        assert framer.check_buf(buf, 7, len(buf), s, sp, t, tp, word)
        assert buf[7:] == d  # BTH byte 4 put back


def test_a_connectx_cnp_verifies_with_its_header_as_received():
    framer = RoceIcrc()
    d, s, sp, t, tp, word = _roce(CX4_CNP)
    assert word == bytes.fromhex("718c4000")
    assert framer.check(d, s, sp, t, tp, word)
    assert not framer.check(d, s, sp, t, tp)  # ID 0 assumed: the old drop


def _flip(b: bytes, bit: int) -> bytes:
    out = bytearray(b)
    out[bit // 8] ^= 0x80 >> (bit % 8)
    return bytes(out)


@needs_vectors
def test_a_flipped_bit_anywhere_the_icrc_covers_is_bad():
    """Every bit of what the check covers, one at a time, on a data packet and an ACK:
    the IPv4 identification and the reserved and DF flags, the source and destination
    addresses and ports (the socket reports them), the BTH (but its FECN/BECN byte),
    payload, pad and the ICRC itself. The fields the ICRC masks do not matter."""
    framer = RoceIcrc()
    pkts = [p for p in map(_roce, _rxe_frames()) if p is not None]
    for d, s, sp, t, tp, word in (max(pkts, key=lambda p: len(p[0])),
                                  min(pkts, key=lambda p: len(p[0]))):
        assert framer.check(d, s, sp, t, tp, word)
        for bit in range(18):  # ID (16) + reserved + DF; MF/offset never reach a socket
            assert not framer.check(d, s, sp, t, tp, _flip(word, bit)), bit
        for bit in range(32):
            s2 = socket.inet_ntoa(_flip(socket.inet_aton(s), bit))
            t2 = socket.inet_ntoa(_flip(socket.inet_aton(t), bit))
            assert not framer.check(d, s2, sp, t, tp, word), ("src", bit)
            assert not framer.check(d, s, sp, t2, tp, word), ("dst", bit)
        for bit in range(16):
            assert not framer.check(d, s, sp ^ (1 << bit), t, tp, word), ("sport", bit)
            assert not framer.check(d, s, sp, t, tp ^ (1 << bit), word), ("dport", bit)
        for bit in range(len(d) * 8):
            if bit // 8 == 4:  # BTH byte 4 (FECN, BECN, reserved): masked
                assert framer.check(_flip(d, bit), s, sp, t, tp, word)
                continue
            assert not framer.check(_flip(d, bit), s, sp, t, tp, word), ("udp payload", bit)


# -- the whole receive path: frames on a veth, the namespace's rule, the socket ----------

def _sysctl(key: str, value: str) -> None:
    with open("/proc/sys/" + key.replace(".", "/"), "w") as f:
        f.write(value)


@contextlib.contextmanager
def _wire() -> Iterator[tuple[str, str, str]]:
    """Namespaces ``inj`` and ``nic`` joined by a veth; ``nic`` holds both addresses of
    the rxe capture (so it takes either direction's packets: accept_local) and the
    stamping rule. Yields (inj, nic, nic's MAC); both removed afterwards."""
    from pyroute2 import IPRoute, netns

    prefix = "emurxh" + secrets.token_hex(3)
    inj, nic = prefix + "-inj", prefix + "-nic"
    made = []
    try:
        for ns in (inj, nic):
            netns.create(ns)
            made.append(ns)
        with IPRoute(netns=inj) as ipr:
            ipr.link("add", ifname="i0", kind="veth", peer={"ifname": "n0", "net_ns_fd": nic})
            ipr.link("set", index=ipr.link_lookup(ifname="i0")[0], state="up")
        with IPRoute(netns=nic) as ipr:
            idx = ipr.link_lookup(ifname="n0")[0]
            for a in ("10.0.9.1", "10.0.9.2"):
                ipr.addr("add", index=idx, address=a, prefixlen=24)
            ipr.link("set", index=idx, state="up")
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            mac = ipr.get_links(idx)[0].get_attr("IFLA_ADDRESS")
        yield inj, nic, mac
    finally:
        for ns in made:
            netns.remove(ns)


def _inject(inj: str, frames: list[bytes]) -> None:
    from emu.fabric.capture import in_netns

    def send() -> None:
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind(("i0", 0))
            for f in frames:
                s.send(f)

    in_netns(inj, send)


def _ip_csum(hdr: bytearray) -> None:
    hdr[10:12] = b"\0\0"
    total = sum(struct.unpack(f"!{len(hdr) // 2}H", hdr))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    hdr[10:12] = struct.pack("!H", ~total & 0xFFFF)


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")
@needs_vectors
def test_rxe_frames_on_the_wire_pass_the_daemons_receive_path():
    """The capture's 385 RoCEv2 frames, sent onto a veth as rxe sent them, are all read
    and none counts as a bad ICRC; copies with a bit flipped in the IP identification
    or the DF flag (IP checksum fixed, so the kernel delivers them) or in the payload
    are each counted in ``rx_bad_icrc`` and not delivered."""
    from emu.fabric.capture import in_netns
    from emu.nic.udp import PortSocket

    frames = [f for f in _rxe_frames() if _roce(f) is not None]
    with _wire() as (inj, nic, mac):
        dst = bytes.fromhex(mac.replace(":", ""))
        good = [dst + f[6:] for f in frames]
        bad = []
        for i, f in enumerate(good[::40]):
            g = bytearray(f)
            if i % 3 == 0:
                g[14 + 5] ^= 0x01  # IP identification
            elif i % 3 == 1:
                g[14 + 6] ^= 0x40  # DF
            else:
                g[-10] ^= 0x10  # payload (UDP checksum 0: the kernel does not look)
            _ip_csum(memoryview(g)[14:34])  # type: ignore[arg-type]
            bad.append(bytes(g))

        def run() -> tuple[collections.Counter, list]:
            _sysctl("net.ipv4.conf.all.accept_local", "1")
            _sysctl("net.ipv4.conf.n0.accept_local", "1")
            _sysctl("net.ipv4.conf.all.rp_filter", "0")
            _sysctl("net.ipv4.conf.n0.rp_filter", "0")
            assert rxheader.install(4791) is None
            socks = [PortSocket(a, 4791, gro=False, rcvbuf=8 << 20)
                     for a in ("10.0.9.1", "10.0.9.2")]
            try:
                assert all(ps.enable_ip_word() for ps in socks)
                framer = RoceIcrc()
                c: collections.Counter = collections.Counter()
                out: collections.deque = collections.deque()
                _inject(inj, good + bad)
                for ps in socks:
                    with contextlib.suppress(BlockingIOError):
                        while True:
                            ps.recv_batch(out, 64, 10_000, c, framer.check, framer.check_buf)
                return c, [bytes(d) for d, _, _ in out]
            finally:
                for ps in socks:
                    ps.close()
                rxheader.remove(4791)

        c, got = in_netns(nic, run)
    assert c["rx_packets"] == len(good) + len(bad)
    assert c["rx_bad_icrc"] == len(bad) > 0
    assert sorted(got) == sorted(_roce(f)[0] for f in frames)


def test_the_rule_stamps_the_header_word_in_wire_order():
    """The nftables script: IPv4 bytes 4..7 (``@nh,32,32``) into the mark, for the
    transport's UDP port only, replacing a table a killed daemon left."""
    r = rxheader.ruleset(4791)
    assert "udp dport 4791 meta mark set @nh,32,32" in r
    assert "hook prerouting priority raw" in r
    assert r.index("delete table ip emu_nic_rx_4791") < r.index("chain stamp")


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")
def test_ipv6_roce_takes_a_zero_udp_checksum_and_uet_does_not():
    """Linux rxe sends RoCEv2 over IPv6 with UDP checksum 0: the RoCE sockets take it
    (the ICRC, checked after, covers the datagram); a socket of a transport without
    an end-to-end check (UET's) still has the kernel drop it."""
    from pyroute2 import IPRoute, netns

    from emu.fabric.capture import in_netns
    from emu.nic.udp import PortSocket

    ns = "emurx6" + secrets.token_hex(3)
    netns.create(ns)
    try:
        with IPRoute(netns=ns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")

        def run() -> tuple[int, int]:
            roce = PortSocket("::1", 4791, gro=False)
            uet = PortSocket("::1", 4793, gro=False)
            raw = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_UDP)
            try:
                assert rxheader.stamp(4791, [roce]) == (rxheader.AS_RECEIVED, None)
                got = []
                plain = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
                for ps in (roce, uet):
                    body = b"\x04" + bytes(27)
                    raw.sendto(struct.pack("!HHHH", 5000, ps.port, 8 + len(body), 0) + body,
                               ("::1", 0))
                    # then one with a checksum: once it is there, so is the first, if taken
                    plain.sendto(b"checksummed", ("::1", ps.port))
                    select.select([ps.sock], [], [], 30)
                    out: collections.deque = collections.deque()
                    c: collections.Counter = collections.Counter()
                    with contextlib.suppress(BlockingIOError):
                        ps.recv_batch(out, 8, 8, c)
                    assert bytes(out[-1][0]) == b"checksummed"
                    got.append(c["rx_packets"] - 1)
                plain.close()
                return got[0], got[1]
            finally:
                for s in (roce, uet, raw):
                    s.close()

        assert in_netns(ns, run) == (1, 0)
    finally:
        netns.remove(ns)


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")
def test_the_daemon_installs_the_rule_for_its_roce_port_and_removes_it_on_close():
    """A NIC daemon's IPv4 RoCE socket reads header words ("as received" in its stats)
    through its port's table, and the table goes with the daemon."""
    from pyroute2 import IPRoute, netns

    from emu.fabric.capture import in_netns
    from emu.nic.config import NicConfig
    from emu.nic.daemon import NicDaemon

    def tables() -> str:
        import subprocess

        return subprocess.run(["nft", "list", "tables"], capture_output=True,
                              text=True).stdout

    ns = "emurxd" + secrets.token_hex(3)
    netns.create(ns)
    try:
        with IPRoute(netns=ns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")

        def run() -> tuple[str, int, str, str]:
            d = NicDaemon(NicConfig(sock_path=f"/tmp/{ns}.sock", cluster=ns, host="h",
                                    transports=["roce"], ports={"roce": 0},
                                    addresses=["127.0.0.1"]))
            d.open()
            try:
                slot = d.slots["roce"]
                during = tables()
            finally:
                d.close()
            return slot.ip_header, slot.port, during, tables()

        mode, port, during, after = in_netns(ns, run)
        assert mode == rxheader.AS_RECEIVED
        assert rxheader.table_name(port) in during and rxheader.table_name(port) not in after
    finally:
        netns.remove(ns)

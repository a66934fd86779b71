# SPDX-License-Identifier: GPL-2.0-only
"""The NIC's frame ring (emu.nic.frames) on real namespaces (root), routed a → r → b.

What a frame built in the daemon must share with a datagram the kernel would
have sent from a UDP socket bound to the entropy: it is routed (next hop r,
its MAC from the neighbour table), its UDP checksum is right (the receiving
kernel drops it otherwise — ``Udp*InCsumErrors``), source port = entropy,
the TOS byte survives, the payload is byte-exact; and in a TX queue that
mixes frames and socket sends, nothing overtakes anything.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque

import pytest
from routed_ns import RoutedTriple, made_and_removed

from emu.core.datagram import Gather, Run
from emu.fabric.capture import in_netns
from emu.nic.frames import FrameTx
from emu.nic.framing import RoceIcrc
from emu.nic.txpath import TxPath
from emu.nic.udp import PortSocket
from emu.transports.base import TxMeta
from emu.transports.roce.packets import middle_heads
from emu.wire.icrc import verify_icrc

PORT = 5561
OCTET = 79


@pytest.fixture(scope="module")
def net():
    # one routed triple for the module: tearing namespaces down keeps the kernel busy for
    # a while, and a timing-sensitive test after this module (PFC) felt six of them
    yield from made_and_removed(lambda: RoutedTriple("fr", OCTET, PORT))


def _addrs(fam: int) -> tuple[str, str]:
    if fam == socket.AF_INET6:
        return f"fd{OCTET}:1::2", f"fd{OCTET}:2::2"
    return f"10.{OCTET}.1.2", f"10.{OCTET}.2.2"


def _receiver(net: RoutedTriple, fam: int) -> socket.socket:
    s = net.sock(net.b, fam, bind=True)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
    else:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.settimeout(2.0)
    return s


def _read(s: socket.socket, n: int) -> list[tuple[bytes, int, int]]:
    """``n`` datagrams as (payload, source port, TOS byte), not counting the ones
    :func:`_drain_resolved` sent to get the next hop resolved."""
    out = []
    while len(out) < n:
        data, anc, _, addr = s.recvmsg(65536, socket.CMSG_SPACE(4))
        if data != b"resolve":
            out.append((data, addr[1], anc[0][2][0] if anc else -1))
    return out


def _port(net: RoutedTriple, fam: int) -> tuple[PortSocket, FrameTx]:
    src, _ = _addrs(fam)
    return in_netns(net.a, lambda: (PortSocket(src, PORT, ifname="a0", mtu=1500),
                                    FrameTx("a0", src, 1500)))


def _drain_resolved(fx: FrameTx, q: deque, main: PortSocket) -> int:
    """Drain; while r's MAC is unknown, send the head by socket once (as TxPath does),
    which makes the kernel resolve it, and try again."""
    sent = 0
    for _ in range(200):
        k, _, _ = fx.drain(q, main, lambda ip: main)
        sent += k
        fx.kick()
        if not q:
            return sent
        data, addr, meta = q[0]
        if k == 0 and fx.counters()["unresolved"]:
            main.sock.sendto(b"resolve", addr)  # the kernel's own send resolves r
            time.sleep(0.02)
    raise AssertionError("the next hop never resolved")


@pytest.mark.parametrize("fam", [socket.AF_INET6, socket.AF_INET], ids=["v6", "v4"])
def test_frames_are_routed_checksummed_and_carry_entropy_and_tos(net, fam):
    rx = _receiver(net, fam)
    main, fx = _port(net, fam)
    try:
        _, dst = _addrs(fam)
        payloads = [os.urandom(64 + 30 * i) for i in range(40)]  # up to 1234 B: within the MTU
        q: deque = deque()
        for i, p in enumerate(payloads):
            meta = TxMeta(50000 + i, dscp=i % 64, ecn=i % 3)
            if i % 2:  # scatter-gather pieces, as the UET engine hands them over
                q.append((Gather(bytearray(p[:10]), memoryview(p)[10:-3], bytearray(p[-3:]),
                                 len(p)), (dst, PORT), meta))
            else:
                q.append((p, (dst, PORT), meta))
        _drain_resolved(fx, q, main)
        got = _read(rx, 40)
        assert [g[0] for g in got] == payloads  # byte-exact, in order, none dropped
        assert [g[1] for g in got] == [50000 + i for i in range(40)]
        assert [g[2] for g in got] == [((i % 64) << 2) | (i % 3) for i in range(40)]
        c = fx.counters()
        assert c["frames"] == 40 and c["send_errors"] == 0
    finally:
        rx.close()
        main.close()
        fx.close()


def test_a_full_ring_stops_and_a_kick_frees_it(net):
    rx = _receiver(net, socket.AF_INET6)
    src, dst = _addrs(socket.AF_INET6)
    main, fx = in_netns(net.a, lambda: (PortSocket(src, PORT, ifname="a0", mtu=1500),
                                        FrameTx("a0", src, 1500, frames=8)))
    try:
        q = deque((b"x%03d" % i, (dst, PORT), TxMeta(50000 + i)) for i in range(20))
        _drain_resolved(fx, deque([q.popleft()]), main)
        k, _, full = fx.drain(q, main, lambda ip: main)
        assert (k, full) == (8, True)  # eight slots, then it waits for the kernel
        fx.kick()
        rest = 0
        while q:
            k, _, _ = fx.drain(q, main, lambda ip: main)
            fx.kick()
            rest += k
        assert rest == 11
        got = [g[0] for g in _read(rx, 20)]
        assert got == [b"x%03d" % i for i in range(20)]
    finally:
        rx.close()
        main.close()
        fx.close()


def test_what_frames_cannot_take_stays_queued_for_the_socket(net):
    src, dst = _addrs(socket.AF_INET6)
    main, fx = _port(net, socket.AF_INET6)
    try:
        other = object()
        q: deque = deque([
            (b"main-port", (dst, PORT), TxMeta(PORT)),  # the port's own source port
            (b"no-meta", (dst, PORT), None),
        ])
        assert fx.drain(q, main, lambda ip: main)[0] == 0 and len(q) == 2
        q = deque([(b"elsewhere", (dst, PORT), TxMeta(50001))])
        assert fx.drain(q, main, lambda ip: other)[0] == 0 and len(q) == 1  # another port's
        big = deque([(bytes(1500), (dst, PORT), TxMeta(50002))])  # over the MTU: EMSGSIZE
        assert fx.drain(big, main, lambda ip: main)[0] == 0 and len(big) == 1
    finally:
        main.close()
        fx.close()


def test_txpath_interleaves_frames_and_socket_sends_in_order(net):
    """Sprayed datagrams go by the ring, the port's own by its socket (GSO), and the
    receiver sees the queue's order: frames are kicked before any socket send."""
    rx = _receiver(net, socket.AF_INET6)
    src, dst = _addrs(socket.AF_INET6)
    c: dict[str, int] = {}
    main, tx = _txpath_with_ring(net, src, c)
    try:
        own = TxMeta(PORT)
        items = []
        for i in range(60):
            if i % 10 < 3:  # runs of the port's own flow (GSO batches) between sprayed ones
                items.append((b"s%03d" % i, (dst, PORT), own))
            else:
                items.append((b"f%03d" % i, (dst, PORT), TxMeta(50000 + i)))
        for _ in range(100):  # until r's MAC is known the ring refuses; the socket resolves
            tx.put(items)
            tx.flush()
            got = [g[0] for g in _read(rx, len(items))]
            if c.get("tx_frames"):
                break
            time.sleep(0.02)
        assert got == [d for d, _, _ in items]
        assert c["tx_frames"] >= 40 and c["tx_gso_sends"] >= 1
    finally:
        rx.close()
        tx.close()
        main.close()
        os.close(tx.netns_fd)


def _txpath_with_ring(net: RoutedTriple, src: str, c: dict[str, int],
                      framer: RoceIcrc | None = None, *, in_place: bool = True,
                      gso: bool | None = None) -> tuple[PortSocket, TxPath]:
    """A TxPath on a's port with its frame ring, counters mirrored into ``c``; its entropy
    sockets are made in a's namespace too (close ``tx.netns_fd`` after). ``framer``:
    the transport's framing (the RoCEv2 ICRC), as the daemon gives it (``in_place``:
    with its ``seal_at``)."""

    def make():
        main = PortSocket(src, PORT, ifname="a0", mtu=1500,
                          **({} if gso is None else {"gso": gso}))
        tx = TxPath([main], _Counts(c), max_queue=1000,
                    seal=framer.seal if framer else None,
                    seal_many=framer.seal_many if framer else None,
                    seal_at=framer.seal_at if framer and in_place else None)
        assert tx.use_rings(lambda m: FrameTx(m.ifname, m.address, m.mtu)) == 1
        return main, tx

    main, tx = in_netns(net.a, make)
    tx.netns_fd = os.open(f"/run/netns/{net.a}", os.O_RDONLY)
    return main, tx


class _Counts(dict):
    """A dict that starts every counter at 0 and mirrors into ``out``."""

    def __init__(self, out: dict[str, int]) -> None:
        super().__init__()
        self.out = out

    def __missing__(self, key: str) -> int:
        return 0

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)
        self.out[key] = value


def test_frames_dropped_on_the_way_out_are_counted_and_the_rest_still_go(net):
    """Emulated loss (linkctl's nftables egress hook) drops some frames inside the kick:
    each drop is counted, and the frames behind it leave in the same kick."""
    from emu.fabric import linkctl
    from emu.topology.model import Direction

    rx = _receiver(net, socket.AF_INET6)
    src, dst = _addrs(socket.AF_INET6)
    main, fx = _port(net, socket.AF_INET6)
    try:
        _drain_resolved(fx, deque([(b"first", (dst, PORT), TxMeta(50000))]), main)
        linkctl.apply_direction(net.a, "a0", Direction(loss=0.3))
        q = deque((b"d%03d" % i, (dst, PORT), TxMeta(50000 + i)) for i in range(200))
        while q:
            fx.drain(q, main, lambda ip: main)
            fx.kick()  # never raises for a drop
        c = fx.counters()
        got = [g[0] for g in _read(rx, 201 - c["dropped"])]
        rx.settimeout(0.3)
        with pytest.raises(TimeoutError):  # a dropped frame is lost, not sent again
            print(_read(rx, 1))
        assert 20 < c["dropped"] < 110 and c["send_errors"] == 0 and c["wrong_format"] == 0
        assert got[0] == b"first" and got[1:] == sorted(got[1:])  # the rest, in order
        assert fx.pending == 0
    finally:
        linkctl.clear_direction(net.a, "a0")
        rx.close()
        main.close()
        fx.close()


def _run(n: int, seg: int, ents: list[int], hlen: int = 12) -> tuple[Run, list[bytes]]:
    """A Run of ``n`` datagrams (header ``hlen`` bytes naming the index) and the datagrams
    it stands for."""
    heads = b"".join(b"H%03d" % i + bytes(hlen - 4) for i in range(n))
    pay = os.urandom(n * seg)
    run = Run(bytearray(heads), hlen, memoryview(pay), seg, [TxMeta(e) for e in ents])
    return run, [heads[i * hlen:(i + 1) * hlen] + pay[i * seg:(i + 1) * seg] for i in range(n)]


def test_a_run_leaves_as_frames_across_a_full_ring_byte_exact(net):
    """A Run is written frame by frame from its cursor: a ring smaller than the run
    fills, is kicked, and the rest follows; every datagram arrives whole, in order,
    on its own entropy."""
    rx = _receiver(net, socket.AF_INET6)
    src, dst = _addrs(socket.AF_INET6)
    main, fx = in_netns(net.a, lambda: (PortSocket(src, PORT, ifname="a0", mtu=1500),
                                        FrameTx("a0", src, 1500, frames=8)))
    try:
        _drain_resolved(fx, deque([(b"first", (dst, PORT), TxMeta(50000))]), main)
        run, want = _run(20, 700, [51000 + i for i in range(20)])
        q: deque = deque([(run, (dst, PORT), None), (b"after", (dst, PORT), TxMeta(50001))])
        k, nb, full = fx.drain(q, main, lambda ip: main)
        assert (k, nb, full, run.done) == (8, 8 * 712, True, 8) and q[0][0] is run
        sent = k
        while q:
            fx.kick()
            sent += fx.drain(q, main, lambda ip: main)[0]
        fx.kick()
        got = _read(rx, 22)[1:]  # after "first"
        assert [g[0] for g in got] == want + [b"after"] and sent == 21
        assert [g[1] for g in got] == [51000 + i for i in range(20)] + [50001]
    finally:
        rx.close()
        main.close()
        fx.close()


def test_txpath_sends_what_a_run_cannot_put_in_the_ring_by_socket_in_order(net):
    """A Run whose middle packet carries the port's own source port: the frames before
    it go by the ring, then the rest of the run one by one through TxPath (that one by
    the port's socket, the others by entropy sockets or the ring) — in order."""
    rx = _receiver(net, socket.AF_INET6)
    src, dst = _addrs(socket.AF_INET6)
    c: dict[str, int] = {}
    main, tx = _txpath_with_ring(net, src, c)
    try:
        ents = [52000 + i for i in range(12)]
        ents[5] = PORT
        for _ in range(100):  # until r's MAC is known the ring refuses; the socket resolves
            run, want = _run(12, 500, ents)
            tx.put([(run, (dst, PORT), None)])
            tx.flush()
            got = _read(rx, 12)
            if c.get("tx_frames", 0) >= 5:
                break
            time.sleep(0.02)
        assert [g[0] for g in got] == want
        assert [g[1] for g in got] == ents
        assert not tx.queue
    finally:
        rx.close()
        tx.close()
        main.close()
        os.close(tx.netns_fd)


def test_a_long_batch_is_kicked_as_it_is_placed_not_once_at_the_end(net):
    """The kernel starts on the first frames of a refill while the daemon places the
    rest: one flush of a 200-frame run kicks the ring every KICK_BYTES, and every
    datagram arrives whole and in order."""
    from emu.nic.txpath import KICK_BYTES

    rx = _receiver(net, socket.AF_INET6)
    src, dst = _addrs(socket.AF_INET6)
    c: dict[str, int] = {}
    main, tx = _txpath_with_ring(net, src, c)
    try:
        ents = [53000 + i % 50 for i in range(200)]
        for _ in range(100):  # until r's MAC is known the ring refuses; the socket resolves
            before = sum(fx.c["kicks"] for fx in tx.rings.values())
            run, want = _run(200, 1200, ents)
            tx.put([(run, (dst, PORT), None)])
            tx.flush()
            got = _read(rx, 200)
            if c.get("tx_frames", 0) >= 200:
                break
            time.sleep(0.02)
        assert [g[0] for g in got] == want
        kicks = sum(fx.c["kicks"] for fx in tx.rings.values()) - before
        assert kicks >= 200 * 1212 // KICK_BYTES, kicks
    finally:
        rx.close()
        tx.close()
        main.close()
        os.close(tx.netns_fd)


@pytest.mark.parametrize("in_place", [True, False], ids=["seal_at", "seal"])
@pytest.mark.parametrize("fam", [socket.AF_INET6, socket.AF_INET], ids=["v6", "v4"])
def test_roce_datagrams_leave_through_the_ring_with_an_icrc_for_the_headers_sent(net, fam,
                                                                                 in_place):
    """A RoCEv2 QP sends from its own source port, so its datagrams take the ring; the
    ICRC covers the IP and UDP headers (IPv4: the IP ID too), which the ring writes, not
    the kernel. Every frame captured at b — whole IP packets as they arrived, IP ID,
    TOS and TTL included — passes the ICRC check of ``emu.wire.icrc``, and the
    receiving daemon's own check (``RoceIcrc.check``) accepts its payload. Bytes,
    Gather pieces and a Run of middles (its ICRC slots a zero tail) alike, several QPs
    (source ports) interleaved, ECN bits set; sealed in the frame (``seal_at``, the
    daemon's way) or before it is written (``seal``: a Run then leaves by socket)."""
    src, dst = _addrs(fam)
    c: dict[str, int] = {}
    framer = RoceIcrc()
    # no GSO: over IPv6 the socket path would send a Run of one QP as one GSO batch, and
    # this test is about the ring
    main, tx = _txpath_with_ring(net, src, c, framer, in_place=in_place, gso=False)
    cap = in_netns(net.b, lambda: socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM,
                                                socket.htons(0x0003)))
    cap.bind(("b0", 0))
    cap.settimeout(2.0)
    try:
        qps = [TxMeta(49152 + q, dscp=26, ecn=2) for q in range(3)]
        items = []
        for i in range(30):
            p = bytearray([0x0A, 0, 0xFF, 0xFF, 0, 0, 0, 0x11 + i % 3, 0, 0, 0, i])  # BTH
            p += os.urandom(100 + 7 * i) + bytes(4)  # payload, ICRC to fill
            if i % 2:
                items.append((Gather(p[:12], memoryview(bytes(p[12:-4])), bytearray(4),
                                     len(p)), (dst, PORT), qps[i % 3]))
            else:
                items.append((bytes(p), (dst, PORT), qps[i % 3]))
        seg = 256
        run = Run(middle_heads(0x07, 0x11, 0xFFFFFE, [0, 1, 0, 0, 1]), 12,
                  memoryview(os.urandom(5 * seg)), seg, [qps[0]] * 5, 4)
        items.insert(7, (run, (dst, PORT), None))
        metas = [m for d, _, m in items if type(d) is not Run]
        metas[7:7] = run.metas
        def take(n: int) -> list[bytes]:
            out: list[bytes] = []
            while len(out) < n:
                pkt = cap.recv(65536)
                ver = pkt[0] >> 4
                ihl = 40 if ver == 6 else (pkt[0] & 15) * 4
                nh = pkt[6] if ver == 6 else pkt[9]
                if nh == socket.IPPROTO_UDP and pkt[ihl + 2:ihl + 4] == PORT.to_bytes(2, "big"):
                    out.append(pkt)
            return out

        # until r's MAC is known the ring refuses and the socket resolves it (where GSO
        # would join a Run's datagrams into one capture): one datagram per QP first
        for _ in range(100):
            tx.put([items[q] for q in range(3)])
            tx.flush()
            take(3)
            if c.get("tx_frames", 0) >= 3:
                break
            time.sleep(0.02)
        f0 = c["tx_frames"]
        tx.put(list(items))
        tx.flush()
        got = take(len(metas))
        # all of the last round by the ring (without seal_at a Run is opened into Gathers
        # first, which the ring then takes)
        assert c["tx_frames"] - f0 == len(metas)
        for pkt, meta in zip(got, metas, strict=True):
            assert verify_icrc(pkt), pkt.hex()
            ver = pkt[0] >> 4
            ihl = 40 if ver == 6 else 20
            sport = int.from_bytes(pkt[ihl:ihl + 2], "big")
            assert sport == meta.entropy
            if ver == 4:
                assert pkt[4:6] == b"\0\0" and pkt[6] & 0x40  # IP ID 0, DF
            assert framer.check(pkt[ihl + 8:], src, sport, dst, PORT)
        # the Run's datagrams arrived whole: its BTHs (PSNs wrapping at 2^24), payload
        # slices and a sealed tail
        ihl = 40 if fam == socket.AF_INET6 else 20
        for i, pkt in enumerate(got[7:7 + run.count]):
            body = pkt[ihl + 8:]
            assert body[:12] == run.heads[12 * i:12 * i + 12]
            assert int.from_bytes(body[9:12], "big") == (0xFFFFFE + i) & 0xFFFFFF
            assert body[12:-4] == run.payload[i * seg:(i + 1) * seg] and len(body) == 272
    finally:
        cap.close()
        tx.close()
        main.close()
        os.close(tx.netns_fd)


def test_flow_labels_leave_in_frames_and_by_the_raw_socket_and_arrive_in_the_address(net):
    """MRC's STEV/SRv6 EVs: a datagram whose TxMeta carries a flow label leaves with it —
    as a frame, or by the port's raw socket while the next hop is unresolved (a UDP
    socket cannot set one per packet) — and the receiving PortSocket hands it over as
    the address tuple's flow info (``enable_flowinfo``), checksum valid, byte-exact."""
    src, dst = _addrs(socket.AF_INET6)
    c = dict.fromkeys(("tx_packets", "tx_bytes", "tx_raw", "tx_errors", "tx_frames"), 0)
    main, tx = _txpath_with_ring(net, src, c)
    rx = in_netns(net.b, lambda: PortSocket(dst, PORT + 1, ifname="b0", mtu=1500))
    try:
        assert rx.enable_flowinfo()
        tx.rings[main].invalidate()
        tx.rings[main]._retry[dst] = time.monotonic() + 60  # unresolved: the raw way
        items = [(b"raw%03d" % i, (dst, PORT + 1), TxMeta(0xD000, ecn=2, label=0x100 + i))
                 for i in range(5)]
        tx.put(items)
        tx.flush()
        assert c["tx_raw"] == 5 and c["tx_errors"] == 0
        tx.rings[main]._retry.clear()
        for _ in range(100):  # the kernel resolved the next hop for the raw sends
            items2 = [(b"frm%03d" % i, (dst, PORT + 1), TxMeta(0xD001, label=0xABCDE - i))
                      for i in range(5)]
            tx.put(items2)
            tx.flush()
            if c["tx_frames"]:
                break
            time.sleep(0.02)
        out: deque = deque()
        idle = time.monotonic() + 0.5
        while time.monotonic() < idle:  # everything sent, until half a second of quiet
            try:
                rx.recv_batch(out, 64, 4096, {"rx_packets": 0, "rx_bytes": 0})
                idle = time.monotonic() + 0.5
            except BlockingIOError:
                time.sleep(0.01)
        got = [(bytes(d), a[1], a[2], tos) for d, a, tos in out]
        assert got[:5] == [(b"raw%03d" % i, 0xD000, 0x100 + i, 2) for i in range(5)]
        # every round of the second batch, by raw socket or (the last) as frames: labelled
        assert len(got) % 5 == 0 and got[-5:] == [(b"frm%03d" % i, 0xD001, 0xABCDE - i, 0)
                                                   for i in range(5)]
        assert all(g == (b"frm%03d" % (i % 5), 0xD001, 0xABCDE - i % 5, 0)
                   for i, g in enumerate(got[5:]))
    finally:
        rx.close()
        tx.close()
        main.close()
        os.close(tx.netns_fd)


def test_an_srv6_frame_is_the_inner_packet_in_an_outer_ipv6_header():
    """What the NIC builds for MRC's SRv6 EV format, read by scapy: Ethernet / IPv6 to
    the uSID container (next header 41, the inner traffic class and flow label) /
    IPv6 / UDP, and by the raw way the same packet with the UDP checksum complete."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6

    from emu.nic.frames import RawTx, ip_udp

    s6 = socket.inet_pton(socket.AF_INET6, "fd00::1")
    d6 = socket.inet_pton(socket.AF_INET6, "fd00::2")
    outer = socket.inet_pton(socket.AF_INET6, "fc00:0:2:5:8002::")
    ip, udp = ip_udp(s6, d6, 0xD000, 4971, 5, 0x02, 0x12345, outer, 64)
    p = IPv6(ip + udp + b"hello")
    assert (p.dst, p.nh, p.fl, p.tc, p.plen) == ("fc00:0:2:5:8002::", 41, 0x12345, 2, 53)
    inner = p[IPv6:2]
    assert (inner.src, inner.dst, inner.fl, inner.tc) == ("fd00::1", "fd00::2", 0x12345, 2)
    assert (inner[UDP].sport, inner[UDP].dport, inner[UDP].len) == (0xD000, 4971, 13)
    raw = RawTx("lo", "::1")
    try:
        raw.src = s6
        pkt, first = raw.packet(b"hello", "fd00::2", 4971,
                                TxMeta(0xD000, ecn=2, label=0x12345, outer=outer))
    finally:
        raw.close()
    assert first == "fc00:0:2:5:8002::"
    got = IPv6(pkt)[IPv6:2][UDP]
    want = got.chksum
    del got.chksum
    assert UDP(bytes(got)).chksum == want  # scapy's own checksum agrees
    with pytest.raises(ValueError, match="needs IPv6"):
        ip_udp(b"\x0a\0\0\1", b"\x0a\0\0\2", 1, 2, 3, 0, 5, None, 64)


def test_a_ports_addresses_share_one_ring(net):
    """An IPv4 and an IPv6 sender on one ring (what a NIC daemon gives a port's addresses
    and transports): their frames take consecutive slots, one kick sends both, every
    datagram arrives exact, and the ring closes with its last user only."""
    from emu.nic.frames import Ring

    rx4, rx6 = _receiver(net, socket.AF_INET), _receiver(net, socket.AF_INET6)
    (s4, d4), (s6, d6) = _addrs(socket.AF_INET), _addrs(socket.AF_INET6)

    def make():
        ring = Ring("a0", 1500, 16)
        return (PortSocket(s4, PORT, ifname="a0", mtu=1500), FrameTx("a0", s4, 1500, ring=ring),
                PortSocket(s6, PORT, ifname="a0", mtu=1500), FrameTx("a0", s6, 1500, ring=ring),
                ring)

    m4, f4, m6, f6, ring = in_netns(net.a, make)
    try:
        assert ring.refs == 2 and f4.sock is f6.sock
        _drain_resolved(f4, deque([(b"r", (d4, PORT), TxMeta(50999))]), m4)
        _drain_resolved(f6, deque([(b"r", (d6, PORT), TxMeta(50999))]), m6)
        _read(rx4, 1)
        _read(rx6, 1)
        head = ring.head
        q4 = deque((b"v4-%d" % i, (d4, PORT), TxMeta(51000 + i)) for i in range(5))
        q6 = deque((b"v6-%d" % i, (d6, PORT), TxMeta(52000 + i)) for i in range(5))
        assert f4.drain(q4, m4, lambda ip: m4)[0] == 5
        assert f6.drain(q6, m6, lambda ip: m6)[0] == 5
        assert ring.head == (head + 10) % 16 and f4.pending == f6.pending == 10
        f6.kick()  # one kick: every placed frame, whoever placed it
        assert ring.pending == 0
        assert [g[0] for g in _read(rx4, 5)] == [b"v4-%d" % i for i in range(5)]
        assert [g[0] for g in _read(rx6, 5)] == [b"v6-%d" % i for i in range(5)]
        f4.close()
        assert ring.refs == 1 and f6.sock.fileno() >= 0  # still open for the other
    finally:
        f4.close()
        f6.close()
        assert ring.refs == 0 and f6.sock.fileno() == -1
        for s in (rx4, rx6, m4, m6):
            s.close()
    with pytest.raises(ValueError, match="cannot share"):
        FrameTx("b0", s4, 1500, ring=ring)


@pytest.mark.parametrize("fam", [socket.AF_INET6, socket.AF_INET], ids=["v6", "v4"])
def test_one_header_serves_every_source_port_of_a_sprayed_flow(net, fam):
    """UET sprays over 4096 source ports: frames to one destination share one cached
    header (no build, no route query per port — the route there is not multipath), and
    each frame still leaves with its own source port, the flow label hashed from it
    (IPv6) and a checksum the receiver accepts — single datagrams and a Run alike."""
    src, dst = _addrs(fam)
    main, fx = in_netns(net.a, lambda: (PortSocket(src, PORT, ifname="a0", mtu=1500),
                                        FrameTx("a0", src, 1500, frames=256)))
    rx = in_netns(net.b, lambda: PortSocket(dst, PORT + 2, ifname="b0", mtu=1500))
    try:
        if fam == socket.AF_INET6:
            assert rx.enable_flowinfo()
        _drain_resolved(fx, deque([(b"resolve", (dst, PORT + 2), TxMeta(49152))]), main)
        unresolved = fx.counters()["unresolved"]
        ports = [49152 + (i * 997) % 4096 for i in range(200)]  # 200 distinct
        q: deque = deque((b"d%03d" % i + bytes(96), (dst, PORT + 2), TxMeta(p, ecn=2))
                         for i, p in enumerate(ports[:100]))
        run, want_run = _run(100, 88, ports[100:])
        q.append((run, (dst, PORT + 2), None))
        sent = 0
        while q:
            k = fx.drain(q, main, lambda ip: main)[0]
            fx.kick()
            sent += k
            assert k, "nothing placed"
        assert sent == 200
        # the resolving datagram's header, the 100 datagrams', the Run's (another length)
        assert len(fx._prefix) <= 3 and fx.counters()["unresolved"] == unresolved
        out: deque = deque()
        got: list = []
        deadline = time.monotonic() + 5
        while len(got) < 200 and time.monotonic() < deadline:
            try:
                rx.recv_batch(out, 256, 4096, {"rx_packets": 0, "rx_bytes": 0})
            except BlockingIOError:
                time.sleep(0.01)
            got += [(bytes(d), a) for d, a, _ in out if bytes(d) != b"resolve"]
            out.clear()
        assert [d for d, _ in got] == [b"d%03d" % i + bytes(96) for i in range(100)] + want_run
        assert [a[1] for _, a in got] == ports
        if fam == socket.AF_INET6:
            auto = [((p * 2654435761) ^ ((PORT + 2) << 4)) & 0xFFFFF or 1 for p in ports]
            assert [a[2] for _, a in got] == auto  # as ip_udp makes it for each port
    finally:
        rx.close()
        main.close()
        fx.close()


def test_where_the_route_is_multipath_headers_are_kept_per_source_port():
    """A multipath route (a multi-homed host's ECMP): the next hop depends on the ports,
    so the header cache asks the kernel per source port, as before; a single-path
    route is asked once. (The kernel's side: ``Rtnl.multipath`` and ``Rtnl.route``,
    stubbed here; no namespace needed.)"""
    from emu.nic import frames as F

    class Rtnl:
        def __init__(self, multi: bool) -> None:
            self.multi, self.routes = multi, 0

        def multipath(self, dst: str) -> bool:
            return self.multi

        def route(self, dst: str, *, sport: int, dport: int) -> tuple[int, str]:
            self.routes += 1
            return 7, "fd00::1" if sport % 2 else "fd00::2"

    for multi in (False, True):
        fx = object.__new__(F.FrameTx)
        fx.family, fx.src, fx.mac, fx.ttl, fx.ifindex = socket.AF_INET6, bytes(16), bytes(6), 64, 7
        fx._pseudo = F._sum16(fx.src) + socket.IPPROTO_UDP
        fx._prefix, fx._multi, fx._retry = {}, {}, {}
        fx._neigh = {"fd00::1": b"\x02" * 6, "fd00::2": b"\x04" * 6}
        fx.c = {"unresolved": 0, "resolves": 0}
        fx.rtnl = rt = Rtnl(multi)
        hdrs = [fx._prefix_for(("fd01::9", 4793), 100, TxMeta(p)) for p in range(49152, 49252)]
        macs = {h[0][10:16] for h in hdrs}  # the frame's destination MAC: the next hop
        if multi:
            assert rt.routes == 100 and macs == {b"\x02" * 6, b"\x04" * 6}
            assert all(h[0][10:16] == (b"\x02" if p % 2 else b"\x04") * 6
                       for h, p in zip(hdrs, range(49152, 49252), strict=True))
        else:
            assert rt.routes == 1 and len(macs) == 1 and len(fx._prefix) == 1

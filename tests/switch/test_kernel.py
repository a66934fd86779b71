# SPDX-License-Identifier: GPL-2.0-only
"""The switch pipeline's kernel datapath (``emu.switch.kernel``: tc BPF + tbf).

Trimming: every kind of packet the program trims is held against the user-space
reference (:func:`emu.switch.trim.trim`) byte for byte.

Unit: which configurations it serves, and the configuration layout it writes
(checked against the compiled object's BTF-free sizes through a real load in the
root test). Root: 4 senders → 1 receiver over leaf1's port towards h3 at
20 Mbit/s, as ``test_switch_daemon`` does for the user-space path; the
receiver's link is captured and compared with the daemon's counters; marking,
tail drop, serialization rate, IPv4 checksums, IPv6 CE, live settings and exact
cleanup are checked. No wall-clock thresholds: waits have deadlines only to
fail fast (the serialization rate is read from the capture's timestamps: the
emulated link's behaviour, not emu's speed).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fabric_util import control_request, fabric_up, host_addr, inside, leaf_spine

from emu.fabric import Fabric
from emu.fabric.capture import Target, capture
from emu.fabric.linkctl import run_in_ns
from emu.proc import stop as stop_child
from emu.switch import kernel as K
from emu.switch import trim as T
from emu.switch import trim_tables as TT
from emu.switch.config import ClassConfig, PortConfig, SwitchConfig
from emu.wire import icrc as ICRC
from emu.wire.codec import mrc as MC
from emu.wire.codec import roce as RC
from emu.wire.codec import uet as UC
from emu.wire.codec.uet_pds import PdsRequest
from emu.wire.codec.uet_ses import SesStandardRequest
from emu.wire.pcapio import read_frames

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = 1000
K_MARK = 30_000            # kmin = kmax: every ECT packet marked at or above, none below
DEPTH = 120_000
RATE = 20_000_000
N_PER_SENDER = 100
OTHER_PORT = 5000
FRAME = 9014              # a full frame on the fabric's 9000-MTU links


# ------------------------------------------------------------------ unit (no root)

def test_reasons_name_what_only_user_space_does() -> None:
    cfg = SwitchConfig()
    plain = {"p1": PortConfig(rate=10**9, loss=0.01)}
    assert K.reasons(cfg, plain) == []
    trim = PortConfig(rate=10**9, default_class=ClassConfig(trim=True))
    pfc = PortConfig(classes={3: ClassConfig(lossless=True)})
    delay = PortConfig(delay=0.001)
    why = K.reasons(cfg, {"a": trim, "b": pfc, "c": delay})
    assert why == ["port c: delay/jitter"]  # trimming and PFC: the kernel path too
    big = SwitchConfig(trim_size=K.TRIM_MAX + 4, copy_range=1024)
    assert K.reasons(big, {"a": trim}) == [
        f"port a: trimming at trim_size {K.TRIM_MAX + 4} (the kernel path keeps ≤ 256 bytes)"]
    many = SwitchConfig(match=[f"udp:{p}" for p in range(1000, 1005)])
    assert "match" in K.reasons(many, {})[0]
    assert K.predict(SwitchConfig(datapath="user")) == "user"
    assert K.predict(SwitchConfig(ports={"x": delay})) == "user"


def test_config_layout() -> None:
    """pack_config writes what port.bpf.c reads: rate as ps per byte, probabilities
    scaled to 2^32 - 1, the DSCP → class map, per-class thresholds."""
    cfg = SwitchConfig(dscp_map={26: 5}, match=["udp:4791", "proto:253"])
    p = PortConfig(rate=100_000_000, depth=DEPTH, loss=0.5,
                   classes={5: ClassConfig(ecn=False, kmin=1, kmax=2, pmax=1.0)})
    raw = K.pack_config(cfg, p)
    assert len(raw) == K.CFG_SIZE
    ps, depth, loss, *rest = struct.unpack_from("<QQI4I2I", raw)
    assert (ps, depth) == (80_000, DEPTH) and abs(loss - (1 << 31)) <= 1
    assert rest == [4791, 0, 0, 0, 253, 0]
    dmap = raw[44:108]
    assert dmap[26] == 5 and dmap[8] == 1 and dmap[63] == 7
    k5 = struct.unpack_from("<7I", raw, 108 + 5 * 28)
    k0 = struct.unpack_from("<7I", raw, 108)
    assert k5 == (0, 1, 2, (1 << 32) - 1, 0, (1 << 32) - 1, 0)   # no trim, no PFC
    assert k0[:3] == (1, 20_000, 200_000)
    # the trimming fields: the DSCP a host-facing port writes, the ports, the prio handle
    t = PortConfig(rate=10**9, host_facing=True, trim_depth=5000,
                   default_class=ClassConfig(trim=True, trim_threshold=7000))
    raw = K.pack_config(SwitchConfig(trim_dscps=[0, 10]), t, prio_major=K.PRIO_MAJOR)
    assert struct.unpack_from("<7I", raw, 108)[4:] == (1, 7000, 0)
    off = 108 + 64 * 28 + 4
    depth, dscps, size, dscp, r0, r1, uet, proto, prio = struct.unpack_from("<QQII2IIII", raw, off)
    assert (depth, dscps, size, dscp) == (5000, 1 | 1 << 10, 0, 31)
    assert (r0, r1, uet, proto, prio) == (4791, 4971, 4793, 253, K.PRIO_MAJOR << 16)
    assert raw[off + 44:off + 44 + 512] == TT.roce_ext()


# ------------------------------------------------------------------ root

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


@pytest.fixture
def cluster():
    with fabric_up(leaf_spine(spines=1, leaves=2, hosts_per_leaf=3), "k") as f:
        yield f


def _request(d: Path, req: dict) -> dict:
    return control_request(d / "control.sock", req)


def _capturing(f: Fabric, host: str, tmp: Path
               ) -> tuple[threading.Event, threading.Event, threading.Thread, Path]:
    """A capture of ``host``'s cable, started: (stop, ready, the thread, the pcapng)."""
    stop, ready = threading.Event(), threading.Event()
    pcap = tmp / "rx.pcapng"
    cap = threading.Thread(target=capture, args=([Target(f.ns(host), "eth0", "rx")], str(pcap)),
                           kwargs={"stop": stop, "on_ready": ready.set, "handle_signals": False})
    cap.start()
    return stop, ready, cap, pcap


def _drained(sw: Path, port: str, wait: float = 30.0) -> dict:
    """The daemon's counters once ``port``'s queue is empty, the model's and tbf's (a
    deadline only to fail fast), and a moment later for the last frame to land."""
    deadline = time.monotonic() + wait
    while True:
        c = _request(sw, {"cmd": "counters", "qdisc": True})
        p = c["ports"][port]
        if p["depth"] == 0 and p["released"] == p["enqueued"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    return c


def _sock(f: Fabric, host: str, family: int, tos: int) -> socket.socket:
    with inside(f, host):
        s = socket.socket(family, socket.SOCK_DGRAM)
    if family == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        s.setsockopt(socket.IPPROTO_IP, 10, 2)          # IP_MTU_DISCOVER = DO
    else:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tos)
    return s


def _write(psn: int) -> bytes:
    return bytes(RC.encode_packet(RC.BTH(opcode=0x0A, dqpn=0x42, psn=psn),
                                  [RC.RETH(va=0x1000 * psn, rkey=7, dmalen=PAYLOAD)],
                                  bytes(PAYLOAD)))


def _ip4_csum_ok(ip: bytes) -> bool:
    hl = (ip[0] & 0xF) * 4
    s = sum(struct.unpack(f"!{hl // 2}H", ip[:hl]))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


@needs_root
def test_kernel_datapath(cluster: Fabric, tmp_path: Path) -> None:
    f, t = cluster, cluster.topology
    rx, senders = "h3", ["h1", "h2", "h4", "h5"]
    cfg = {"ports": {rx: {"rate": RATE, "depth": DEPTH, "host_facing": True,
                          "default_class": {"kmin": K_MARK, "kmax": K_MARK, "pmax": 1.0}}},
           "datapath": "kernel"}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    sw = tmp_path / "sw"
    proc = subprocess.Popen([sys.executable, "-m", "emu.switch.daemon", "--netns", f.ns("leaf1"),
                             "--state-dir", str(sw), "--config", str(tmp_path / "cfg.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    stop, ready, cap, pcap = _capturing(f, rx, tmp_path)
    socks: list[socket.socket] = []
    try:
        line = proc.stdout.readline().strip()
        assert line == "ready datapath=kernel", (line, proc.stderr.read())
        assert ready.wait(10)
        # the kernel path refuses what it cannot do, and changes nothing then
        rep = _request(sw, {"cmd": "set", "port": rx, "settings": {"delay": "1ms"}})
        assert not rep["ok"] and "kernel datapath" in rep["error"] and "delay" in rep["error"]
        assert _request(sw, {"cmd": "config"})["config"]["ports"][rx]["delay"] == 0
        rep = _request(sw, {"cmd": "set", "port": rx, "settings": {"pmax": "1"}})
        assert rep["ok"]

        dst4, dst6 = host_addr(t, rx, 4), host_addr(t, rx, 6)
        socks = [_sock(f, h, socket.AF_INET, 2) for h in senders]       # ECT(0)
        s6 = _sock(f, "h1", socket.AF_INET6, 1)                          # ECT(1), IPv6
        other = _sock(f, "h2", socket.AF_INET, 2)                        # ECT, not transport
        for psn in range(N_PER_SENDER):
            for s in socks:
                s.sendto(_write(psn), (dst4, 4791))
            if psn % 10 == 0:
                s6.sendto(_write(psn), (dst6, 4791))
                other.sendto(b"not transport" * 50, (dst4, OTHER_PORT))
        c = _drained(sw, rx)
        port = c["ports"][rx]
    finally:
        stop.set()
        cap.join(20)
        rc = stop_child(proc, 30)
        for s in socks:
            s.close()
    assert rc == 0
    # nothing of ours is left on the port
    assert "bpf" not in run_in_ns(f.ns("leaf1"), ["tc", "filter", "show", "dev", rx,
                                                  "egress"]).stdout
    assert "tbf" not in run_in_ns(f.ns("leaf1"), ["tc", "qdisc", "show", "dev", rx]).stdout
    assert c["datapath"] == "kernel" and c["overload"]["total"] == 0

    sent = len(senders) * N_PER_SENDER + N_PER_SENDER // 10
    data4, data6, others = [], [], []
    frames = [bytes(fr.data) for fr in read_frames(str(pcap))]
    udp = [r for r in frames if r[12:14] in (b"\x08\x00", b"\x86\xdd")
           and r[23 if r[13] == 0 else 20] == 17]
    h3_mac = udp[0][0:6]   # what reaches h3 is sent to its MAC
    # bytes of the frames towards h3 that are neither UDP nor ours: the switch's ND, ARP
    control = sum(len(r) for r in frames if r[6:12] != h3_mac and r not in udp)
    for fr in read_frames(str(pcap)):
        raw = bytes(fr.data)
        if raw[12:14] == b"\x08\x00" and raw[23] == 17:
            ip = raw[14:14 + int.from_bytes(raw[16:18], "big")]
            dport = int.from_bytes(ip[22:24], "big")
            (data4 if dport == 4791 else others if dport == OTHER_PORT else []).append(
                (fr.time, ip))
        elif raw[12:14] == b"\x86\xdd" and raw[20] == 17:
            data6.append((fr.time, raw[14:]))
    # every transport packet was queued or tail-dropped; the capture holds the queued ones
    assert port["enqueued"] + port["dropped_tail"] == sent
    # (a non-transport packet is never dropped, so it may take the queue past DEPTH: one
    # of ours, and whatever control frames the switch sent towards h3 meanwhile)
    assert port["dropped_tail"] > 0 and \
        port["max_depth"] <= DEPTH + 14 + 28 + 13 * 50 + control, (port["max_depth"], control)
    assert len(data4) + len(data6) == port["enqueued"]
    # marks: counted = seen on the wire; the first K_MARK // size packets found a shorter
    # queue (a FIFO: arrival order is departure order); IPv4 checksums fixed
    ce4 = [ip for _, ip in data4 if ip[1] & 3 == 3]
    ce6 = [ip for _, ip in data6 if (ip[1] >> 4) & 3 == 3]
    assert len(ce4) + len(ce6) == port["marked"] > 0 and ce6
    size = len(data4[0][1]) + 14
    assert all(ip[1] & 3 != 3 for _, ip in data4[:K_MARK // size - 1])
    assert all(_ip4_csum_ok(ip) for _, ip in data4)
    assert all(ip[1] >> 2 == 0 for ip in ce4)                 # DSCP untouched
    # other traffic: through the same wire, never marked or counted as transport
    assert len(others) == N_PER_SENDER // 10 and all(ip[1] & 3 == 2 for _, ip in others)
    assert port["other"] >= len(others)
    # serialization at the port's rate while the queue was busy (tbf, kernel clock)
    times = sorted(ts for ts, _ in data4 + data6 + others)
    wire = sum(len(ip) + 14 for _, ip in data4 + data6 + others)
    # (tbf's bucket lets its first bytes go at once: they take no time of the span)
    early = K.tbf_burst(9000) - len(data4[0][1]) - 14
    rate = (wire - len(data4[-1][1]) - 14 - early) * 8 / (times[-1] - times[0])
    assert 0.8 * RATE < rate < 1.1 * RATE, rate


def _start(f: Fabric, tmp: Path, cfg: dict) -> subprocess.Popen:
    (tmp / "cfg.json").write_text(json.dumps(cfg))
    return subprocess.Popen([sys.executable, "-m", "emu.switch.daemon", "--netns",
                             f.ns("leaf1"), "--state-dir", str(tmp / "sw"), "--config",
                             str(tmp / "cfg.json")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


@needs_root
def test_a_killed_daemons_kernel_path_is_taken_over_and_removed(tmp_path: Path) -> None:
    """SIGKILL leaves the port's tbf and BPF filter in place (the datapath keeps
    forwarding, as an ASIC whose control plane died); the next daemon removes exactly
    those (our handle and priority) and attaches its own; ``--cleanup`` removes them."""
    cfg = {"ports": {"h2": {"rate": "100mbit"}}, "datapath": "kernel"}
    with fabric_up(leaf_spine(spines=1, leaves=1, hosts_per_leaf=2), "kk") as f:
        def on_port() -> tuple[bool, bool]:
            filt = run_in_ns(f.ns("leaf1"), ["tc", "filter", "show", "dev", "h2", "egress"])
            qd = run_in_ns(f.ns("leaf1"), ["tc", "qdisc", "show", "dev", "h2"])
            return "bpf" in filt.stdout, "tbf" in qd.stdout

        p = _start(f, tmp_path, cfg)
        assert p.stdout.readline().strip() == "ready datapath=kernel", p.stderr.read()
        p.kill()
        p.wait()
        assert on_port() == (True, True)
        p = _start(f, tmp_path, cfg)
        try:
            assert p.stdout.readline().strip() == "ready datapath=kernel", p.stderr.read()
            assert on_port() == (True, True)
            p.kill()
            p.wait()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        r = subprocess.run([sys.executable, "-m", "emu.switch.daemon", "--netns",
                            f.ns("leaf1"), "--cleanup"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.returncode == 0, r.stderr
        assert on_port() == (False, False)


@needs_root
def test_a_busy_port_sends_back_to_back_at_its_rate(cluster: Fabric, tmp_path: Path) -> None:
    """A port with a queue serializes frame after frame at its rate, as a real port
    does, though tbf sends each frame when a timer fires and that timer is late by
    some µs: its bucket (``TBF_BURST_FRAMES``) lets a late frame's successor catch up.
    With a one-frame bucket every late fire was link time lost — these 9 KB frames
    (240 µs each at 300 Mb/s) left at 0.866, 0.889 and 0.916 of the rate in three
    runs, and on the leaf-spine a 9 KB-MTU UET flow could not reach 0.9 of its port,
    with nothing counted. The rate is read from the capture's kernel timestamps (the emulated
    link's behaviour, not emu's speed)."""
    f, t = cluster, cluster.topology
    rx, rate, n = "h3", 300_000_000, 500
    cfg = {"ports": {rx: {"rate": rate, "depth": 8 << 20, "host_facing": True}},
           "datapath": "kernel"}
    proc = _start(f, tmp_path, cfg)
    stop, ready, cap, pcap = _capturing(f, rx, tmp_path)
    s = _sock(f, "h1", socket.AF_INET, 0)
    try:
        line = proc.stdout.readline().strip()
        assert line == "ready datapath=kernel", (line, proc.stderr.read())
        assert ready.wait(10)
        payload = bytes(FRAME - 42)  # a full frame on the 9000-MTU link
        dst = host_addr(t, rx, 4)
        for _ in range(n):     # (not transport: never dropped by the BPF queue)
            s.sendto(payload, (dst, OTHER_PORT))
        deadline = time.monotonic() + 20
        while _request(tmp_path / "sw", {"cmd": "counters"})["ports"][rx]["depth"] and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        stop.set()
        cap.join(20)
        s.close()
        assert stop_child(proc, 30) == 0
    times = sorted(fr.time for fr in read_frames(str(pcap))
                   if len(fr.data) == FRAME and bytes(fr.data)[12:14] == b"\x08\x00")
    assert len(times) == n
    measured = (n - 1) * FRAME * 8 / (times[-1] - times[0])
    assert 0.95 * rate < measured < 1.02 * rate, measured / rate


# ------------------------------------------------------------------ trimming

T_DEPTH, T_THRESHOLD, LASTHOP = 400_000, 10_000, 31


def test_the_tables_are_the_codecs_sizes() -> None:
    ext = TT.roce_ext()
    w = RC.BTH(opcode=0x0A)
    assert ext[0x0A] == sum(h.SIZE for h in RC.chain_for(w)) == RC.RETH.SIZE
    mrc = RC.BTH(opcode=MC.MRC_WRITE_ONLY, ts=1)
    assert ext[256 + MC.MRC_WRITE_ONLY] == sum(h.SIZE for h in RC.chain_for(mrc))
    assert ext[256 + MC.MRC_WRITE_ONLY] == ext[MC.MRC_WRITE_ONLY] + MC.TSETH.SIZE
    assert ext[0x15] == 0xFF                          # an opcode nobody defines
    pds = TT.uet_pds()
    assert pds[2 * 2] == PdsRequest.SIZE and pds[7 * 2] == 0   # ROD request; ACK: not
    ses, req = TT.uet_ses()
    assert ses[3 * 2] == SesStandardRequest.SIZE and req[3] == 2


def _roce(psn: int, opcode: int = 0x0A, ts: int = 0) -> bytes:
    if opcode in MC.WRITE_OPCODES:
        hdrs = [MC.METH(msn=psn), MC.TSETH(tx_timestamp=psn), RC.RETH(va=psn, rkey=7,
                                                                    dmalen=PAYLOAD)]
    else:
        hdrs = [RC.RETH(va=0x1000 * psn, rkey=7, dmalen=PAYLOAD)]
    return bytes(RC.encode_packet(RC.BTH(opcode=opcode, dqpn=0x42, psn=psn, ts=ts), hdrs,
                                  bytes(PAYLOAD)))


def _uet(psn: int) -> bytes:
    return bytes(UC.encode_packet(PdsRequest(type=2, next_hdr=3, psn=psn),
                                  SesStandardRequest(opcode=1), payload=bytes(PAYLOAD)))


def _raw_v4(src: str, dst: str, psn: int) -> bytes:
    """A whole IPv4 RoCEv2 WRITE with a full UDP checksum and its ICRC (what a raw
    socket sends: the kernel leaves the checksum as it is)."""
    body = bytearray(_roce(psn))
    udp_len = 8 + len(body)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                               socket.inet_aton(src), socket.inet_aton(dst)))
    udp = bytearray(struct.pack("!HHHH", 49999, 4791, udp_len, 0))
    pkt = ip + udp + body
    ICRC.seal(pkt)
    c = T.checksum(pkt[20:], sum(struct.unpack("!4H", pkt[12:20])) + 17 + udp_len)
    struct.pack_into("!H", pkt, 26, c or 0xFFFF)
    return bytes(pkt)


def _restore(trimmed: bytes, original: bytes) -> bytes:
    """The packet the switch trimmed, rebuilt from its trimmed form (the IP header as it
    reached the port: TTL, ID, addresses) and the UDP payload the sender sent."""
    v4 = trimmed[0] >> 4 == 4
    hl = (trimmed[0] & 15) * 4 if v4 else 40
    udp = bytearray(trimmed[hl:hl + 8])
    udp[4:6] = struct.pack("!H", 8 + len(original))
    udp[6:8] = b"\x00\x01"                 # not zero: the reference recomputes it
    ip = bytearray(trimmed[:hl])
    if v4:
        ip[1] &= 3                          # the original DSCP (0), the ECN bits as they were
        ip[2:4] = struct.pack("!H", hl + 8 + len(original))
    else:
        ip[0] &= 0xF0
        ip[1] &= 0x3F
        ip[4:6] = struct.pack("!H", 8 + len(original))
    return bytes(ip + udp + original)


@needs_root
def test_kernel_trimming_is_the_reference_trim_byte_for_byte(cluster: Fabric,
                                                             tmp_path: Path) -> None:
    """Every kind of packet the kernel trimmer knows, trimmed by the program, equals what
    :func:`emu.switch.trim.trim` (the user-space reference) makes of its original: a
    pending checksum (UDP sockets) and a full one (a raw socket), IPv4 and IPv6, RoCEv2,
    MRC with TSETH, UET; every trimmed packet is counted and in the capture."""
    f, t = cluster, cluster.topology
    rx = "h3"
    cfg = {"ports": {rx: {"rate": RATE, "depth": T_DEPTH, "host_facing": True,
                          "trim_depth": 200_000,
                          "default_class": {"trim": True, "trim_threshold": T_THRESHOLD}}},
           "datapath": "kernel"}
    proc = _start(f, tmp_path, cfg)
    stop, ready, cap, pcap = _capturing(f, rx, tmp_path)
    dst4, dst6 = host_addr(t, rx, 4), host_addr(t, rx, 6)
    socks = {h: _sock(f, h, socket.AF_INET, 2) for h in ("h1", "h2", "h4")}
    s6 = _sock(f, "h5", socket.AF_INET6, 2)
    with inside(f, "h1"):
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    src_raw = host_addr(t, "h1", 4)
    sent: dict[tuple[str, int, int], bytes] = {}   # (kind, sport or 0, psn) -> UDP payload
    try:
        line = proc.stdout.readline().strip()
        assert line == "ready datapath=kernel", (line, proc.stderr.read())
        assert ready.wait(10)
        for psn in range(60):
            for h, s in socks.items():
                p = _roce(psn) if h != "h4" else _uet(psn)
                s.sendto(p, (dst4, 4791 if h != "h4" else 4793))
                sent[(h, 0, psn)] = p
            p = _roce(psn, MC.MRC_WRITE_ONLY, ts=1)
            s6.sendto(p, (dst6, 4971))
            sent[("h5", 0, psn)] = p
            pkt = _raw_v4(src_raw, dst4, psn)
            raw.sendto(pkt, (dst4, 0))
            sent[("raw", 0, psn)] = pkt[28:]
        port = _drained(tmp_path / "sw", rx)["ports"][rx]
    finally:
        stop.set()
        cap.join(20)
        for s in (*socks.values(), s6, raw):
            s.close()
        assert stop_child(proc, 30) == 0
    src_of = {host_addr(t, h, 6 if h == "h5" else 4): h for h in ("h1", "h2", "h4", "h5")}
    trimmed, whole = [], 0
    for fr in read_frames(str(pcap)):
        raw_fr = bytes(fr.data)
        if raw_fr[12:14] == b"\x08\x00":
            ip = raw_fr[14:14 + int.from_bytes(raw_fr[16:18], "big")]
            src, dscp, hl = socket.inet_ntoa(ip[12:16]), ip[1] >> 2, (ip[0] & 15) * 4
        elif raw_fr[12:14] == b"\x86\xdd":
            ip = raw_fr[14:14 + 40 + int.from_bytes(raw_fr[18:20], "big")]
            src = socket.inet_ntop(socket.AF_INET6, ip[8:24])
            dscp, hl = ((ip[0] & 15) << 2) | (ip[1] >> 6), 40
        else:
            continue
        if len(ip) < hl + 8 or ip[9 if hl != 40 else 6] != 17:
            continue
        sport = int.from_bytes(ip[hl:hl + 2], "big")
        kind = "raw" if sport == 49999 else src_of.get(src)
        if kind is None:
            continue
        body = ip[hl + 8:]
        psn = int.from_bytes(body[9:12], "big") if kind != "h4" else \
            UC.decode_packet(body).pds.psn
        if dscp == LASTHOP:
            trimmed.append((kind, psn, ip))
        else:
            whole += 1
    assert port["trimmed"] == len(trimmed) > 0 and port["trim_failed"] == 0, port
    assert port["enqueued"] == len(trimmed) + whole and port["dropped_trim"] == 0
    kinds = {k for k, _, _ in trimmed}
    assert kinds == {"h1", "h2", "h4", "h5", "raw"}, kinds   # every kind was trimmed
    for kind, psn, ip in trimmed:
        want = T.trim(_restore(ip, sent[(kind, 0, psn)]), LASTHOP)
        assert want is not None and bytes(want) == ip, (kind, psn, bytes(want).hex(), ip.hex())
        if kind != "h4":   # RoCEv2 and MRC: the ICRC holds (Wireshark and the NICs check it)
            assert ICRC.verify_icrc(ip)



# ------------------------------------------------------------------ PFC received


@needs_root
def test_a_pause_from_downstream_holds_the_port_and_its_queue(cluster: Fabric,
                                                              tmp_path: Path) -> None:
    """h3's end of the cable sends 802.1Qbb XOFF to leaf1's port h3 (refreshed) and then
    XON: meanwhile the kernel port sends nothing of what h1 sends it (tbf holds it, the
    program's model counts it queued), afterwards all of it arrives, in order; the held
    time is counted. Then a lone XOFF whose quanta run out releases the port by itself."""
    from emu.switch.pfc import DEFAULT_QUANTUM, MAX_QUANTA, PfcSender

    f, t = cluster, cluster.topology
    rx, n = "h3", 40
    cfg = {"ports": {rx: {"rate": RATE, "depth": 8 << 20, "host_facing": True}},
           "datapath": "kernel"}
    proc = _start(f, tmp_path, cfg)
    stop, ready, cap, pcap = _capturing(f, rx, tmp_path)
    with inside(f, rx):
        tx = PfcSender()
    s = _sock(f, "h1", socket.AF_INET, 0)
    dst = host_addr(t, rx, 4)
    sw = tmp_path / "sw"
    try:
        assert proc.stdout.readline().strip() == "ready datapath=kernel"
        assert ready.wait(10)
        with inside(f, rx):
            tx.send("eth0", {0: MAX_QUANTA})            # XOFF priority 0, ~33 ms
        deadline = time.monotonic() + 10
        while _request(sw, {"cmd": "counters"})["switch"].get("pfc_rx_frames", 0) < 1:
            assert time.monotonic() < deadline, "the switch did not see the XOFF"
            time.sleep(0.005)
        for psn in range(n):
            s.sendto(_write(psn), (dst, 4791))
        for _ in range(20):                              # held ~200 ms: refresh the XOFF
            time.sleep(0.01)
            with inside(f, rx):
                tx.send("eth0", {0: MAX_QUANTA})
        held = _request(sw, {"cmd": "counters", "qdisc": True})["ports"][rx]
        with inside(f, rx):
            tx.send("eth0", {0: 0})                      # XON
        after = _drained(sw, rx)["ports"][rx]
        # a lone XOFF: the port waits out its quanta, then sends again by itself
        with inside(f, rx):
            tx.send("eth0", {0: MAX_QUANTA})
        time.sleep(0.005)
        s.sendto(_write(n), (dst, 4791))
        last = _drained(sw, rx)["ports"][rx]
    finally:
        stop.set()
        cap.join(20)
        s.close()
        assert stop_child(proc, 30) == 0
    size = len(_write(0)) + 28 + 14
    # while held: all n queued, nothing left but what one frame's bucket lets go (a tbf
    # change fills its bucket: the frame a real port finishes on the wire, at most an MTU)
    leak = K.tbf_burst(9000, 1) // size
    assert held["enqueued"] == n and held["released"] <= leak, (held, leak)
    assert held["depth"] >= (n - leak) * size                  # the model did not drain
    assert held["held_time"] > 0.15
    assert after["released"] == after["enqueued"] == n and after["dropped_tail"] == 0
    assert last["held_time"] >= after["held_time"] + 0.5 * MAX_QUANTA * DEFAULT_QUANTUM
    psns = [int.from_bytes(bytes(fr.data)[14 + 28 + 9:14 + 28 + 12], "big")
            for fr in read_frames(str(pcap)) if len(fr.data) == size
            and bytes(fr.data)[12:14] == b"\x08\x00"]
    assert psns == list(range(n + 1))                    # all of it, in order

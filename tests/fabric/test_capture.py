# SPDX-License-Identifier: GPL-2.0-only
"""Capture on real namespaces (root): two links merged into one pcapng named by link.

Topology made here with pyroute2 (not emu/fabric's builder)::

    <p>-a  a0 ── r0  <p>-r  r1 ── b0  <p>-b      10.78.1.0/24, 10.78.2.0/24

veths keep their default offloads, so locally sent UDP leaves with a partial
checksum; the capture must still show every UDP checksum Good.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from routed_ns import RoutedTriple, made_and_removed

from emu.wire.pcapio import read_frames

PORT = 5556
ROOT = Path(__file__).resolve().parents[2]


def _udp_dports(frames, iface: str) -> list[int]:
    out = []
    for fr in frames:
        d = fr.data
        if fr.interface == iface and len(d) >= 42 and d[12:14] == b"\x08\x00" and d[23] == 17:
            ihl = (d[14] & 0x0F) * 4
            out.append(struct.unpack_from("!H", d, 14 + ihl + 2)[0])
    return out


class Net(RoutedTriple):
    """The routed triple, capture targets on both cables, and a UDP sender."""

    def __init__(self) -> None:
        super().__init__("cp", 78, PORT)

    def targets(self):
        from emu.fabric.capture import Target

        return [Target(self.a, "a0", "a-r"), Target(self.r, "r1", "r-b")]

    def send(self, n: int, port: int = PORT) -> None:
        tx = self.sock(self.a)
        for i in range(n):
            tx.sendto(i.to_bytes(4, "big") * 16, ("10.78.2.2", port))
        tx.close()

@pytest.fixture
def net():
    yield from made_and_removed(Net)


def _capture_in_thread(net, out, **kw):
    from emu.fabric.capture import capture

    ready = threading.Event()
    box: dict = {}

    def run() -> None:
        try:
            box["res"] = capture(net.targets(), out, on_ready=ready.set, **kw)
        except BaseException as e:  # surfaced below
            box["err"] = e
            ready.set()

    t = threading.Thread(target=run)
    t.start()
    assert ready.wait(10)
    return t, box


def test_two_links_merged_and_named(net, tmp_path):
    rx = net.sock(net.b, bind=True)
    out = tmp_path / "cap.pcapng"
    stop = threading.Event()
    t, box = _capture_in_thread(net, out, stop=stop)
    net.send(200)
    time.sleep(0.3)
    stop.set()
    t.join(10)
    assert "err" not in box, box.get("err")
    res = box["res"]
    assert res.stopped_by == "stop"
    frames = list(read_frames(out))
    names = {f.interface for f in frames}
    assert names == {"a-r", "r-b"}
    assert _udp_dports(frames, "a-r").count(PORT) == 200
    assert _udp_dports(frames, "r-b").count(PORT) == 200
    assert res.counts["a-r"] == sum(f.interface == "a-r" for f in frames)
    assert res.counts["r-b"] == sum(f.interface == "r-b" for f in frames)
    assert res.stats["a-r"].checksums_completed >= 200  # veth offload left them partial
    assert all(s.kernel_drops == 0 for s in res.stats.values())
    ts = [f.time for f in frames]
    assert abs(ts[0] - time.time()) < 3600  # kernel wall-clock timestamps, ns resolution
    rx.close()
    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed")
    cp = subprocess.run(["tshark", "-r", str(out), "-o", "udp.check_checksum:TRUE",
                         "-Y", f"udp.dstport == {PORT}", "-T", "fields",
                         "-e", "frame.interface_name", "-e", "udp.checksum.status"],
                        capture_output=True, text=True, check=True)
    rows = [ln.split("\t") for ln in cp.stdout.splitlines() if ln]
    assert len(rows) == 400
    assert {r[0] for r in rows} == {"a-r", "r-b"}
    assert {r[1] for r in rows} == {"1"}  # 1 = Good


def test_duration_count_and_filter(net, tmp_path):
    out = tmp_path / "d.pcapng"
    t, box = _capture_in_thread(net, out, duration=1.0)
    net.send(20)
    t.join(10)
    assert box["res"].stopped_by == "duration"
    assert _udp_dports(list(read_frames(out)), "a-r").count(PORT) == 20

    out = tmp_path / "c.pcapng"
    t, box = _capture_in_thread(net, out, count=50, bpf=f"udp dst port {PORT + 1}")
    net.send(40)  # filtered out
    net.send(100, port=PORT + 1)
    t.join(10)
    res = box["res"]
    assert res.stopped_by == "count" and res.total == 50
    frames = list(read_frames(out))
    assert len(frames) == 50
    ports = _udp_dports(frames, "a-r") + _udp_dports(frames, "r-b")
    assert len(ports) == 50 and set(ports) == {PORT + 1}


def test_bad_inputs(net, tmp_path):
    from emu.fabric.capture import CaptureFailed, Target, capture

    with pytest.raises(CaptureFailed, match="no interface"):
        capture([Target(net.a, "nope0", "x")], tmp_path / "x.pcapng", duration=0.1)
    with pytest.raises(CaptureFailed, match="does not exist"):
        capture([Target(net.a + "zz", "a0", "x")], tmp_path / "x.pcapng", duration=0.1)
    with pytest.raises(CaptureFailed, match="bad capture filter"):
        capture(net.targets(), tmp_path / "x.pcapng", duration=0.1, bpf="udp prt 1")
    with pytest.raises(CaptureFailed, match="share a name"):
        capture([Target(net.a, "a0", "x"), Target(net.r, "r0", "x")], tmp_path / "x.pcapng")


def test_sigint_stops_cleanly(net, tmp_path):
    out = tmp_path / "sig.pcapng"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "emu.fabric.capture", "-w", str(out),
         f"{net.a}:a0=a-r", f"{net.r}:r1=r-b"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr.readline().strip() == "capturing"
        net.send(100)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "stopped by SIGINT" in stdout
    frames = list(read_frames(out))  # complete: every block whole
    assert _udp_dports(frames, "a-r").count(PORT) == 100
    assert _udp_dports(frames, "r-b").count(PORT) == 100
    for name in ("a-r", "r-b"):
        n = sum(f.interface == name for f in frames)
        assert f"  {name}: {n} packets" in stdout
    if shutil.which("tshark"):
        cp = subprocess.run(["tshark", "-r", str(out), "-T", "fields",
                             "-e", "frame.interface_name"], capture_output=True, text=True)
        assert cp.returncode == 0 and set(cp.stdout.split()) == {"a-r", "r-b"}


def test_a_flood_the_reader_cannot_keep_up_with_ends_on_time_and_says_so(net, tmp_path):
    """Links busier than the capture's Python reader: its sockets never run dry. The
    capture still stops at its duration (before, it read on for as long as the flood
    lasted), and a capture the kernel had to drop from is reported INCOMPLETE."""
    from emu.fabric.capture import capture

    flood = subprocess.Popen(
        ["ip", "netns", "exec", net.a, sys.executable, "-c",
         "import socket, time\n"
         "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
         "end = time.monotonic() + 60\n"
         "while time.monotonic() < end:\n"
         "    for _ in range(1000):\n"
         f"        s.sendto(b'x' * 64, ('10.78.2.2', {PORT}))\n"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        box: dict = {}
        t = threading.Thread(target=lambda: box.update(
            res=capture(net.targets(), tmp_path / "f.pcapng", duration=1.0)))
        t.start()
        t.join(50)  # a deadline to fail fast, not a measurement
        assert not t.is_alive(), "the capture read on past its duration"
        assert flood.poll() is None  # the flood was still going: stopped by the duration
    finally:
        flood.kill()
        flood.wait()
    t.join(60)
    res = box["res"]
    assert res.stopped_by == "duration" and res.total > 0


def test_report_warns_when_the_kernel_dropped():
    from emu.fabric.capture import CaptureResult, IfaceStats

    res = CaptureResult("x.pcapng", {"a-r": IfaceStats(packets=10), "r-b": IfaceStats(packets=4)})
    assert "INCOMPLETE" not in res.report()
    res.stats["r-b"].kernel_drops = 7
    assert res.kernel_drops == 7
    assert "warning: the capture is INCOMPLETE: the kernel dropped 7 packet(s)" in res.report()

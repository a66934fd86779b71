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


# --------------------------------------------------------------------------- fabric time


def test_fabric_stamps_are_the_fabric_clocks_conversion_in_integer_ns(monkeypatch):
    """One pair of clock readings (CLOCK_REALTIME, CLOCK_MONOTONIC) makes the conversion;
    it agrees with FabricClock.stamp (the NIC daemons'), shrinks a wall gap by the scale,
    and keeps nanoseconds far from 1970 (a float of seconds would step by ~238 ns)."""
    import emu.fabric.capture as cap
    from emu.fabricclock import FabricClock

    real_now, mono_now = 1_796_000_000_000_000_000, 500_000_000_000
    monkeypatch.setattr(cap.time, "time_ns", lambda: real_now)
    monkeypatch.setattr(cap.time, "monotonic_ns", lambda: mono_now)
    clock = FabricClock(scale=4, epoch=400.0)
    st = cap.FabricStamps.now(clock)
    assert st.realtime_epoch_ns == real_now - 100_000_000_000  # 100 wall s after the epoch
    fabric_now = (mono_now / 1e9 - clock.epoch) / clock.scale  # 25 fabric s
    for back_ns in (0, 1_000_000_000, 123_456_789):
        stamp = real_now - back_ns
        assert st.fabric_ns(stamp) == round((100_000_000_000 - back_ns) / 4)  # exact
        # the float API agrees to its precision (seconds since 1970 in a float: ~238 ns)
        want = clock.stamp(stamp / 1e9, real_now / 1e9, fabric_now)
        assert st.fabric_ns(stamp) == pytest.approx(want * 1e9, abs=250)
    # 4 KiB at 400 Gb/s is 84 fabric ns: 336 wall ns at scale 4, 8400 at scale 100
    assert st.fabric_ns(real_now + 336) - st.fabric_ns(real_now) == 84
    st100 = cap.FabricStamps.now(FabricClock(scale=100, epoch=400.0))
    assert st100.fabric_ns(real_now + 8400) - st100.fabric_ns(real_now) == 84
    assert st.fabric_ns(st.realtime_epoch_ns - 5) == 0  # before the epoch: clamped
    assert cap.stamps_for(FabricClock()) is None and cap.stamps_for(None) is None
    text = " ".join(st.comments())
    assert "FABRIC time at time scale 4" in text
    assert f"epoch_realtime_ns={st.realtime_epoch_ns}" in text
    assert "epoch_monotonic=400.000000000" in text


def test_a_capture_at_a_time_scale_writes_fabric_time_and_says_so(net, tmp_path):
    """The same packets captured twice at once, on the wall clock and at time scale 4:
    every gap of the fabric capture is the wall capture's / 4 (the kernel stamps each
    packet once, so both sockets see the same stamps), every fabric stamp lies between
    the fabric clock's readings around the capture, and the comments state the scale
    and the epoch (read back by emu's reader and by capinfos)."""
    from emu.fabricclock import FabricClock
    from emu.wire.pcapio import read_info

    clock = FabricClock(scale=4, epoch=time.monotonic() - 8.0)
    wall_out, fabric_out = tmp_path / "wall.pcapng", tmp_path / "fabric.pcapng"
    stop = threading.Event()
    f0 = clock.now()
    t1, box1 = _capture_in_thread(net, wall_out, stop=stop)
    t2, box2 = _capture_in_thread(net, fabric_out, stop=stop, clock=clock,
                                  comments=["test capture"])
    net.send(100)
    time.sleep(0.3)
    stop.set()
    t1.join(10)
    t2.join(10)
    f1 = clock.now()
    assert "err" not in box1 and "err" not in box2, (box1.get("err"), box2.get("err"))
    assert box2["res"].scale == 4 and "timestamps are fabric time" in box2["res"].report()

    def ours(path):
        return [fr for fr in read_frames(path) if fr.interface == "a-r"
                and _udp_dports([fr], "a-r") == [PORT]]

    wall, fabric = ours(wall_out), ours(fabric_out)
    assert len(wall) == len(fabric) == 100
    assert [fr.data for fr in wall] == [fr.data for fr in fabric]
    for i in range(1, 100):
        wall_gap = wall[i].time_ns - wall[i - 1].time_ns
        fabric_gap = fabric[i].time_ns - fabric[i - 1].time_ns
        assert abs(fabric_gap * 4 - wall_gap) <= 4, i  # each stamp rounded to 1 fabric ns
    # fabric seconds since the epoch, not a date (1 ms: the clocks' pairing, not a bound
    # on how fast anything ran)
    assert all(f0 - 1e-3 <= fr.time <= f1 + 1e-3 for fr in fabric)
    assert abs(wall[0].time - time.time()) < 3600  # the wall capture: as always

    info = read_info(fabric_out)
    assert info.comments[0] == "test capture"
    assert any("FABRIC time at time scale 4" in c for c in info.comments)
    assert any(c.startswith("emu-time: units=fabric scale=4 ") for c in info.comments)
    assert {i.name for i in info.interfaces} == {"a-r", "r-b"}
    assert all(i.tick == 1e-9 and "time scale 4" in i.comments[0] for i in info.interfaces)
    assert read_info(wall_out).comments == []  # scale 1 / no clock: no comment, as before
    if shutil.which("capinfos"):
        caps = subprocess.run(["capinfos", "-k", str(fabric_out)], capture_output=True,
                              text=True, check=True).stdout
        assert "emu-time: units=fabric scale=4" in caps

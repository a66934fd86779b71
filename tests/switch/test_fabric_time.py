# SPDX-License-Identifier: GPL-2.0-only
"""The switch pipeline on fabric time (issue 34): the same decisions at every scale.

No root, no sockets, no wall-clock bounds: the switch daemon's packet loop
(:meth:`SwitchDaemon.step` and its wall boundary :meth:`SwitchDaemon.wall_wait`) is
driven with a stand-in NFQUEUE and PFC sender on a hand-stepped ``CLOCK_MONOTONIC``,
once at scale 1 and once at scale 4, with the same traffic at the same *fabric*
times. Every verdict (release, mark, trim, drop), every PFC frame and its quanta, and
the counters come out the same, at the same fabric times; the wall times at scale 4
are four times as far from the epoch. And the rule that keeps it so: ``emu/switch``
reads the wall clock only through :mod:`emu.fabricclock`, in the places listed here.
"""

from __future__ import annotations

import ast
import struct
from pathlib import Path
from typing import Any

import pytest

import emu.fabricclock as fcmod
from emu.fabricclock import FabricClock
from emu.switch import daemon as D
from emu.switch import kernel as K
from emu.switch import trim as T
from emu.switch.config import SwitchConfig
from emu.switch.nfqueue import NF_ACCEPT, NF_DROP, QPacket
from emu.wire.codec import roce as RC

ROOT = Path(__file__).resolve().parents[2] / "emu"
NAMES = {1: "h1", 2: "h2", 3: "h3"}
EGRESS = 3
PAYLOAD = 1000
#: DSCP → what the configuration below makes of it: class 0 marks (RED), class 1 trims
#: above its threshold, class 3 is lossless (PFC)
ECN_DSCP, TRIM_DSCP, LOSSLESS_DSCP = 0, 8, 24


class FakeMono:
    """A ``time.monotonic`` the test moves by hand."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def config() -> SwitchConfig:
    """One slow egress port (1 Gb/s, fabric) with a delay line and jitter, RED marking,
    a trimming class and a lossless class — every timed decision the pipeline makes."""
    return SwitchConfig.from_dict({
        "ports": {"h3": {"rate": "1gbit", "depth": "30KB", "loss": 0.02, "delay": "10us",
                         "jitter": "3us", "kmin": "4KB", "kmax": "16KB", "pmax": 0.5,
                         "c1.trim": True, "c1.trim_threshold": "6KB",
                         "c3.lossless": True, "c3.xoff": "8KB", "c3.xon": "4KB"}},
        "pfc_refresh": 50e-6, "seed": 7, "series_interval": 1.0})


def ip_packet(psn: int, dscp: int) -> bytes:
    """An IPv4 RoCEv2 WRITE of ``PAYLOAD`` bytes (ECT(0)), as NFQUEUE hands it over."""
    roce = bytes(RC.encode_packet(RC.BTH(opcode=0x0A, dqpn=0x42, psn=psn),
                                  [RC.RETH(va=0x1000, rkey=7, dmalen=PAYLOAD)], bytes(PAYLOAD)))
    udp = struct.pack("!HHHH", 49152, T.ROCE_PORT, 8 + len(roce), 0) + roce
    hdr = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2 | 2, 20 + len(udp), psn,
                                0x4000, 64, 17, 0, bytes([10, 0, 1, 2]), bytes([10, 0, 3, 2])))
    struct.pack_into("!H", hdr, 10, T.checksum(hdr))
    return bytes(hdr) + udp


#: (fabric time, indev, dscp): two ingress ports, a 1000-byte packet each every 5 µs
#: for 300 µs — 3.2 Gb/s into a 1 Gb/s port, so the queue builds, marks, trims and pauses
TRAFFIC = [(i * 5e-6, 1 + i % 2, (ECN_DSCP, TRIM_DSCP, LOSSLESS_DSCP)[(i // 2) % 3])
           for i in range(120)]


class FakeNfq:
    """NFQUEUE as the daemon's loop uses it: packets handed in, verdicts recorded with
    the fabric and wall times they were sent at."""

    def __init__(self, clock: FabricClock, mono: FakeMono) -> None:
        self.clock, self.mono = clock, mono
        self.pending: list[QPacket] = []
        self.verdicts: list[tuple[float, float, int, int, bool, int | None]] = []
        self.sent_verdicts = 0
        self.errors: dict[int, int] = {}

    def receive(self, limit: int = 1024) -> list[QPacket]:
        out, self.pending = self.pending[:limit], self.pending[limit:]
        return out

    def verdict(self, packet_id: int, verdict: int = NF_ACCEPT, mark: int | None = None,
                payload: bytes | bytearray | None = None) -> None:
        self.sent_verdicts += 1
        self.verdicts.append((self.clock.now(), self.mono.t, packet_id, verdict,
                              mark is not None, None if payload is None else len(payload)))

    def flush(self) -> None:
        pass


class FakePfc:
    def __init__(self, clock: FabricClock) -> None:
        self.clock = clock
        self.frames: list[tuple[float, str, dict[int, int]]] = []

    def send(self, ifname: str, quanta: dict[int, int]) -> None:
        self.frames.append((self.clock.now(), ifname, quanta))


def drive(scale: float, epoch: float, tmp: Path, mono: FakeMono) -> dict[str, Any]:
    """Run :data:`TRAFFIC` through a daemon on ``FabricClock(scale, epoch)``, waking it
    as its ``select`` would: at the wall time :meth:`SwitchDaemon.wall_wait` gives for
    its next fabric deadline, or at a packet's arrival, whichever is first."""
    clock = FabricClock(scale, epoch)
    mono.t = epoch
    d = D.SwitchDaemon(config(), tmp, clock)
    nfq, pfc = FakeNfq(clock, mono), FakePfc(clock)
    d.nfq, d.pfc, d.names = nfq, pfc, dict(NAMES)  # type: ignore[assignment]
    wakes = 0
    i = 0
    while True:
        while i < len(TRAFFIC) and TRAFFIC[i][0] <= clock.now():
            _, indev, dscp = TRAFFIC[i]
            q = QPacket()
            data = ip_packet(i, dscp)
            q.id, q.indev, q.outdev, q.data, q.length = i, indev, EGRESS, data[:256], len(data)
            nfq.pending.append(q)
            i += 1
        nxt = d.step()
        if i == len(TRAFFIC) and d.pipe.next_timer() is None:
            break
        wake = mono.t + d.wall_wait(nxt)
        if i < len(TRAFFIC):
            wake = min(wake, clock.wall_at(TRAFFIC[i][0]))
        # a deadline the float round trip put an ulp early: the clock has moved on by then
        mono.t = wake if wake > mono.t else mono.t + 1e-12 * scale
        wakes += 1
        assert wakes < 100_000
    d.files.close()
    return {"verdicts": nfq.verdicts, "pfc": pfc.frames,
            "counters": d.counters(clock.now(), qdisc=False)}


def test_the_pipeline_makes_the_same_decisions_at_scale_1_and_4(monkeypatch, tmp_path):
    mono = FakeMono(0.0)
    monkeypatch.setattr(fcmod.time, "monotonic", mono)
    epoch = 12_345.678
    one = drive(1, epoch, tmp_path / "1", mono)
    four = drive(4, epoch, tmp_path / "4", mono)

    decisions = [(pid, v, marked, size) for _, _, pid, v, marked, size in one["verdicts"]]
    assert decisions == [(pid, v, marked, size) for _, _, pid, v, marked, size in
                         four["verdicts"]]
    assert len(decisions) == len(TRAFFIC)  # every packet got exactly one verdict
    # the traffic exercised every kind of decision
    assert any(m for _, _, m, _ in decisions) and any(s for _, _, _, s in decisions)
    assert any(v == NF_DROP for _, v, _, _ in decisions)
    assert one["pfc"] and [f[1:] for f in one["pfc"]] == [f[1:] for f in four["pfc"]]
    for a, b in zip(one["verdicts"], four["verdicts"], strict=True):
        assert b[0] == pytest.approx(a[0], abs=1e-9)  # the same fabric time …
        # … at four times the wall distance from the epoch: a release waits for the wall
        # time of its fabric departure
        assert b[1] - epoch == pytest.approx(4 * (a[1] - epoch), abs=4e-9)
    for a, b in zip(one["pfc"], four["pfc"], strict=True):
        assert b[0] == pytest.approx(a[0], abs=1e-9)
    # PFC quanta are fabric: 2 refresh periods of 512 ns quanta, whatever the scale
    cfg = config()
    xoff = [q for _, _, qs in one["pfc"] for q in qs.values() if q]
    assert xoff and set(xoff) == {int(2 * cfg.pfc_refresh / cfg.pfc_quantum) + 1}
    # the counters: the same counts and the same fabric seconds (paused_time), at time
    # "t" of the fabric clock, the scale beside them
    c1, c4 = one["counters"], four["counters"]
    assert (c1["time_scale"], c4["time_scale"]) == (1, 4)
    assert c4["t"] == pytest.approx(c1["t"], abs=1e-9)
    p1, p4 = c1["ports"]["h3"], c4["ports"]["h3"]
    assert p1["marked"] and p1["trimmed"] and p1["xoff"] and p1["paused_time"] > 0
    assert p1["late"] == p4["late"] == 0  # woken on time: no overload
    for k, v in p1.items():
        assert p4[k] == pytest.approx(v, abs=1e-9), k


def test_a_late_release_is_counted_in_fabric_seconds(monkeypatch, tmp_path):
    """A daemon that wakes 400 µs of wall time late at scale 4 lost 100 µs of the
    fabric's link time: ``late_s`` is fabric seconds, as the NIC daemons' overload."""
    mono = FakeMono(100.0)
    monkeypatch.setattr(fcmod.time, "monotonic", mono)
    clock = FabricClock(4, 100.0)
    d = D.SwitchDaemon(config(), tmp_path, clock)
    nfq = FakeNfq(clock, mono)
    d.nfq, d.pfc, d.names = nfq, FakePfc(clock), dict(NAMES)  # type: ignore[assignment]
    q = QPacket()
    data = ip_packet(0, ECN_DSCP)
    q.id, q.indev, q.outdev, q.data, q.length = 0, 1, EGRESS, data, len(data)
    nfq.pending.append(q)
    nxt = d.step()  # the packet starts serializing: 8.x µs of fabric time
    assert d.wall_wait(nxt) == pytest.approx(4 * (len(data) * 8 / 1e9))
    mono.t = clock.wall_at(nxt) + 400e-6
    d.step()
    c = d.counters(clock.now(), qdisc=False)["ports"]["h3"]
    assert c["late"] == 1 and c["late_s"] == pytest.approx(100e-6)
    d.files.close()


def test_the_kernel_datapath_runs_at_the_wall_rate():
    """tbf and the BPF virtual queue run on CLOCK_MONOTONIC (``bpf_ktime_get_ns``): at
    scale 4 a 1 Gb/s port drains at 250 Mb/s of wall time; byte thresholds stay."""
    cfg = config()
    p = cfg.port("h3")
    assert K.wall_rate(p, 4) == 250_000_000 and K.wall_rate(p) == 1_000_000_000
    slow = SwitchConfig.from_dict({**cfg.to_dict(), "ports": {
        "h3": {**cfg.port("h3").to_dict(), "rate": 250_000_000}}})
    assert K.pack_config(cfg, p, 4) == K.pack_config(slow, slow.port("h3"))
    ps_per_byte, depth = struct.unpack_from("<QQ", K.pack_config(cfg, p, 4))
    assert ps_per_byte == 32_000 and depth == 30_000
    assert K.wall_rate(SwitchConfig().port("x"), 4) is None


@pytest.mark.parametrize("bad", ["0.5", "auto", "x"])
def test_the_daemon_refuses_a_bad_time_scale(bad, capsys):
    with pytest.raises(SystemExit) as e:
        D.main(["--time-scale", bad, "--state-dir", "/nonexistent"])
    assert e.value.code == 2 and "time scale" in capsys.readouterr().err


# -- who reads the wall clock ------------------------------------------------------

#: the emu/switch modules that read the wall clock (emu.fabricclock.wall), and why each
#: is wall; everything else in emu/switch takes fabric time as an argument or reads the
#: daemon's FabricClock
SWITCH_WALL = {
    "daemon.py": "the one boundary of the packet loop: select sleeps until the wall time "
                 "of the next fabric deadline (wall_wait), and uptime (a fact of the process)",
    "kernel.py": "the BPF virtual queue's t_free is bpf_ktime_get_ns (CLOCK_MONOTONIC): its "
                 "backlog in bytes is read against that clock and the wall rate",
    "bench.py": "the benchmark measures this machine's packets per wall second, at scale 1",
}


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_the_switch_reads_the_wall_clock_only_through_the_clock_module():
    readers = set()
    for path in sorted((ROOT / "switch").glob("*.py")):
        tree = _tree(path)
        imported = set()
        called = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                imported |= {a.name.split(".")[0] for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module:
                imported.add(n.module.split(".")[0])
            elif isinstance(n, ast.Call):
                f = n.func
                called.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
        assert not imported & {"time", "datetime"}, \
            f"{path}: read the wall clock through emu.fabricclock (wall)"
        if called & {"wall", "realtime", "monotonic", "perf_counter", "time_ns"}:
            readers.add(path.name)
    assert readers == set(SWITCH_WALL), "a new wall-clock reader in emu/switch: say why"

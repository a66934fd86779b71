# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's receive path carries the whole TOS byte: ECN to every engine, "trimmed"
(DSCP 30/31 or ``--trimmed-dscp``) to engines whose ``receive_datagram`` takes it; and
``--trace`` gives every engine one JSON-lines event trace. On ::1 / 127.0.0.1, no root."""

from __future__ import annotations

import json
import random
import socket
import time
from collections import deque
from typing import Any

import pytest
import trio

from emu.core.memory import MemoryTable
from emu.core.trace import read_trace
from emu.nic import engines
from emu.nic.cli import _run_args, config_from
from emu.nic.config import NicConfig
from emu.nic.daemon import running, takes, trimmed_table
from emu.nic.udp import PortSocket
from emu.wire.uet_defs import DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP

IPV6_TCLASS = 67


class _Recorder:
    """An engine that records what the daemon hands it; ``trimmed`` in the signature or not."""

    def __init__(self, ctx: engines.EngineContext) -> None:
        self.got: list[tuple[bytes, int, bool | None]] = []
        self.trace = ctx.trace

    def datagrams_to_send(self, now: float) -> list:
        return []

    def get_timer(self) -> None:
        return None

    def handle_timer(self, now: float) -> None:
        pass

    def next_event(self) -> None:
        return None

    def counters(self) -> dict[str, int]:
        return {"got": len(self.got)}

    def pause(self, cls: int, until: float) -> None:
        pass


class TrimAware(_Recorder):
    def receive_datagram(self, data: bytes, addr: Any, now: float, *, ecn: int = 0,
                         trimmed: bool = False) -> None:
        self.got.append((bytes(data), ecn, trimmed))
        if self.trace.enabled:
            self.trace.packet_received(now, len=len(data), ecn=ecn, trimmed=trimmed)


class Plain(_Recorder):
    def receive_datagram(self, data: bytes, addr: Any, now: float, *, ecn: int = 0) -> None:
        self.got.append((bytes(data), ecn, None))


class Stamped(_Recorder):
    """Takes ``arrived=``: records (now, arrived) per datagram."""

    def __init__(self, ctx: engines.EngineContext) -> None:
        super().__init__(ctx)
        self.times: list[tuple[float, float | None]] = []

    def receive_datagram(self, data: bytes, addr: Any, now: float, *, ecn: int = 0,
                         arrived: float | None = None) -> None:
        self.times.append((now, arrived))


def _send(port: int, tclasses: list[int], host: str = "::1") -> None:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        for i, tc in enumerate(tclasses):
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, IPV6_TCLASS, tc)
            else:
                s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tc)
            s.sendto(bytes([i]) * 100, (host, port))
    finally:
        s.close()


async def _until(cond: Any, what: str) -> None:
    with trio.move_on_after(10):
        while not cond():
            await trio.sleep(0.01)
    assert cond(), f"timed out waiting for {what}"


@pytest.mark.parametrize("host", ["::1", "127.0.0.1"])
def test_recv_batch_keeps_the_whole_tos_byte(host):
    ps = PortSocket(host, 0, gro=False)
    try:
        tcs = [(DSCP_TRIMMED << 2) | 2, (46 << 2) | 3, 0, (DSCP_TRIMMED_LASTHOP << 2) | 1]
        _send(ps.sock.getsockname()[1], tcs, host)
        out: deque = deque()
        c = dict.fromkeys(("rx_packets", "rx_bytes", "rx_truncated", "rx_bad_icrc",
                           "rx_backlog_drops"), 0)
        for _ in range(50):
            try:
                ps.recv_batch(out, 64, 100, c)
            except BlockingIOError:
                if len(out) == len(tcs):
                    break
                time.sleep(0.01)
        assert [t for _, _, t in out] == tcs
        assert [d[0] for d, _, _ in out] == [0, 1, 2, 3] and c["rx_packets"] == 4
    finally:
        ps.close()


@pytest.mark.trio
@pytest.mark.parametrize("dscps", [None, (40,)])
async def test_daemon_passes_trimmed_only_to_engines_that_take_it(tmp_path, dscps):
    engines.register("trim-aware", TrimAware)
    engines.register("trim-plain", Plain)
    cfg = NicConfig(sock_path=str(tmp_path / "c" / "h.sock"), host="h",
                    transports=["trim-aware", "trim-plain"],
                    ports={"trim-aware": 0, "trim-plain": 0}, addresses=["::1"],
                    **({"trimmed_dscps": dscps} if dscps else {}))
    trimmed = set(dscps or (DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP))
    tcs = [(DSCP_TRIMMED << 2) | 2, (DSCP_TRIMMED_LASTHOP << 2), 3, (26 << 2) | 1,
           (40 << 2) | 2]
    async with running(cfg) as d:
        aware, plain = d.slots["trim-aware"], d.slots["trim-plain"]
        assert aware.takes_trimmed and not plain.takes_trimmed
        _send(aware.port, tcs)
        _send(plain.port, tcs)
        await _until(lambda: len(aware.engine.got) == len(tcs) == len(plain.engine.got),
                     "every datagram at both engines")
        want = [tc >> 2 in trimmed for tc in tcs]
        assert [(d[0], e, t) for d, e, t in aware.engine.got] == [
            (i, tc & 3, w) for i, (tc, w) in enumerate(zip(tcs, want, strict=True))]
        assert [(d[0], e, t) for d, e, t in plain.engine.got] == [
            (i, tc & 3, None) for i, tc in enumerate(tcs)]
        for s in (aware, plain):
            assert s.c["rx_trimmed"] == sum(want) and s.c["engine_errors"] == 0


@pytest.mark.trio
async def test_trace_file_has_header_clock_and_engine_events(tmp_path):
    engines.register("trim-aware", TrimAware)
    path = tmp_path / "logs" / "h.trace.jsonl"
    cfg = NicConfig(sock_path=str(tmp_path / "c" / "h.sock"), cluster="cl", host="h",
                    transports=["trim-aware"], ports={"trim-aware": 0}, addresses=["::1"],
                    trace=str(path))
    async with running(cfg) as d:
        slot = d.slots["trim-aware"]
        t0 = trio.current_time()
        _send(slot.port, [(DSCP_TRIMMED << 2) | 2, 2])
        await _until(lambda: len(slot.engine.got) == 2, "two datagrams")
        t1 = trio.current_time()
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["emu_trace"] == 1 and header["host"] == "h" and header["cluster"] == "cl"
    recs = read_trace(lines)
    (start,) = [r for r in recs if r["name"] == "daemon_started"]
    assert start["data"]["transports"] == ["trim-aware"] and start["time"] <= t0
    rx = [r for r in recs if r["name"] == "packet_received"]
    assert [(r["ep"], r["data"]["trimmed"], r["data"]["ecn"]) for r in rx] == [
        ("h/trim-aware", True, 2), ("h/trim-aware", False, 2)]
    assert all(t0 <= r["time"] <= t1 for r in rx)  # the daemon's clock, as engines see it


def test_engine_factories_take_the_daemon_trace_and_trimmed_flag():
    """Both UET and RoCE take ``trimmed=`` (UET NACKs a trimmed request, RoCE counts a loss)."""
    from emu.core.trace import Trace

    tr = Trace.memory("h")
    ctx = engines.EngineContext(MemoryTable(random.Random(1)), random.Random(2), ["::1"],
                                4793, 9000, {}, tr.child("h/uet"))
    uet = engines.create("uet", ctx)
    assert uet.engine.trace.enabled and uet.engine.trace.endpoint == "h/uet"
    assert takes(uet, "trimmed")
    ctx.port, ctx.trace = 4791, tr.child("h/roce")
    roce = engines.create("roce", ctx)
    assert roce.trace.endpoint == "h/roce" and takes(roce, "trimmed")  # it discards them
    ctx.trace = Trace.disabled()
    assert not engines.create("uet", ctx).engine.trace.enabled


def test_cli_trace_and_trimmed_dscp_options():
    import argparse

    p = argparse.ArgumentParser()
    _run_args(p)
    cfg = config_from(p.parse_args(["--sock", "/tmp/x.sock", "--trace", "/tmp/t.jsonl",
                                    "--trimmed-dscp", "12", "--trimmed-dscp", "13"]))
    assert cfg.trace == "/tmp/t.jsonl" and cfg.trimmed_dscps == (12, 13)
    cfg = config_from(p.parse_args(["--sock", "/tmp/x.sock"]))
    assert cfg.trace is None and cfg.trimmed_dscps == (DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP)
    with pytest.raises(SystemExit, match="a DSCP is 0..63"):
        config_from(p.parse_args(["--sock", "/tmp/x.sock", "--trimmed-dscp", "64"]))
    tab = trimmed_table((12,))
    assert len(tab) == 256 and [t for t in range(256) if tab[t]] == [48, 49, 50, 51]
    with pytest.raises(ValueError, match="not a DSCP"):
        trimmed_table((64,))


@pytest.mark.parametrize(("loss_threshold", "probes", "reason"),
                         [(0, False, "rto"), (0, True, "probe"), (16, True, "sack")])
def test_uet_engine_traces_entropy_retx_flag_nack_and_rto(loss_threshold, probes, reason):
    """Sans-IO: the trace fields the e2e test and users rely on. One packet trimmed
    (explicit ``trimmed=True``, as the daemon passes it) → NACK TRIMMED → resend at once;
    one packet dropped → with ``loss_threshold`` 0 and no loss probes the RTO timer fires
    and resends it; with probes (``loss_threshold`` 0) the loss probe's answer shows it
    missing, a few round trips on; by default it is presumed lost at the transfer's tail,
    once the packets after it were SACKed, and resent with reason "sack" before any timer
    fires."""
    from uet_pair import A, ok, uet_pair, write

    from emu.core.trace import Trace, select

    trace = Trace.memory("a")
    p = uet_pair(seed=21, ekw={"mtu": 1024, "trace": trace, "rto": 2e-3,
                               "loss_threshold": loss_threshold, "loss_probes": probes})
    events: list[str] = []

    def impair(d: bytes, s: tuple, dst: tuple) -> bool:
        if s != A or len(d) < 1000:
            return False
        if "trim" not in events:  # first data packet: trimmed by "the switch"
            events.append("trim")
            p.eb.receive_datagram(d[:12 + 44], A, p.link.now, trimmed=True)
            return True
        if "drop" not in events:  # second: lost
            events.append("drop")
            return True
        return False

    p.link.drop = impair
    _, dst, data = write(p, 1, 8 * 1024)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    sent = select(trace.events, "packet_sent", retx=False)
    assert len(sent) == 8 and all(e["data"]["ent"] in p.ea.entropies for e in sent)
    (nk,) = select(trace.events, "nack_received")
    assert nk["data"]["code"] == 0x01
    (by_nack,) = select(trace.events, "packet_retransmitted", reason="nack")
    assert by_nack["data"]["psn"] == nk["data"]["psn"] and by_nack["time"] == nk["time"]
    fired = select(trace.events, "timer_fired", timer="retx")
    if reason != "rto":
        (by_rto,) = select(trace.events, "packet_retransmitted", reason=reason)
        assert not fired and by_rto["time"] - sent[0]["time"] < p.ea.rto / 10
        assert not select(trace.events, "packet_retransmitted", reason="rto")
        probes_fired = select(trace.events, "timer_fired", timer="probe")
        (asked,) = select(trace.events, "loss_probe") or [None]
        assert bool(probes_fired) == bool(asked) == (reason == "probe")
        if asked:
            assert asked["data"]["psns"] == [by_rto["data"]["psn"]]
    else:
        (by_rto,) = select(trace.events, "packet_retransmitted", reason="rto")
        assert fired and fired[0]["time"] == by_rto["time"]
        assert by_rto["time"] - sent[0]["time"] >= p.ea.rto  # the RTO, not sooner
    assert by_rto["data"]["psn"] != nk["data"]["psn"]
    resent = select(trace.events, "packet_sent", retx=True)
    assert {e["data"]["psn"] for e in resent} == {nk["data"]["psn"], by_rto["data"]["psn"]}
    assert all(e["data"]["ent"] in p.ea.entropies for e in resent)


@pytest.mark.trio
async def test_an_engine_that_takes_arrived_gets_the_kernel_receive_time(tmp_path):
    """A datagram the daemon reads 80 ms after it arrived (the loop is held up) reaches
    the engine with ``arrived`` ~80 ms before ``now``: the kernel's receive stamp on
    trio's clock — what lets UET keep a daemon's lateness out of its round trips."""
    engines.register("stamped", Stamped)
    cfg = NicConfig(sock_path=str(tmp_path / "c" / "h.sock"), host="h",
                    transports=["stamped"], ports={"stamped": 0}, addresses=["127.0.0.1"])
    async with running(cfg) as d:
        slot = d.slots["stamped"]
        assert slot.times is not None and not slot.takes_trimmed
        await trio.sleep(0.3)  # the kernel turns receive stamps on a moment after asked
        _send(slot.port, [0], "127.0.0.1")
        time.sleep(0.08)  # hold the event loop: the daemon reads late
        await _until(lambda: slot.engine.times, "the datagram at the engine")
        [(now, arrived)] = slot.engine.times
        assert arrived is not None and 0.06 < now - arrived < 1.0, (now, arrived)

# SPDX-License-Identifier: GPL-2.0-only
"""Line rates, base round trips and capacity from topology files (no root, no sockets);
the port serializer sans-IO and through a TxPath on loopback."""

from __future__ import annotations

import math
import socket
import time
from pathlib import Path

import pytest
import trio
from fabric_util import shipped_real_time

import emu.cluster  # noqa: F401  (registers the [nic]/[switch] checkers the shipped files need)
from emu.credible import capacity, rates
from emu.credible.overload import delta, judge_scale, warning
from emu.nic.overloadstat import overload
from emu.nic.pacer import PortPacer
from emu.nic.timerfd import TimerFd
from emu.nic.txpath import TxPath
from emu.nic.udp import PortSocket
from emu.switch import kernel
from emu.topology.loader import loads
from emu.transports.base import TxMeta

NS = Path(__file__).resolve().parents[2] / "namespaces"


def load(path: Path, sets: list[str] | None = None):
    """A shipped topology without its fabric units (the rules here are about rates a
    file leaves unstated): :func:`tests.support.fabric_util.shipped_real_time`."""
    return loads(shipped_real_time(path.name), str(path), sets)


# -- the serializer -------------------------------------------------------------------


def test_pacer_holds_the_line_rate_exactly_over_any_interval():
    p = PortPacer("eth0", 1e9, burst_s=100e-6)
    now, sent, frame = 0.0, 0, 9000
    while now < 1.0:  # a greedy sender that asks every 10 µs
        while p.room(now) > 0:
            p.charge(now, frame, 1, waited=True)
            sent += frame
        now += 10e-6
    assert sent * 8 == pytest.approx(1e9, rel=0.001)  # one second at 1 Gb/s, burst aside
    assert p.c["late"] == 0


def test_pacer_counts_the_daemon_late_only_when_frames_waited():
    p = PortPacer("eth0", 1e9, burst_s=100e-6, mtu=1500)
    p.charge(0.0, 125_000, 10, waited=False)  # 1 ms of wire time
    assert p.due() == pytest.approx(0.925e-3)  # a quarter of the 100 µs FIFO drained: top up
    p.charge(5e-3, 9000, 1, waited=False)  # idle link: nothing waited, not late
    assert p.c["late"] == 0
    t = p.t_free
    p.charge(t + 5e-3, 9000, 1, waited=True)  # frames waited and the daemon came 5 ms late
    assert p.c["late"] == 1 and p.c["late_s"] == pytest.approx(5e-3)
    t = p.t_free
    p.charge(t + 10e-6, 9000, 1, waited=True)  # under a frame's time (12 µs): not late
    assert p.c["late"] == 1
    assert p.c["waits"] == 2  # sends whose frames had waited for the port


def test_unpaced_port_never_waits():
    p = PortPacer("eth0", None)
    assert not p.paced and p.room(0.0) == math.inf
    p.charge(0.0, 10**9, 1000, waited=True)
    assert p.c["late"] == 0 and p.counters()["line_rate"] is None


def test_txpath_stops_at_the_port_budget_and_resumes():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # room for all 100 datagrams: each costs ~2.3 KB of receive buffer on lo (its skb), and
    # the default 208 KB held 92 of them once (the test's socket, not the pacer, dropped)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # the kernel caps: ≥ 416 KB
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    ps = PortSocket("127.0.0.1", 0, mtu=9000)
    # 12.5 KB of room per burst, refilled at one 1042-byte frame per 0.83 ms: slower than
    # any send, so a flush stops at the budget even on a host where a send on lo takes
    # ~40 us and a preemption lasts milliseconds (at 100 Mb/s, once, the refill kept up
    # and the whole queue went)
    ps.pacer = PortPacer("lo", 10e6, burst_s=10e-3, mtu=1500)
    c: dict[str, int] = dict.fromkeys(("tx_packets", "tx_bytes", "tx_errors", "tx_last_errno",
                                       "tx_gso_sends", "tx_gso_disabled",
                                       "tx_entropy_fallback", "tx_backlog_drops"), 0)
    tx = TxPath([ps], c, max_queue=1000)
    try:
        meta = TxMeta(ps.sport)
        tx.put([(bytes(1000), rx.getsockname(), meta) for _ in range(100)])
        t0 = time.monotonic()
        tx.flush()
        t1 = time.monotonic()
        first = c["tx_packets"]
        # what the port may take: 10 ms of 10 Mb/s (1042-byte frames) plus the time the
        # flush itself took, the last frame allowed to overrun
        allowed = (10e-3 + t1 - t0) * 10e6 / 8 / 1042 + 1
        assert 12 <= first <= allowed and tx.paced_until is not None
        assert len(tx.queue) == 100 - first
        time.sleep(max(0.0, tx.paced_until - time.monotonic()) + 1e-3)
        tx.flush()
        assert c["tx_packets"] > first
        got = 0
        while True:
            try:
                rx.recv(2000)
                got += 1
            except BlockingIOError:
                break
        assert got == c["tx_packets"]  # paced, never dropped
    finally:
        ps.close()
        rx.close()


def test_timerfd_sleeps_until_its_deadline():
    async def main() -> list[float]:
        t = TimerFd()
        try:
            out = []
            for _ in range(5):
                d = time.monotonic() + 2e-3
                await t.sleep_until(d)
                out.append(time.monotonic() - d)
            return out
        finally:
            t.close()

    assert all(x >= 0 for x in trio.run(main))  # never early


# -- rates from the topology ----------------------------------------------------------


def test_pair_ports_take_the_default_rate():
    topo = load(NS / "pair.toml")
    ports = rates.host_ports(topo, 1e9)
    assert {(p.host, p.rate, p.source) for p in ports} == {("h1", 1e9, "default"),
                                                           ("h2", 1e9, "default")}


def test_link_rate_then_switch_port_rate_then_nic_line_rate():
    t = load(NS / "leaf-spine.toml", ["switch.port.rate=100mbit"])
    ports = rates.host_ports(t, 1e9)
    assert {p.rate for p in ports} == {100e6} and {p.source for p in ports} == {"switch"}
    t = load(NS / "leaf-spine.toml", ["switch.port.rate=100mbit", "link.rate=50mbit"])
    assert {p.source for p in rates.host_ports(t, 1e9)} == {"link"}
    t = load(NS / "leaf-spine.toml", ["nic.line_rate=2gbit"])
    assert {(p.rate, p.source) for p in rates.host_ports(t, 1e9)} == {(2e9, "nic.line_rate")}


def test_each_host_port_line_rate_becomes_its_link_egress_rate():
    """What emu up puts in a kernel tbf: the host's egress direction only, never over a
    link's own rate, and on a copy (the caller's model keeps no rate)."""
    t = load(NS / "leaf-spine.toml", ["switch.port.rate=100mbit"])
    s = rates.serialized(t, rates.host_ports(t, 1e9))
    for lk, orig in zip(s.links, t.links, strict=True):
        for end, d, o in ((lk.a, lk.a_to_b, orig.a_to_b), (lk.b, lk.b_to_a, orig.b_to_a)):
            host = t.nodes[end.node].kind == "host"
            assert d.rate_bps == (100_000_000 if host else None), (lk.name, end.node)
            assert o.rate_bps is None
    t = load(NS / "pair.toml", ["link.rate=50mbit"])
    s = rates.serialized(t, rates.host_ports(t, 1e9))
    assert {s.links[0].a_to_b.rate_bps, s.links[0].b_to_a.rate_bps} == {50_000_000}


def test_longest_leaf_spine_path_crosses_three_switches():
    t = load(NS / "leaf-spine.toml")
    path = rates.longest_path(t)
    assert [t.nodes[n].kind for n, _ in path] == ["host", "switch", "switch", "switch"]
    assert rates.longest_path(load(NS / "pair.toml")) == [("h1", "eth0")]


def test_base_rtt_grows_with_serialization_and_switch_daemons():
    c = capacity.REFERENCE
    pair = load(NS / "pair.toml")
    p = rates.base_rtt(pair, rates.host_ports(pair, 1e9), 9000, c.nic_turnaround,
                       c.switch_turnaround)
    assert p == pytest.approx(c.nic_turnaround + (9014 + rates.ACK_FRAME) * 8 / 1e9)
    ls = load(NS / "leaf-spine.toml", ["switch.port.rate=100mbit", "switch.datapath=user"])
    r = rates.base_rtt(ls, rates.host_ports(ls, 1e9), 9000, c.nic_turnaround,
                       c.switch_turnaround)
    # four 100 Mb/s hops of a jumbo frame and an ACK, three switch daemons both ways
    wire = c.nic_turnaround + 4 * (9014 + rates.ACK_FRAME) * 8 / 100e6
    assert r == pytest.approx(wire + 6 * c.switch_turnaround)
    # the kernel datapath adds no daemon turnaround (kernel forwarding is in ping's)
    kls = load(NS / "leaf-spine.toml", ["switch.port.rate=100mbit", "switch.datapath=kernel"])
    k = rates.base_rtt(kls, rates.host_ports(kls, 1e9), 9000, c.nic_turnaround,
                       c.switch_turnaround)
    assert k == pytest.approx(wire if kernel.available() is None else r)


# -- capacity -------------------------------------------------------------------------


def test_reference_machine_proposals_meet_the_floor():
    # 500 Mb/s a port for the pair in real time (a daemon held to 0.35 of a core:
    # capacity.DAEMON_SHARE), 100 Mb/s through user-space switch daemons
    assert capacity.propose(load(NS / "pair.toml"), capacity.REFERENCE) >= 500e6
    ls = load(NS / "leaf-spine.toml", ["switch.port.rate=10gbit", "switch.datapath=user"])
    assert capacity.propose(ls, capacity.REFERENCE) >= 50e6
    # with the kernel datapath the switches cost no daemon, only softirq work at the ends:
    # between the user-space datapath's rate and the pair's
    kls = load(NS / "leaf-spine.toml", ["switch.port.rate=10gbit", "switch.datapath=kernel"])
    if kernel.available() is None:
        assert capacity.switches_on_path(kls) == 0
        assert capacity.switches_on_path(kls, "kernel") == 3
        pair_rate = capacity.max_rate(capacity.REFERENCE, 0, 9000)
        k = capacity.max_rate(capacity.REFERENCE, 0, 9000, 3)
        assert capacity.max_rate(capacity.REFERENCE, 3, 9000) < k < pair_rate


def test_fit_names_the_setting_that_fits():
    ls = load(NS / "leaf-spine.toml", ["switch.port.rate=10gbit"])
    res = capacity.fit(ls, capacity.REFERENCE)
    assert not res["fits"] and res["too_fast"]
    r = int(res["proposed"])
    assert res["advice"] == [f"--set switch.port.rate={r // 10**6}mbit"] or \
        res["advice"][0].startswith("--set switch.port.rate=")
    again = load(NS / "leaf-spine.toml", [res["advice"][0].split(" ", 1)[1]])
    assert capacity.fit(again, capacity.REFERENCE)["fits"]
    assert "warning" in capacity.describe(res)


def test_nice_floor():
    assert [capacity.nice_floor(x) for x in (1.26e9, 999e6, 450e6, 2e5)] == \
        [1e9, 500e6, 200e6, capacity.MIN_RATE]


# -- overload bookkeeping -------------------------------------------------------------


def test_overload_sums_causes_and_delta_judges_the_run_alone():
    o = overload({"rx_kernel_drops": 3, "rx_backlog_drops": 0, "tx_backlog_drops": 1},
                 {"eth0": {"late": 2, "late_s": 0.5}})
    assert o["total"] == 6 and o["rx_socket"] == 3 and o["tx_late"] == 2
    before = {"nic": {"h2": {"overload": o, "tx_packets": 100, "retransmits": 1}},
              "switch": {}, "unreachable": []}
    after = {"nic": {"h2": {"overload": o, "tx_packets": 300, "retransmits": 1}},
             "switch": {}, "unreachable": []}
    d = delta(before, after)  # old damage does not count against this run
    assert d["credible"] and d["total"] == 0 and d["tx_packets"] == 200 and warning(d) is None
    worse = dict(o, rx_socket=10, tx_late=3, tx_late_s=0.52, total=14)
    after["nic"]["h2"]["overload"] = worse
    before["t"], after["t"] = 10.0, 12.0
    d = delta(before, after)
    assert not d["credible"] and d["causes"] == {"rx_socket": 7, "tx_late": 1}
    assert d["lost_link_s"] == pytest.approx(0.02) and d["elapsed_s"] == 2.0
    w = warning(d)
    assert "NOT CREDIBLE" in w and "nicd h2" in w and "20.0 ms of link time lost, 1 %" in w


def test_a_timeout_a_late_daemon_caused_is_overload():
    """UET counts retransmission timeouts only the target's holding caused (``rto_held``,
    tests/transports/uet/test_service_time.py); the daemon's totals carry them into
    its overload, and a run with one is not credible."""
    o = overload({"rto_held": 2}, {})
    assert o["rto_held"] == 2 and o["total"] == 2
    zero = overload({}, {})
    d = delta({"nic": {"h1": {"overload": zero, "tx_packets": 0, "retransmits": 0}},
               "switch": {}, "unreachable": [], "t": 0.0},
              {"nic": {"h1": {"overload": o, "tx_packets": 100, "retransmits": 2}},
               "switch": {}, "unreachable": [], "t": 1.0})
    assert not d["credible"] and d["causes"] == {"rto_held": 2}
    assert "rto_held 2" in warning(d)


def test_lost_link_time_is_a_share_of_the_late_ports_time_not_of_the_run():
    """Four busy daemons each losing 1.5 s of a 2 s run: 75 % of their time, not 300 %."""
    def snap(late_s: float, t: float) -> dict:
        o = overload({}, {"eth0": {"late": int(late_s > 0), "late_s": late_s}})
        return {"t": t, "switch": {}, "unreachable": [],
                "nic": {h: {"overload": o, "tx_packets": 0, "retransmits": 0}
                        for h in ("h1", "h2", "h3", "h4")}}
    d = delta(snap(0.0, 10.0), snap(1.5, 12.0))
    assert d["lost_link_s"] == pytest.approx(6.0)
    assert "6000.0 ms of link time lost, 75 % of the late ports' time" in warning(d)


def test_a_daemon_starved_of_cpu_is_overload_even_without_a_late_frame():
    """A deep transmit FIFO hides short stalls from tx_late; CPU starvation over the run
    is still overload (schedstat's run-queue wait against the run's length)."""
    def snap(wait_s: float, t: float) -> dict:
        o = overload({}, {"eth0": {"late": 0, "late_s": 0.0}})
        o["cpu_wait_s"] = wait_s
        return {"t": t, "switch": {}, "unreachable": [],
                "nic": {"h1": {"overload": o, "tx_packets": 0, "retransmits": 0}}}
    ok = delta(snap(1.0, 10.0), snap(1.0 + 0.01, 12.0))  # 0.5 % of the run: wake-ups
    assert ok["credible"], ok
    bad = delta(snap(1.0, 10.0), snap(1.5, 12.0))  # 25 %: starved
    assert not bad["credible"] and bad["causes"] == {"cpu_wait": 1}
    assert bad["daemons"]["nicd h1"]["cpu_wait_s"] == pytest.approx(0.5)
    assert "cpu_wait 1" in warning(bad) and "nicd h1" in warning(bad)
    # the line says what the cause means and what to do about it
    assert "nicd h1 waited for a CPU 25 % of the run" in warning(bad)
    assert "run on a quieter machine" in warning(bad)
    # over how many wake-ups decides: 0.5 s in 1,000 waits of 500 µs is starvation, in
    # 50,000 waits of 10 µs (a daemon woken for every packet) it is wake-up latency
    def snap_runs(wait_s: float, n: int, t: float) -> dict:
        d = snap(wait_s, t)
        d["nic"]["h1"]["overload"]["cpu_runs"] = n
        return d
    assert not delta(snap_runs(1.0, 0, 10.0), snap_runs(1.5, 1_000, 12.0))["credible"]
    busy = delta(snap_runs(1.0, 0, 10.0), snap_runs(1.5, 50_000, 12.0))
    assert busy["credible"] and not busy["causes"], busy  # (cpu_runs is never a cause)


def test_cpu_wait_reads_schedstat(tmp_path):
    from emu.proc import cpu_wait
    f = tmp_path / "schedstat"
    f.write_text("4184204497 5266204235 8724\n")
    assert cpu_wait(str(f)) == (pytest.approx(5.266204235), 8724)
    assert cpu_wait(str(tmp_path / "missing")) == (0.0, 0)
    assert cpu_wait()[0] >= 0.0  # this kernel's own


def test_a_daemon_that_used_a_core_while_its_port_idled_was_the_limit():
    """cpu_bound: a NIC daemon busy for more than CPU_BUSY_MAX of the run while no frame
    waited for its port and the port carried less than PORT_BUSY_MIN of its line rate
    limited the run itself (at 10 Gb/s no frame ever waits for the port, so tx_late
    cannot see it); busy with a full or a waiting port is a daemon that kept up."""
    from emu.credible.overload import CPU_BUSY_MAX, PORT_BUSY_MIN

    def snap(cpu_s: float, port_bytes: int, t: float, waits: int = 0) -> dict:
        o = overload({}, {"eth0": {"late": 0, "line_rate": 1e9, "bytes": port_bytes,
                                   "waits": waits}})
        o["cpu_s"] = cpu_s
        return {"t": t, "switch": {}, "unreachable": [],
                "nic": {"h1": {"overload": o, "tx_packets": 0, "retransmits": 0}}}
    busy = 2 * (CPU_BUSY_MAX + 0.05)
    full = int(2 * 1e9 / 8 * (PORT_BUSY_MIN + 0.05))
    kept_up = delta(snap(0.0, 0, 10.0), snap(busy, full, 12.0))
    assert kept_up["credible"], kept_up
    limit = delta(snap(0.0, 0, 10.0), snap(busy, full // 3, 12.0))
    assert not limit["credible"] and limit["causes"] == {"cpu_bound": 1}
    assert limit["daemons"]["nicd h1"]["cpu_share"] == pytest.approx(CPU_BUSY_MAX + 0.05)
    # frames waited for the port: it was the limit, whatever share of a long window the
    # bytes were (set-up and tear-down are in the window too)
    waited = delta(snap(0.0, 0, 10.0), snap(busy, full // 3, 12.0, waits=40))
    assert waited["credible"], waited
    idle = delta(snap(0.0, 0, 10.0), snap(0.5, full // 3, 12.0))  # CC-limited, not CPU
    assert idle["credible"]
    # the measures beside the counts are never counted as overload
    o = snap(1, 1, 0, waits=3)["nic"]["h1"]["overload"]
    assert {"cpu_s", "port_waits", "tx_bytes", "rx_bytes", "line_rate"} <= set(o)
    assert o["total"] == 0 and o["port_waits"] == 3


def test_a_window_idled_behind_held_acks_for_a_share_of_the_run_is_overload():
    """ack_late: a UET sender's port idle behind ACKs the daemons held (emu.transports.uet
    .flowctl) for more than ACK_LATE_MAX of the run made its goodput the emulator's; a
    little of it (a late wake-up or two) is not counted."""
    from emu.credible.overload import ACK_LATE_MAX

    def snap(ack_late_us: int, t: float) -> dict:
        o = overload({"ack_late_us": ack_late_us}, {})
        return {"t": t, "switch": {}, "unreachable": [],
                "nic": {"h1": {"overload": o, "tx_packets": 0, "retransmits": 0}}}
    assert snap(2500, 0)["nic"]["h1"]["overload"]["ack_late_s"] == pytest.approx(0.0025)
    assert snap(2500, 0)["nic"]["h1"]["overload"]["total"] == 0  # a time, not a count
    little = delta(snap(0, 10.0), snap(int(2e6 * ACK_LATE_MAX / 2), 12.0))
    assert little["credible"], little
    much = delta(snap(0, 10.0), snap(int(2e6 * ACK_LATE_MAX * 2), 12.0))
    assert not much["credible"] and much["causes"] == {"ack_late": 1}
    assert much["daemons"]["nicd h1"]["ack_late_s"] == pytest.approx(4 * ACK_LATE_MAX)


def test_a_run_below_the_plans_floor_is_not_credible_and_says_which_scale_would_be():
    """No packet lost or late, but made at a scale below the plan's floor: flagged
    ``scale_too_small``, with the floor and the --set that reaches it; at or above the
    floor, or with no floor known, the verdict is the counters' alone."""
    quiet = {"nic": {"h1": {"overload": {}, "tx_packets": 10, "retransmits": 0}},
             "switch": {}, "unreachable": [], "t": 0.0}
    d = delta(quiet, dict(quiet, t=1.0))
    d["time_scale"] = 1775.0
    for floor in (0.0, 1775.0, 1000.0):
        e = {**d, "causes": dict(d["causes"])}
        judge_scale(e, floor, "latency")
        assert e["credible"] and warning(e) is None, floor
    judge_scale(d, 7090.0, "latency")
    assert not d["credible"] and d["causes"] == {"scale_too_small": 1} and d["total"] == 1
    assert d["scale_floor"] == {"scale": 1775.0, "floor": 7090.0, "what": "latency"}
    w = warning(d)
    assert w is not None and "time scale 1775 is below the 7.09e+03" in w
    assert "--set time.scale=7100" in w and "NOT CREDIBLE" in w

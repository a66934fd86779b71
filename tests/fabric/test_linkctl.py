# SPDX-License-Identifier: GPL-2.0-only
"""Link control on real namespaces (root): rate, loss, CE marking, down/up, cleanup; schedule.

Topology made here with pyroute2 (not emu/fabric's builder)::

    <p>-a  a0 ──── r0  <p>-r  r1 ──── b0  <p>-b
     10.77.1.2/24   .1       10.77.2.1   10.77.2.2/24   (+ fd77:1::/64, fd77:2::/64)

Rates, loss and marking are checked by counting packets, never against wall-clock
thresholds. Tolerances: loss and CE ±4σ of the binomial (σ = √(n·p·(1−p))); the
tbf test admits the packets the bucket can drain while the burst is being sent.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import time

import pytest
import trio
from routed_ns import RoutedTriple, made_and_removed

from emu.fabric import nftrules
from emu.topology.model import Direction, Endpoint, Event, Link, Node, Topology

PORT = 5555


# --------------------------------------------------------------------------- fixture


class Net(RoutedTriple):
    """The routed triple plus the model links of its two cables."""

    def __init__(self) -> None:
        super().__init__("lc", 77, PORT)
        self.link_ar = Link("a-r", Endpoint("a", "a0"), Endpoint("r", "r0"), mtu=1500)
        self.link_rb = Link("r-b", Endpoint("r", "r1"), Endpoint("b", "b0"), mtu=1500, plane=1)


@pytest.fixture
def net(tmp_path):
    yield from made_and_removed(Net)


def _drain(s: socket.socket, want_tos: bool = False) -> list[int]:
    """Read everything queued; return TOS/TCLASS per datagram (0 when not asked)."""
    s.setblocking(False)
    out = []
    while True:
        try:
            _, anc, _, _ = s.recvmsg(2048, 64)
        except BlockingIOError:
            return out
        tos = 0
        for level, typ, val in anc:
            if (level, typ) in ((socket.IPPROTO_IP, socket.IP_TOS),
                                (socket.IPPROTO_IPV6, socket.IPV6_TCLASS)):
                tos = val[0] if level == socket.IPPROTO_IP else int.from_bytes(val, "little")
        out.append(tos)


def _send_and_receive(tx: socket.socket, rx: socket.socket, dst: str, n: int,
                      payload: bytes = b"x" * 64, want_tos: bool = False,
                      chunk: int = 100) -> list[int]:
    got: list[int] = []
    for i in range(0, n, chunk):
        for _ in range(min(chunk, n - i)):
            tx.sendto(payload, (dst, PORT))
        got += _drain(rx, want_tos)
    for _ in range(50):  # stragglers: bounded wait, not an assertion on time
        more = _drain(rx, want_tos)
        got += more
        if not more:
            time.sleep(0.01)
            if not (more := _drain(rx, want_tos)):
                break
            got += more
    return got


def _wait_reachable(tx: socket.socket, rx: socket.socket, dst: str) -> None:
    """Probe until one datagram gets through (neighbour discovery after a link comes up)."""
    for _ in range(100):
        tx.sendto(b"probe", (dst, PORT))
        time.sleep(0.03)
        if _drain(rx):
            time.sleep(0.03)
            _drain(rx)
            return
    raise AssertionError(f"{dst} never became reachable")


def _within_4sigma(k: int, n: int, p: float) -> tuple[bool, str]:
    sigma = math.sqrt(n * p * (1 - p))
    return abs(k - n * p) <= 4 * sigma, f"{k} of {n} vs expected {n * p:.0f} ± {4 * sigma:.0f}"


# --------------------------------------------------------------------------- tests


def test_features_netem_absent_and_delay_raises(net):
    from emu.fabric import linkctl

    f = linkctl.features()
    text = f.describe()
    assert "netem: " in text
    assert f.nft_egress  # kernel 6.18 here
    if f.netem:
        pytest.skip("this kernel has netem; the refusal path is not reachable")
    assert "netem: absent" in text
    with pytest.raises(linkctl.FeatureMissing, match="CONFIG_NET_SCH_NETEM"):
        linkctl.apply_direction(net.a, "a0", Direction(delay_s=0.005))
    with pytest.raises(linkctl.FeatureMissing, match="netem"):
        linkctl.apply_direction(net.a, "a0", Direction(jitter_s=0.001, loss=0.1))
    # nothing was half-applied
    assert linkctl.counters(net.a, "a0")["nft_table"] is None


def test_rate_cap_counted(net, tmp_path):
    """tbf at 1 Mbit/s, burst 10 frames, limit 20 frames: a 200-frame burst delivers ≈30."""
    from emu.fabric import linkctl

    frame = 1000  # 14 Ethernet + 20 IPv4 + 8 UDP + 958 payload
    payload = b"r" * (frame - 42)
    rate = 1_000_000
    burst, limit = 10 * frame, 20 * frame
    tx, rx = net.sock(net.a), net.sock(net.b, bind=True)
    # resolve neighbours first so no ARP competes for the bucket
    _wait_reachable(tx, rx, "10.77.2.2")
    log = tmp_path / "events.jsonl"
    settings = linkctl.apply_direction(net.a, "a0", Direction(rate_bps=rate), burst=burst,
                                       limit=limit, event_log=log, cluster=net.cluster,
                                       link="a-r", direction="a_to_b")
    assert settings["burst"] == burst and settings["limit"] == limit
    n = 200
    t0 = time.monotonic()
    for _ in range(n):
        tx.sendto(payload, ("10.77.2.2", PORT))
    t_send = time.monotonic() - t0
    c = linkctl.counters(net.a, "a0")
    for _ in range(300):  # let the queue drain (20 frames × 8 ms)
        if c["backlog"] == 0:
            break
        time.sleep(0.02)
        c = linkctl.counters(net.a, "a0")
    got = len(_drain(rx))
    # what the bucket can pass while the burst is being sent (measured send time only
    # widens the expected figure; nothing asserts on elapsed time)
    drained = math.ceil(rate / 8 * t_send / frame) + 1
    expected = burst // frame + limit // frame
    print(f"tbf: delivered {got} of {n}, expected {expected} (+{drained}), qdisc {c}")
    assert expected - 2 <= got <= expected + drained, (got, expected, drained, c)
    assert c["qdisc"] == "tbf e3e0:"
    assert 0 <= c["qdisc_dropped"] - (n - got) <= 3, c
    ev = [json.loads(x) for x in log.read_text().splitlines()]
    assert ev[-1]["action"] == "impair" and ev[-1]["settings"]["rate_bps"] == rate
    assert ev[-1]["link"] == "a-r" and ev[-1]["cluster"] == net.cluster


def test_rate_64bit_and_default_sizes(net):
    from emu.fabric import linkctl

    linkctl.apply_direction(net.a, "a0", Direction(rate_bps=400_000_000_000))
    out = subprocess.run(["ip", "netns", "exec", net.a, "tc", "-j", "qdisc", "show", "dev", "a0"],
                         capture_output=True, text=True, check=True).stdout
    q = json.loads(out)[0]
    assert q["kind"] == "tbf" and q["handle"] == "e3e0:"
    assert q["options"]["rate"] == 400_000_000_000 // 8  # above 2^32 B/s: needs TCA_TBF_RATE64
    burst, limit = linkctl.tbf_sizes(10_000_000, 9000)
    assert burst == 2 * 9014 and limit == burst + linkctl.PORT_BUFFER  # two frames; 2 MiB
    burst, limit = linkctl.tbf_sizes(100_000_000_000, 9000)
    assert burst == 12_500_000 and limit == burst + 250_000_000


@pytest.mark.parametrize(("where", "seed"), [("forwarded", 1), ("local", 1),
                                             ("forwarded", None)])
def test_loss_10_percent(net, where, seed):
    """10 % loss (±4σ), seeded (the default) or the kernel's random draw, on a forwarded
    and on a locally sent packet's egress; nft counts every drop."""
    from emu.fabric import linkctl

    tx, rx = net.sock(net.a), net.sock(net.b, bind=True)
    _wait_reachable(tx, rx, "10.77.2.2")
    ns, ifn = (net.r, "r1") if where == "forwarded" else (net.a, "a0")
    s = linkctl.apply_direction(ns, ifn, Direction(loss=0.1, seed=seed))
    assert s["hook"] == "netdev egress" and s["seed"] == seed
    rules = linkctl.run_in_ns(ns, ["nft", "list", "table", "netdev",
                                   nftrules.nft_table(ifn)]).stdout
    assert ("udp numgen inc" in rules) == (seed is not None)  # the rest: the kernel's draw
    n = 5000
    got = len(_send_and_receive(tx, rx, "10.77.2.2", n))
    lost = n - got
    ok, why = _within_4sigma(lost, n, 0.1)
    assert ok, why
    c = linkctl.counters(ns, ifn)
    # nft counted every drop (± a stray neighbour/MLD packet)
    assert 0 <= c["dropped"] - lost <= 3, (c, lost)


def test_seeded_loss_drops_the_same_packets_every_time(net):
    """A seeded direction drops exactly the packets its pattern names, by their order on
    the link — the same ones when the setting is applied again (a new run) — and another
    seed or another direction drops others."""
    from emu.fabric import linkctl

    tx, rx = net.sock(net.a), net.sock(net.b, bind=True)
    _wait_reachable(tx, rx, "10.77.2.2")
    n, p = 3000, 0.2
    period, ordinals, picked = nftrules.seeded_pattern(
        round(p * nftrules.PROB_SCALE), f"7/{net.link_rb.name}/a_to_b/loss")
    assert picked and period > n
    want_lost = [i for i in ordinals if i < n]
    runs = []
    for _ in range(2):
        linkctl.apply_direction(net.r, "r1", Direction(loss=p, seed=7),
                                link=net.link_rb.name, direction="a_to_b")
        seen = _numbered(tx, rx, "10.77.2.2", n)
        assert set(seen) <= {0, 1}
        runs.append([i for i, k in enumerate(seen) if k == 0])
    assert runs[0] == runs[1] == want_lost, (len(runs[0]), len(want_lost))
    # the counter also holds a stray ARP/ND packet the kernel's draw dropped (not UDP)
    assert 0 <= linkctl.counters(net.r, "r1")["dropped"] - len(want_lost) <= 3
    for seed, direction in ((8, "a_to_b"), (7, "b_to_a")):
        linkctl.apply_direction(net.r, "r1", Direction(loss=p, seed=seed),
                                link=net.link_rb.name, direction=direction)
        seen = _numbered(tx, rx, "10.77.2.2", n)
        other = [i for i, k in enumerate(seen) if k == 0]
        assert other != want_lost
        ok, why = _within_4sigma(len(other), n, p)
        assert ok, why


def test_ce_marking_ect_only(net):
    from emu.fabric import linkctl

    p = 0.3
    tx4, rx4 = net.sock(net.a), net.sock(net.b, bind=True)
    tx6, rx6 = net.sock(net.a, socket.AF_INET6), net.sock(net.b, socket.AF_INET6, bind=True)
    rx4.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
    _wait_reachable(tx4, rx4, "10.77.2.2")
    _wait_reachable(tx6, rx6, "fd77:2::2")
    linkctl.apply_direction(net.r, "r1", Direction(ecn_ce=p))
    # IPv4 ECT(0), as RoCEv2 sends
    tx4.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x02)
    n4 = 5000
    tos = _send_and_receive(tx4, rx4, "10.77.2.2", n4, want_tos=True)
    assert len(tos) == n4  # marking never drops
    ce4 = sum(1 for t in tos if t & 3 == 3)
    assert all(t & 3 in (2, 3) for t in tos)
    ok, why = _within_4sigma(ce4, n4, p)
    assert ok, why
    # Not-ECT is never marked
    tx4.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x00)
    tos = _send_and_receive(tx4, rx4, "10.77.2.2", 1000, want_tos=True)
    assert len(tos) == 1000 and all(t & 3 == 0 for t in tos)
    # IPv6 ECT(1)
    tx6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, 0x01)
    n6 = 2000
    tcl = _send_and_receive(tx6, rx6, "fd77:2::2", n6, want_tos=True)
    assert len(tcl) == n6
    ce6 = sum(1 for t in tcl if t & 3 == 3)
    ok, why = _within_4sigma(ce6, n6, p)
    assert ok, why
    assert linkctl.counters(net.r, "r1")["marked"] == ce4 + ce6


def _numbered(tx: socket.socket, rx: socket.socket, dst: str, n: int) -> list[int]:
    """Send datagrams 0..n-1; how many copies of each arrived."""
    seen = [0] * n
    rx.setblocking(False)

    def drain() -> int:
        k = 0
        while True:
            try:
                data = rx.recv(2048)
            except BlockingIOError:
                return k
            i = int.from_bytes(data[:4], "big")
            if i < n:
                seen[i] += 1
                k += 1

    for i in range(n):
        tx.sendto(i.to_bytes(4, "big") + b"d" * 60, (dst, PORT))
        if i % 100 == 99:
            drain()
    for _ in range(50):  # stragglers: bounded wait, not an assertion on time
        time.sleep(0.01)
        if not drain():
            break
    return seen


@pytest.mark.parametrize("where", ["forwarded", "local"])
def test_duplicate_30_percent_and_never_twice(net, where):
    """Each packet arrives once or twice (30 %: ±4σ), a duplicate is never duplicated
    again, and the nft counter counts exactly the copies that arrived."""
    from emu.fabric import linkctl

    tx, rx = net.sock(net.a), net.sock(net.b, bind=True)
    _wait_reachable(tx, rx, "10.77.2.2")
    ns, ifn = (net.r, "r1") if where == "forwarded" else (net.a, "a0")
    s = linkctl.apply_direction(ns, ifn, Direction(duplicate=0.3))
    assert s["hook"] == "netdev egress" and s["duplicate"] == 0.3
    n = 5000
    seen = _numbered(tx, rx, "10.77.2.2", n)
    assert set(seen) <= {1, 2}, f"copies per packet: {sorted(set(seen))}"
    extra = seen.count(2)
    ok, why = _within_4sigma(extra, n, 0.3)
    assert ok, why
    c = linkctl.counters(ns, ifn)
    assert 0 <= c["duplicated"] - extra <= 3, (c, extra)  # ± a stray ARP/ND packet
    # always: exactly two copies of every packet (without the mark the copy would be
    # copied again, down to nf_dup's recursion limit: three or more)
    linkctl.apply_direction(ns, ifn, Direction(duplicate=1.0))
    seen = _numbered(tx, rx, "10.77.2.2", 1000)
    assert seen == [2] * 1000, f"copies per packet: {sorted(set(seen))}"
    # with loss first: a dropped packet is not duplicated; the copy meets loss on its own
    linkctl.apply_direction(ns, ifn, Direction(loss=0.5, duplicate=1.0))
    seen = _numbered(tx, rx, "10.77.2.2", 4000)
    c = linkctl.counters(ns, ifn)
    assert set(seen) <= {0, 1, 2}
    # n = 4000, p(arrive k) = 0.5 (dropped) / 0.25 / 0.25; the counters agree with the wire
    ok, why = _within_4sigma(seen.count(0), 4000, 0.5)
    assert ok, why
    assert 0 <= c["dropped"] - (2 * 4000 - sum(seen) - seen.count(0)) <= 3, (c, seen.count(0))


def test_duplicate_rule_text_and_certain_probabilities(net):
    """1 (100 %) is written without numgen (``< 1000000`` is out of nft's range): loss 1
    drops everything rather than failing to apply."""
    from emu.fabric import linkctl

    text = nftrules.nft_ruleset("x0", nftrules.PROB_SCALE, 0, True, dup=nftrules.PROB_SCALE)
    assert "numgen" not in text and 'dup to "x0"' in text
    assert text.index("emu:loss") < text.index("emu:dup")  # a dropped packet is not copied
    assert "0x40000000" in text and "0xbfffffff" in text
    tx, rx = net.sock(net.a), net.sock(net.b, bind=True)
    _wait_reachable(tx, rx, "10.77.2.2")
    linkctl.apply_direction(net.a, "a0", Direction(loss=1.0))
    assert _numbered(tx, rx, "10.77.2.2", 200) == [0] * 200
    with pytest.raises(linkctl.LinkCtlError, match="duplicate must be a probability"):
        linkctl.apply_direction(net.a, "a0", Direction(duplicate=1.5))


def test_link_down_stops_up_restores(net, tmp_path):
    from emu.fabric import linkctl

    tx, rx = net.sock(net.a), net.sock(net.b, bind=True)
    tx6, rx6 = net.sock(net.a, socket.AF_INET6), net.sock(net.b, socket.AF_INET6, bind=True)
    _wait_reachable(tx, rx, "10.77.2.2")
    assert len(_send_and_receive(tx, rx, "10.77.2.2", 20)) == 20
    log = tmp_path / "ev.jsonl"
    kw = {"event_log": log, "state_dir": tmp_path / "state"}
    linkctl.set_link(net.cluster, net.link_rb, False, **kw)
    assert len(_send_and_receive(tx, rx, "10.77.2.2", 50)) == 0
    linkctl.set_link(net.cluster, net.link_rb, True, **kw)
    # b's default routes and IPv6 address were deleted by the kernel on down; restored
    _wait_reachable(tx, rx, "10.77.2.2")
    _wait_reachable(tx6, rx6, "fd77:2::2")
    assert len(_send_and_receive(tx, rx, "10.77.2.2", 50)) == 50
    assert len(_send_and_receive(tx6, rx6, "fd77:2::2", 50)) == 50
    actions = [json.loads(x)["action"] for x in log.read_text().splitlines()]
    assert actions == ["down", "down", "up", "up"]
    assert not any((tmp_path / "state").rglob("*.json"))
    # single interface, no state dir: down stops traffic, up brings the link back
    linkctl.set_link_state(net.a, "a0", False, state_dir=None)
    with pytest.raises(OSError):  # a's routes left with a0
        tx.sendto(b"x", ("10.77.2.2", PORT))
    linkctl.set_link_state(net.a, "a0", True, state_dir=None)


def test_switch_and_plane_failure(net, tmp_path):
    from emu.fabric import linkctl

    tx, rx = net.sock(net.a), net.sock(net.b, bind=True)
    links = [net.link_ar, net.link_rb]
    kw = {"state_dir": tmp_path / "st"}
    assert linkctl.fail_switch(net.cluster, links, "r", **kw) == ["a-r", "r-b"]
    from pyroute2 import IPRoute

    for ns, ifn in ((net.a, "a0"), (net.r, "r0"), (net.r, "r1"), (net.b, "b0")):
        with IPRoute(netns=ns) as ipr:
            assert ipr.get_links(ifname=ifn)[0].get_attr("IFLA_OPERSTATE") == "DOWN"
    assert linkctl.fail_switch(net.cluster, links, "r", up=True, **kw) == ["a-r", "r-b"]
    _wait_reachable(tx, rx, "10.77.2.2")
    assert len(_send_and_receive(tx, rx, "10.77.2.2", 30)) == 30
    assert linkctl.fail_plane(net.cluster, links, 1, **kw) == ["r-b"]
    assert len(_send_and_receive(tx, rx, "10.77.2.2", 30)) == 0
    assert linkctl.fail_plane(net.cluster, links, 1, up=True, **kw) == ["r-b"]
    _wait_reachable(tx, rx, "10.77.2.2")
    assert len(_send_and_receive(tx, rx, "10.77.2.2", 30)) == 30


def test_clear_removes_exactly_ours(net):
    from emu.fabric import linkctl

    # someone else's table and qdisc
    linkctl.run_in_ns(net.r, ["nft", "-f", "-"],
                      input="table inet other {\n chain c {\n"
                            "  type filter hook output priority 0;\n }\n}\n")
    linkctl.run_in_ns(net.r, ["tc", "qdisc", "add", "dev", "r0", "root", "handle", "1:", "tbf",
                              "rate", "1gbit", "burst", "20k", "limit", "100k"])
    d = Direction(rate_bps=50_000_000, loss=0.01, ecn_ce=0.02)
    linkctl.apply_direction(net.r, "r1", d)
    linkctl.apply_direction(net.r, "r1", d)  # idempotent replace
    with pytest.raises(linkctl.LinkCtlError, match="not emu's"):
        linkctl.apply_direction(net.r, "r0", Direction(rate_bps=1_000_000))
    tables = linkctl._nft_tables(net.r)
    assert ("netdev", "emu_lc_r1") in tables and ("inet", "other") in tables
    assert linkctl.clear_direction(net.r, "r1") == {"qdisc_removed": True,
                                                     "nft_table_removed": True}
    assert linkctl._nft_tables(net.r) == [("inet", "other")]
    assert linkctl.counters(net.r, "r1")["qdisc"] == "noqueue 0:"
    assert linkctl.counters(net.r, "r0")["qdisc"] == "tbf 1:"
    # clearing again is a no-op; the foreign qdisc is never touched
    assert linkctl.clear_direction(net.r, "r0") == {"qdisc_removed": False,
                                                     "nft_table_removed": False}
    assert linkctl.counters(net.r, "r0")["qdisc"] == "tbf 1:"


def test_apply_link_and_event(net, tmp_path):
    from emu.fabric import events, linkctl

    topo = Topology(name=net.cluster, source="<test>",
                    nodes={n: Node(n, "switch" if n == "r" else "host") for n in "arb"},
                    links=[net.link_ar, net.link_rb])
    log = tmp_path / "ev.jsonl"
    net.link_rb.a_to_b = Direction(loss=0.5)
    linkctl.apply_link(net.cluster, net.link_rb, event_log=log)
    assert linkctl.counters(net.r, "r1")["nft_table"] == "netdev emu_lc_r1"
    ev = Event(0.0, "impair", "r:b", {"loss": 0.0, "ecn_ce": 0.1, "direction": "a_to_b"})
    assert events.apply_event(topo, ev, event_log=log) == ["r-b"]
    assert net.link_rb.a_to_b == Direction(ecn_ce=0.1)
    with pytest.raises(ValueError, match="unknown setting"):
        events.apply_event(topo, Event(0, "impair", "r-b", {"lossy": 1}), event_log=log)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["action"] for x in lines] == ["impair", "clear", "impair"]
    assert lines[-1]["settings"]["ecn_ce"] == 0.1 and lines[-1]["direction"] == "a_to_b"


# --------------------------------------------------------------------------- schedule (no root)


@pytest.mark.trio
async def test_schedule_autojump(autojump_clock):
    from emu.fabric.events import parse_at, run_schedule

    evs = [Event(parse_at("2s"), "down", "x"), Event(parse_at("500ms"), "impair", "y"),
           Event(2.0, "up", "x"), Event(parse_at("1m"), "up", "z")]
    seen: list[tuple[float, str]] = []
    start = trio.current_time()

    def apply(ev: Event) -> str:
        seen.append((trio.current_time() - start, ev.action))
        return ev.target

    done = await run_schedule(evs, apply, in_thread=False)
    assert seen == [(0.5, "impair"), (2.0, "down"), (2.0, "up"), (60.0, "up")]
    assert [d.result for d in done] == ["y", "x", "x", "z"]

    async def boom(ev: Event) -> None:
        raise RuntimeError("nope")

    done = await run_schedule([Event(1, "down", "q")], boom)
    assert done[0].error == "RuntimeError: nope"
    with pytest.raises(ValueError):
        parse_at("soon")


def test_counters_of_many_ports_read_a_vanished_one_as_its_error(net):
    """``emu status`` reads every port's counters at once (one listing per namespace): a
    port or namespace that is gone is that port's error, the others still read."""
    from emu.fabric import linkctl

    linkctl.apply_direction(net.a, "a0", Direction(loss=0.5, seed=1))
    try:
        got = linkctl.counters_many([(net.a, "a0"), (net.a, "zz9"), ("emu-gone-4f2a", "a0")])
        assert got[(net.a, "a0")]["nft_table"] is not None
        assert "no interface 'zz9'" in str(got[(net.a, "zz9")]["error"])
        assert "does not exist" in str(got[("emu-gone-4f2a", "a0")]["error"])
        with pytest.raises(linkctl.LinkCtlError, match="zz9"):
            linkctl.counters(net.a, "zz9")
    finally:
        linkctl.clear_direction(net.a, "a0")

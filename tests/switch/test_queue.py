# SPDX-License-Identifier: GPL-2.0-only
"""The switch queue model, sans-IO: hand-stepped clock, seeded RNG, no root."""

from __future__ import annotations

import math
import random

import pytest

from emu.switch.config import (
    ClassConfig,
    ConfigError,
    PortConfig,
    SwitchConfig,
    apply_settings,
    parse_size,
)
from emu.switch.queue import DROP_RANDOM, DROP_TAIL, QUEUED, RELEASE, PauseEvent, Pipeline, Pkt

ECT0, NOT_ECT = 2, 0


def pipe(seed: int = 1, **port: object) -> Pipeline:
    kc = port.pop("cls", ClassConfig())
    p = PortConfig(**port, default_class=kc)  # type: ignore[arg-type]
    return Pipeline(SwitchConfig(ports={"p": p}), random.Random(seed))


def pkt(i: int, n: int = 1000, ecn: int = ECT0, dscp: int = 0, indev: object = "in") -> Pkt:
    return Pkt(i, n, dscp, ecn, "p", indev)


def fill(pl: Pipeline, nbytes: int, size: int = 1000) -> None:
    """Queue ``nbytes`` of Not-ECT data at t=0 (never marked)."""
    for i in range(nbytes // size):
        assert pl.arrive(0.0, pkt(-i - 1, size, NOT_ECT)) == QUEUED


# --------------------------------------------------------------------------- ECN


@pytest.mark.parametrize("q", [20_000, 40_000, 60_000])
def test_red_probability_follows_line(q: int) -> None:
    kc = ClassConfig(kmin=10_000, kmax=70_000, pmax=0.5)
    pl = pipe(seed=q, rate=1_000_000, depth=10**9, cls=kc)
    fill(pl, q)
    n = 4000
    marked = sum(pl.arrive(0.0, pkt(i, 1)) == QUEUED and pl.ports["p"].data[0][-1].marked
                 for i in range(n))
    p = kc.pmax * (q - kc.kmin) / (kc.kmax - kc.kmin)
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(marked - n * p) < 4 * sigma, (marked, n * p)
    assert pl.counters()["p"]["marked"] == marked


def test_no_marks_below_kmin_all_marked_above_kmax() -> None:
    kc = ClassConfig(kmin=10_000, kmax=20_000, pmax=0.1)
    pl = pipe(rate=1_000_000, depth=10**9, cls=kc)
    fill(pl, 9_000)
    for i in range(50):
        pl.arrive(0.0, pkt(i, 10))
    assert pl.counters()["p"]["marked"] == 0
    fill(pl, 12_000)          # now ≥ kmax
    for i in range(100, 150):
        pl.arrive(0.0, pkt(i, 10))
        pl.arrive(0.0, pkt(1000 + i, 10, ecn=NOT_ECT))
    q = list(pl.ports["p"].data[0])
    assert all(p.marked for p in q if p.handle in range(100, 150))
    assert not any(p.marked for p in q if p.ecn == NOT_ECT)


def test_ecn_off_per_class() -> None:
    pl = pipe(rate=1_000_000, depth=10**9, cls=ClassConfig(ecn=False, kmin=0, kmax=0))
    for i in range(20):
        pl.arrive(0.0, pkt(i))
    assert pl.counters()["p"]["marked"] == 0


# --------------------------------------------------------------------------- drops


def test_tail_drop_at_depth() -> None:
    pl = pipe(rate=1_000_000, depth=10_000)
    res = [pl.arrive(0.0, pkt(i)) for i in range(12)]
    assert res == [QUEUED] * 10 + [DROP_TAIL] * 2
    c = pl.counters()["p"]
    assert c["dropped_tail"] == 2 and c["max_depth"] == 10_000


def test_random_loss_is_seeded() -> None:
    def run() -> list[str]:
        pl = pipe(seed=7, loss=0.25)
        return [pl.arrive(0.0, pkt(i)) for i in range(2000)]

    a = run()
    assert a == run()
    assert 400 < a.count(DROP_RANDOM) < 600
    assert set(a) == {DROP_RANDOM, RELEASE}


# --------------------------------------------------------------------------- trimming


def test_trimmed_packets_overtake_data() -> None:
    kc = ClassConfig(trim=True, trim_threshold=3000)
    pl = pipe(rate=8_000_000, depth=10**6, cls=kc)      # 1000 B = 1 ms
    for i in range(8):
        assert pl.arrive(0.0, pkt(i), trimmer=lambda p: 64) == QUEUED
    st = pl.ports["p"]
    assert [p.trimmed for p in st.prio] == [True] * 4   # 0..3 fill past 3000 B, 4..7 trimmed
    out: list[Pkt] = []
    t = 0.0
    while (nt := pl.next_timer()) is not None:
        t = nt
        out += pl.advance(t)
    order = [p.handle for p in out]
    assert order == [0, 4, 5, 6, 7, 1, 2, 3]
    assert all(p.length == 64 for p in out if p.trimmed)
    assert pl.counters()["p"]["trimmed"] == 4
    # 1000 B at 8 Mb/s = 1 ms; 4 × 64 B = 4 × 64 µs; then 3 ms
    assert t == pytest.approx(0.001 + 4 * 64e-6 + 0.003)


def test_untrimmable_is_data_and_trim_instead_of_drop() -> None:
    kc = ClassConfig(trim=True)                           # threshold unset: trim at depth
    pl = pipe(rate=1_000_000, depth=3000, cls=kc)
    r = [pl.arrive(0.0, pkt(i), trimmer=lambda p: None if p.handle == 4 else 100)
         for i in range(6)]
    assert r == [QUEUED, QUEUED, QUEUED, QUEUED, DROP_TAIL, QUEUED]
    assert pl.counters()["p"]["trimmed"] == 2


# --------------------------------------------------------------------------- pause


def test_xoff_xon_hysteresis() -> None:
    kc = ClassConfig(lossless=True, xoff=5000, xon=2000, ecn=False)
    pl = pipe(rate=8_000_000, depth=10**6, cls=kc)
    for i in range(5):
        pl.arrive(0.0, pkt(i, indev="a"))
    assert pl.take_pause_events() == []                   # 5000 is not above xoff
    pl.arrive(0.0, pkt(5, indev="b"))
    ev = pl.take_pause_events()
    assert set(ev) == {PauseEvent("a", 0, True), PauseEvent("b", 0, True)}
    pl.arrive(0.0, pkt(6, indev="c"))                     # joins while paused
    assert pl.take_pause_events() == [PauseEvent("c", 0, True)]
    got: list[tuple[float, list[PauseEvent]]] = []
    while (t := pl.next_timer()) is not None:
        pl.advance(t)
        if e := pl.take_pause_events():
            got.append((t, e))
    # 7000 B queued at 1 ms/packet: XON once ≤ 2000 B remain, i.e. after 5 departures
    xon = [(t, e) for t, e in got if not e[0].pause]
    assert len(xon) == 1 and xon[0][0] == pytest.approx(0.005)
    assert {e.indev for e in xon[0][1]} == {"a", "b", "c"}
    c = pl.counters()["p"]
    assert c["xoff"] == 1 and c["xon"] == 1 and c["paused_time"] == pytest.approx(0.005)


def test_pause_refreshed_while_held() -> None:
    cfg = SwitchConfig(ports={"p": PortConfig(rate=8_000, default_class=ClassConfig(
        lossless=True, xoff=1000, xon=0))}, pfc_refresh=0.01)
    pl = Pipeline(cfg, random.Random(1))
    pl.arrive(0.0, pkt(0))
    pl.arrive(0.0, pkt(1))
    assert pl.take_pause_events() == [PauseEvent("in", 0, True)]
    assert pl.next_timer() == pytest.approx(0.01)
    pl.advance(0.01)
    assert pl.take_pause_events() == [PauseEvent("in", 0, True)]


# --------------------------------------------------------------------------- timing


def test_serialization_chains_on_departures() -> None:
    pl = pipe(rate=8_000_000)
    for i in range(3):
        pl.arrive(0.0, pkt(i))
    assert pl.next_timer() == pytest.approx(0.001)
    out = pl.advance(0.0105)                   # late timer: departures still 1 ms apart
    assert [p.departure for p in out] == pytest.approx([0.001, 0.002, 0.003])


def test_delay_and_jitter() -> None:
    pl = pipe(delay=0.01)
    assert pl.arrive(1.0, pkt(0)) == QUEUED
    assert pl.next_timer() == pytest.approx(1.01)
    assert pl.advance(1.0099) == []
    assert [p.handle for p in pl.advance(1.01)] == [0]
    pl = pipe(seed=3, delay=0.01, jitter=0.004)
    for i in range(500):
        pl.arrive(0.0, pkt(i))
    times = []
    while (t := pl.next_timer()) is not None:
        times += [t] * len(pl.advance(t))
    assert len(times) == 500
    assert min(times) >= 0.006 - 1e-12 and max(times) <= 0.014 + 1e-12
    assert sum(times) / 500 == pytest.approx(0.01, abs=0.0005)


def test_flush_returns_everything_held() -> None:
    pl = pipe(rate=8_000, delay=1.0)
    for i in range(4):
        pl.arrive(0.0, pkt(i))
    pl.advance(1.0)                 # first departed, in the delay line
    assert sorted(p.handle for p in pl.flush()) == [0, 1, 2, 3]
    assert pl.next_timer() is None and pl.counters()["p"]["depth"] == 0


# --------------------------------------------------------------------------- config


def test_apply_settings_units_and_errors() -> None:
    p = PortConfig()
    apply_settings(p, {"rate": "10mbit", "depth": "64KiB", "kmin": "20KB", "c3.lossless": "true",
                       "delay": "2ms", "loss": "1%"})
    assert (p.rate, p.depth, p.delay, p.loss) == (10_000_000, 65536, 0.002, 0.01)
    assert p.default_class.kmin == 20_000 and p.klass(3).lossless and p.klass(3).kmin == 20_000
    with pytest.raises(ConfigError, match="kmax"):
        apply_settings(p, {"kmin": "1MB"})
    assert p.default_class.kmin == 20_000                      # unchanged on error
    with pytest.raises(ConfigError, match="unknown setting 'bogus'"):
        apply_settings(p, {"bogus": 1})
    with pytest.raises(ConfigError, match="depth"):
        apply_settings(p, {"depth": "lots"})
    assert parse_size("1.5MiB") == 1572864


def test_config_round_trip() -> None:
    cfg = SwitchConfig(ports={"h1": apply_settings(PortConfig(), {"rate": "1gbit",
                                                                  "c5.trim": True})},
                       dscp_map={26: 3}, seed=4)
    again = SwitchConfig.from_dict(cfg.to_dict())
    assert again.to_dict() == cfg.to_dict()
    assert again.klass_of(26) == 3 and again.port("h1").klass(5).trim
    with pytest.raises(ConfigError, match="match"):
        SwitchConfig.from_dict({"match": ["tcp:80"]})

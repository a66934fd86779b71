# SPDX-License-Identifier: GPL-2.0-only
"""RCCC (emu.cc.rccc): sender sends only against credit; the receiver shares its line
rate fairly (max-min) among requesting senders and never grants faster than it."""

from __future__ import annotations

import pytest

from emu import cc
from emu.cc.rccc import CREDIT_MAX, Rccc, RcccReceiver

LINE = 10e9  # 1.25 GB/s
BPS = LINE / 8
Q = 4096
US = 1e-6


def test_registry_and_bad_parameters():
    assert isinstance(cc.create("rccc", LINE), Rccc)
    with pytest.raises(ValueError, match="rccc"):
        cc.create("rccc", LINE, bogus=1)
    with pytest.raises(ValueError):
        Rccc(LINE, initial_credit=-1)
    with pytest.raises(ValueError):
        RcccReceiver(LINE, quantum=0)
    with pytest.raises(ValueError):
        RcccReceiver(0)


def test_sender_spends_only_granted_credit():
    s = Rccc(LINE)
    assert s.send_allowance(0) == 0 and s.cwnd is None
    assert s.credit_target(100_000) == 100_000
    s.on_credit(3 * Q, 0.0)
    assert s.send_allowance(10**6) == 3 * Q  # in flight does not matter, credit does
    assert s.credit_target(100_000) == 100_000 - 3 * Q
    s.on_sent(2 * Q, 0.0)
    assert s.send_allowance(0) == Q
    s.on_sent(Q, 0.0)
    assert s.send_allowance(0) == 0 and s.counts["blocked"] == 2
    assert s.credit_target(1 << 30) == CREDIT_MAX  # the field is 24 bits
    s.on_credit(-5, 0.0)
    s.on_credit(1 << 24, 0.0)
    s.on_credit("x", 0.0)  # type: ignore[arg-type]
    assert s.credit == 0 and s.counts["bad_credit"] == 3
    assert Rccc(LINE, initial_credit=Q).send_allowance(0) == Q


def test_receiver_round_robin_is_fair_among_equal_senders():
    r = RcccReceiver(LINE, 0.0, quantum=Q, burst=Q)
    for s in "abcd":
        r.on_request(s, 10**6, 0.0)
    got = dict.fromkeys("abcd", 0)
    t = 0.0
    while t < 2e-3:
        for s, n in r.grant(t):
            got[s] += n
        t = r.get_timer()
        assert t is not None
    assert max(got.values()) - min(got.values()) <= Q  # equal to within one quantum
    total = sum(got.values())
    assert total <= Q + BPS * 2e-3 + Q  # never faster than the line rate (+ burst)
    assert total >= BPS * 2e-3 * 0.99  # and does not leave it idle


def test_receiver_is_max_min_fair_with_a_small_sender():
    r = RcccReceiver(LINE, 0.0, quantum=Q, burst=Q)
    r.on_request("small", 3 * Q, 0.0)
    r.on_request("big1", 10**6, 0.0)
    r.on_request("big2", 10**6, 0.0)
    got = {"small": 0, "big1": 0, "big2": 0}
    t = 0.0
    for _ in range(300):
        for s, n in r.grant(t):
            got[s] += n
        t = r.get_timer()
    assert got["small"] == 3 * Q  # it got everything it asked for, no more
    assert abs(got["big1"] - got["big2"]) <= Q  # the rest split evenly
    assert r.want.get("small") is None


def test_receiver_never_overruns_its_rate_at_any_instant():
    r = RcccReceiver(LINE, 0.0, quantum=Q)  # burst = one BDP of 12 µs = 15 000 B
    for s in range(7):
        r.on_request(s, 10**6, 0.0)
    granted = 0
    t = 0.0
    for k in range(2000):
        t += 0.37 * US * (1 + k % 5)  # irregular polling
        granted += sum(n for _, n in r.grant(t))
        assert granted <= r.burst + BPS * t + 1e-6


def test_request_updates_withdrawals_forget_and_bad_requests():
    r = RcccReceiver(LINE, 0.0, quantum=Q, burst=10 * Q)
    r.on_request("a", 2 * Q, 0.0)
    r.on_request("a", Q, 0.0)  # the latest request replaces the earlier one
    assert r.grant(0.0) == [("a", Q)]
    r.on_request("b", 5 * Q, 0.0)
    r.on_request("b", 0, 0.0)  # withdrawn
    r.on_request("c", 5 * Q, 0.0)
    r.forget("c")
    assert r.grant(0.0) == [] and r.get_timer() is None
    r.on_request("d", -1, 0.0)
    r.on_request("d", 1 << 24, 0.0)
    assert r.counts["bad_requests"] == 2 and r.grant(0.0) == []


def test_senders_and_receiver_together_keep_the_receiver_link_busy_not_flooded():
    """N senders that send whenever they hold credit, a receiver link of LINE draining
    what arrives: the link stays busy and its backlog stays within the bucket."""
    r = RcccReceiver(LINE, 0.0, quantum=Q)
    senders = {i: Rccc(LINE) for i in range(5)}
    backlog = dict.fromkeys(senders, 2_000_000)
    for i, s in senders.items():
        r.on_request(i, s.credit_target(backlog[i]), 0.0)
    link_queue = 0.0
    delivered = dict.fromkeys(senders, 0)
    t, dt, peak = 0.0, 1 * US, 0.0
    while t < 1e-3:
        t += dt
        link_queue = max(0.0, link_queue - BPS * dt)  # the receiver's link drains
        for i, n in r.grant(t):
            senders[i].on_credit(n, t)
        for i, s in senders.items():
            n = min(s.send_allowance(0), backlog[i])
            if n:
                s.on_sent(n, t)
                backlog[i] -= n
                delivered[i] += n
                link_queue += n
        peak = max(peak, link_queue)
    total = sum(delivered.values())
    assert total >= 0.98 * BPS * 1e-3
    assert peak <= r.burst + len(senders) * Q
    assert max(delivered.values()) - min(delivered.values()) <= Q


def test_take_answers_single_requests_within_the_rate():
    r = RcccReceiver(LINE, 0.0, quantum=Q, burst=2 * Q)
    assert r.take("a", 0.0) == Q and r.take("b", 0.0) == Q
    assert r.take("a", 0.0) == 0  # bucket empty: ask again later
    assert r.take("b", Q / BPS / 2, want=100) == 100  # a small want is served exactly
    t, total = Q / BPS / 2, 2 * Q + 100
    for k in range(1000):
        t += 1 * US
        total += r.take(k % 3, t)
        assert total <= 2 * Q + BPS * t + 1e-6

# SPDX-License-Identifier: GPL-2.0-only
"""TimerSet: named deadlines behind one get_timer()."""

import random

from emu.core.timers import TimerSet


def test_timer_set():
    ts = TimerSet()
    assert ts.earliest() is None and ts.expired(1e9) == []
    ts.set("rto", 5.0)
    ts.set("ack", 2.0)
    ts.set("cnp", 3.0)
    assert ts.earliest() == 2.0 and len(ts) == 3 and "ack" in ts
    ts.set("ack", 6.0)  # moving the earliest later
    assert ts.earliest() == 3.0
    ts.set_if_earlier("ack", 7.0)
    assert ts.get("ack") == 6.0
    ts.set_if_earlier("ack", 1.0)
    assert ts.earliest() == 1.0
    assert ts.cancel("ack") and not ts.cancel("ack")
    assert ts.earliest() == 3.0
    assert [n for n, _ in ts] == ["cnp", "rto"]
    assert ts.expired(2.9) == []
    assert ts.expired(5.0) == ["cnp", "rto"]  # earliest first, both disarmed
    assert ts.earliest() is None and len(ts) == 0
    ts.set("a", 1.0)
    assert ts.earliest() == 1.0
    ts.clear()
    assert ts.earliest() is None


def test_timer_set_matches_min_under_random_ops():
    rng = random.Random(5)
    ts, model = TimerSet(), {}
    for _ in range(5000):
        name = rng.choice("abcdef")
        op = rng.random()
        if op < 0.5:
            d = rng.uniform(0, 100)
            ts.set(name, d)
            model[name] = d
        elif op < 0.7:
            assert ts.cancel(name) == (model.pop(name, None) is not None)
        elif op < 0.8:
            now = rng.uniform(0, 100)
            due = sorted((d, n) for n, d in model.items() if d <= now)
            assert ts.expired(now) == [n for _, n in due]
            for _, n in due:
                del model[n]
        assert ts.earliest() == (min(model.values()) if model else None)

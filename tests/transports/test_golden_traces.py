# SPDX-License-Identifier: GPL-2.0-only
"""The engines still emit the recorded datagrams, byte for byte and in order (issue #15).

Each scenario of :mod:`golden_trace` is replayed with its seed and compared
with ``tests/golden/<scenario>.bin.xz``; a mismatch names the first datagram
that differs (index, side, time) so a refactoring that changed the wire is
found at its first symptom.
"""

from __future__ import annotations

import pytest
from golden_trace import SCENARIOS, decode, path


def _where(i: int, rec: tuple) -> str:
    t, side, ent, dscp, ecn, port, data = rec
    return (f"#{i} from {'ab'[side]} at {t} ps, sport {ent} dport {port} DSCP {dscp} "
            f"ECN {ecn}, {len(data)} B: {data[:24].hex()}…")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_emits_the_recorded_datagrams(name):
    want = decode(path(name).read_bytes())
    got = SCENARIOS[name]()
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            pytest.fail(f"{name}: first difference at datagram {i}\n  got  {_where(i, g)}\n"
                        f"  want {_where(i, w)}")
    assert len(got) == len(want), f"{name}: {len(got)} datagrams, recorded {len(want)}"


@pytest.mark.parametrize(("name", "in_runs"), [("uet-daemon", 4), ("uet-bulk", 100)])
def test_uet_receive_batches_emit_the_recorded_datagrams(name, in_runs, monkeypatch):
    """The daemons' way in — each instant's arrivals in one ``receive_batch``, where the
    target places runs of a WRITE at once (``Target.write_run``) — leaves the datagrams
    recorded with one ``receive_datagram`` per arrival, and really took runs."""
    want = decode(path(name).read_bytes())
    runs: list[int] = []
    from emu.transports.uet.target import Target
    real = Target.write_run

    def spy(self, *a):
        k = real(self, *a)
        runs.append(k)
        return k

    monkeypatch.setattr(Target, "write_run", spy)
    got = SCENARIOS[name](batch=True)  # type: ignore[call-arg]
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            pytest.fail(f"{name}: first difference at datagram {i}\n  got  {_where(i, g)}\n"
                        f"  want {_where(i, w)}")
    assert len(got) == len(want)
    assert sum(k for k in runs if k > 1) >= in_runs, runs  # packets placed in runs


def test_storage_round_trips_and_a_changed_byte_is_seen():
    """The comparison can fail: one flipped bit in one datagram is a difference."""
    from golden_trace import encode
    recs = SCENARIOS["uet-plain"]()
    assert decode(encode(recs)) == recs
    *head, data = recs[len(recs) // 2]
    bad = list(recs)
    bad[len(recs) // 2] = (*head, data[:-1] + bytes([data[-1] ^ 1]))
    assert decode(encode(bad)) != recs

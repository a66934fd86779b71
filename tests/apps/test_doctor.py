# SPDX-License-Identifier: GPL-2.0-only
"""``emu doctor --measure``'s kernel-hop figure, without clusters: how its windows are
paired and summarised."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from emu.apps import doctor


def test_the_kernel_hop_is_the_median_of_paired_windows(monkeypatch):
    """One window a burst of host load inflated (the pair's, in round 2) moves neither
    the median nor the proposal; the larger transport's figure is kept."""
    busy = {  # (cluster, transport) → the machine's CPU seconds per packet, round by round
        ("q", "roce"): [100e-6, 400e-6, 104e-6],
        ("k", "roce"): [120e-6, 118e-6, 125e-6],
        ("q", "uet"): [200e-6, 210e-6, 190e-6],
        ("k", "uet"): [240e-6, 251e-6, 229e-6],
    }
    order = []

    def window(cl, transport, dst, seconds):
        order.append((cl, transport))
        return busy[cl, transport].pop(0) * 1000, 1000

    monkeypatch.setattr(doctor, "_busy_window", window)
    lines = []
    hop = doctor._kernel_hop(nullcontext("q"), nullcontext("k"), 1.0, lines.append)
    # roce: 20, -282, 21 → 20; uet: 40, 41, 39 → 40 µs: the larger transport's median
    assert hop == pytest.approx(40e-6)
    # alternating: each round a pair window, then the leaf-spine's, per transport
    assert order[:4] == [("q", "roce"), ("k", "roce"), ("q", "uet"), ("k", "uet")]
    assert len(order) == 4 * doctor.KERNEL_PROBE_ROUNDS
    assert len(lines) == 2 * doctor.KERNEL_PROBE_ROUNDS


def test_a_kernel_hop_cheaper_than_the_cable_is_no_negative_cost(monkeypatch):
    monkeypatch.setattr(doctor, "_busy_window",
                        lambda cl, t, dst, s: (0.1 if cl == "q" else 0.09, 1000))
    assert doctor._kernel_hop(nullcontext("q"), nullcontext("k"), 1.0, lambda _m: None) == 0.0

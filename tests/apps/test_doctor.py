# SPDX-License-Identifier: GPL-2.0-only
"""``emu doctor`` without clusters: how ``--measure``'s kernel-hop windows are paired and
summarised, and the rates it proposes for the shipped topologies."""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext

import pytest

from emu.apps import doctor
from emu.topology.units import format_rate


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


def test_without_a_topology_doctor_proposes_a_rate_for_each_shipped_one(capsys):
    """What a user asks first — which rates are credible here? — answered for the pair and
    both switch datapaths of the leaf-spine, each the model's ceiling rounded down and
    with the --set that uses it; slower costs propose lower rates."""
    import argparse

    from emu.credible import capacity

    fast = capacity.REFERENCE
    slow = dataclasses.replace(fast, nic_tx=fast.nic_tx * 4, nic_rx=fast.nic_rx * 4,
                               switch=fast.switch * 4, kernel_hop=fast.kernel_hop * 4)
    props = doctor.proposals(fast)
    assert [p["topology"] for p in props] == ["namespaces/pair.toml",
                                              "namespaces/leaf-spine.toml",
                                              "namespaces/leaf-spine.toml"]
    for p, q in zip(props, doctor.proposals(slow), strict=True):
        assert p["proposed"] == capacity.nice_floor(p["max_rate"]) <= p["max_rate"]
        assert q["proposed"] < p["proposed"]
    assert props[0]["use"].endswith(
        "--set nic.line_rate=" + format_rate(int(props[0]["proposed"])))
    assert "--set switch.datapath=user" in props[2]["use"]
    assert props[2]["proposed"] < props[1]["proposed"]  # a Python switch hop costs more

    doctor.main(argparse.Namespace(measure=False, topology=None, set=[], json=False,
                                   seconds=2.0))
    out = capsys.readouterr().out
    assert "proposed per-port rates" in out and out.count("emu up namespaces/") == 3


def test_measure_warns_when_other_clusters_share_the_machine(monkeypatch, capsys):
    """Other clusters' daemons load the CPUs that --measure measures: doctor says so
    before it starts, and records them beside the costs."""
    import argparse

    from emu.credible import capacity
    from emu.fabric import state

    saved = {}
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 0)
    monkeypatch.setattr(state, "clusters", lambda: ["lab1", "lab2"])
    monkeypatch.setattr(doctor, "measure", lambda seconds, say: capacity.REFERENCE)
    monkeypatch.setattr(capacity, "save", lambda c, extra: saved.update(extra))
    monkeypatch.setattr(capacity, "load", lambda: capacity.REFERENCE)
    doctor.main(argparse.Namespace(measure=True, topology=None, set=[], json=False,
                                   seconds=2.0))
    out = capsys.readouterr().out
    assert "warning: 2 other cluster(s) up (lab1, lab2)" in out
    assert saved["other_clusters"] == ["lab1", "lab2"]

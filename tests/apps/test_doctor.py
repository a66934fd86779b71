# SPDX-License-Identifier: GPL-2.0-only
"""``emu doctor`` without clusters: how ``--measure``'s kernel-hop windows are paired and
summarised, and the rates it proposes for the shipped topologies."""

from __future__ import annotations

import dataclasses
import os
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


def test_without_a_topology_doctor_proposes_a_scale_and_a_rate_for_each_shipped_one(capsys):
    """What a user asks first — how slow must this fabric run here, or which rates are
    credible in real time? — answered for every shipped topology and both switch
    datapaths of the leaf-spine: the auto time scale (slower costs need a larger one),
    and each real-time rate the model's ceiling rounded down with the --set that uses
    it (slower costs propose lower rates)."""
    import argparse

    from emu.credible import capacity

    fast = capacity.REFERENCE
    slow = dataclasses.replace(fast, nic_tx=fast.nic_tx * 4, nic_rx=fast.nic_rx * 4,
                               switch=fast.switch * 4, kernel_hop=fast.kernel_hop * 4)
    props = doctor.proposals(fast)
    assert [p["topology"] for p in props] == [f"namespaces/{f}" for f in (
        "pair.toml", "leaf-spine.toml", "leaf-spine.toml", "leaf-spine.toml",
        "rail-optimized.toml", "multi-plane.toml", "two-sites.toml")]
    for p, q in zip(props, doctor.proposals(slow), strict=True):
        assert p["proposed"] == capacity.nice_floor(p["max_rate"]) <= p["max_rate"]
        assert q["proposed"] < p["proposed"]
        assert p["scale"] > 1 and p["why"].startswith("auto: ") and q["scale"] >= p["scale"]
    assert props[0]["real_time"].endswith(
        "--set time.scale=1 --set link.rate=" + format_rate(int(props[0]["proposed"])))
    kernel, user = props[2], props[3]
    assert "--set switch.datapath=user" in user["use"]
    assert user["proposed"] < kernel["proposed"]  # a Python switch hop costs more
    assert user["scale"] > kernel["scale"]

    doctor.main(argparse.Namespace(measure=False, topology=None, set=[], json=False,
                                   seconds=2.0))
    out = capsys.readouterr().out
    assert "time scale per shipped fabric" in out and "or in real time" in out
    assert out.count("emu up namespaces/") == 2 * len(doctor.SHIPPED) == 2 * len(props)
    for name in ("rail-optimized", "multi-plane"):
        assert f"emu up namespaces/{name}.toml --set time.scale=1 --set link.rate=" in out


def test_every_shipped_topology_has_a_row_whose_knob_carries_its_rate():
    """A file added to namespaces/ without a row in doctor's table fails here; and each
    row's --set gives every host port of its topology the rate proposed (the knob is the
    one that carries it there, not a setting the topology ignores)."""
    from emu.credible.rates import host_ports
    from emu.topology.loader import load

    shipped = sorted(f for f in os.listdir(doctor.NAMESPACES) if f.endswith(".toml"))
    assert shipped and sorted({f for _, f, _, _ in doctor.SHIPPED}) == shipped
    for _label, name, sets, knob in doctor.SHIPPED:
        topo = load(os.path.join(doctor.NAMESPACES, name), [*sets, f"{knob}=123mbit"])
        ports = host_ports(topo, 1e9)
        assert ports and {p.rate for p in ports} == {123e6}, (name, knob)


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

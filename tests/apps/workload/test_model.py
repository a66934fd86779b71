# SPDX-License-Identifier: GPL-2.0-only
"""Workload generators: who sends what to whom, and in which step."""

from __future__ import annotations

import pytest

from emu.apps.workload import model

HOSTS = [f"h{i}" for i in range(1, 9)]


def test_incast_sends_n_flows_into_the_last_host_by_default():
    w = model.make("incast", HOSTS, size=1000, n=3)
    assert [(f.src, f.dst, f.size) for f in w.flows] == [("h1", "h8", 1000), ("h2", "h8", 1000),
                                                          ("h3", "h8", 1000)]
    assert w.senders() == 3 and not w.collective and w.total_bytes() == 3000


def test_incast_refuses_more_senders_than_hosts_and_an_unknown_receiver():
    with pytest.raises(ValueError, match="at least 8 hosts"):
        model.make("incast", HOSTS, size=1, n=8)
    with pytest.raises(ValueError, match="not a host"):
        model.make("incast", HOSTS, size=1, n=2, dst="h9")


@pytest.mark.parametrize("seed", range(10))
def test_permutation_is_a_derangement_and_the_same_for_a_seed(seed):
    a = model.make("permutation", HOSTS, size=1, seed=seed)
    b = model.make("permutation", HOSTS, size=1, seed=seed)
    assert a.flows == b.flows
    assert sorted(f.src for f in a.flows) == sorted(HOSTS) == sorted(f.dst for f in a.flows)
    assert all(f.src != f.dst for f in a.flows)


def test_a_shift_permutation_sends_every_host_across():
    w = model.make("permutation", HOSTS, size=1, shift=4)
    assert [(f.src, f.dst) for f in w.flows][:2] == [("h1", "h5"), ("h2", "h6")]
    assert [(f.src, f.dst) for f in w.flows][-1] == ("h8", "h4")
    with pytest.raises(ValueError, match="to itself"):
        model.make("permutation", HOSTS, size=1, shift=8)


def test_permutations_differ_between_seeds():
    assert len({model.make("permutation", HOSTS, size=1, seed=s).flows
                for s in range(10)}) > 5


def test_ring_allreduce_is_2_n_minus_1_steps_of_a_chunk_to_the_next_host():
    w = model.make("allreduce", HOSTS[:4], size=4096)
    assert w.collective and w.steps == 6
    for k in range(6):
        step = w.in_step(k)
        assert [(f.src, f.dst, f.size) for f in step] == [
            ("h1", "h2", 1024), ("h2", "h3", 1024), ("h3", "h4", 1024), ("h4", "h1", 1024)]
    assert w.senders() == 4
    # what a ring all-reduce moves: 2 (N - 1) / N of the buffer per host
    assert w.total_bytes() == 4 * 2 * 3 * 1024


def test_alltoall_collective_reaches_every_other_host_once_per_sender():
    w = model.make("alltoall-collective", HOSTS[:4], size=4000)
    assert w.steps == 3
    for h in HOSTS[:4]:
        assert sorted(f.dst for f in w.flows if f.src == h) == sorted(set(HOSTS[:4]) - {h})


def test_all_to_all_is_every_ordered_pair_at_once():
    w = model.make("all-to-all", HOSTS[:3], size=10)
    assert len(w.flows) == 6 and not w.collective


def test_participants_take_the_first_hosts():
    w = model.make("allreduce", HOSTS, size=800, participants=2)
    assert {f.src for f in w.flows} == {"h1", "h2"}


def test_flows_kind_checks_its_hosts():
    with pytest.raises(ValueError, match="not a host"):
        model.make("flows", HOSTS, size=1, flows=[model.Flow("h1", "x9", 5)])
    with pytest.raises(ValueError, match="itself"):
        model.make("flows", HOSTS, size=1, flows=[model.Flow("h1", "h1", 5)])
    with pytest.raises(ValueError, match="unknown workload kind"):
        model.make("broadcast", HOSTS, size=1)

# SPDX-License-Identifier: GPL-2.0-only
"""``[time] scale = "auto"`` (:mod:`emu.plan.scale`): the smallest scale at which the
machine keeps up with the fabric's senders and emu's own round trip is within the stated
share of the fabric's; the shipped fabrics in fabric units; ``[time]``/``[latency]``
errors. No root, no namespaces: costs are fixed (the reference VM's)."""

from __future__ import annotations

from pathlib import Path

import pytest

import emu.cluster  # noqa: F401  (registers the [nic]/[switch] checkers)
from emu import plan as P
from emu.credible import capacity, rates
from emu.plan import scale
from emu.topology.loader import load, loads
from emu.topology.model import TopologyError

NS = Path(__file__).resolve().parents[2] / "namespaces"
COSTS = capacity.REFERENCE


def _rules_hold(topo, s: float) -> tuple[bool, bool]:
    """(keeps up, emu's round trip within the share) at scale ``s``."""
    sw = rates.switching(topo)
    path = rates.longest_path(topo)
    c = scale.choose(topo, COSTS, sw, path)
    assert c is not None
    hops = capacity.switches_on_path(topo, "user", sw, path)
    khops = capacity.switches_on_path(topo, "kernel", sw, path)
    keeps = c.rate / s <= capacity.max_rate(
        COSTS, hops, capacity.mtu_of(topo), khops, flows=c.senders,
        hosts_per_daemon=capacity.hosts_per_daemon(topo, COSTS)) * (1 + 1e-9)
    own = c.emu_rtt / s <= c.overhead * c.base_rtt * (1 + 1e-9)
    return keeps, own


@pytest.mark.parametrize("name", sorted(p.name for p in NS.glob("*.toml")))
def test_auto_is_the_smallest_two_digit_scale_at_which_both_rules_hold(name):
    topo = load(NS / name)
    plan = P.build(topo, COSTS)
    s = plan.time.scale
    assert plan.time.why.startswith("auto: ") and s > 1 and plan.time.epoch > 0
    assert _rules_hold(topo, s) == (True, True)
    # one step of two significant digits lower, a rule fails
    lower = s - 10 ** (len(str(int(s))) - 2)
    assert not all(_rules_hold(topo, lower))
    # and the NICs run at the wall rate of the fabric's 400 Gb/s
    assert {q.rate for n in plan.nics.values() for q in n.ports} == {400e9}
    assert {q.wall_rate for n in plan.nics.values() for q in n.ports} == {400e9 / s}


def test_the_pair_fabric_and_what_its_scale_weighs():
    """The pair as shipped: 400 Gb/s, 4 KiB MTU, a 3 m cable, 0.5 us per NIC."""
    topo = load(NS / "pair.toml")
    c = scale.choose(topo, COSTS, rates.switching(topo), rates.longest_path(topo))
    assert c is not None and c.rate == 400e9 and c.senders == 2 and c.overhead == 0.05
    # 4 KiB frame + ACK at 400 Gb/s, the cable both ways, each NIC there and back
    wire = (4200 + 14 + rates.ACK_FRAME) * 8 / 400e9 + 2 * 15e-9 + 4 * 500e-9
    assert c.base_rtt == pytest.approx(wire)
    assert c.emu_rtt == COSTS.nic_turnaround
    assert c.scale == scale.nice_ceil(max(c.keep_up, c.own_rtt))


def test_senders_and_overhead_move_the_scale_their_way():
    # the pair: emu's own round trip decides (its 2.1 us base round trip), so a looser
    # overhead lowers the scale (on the leaf-spine keeping up decides, even for one sender)
    base = P.build(load(NS / "pair.toml", ["time.senders=1"]), COSTS).time.scale
    looser = P.build(load(NS / "pair.toml", ["time.overhead=20%", "time.senders=1"]),
                     COSTS).time.scale
    assert looser < base
    # with emu's round trip allowed to dominate, keeping up decides, and fewer senders
    # need less
    few = P.build(load(NS / "leaf-spine.toml", ["time.overhead=99%", "time.senders=1"]),
                  COSTS).time.scale
    many = P.build(load(NS / "leaf-spine.toml", ["time.overhead=99%"]), COSTS).time.scale
    assert few < many


def test_a_number_is_taken_as_given_and_a_fabric_without_rates_runs_in_real_time():
    assert P.build(load(NS / "pair.toml", ["time.scale=250"]), COSTS).time.scale == 250
    one = P.build(load(NS / "pair.toml", ["time.scale=1"]), COSTS).time
    assert one.scale == 1 and one.epoch == 0
    bare = loads('[topology]\nkind = "pair"\n[defaults.link]\nmtu = 9000\n')
    t = P.build(bare, COSTS).time
    assert t.scale == 1 and "no fabric rates written" in t.why


def test_the_plan_keeps_both_floors_at_any_scale_so_a_run_below_them_can_be_flagged():
    """Rules (a) and (b)'s minimum scales are in the plan whether the scale is auto or a
    number; a fabric without rates has none."""
    topo = load(NS / "pair.toml")
    c = scale.choose(topo, COSTS, rates.switching(topo), rates.longest_path(topo))
    assert c is not None
    for sets in ([], ["time.scale=1775"], ["time.scale=1"]):
        t = P.build(load(NS / "pair.toml", sets), COSTS).time
        assert (t.keep_up_floor, t.latency_floor) == (c.keep_up, c.own_rtt), sets
    bare = loads('[topology]\nkind = "pair"\n[defaults.link]\nmtu = 9000\n')
    t = P.build(bare, COSTS).time
    assert (t.keep_up_floor, t.latency_floor) == (0.0, 0.0)


def test_nice_ceil_rounds_up_to_two_significant_digits():
    assert [scale.nice_ceil(x) for x in (0.3, 1, 1.04, 7.09, 519, 7090.3, 12345)] == \
        [1, 1, 1.1, 7.1, 520, 7100, 13000]


@pytest.mark.parametrize("sets, key", [
    (["time.scale=fast"], "time.scale"), (["time.scale=0.5"], "time.scale"),
    (["time.senders=0"], "time.senders"), (["time.overhead=0%"], "time.overhead"),
    (["time.overhead=150%"], "time.overhead"), (["time.bogus=1"], "time.bogus"),
    (["latency.nic=soon"], "latency.nic"), (["latency.cable=1ns"], "latency.cable"),
])
def test_bad_time_and_latency_settings_are_one_line_naming_the_key(sets, key):
    with pytest.raises(TopologyError) as e:
        load(NS / "pair.toml", sets)
    assert key in str(e.value) and "\n" not in str(e.value)


def test_path_delays_give_each_peer_its_paths_propagation_switch_and_nic_latency():
    plan = P.build(load(NS / "leaf-spine.toml"), COSTS)
    args = " ".join(plan.nics["h1"].args)
    # h3, h4 (the other leaf): 2 x 15 ns cables, 2 x 150 ns fibres, 3 switches, 2 NICs
    far = 2 * 15e-9 + 2 * 150e-9 + 3 * 600e-9 + 2 * 500e-9
    near = 2 * 15e-9 + 600e-9 + 2 * 500e-9  # h2, under the same leaf
    assert f"--path-delay *={far:.6g}" in args
    assert f"--path-delay 10.0.1.12={near:.6g}" in args
    assert f"--path-delay fd00:0:1::12={near:.6g}" in args


def test_the_transmit_lead_is_a_fabric_fifo_between_a_wall_floor_and_the_tbfs_queue():
    """Dilated, a NIC's transmit lead is the same FIFO in fabric time at every scale (so
    results at auto and twice it agree), never below the wall time the daemon's stalls
    need nor beyond what the kernel tbf's queue holds."""
    from emu.plan.build import TX_FIFO, TX_LEAD, TX_LEAD_MAX, tx_lead

    assert tx_lead(P.TimePlan()) == TX_LEAD
    assert tx_lead(P.TimePlan(scale=7100, epoch=1.0)) == pytest.approx(7100 * TX_FIFO)
    assert tx_lead(P.TimePlan(scale=1e5, epoch=1.0)) == TX_LEAD_MAX
    plan = P.build(load(NS / "pair.toml"), COSTS)
    assert f"--tx-lead {plan.time.scale * TX_FIFO:g}" in " ".join(plan.nics["h1"].args)

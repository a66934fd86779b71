# SPDX-License-Identifier: GPL-2.0-only
"""``[time] scale = "auto"``: the smallest time scale at which this machine can run a fabric.

Why a rule and not a number (DESIGN.md, Fabric time): the fabric is written as it is
(400 Gb/s ports, nanosecond cables), and whether this machine can emulate it depends
on its costs (``emu doctor``) and on the fabric. Dilating by ``scale`` divides the
wall rate every daemon must keep by ``scale`` and shrinks emu's own per-packet delays,
in fabric time, by the same factor. The chosen scale is the smallest "nice" number
(two significant digits, rounded up) at which both hold:

(a) **the machine keeps up**: ``senders`` flows (``[time] senders``; default every host
    port), each at its port's line rate over the fabric's longest path, fit the
    capacity model (:func:`emu.credible.capacity.max_rate`: each daemon under its share
    of a core, all of them under the machine's share);
(b) **emu stays out of the way**: emu's own round trip (two NIC daemons, each user-space
    switch daemon there and back: ``emu doctor``'s turnarounds) is at most ``overhead``
    (``[time] overhead``, default 5 %) of the fabric's base round trip in fabric time
    (:func:`emu.credible.rates.base_rtt` without emu's turnaround: serialization,
    propagation, and the NIC and switch latencies of ``[latency]``).

A fabric with no rates of its own (no link, switch or ``[nic] line_rate`` rate: the
host ports take "the rate this machine sustains") runs in real time, as emu always did:
there is nothing to dilate towards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from emu.credible import capacity, rates
from emu.fabricclock import wall
from emu.plan.model import TimePlan
from emu.topology.model import Topology

#: the largest share of the fabric's base round trip emu's own round trip may add, unless
#: ``[time] overhead`` says otherwise (issue #34: a stated fraction, 5 %)
OVERHEAD = 0.05


@dataclass(frozen=True)
class Choice:
    """What "auto" weighed: the scale each rule needs and the one chosen."""

    scale: float
    keep_up: float  # rule (a)'s minimum scale
    own_rtt: float  # rule (b)'s minimum scale
    senders: int
    rate: float  # the fastest host port, fabric bits/s
    base_rtt: float  # the fabric's own base round trip, fabric seconds
    emu_rtt: float  # emu's own round trip, wall seconds
    overhead: float

    def why(self) -> str:
        """One line for ``emu up``, ``emu status`` and the plan."""
        return (f"auto: {self.senders} sender(s) at {capacity.show_rate(self.rate)} need "
                f">= {self.keep_up:.3g} to keep up; emu's own round trip "
                f"({self.emu_rtt * 1e6:.0f} us wall) within {self.overhead:.0%} of the "
                f"fabric's base round trip ({self.base_rtt * 1e6:.3g} us) needs "
                f">= {self.own_rtt:.3g}; so {self.scale:g}")


def nice_ceil(x: float) -> float:
    """``x`` rounded up to two significant digits (at least 1): 7090 → 7100. Readable,
    and never more than 10 % above the smallest scale that holds."""
    if x <= 1:
        return 1.0
    k = math.floor(math.log10(x)) - 1
    step = 10.0 ** k
    return float(math.ceil(x / step * (1 - 1e-12)) * step) if k > 0 else float(
        math.ceil(x * 10 ** -k * (1 - 1e-12)) / 10 ** -k)


def choose(topology: Topology, costs: capacity.Costs, switching: rates.Switching,
           path: list[tuple[str, str]]) -> Choice | None:
    """The auto scale of ``topology`` on a machine with ``costs`` (wall), or None when the
    fabric has no rates of its own (real time: see the module docstring)."""
    ports = rates.host_ports(topology, 0.0, switching)
    if not ports or any(p.source == "default" for p in ports):
        return None
    rate = max(p.rate for p in ports)
    senders = int(topology.time.get("senders", len(ports)))  # type: ignore[call-overload]
    overhead = float(topology.time.get("overhead", OVERHEAD))  # type: ignore[arg-type]
    mtu = capacity.mtu_of(topology)
    hops = capacity.switches_on_path(topology, "user", switching, path)
    khops = capacity.switches_on_path(topology, "kernel", switching, path)
    keep_up = rate / capacity.max_rate(costs, hops, mtu, khops, flows=senders,
                                       hosts_per_daemon=capacity.hosts_per_daemon(topology,
                                                                                  costs))
    base = rates.base_rtt(topology, ports, mtu, 0.0, 0.0, switching, path)
    emu_rtt = costs.nic_turnaround + 2 * hops * costs.switch_turnaround
    own = emu_rtt / (overhead * base) if base > 0 else math.inf
    if not math.isfinite(own):
        own = keep_up  # a fabric with no round trip to compare with: keeping up decides
    return Choice(nice_ceil(max(keep_up, own, 1.0)), keep_up, own, senders, rate, base,
                  emu_rtt, overhead)


def time_plan(topology: Topology, costs: capacity.Costs, switching: rates.Switching,
              path: list[tuple[str, str]]) -> TimePlan:
    """The clock ``[time] scale`` asks for: a number as given, "auto" (the default) as
    :func:`choose` finds it. The epoch is now: fabric time starts at 0 when the plan is
    made (``emu up``)."""
    scale = topology.time.get("scale", "auto")
    c = choose(topology, costs, switching, path)
    floors = {"keep_up_floor": c.keep_up, "latency_floor": c.own_rtt} if c else {}
    if scale == "auto":
        if c is None:
            return TimePlan(why="auto: no fabric rates written (the ports run at the rate "
                            "this machine sustains), so real time")
        if c.scale == 1:
            return TimePlan(why=c.why(), **floors)
        return TimePlan(scale=c.scale, why=c.why(), epoch=wall(), **floors)
    s = float(scale)  # type: ignore[arg-type]
    if s == 1:
        return TimePlan(why="manual: time scale 1 (real time)", **floors)
    return TimePlan(scale=s, why="manual: [time] scale / --set time.scale", epoch=wall(),
                    **floors)

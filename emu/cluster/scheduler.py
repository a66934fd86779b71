# SPDX-License-Identifier: GPL-2.0-only
"""``python -m emu.cluster.scheduler CLUSTER``: carry out a cluster's scheduled events.

Started by ``emu up`` as a background process (its pid is in the state file,
so ``emu down`` stops it). An event's ``at`` is fabric time after ``emu up``
finished (DESIGN.md, Fabric time): the schedule runs under trio's fabric clock
(:class:`emu.nic.clock.TrioFabricClock`, the NIC daemons' own), so at time scale N
an event at ``2s`` fires 2×N wall seconds after ``emu up``; its rates and delays are
fabric units, converted for the kernel by :mod:`emu.cluster.fabricunits`, and the
event log has each event's ``at`` and fabric time with the scale.
"""

from __future__ import annotations

import sys

import trio

from emu.cluster import cluster as C
from emu.cluster import fabricunits
from emu.fabric import state
from emu.fabric.events import run_schedule
from emu.fabricclock import realtime
from emu.nic.clock import TrioFabricClock
from emu.plan.model import TimePlan


def main(argv: list[str]) -> int:
    name = argv[0]
    topo = C.model(name)
    st = state.load(name) or {}
    log = C.event_log(name)
    try:
        time = C.plan_of(name).time
    except C.ClusterError:  # a cluster from before plans: real time
        time = TimePlan()
    fc = time.clock()
    # the fabric time emu up finished: its wall-clock record (CLOCK_REALTIME) converted with
    # one pair of readings of the two clocks
    up_done = float(st.get("up_done", realtime()))
    up_fabric = fc.stamp(up_done, realtime(), fc.now())

    async def run() -> None:
        def apply(event):
            changed = fabricunits.apply(name, topo, event, time, event_log=log,
                                        source="[[event]]", up_fabric=up_fabric)
            if event.action in ("down", "up"):
                C.set_links(name, topo, changed, event.action == "up")
            else:
                C.save_model(name, topo)
            return changed

        results = await run_schedule(topo.events, apply, start=up_fabric)
        for r in results:
            print(r, flush=True)

    trio.run(run, clock=TrioFabricClock(fc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

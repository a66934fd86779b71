# SPDX-License-Identifier: GPL-2.0-only
"""``python -m emu.cluster.scheduler CLUSTER``: carry out a cluster's scheduled events.

Started by ``emu up`` as a background process (its pid is in the state file,
so ``emu down`` stops it). Times are relative to the end of ``emu up``.
"""

from __future__ import annotations

import sys
import time

import trio

from emu.cluster import cluster as C
from emu.fabric import state
from emu.fabric.events import apply_event, run_schedule


def main(argv: list[str]) -> int:
    name = argv[0]
    topo = C.model(name)
    st = state.load(name) or {}
    log = C.event_log(name)
    elapsed = time.time() - float(st.get("up_done", time.time()))

    async def run() -> None:
        start = trio.current_time() - elapsed
        def apply(event):
            changed = apply_event(topo, event, event_log=log, cluster=name)
            if event.action in ("down", "up"):
                C.set_links(name, topo, changed, event.action == "up")
            else:
                C.save_model(name, topo)
            return changed

        results = await run_schedule(topo.events, apply, start=start)
        for r in results:
            print(r, flush=True)

    trio.run(run)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

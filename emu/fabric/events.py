# SPDX-License-Identifier: GPL-2.0-only
"""Scheduled link events: run a topology's ``Event`` list (``at = "2s"``) with trio.

:func:`run_schedule` sleeps until ``start + event.at_s`` for each event in time
order (stable for equal times) and hands the event to ``apply_fn``; it reads time
from ``clock`` (``trio.current_time`` by default), so tests drive it with trio's
``MockClock(autojump_threshold=0)`` and finish instantly. :func:`apply_event`
maps an event onto :mod:`emu.fabric.linkctl` for a cluster:

* ``down``/``up`` on a link (``h1-leaf1`` or ``h1:leaf1``): both ends (:func:`linkctl.set_link`);
* ``down``/``up`` on a node name: every link of that switch (:func:`linkctl.fail_switch`);
* ``down``/``up`` on ``plane:<n>``: every link of that plane (:func:`linkctl.fail_plane`);
* ``impair`` on a link with ``settings`` = ``Direction`` fields (``rate_bps``, ``loss``,
  ``ecn_ce``, ``duplicate``, ``delay_s``, ``jitter_s``) plus optional ``direction``: ``a_to_b``,
  ``b_to_a`` or ``both`` (default). Unnamed fields keep the link's current values.

Every applied event is logged (``logging`` at INFO) and returned in order.

Units: :func:`apply_event` gives the kernel what the event says, so at a time scale
≠ 1 its rates and delays must already be wall units (``emu.cluster.fabricunits``
converts a fabric event through the plan's ``TimePlan``); its ``clock`` (the
cluster's fabric clock) puts fabric time and the scale on every event-log line.
``run_schedule`` takes times from any clock: the cluster's scheduler runs it under
trio's fabric clock, so ``at`` is fabric time.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import trio

from emu.fabricclock import FabricClock
from emu.topology.model import Direction, Event, Topology

log = logging.getLogger("emu.fabric.events")

_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_at(value: str | float | int) -> float:
    """``"2s"``, ``"500ms"``, ``"1.5"``, ``"1m"`` or a number → seconds (≥ 0)."""
    if isinstance(value, int | float):
        secs = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", value)
        if not m or m.group(2) not in _UNITS:
            raise ValueError(f"bad time {value!r}: expected e.g. '2s', '500ms', '1m'")
        secs = float(m.group(1)) * _UNITS[m.group(2)]
    if secs < 0:
        raise ValueError(f"bad time {value!r}: must not be negative")
    return secs


@dataclass
class Applied:
    """One event as run: when (clock time and seconds after start), the event, the result."""

    t: float
    offset_s: float
    event: Event
    result: Any = None
    error: str | None = None


async def run_schedule(events: Iterable[Event],
                       apply_fn: Callable[[Event], Any] | Callable[[Event], Awaitable[Any]],
                       clock: Callable[[], float] = trio.current_time, *,
                       start: float | None = None, in_thread: bool = True,
                       stop_on_error: bool = False) -> list[Applied]:
    """Apply ``events`` at ``start + at_s`` each (``start`` defaults to ``clock()`` now).

    ``apply_fn`` may be async (awaited) or sync (run in a worker thread when
    ``in_thread``, since link changes block on netlink and ``nft``). An exception
    from ``apply_fn`` is logged and recorded; with ``stop_on_error`` it propagates.
    """
    t0 = clock() if start is None else start
    ordered = sorted(events, key=lambda e: e.at_s)  # stable: file order for ties
    done: list[Applied] = []
    is_async = inspect.iscoroutinefunction(apply_fn)
    for ev in ordered:
        due = t0 + ev.at_s
        now = clock()
        if due > now:
            await trio.sleep(due - now)
        rec = Applied(t=clock(), offset_s=clock() - t0, event=ev)
        try:
            if is_async:
                rec.result = await apply_fn(ev)  # type: ignore[misc]
            elif in_thread:
                rec.result = await trio.to_thread.run_sync(apply_fn, ev)
            else:
                rec.result = apply_fn(ev)
            log.info("t+%.3fs %s %s %s", rec.offset_s, ev.action, ev.target, ev.settings or "")
        except Exception as e:  # noqa: BLE001 - recorded, and re-raised when asked
            rec.error = f"{type(e).__name__}: {e}"
            log.error("t+%.3fs %s %s failed: %s", rec.offset_s, ev.action, ev.target, rec.error)
            if stop_on_error:
                done.append(rec)
                raise
        done.append(rec)
    return done


_DIRECTION_FIELDS = {f.name for f in dataclasses.fields(Direction)}


def apply_event(topology: Topology, event: Event, *,
                event_log: str | os.PathLike[str] | None = None,
                cluster: str | None = None, clock: FabricClock | None = None) -> list[str]:
    """Carry out one event on a built cluster; returns the names of the links changed.
    Its settings are given to the kernel as they are (wall units); ``clock``: the
    cluster's, for the event log's fabric times."""
    from emu.fabric import linkctl  # netlink only when events are really applied

    cl = cluster or topology.name
    kw = {"event_log": event_log, "clock": clock}
    act, target = event.action, event.target
    if act in ("down", "up"):
        up = act == "up"
        if target.startswith("plane:"):
            return linkctl.fail_plane(cl, topology.links, int(target.split(":", 1)[1]), up,
                                      **kw)
        if target in topology.nodes:
            return linkctl.fail_switch(cl, topology.links, target, up, **kw)
        lk = topology.link(target)
        linkctl.set_link(cl, lk, up, **kw)
        return [lk.name]
    if act == "impair":
        lk = topology.link(target)
        settings = dict(event.settings)
        which = str(settings.pop("direction", "both"))
        unknown = set(settings) - _DIRECTION_FIELDS
        if unknown:
            raise ValueError(f"impair {target}: unknown setting(s) {sorted(unknown)}")
        if which not in ("a_to_b", "b_to_a", "both"):
            raise ValueError(f"impair {target}: direction must be a_to_b, b_to_a or both")
        for label, end in (("a_to_b", lk.a), ("b_to_a", lk.b)):
            if which not in (label, "both"):
                continue
            d = dataclasses.replace(getattr(lk, label), **settings)  # type: ignore[arg-type]
            setattr(lk, label, d)
            linkctl.apply_direction(linkctl.ns_name(cl, end.node), end.ifname, d, mtu=lk.mtu,
                                    event_log=event_log, cluster=cl, link=lk.name,
                                    direction=label, clock=clock)
        return [lk.name]
    raise ValueError(f"unknown event action {act!r} (down, up, impair)")

# SPDX-License-Identifier: GPL-2.0-only
"""Live impairments and scheduled events in fabric units, turned into what the kernel gets.

Why (DESIGN.md, Fabric time): users write rates, delays and event times as the fabric
has them, and the kernel runs the fabric ``scale`` times slower: its tbf gets
``rate / scale``, netem ``delay × scale``. ``emu impair`` and the ``[[event]]``
scheduler both take fabric units, so both convert here, through the plan's
:class:`~emu.plan.model.TimePlan` (the one place fabric and wall units convert),
log the event with both figures and fabric time, and say a missing kernel feature
in the units the user gave. At scale 1 nothing is converted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from emu.fabric.events import apply_event
from emu.fabric.linkctl import FeatureMissing, features, log_event
from emu.plan.model import TimePlan
from emu.topology.model import Event, Topology

#: the event settings that are rates or times (Direction fields), which dilate
TIMED = ("rate_bps", "delay_s", "jitter_s")


def wall_settings(settings: Mapping[str, object], time: TimePlan) -> dict[str, object]:
    """``settings`` (Direction fields in fabric units, maybe ``direction``) as the kernel is
    to get them: rates / scale (whole bits/s, at least 1), delays and jitters × scale."""
    out = dict(settings)
    if time.scale == 1:
        return out
    rate = out.get("rate_bps")
    if isinstance(rate, int | float):
        wall = time.wall_rate(float(rate))
        assert wall is not None
        out["rate_bps"] = max(1, round(wall))
    for key in ("delay_s", "jitter_s"):
        value = out.get(key)
        if isinstance(value, int | float):
            out[key] = time.wall_delay(float(value))
    return out


def fmt_rate(bps: float) -> str:
    """A rate as tc writes one (``400gbit``, ``1.5mbit``)."""
    for unit, div in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= div:
            return f"{bps / div:.6g}{unit}"
    return f"{bps:.6g}bit"


def fmt_time(s: float) -> str:
    """A duration in the unit that reads best (``2us``, ``84ns``, ``1.5ms``)."""
    for unit, mul in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= mul:
            return f"{s / mul:.6g}{unit}"
    return f"{s * 1e9:.6g}ns" if s else "0s"


def describe(settings: Mapping[str, object], time: TimePlan) -> str:
    """The timed settings given (fabric units), each with the wall value the kernel gets
    beside it at a scale ≠ 1: ``rate 400gbit (wall 4gbit)``."""
    wall = wall_settings(settings, time)
    parts = []
    for key, name, fmt in (("rate_bps", "rate", fmt_rate), ("delay_s", "delay", fmt_time),
                           ("jitter_s", "jitter", fmt_time)):
        value, w = settings.get(key, ...), wall.get(key)
        if value is ...:
            continue
        if value is None:
            parts.append(f"{name} unlimited")
            continue
        assert isinstance(value, int | float) and isinstance(w, int | float)
        text = f"{name} {fmt(value)}"
        if time.scale != 1:
            text += f" (wall {fmt(w)})"
        parts.append(text)
    return ", ".join(parts)


def check_kernel(settings: Mapping[str, object], time: TimePlan, where: str) -> None:
    """Refuse, in the units the user gave, what this kernel cannot do: a delay or jitter
    needs netem (:class:`emu.fabric.linkctl.FeatureMissing`). linkctl would refuse it
    too, but in the wall units it was handed."""
    wanted = {k: settings[k] for k in ("delay_s", "jitter_s")
              if isinstance(settings.get(k), int | float) and settings[k]}  # type: ignore[operator]
    if not wanted or features().netem:
        return
    units = (f" (fabric time; at time scale {time.scale:g} the kernel would get the wall "
             "figure)" if time.scale != 1 else "")
    raise FeatureMissing(f"{where}: {describe(wanted, time)}{units} needs the netem qdisc, "
                         "which this kernel lacks (CONFIG_NET_SCH_NETEM; netem: absent)")


def apply(cluster: str, topology: Topology, event: Event, time: TimePlan, *,
          event_log: str | os.PathLike[str] | None, source: str,
          up_fabric: float | None = None) -> list[str]:
    """Carry out ``event`` (fabric units) on ``cluster``: its rates and delays converted
    through ``time``, one ``event`` line in the event log (the settings as given and as
    the kernel gets them, the fabric time, the scale; for a scheduled event its ``at``
    and the fabric seconds since ``emu up`` finished, ``up_fabric``), then linkctl's own
    lines (wall settings, with fabric time beside them). Returns the links changed."""
    wall = wall_settings(event.settings, time)
    if event.action == "impair":
        check_kernel(event.settings, time, f"{source} {event.target}")
    clock = time.clock()
    record: dict[str, object] = {"event": event.action, "source": source,
                                 "settings": dict(event.settings)}
    if time.scale != 1 and any(k in event.settings for k in TIMED):
        record["wall_settings"] = wall
    if up_fabric is not None:
        record.update(at=event.at_s, since_up=round(clock.now() - up_fabric, 9))
    log_event(event_log, cluster=cluster, link=event.target,
              direction=str(event.settings.get("direction", "")), action="event",
              settings=record, clock=clock)
    return apply_event(topology, Event(event.at_s, event.action, event.target, wall),
                       event_log=event_log, cluster=cluster, clock=clock)

# SPDX-License-Identifier: GPL-2.0-only
"""The plan of a cluster as data: what ``emu up`` resolved a topology into.

Pure dataclasses, JSON both ways (:meth:`Plan.to_dict` / :meth:`Plan.from_dict`),
so the plan kept in the cluster's state file is the one the daemons were started
from and every later reader sees the same numbers. Nothing here knows how the
values were chosen (:mod:`emu.plan.build` does); this module only says what they
are, in fabric units and in wall units.

Fabric and wall units: the user writes the fabric as it is; the kernel and the
daemons run it ``scale`` times slower (DESIGN.md, Fabric time): wall rate =
fabric rate / scale, wall delay = fabric delay × scale. :class:`TimePlan` is the
one place that conversion is made. At scale 1 (real time, the default) both
columns are equal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from emu.fabricclock import FabricClock

#: the plan's JSON layout; a reader refuses a plan of another version instead of
#: misreading it
VERSION = 1


@dataclass(frozen=True)
class TimePlan:
    """The cluster's clock: ``scale`` wall seconds per fabric second, and why."""

    scale: float = 1.0
    #: (the scale-1 text is what the state files and the tests have always had)
    why: str = "real time (the default; --set time.scale=N dilates it)"
    #: the cluster's fabric epoch (an :func:`emu.fabricclock.wall` time, taken when the plan
    #: was made): fabric time = (monotonic - epoch) / scale. 0 at real time
    epoch: float = 0.0
    #: the smallest scales at which this machine keeps up with the fabric's traffic and
    #: at which emu's own round trip is within the overhead rule (rules (a) and (b) of
    #: "auto", :func:`emu.plan.scale.choose`), kept at any scale so that a run below them
    #: is flagged (0: not known — real time with no fabric rates, or an older plan)
    keep_up_floor: float = 0.0
    latency_floor: float = 0.0

    def clock(self) -> FabricClock:
        """The fabric clock this plan's daemons and tools run on."""
        return FabricClock(self.scale, self.epoch)

    def wall_rate(self, fabric_bps: float | None) -> float | None:
        """A rate the kernel or a daemon runs at for a fabric rate (None: unlimited)."""
        return None if fabric_bps is None else fabric_bps / self.scale

    def wall_delay(self, fabric_s: float) -> float:
        """A delay the kernel or a daemon holds for a fabric delay."""
        return fabric_s * self.scale

    def fabric_delay(self, wall_s: float) -> float:
        """What a wall delay (this machine's own per-packet cost) is in fabric time:
        emu's costs shrink by the scale, which is what dilation is for."""
        return wall_s / self.scale


@dataclass(frozen=True)
class PortPlan:
    """One egress port (a link's direction, leaving ``node`` by ``ifname``).

    ``rate``: the link's rate on the wire (the kernel's tbf; a host port's line rate
    when its link has none of its own: ``serializer``), None = unlimited.
    ``pipeline_rate``/``pipeline_delay``: the switch pipeline's on this port (a
    switch with ``[switch]``), which queues, marks and trims in front of the link."""

    link: str
    direction: str  # "a_to_b" or "b_to_a"
    node: str
    ifname: str
    peer: str  # "node:ifname" at the other end
    mtu: int
    rate: float | None
    wall_rate: float | None
    rate_source: str  # "link", "line rate (<how chosen>)", or "" (unlimited)
    serializer: bool  # the rate is the host port's line rate, not the link's own
    delay: float
    wall_delay: float
    pipeline_rate: float | None = None
    wall_pipeline_rate: float | None = None
    pipeline_delay: float = 0.0
    wall_pipeline_delay: float = 0.0


@dataclass(frozen=True)
class NicPort:
    """One NIC port's line rate (bits/s) and where it came from
    (:class:`emu.credible.rates.HostPort`)."""

    ifname: str
    rate: float
    wall_rate: float
    source: str


@dataclass(frozen=True)
class NicPlan:
    """One host's NIC daemon: its ports and its ``emu nicd`` arguments (everything
    after ``--cluster C --host H``, except ``--trace``, which is a run's choice)."""

    host: str
    ports: tuple[NicPort, ...]
    args: tuple[str, ...]
    #: the worker process serving this host with others (``emu nicd serve``:
    #: :mod:`emu.nic.worker`), or None for a process of its own (``emu nicd run``)
    worker: int | None = None


@dataclass(frozen=True)
class SwitchPlan:
    """One switch's pipeline: the datapath it is expected to take and why, the
    configuration its daemon is given (``SwitchConfig.to_dict()``, fabric units: the
    daemon runs on the fabric clock and converts to wall units itself) and its
    ``emu switchd`` arguments besides namespace and files (the clock: ``--time-scale
    N --time-epoch E`` at a scale, none at real time)."""

    node: str
    datapath: str  # "kernel" or "user" (as predicted before the daemon runs)
    why: str
    config: dict[str, Any]
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """Everything ``emu up`` derives from a topology, once.

    ``credible``: the capacity verdict (:func:`emu.credible.capacity.fit` with the
    base round trip and the line ``emu up`` prints), kept as the dict the state
    file's ``credible`` key has always held. ``serializers``: the line rates put on
    links, wall units (what ``emu impair --clear`` goes back to). ``machine``: this machine's
    facts the plan depends on (so a plan says what it was made for)."""

    topology: str
    kind: str
    source: str
    time: TimePlan
    ports: tuple[PortPlan, ...]
    nics: dict[str, NicPlan]
    switches: dict[str, SwitchPlan]
    credible: dict[str, Any]
    serializers: dict[str, int]
    machine: dict[str, Any] = field(default_factory=dict)
    version: int = VERSION

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (tuples as lists), for the state file. Real time
        has no epoch: its plan reads as it always has."""
        d = _listify(asdict(self))
        if not d["time"]["epoch"]:
            del d["time"]["epoch"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        """A plan read back from :meth:`to_dict` (ValueError on another version)."""
        if d.get("version") != VERSION:
            raise ValueError(f"plan version {d.get('version')!r} is not {VERSION} "
                             "(written by another emu)")
        return cls(
            topology=d["topology"], kind=d["kind"], source=d["source"],
            time=TimePlan(**d["time"]),
            ports=tuple(PortPlan(**p) for p in d["ports"]),
            nics={h: NicPlan(host=n["host"], ports=tuple(NicPort(**p) for p in n["ports"]),
                             args=tuple(n["args"]), worker=n.get("worker"))
                  for h, n in d["nics"].items()},
            switches={s: SwitchPlan(**{**w, "args": tuple(w.get("args", ()))})
                      for s, w in d["switches"].items()},
            credible=d["credible"], serializers=d["serializers"],
            machine=d.get("machine", {}), version=d["version"])

    def port(self, node: str, ifname: str) -> PortPlan | None:
        """The egress port ``node:ifname`` (None: no such port)."""
        for p in self.ports:
            if p.node == node and p.ifname == ifname:
                return p
        return None


def _listify(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _listify(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_listify(x) for x in v]
    return v

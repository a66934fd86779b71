# SPDX-License-Identifier: GPL-2.0-only
"""Behind a paced port, MRC's output runs no further ahead of each plane's wire than the
port's FIFO (:mod:`emu.core.portsched`).

Why: NSCC's window at a long round trip is a bandwidth-delay product — 50 MB, ~12,000
packets, at 1 ms and 400 Gb/s — and the initiator used to hand all of it to the daemon
in one turn; the daemon's transmit queue holds 8192 datagrams, so 7935 were dropped and
counted as emulator overload (``tx_backlog``, the cross-site scenario). A NIC schedules a
QP only as fast as its port serialises: what the window allows and the port cannot take
yet stays in the engine — where the window, the EV rotation and loss recovery still see
it — and the engine's timer comes back when the port has room (half its FIFO drained).

One :class:`PortSchedule` per plane (a NIC port each) for the whole engine, as the port
is one serializer for every QP on it. What is charged to a plane: the initiators' data,
resends and ACK requests on its EVs (held back by the schedule), and their probes and
every SACK, NACK, transport ACK and endpoint operation leaving by it — not held, as they
are small and a peer waits on them, but counted, as they take the port's time too.

A QP's next packet takes the next EV of its rotation, whose plane is not known before
it is drawn, so the QP's :class:`QpGate` admits a packet only while *every* live plane of
the QP has room for a full one. The rotation interleaves the planes, so they fill
alike and the check costs at most a packet of FIFO per plane. Data never overfills a
plane's FIFO (each plane is charged exactly what it carries); what is not held may add
its few bytes beyond it.

Without ``tx_hold`` (sans-IO callers, tests) there is no :class:`PortLead` and nothing
here runs: MRC sends as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from emu.core.portsched import PortSchedule
from emu.transports.mrc.evset import EVSet

#: the most an MRC data packet adds to its payload in the UDP datagram: BTH 12, METH 4,
#: RETH 16, ImmDt 4, ICRC 4 (a payload of a PMTU needs no pad) — what the gate keeps
#: room for, so that the packet it admits fits whatever it turns out to be
DATA_HEADERS = 12 + 4 + 16 + 4 + 4

T = TypeVar("T")


class PortLead:
    """The NIC's ports (planes) as this engine's output fills them: each plane's
    schedule at ``line_rate`` with a FIFO of ``tx_hold`` seconds."""

    __slots__ = ("ports", "plane_of", "_turn")

    def __init__(self, planes: int, line_rate: float, tx_hold: float,
                 frame_overhead: int = 0) -> None:
        self.ports = [PortSchedule(line_rate, tx_hold, frame_overhead)
                      for _ in range(max(1, planes))]
        #: the peers' addresses → the plane (port) a datagram to them leaves by
        self.plane_of: dict[str, int] = {}
        self._turn = 0  # turns served (:meth:`turns`)

    @classmethod
    def of(cls, planes: int, line_rate: float, tx_hold: float,
           frame_overhead: int = 0) -> PortLead | None:
        """The engine's lead, or None without ``tx_hold`` (nothing is held back). Raises
        ValueError for a negative hold or overhead."""
        if tx_hold < 0 or frame_overhead < 0:
            raise ValueError(f"tx_hold ({tx_hold!r}) and frame_overhead ({frame_overhead!r})"
                             " must be >= 0")
        return cls(planes, line_rate, tx_hold, frame_overhead) if tx_hold > 0 else None

    def gate(self, evs: EVSet, dests: Sequence[str], pmtu: int) -> QpGate:
        """A QP's gate: its EV set's planes, the peer's address on each (``dests``, by
        plane: where its answers go as well) and its path MTU."""
        for p, a in enumerate(dests):
            if p < len(self.ports):
                self.plane_of[a] = p
        return QpGate(self.ports, evs, pmtu + DATA_HEADERS)

    def turns(self, qps: dict[int, T]) -> list[T]:
        """The engine's QPs in the order they are served this turn: each turn starts one
        further along, as a NIC's QP arbiter goes round. Why: the ports' room goes to
        whoever asks first; served in one fixed order, of two QPs writing 2 MiB each the
        first finished at 0.73 of the other's time (0.90 taking turns; 0.92 unpaced)."""
        qs = list(qps.values())
        if len(qs) < 2:
            return qs
        k = self._turn % len(qs)
        self._turn += 1
        return qs[k:] + qs[:k]

    def charge_to(self, address: str, nbytes: int, now: float) -> None:
        """An unthrottled datagram of ``nbytes`` to ``address`` (its plane's port; a peer
        the engine has no QP with: the first port's)."""
        self.ports[self.plane_of.get(address, 0)].charge(now, nbytes)


class QpGate:
    """Whether one QP's next data packet fits the FIFOs of the ports it sprays over
    (:class:`PortLead`); the initiator asks before each and says what it sent."""

    __slots__ = ("ports", "evs", "full", "mine")

    def __init__(self, ports: list[PortSchedule], evs: EVSet, full: int) -> None:
        self.ports = ports
        self.evs = evs
        self.full = full  # the largest datagram it sends (bytes)
        #: the ports of the QP's planes, by plane (the NIC may have more)
        self.mine = ports[:evs.planes]

    @property
    def hold(self) -> float:
        """How long a datagram may wait in a port's FIFO before the wire (``tx_hold``)."""
        return self.ports[0].lead_s

    def _live(self) -> list[PortSchedule]:
        """The ports of the QP's planes that are up (a down plane takes nothing)."""
        down = self.evs.down
        return [s for p, s in enumerate(self.mine) if p not in down] if down else self.mine

    def open(self, now: float) -> bool:
        """Whether a full packet fits every live plane's FIFO now (asked per packet)."""
        full, down = self.full, self.evs.down
        for p, s in enumerate(self.mine):
            if not s.admits(now, full) and p not in down:
                return False
        return True

    def charge(self, plane: int, nbytes: int, now: float) -> None:
        """A datagram of ``nbytes`` went out on an EV of ``plane``: charged to its port."""
        self.ports[plane].charge(now, nbytes)

    def resume_at(self) -> float:
        """When a QP this gate held may send again: when the fullest live plane has
        drained half its FIFO (:meth:`PortSchedule.resume_at`)."""
        full = self.full
        return max((s.resume_at(full) for s in self._live()), default=float("-inf"))

# SPDX-License-Identifier: GPL-2.0-only
"""A NIC port's wire schedule as a sans-IO engine sees it: how far its output may run
ahead of the line rate.

Why: a real NIC schedules a QP no faster than its port serialises, so it never holds
more than the port's transmit FIFO of its own output. An engine that hands the daemon
its whole window at once (MRC under NSCC: a bandwidth-delay product, ~12,000 packets
over 1 ms at 400 Gb/s) overflows the daemon's transmit queue, which drops and counts
it as emulator overload (``tx_backlog``) — a loss the emulated hardware would not have
had. The daemon tells each engine how long its port's FIFO holds a datagram before the
wire (engine option ``tx_hold``, the daemon's ``--tx-lead``); at the line rate that is
``line_rate × tx_hold`` bytes, and an engine keeps its output within it here.

Model (the daemon's own serializer, :class:`emu.nic.pacer.PortPacer`, in the engine's
fabric clock): ``t_free`` is when the port will have serialised everything charged to
it; an idle port saves no credit (what comes after an idle spell starts at ``now``).
A packet is admitted while it *fits*: the FIFO would hold no more than ``lead_s`` of
line rate once it is in (:meth:`PortSchedule.admits`), so what is ahead of the wire never
exceeds the FIFO — except that an idle port always takes one packet, or a FIFO smaller
than a packet would take none. An engine that was held comes back once half the FIFO
has drained (:meth:`PortSchedule.resume_at`): each turn hands the port half a FIFO of
packets while the other half still feeds the wire — the rule RoCEv2's pacer follows at
the line rate (``QueuePair.hold``), so an engine wakes once per half FIFO, not per packet.

Used by MRC (:mod:`emu.transports.mrc.txlead`). RoCEv2's QP pacer
(``emu.transports.roce.qp``) keeps the same schedule at the line rate inside its
DCQCN pacer, with two differences: a packet there goes while it *starts* within the
lead (the FIFO may hold the lead and one packet, as the daemon's serializer does) and
the rate follows the congestion controller. Sans-IO: time is an argument.
"""

from __future__ import annotations

#: the share of a full FIFO that drains before a held engine is served again (RoCEv2's
#: ``QueuePair.hold``: half a lead per turn, the other half still on its way to the wire)
REFILL_SHARE = 0.5
#: seconds of slack in :meth:`PortSchedule.admits`: the time :meth:`~PortSchedule.resume_at`
#: gives must admit the packet it was computed for, whatever the floats' rounding (1 ps:
#: a few bits of a frame at any rate emu runs)
EPS = 1e-12


class PortSchedule:
    """One port's line-rate wire, fed from a FIFO of ``lead_s`` seconds (at ``rate``
    bits/s). ``overhead``: bytes the port adds to each datagram (IP, UDP, Ethernet), so
    the schedule is the port's own and not a per-cent ahead of it."""

    __slots__ = ("rate", "lead_s", "overhead", "t_free", "_byte_s")

    def __init__(self, rate: float, lead_s: float, overhead: int = 0) -> None:
        if not rate > 0 or lead_s < 0 or overhead < 0:
            raise ValueError(f"a port schedule needs rate > 0, lead >= 0 and overhead >= 0, "
                             f"not {rate!r}, {lead_s!r}, {overhead!r}")
        self.rate = float(rate)
        self.lead_s = float(lead_s)
        self.overhead = int(overhead)
        self._byte_s = 8.0 / self.rate
        #: when the port will have serialised everything charged to it
        self.t_free = float("-inf")

    def seconds(self, nbytes: int) -> float:
        """Wire time of one datagram of ``nbytes`` (the port's overhead added)."""
        return (nbytes + self.overhead) * self._byte_s

    def ahead(self, now: float) -> float:
        """Seconds of charged output not yet on the wire at ``now`` (the FIFO's fill)."""
        t = self.t_free - now
        return t if t > 0.0 else 0.0

    def admits(self, now: float, nbytes: int) -> bool:
        """Whether a datagram of ``nbytes`` fits the FIFO now: the port is idle, or what
        is ahead of the wire stays within ``lead_s`` with it."""
        t = self.t_free
        return t <= now or t + self.seconds(nbytes) <= now + self.lead_s + EPS

    def charge(self, now: float, nbytes: int) -> float:
        """A datagram of ``nbytes`` handed to the port at ``now``; returns when its last bit
        leaves (the new ``t_free``). Charged whether admitted or not: what is unthrottled
        (acknowledgements, probes) still takes its wire time."""
        t = self.t_free
        self.t_free = (t if t > now else now) + self.seconds(nbytes)
        return self.t_free

    def resume_at(self, nbytes: int) -> float:
        """When an engine this port held should come back to send datagrams of ``nbytes``:
        once :data:`REFILL_SHARE` of the FIFO has drained, but no earlier than a datagram
        fits (:meth:`admits`), nor later than the port goes idle."""
        t = self.t_free
        due = max(t - self.lead_s * REFILL_SHARE, t - self.lead_s + self.seconds(nbytes))
        return due if due < t else t

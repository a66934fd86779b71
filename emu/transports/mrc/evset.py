# SPDX-License-Identifier: GPL-2.0-only
"""One MRC QP's EV set: entropy values split over planes, their states and counters.

What MRC sprays over (``specs/mrc.md``, Behaviour): a QP owns 128–256 EVs
split evenly over its ports (one plane each); every packet takes a different
EV, pseudo-random among the usable ones, and the feedback each EV earns
(SACKs, ECN, trims, timeouts, probe answers) moves it between states:

========== ===================================================================
GOOD       used
SKIP       left out of the current rotation once, then GOOD again: after a SACK
           whose M field says SKIP_ONCE, or a NACK TRIMMED from a switch before
           the last hop (that path is congested, not broken)
ASSUMED_BAD retired: after a SACK with M = ALWAYS_SKIP, or a real loss — a
           timeout that saw neither a trim nor a SACK, or a packet the SACKs show
           lost (later ones arrived) with no trim reported — at once. Its
           slot takes a fresh EV of the same plane where the profile can make one
           (AUTO, GEN), so the planes stay balanced; the retired EV is probed
           (RELIABILITY_PROBE) and comes back GOOD after :attr:`revive_after`
           answered probes in a row — into its slot if it kept one (EXP), else as
           its plane's spare, which replaces the plane's next retired EV before
           any untried value does. The set remembers (and probes) as many
           retired EVs as it has slots, forgetting the oldest
DENIED     the controller's (``emu mrc``): never used, never probed, until the
           controller allows it again
========== ===================================================================

``ev_min_active`` floors the demotions: an EV is not retired or skipped when
that would leave fewer usable EVs than it (the controller may still deny).

The rotation: a round takes every usable EV once, the planes interleaved (one
EV of each live plane in turn, so a QP's packets alternate planes however many
EVs each plane has left) and each plane's EVs in a random order drawn per
round. A SKIP EV sits one round out. Ports: a plane that goes down
(:meth:`EVSet.plane_down`) leaves the rotation, its EVs keep their states and
come back with it — the remap to live planes the spec asks for is the
interleave over the planes still up.

Every state change is an event (:meth:`EVSet.events`): the controller's event
poll reads them, and a bounded queue counts what it had to drop
(``drop_count``), as ``mrc_ctl.h``'s poll reports.

Sans-IO: no clock, no randomness of its own (the RNG is injected).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emu.core.psn import RandomBits
from emu.transports.mrc.evprofile import EVGenMode, EVProfile

#: answered probes in a row that bring an ASSUMED_BAD EV back
REVIVE_AFTER = 3
#: state changes kept for the controller's poll before the oldest are dropped (and counted)
EVENT_QUEUE = 1024
#: per-EV counters, in the order ``emu mrc qp`` shows them
COUNTERS = ("sent", "sacked", "ecn", "trimmed", "lost", "timeouts", "probes", "probe_ok")


class EVState(enum.Enum):
    """An EV's state: the data plane's four (the controller API shows SKIP as GOOD)."""

    GOOD = "good"
    SKIP = "skip"
    ASSUMED_BAD = "assumed_bad"
    DENIED = "denied"


class SackHint(enum.IntEnum):
    """SETH's M field (bits 6:5 of its first 16-bit word): what the receiver asks of the
    EV the SACK echoes (``specs/mrc.md``; the skip-hint reading is our default)."""

    NONE = 0
    SKIP_ONCE = 1
    ALWAYS_SKIP = 2


@dataclass(slots=True)
class EVEntry:
    """One EV of the set: its value, plane, state and counters."""

    ev: int
    plane: int
    state: EVState = EVState.GOOD
    streak: int = 0  # answered probes in a row while ASSUMED_BAD
    sit_out: bool = False  # SKIP, already used this round: sits the next one out
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    @property
    def usable(self) -> bool:
        return self.state is EVState.GOOD or self.state is EVState.SKIP


@dataclass(frozen=True, slots=True)
class EVEvent:
    """A state change: ``when`` (the caller's clock), the EV, its plane, from → to, why."""

    when: float
    ev: int
    plane: int
    old: EVState | None  # None: an EV new to the set
    new: EVState
    cause: str

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.when, "ev": self.ev, "plane": self.plane,
                "from": None if self.old is None else self.old.value, "to": self.new.value,
                "cause": self.cause}


class EVSet:
    """The EVs of one QP over ``planes`` planes (:meth:`build`)."""

    def __init__(self, profile: EVProfile, entries: list[EVEntry], planes: int,
                 rng: RandomBits, *, ev_min_active: int = 1,
                 revive_after: int = REVIVE_AFTER, event_queue: int = EVENT_QUEUE) -> None:
        if planes < 1:
            raise ValueError(f"an EV set needs at least one plane, not {planes}")
        if not 0 <= ev_min_active <= len(entries):
            raise ValueError(f"ev_min_active {ev_min_active} is not within the set's "
                             f"{len(entries)} EVs")
        self.profile = profile
        self.planes = planes
        self.rng = rng
        self.ev_min_active = ev_min_active
        self.revive_after = revive_after
        self.slots = entries  # the set as sprayed: one entry per slot
        self.by_ev = {e.ev: e for e in entries}  # every EV known, retired ones too
        self.retired: list[EVEntry] = []  # replaced ASSUMED_BAD EVs, still probed
        self.down: set[int] = set()  # planes whose port is down
        self._round: deque[EVEntry] = deque()
        self._events: deque[EVEvent] = deque(maxlen=event_queue)
        self.drop_count = 0
        #: called with every state change as well (the engine's event trace)
        self.listener: Callable[[EVEvent], None] | None = None

    @classmethod
    def build(cls, profile: EVProfile, size: int, planes: int, rng: RandomBits,
              **kw: Any) -> EVSet:
        """``size`` EVs of ``profile`` dealt evenly over ``planes`` planes (slot i on plane
        i mod planes). An explicit (EXP) profile shorter than ``size`` is the set as the
        controller wrote it (at least one EV per plane). Raises ValueError when the
        profile cannot give ``size`` values."""
        evs = profile.draw(size, rng)
        if profile.mode is EVGenMode.EXP and len(evs) < size:
            size = len(evs) - len(evs) % planes
            if size < planes:
                raise ValueError(f"the EV profile lists {len(evs)} EVs: fewer than the "
                                 f"{planes} plane(s)")
            evs = evs[:size]
        if len(evs) < size:
            raise ValueError(f"the EV profile gives {len(evs)} EVs, the set needs {size}")
        if planes > size:
            raise ValueError(f"{planes} planes need at least as many EVs, not {size}")
        return cls(profile, [EVEntry(ev, i % planes) for i, ev in enumerate(evs)], planes,
                   rng, **kw)

    # -- what the sender sprays ----------------------------------------------------------

    def active(self) -> int:
        """Usable EVs on live planes: what ``ev_min_active`` floors."""
        return sum(1 for e in self.slots if e.usable and e.plane not in self.down)

    def next(self) -> EVEntry:
        """The EV for the next packet (its ``sent`` counted). Raises LookupError when no
        EV is usable on a live plane: the QP has no path (the caller's error)."""
        if not self._round:
            self._new_round()
            if not self._round:
                self._new_round()  # every usable EV was sitting a round out
                if not self._round:
                    raise LookupError("no usable EV on a live plane")
        e = self._round.popleft()
        e.counts["sent"] += 1
        return e

    def _new_round(self) -> None:
        """Every usable EV once, planes interleaved, each plane shuffled. A SKIP EV that
        was taken out of the round before its turn has been skipped: GOOD again; one
        that had been used already sits this round out."""
        per: dict[int, list[EVEntry]] = {}
        for e in self.slots:
            if e.state is EVState.SKIP:
                if e.sit_out:
                    e.sit_out = False
                    continue
                self._set(e, EVState.GOOD, "skipped a round", 0.0, event=False)
            if e.state is EVState.GOOD and e.plane not in self.down:
                per.setdefault(e.plane, []).append(e)
        lanes = [self._shuffled(per[p]) for p in sorted(per)]
        out = self._round
        depth = max((len(lane) for lane in lanes), default=0)
        for i in range(depth):
            for lane in lanes:
                if i < len(lane):
                    out.append(lane[i])

    def _shuffled(self, xs: list[EVEntry]) -> list[EVEntry]:
        """Fisher-Yates with the injected RNG (16 bits a draw: sets are ≤ 4096)."""
        bits = self.rng.getrandbits
        for i in range(len(xs) - 1, 0, -1):
            j = bits(16) % (i + 1)
            xs[i], xs[j] = xs[j], xs[i]
        return xs

    # -- feedback ------------------------------------------------------------------------

    def on_sack(self, ev: int, now: float, *, hint: SackHint = SackHint.NONE,
                ecn: bool = False) -> bool:
        """A SACK echoed ``ev``: it carried a packet; ``hint`` is its M field, ``ecn`` the
        per-EV CE echo (``cc_flags``). False: ``ev`` is none of ours (retired and
        forgotten, or the peer rebuilt it from the wire another way)."""
        e = self.by_ev.get(ev)
        if e is None:
            return False
        e.counts["sacked"] += 1
        e.counts["ecn"] += ecn
        if hint is SackHint.SKIP_ONCE:
            self._demote(e, EVState.SKIP, "SACK M=SKIP_ONCE", now)
        elif hint is SackHint.ALWAYS_SKIP:
            self._demote(e, EVState.ASSUMED_BAD, "SACK M=ALWAYS_SKIP", now)
        return True

    def on_trim(self, ev: int, now: float, *, last_hop: bool) -> None:
        """A NACK TRIMMED (or TRIMMED_LASTHOP) for a packet sent on ``ev``. Congestion at
        the receiver's own port says nothing of the path: only an earlier hop's trim
        skips the EV."""
        e = self.by_ev.get(ev)
        if e is None:
            return
        e.counts["trimmed"] += 1
        if not last_hop:
            self._demote(e, EVState.SKIP, "NACK TRIMMED", now)

    def on_timeout(self, ev: int, now: float, *, trimmed: bool = False,
                   sacked: bool = False) -> None:
        """A packet sent on ``ev`` timed out. With neither a trim nor a SACK seen for it
        the packet was lost on the path: the EV is retired at once."""
        e = self.by_ev.get(ev)
        if e is None:
            return
        e.counts["timeouts"] += 1
        if not trimmed and not sacked:
            self._demote(e, EVState.ASSUMED_BAD, "timeout", now)

    def on_lost(self, ev: int, now: float) -> None:
        """A packet sent on ``ev`` was presumed lost from the SACKs (later packets arrived,
        it did not, and no trim was reported for it): a real loss on that path, which
        retires the EV at once, as a bare timeout does."""
        e = self.by_ev.get(ev)
        if e is None:
            return
        e.counts["lost"] += 1
        self._demote(e, EVState.ASSUMED_BAD, "lost", now)

    # -- probes --------------------------------------------------------------------------

    def to_probe(self) -> list[int]:
        """The EVs to probe now: every ASSUMED_BAD one (in the set or retired from it) on
        a plane that is up."""
        return [e.ev for e in (*self.slots, *self.retired)
                if e.state is EVState.ASSUMED_BAD and e.plane not in self.down]

    def on_probe_sent(self, ev: int) -> None:
        e = self.by_ev.get(ev)
        if e is not None:
            e.counts["probes"] += 1

    def on_probe(self, ev: int, now: float, *, answered: bool) -> None:
        """A probe on ``ev`` was answered (a SACK with PR=1) or timed out."""
        e = self.by_ev.get(ev)
        if e is None or e.state is not EVState.ASSUMED_BAD:
            return
        if not answered:
            e.streak = 0
            return
        e.counts["probe_ok"] += 1
        e.streak += 1
        if e.streak >= self.revive_after:
            self._revive(e, now)

    # -- the controller ------------------------------------------------------------------

    def deny(self, ev: int, now: float) -> None:
        """The controller takes ``ev`` out of use (not floored by ``ev_min_active``)."""
        e = self._known(ev)
        self._set(e, EVState.DENIED, "controller", now)
        self._drop_from_round(e)

    def allow(self, ev: int, now: float) -> None:
        """The controller gives a DENIED ``ev`` back: GOOD again."""
        e = self._known(ev)
        if e.state is EVState.DENIED:
            self._set(e, EVState.GOOD, "controller", now)

    def plane_down(self, plane: int, now: float) -> int:
        """``plane``'s port went down (this NIC's or the peer's): its EVs leave the
        rotation as ASSUMED_BAD — kept in their slots, not replaced (a fresh EV of a
        dead plane is no better) and not probed while the plane is down. Returns how
        many it turned."""
        self._plane(plane)
        n = 0
        if plane not in self.down:
            self.down.add(plane)
            self._round = deque(e for e in self._round if e.plane != plane)
            for e in self.slots:
                if e.plane == plane and e.usable:
                    e.streak = 0
                    self._set(e, EVState.ASSUMED_BAD, "port down", now)
                    n += 1
        return n

    def plane_up(self, plane: int, now: float) -> None:
        """``plane``'s port is back: its EVs are probed, and each comes back GOOD when
        its probes are answered — a port up says nothing of the paths beyond it."""
        self._plane(plane)
        self.down.discard(plane)
        self._round.clear()  # the next round interleaves it again

    def _plane(self, plane: int) -> None:
        if not 0 <= plane < self.planes:
            raise ValueError(f"plane {plane} is not one of the set's {self.planes}")

    def _known(self, ev: int) -> EVEntry:
        e = self.by_ev.get(ev)
        if e is None:
            raise KeyError(f"EV {ev:#x} is not in this QP's set")
        return e

    # -- state changes -------------------------------------------------------------------

    def _demote(self, e: EVEntry, to: EVState, cause: str, now: float) -> None:
        if not e.usable or (e.state is EVState.SKIP and to is EVState.SKIP):
            return
        if e not in self.slots:
            # a retired EV that probes revived (its plane's spare, out of the rotation)
            # and that news of an older packet sent on it still reaches — a timeout, a
            # loss, a SACK's hint: it goes back to being probed; no slot to give up, and
            # not floored by ev_min_active, which counts the EVs sprayed on
            if to is EVState.ASSUMED_BAD:
                e.streak = 0
                self._set(e, to, cause, now)
            return
        if e.plane not in self.down and self.active() - 1 < self.ev_min_active:
            return  # the floor: keep spraying on it
        self._set(e, to, cause, now)
        was_due = self._drop_from_round(e)
        e.sit_out = to is EVState.SKIP and not was_due
        if to is EVState.ASSUMED_BAD:
            e.streak = 0
            self._replace(e, now)

    def _replace(self, e: EVEntry, now: float) -> None:
        """Another EV of the same plane takes the retired one's slot: a spare that probes
        revived (known to work) first, else a fresh value where the profile can make one
        (EXP lists only its own: the slot stays, retired)."""
        i = self.slots.index(e)
        spare = next((r for r in self.retired
                      if r.plane == e.plane and r.state is EVState.GOOD), None)
        if spare is not None:
            self.retired.remove(spare)
            cause = f"spare replaces {e.ev:#x}"
        else:
            if self.profile.mode is EVGenMode.EXP:
                return
            fresh = self.profile.draw(1, self.rng, exclude=list(self.by_ev))
            if not fresh:
                return  # the profile is exhausted: the slot stays, retired
            spare = EVEntry(fresh[0], e.plane)
            self.by_ev[spare.ev] = spare
            cause = f"replaces {e.ev:#x}"
        self.slots[i] = spare
        self.retired.append(e)
        if len(self.retired) > len(self.slots):  # keep as many as the set: forget the oldest
            old = self.retired.pop(0)
            self.by_ev.pop(old.ev, None)
        self._event(now, spare, None, EVState.GOOD, cause)

    def _revive(self, e: EVEntry, now: float) -> None:
        """Probes answered: GOOD again — in its slot, or (retired and replaced) as its
        plane's spare, the first to take the place of the plane's next retired EV."""
        e.streak = 0
        self._set(e, EVState.GOOD, "probes answered", now)

    def _set(self, e: EVEntry, to: EVState, cause: str, now: float,
             event: bool = True) -> None:
        old, e.state = e.state, to
        if event and old is not to:
            self._event(now, e, old, to, cause)

    def _drop_from_round(self, e: EVEntry) -> bool:
        """Take ``e`` out of the current round; whether it was still due in it."""
        if e in self._round:
            self._round.remove(e)
            return True
        return False

    def _event(self, now: float, e: EVEntry, old: EVState | None, new: EVState,
               cause: str) -> None:
        if len(self._events) == self._events.maxlen:
            self.drop_count += 1
        event = EVEvent(now, e.ev, e.plane, old, new, cause)
        self._events.append(event)
        if self.listener is not None:
            self.listener(event)

    def events(self) -> tuple[list[EVEvent], int]:
        """The state changes since the last poll and how many were dropped (then reset)."""
        out, n = list(self._events), self.drop_count
        self._events.clear()
        self.drop_count = 0
        return out, n

    # -- what emu mrc qp shows -----------------------------------------------------------

    def table(self) -> list[dict[str, Any]]:
        """Every EV of the set (then the retired ones): value, plane, state, counters."""
        rows = []
        for e in (*self.slots, *self.retired):
            rows.append({"ev": e.ev, "plane": e.plane, "state": e.state.value,
                         "in_set": e in self.slots, "plane_up": e.plane not in self.down,
                         **e.counts})
        return rows

    def summary(self) -> dict[str, Any]:
        states = {s.value: 0 for s in EVState}
        for e in self.slots:
            states[e.state.value] += 1
        return {"size": len(self.slots), "planes": self.planes, "planes_down":
                sorted(self.down), "active": self.active(), "ev_min_active":
                self.ev_min_active, "states": states, "retired": len(self.retired)}

# SPDX-License-Identifier: GPL-2.0-only
"""The sender's scoreboard: which PSNs are outstanding, and what an ACK releases.

Why here: a sprayed reliable sender keeps the same ledger whatever its wire
format — PSNs handed out in order, each outstanding until an ACK covers it
cumulatively, names it, or marks it in a SACK bitmap; the oldest outstanding
PSN bounds the window (and is UET's CLEAR_PSN); a round trip is sampled only
from a packet sent once (Karn's rule). UET's PDCs keep one; MRC's will.

Records are the transport's own (UET: a request's message, offset, length);
the scoreboard needs only their ``psn``, ``sent_at`` and ``resent``. They are
kept in a dict in PSN order — the order they were sent, since PSNs only grow
— so the oldest is the first key and a cumulative release is a prefix.

Invariant (tested by property): a PSN is outstanding, or released, never
both — each record leaves exactly once, whichever of the three ways comes
first — and only PSNs in ``[start, next_psn)`` are ever outstanding.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from emu.core.psn import PsnSpace
from emu.core.reliable.retransmit import RetransmitQueue
from emu.core.sack import bitmap_runs


class Outstanding(Protocol):
    """What the scoreboard reads of a transport's packet record."""

    psn: int  # extended
    sent_at: float  # last (re)transmission
    resent: bool  # ever retransmitted: its ACK is no RTT sample


P = TypeVar("P", bound=Outstanding)


class Scoreboard(Generic[P]):
    """Outstanding PSNs of one connection (extended integers; ``space`` wraps them).

    ``retx`` holds the PSNs owed a resend (:class:`RetransmitQueue`); a PSN
    released by an ACK leaves it too, so an ACK that overtakes a NACK's delayed
    resend cancels the resend."""

    __slots__ = ("space", "start", "next_psn", "unacked", "retx")

    def __init__(self, space: PsnSpace, start: int) -> None:
        self.space = space
        self.start = start
        self.next_psn = start
        self.unacked: dict[int, P] = {}  # extended PSN → record, in PSN order
        self.retx: RetransmitQueue[int] = RetransmitQueue()

    def __len__(self) -> int:
        return len(self.unacked)

    def restart(self, start: int) -> None:
        """Forget everything and hand out PSNs from ``start`` again (a new incarnation)."""
        self.start = self.next_psn = start
        self.unacked.clear()
        self.retx.clear()

    def clear(self) -> None:
        """Nothing is outstanding any more (the connection ended)."""
        self.unacked.clear()
        self.retx.clear()

    @property
    def oldest(self) -> int:
        """The oldest outstanding extended PSN, or ``next_psn`` when none is."""
        for p in self.unacked:
            return p
        return self.next_psn

    @property
    def span(self) -> int:
        """PSNs from the oldest outstanding to the next to send: what a window limits."""
        for p in self.unacked:
            return self.next_psn - p
        return 0

    def ext(self, wire_psn: int) -> int:
        """Unwrap a wire PSN against the sending position."""
        return self.space.unwrap(wire_psn, self.next_psn)

    def sent(self, psn: int) -> bool:
        """Whether extended ``psn`` was handed out (may be named by an ACK or NACK)."""
        return self.start <= psn < self.next_psn

    def take(self, k: int) -> int:
        """Hand out ``k`` consecutive PSNs; returns the first (records: :meth:`track`)."""
        first = self.next_psn
        self.next_psn = first + k
        return first

    def track(self, pkt: P) -> None:
        """``pkt`` (at a PSN :meth:`take` handed out, in order) is outstanding."""
        self.unacked[pkt.psn] = pkt

    # -- release -----------------------------------------------------------------

    def ack_through(self, cack: int) -> list[P]:
        """Release every outstanding PSN up to and including ``cack`` (a cumulative ACK),
        oldest first."""
        unacked = self.unacked
        out = []
        for p in list(unacked):  # PSN order: a prefix
            if p > cack:
                break
            out.append(unacked.pop(p))
        if out and self.retx.later:
            for pkt in out:
                self.retx.forget(pkt.psn)
        return out

    def ack(self, psn: int) -> P | None:
        """Release extended ``psn`` if outstanding (an ACK naming it)."""
        pkt = self.unacked.pop(psn, None)
        if pkt is not None and self.retx.later:
            self.retx.forget(psn)
        return pkt

    def sack(self, base: int, bitmap: int) -> list[P]:
        """Release every outstanding PSN a SACK bitmap marks (bit i = extended ``base + i``),
        lowest first."""
        out = []
        for off, n in bitmap_runs(bitmap):
            for k in range(base + off, base + off + n):
                pkt = self.ack(k)
                if pkt is not None:
                    out.append(pkt)
        return out

    def round_trip(self, psn: int, now: float) -> float | None:
        """The round trip an ACK of extended ``psn`` at ``now`` measures, or None: not
        outstanding, or retransmitted (Karn's rule: which copy was ACKed is unknown)."""
        pkt = self.unacked.get(psn)
        if pkt is None or pkt.resent:
            return None
        return now - pkt.sent_at

    def go_back(self, psn: int) -> int:
        """Owe a resend, at once and in PSN order, of every outstanding PSN from extended
        ``psn`` on (the receiver dropped them: an ordered stream's hole); PSNs already
        owed one at once are not doubled, delayed ones are brought forward. Returns how
        many were added."""
        retx = self.retx
        n = 0
        for p in self.unacked:
            if p >= psn and retx.at_once(p):
                retx.later.pop(p, None)
                n += 1
        return n

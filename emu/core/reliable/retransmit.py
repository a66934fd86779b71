# SPDX-License-Identifier: GPL-2.0-only
"""Retransmission bookkeeping: what is owed a resend, and what a timeout expired.

Why here: a reliable sender resends for two reasons — a NACK (at once for a
trimmed packet, after a short delay otherwise, so a reordered packet can
still arrive) and a retransmission timeout — and every sender (UET's PDCs,
its PDC-less RUDI packets, MRC's connections) keeps the same two queues and
scans its records the same way when the timer fires. Keys are whatever names
a packet: an extended PSN, RUDI's packet id.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)


class RetransmitQueue(Generic[K]):
    """Packets owed a resend: ``now`` (in order, each key once) and ``later`` (key → not
    before).

    A key already owed at once is not owed twice: two NACKs for one packet that
    arrive in the same batch (a receiver that saw two trimmed copies of it says
    so twice) ask for one resend, not two back to back — measured in a two-sender
    incast through a trimming port, the second copy was trimmed in turn, drew its
    own NACK, and the pair repeated for the rest of the message."""

    __slots__ = ("now", "later", "_owed")

    def __init__(self) -> None:
        self.now: deque[K] = deque()
        self.later: dict[K, float] = {}
        self._owed: set[K] = set()

    def __bool__(self) -> bool:
        """Whether a resend is owed at once."""
        return bool(self.now)

    def at_once(self, key: K) -> bool:
        """Owe ``key`` a resend now; False if it already was (nothing changes)."""
        if key in self._owed:
            return False
        self._owed.add(key)
        self.now.append(key)
        return True

    def owes(self, key: K) -> bool:
        """Whether ``key`` is owed a resend, at once or delayed."""
        return key in self._owed or key in self.later

    def pop(self) -> K:
        """The oldest key owed a resend at once (the caller resends it now)."""
        key = self.now.popleft()
        self._owed.discard(key)
        return key

    def after(self, key: K, at: float) -> None:
        """Resend ``key`` once the clock reaches ``at`` (:meth:`release_due` moves it)."""
        self.later[key] = at

    def forget(self, key: K) -> None:
        """``key`` needs no delayed resend any more (acknowledged, or its message ended)."""
        self.later.pop(key, None)

    def clear(self) -> None:
        self.now.clear()
        self.later.clear()
        self._owed.clear()

    def release_due(self, now: float) -> float | None:
        """Move the delayed keys whose time has come onto :attr:`now`, in the order they
        were delayed; return the earliest time still pending (to re-arm the timer), or
        None."""
        later = self.later
        nxt = None
        for k, t in list(later.items()):
            if t <= now:
                del later[k]
                self.at_once(k)
            elif nxt is None or t < nxt:
                nxt = t
        return nxt


class Timed(Protocol):
    sent_at: float  # last (re)transmission


T = TypeVar("T", bound=Timed)


def expired(records: Iterable[T], now: float, rto: float) -> tuple[list[T], float | None]:
    """The records whose timeout has passed at ``now`` (sent ``rto`` or more ago), in
    the given order, and the earliest deadline of the others (None: none left).

    The caller resends each (or gives up after its retries) and re-arms its timer
    at the earlier of that deadline and ``now + rto``."""
    due = []
    nxt: float | None = None
    for r in records:
        d = r.sent_at + rto
        if d > now:
            if nxt is None or d < nxt:
                nxt = d
        else:
            due.append(r)
    return due, nxt

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
    """Packets owed a resend: ``now`` (in order) and ``later`` (key → not before)."""

    __slots__ = ("now", "later")

    def __init__(self) -> None:
        self.now: deque[K] = deque()
        self.later: dict[K, float] = {}

    def __bool__(self) -> bool:
        """Whether a resend is owed at once."""
        return bool(self.now)

    def at_once(self, key: K) -> None:
        self.now.append(key)

    def after(self, key: K, at: float) -> None:
        """Resend ``key`` once the clock reaches ``at`` (:meth:`release_due` moves it)."""
        self.later[key] = at

    def forget(self, key: K) -> None:
        """``key`` needs no delayed resend any more (acknowledged, or its message ended)."""
        self.later.pop(key, None)

    def clear(self) -> None:
        self.now.clear()
        self.later.clear()

    def release_due(self, now: float) -> float | None:
        """Move the delayed keys whose time has come onto :attr:`now`, in the order they
        were delayed; return the earliest time still pending (to re-arm the timer), or
        None."""
        later = self.later
        nxt = None
        for k, t in list(later.items()):
            if t <= now:
                del later[k]
                self.now.append(k)
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

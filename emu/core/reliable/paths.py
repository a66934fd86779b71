# SPDX-License-Identifier: GPL-2.0-only
"""Per-path (entropy) state of one sender: which entropy and time each PSN left with.

Why here: a sprayed sender's path policy (:mod:`emu.paths`) and congestion
controller (:mod:`emu.cc`) learn from the same facts whatever the
transport — which path a released, NACKed or timed-out PSN took, how many
bytes are in flight, how many an ACK released and the round trip of the
newest of them. UET keeps one ledger per PDC (``transports/uet/flowctl.py``);
MRC's EV scoreboard will read the same ledger.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Released(Protocol):
    """What the ledger reads of a released packet record."""

    psn: int
    length: int


class PathLedger:
    """Entropy and send time per outstanding data PSN, bytes in flight, and the
    feedback collected since the last ACK was reported (:meth:`feedback`)."""

    __slots__ = ("sent", "in_flight", "acked_bytes", "newest_sent", "released_ents")

    def __init__(self, keep_entropies: bool = False) -> None:
        self.sent: dict[int, tuple[int, float]] = {}  # ext PSN → (entropy, sent at)
        self.in_flight = 0  # bytes of data packets sent and not yet released
        self.acked_bytes = 0  # released since the last feedback()
        self.newest_sent: float | None = None  # send time of the newest of them
        #: with ``keep_entropies``, the entropies of those, oldest first (None: not kept —
        #: only a path policy that learns from every released packet wants them)
        self.released_ents: list[int] | None = [] if keep_entropies else None

    def reset(self) -> None:
        """Nothing is in flight (packets dropped without an ACK: a restart)."""
        self.in_flight = 0
        self.sent.clear()
        if self.released_ents:
            self.released_ents = []

    def sent_many(self, psn: int, ents: list[int], nbytes: int, now: float) -> None:
        """Data packets of ``nbytes`` each at PSNs ``psn, psn + 1, …`` left on ``ents``."""
        sent = self.sent
        for i, e in enumerate(ents):
            sent[psn + i] = (e, now)
        self.in_flight += len(ents) * nbytes

    def resent(self, psn: int, entropy: int, now: float) -> int | None:
        """``psn`` left again on ``entropy``; returns the entropy it had before, if any."""
        old = self.sent.get(psn)
        self.sent[psn] = (entropy, now)
        return None if old is None else old[0]

    def released(self, pkts: Iterable[Released]) -> None:
        """Packets an ACK released: out of flight, into the ACK's feedback."""
        sent = self.sent
        newest = self.newest_sent
        ents = self.released_ents
        for pkt in pkts:
            s = sent.pop(pkt.psn, None)
            if s is None:
                continue
            n = pkt.length
            self.in_flight -= n
            self.acked_bytes += n
            if newest is None or s[1] > newest:
                newest = s[1]
            if ents is not None:
                ents.append(s[0])
        self.newest_sent = newest

    def feedback(self, now: float) -> tuple[int, float | None]:
        """``(bytes released, round trip of the newest of them)`` since the last call —
        what one ACK tells the path policy and the controller — and start afresh
        (:attr:`released_ents` is the caller's to take: :meth:`take_entropies`)."""
        rtt = None if self.newest_sent is None else now - self.newest_sent
        n = self.acked_bytes
        self.acked_bytes = 0
        self.newest_sent = None
        return n, rtt

    def take_entropies(self) -> list[int]:
        """The entropies of the packets released since the last call (empty when they
        are not kept), and start afresh."""
        ents = self.released_ents
        if not ents:
            return []
        self.released_ents = []
        return ents

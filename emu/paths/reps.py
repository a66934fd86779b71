# SPDX-License-Identifier: GPL-2.0-only
"""``reps``: Recycled Entropy Packet Spraying.

Idea (uet.md: Spraying; the REPS proposal for UEC): an ACK that comes back
*unmarked* says the path its entropy hashed onto is fine right now, so the
next packet should reuse that entropy; an entropy whose ACK carried ECN (or
that drew a NACK, or timed out) should be left alone for a while. Only when
nothing good is waiting does the sender *explore* a random entropy. The
state is tiny — a FIFO of entropies to recycle and a ban time per penalised
entropy — which is why it suits a NIC.

Our rules (learned from the htsim UEC model's behaviour, written anew):

* :meth:`Reps.on_ack` without ECN appends the entropy to the recycle FIFO
  (oldest dropped beyond ``capacity``), so each good ACK "pays for" one
  future packet on that path.
* :meth:`Reps.choose` pops the FIFO's head (a *recycle*); when the FIFO is
  empty it *explores*: a uniformly random entropy among those not banned
  (all of them if every entropy is banned, so sending never stalls).
* ECN-marked ACK, any NACK, and a loss (a timeout, or a packet the ACKs of later
  ones showed missing; counted as ``timeout``) *penalise*: every queued copy of
  that entropy is forgotten and it is banned from exploration for
  ``penalty`` seconds. After the ban it is an ordinary candidate again —
  a path that was congested for a moment recovers on its own.

``penalty`` defaults to 200 µs, a few round trips on the emulated fabric
(the in-memory link in tests has ~10 µs RTTs, veth pairs through Python
daemons 50–200 µs); set it to a handful of RTTs of the fabric in use.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from emu.core.psn import RandomBits
from emu.paths import PathPolicy, register


@register
class Reps(PathPolicy):
    """Reuse entropies whose ACKs came back unmarked; explore otherwise; penalise on
    ECN, NACK and timeout (see the module docstring)."""

    name = "reps"

    def __init__(self, entropies: Sequence[int], rng: RandomBits, now: float = 0.0, *,
                 capacity: int = 256, penalty: float = 200e-6) -> None:
        super().__init__(entropies, rng, now)
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if penalty < 0:
            raise ValueError("penalty must be >= 0 seconds")
        self.capacity = int(capacity)
        self.penalty = float(penalty)
        self._known = frozenset(self.entropies)
        self._fifo: deque[int] = deque()
        self._banned: dict[int, float] = {}  # entropy → banned until (exclusive)
        self.counts.update(recycled=0, explored=0, good=0, ecn=0, nack=0, timeout=0,
                           unknown=0)

    # -- choosing -----------------------------------------------------------------------

    def choose(self, now: float) -> int:
        self.counts["chosen"] += 1
        fifo = self._fifo
        while fifo:
            e = fifo.popleft()
            if not self._is_banned(e, now):
                self.counts["recycled"] += 1
                return e
        self.counts["explored"] += 1
        return self._random(self._candidates(now))

    def _is_banned(self, e: int, now: float) -> bool:
        until = self._banned.get(e)
        if until is None:
            return False
        if now >= until:
            del self._banned[e]
            return False
        return True

    def _candidates(self, now: float) -> Sequence[int]:
        """Entropies not banned at ``now`` (expired bans are dropped on the way)."""
        if not self._banned:
            return self.entropies
        for e in [e for e, t in self._banned.items() if now >= t]:
            del self._banned[e]
        pool = [e for e in self.entropies if e not in self._banned]
        return pool or self.entropies

    # -- feedback -------------------------------------------------------------------------

    def _mine(self, entropy: int) -> bool:
        if entropy in self._known:
            return True
        self.counts["unknown"] += 1  # e.g. a reply from a port we never used: ignore it
        return False

    def on_ack(self, entropy: int, now: float, *, ecn: bool = False,
               rtt: float | None = None) -> None:
        if not self._mine(entropy):
            return
        if ecn:
            self.counts["ecn"] += 1
            self._penalise(entropy, now)
            return
        self.counts["good"] += 1
        if self._is_banned(entropy, now):
            return  # an old packet's ACK: the path was marked since, keep the ban
        self._fifo.append(entropy)
        if len(self._fifo) > self.capacity:
            self._fifo.popleft()

    def on_nack(self, entropy: int, now: float, *, trimmed: bool = False) -> None:
        if self._mine(entropy):
            self.counts["nack"] += 1
            self._penalise(entropy, now)

    def on_timeout(self, entropy: int, now: float) -> None:
        if self._mine(entropy):
            self.counts["timeout"] += 1
            self._penalise(entropy, now)

    def _penalise(self, entropy: int, now: float) -> None:
        if entropy in self._fifo:
            self._fifo = deque(e for e in self._fifo if e != entropy)
        self._banned[entropy] = max(self._banned.get(entropy, now), now + self.penalty)

    # -- introspection ----------------------------------------------------------------------

    def banned(self, now: float) -> list[int]:
        """Entropies banned from exploration at ``now``."""
        return [e for e, t in self._banned.items() if now < t]

    def state(self) -> dict[str, Any]:
        return {**super().state(), "queued": len(self._fifo), "banned": len(self._banned)}

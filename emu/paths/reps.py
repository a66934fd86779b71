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
  future packet on that path — and, where one ACK answers several packets
  (the 16 KiB rule, coalescing), each packet it released pays for one on its
  own path: a target ACKs a CE-marked packet at once, so the packets a
  coalesced ACK released all arrived unmarked (with ECN, all but the one it
  answers). Why: recycling only the echoed entropy refilled the FIFO with one
  entropy per ACK, so with an ACK per four packets three in four *explored*;
  over 8 entropies exploration soon found only the unbanned ones, but over
  4096 nearly every explored entropy is new, and a flow kept ~20 % of its
  packets on a congested spine of four (oblivious: 25 %) instead of ~4 %.
* :meth:`Reps.choose` pops the FIFO's head (a *recycle*); when the FIFO is
  empty it *explores*: a uniformly random entropy among those not banned
  (all of them if every entropy is banned, so sending never stalls).
* ECN-marked ACK, any NACK, and a loss (a timeout, or a packet the ACKs of later
  ones showed missing; counted as ``timeout``) *penalise*: every queued copy of
  that entropy is forgotten and it is banned from exploration for
  ``penalty`` seconds. After the ban it is an ordinary candidate again —
  a path that was congested for a moment recovers on its own.

Over a large set (UET's default: 4096 entropies) exploring almost always
picks an entropy the flow has not used lately — a path it knows nothing bad
about, which is what exploring is for; the good ones it learned stay in the
FIFO, so a large set changes how widely REPS looks, not what it reuses. An
exploration costs the same whatever the set's size: it draws among the
entropies not banned without listing them (:meth:`Reps._explore`), so a
flow over 4096 entropies never walks them per packet.

``penalty`` defaults to 200 µs, a few round trips on the emulated fabric
(the in-memory link in tests has ~10 µs RTTs, veth pairs through Python
daemons 50–200 µs); set it to a handful of RTTs of the fabric in use.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Sequence
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
        ents = self.entropies
        #: membership of the set (a range answers it itself, in constant memory)
        self._known: Container[int] = ents if isinstance(ents, range) else frozenset(ents)
        #: an entropy's index in the set (for a tuple: made on the first ban)
        self._pos: dict[int, int] | None = None
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
        return self._explore(now)

    def _is_banned(self, e: int, now: float) -> bool:
        until = self._banned.get(e)
        if until is None:
            return False
        if now >= until:
            del self._banned[e]
            return False
        return True

    def _explore(self, now: float) -> int:
        """A uniformly random entropy among those not banned at ``now`` (all of them if
        every one is banned), expired bans dropped on the way.

        What drawing from the list of unbanned entropies would give — the same random
        bits, the same member — without making that list: the draw ``r`` is an index
        among the unbanned, and walking the banned ones' indices in order shifts it
        past each banned entropy at or below it. That costs the number of bans, not the
        size of the set (4096 by default, and one policy per PDC)."""
        ents = self.entropies
        banned = self._banned
        if banned:
            for e in [e for e, t in banned.items() if now >= t]:
                del banned[e]
        if not banned or len(banned) >= len(ents):
            return self._random(ents)
        r = self.rng.getrandbits(self.bits) % (len(ents) - len(banned))
        for i in sorted(map(self._index, banned)):
            if i > r:
                break
            r += 1
        return ents[r]

    def _index(self, e: int) -> int:
        ents = self.entropies
        if isinstance(ents, range):
            return ents.index(e)
        if self._pos is None:
            self._pos = {x: i for i, x in enumerate(ents)}
        return self._pos[e]

    # -- feedback -------------------------------------------------------------------------

    def _mine(self, entropy: int) -> bool:
        if entropy in self._known:
            return True
        self.counts["unknown"] += 1  # e.g. a reply from a port we never used: ignore it
        return False

    #: the engine hands over the entropies of every packet an ACK released
    wants_released = True

    def on_ack(self, entropy: int, now: float, *, ecn: bool = False,
               rtt: float | None = None, released: Sequence[int] = ()) -> None:
        if not self._mine(entropy):
            return
        if ecn:
            self.counts["ecn"] += 1
            self._penalise(entropy, now)
        else:
            self.counts["good"] += 1
        # each packet the ACK vouches for pays for one more on its path (the module
        # docstring); an ACK that released nothing (a duplicate's) for its own
        good = [e for e in released if e != entropy] if ecn else (released or (entropy,))
        fifo = self._fifo
        for e in good:
            if not self._is_banned(e, now):  # else marked since: keep the ban
                fifo.append(e)
        while len(fifo) > self.capacity:
            fifo.popleft()

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

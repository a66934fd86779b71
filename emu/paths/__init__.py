# SPDX-License-Identifier: GPL-2.0-only
"""Path-choice plug-ins (which entropy each packet carries) behind one small ABC.

Why: in a sprayed transport the sender picks the path per packet by picking
the *entropy* — for UET over UDP, the UDP source port the switches hash
(uet.md: Encapsulation, Spraying). How to pick is a policy separate from
reliability and congestion control: pinned ECMP (``"fixed"``), oblivious
spraying (``"oblivious"``), REPS (``"reps"``), and later MRC's EV scoreboard.
Engines hold one policy per flow, call :meth:`PathPolicy.choose` for every
data packet, and report what came back on that entropy (ACK with or without
ECN, NACK, timeout) — replies echo the entropy of the packet they answer, so
feedback is per path.

Same sans-IO rule as :mod:`emu.cc`: no clocks or randomness are imported;
``now`` is passed to every call and the caller injects the RNG (anything
with ``getrandbits``, e.g. ``random.Random``), so a seeded test reproduces
every choice.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from emu.core.psn import RandomBits
from emu.core.registry import Registry


class PathPolicy(ABC):
    """One flow's path chooser over a fixed set of entropies.

    ``entropies`` are the values the flow may use (UDP source ports 1..65535
    for UET; the policy does not interpret them); ``rng`` is the injected RNG.
    """

    name: ClassVar[str] = ""

    def __init__(self, entropies: Sequence[int], rng: RandomBits, now: float = 0.0) -> None:
        ents = tuple(int(e) for e in entropies)
        if not ents:
            raise ValueError("need at least one entropy")
        if len(set(ents)) != len(ents):
            raise ValueError("entropies must be distinct")
        if any(not 0 <= e < 1 << 32 for e in ents):
            raise ValueError("entropies must be 0 .. 2^32-1")
        self.entropies = ents
        self.rng = rng
        self.counts: dict[str, int] = {"chosen": 0}

    def _random(self, pool: Sequence[int]) -> int:
        """A uniformly random member of ``pool`` (the draw oblivious spraying has always
        made: 16 random bits modulo the pool size)."""
        return pool[self.rng.getrandbits(16) % len(pool)]

    @abstractmethod
    def choose(self, now: float) -> int:
        """The entropy for the next data packet."""

    def choose_many(self, now: float, k: int) -> list[int]:
        """The entropies of the next ``k`` data packets, sent at once (a run): what ``k``
        calls of :meth:`choose` return; a policy may do it in one go."""
        choose = self.choose
        return [choose(now) for _ in range(k)]

    def on_ack(self, entropy: int, now: float, *, ecn: bool = False,  # noqa: B027
               rtt: float | None = None) -> None:
        """An ACK for a packet sent on ``entropy`` came back (``ecn``: its M bit)."""

    def on_nack(self, entropy: int, now: float, *, trimmed: bool = False) -> None:  # noqa: B027
        """A NACK came back on ``entropy`` (``trimmed``: a trimming NACK)."""

    def on_timeout(self, entropy: int, now: float) -> None:  # noqa: B027 (optional hook)
        """A packet sent on ``entropy`` was lost: its RTO fired, or the ACKs of packets
        sent after it showed it missing (``Scoreboard.presumed_lost``)."""

    def state(self) -> dict[str, Any]:
        """Numbers for counters, traces and tests."""
        return {"name": self.name, "entropies": len(self.entropies), **self.counts}


_PLUGINS: Registry[PathPolicy] = Registry("path policy", lambda: _load_builtins())
register = _PLUGINS.register
available = _PLUGINS.available


def create(name: str, entropies: Sequence[int], rng: RandomBits, now: float = 0.0,
           **params: Any) -> PathPolicy:
    """A new policy by name; unknown names and parameters raise ValueError."""
    return _PLUGINS.build(name, entropies, rng, now, **params)


def _load_builtins() -> None:
    from emu.paths import fixed, flowlet, oblivious, reps  # noqa: F401  (register themselves)

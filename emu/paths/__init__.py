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

#: the largest set a draw takes 16 random bits for, unless its size divides 2^16
#: (:attr:`PathPolicy.bits`)
DRAW16_MAX = 1 << 12


def entropy_set(entropies: Sequence[int]) -> Sequence[int]:
    """``entropies`` checked (not empty, distinct, 0 .. 2^32-1) and made immutable: a
    ``range`` stays a ``range``, anything else becomes a tuple.

    Why keep a range: UET's default set is 4096 consecutive source ports, and every flow
    (every PDC) gets a policy over it. A range answers ``len``, indexing and ``in`` in
    constant time and memory; a tuple of 4096 ints would cost each new flow ~32 KiB and
    its checks a pass over the set."""
    if isinstance(entropies, range):
        ents: Sequence[int] = entropies
        if not ents:
            raise ValueError("need at least one entropy")
        lo, hi = min(ents[0], ents[-1]), max(ents[0], ents[-1])  # a range is distinct
        if lo < 0 or hi >= 1 << 32:
            raise ValueError("entropies must be 0 .. 2^32-1")
        return ents
    tup = tuple(int(e) for e in entropies)
    if not tup:
        raise ValueError("need at least one entropy")
    if len(set(tup)) != len(tup):
        raise ValueError("entropies must be distinct")
    if any(not 0 <= e < 1 << 32 for e in tup):
        raise ValueError("entropies must be 0 .. 2^32-1")
    return tup


class PathPolicy(ABC):
    """One flow's path chooser over a fixed set of entropies.

    ``entropies`` are the values the flow may use (UDP source ports 1..65535
    for UET; the policy does not interpret them; a ``range`` is kept as one, see
    :func:`entropy_set`); ``rng`` is the injected RNG.

    The set may be large — UET's default is 4096 source ports, as a NIC spraying over
    the 16-bit entropy field would use — so no policy may walk it per packet: each
    choice costs the same whatever its size (:meth:`_random` is one draw and one index).
    """

    name: ClassVar[str] = ""
    #: whether :meth:`on_ack` wants ``released``, the entropies of every packet an ACK
    #: released (the engine collects them only for a policy that asks)
    wants_released: ClassVar[bool] = False

    def __init__(self, entropies: Sequence[int], rng: RandomBits, now: float = 0.0) -> None:
        self.entropies = entropy_set(entropies)
        self.rng = rng
        #: random bits a draw takes: the 16 oblivious spraying has always drawn (so seeded
        #: runs keep their entropies), 32 for a set above 4096 whose size does not divide
        #: 2^16, where 16 bits modulo it would favour some entropies by up to 2:1 (RoCEv2's
        #: 16384 source ports divide it: their draws are exact, and unchanged)
        n = len(self.entropies)
        self.bits = 16 if n <= DRAW16_MAX or (1 << 16) % n == 0 else 32
        self.counts: dict[str, int] = {"chosen": 0}

    def _random(self, pool: Sequence[int]) -> int:
        """A uniformly random member of ``pool``: :attr:`bits` random bits modulo its size
        — exactly uniform for UET's default 4096 (a power of two); for another size the
        most favoured member is drawn at most 1/16 more often than the least."""
        return pool[self.rng.getrandbits(self.bits) % len(pool)]

    @abstractmethod
    def choose(self, now: float) -> int:
        """The entropy for the next data packet."""

    def choose_many(self, now: float, k: int) -> list[int]:
        """The entropies of the next ``k`` data packets, sent at once (a run): what ``k``
        calls of :meth:`choose` return; a policy may do it in one go."""
        choose = self.choose
        return [choose(now) for _ in range(k)]

    def on_ack(self, entropy: int, now: float, *, ecn: bool = False,  # noqa: B027
               rtt: float | None = None, released: Sequence[int] = ()) -> None:
        """An ACK for a packet sent on ``entropy`` came back (``ecn``: its M bit).
        ``released``: the entropies of the packets it released (newly ACKed or SACKed,
        oldest first) for a policy with :attr:`wants_released`, else empty. A target
        ACKs a CE-marked packet at once, so the packets a coalesced ACK released before
        the one it answers all arrived unmarked."""

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

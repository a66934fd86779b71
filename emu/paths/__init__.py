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

_REGISTRY: dict[str, type[PathPolicy]] = {}


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

    def on_ack(self, entropy: int, now: float, *, ecn: bool = False,  # noqa: B027
               rtt: float | None = None) -> None:
        """An ACK for a packet sent on ``entropy`` came back (``ecn``: its M bit)."""

    def on_nack(self, entropy: int, now: float, *, trimmed: bool = False) -> None:  # noqa: B027
        """A NACK came back on ``entropy`` (``trimmed``: a trimming NACK)."""

    def on_timeout(self, entropy: int, now: float) -> None:  # noqa: B027 (optional hook)
        """A packet sent on ``entropy`` timed out (RTO)."""

    def state(self) -> dict[str, Any]:
        """Numbers for counters, traces and tests."""
        return {"name": self.name, "entropies": len(self.entropies), **self.counts}


def register(cls: type[PathPolicy]) -> type[PathPolicy]:
    """Class decorator: make ``cls`` available as :func:`create` ``(cls.name, …)``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"path policy {cls.name!r} already registered")
    _REGISTRY[cls.name] = cls
    return cls


def available() -> list[str]:
    """Registered names (importing the built-in modules first)."""
    _load_builtins()
    return sorted(_REGISTRY)


def create(name: str, entropies: Sequence[int], rng: RandomBits, now: float = 0.0,
           **params: Any) -> PathPolicy:
    """A new policy by name; unknown names and parameters raise ValueError."""
    _load_builtins()
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown path policy {name!r}; have {sorted(_REGISTRY)}") from None
    try:
        return cls(entropies, rng, now, **params)
    except TypeError as e:
        raise ValueError(f"{name}: {e}") from None


def _load_builtins() -> None:
    from emu.paths import fixed, oblivious, reps  # noqa: F401  (register themselves)

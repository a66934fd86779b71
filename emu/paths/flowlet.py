# SPDX-License-Identifier: GPL-2.0-only
"""``flowlet``: a new entropy after an idle gap — switch dynamic load balancing, done at
the NIC.

Why (Kandula et al., "Dynamic load balancing without packet reordering", CCR 2007;
CONGA, SIGCOMM 2014; LetFlow, NSDI 2017): a flow's packets sent back to back must keep
one path, or they arrive out of order; but after a pause longer than the difference
between the paths' delays, the next burst — a *flowlet* — may take any path without
overtaking the last one. Switches that do this re-hash flowlets onto less loaded
uplinks; a NIC can do the same by changing the entropy it puts in the header (the UDP
source port the switches hash), which works for an in-order transport (RoCEv2) as for a
sprayed one. LetFlow showed that even a *random* new path per flowlet balances load,
because congested paths slow their flowlets down and so make them longer: what this
policy does, drawing each flowlet's entropy uniformly from the whole set (UET's 4096 by
default: a new flowlet almost never reuses a recent one, so consecutive flowlets hash
independently, as LetFlow's random choice assumes). ``gap`` (fabric seconds) defaults
to 10 µs, a few base round trips of a 400 Gb/s leaf-spine (~6.6 µs) — short enough to
find flowlets in bursty traffic, long enough that the previous flowlet's packets have
left the fabric.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emu.core.psn import RandomBits
from emu.paths import PathPolicy, register

#: the default idle gap (fabric s) after which the next packet starts a new flowlet
GAP = 10e-6


@register
class Flowlet(PathPolicy):
    """One entropy per flowlet: kept while packets follow each other within ``gap``,
    redrawn (another one, where there is another) after a longer pause."""

    name = "flowlet"

    def __init__(self, entropies: Sequence[int], rng: RandomBits, now: float = 0.0, *,
                 gap: float = GAP, entropy: int | None = None) -> None:
        super().__init__(entropies, rng, now)
        if not gap > 0:
            raise ValueError(f"flowlet gap must be > 0 s, got {gap!r}")
        if entropy is not None and entropy not in self.entropies:
            raise ValueError(f"entropy {entropy} is not in the flow's set")
        self.gap = float(gap)
        #: the first flowlet's entropy: ``entropy`` (a RoCEv2 QP's own source port), or drawn
        self.entropy = self._random(self.entropies) if entropy is None else entropy
        self.last: float | None = None  # when the last packet was chosen a path
        self.counts.update(flowlets=1)

    def _next(self, now: float) -> int:
        if self.last is not None and now - self.last > self.gap:
            e = self.entropy
            while e == self.entropy and len(self.entropies) > 1:  # another path, if any
                e = self._random(self.entropies)
            self.entropy = e
            self.counts["flowlets"] += 1
        self.last = now
        return self.entropy

    def choose(self, now: float) -> int:
        self.counts["chosen"] += 1
        return self._next(now)

    def choose_many(self, now: float, k: int) -> list[int]:
        self.counts["chosen"] += k
        return [self._next(now)] * k if k > 0 else []

    def state(self) -> dict[str, Any]:
        return {**super().state(), "entropy": self.entropy, "gap": self.gap}

# SPDX-License-Identifier: GPL-2.0-only
"""``oblivious``: a fresh uniformly random entropy for every packet.

The UET engine's default (uet.md: Spraying — entropy per packet). It ignores
feedback on purpose: it is the load-balancing baseline that needs no state,
and it spreads a single flow evenly over every ECMP path. The draw is 16
random bits modulo the set size, exactly what the engine did before path
policies existed, so seeded runs produce the same entropies as before.
"""

from __future__ import annotations

from emu.paths import PathPolicy, register


@register
class Oblivious(PathPolicy):
    """Random entropy per packet; feedback does not influence the choice."""

    name = "oblivious"

    def choose(self, now: float) -> int:
        self.counts["chosen"] += 1
        return self._random(self.entropies)

    def choose_many(self, now: float, k: int) -> list[int]:
        """``k`` draws of :meth:`choose` in one loop (the same random bits, in order)."""
        self.counts["chosen"] += k
        ents, bits = self.entropies, self.rng.getrandbits
        n = len(ents)
        return [ents[bits(16) % n] for _ in range(k)]

# SPDX-License-Identifier: GPL-2.0-only
"""``oblivious``: a fresh uniformly random entropy for every packet.

The UET engine's default (uet.md: Spraying — entropy per packet). It ignores
feedback on purpose: it is the load-balancing baseline that needs no state,
and it spreads a single flow evenly over every ECMP path. It draws from the
*whole* set, whatever its size. Why the size matters: the switches' ECMP hash
maps each entropy to one uplink, so a flow's long-run share of an uplink is
the share of its *set* the hash sends there. Over UET's default 4096 entropies
that share is within a few % of even (4 uplinks: a standard deviation of 2.7 %
of the mean); over the 64 the engine once had it was 22 %, and a leaf's four
flows left its spines up to 25 % apart however long they ran. The draw is 16
random bits modulo the set size (:meth:`~emu.paths.PathPolicy._random`),
what the engine did before path policies existed, so a seeded run over a
given set draws the same entropies as before.
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
        ents, bits, b = self.entropies, self.rng.getrandbits, self.bits
        n = len(ents)
        return [ents[bits(b) % n] for _ in range(k)]

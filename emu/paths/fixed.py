# SPDX-License-Identifier: GPL-2.0-only
"""``fixed``: one entropy for the whole flow — classic per-flow ECMP.

The baseline sprayed flows are compared against (issue 6's bench: a sprayed
flow versus the same flow pinned to one entropy). The entropy is
``entropy`` if given (it must be one of the set), else a random member of
the set drawn once at creation, so many pinned flows still hash apart as
they would with per-flow ECMP. The set's size changes nothing but that first
draw: over UET's default 4096 entropies two pinned flows rarely share a
source port, as two flows of a host rarely share one under per-flow ECMP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emu.core.psn import RandomBits
from emu.paths import PathPolicy, register


@register
class Fixed(PathPolicy):
    """Always the same entropy; feedback is counted but changes nothing."""

    name = "fixed"

    def __init__(self, entropies: Sequence[int], rng: RandomBits, now: float = 0.0, *,
                 entropy: int | None = None) -> None:
        super().__init__(entropies, rng, now)
        if entropy is None:
            entropy = self._random(self.entropies)
        elif entropy not in self.entropies:
            raise ValueError(f"entropy {entropy} is not in the flow's set")
        self.entropy = entropy
        self.counts.update(ecn=0, nack=0, timeout=0)

    def choose(self, now: float) -> int:
        self.counts["chosen"] += 1
        return self.entropy

    def on_ack(self, entropy: int, now: float, *, ecn: bool = False,
               rtt: float | None = None, released: Sequence[int] = ()) -> None:
        if ecn:
            self.counts["ecn"] += 1

    def on_nack(self, entropy: int, now: float, *, trimmed: bool = False) -> None:
        self.counts["nack"] += 1

    def on_timeout(self, entropy: int, now: float) -> None:
        self.counts["timeout"] += 1

    def state(self) -> dict[str, Any]:
        return {**super().state(), "entropy": self.entropy}

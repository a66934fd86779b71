# SPDX-License-Identifier: GPL-2.0-only
"""Receive-side ordering: an in-order delivery buffer and out-of-order placement.

Two delivery disciplines appear across the transports:

* **In-order** (RoCE RC go-back-N with a window of 1, UET ROD, MRC Write with
  Immediate completing by MSN): packets may arrive in any order within a
  window, but the upper layer must see exactly the PSN sequence.
  :class:`ReorderBuffer` holds early arrivals and releases the in-order prefix.
* **Out-of-order placement** (UET RUD, MRC WRITE with a RETH in every packet):
  each packet's bytes go straight to their offset in the target buffer; the
  message completes when every byte has been placed. :class:`PlacementTracker`
  counts coverage per message — it never touches the bytes, the caller writes
  them (see :mod:`emu.core.memory`).

Both report duplicates and out-of-range input as values, not exceptions:
they are ordinary events on a lossy, retransmitting network.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Hashable
from typing import Generic, NamedTuple, TypeVar

from emu.core.psn import PsnSpace
from emu.core.sack import merge_interval

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class Verdict(enum.Enum):
    """What :meth:`ReorderBuffer.accept` did with a packet."""

    ACCEPTED = "accepted"  # new, in window: buffered or delivered
    DUPLICATE = "duplicate"  # already delivered, or already buffered
    OUT_OF_WINDOW = "out_of_window"  # too far ahead of the expected PSN


class ReorderBuffer(Generic[T]):
    """Accept ``(psn, item)`` in any order within a window; release them in order.

    ``window`` counts PSNs from the expected one: ``window=1`` is strict
    go-back-N (only the expected PSN is accepted; anything ahead is
    OUT_OF_WINDOW, which an RC responder answers with a sequence-error NAK).
    A PSN behind the expected one (by at most half the space) is a DUPLICATE:
    it was delivered already, and the transport re-ACKs or re-executes.

    PSNs are kept as extended integers internally (:meth:`PsnSpace.unwrap`),
    so the held items live in a dict keyed by plain ints and nothing rebases
    on wrap. The in-order case (the common one) never touches the dict.
    """

    __slots__ = ("space", "window", "_next", "_held", "_ready", "delivered", "duplicates",
                 "out_of_window")

    def __init__(self, space: PsnSpace, next_psn: int, window: int) -> None:
        if not 1 <= window < space.half:
            raise ValueError(f"window must be 1..{space.half - 1}, got {window}")
        self.space = space
        self.window = window
        self._next = space.check(next_psn)
        self._held: dict[int, T] = {}
        self._ready: list[tuple[int, T]] = []
        self.delivered = 0
        self.duplicates = 0
        self.out_of_window = 0

    @property
    def next_psn(self) -> int:
        """The PSN expected next (first not yet delivered), as a wire value."""
        return self._next & self.space.mask

    @property
    def held(self) -> int:
        """How many packets wait for a gap to fill."""
        return len(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def accept(self, psn: int, item: T) -> Verdict:
        """Offer one packet; in-order ones become available from :meth:`pop_ready`."""
        sp = self.space
        nxt = self._next
        d = ((psn - nxt + sp.half) & sp.mask) - sp.half
        if d == 0:
            ready = self._ready
            ready.append((psn, item))
            start = nxt
            nxt += 1
            held = self._held
            if held:
                m = sp.mask
                while nxt in held:
                    ready.append((nxt & m, held.pop(nxt)))
                    nxt += 1
            self.delivered += nxt - start
            self._next = nxt
            return Verdict.ACCEPTED
        if d < 0:
            self.duplicates += 1
            return Verdict.DUPLICATE
        if d >= self.window:
            self.out_of_window += 1
            return Verdict.OUT_OF_WINDOW
        x = nxt + d
        if x in self._held:
            self.duplicates += 1
            return Verdict.DUPLICATE
        self._held[x] = item
        return Verdict.ACCEPTED

    def pop_ready(self) -> list[tuple[int, T]]:
        """Take the in-order items released so far (oldest first)."""
        ready = self._ready
        if not ready:
            return ready[:0]
        self._ready = []
        return ready

    def is_received(self, psn: int) -> bool:
        """Delivered already, or held waiting for a gap."""
        sp = self.space
        d = ((psn - self._next + sp.half) & sp.mask) - sp.half
        return d < 0 or (self._next + d) in self._held

    def to_bitmap(self, base: int, bits: int = 64) -> int:
        """SACK bitmap over ``base .. base+bits-1`` (delivered PSNs count as received)."""
        sp = self.space
        b = self._next + (((base - self._next + sp.half) & sp.mask) - sp.half)
        bm = 0
        if b < self._next:
            bm = (1 << min(self._next - b, bits)) - 1
        held = self._held
        if held:
            lo = max(b, self._next + 1)
            for x in range(lo, b + bits):
                if x in held:
                    bm |= 1 << (x - b)
        return bm

    def reset(self, next_psn: int) -> list[tuple[int, T]]:
        """Forget held packets and expect ``next_psn`` (e.g. UET NEW_START_PSN).

        Returns what was held, so the caller can account for it.
        """
        m = self.space.mask
        dropped = [(x & m, v) for x, v in sorted(self._held.items())]
        self._held.clear()
        self._next = self.space.check(next_psn)
        return dropped


# -- out-of-order placement ----------------------------------------------------


class PlaceStatus(enum.Enum):
    """Outcome of one :meth:`MessageAssembly.place`."""

    PLACED = "placed"  # some new bytes, message not complete yet
    COMPLETED = "completed"  # this placement completed the message (reported once)
    DUPLICATE = "duplicate"  # every byte was placed before (or message already done)
    OUT_OF_BOUNDS = "out_of_bounds"  # beyond the message's known length; nothing recorded
    LENGTH_MISMATCH = "length_mismatch"  # a "last" packet disagrees with the known length


class Placement(NamedTuple):
    status: PlaceStatus
    new_bytes: int


class MessageAssembly:
    """Which byte ranges of one message have been placed.

    The total length is known up front (a RETH DMA length, a UET request
    length) or learned from the packet flagged ``last``. Coverage is a sorted
    list of disjoint half-open byte intervals; MTU-sized packets arriving in
    any order coalesce, so a fully placed message is one interval.
    """

    __slots__ = ("total", "placed", "_starts", "_ends", "done")

    def __init__(self, total: int | None = None) -> None:
        if total is not None and total < 0:
            raise ValueError("total length must be >= 0")
        self.total = total
        self.placed = 0
        self._starts: list[int] = []
        self._ends: list[int] = []
        self.done = False

    @property
    def complete(self) -> bool:
        return self.total is not None and self.placed == self.total

    def place(self, offset: int, length: int, *, last: bool = False) -> Placement:
        """Record bytes ``[offset, offset+length)``; ``last`` fixes the total length."""
        if offset < 0 or length < 0:
            return Placement(PlaceStatus.OUT_OF_BOUNDS, 0)
        end = offset + length
        total = self.total
        if last:
            if total is not None and total != end:
                return Placement(PlaceStatus.LENGTH_MISMATCH, 0)
            if self._ends and self._ends[-1] > end:
                return Placement(PlaceStatus.LENGTH_MISMATCH, 0)
        elif total is not None and end > total:
            return Placement(PlaceStatus.OUT_OF_BOUNDS, 0)
        if self.done:
            return Placement(PlaceStatus.DUPLICATE, 0)
        if last:
            self.total = end
        new = self._add(offset, end) if length else 0
        self.placed += new
        if self.complete:
            self.done = True
            return Placement(PlaceStatus.COMPLETED, new)
        if new or (length == 0 and last):
            return Placement(PlaceStatus.PLACED, new)
        return Placement(PlaceStatus.DUPLICATE, 0)

    def append(self, offset: int, length: int) -> bool:
        """:meth:`place` for the common in-order case — bytes right after the last placed
        ones that do not complete the message (the outcome would be PLACED with
        ``length`` new bytes); False, with nothing changed, for anything else."""
        ends = self._ends
        end = offset + length
        if not ends or ends[-1] != offset or length <= 0 or self.done or (
                self.total is not None and end >= self.total):
            return False
        ends[-1] = end
        self.placed += length
        return True

    def _add(self, x: int, y: int) -> int:
        starts, ends = self._starts, self._ends
        if not starts or x > ends[-1]:  # fast path: beyond everything
            starts.append(x)
            ends.append(y)
            return y - x
        if x == ends[-1]:
            ends[-1] = y
            return y - x
        return merge_interval(starts, ends, x, y)

    def holes(self) -> list[tuple[int, int]]:
        """``(offset, length)`` of unplaced bytes, up to the total if known."""
        out = []
        cur = 0
        for s, e in zip(self._starts, self._ends, strict=True):
            if s > cur:
                out.append((cur, s - cur))
            cur = e
        if self.total is not None and cur < self.total:
            out.append((cur, self.total - cur))
        return out


class PlacementTracker(Generic[K]):
    """Per-message placement for many concurrent messages (RUD, MRC).

    Keys are whatever names a message on the wire (message id, MSN,
    ``(pdc, msg_id)`` …). A completed message is dropped at once so memory
    follows the in-flight set, but its key is remembered (the last
    ``remember`` of them) so a late retransmission reads as DUPLICATE rather
    than starting a phantom message. Transports still dedupe by PSN first;
    this is the second line.
    """

    __slots__ = ("_msgs", "_done", "_done_order", "remember")

    def __init__(self, remember: int = 4096) -> None:
        self._msgs: dict[K, MessageAssembly] = {}
        self._done: set[K] = set()
        self._done_order: deque[K] = deque()
        self.remember = remember

    def __len__(self) -> int:
        return len(self._msgs)

    def __contains__(self, key: K) -> bool:
        return key in self._msgs

    def get(self, key: K) -> MessageAssembly | None:
        return self._msgs.get(key)

    def place(self, key: K, offset: int, length: int, *, total: int | None = None,
              last: bool = False) -> Placement:
        """Record a packet's bytes for message ``key`` (created on first sight)."""
        msg = self._msgs.get(key)
        if msg is None:
            if key in self._done:
                return Placement(PlaceStatus.DUPLICATE, 0)
            msg = self._msgs[key] = MessageAssembly(total)
        elif total is not None and msg.total is not None and total != msg.total:
            return Placement(PlaceStatus.LENGTH_MISMATCH, 0)
        elif total is not None and msg.total is None:
            if msg._ends and msg._ends[-1] > total:
                return Placement(PlaceStatus.OUT_OF_BOUNDS, 0)
            msg.total = total
        res = msg.place(offset, length, last=last)
        if res.status is PlaceStatus.COMPLETED:
            self._retire(key)
        elif not msg.placed and msg.total is None and res.status is not PlaceStatus.PLACED:
            del self._msgs[key]  # nothing recorded: don't keep an empty entry
        return res

    def forget(self, key: K) -> MessageAssembly | None:
        """Drop an unfinished message (PDC closed, message aborted)."""
        return self._msgs.pop(key, None)

    def _retire(self, key: K) -> None:
        del self._msgs[key]
        if self.remember <= 0:
            return
        self._done.add(key)
        self._done_order.append(key)
        if len(self._done_order) > self.remember:
            self._done.discard(self._done_order.popleft())

# SPDX-License-Identifier: GPL-2.0-only
"""Tag matching for TAGGED_SEND: posted tagged receives and the libfabric matching rule.

A tagged send carries 64 match bits in the standard/medium header's
mem_key/match_bits field (uet.md: SES request headers). A posted tagged
receive ``(tag, ignore)`` matches when the bits outside ``ignore`` agree —
``(match_bits ^ tag) & ~ignore == 0``, libfabric's ``fi_trecv`` rule — and
among matching receives the one posted first wins.

Unexpected messages (no matching receive posted yet) are **not buffered**:
the target answers NACK NO_SES_MSG_AVAIL, a "retransmit" code, and the
initiator resends after ``nack_retx_delay`` until a matching receive appears.
Why: buffering would need a bounded pool, a copy and a second completion
path; the retry keeps the bytes in the sender's buffer (where RDMA keeps
them anyway until completion) and needs no state at the target. The cost is
retry traffic while the receiver is late; the drop counter ``tx_nack_0x09``
shows it.

Matching happens when the first packet of a message arrives (any packet:
each carries the match bits), so under RUD two in-flight messages with
overlapping tags may match in arrival order, not send order; applications
needing send order use distinct tags (or ROD).
"""

from __future__ import annotations

from dataclasses import dataclass

_M64 = (1 << 64) - 1


@dataclass(slots=True)
class TaggedRecv:
    """A posted tagged receive (like :class:`~.ses.RecvWqe`, plus tag and ignore mask)."""

    wr_id: int
    views: list[memoryview]
    capacity: int
    tag: int
    ignore: int = 0


def matches(match_bits: int, tag: int, ignore: int) -> bool:
    """libfabric's rule: every bit not in ``ignore`` must be equal."""
    return ((match_bits ^ tag) & ~ignore & _M64) == 0


def match(queue: list[TaggedRecv], match_bits: int) -> TaggedRecv | None:
    """Take the first posted receive that matches ``match_bits`` (None: unexpected)."""
    for i, r in enumerate(queue):
        if matches(match_bits, r.tag, r.ignore):
            return queue.pop(i)
    return None

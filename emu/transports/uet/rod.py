# SPDX-License-Identifier: GPL-2.0-only
"""ROD (reliable, ordered delivery): what differs from RUD, on both halves.

ROD runs on a PDC like RUD (its own PDC: initiators key PDCs per {mode, job,
destination}) and uses the same PSNs, ACKs, SACK and RTO; only delivery
differs (uet.md: Behaviour — "ROD delivers the in-order prefix").

Why the target *drops* an out-of-order packet instead of buffering it: the
spec's NACK table has a dedicated code for exactly this case, ROD_OOO (0x0D),
whose reaction is "retransmit" — the receiver refuses what it cannot deliver
in order and the sender resends from the hole, i.e. go-back-N. That keeps the
target stateless beyond one PSN (no reorder buffer, no per-packet memory)
and makes SES placement, and therefore receive completions, happen strictly
in PSN order. The cost is throughput under reordering, which is why ROD is
meant for single-path traffic, not sprayed flows.

The target NACKs ROD_OOO once per hole (the ``first_missing`` it refers to),
so a burst behind one lost packet produces one NACK, not one per packet; if
that NACK or the go-back is lost, the RTO recovers as in RUD. The initiator
reacts by resending every unACKed PSN from the hole in PSN order.

Initiator completions are also reported in message order: a ROD message
whose response arrives before an earlier message's is held back until the
earlier one completes, so the application sees the same order as the target.
"""

from __future__ import annotations

from typing import Any

from emu.transports.uet import pdc as D
from emu.transports.uet.pdc import InitiatorPdc, TargetPdc, TxMessage


def target_out_of_order(target: Any, t: TargetPdc, pds: Any, addr: Any, ent: int | None,
                        ecn: int) -> None:
    """A ROD request beyond the first missing PSN: drop it (counted) and NACK ROD_OOO
    for the hole, once per hole; ``nack_psn`` names the PSN the target needs next."""
    h = target.h
    h.stats["rx_rod_out_of_order"] += 1
    fm = t.first_missing
    if t.rod_nacked == fm:
        return
    t.rod_nacked = fm
    h.stats["tx_nack_0x0d"] += 1
    target._nack(addr, ent, D.NACK_ROD_OOO, fm, t.pdcid, t.ini_pdcid, pds.retx, ecn,
                 payload=fm)


def go_back(initiator: Any, pdc: InitiatorPdc, psn: int, now: float) -> None:
    """ROD_OOO: resend every unACKed PSN from extended ``psn`` on, in PSN order (the
    target dropped them all); packets already queued for resending are not doubled."""
    initiator.h.stats["rod_go_back_packets"] += pdc.sb.go_back(psn)  # (emu.core.reliable)


def ready_in_order(pdc: InitiatorPdc, msg: TxMessage) -> list[TxMessage]:
    """The ROD messages that may complete now that ``msg`` is done (ACKed, response in):
    none while an earlier message is unfinished, else ``msg``'s run of done successors.

    ``pdc.msgs`` holds in-flight messages in posting order (dicts keep insertion order).
    """
    out: list[TxMessage] = []
    for m in pdc.msgs.values():
        if not m.all_sent or m.unacked or m.response is None:
            break
        out.append(m)
    return out if msg in out else []

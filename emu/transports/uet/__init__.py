# SPDX-License-Identifier: GPL-2.0-only
"""Sans-IO Ultra Ethernet Transport (UET): RUD, ROD, RUDI, UUD (``/work/shared/specs/uet.md``).

* :mod:`.engine` — :class:`UetEngine`, the daemon-facing engine (all PDCs of a NIC)
* :mod:`.factory` — ``create_engine(ctx)``, the daemon's constructor hook
* :mod:`.pdc` — PDC records, states, constants, the NACK reaction table
* :mod:`.pds` — the initiator half of the PDS (and shared packet builders)
* :mod:`.target` — the target half of the PDS
* :mod:`.ses` — SES target: WRITE/SEND placement, dispatch of every SES op, responses
* :mod:`.ses_shape` — small / medium / standard request headers chosen by message shape
* :mod:`.ses_initiator` — READ, (fetching) atomics, tagged receives: verbs, response data
* :mod:`.ses_target_ops` — target READ and atomics; RSP_DATA on ACKs (why: see there)
* :mod:`.ses_amo` — atomic operations (AMO opcodes, INT64/UINT64 arithmetic)
* :mod:`.ses_tagged` — TAGGED_SEND matching (tag + ignore mask), unexpected messages
* :mod:`.ses_rdv` — RENDEZVOUS_SEND: eager packet, the target READs the rest
* :mod:`.rod` — ROD: in-order delivery (drop out of order, ROD_OOO, go back)
* :mod:`.rudi` — RUDI: no PDC, per-packet id, response = ACK, idempotent WRITE
* :mod:`.uud` — UUD: unacknowledged single-packet SEND datagrams
* :mod:`.control` — PROBE, CREDIT / CREDIT_REQ, CLOSE_REQ, CLEAR_REQ, idle reaper
"""

from emu.transports.uet.engine import UetEngine
from emu.transports.uet.factory import create_engine, payload_for
from emu.transports.uet.pdc import NACK_REACTIONS, Mode, PdcState, Reaction

__all__ = ["UetEngine", "create_engine", "payload_for", "Mode", "PdcState", "Reaction",
           "NACK_REACTIONS"]

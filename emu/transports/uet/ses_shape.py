# SPDX-License-Identifier: GPL-2.0-only
"""SES request header shapes: which of small (20 B), medium (32 B) or standard (44 B)
a packet carries, how to build it, and one view the target reads all three through.

Why three shapes (uet.md: SES request headers): the small and medium headers
drop the message_id and shrink request_length to 14 bits, so they only fit a
message that is *one packet* (SOM and EOM both set) and at most 16383 bytes
long; the small one also drops initiator and mem_key/match_bits.

The rule used here (decided per message when it is posted, :func:`choose_shape`):

* **standard** — any message of more than one packet, a request_length over
  14 bits (a READ piece), a rendezvous send (its extension header follows only
  a standard request) and every tagged message that is not single-packet;
* **small** — a single-packet, non-matching SEND, *only when the engine asks
  for it* (``small_sends=True``): without the initiator field the receiver
  cannot name the sending endpoint, so its receive completion reports
  ``src_qp`` 0 — a trade libfabric users make knowingly;
* **medium** — every other single-packet message (WRITE, READ, ATOMIC,
  FETCHING_ATOMIC, TAGGED_SEND, a SEND by default).

Without a message_id, a single-packet message is named by its PSN: the target
keys its state by :func:`compact_key` (the extended PSN, above the 16-bit
message-id space so keys never collide) and answers with ``message_id =
PSN & 0xFFFF`` on the ACK for that PSN; the initiator maps the response back
through the ACK_PSN (:mod:`.ses_initiator`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.transports.uet.pdc import TxMessage
from emu.wire.codec.uet import (
    SesMediumRequest,
    SesSmallRequest,
    SesStandardRequest,
    SesStandardRequestSom,
)
from emu.wire.uet_defs import RETURN_CODE

NH_SMALL, NH_MEDIUM, NH_STANDARD = 1, 2, 3
MAX_COMPACT = (1 << 14) - 1  # request_length is 14 bits in small/medium
_COMPACT_BASE = 1 << 40

# SES request opcodes (uet.md: Request opcodes)
OP_WRITE = 0x01
OP_READ = 0x02
OP_ATOMIC = 0x03
OP_FETCHING_ATOMIC = 0x04
OP_SEND = 0x05
OP_RENDEZVOUS_SEND = 0x06
OP_TAGGED_SEND = 0x09
OP_RENDEZVOUS_TSEND = 0x0A
TAGGED_OPS = frozenset({OP_TAGGED_SEND, OP_RENDEZVOUS_TSEND})
# SES return codes the engines answer with (uet.md: Responses), named once here
RC_OK = RETURN_CODE["OK"]
RC_BAD_MKEY = RETURN_CODE["BAD_MKEY"]
RC_BAD_ADDR = RETURN_CODE["BAD_ADDR"]
RC_PERM_VIOLATION = RETURN_CODE["PERM_VIOLATION"]
RC_TOO_LONG = RETURN_CODE["TOO_LONG"]
RC_UNSUPPORTED_OP = RETURN_CODE["UNSUPPORTED_OP"]
RC_UNSUPPORTED_SIZE = RETURN_CODE["UNSUPPORTED_SIZE"]
RC_BAD_PID = RETURN_CODE["BAD_PID"]
RENDEZVOUS_OPS = frozenset({OP_RENDEZVOUS_SEND, OP_RENDEZVOUS_TSEND})
ATOMIC_OPS = frozenset({OP_ATOMIC, OP_FETCHING_ATOMIC})
#: opcodes whose request carries no payload bytes for its request_length (a READ asks
#: for bytes; the operands of a compare-and-swap travel in its extension header)
NO_PAYLOAD_OPS = frozenset({OP_READ})


def choose_shape(opcode: int, length: int, req_length: int, mtu: int, *,
                 small_sends: bool = False) -> int:
    """The next_hdr (1 small, 2 medium, 3 standard) for a message (module docstring)."""
    if length > mtu or req_length > MAX_COMPACT or opcode in RENDEZVOUS_OPS:
        return NH_STANDARD
    if opcode == OP_SEND and small_sends:
        return NH_SMALL
    return NH_MEDIUM


def compact_key(ext_psn: int) -> int:
    """The target's message key for a small/medium request (no message_id on the wire)."""
    return _COMPACT_BASE + ext_psn


def wire_message_id(key: int) -> int:
    """The 16-bit message_id a response carries for a message key."""
    return key & 0xFFFF


def request_parts(msg: TxMessage, offset: int, length: int, job_id: int
                  ) -> tuple[int, Any, Any]:
    """``(next_hdr, SES header, extension header or None)`` for bytes
    ``[offset, offset+length)`` of ``msg``.

    buffer_offset is the message's remote start address (a WRITE's VA; 0 for a
    SEND, which lands at the start of the posted buffer); placement adds
    message_offset, which the SOM packet implies as 0.
    """
    shape = msg.shape
    rl = msg.req_length
    rl = msg.length if rl is None else rl
    ext = msg.ext
    eom = int(offset + length >= msg.length)
    if shape == NH_SMALL:
        return shape, SesSmallRequest(opcode=msg.opcode, som=1, eom=1, request_length=rl,
                                      job_id=job_id, pid_on_fep=msg.dest_ep,
                                      buffer_offset=msg.remote_addr), ext
    if shape == NH_MEDIUM:
        return shape, SesMediumRequest(opcode=msg.opcode, som=1, eom=1, request_length=rl,
                                       job_id=job_id, pid_on_fep=msg.dest_ep,
                                       buffer_offset=msg.remote_addr, initiator=msg.ep,
                                       mem_key_match_bits=msg.rkey), ext
    common = {"opcode": msg.opcode, "eom": eom, "message_id": msg.message_id,
              "job_id": job_id, "pid_on_fep": msg.dest_ep, "buffer_offset": msg.remote_addr,
              "initiator": msg.ep, "mem_key_match_bits": msg.rkey, "request_length": rl}
    if offset == 0:
        return NH_STANDARD, SesStandardRequestSom(som=1, **common), ext
    # the decoder reads an extension header after every request of an opcode that has
    # one (uet_defs.ext_layout), so later packets repeat it
    return NH_STANDARD, SesStandardRequest(som=0, payload_length=length, message_offset=offset,
                                           **common), ext


@dataclass(slots=True)
class ReqView:
    """One request as the target needs it, whatever its header shape.

    ``message_id`` is the target's message key: the wire message_id of a
    standard request, :func:`compact_key` of the PSN for small/medium ones.
    ``payload_length`` is None when the header does not declare it (SOM).
    """

    opcode: int
    som: int
    eom: int
    message_id: int
    pid_on_fep: int
    buffer_offset: int
    initiator: int
    mem_key_match_bits: int
    request_length: int
    message_offset: int
    payload_length: int | None
    ext: Any
    shape: int


def request_view(pkt: Any, ext_psn: int) -> ReqView | None:
    """A :class:`ReqView` of a decoded request packet; None when it carries no SES request."""
    s = pkt.ses
    if isinstance(s, SesStandardRequestSom):
        return ReqView(s.opcode, 1, s.eom, s.message_id, s.pid_on_fep, s.buffer_offset,
                       s.initiator, s.mem_key_match_bits, s.request_length, 0, None, pkt.ext,
                       NH_STANDARD)
    if isinstance(s, SesStandardRequest):
        return ReqView(s.opcode, s.som, s.eom, s.message_id, s.pid_on_fep, s.buffer_offset,
                       s.initiator, s.mem_key_match_bits, s.request_length, s.message_offset,
                       s.payload_length, pkt.ext, NH_STANDARD)
    if isinstance(s, SesMediumRequest):
        return ReqView(s.opcode, 1, 1, compact_key(ext_psn), s.pid_on_fep, s.buffer_offset,
                       s.initiator, s.mem_key_match_bits, s.request_length, 0, None, pkt.ext,
                       NH_MEDIUM)
    if isinstance(s, SesSmallRequest):
        return ReqView(s.opcode, 1, 1, compact_key(ext_psn), s.pid_on_fep, s.buffer_offset,
                       0, 0, s.request_length, 0, None, pkt.ext, NH_SMALL)
    return None


def expected_payload(v: ReqView) -> int:
    """Payload bytes a complete single-/first-packet request of ``v`` must carry at least
    (0 for READ and compare-and-swap: nothing travels behind their headers)."""
    if v.opcode in NO_PAYLOAD_OPS:
        return 0
    if v.opcode in ATOMIC_OPS and v.ext is not None and hasattr(v.ext, "compare"):
        return 0
    if v.opcode in RENDEZVOUS_OPS and v.ext is not None:
        return 1 if v.ext.eager_length else 0
    return 1 if v.request_length else 0

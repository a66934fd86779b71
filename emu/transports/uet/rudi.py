# SPDX-License-Identifier: GPL-2.0-only
"""RUDI: reliable, unordered delivery of *idempotent* operations, without a PDC.

uet.md (Behaviour): "RUDI has no PDC, per-packet id, response = ack". Each
packet is a RUDI_REQ carrying a 32-bit ``pkt_id`` and a full standard SES
request (so the target can act on it alone); the target executes it and
answers with a RUDI_RESP echoing the ``pkt_id`` and carrying the SES
response — that response *is* the acknowledgement. The initiator resends a
packet (RETX set, new entropy) each RTO until its response comes, and fails
the message after ``max_retries``. A NACK for a RUDI packet has NT set and
names the ``pkt_id`` in its PSN field (uet.md: Flags, NACK).

Why only WRITE: without a PDC the target keeps no state, so it cannot tell a
retransmission or a network duplicate from a new request and executes both.
That is harmless only for an operation whose second execution changes
nothing — a WRITE of the same bytes to the same place (and a READ). A SEND
would consume a second receive buffer, an atomic would apply twice, so those
are refused at post time (:data:`ALLOWED_OPS`). The application still owns
the usual idempotency caveat: a late duplicate of an old WRITE can land after
a newer WRITE to the same bytes, so overlapping RUDI writes need ordering by
the application (wait for the completion).

A multi-packet message is sent as independent packets; it completes when
every packet's response is in, or fails on the first error response (the
target checks the *whole* message's key and bounds on every packet, so a bad
WRITE writes nothing).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from emu.core.cq import WcStatus
from emu.core.memory import Access, MemoryAccessError
from emu.core.reliable.retransmit import RetransmitQueue, expired
from emu.core.timers import TimerSet
from emu.transports.base import ECN_CE
from emu.transports.uet import pdc as D
from emu.transports.uet import ses as S
from emu.transports.uet.pdc import Reaction, TxMessage
from emu.wire.codec.uet import (
    PdsNack,
    PdsRudi,
    SesStandardRequest,
    SesStandardRequestSom,
    encode_packet,
)
from emu.wire.uet_defs import PDS_TYPE

_NH_REQ_STD = 3
_RUDI_RESP = PDS_TYPE["RUDI_RESP"]
#: the SES header RUDI/UUD requests carry: standard only (each packet stands alone)
_STD = (SesStandardRequest, SesStandardRequestSom)
_NH_RSP = 4
#: SES opcodes that RUDI may carry (see the module docstring)
ALLOWED_OPS = frozenset({S.OP_WRITE})


@dataclass(eq=False, slots=True)
class RudiPacket:
    """One outstanding RUDI request: rebuilt from the message on every (re)send."""

    pkt_id: int
    msg: TxMessage
    addr: Any
    offset: int
    length: int
    sent_at: float
    retries: int = 0


class Rudi:
    """Both halves of RUDI for one engine (``host`` is the :class:`UetEngine`)."""

    def __init__(self, host: Any) -> None:
        self.h = host
        self.queue: deque[tuple[TxMessage, Any]] = deque()  # not yet fully segmented
        self.out: dict[int, RudiPacket] = {}  # pkt_id → outstanding packet
        self.retx: RetransmitQueue[int] = RetransmitQueue()  # pkt_ids owed a resend
        self.timers = TimerSet()
        self._next_id = host.rng.getrandbits(32)
        self._next_msg_id = 0

    @property
    def window(self) -> int:
        """Packets in flight at most: MP_RANGE, as for a PDC (uet.md: Window)."""
        return self.h.mpr * D.MPR_UNIT

    # -- initiator -----------------------------------------------------------------

    def post(self, msg: TxMessage, addr: Any) -> None:
        if msg.opcode not in ALLOWED_OPS:
            raise ValueError("RUDI carries idempotent operations only (WRITE)")
        msg.message_id = self._next_msg_id
        self._next_msg_id = (self._next_msg_id + 1) & 0xFFFF
        self.queue.append((msg, addr))

    def pull(self, now: float) -> None:
        """Emit retransmissions due now, then new packets within the window."""
        owed = self.retx
        while owed:
            rp = self.out.get(owed.pop())
            if rp is not None:
                self._emit(rp, now, retx=True)
                self.h.stats["tx_rudi_retransmits"] += 1
        h = self.h
        while self.queue and len(self.out) < self.window:
            msg, addr = self.queue[0]
            off = msg.next_offset
            n = min(h.mtu, msg.length - off)
            msg.next_offset = off + n
            if msg.next_offset >= msg.length:
                msg.all_sent = True
                self.queue.popleft()
            pid = self._next_id
            self._next_id = (pid + 1) & 0xFFFFFFFF
            rp = self.out[pid] = RudiPacket(pid, msg, addr, off, n, now)
            msg.unacked += 1
            self._emit(rp, now, retx=False)
            h.stats["tx_rudi_requests"] += 1

    def _emit(self, rp: RudiPacket, now: float, *, retx: bool) -> None:
        msg = rp.msg
        pds = PdsRudi(type=D.Mode.RUDI, next_hdr=_NH_REQ_STD, retx=int(retx), pkt_id=rp.pkt_id)
        ses = S.request_header(msg, rp.offset, rp.length, self.h.job_id)
        self.h.emit(encode_packet(pds, ses, None, msg.data[rp.offset:rp.offset + rp.length]),
                    rp.addr, None, False)
        rp.sent_at = now
        self.timers.set_if_earlier("retx", now + self.h.rto)

    def on_response(self, pkt: Any, host: str, now: float) -> None:
        """RUDI_RESP: the packet is done; its SES return code decides the message."""
        st = self.h.stats
        rp = self.out.get(pkt.pds.pkt_id)
        if rp is None or self.h._host(rp.addr[0]) != host:
            st["rx_rudi_resp_unknown"] += 1  # a duplicate, or for a message already ended
            return
        rsp = pkt.ses
        if rsp is None or not hasattr(rsp, "return_code"):
            st["rx_drop_rudi_no_response"] += 1
            return
        st["rx_rudi_responses"] += 1
        self._forget(rp)
        msg = rp.msg
        msg.unacked -= 1
        if rsp.return_code != S.RC_OK:
            self._end(msg, S.wc_status(rsp.return_code), rsp.return_code, 0)
        elif msg.all_sent and msg.unacked == 0:
            self.h.finish(None, msg, WcStatus.SUCCESS, S.RC_OK)

    def on_nack(self, nack: Any, host: str, now: float) -> None:
        """NACK with NT: react per code (uet.md: NACK codes) for the named pkt_id."""
        code = nack.nack_code
        st = self.h.stats
        st[D.nack_counter("rx_nack", code)] += 1
        rp = self.out.get(nack.nack_psn)
        if rp is None or self.h._host(rp.addr[0]) != host:
            st["rx_rudi_nack_unknown"] += 1
            return
        reaction = D.NACK_REACTIONS.get(code, Reaction.IGNORE)
        if reaction is Reaction.RETRANSMIT:
            D.resend_for_nack(self.retx, self.timers, rp.pkt_id, code, now,
                              self.h.nack_retx_delay)
        elif reaction is not Reaction.IGNORE:
            self._end(rp.msg, WcStatus.REM_OP_ERR, 0, code)

    def _forget(self, rp: RudiPacket) -> None:
        del self.out[rp.pkt_id]
        self.retx.forget(rp.pkt_id)

    def _end(self, msg: TxMessage, status: WcStatus, rc: int, vendor: int) -> None:
        """Fail ``msg``: drop its outstanding and unsent packets, complete it once."""
        for rp in [r for r in self.out.values() if r.msg is msg]:
            self._forget(rp)
        if not msg.all_sent:
            self.queue = deque(e for e in self.queue if e[0] is not msg)
            msg.all_sent = True
        self.h.finish(None, msg, status, rc, vendor)

    def earliest(self) -> float | None:
        return self.timers.earliest() if (self.out or self.queue) else None

    def on_timer(self, now: float) -> None:
        """RTO per packet; after ``max_retries`` resends the message fails."""
        h = self.h
        for name in self.timers.expired(now):
            if name == "nack":
                nxt = self.retx.release_due(now)
                if nxt is not None:
                    self.timers.set("nack", nxt)
                continue
            due, nxt = expired(self.out.values(), now, h.rto)
            for rp in due:
                if rp.pkt_id not in self.out:  # its message failed meanwhile
                    continue
                if rp.retries >= h.max_retries:
                    h.stats["rudi_retries_exhausted"] += 1
                    self._end(rp.msg, WcStatus.RETRY_EXC_ERR, 0, 0)
                    continue
                rp.retries += 1
                h.stats["rto_retransmits"] += 1
                self.retx.at_once(rp.pkt_id)
                rp.sent_at = now
                nxt = now + h.rto if nxt is None or now + h.rto < nxt else nxt
            if nxt is not None:
                self.timers.set("retx", nxt)

    # -- target ---------------------------------------------------------------------

    def on_request(self, pkt: Any, addr: Any, now: float, ecn: int, trimmed: bool) -> None:
        """Execute one RUDI_REQ and answer with RUDI_RESP (or NACK with NT); no state kept,
        so a duplicate is executed again — which is why only idempotent ops are sent."""
        h = self.h
        st = h.stats
        pds = pkt.pds
        ent = addr[1] if len(addr) > 1 else None
        ses = pkt.ses
        if not isinstance(ses, _STD):
            st["rx_drop_unsupported_ses"] += 1
            return
        if trimmed or S.looks_trimmed(ses, len(pkt.payload)):
            st["rx_trimmed"] += 1
            h.emit(encode_packet(PdsNack(m=int(ecn == ECN_CE), retx=pds.retx, nt=1,
                                         nack_code=D.NACK_TRIMMED, nack_psn=pds.pkt_id)),
                   addr, ent, True)
            h.stats["tx_nacks"] += 1
            return
        st["rx_rudi_requests"] += 1
        rc, n = self._execute(ses, pkt.payload)
        rsp = S.response_header(ses.message_id, rc, n, h.job_id)
        h.emit(encode_packet(PdsRudi(type=_RUDI_RESP, next_hdr=_NH_RSP, m=int(ecn == ECN_CE),
                                     retx=pds.retx, pkt_id=pds.pkt_id), rsp), addr, ent, True)
        st["tx_rudi_responses"] += 1

    def _execute(self, ses: Any, payload: Any) -> tuple[int, int]:
        """(return code, bytes written) for one packet of a WRITE."""
        if ses.opcode not in ALLOWED_OPS:
            self.h.stats["rx_rudi_unsupported_op"] += 1
            return S.RC_UNSUPPORTED_OP, 0
        off, _ = S.payload_offset(ses)
        total = ses.request_length
        n = len(payload)
        if off + n > total:
            return S.RC_TOO_LONG, 0
        if not total:
            return S.RC_OK, 0
        mem = self.h.memory
        key = ses.mem_key_match_bits
        try:  # the whole message's range, so a bad WRITE writes nothing
            mem.check_remote(key, ses.buffer_offset, total, Access.REMOTE_WRITE)
            mem.remote_write(key, ses.buffer_offset + off, payload)
        except MemoryAccessError as e:
            return S.MEM_RC.get(e.kind, S.RC_PERM_VIOLATION), 0
        return S.RC_OK, n

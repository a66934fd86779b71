# SPDX-License-Identifier: GPL-2.0-only
"""RENDEZVOUS_SEND: an eager first packet, then the target pulls the rest with a READ.

Initiator: the message's first ``mtu`` bytes travel as an ordinary SEND
packet whose standard header is followed by the rendezvous extension header
(uet.md: Extension headers — eager_length, read PIDonFEP, read_offset, read
match bits). The rest of the buffer is *exposed*: a key above the 32-bit
rkey space (so it never collides with a registered region) names it, and
the engine's READ target resolves that key before the registration table
(:attr:`.ses_target_ops.TargetOps.exposed`). The send completes (SEND, full
length) when the target's SES response arrives, which the target sends
only after its pull finished — so the buffer stays exposed exactly as long
as it may be read. While the target is reading, each served READ refreshes
the message's response wait, so a long pull does not run the initiator
into its response-retry limit.

Target: the eager bytes land in the matched receive buffer; once they are
all in, the target posts a READ of ``[eager_length, request_length)`` of the
exposed buffer on its own initiator PDC to the sender, into the rest of the
receive buffer. When the READ completes, the receive completes (RECV, full
length) and the response goes back on an ACK for the eager packet's PSN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.memory import MemError, MemoryAccessError
from emu.transports.uet import ses_shape as SH
from emu.transports.uet.pdc import RecvAssign, TargetPdc, TxMessage
from emu.transports.uet.ses_initiator import ReadOp
from emu.wire.codec.uet import SesRendezvous
from emu.wire.uet_defs import RETURN_CODE

_KEY_BASE = 1 << 40
RC_OK = SH.RC_OK


@dataclass(eq=False)
class _Exposed:
    data: memoryview
    msg: Any


class RdvSend(ReadOp):
    """The initiator's rendezvous message: completes as SEND of the full length and
    withdraws the exposure."""

    key: int = 0
    table: Any = None

    def complete(self, msg: Any) -> bool:
        return True  # no data comes back: the response itself is the news

    def done(self, msg: Any, status: WcStatus, rc: int, vendor: int) -> None:
        self.table.pop(self.key, None)
        super().done(msg, status, rc, vendor)


class Pull(ReadOp):
    """The target's READ of the exposed remainder; ends the receive when done."""

    finish: Any = None

    def done(self, msg: Any, status: WcStatus, rc: int, vendor: int) -> None:
        if status is not WcStatus.SUCCESS and self.status is WcStatus.SUCCESS:
            self.status, self.vendor = status, vendor or rc
        self.pending -= 1
        if self.pending <= 0:
            self.finish(self.status)


class Rendezvous:
    """Both halves of RENDEZVOUS_SEND for one engine (see the module docstring)."""

    def __init__(self, eng: Any) -> None:
        self.e = eng
        self.exposed: dict[int, _Exposed] = {}
        self._next = 0

    # -- initiator ------------------------------------------------------------------

    def post(self, ep: int, wr_id: int, sges: Any, dest: Any, signaled: bool) -> None:
        e = self.e
        endpoint = e._ep(ep)
        views = e._views(endpoint, sges, False)
        data = views[0] if len(views) == 1 else memoryview(b"".join(views))
        addr, dest_ep = e._dest(dest)
        total = len(data)
        eager = min(e.mtu, total)
        self._next = (self._next + 1) & 0xFFFFFF
        key = _KEY_BASE + self._next
        sink = RdvSend(e, wr_id, ep, [], total, signaled, WcOpcode.SEND)
        sink.pending, sink.key, sink.table = 1, key, self.exposed
        ext = SesRendezvous(eager_length=eager, read_pid_on_fep=ep, read_offset=0,
                            read_match_bits=key)
        msg = TxMessage(wr_id, ep, SH.OP_RENDEZVOUS_SEND, data[:eager], eager, dest_ep,
                              0, 0, signaled, shape=SH.NH_STANDARD, req_length=total, ext=ext,
                              sink=sink)
        self.exposed[key] = _Exposed(data, msg)
        e._enqueue(e._pdc_for(addr), msg)
        e.stats["rendezvous_posted"] += 1

    def view(self, key: int, addr: int, length: int) -> memoryview | None:
        """The exposed bytes a peer's READ asks for (None: not an exposure key)."""
        x = self.exposed.get(key)
        if x is None:
            if key >= _KEY_BASE:
                raise MemoryAccessError(MemError.INVALID_KEY, "rendezvous buffer withdrawn")
            return None
        if addr < 0 or addr + length > len(x.data):
            raise MemoryAccessError(MemError.OUT_OF_BOUNDS, "beyond the rendezvous buffer")
        m = x.msg
        if m.waiting_since is not None:  # the pull is progressing: keep waiting for it
            m.waiting_since = self.e.now
            m.retries = 0
        return x.data[addr:addr + length]

    # -- target -------------------------------------------------------------------

    def pull(self, t: TargetPdc, mid: int, a: RecvAssign, v: SH.ReqView) -> None:
        """The eager part of message ``mid`` is in: READ the rest from the sender."""
        e = self.e
        ext = v.ext
        eager, total = ext.eager_length, v.request_length
        views = _tail(a.views, eager)
        op = Pull(e, a.wr_id, a.ep, views, total - eager, True, WcOpcode.RDMA_READ)
        op.finish = lambda status: self._pulled(t, mid, a, total, status)
        pdc = e._pdc_for((t.addr[0], e.port))
        e.ses_ini.queue_read(op, pdc, ext.read_pid_on_fep, ext.read_offset + eager,
                             ext.read_match_bits)
        e.stats["rendezvous_pulls"] += 1

    def _pulled(self, t: TargetPdc, mid: int, a: RecvAssign, total: int,
                status: WcStatus) -> None:
        e = self.e
        t.sends.pop(mid, None)
        ok = status is WcStatus.SUCCESS
        rc = RC_OK if ok else RETURN_CODE["UNDELIVERABLE"]
        ep = e.eps.get(a.ep)
        if ep is not None:
            e._complete(ep.recv_cq, WorkCompletion(
                a.wr_id, status, WcOpcode.RECV, a.ep, total if ok else 0, src_qp=a.src_ep))
        t.remember_response(mid, rc, total if ok else 0)
        if e.target.pdcs.get(t.pdcid) is not t:
            return  # the PDC is gone; a retransmission will find no state either
        psn = t.psn_msg.last_psn(mid)
        if psn is not None:
            e.target.ack(t, psn, None, False, 0, (mid, rc, total if ok else 0))


def _tail(views: list[memoryview], off: int) -> list[memoryview]:
    """The views from byte ``off`` of their concatenation onward."""
    out = []
    pos = 0
    for v in views:
        lv = len(v)
        if off < pos + lv:
            out.append(v[max(off - pos, 0):])
        pos += lv
    return out

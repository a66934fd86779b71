# SPDX-License-Identifier: GPL-2.0-only
"""UUD: unreliable, unordered datagrams (uet.md: Behaviour — "unacknowledged
single-packet datagrams").

A UUD message is one UUD_REQ packet carrying a standard SES SEND request and
at most one MTU of payload; there is no PDC, no PSN, no ACK and no
retransmission. So losses are visible to the application, by design: the
sender's completion means "handed to the wire" and comes at once; the
receiver completes a posted receive for each datagram that *arrived* (a
duplicate made by the network arrives twice), and every datagram it cannot
take is a counted drop (``rx_drop_uud_*``), never an error sent back.

Why SEND only: a datagram lands in whatever receive buffer is posted, as a
UD queue pair's does; a one-way WRITE without acknowledgement would give the
sender no way to learn that its bytes were placed or refused.
"""

from __future__ import annotations

from typing import Any

from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.memory import scatter
from emu.transports.uet import pdc as D
from emu.transports.uet import ses as S
from emu.transports.uet.pdc import TxMessage
from emu.wire.codec.uet import PdsUud, SesStandardRequest, SesStandardRequestSom, encode_packet

_NH_REQ_STD = 3
#: the SES header RUDI/UUD requests carry: standard only (each packet stands alone)
_STD = (SesStandardRequest, SesStandardRequestSom)
#: SES opcodes a UUD datagram may carry (see the module docstring)
ALLOWED_OPS = frozenset({S.OP_SEND})


class Uud:
    """Both halves of UUD for one engine (``host`` is the :class:`UetEngine`)."""

    def __init__(self, host: Any) -> None:
        self.h = host
        self._next_msg_id = 0

    def send(self, msg: TxMessage, addr: Any) -> None:
        """Emit the datagram and complete the send at once (nothing will ever ACK it)."""
        h = self.h
        if msg.opcode not in ALLOWED_OPS:
            raise ValueError("UUD carries SEND datagrams only")
        if msg.length > h.mtu:
            raise ValueError(f"a UUD datagram is one packet: {msg.length} B > mtu {h.mtu}")
        msg.message_id = self._next_msg_id
        self._next_msg_id = (self._next_msg_id + 1) & 0xFFFF
        pds = PdsUud(type=D.Mode.UUD, next_hdr=_NH_REQ_STD)
        ses = S.request_header(msg, 0, msg.length, h.job_id)
        h.emit(encode_packet(pds, ses, None, msg.data), addr, None, False)
        h.stats["tx_uud_datagrams"] += 1
        msg.all_sent = True
        h.finish(None, msg, WcStatus.SUCCESS, S.RC_OK)

    def on_request(self, pkt: Any, now: float, trimmed: bool) -> None:
        """Deliver one datagram into the next posted receive of its endpoint, or drop it."""
        st = self.h.stats
        ses = pkt.ses
        if not isinstance(ses, _STD) or ses.opcode not in ALLOWED_OPS:
            st["rx_drop_uud_unsupported"] += 1
            return
        n = len(pkt.payload)
        if not (ses.som and ses.eom) or n != ses.request_length:
            # a fragment, or cut by a switch (uet.md: Trimming): nothing to deliver or NACK
            st["rx_drop_uud_trimmed" if trimmed or n < ses.request_length
               else "rx_drop_uud_malformed"] += 1
            return
        if trimmed:
            st["rx_drop_uud_trimmed"] += 1
            return
        ep = self.h.eps.get(ses.pid_on_fep)
        if ep is None:
            st["rx_drop_uud_no_ep"] += 1
            return
        if not ep.rq:
            st["rx_drop_uud_no_buffer"] += 1
            return
        w = ep.rq.popleft()
        if n > w.capacity:
            st["rx_drop_uud_too_long"] += 1
            self.h._complete(ep.recv_cq, WorkCompletion(w.wr_id, WcStatus.LOC_LEN_ERR,
                                                        WcOpcode.RECV, ep.ep, n))
            return
        scatter(w.views, 0, pkt.payload)
        st["rx_uud_datagrams"] += 1
        self.h._complete(ep.recv_cq, WorkCompletion(w.wr_id, WcStatus.SUCCESS, WcOpcode.RECV,
                                                    ep.ep, n, src_qp=ses.initiator))

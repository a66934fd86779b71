# SPDX-License-Identifier: GPL-2.0-only
"""The receiving half of one MRC QP: place WRITEs out of order, SACK every packet.

What MRC's receiver does (``specs/mrc.md``, Behaviour):

* **Placement out of order.** Every WRITE packet carries METH (its message's
  MSN) and RETH (the R_Key, *this packet's* address, and the message's DMA
  length), so each packet is placed where it belongs the moment it arrives,
  whatever came before it. The PSN window decides only whether it is new.
* **The window is MPR.** PSNs in ``[cack + 1, cack + MPR)`` are accepted;
  beyond it a packet is refused with NACK PSN_OOR_WINDOW; behind it (a
  duplicate) it is SACKed again and not placed twice.
* **Reliability and semantics apart.** Each packet that arrives whole is
  SACKed (SETH: cumulative ACK + 64-bit bitmap, the packet's EV echoed, the
  CE mark echoed per EV in ``cc_flags`` — or in the M field, under the wire setting
  ``m_field = "ecn"``, :mod:`emu.wire.mrc_defs`; CC_STATE: the sender's timestamp
  reflected, out-of-order count, bytes received). A packet the remote access
  checks refuse (R_Key, bounds, rights) is still SACKed — it arrived — and
  answered with a transport NAK (AETH REMOTE_ACCESS_ERROR, 0xD1) that names
  its message; nothing of it is written.
* **Trimmed packets** (a switch cut the payload; the daemon sees the trimmed
  DSCP) are NACKed at once, TRIMMED or TRIMMED_LASTHOP, so the sender resends
  without waiting for a timeout; they are not accepted.
* **Immediates complete in MSN order.** A WRITE_*_IMM message completes
  (``RECV_RDMA_WITH_IMM``, consuming a pre-posted receive) when all its bytes
  are in and every earlier message has completed; a plain WRITE message just
  advances the order. A message whose receive is not posted yet waits for one
  (counted: MRC has no RNR).

Sans-IO: :meth:`TargetQP.receive` takes a decoded packet and ``now``;
replies collect in :attr:`TargetQP.out` as ``(datagram, ev)`` — the EV the
reply goes back on is the one the packet came on — and completions in
:attr:`TargetQP.completions`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.memory import MemoryAccessError, MemoryTable, ProtectionDomain
from emu.core.psn import PSN24
from emu.core.reliable.window import RecvWindow, Rx
from emu.core.verbs import RecvWR
from emu.transports.mrc import fastpath
from emu.wire import mrc_defs
from emu.wire.codec.mrc import (
    METH,
    MPR_UNIT,
    MRC_RELIABILITY_NACK,
    MRC_TRANSPORT_ACK,
    NACK_PSN_OOR_WINDOW,
    NACK_TRIMMED,
    NACK_TRIMMED_LASTHOP,
    NETH,
    PETH,
    RCVD_BYTES_UNIT,
    TSETH,
    WRITE_IMM_OPCODES,
)
from emu.wire.codec.roce import (
    AETH,
    AETH_ACK,
    AETH_NAK,
    BTH,
    RETH,
    ImmDt,
    RocePacket,
    aeth_syndrome,
    encode_packet,
)

#: AETH NAK value for a request the memory checks refuse (IBTA: remote access error)
NAK_REMOTE_ACCESS = 2
#: ``cc_flags`` bit that echoes a CE mark on the SACKed packet's EV (the wire setting's)
CC_FLAG_CE = mrc_defs.CC_FLAG_CE
#: the cc_type of a SACK's congestion fields: NSCC
CC_TYPE_NSCC = 1
_M16, _M24 = 0xFFFF, PSN24.mask


@dataclass(slots=True)
class _Message:
    """One WRITE message being received: its length, what has arrived, its immediate."""

    total: int
    got: int = 0
    imm: int | None = None
    seen_imm_packet: bool = False
    failed: bool = False


@dataclass
class TargetStats:
    """What a target counts (``rx_drop_*``: dropped, never an exception)."""

    c: dict[str, int] = field(default_factory=lambda: dict.fromkeys((
        "rx_packets", "rx_bytes", "rx_duplicate", "rx_stale", "rx_trimmed",
        "rx_out_of_window", "rx_ooo", "rx_ce", "rx_probes", "tx_sacks", "tx_nacks", "tx_naks",
        "rx_access_error", "msgs_done", "imm_waiting_recv", "rx_drop_malformed",
        "tx_ack_repeats", "rx_trimmed_silent"), 0))


class TargetQP:
    """The receive side of one MRC QP connected to ``peer_qpn``.

    ``mpr``: the receive window in packets (a multiple of 128, MRC's MPR unit);
    ``start_psn``: the peer's first PSN; ``pd``: the QP's protection domain (a
    remote access must name a region of it)."""

    def __init__(self, qpn: int, peer_qpn: int, memory: MemoryTable, *, start_psn: int = 0,
                 mpr: int = 16 * MPR_UNIT, pd: ProtectionDomain | None = None,
                 trim_nack: bool = True) -> None:
        if mpr <= 0 or mpr % MPR_UNIT:
            raise ValueError(f"MPR {mpr} packets is not a positive multiple of {MPR_UNIT}")
        if mpr > PSN24.half:
            raise ValueError(f"MPR {mpr} packets is more than half the PSN space")
        fastpath.check_qp(peer_qpn)  # what every reply's BTH and SACK carry (.fastpath)
        fastpath.check_mpr(mpr)
        self.qpn = qpn
        self.peer = peer_qpn
        self.memory = memory
        self.pd = pd
        self.mpr = mpr
        #: the TRIM_NACK capability (mrc.h): NACK a trimmed packet at once; without it a
        #: trimmed packet is dropped as a loss the sender finds by SACKs or its timeout
        self.trim_nack = trim_nack
        # [cack + 1, cack + MPR): MPR - 1 PSNs past the last in-order one (specs/mrc.md)
        self.window = RecvWindow(PSN24, start_psn, mpr - 1)
        self.msgs: dict[int, _Message] = {}  # MSN (16-bit, wrapping) → message
        self.next_msn = 0  # the next message to complete, in order
        self.recvs: deque[RecvWR] = deque()
        self.out: list[tuple[bytearray, int]] = []
        self.last_aeth: bytearray | None = None  # the last transport ACK/NAK, said again on a probe
        self.nakked = False  # a remote access NAK went out: nothing after it is ACKed
        self.completions: list[WorkCompletion] = []
        self.rcvd_bytes = 0
        self.stats = TargetStats().c

    # -- verbs ---------------------------------------------------------------------------

    def post_recv(self, wr: RecvWR) -> None:
        """A receive for a WRITE with immediate (its SGEs are not written: the data went
        where the RETH said). Completes a message that was waiting for one."""
        self.recvs.append(wr)
        self._complete_in_order()

    # -- the wire ------------------------------------------------------------------------

    def receive(self, pkt: RocePacket, ev: int, now: float, *, ce: bool = False) -> None:
        """One whole WRITE packet that came on ``ev``, decoded (the general path: the
        engine's fast path reads the same fields straight from the datagram,
        :func:`.fastpath.read_data`, and calls :meth:`write`); ``ce``: its IP header was
        CE-marked (a trimmed one goes to :meth:`trimmed`)."""
        meth, reth = pkt.header(METH), pkt.header(RETH)
        if not isinstance(meth, METH) or not isinstance(reth, RETH):
            self.stats["rx_drop_malformed"] += 1  # (a decoded WRITE always has both)
            return
        bth = pkt.bth
        ts = pkt.header(TSETH)
        imm = pkt.header(ImmDt) if bth.opcode in WRITE_IMM_OPCODES else None
        self.write(bth.opcode, bth.psn, bth.ackreq, meth.msn, reth.va, reth.rkey, reth.dmalen,
                   (imm.imm if isinstance(imm, ImmDt) else 0)
                   if bth.opcode in WRITE_IMM_OPCODES else None,
                   pkt.payload, ev, now, ce, ts.tx_timestamp if isinstance(ts, TSETH) else 0)

    def write(self, op: int, wire_psn: int, ackreq: int, msn: int, va: int, rkey: int,
              dmalen: int, imm: int | None, payload: bytes | memoryview, ev: int, now: float,
              ce: bool, ts: int = 0) -> None:
        """A WRITE packet's fields (opcode, BTH PSN and AckReq, METH's MSN, RETH, the
        immediate of an _IMM opcode, the payload, TSETH's timestamp or 0): the window's
        verdict, placement, its SACK, completions in order."""
        st = self.stats
        window = self.window
        psn = window.ext(wire_psn)
        verdict = window.classify(psn)
        if verdict is Rx.OUT_OF_WINDOW:
            st["rx_out_of_window"] += 1
            self._nack(NACK_PSN_OOR_WINDOW, wire_psn, ev, ce)
            return
        if verdict is Rx.STALE:
            st["rx_stale"] += 1  # a stray from before the window: only an ACK to repeat
            if ackreq:
                self._repeat_ack()
            return
        st["rx_packets"] += 1
        st["rx_ce"] += ce
        if verdict is Rx.DUPLICATE:
            st["rx_duplicate"] += 1  # its SACK was lost or late: say it again
            self._sack(psn, ev, ce, ts)
            if ackreq:  # and the transport ACK, if one is asked for (it may be lost)
                self._repeat_ack()
            return
        n = len(payload)
        if psn > window.first_missing:
            st["rx_ooo"] += 1
        window.accept(psn)
        st["rx_bytes"] += n
        self.rcvd_bytes += n
        self._place(op, msn, va, rkey, dmalen, imm, payload)
        self._sack(psn, ev, ce, ts)
        self._complete_in_order()

    def trimmed(self, bth: BTH, ev: int, *, ce: bool = False, reason: int = NACK_TRIMMED
                ) -> None:
        """A WRITE packet a switch cut to its headers (only its BTH is read): NACKed at
        once with ``reason`` (TRIMMED, or TRIMMED_LASTHOP at the receiver's own port),
        not accepted — the sender resends it without waiting for a timeout."""
        self.stats["rx_trimmed"] += 1
        if not self.trim_nack:
            self.stats["rx_trimmed_silent"] += 1
            return
        self._nack(reason, bth.psn, ev, ce)

    def resize(self, mpr: int) -> None:
        """A new receive window (MPR, a multiple of 128 packets), advertised in every
        SACK's ``mpr`` field from now on; a sender with DYNAMIC_MPR follows it."""
        if mpr <= 0 or mpr % MPR_UNIT or mpr > PSN24.half:
            raise ValueError(f"MPR {mpr} packets is not a positive multiple of {MPR_UNIT}")
        fastpath.check_mpr(mpr)
        self.mpr = mpr
        self.window.size = mpr - 1

    def probe(self, pkt: RocePacket, ev: int, now: float) -> None:
        """A RELIABILITY_PROBE (PETH; it consumes no PSN) that came on ``ev``: answered at
        once by a SACK with PR set, echoing the EV and the probe's timestamp — the path
        works. The SACK carries the window as it stands, like any other."""
        peth = pkt.header(PETH)
        if not isinstance(peth, PETH):
            self.stats["rx_drop_malformed"] += 1
            return
        self.stats["rx_probes"] += 1
        self._sack(self.window.first_missing - 1, ev, False, peth.tx_timestamp, probe=True)
        self._repeat_ack()  # and where the transport ACK stands: one may be lost

    def _repeat_ack(self) -> None:
        if self.last_aeth is not None:
            self.out.append((self.last_aeth, 0))
            self.stats["tx_ack_repeats"] += 1

    def _place(self, op: int, msn: int, va: int, rkey: int, dmalen: int, imm: int | None,
               payload: bytes | memoryview) -> None:
        msg = self.msgs.get(msn)
        if msg is None:
            msg = self.msgs[msn] = _Message(dmalen)
        try:
            self.memory.remote_write(rkey, va, payload, self.pd)
        except MemoryAccessError as e:
            self.stats["rx_access_error"] += 1
            if not msg.failed:
                msg.failed = True
                self._transport_nak(msn, str(e))
        msg.got += len(payload)
        if op in WRITE_IMM_OPCODES:
            msg.imm = imm
            msg.seen_imm_packet = True

    def _complete_in_order(self) -> None:
        """Complete messages in MSN order while the next one is whole."""
        while True:
            msg = self.msgs.get(self.next_msn)
            if msg is None or msg.got < msg.total:
                return
            if msg.seen_imm_packet and not msg.failed:
                if not self.recvs:
                    self.stats["imm_waiting_recv"] += 1
                    return
                wr = self.recvs.popleft()
                self.completions.append(WorkCompletion(
                    wr.wr_id, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM, self.qpn,
                    byte_len=msg.total, imm=msg.imm, src_qp=self.peer))
            del self.msgs[self.next_msn]
            self.stats["msgs_done"] += 1
            if not msg.failed and not self.nakked:  # a failed one had its NAK, and after
                self._transport_ack(self.next_msn)  # a NAK nothing is ACKed (RC's rule)
            self.next_msn = (self.next_msn + 1) & _M16

    # -- replies -------------------------------------------------------------------------

    def _bth(self, opcode: int, psn: int) -> BTH:
        return BTH(opcode=opcode, dqpn=self.peer, psn=psn & PSN24.mask)

    def _sack(self, psn: int, ev: int, ce: bool, ts: int, *, probe: bool = False) -> None:
        """The SACK answering extended ``psn`` (which came on ``ev``, CE-marked or not,
        with timestamp ``ts`` to reflect): built in one call (:func:`.fastpath.sack`),
        its fields in range by construction (the window's MPR by :meth:`resize`)."""
        cack, base, bitmap = self.window.sack(psn)
        m, cc_flags = mrc_defs.seth_feedback(ce)  # the CE echo where the M-field setting says
        wire_cack = cack & _M24
        self.out.append((fastpath.sack(
            self.peer, wire_cack, m, int(probe), _s16(psn - cack), ev, self.qpn & _M16,
            self.peer & _M16, cc_flags, CC_TYPE_NSCC, self.mpr // MPR_UNIT, _s16(base - cack),
            bitmap, ts, min(self.window.ooo, 0x7FFF),
            (self.rcvd_bytes // RCVD_BYTES_UNIT) & _M24), ev))
        self.stats["tx_sacks"] += 1

    def _nack(self, reason: int, psn: int, ev: int, ce: bool) -> None:
        neth = NETH(nack_reason=reason, ev=ev, spdcid=self.qpn & _M16, dpdcid=self.peer & _M16,
                    nack_psn=psn & PSN24.mask, cc_type=CC_TYPE_NSCC,
                    cc_flags=CC_FLAG_CE if ce else 0)
        self.out.append((encode_packet(self._bth(MRC_RELIABILITY_NACK, psn), [neth]), ev))
        self.stats["tx_nacks"] += 1

    def _transport_ack(self, msn: int) -> None:
        """The semantic ACK of message ``msn`` (AETH's MSN: the messages completed)."""
        aeth = AETH(syndrome=aeth_syndrome(AETH_ACK, 0x1F), msn=msn & 0xFFFFFF)
        self.last_aeth = encode_packet(self._bth(MRC_TRANSPORT_ACK, 0), [aeth])
        self.out.append((self.last_aeth, 0))

    def _transport_nak(self, msn: int, why: str) -> None:
        aeth = AETH(syndrome=aeth_syndrome(AETH_NAK, NAK_REMOTE_ACCESS), msn=msn & 0xFFFFFF)
        self.last_aeth = encode_packet(self._bth(MRC_TRANSPORT_ACK, 0), [aeth])
        self.out.append((self.last_aeth, 0))
        self.nakked = True
        self.stats["tx_naks"] += 1

    def take(self) -> list[tuple[bytearray, int]]:
        """The replies to send, oldest first (and forget them)."""
        out, self.out = self.out, []
        return out


def _s16(x: int) -> int:
    """``x`` as the signed 16-bit offset SETH carries (clamped: a 64-bit bitmap and the
    window keep real offsets far inside it)."""
    return x if -0x8000 <= x <= 0x7FFF else (0x7FFF if x > 0 else -0x8000)


def trimmed_reason(last_hop: bool) -> int:
    """The NACK reason for a trimmed packet: which DSCP the switch wrote says where."""
    return NACK_TRIMMED_LASTHOP if last_hop else NACK_TRIMMED

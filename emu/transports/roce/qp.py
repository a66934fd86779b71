# SPDX-License-Identifier: GPL-2.0-only
"""RC queue-pair state: the verbs state machine, attributes and per-QP plumbing.

A QP is two independent halves sharing a state and a wire identity: the
*requester* (our send queue, :mod:`.requester`) and the *responder* (the
peer's requests, our receive queue, :mod:`.responder`). This module holds
what both need — state, attributes, the pacer, the congestion controller,
timers, the TX metadata — so neither half imports the other.

States and legal transitions follow ``ibv_modify_qp`` for RC (the kernel's
``ib_modify_qp_is_ok`` table; the attributes each one takes are in
:mod:`.modify`)::

    RESET → INIT → RTR → RTS ⇄ SQD;  INIT/RTR/RTS/SQD/SQE → ERR;  any → RESET

SQE → RTS is legal, but nothing enters SQE: RC moves to ERR on a send-queue
error, as real HCAs do, and an application cannot ask for SQE.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from emu.cc import CongestionControl
from emu.core.cq import WcStatus, WorkCompletion
from emu.core.memory import Access, MemoryTable, ProtectionDomain
from emu.core.psn import PSN24
from emu.core.timers import TimerSet
from emu.core.trace import Trace
from emu.transports.base import ECN_ECT0, ECN_NOT_ECT, Addr, TxMeta, VerbsError

if TYPE_CHECKING:
    from emu.transports.roce.requester import Requester
    from emu.transports.roce.responder import Responder


class QpState(enum.Enum):
    RESET = "RESET"
    INIT = "INIT"
    RTR = "RTR"
    RTS = "RTS"
    SQD = "SQD"
    SQE = "SQE"
    ERR = "ERR"


_S = QpState
TRANSITIONS: dict[QpState, frozenset[QpState]] = {
    _S.RESET: frozenset({_S.RESET, _S.INIT}),
    _S.INIT: frozenset({_S.INIT, _S.RTR, _S.RESET, _S.ERR}),
    _S.RTR: frozenset({_S.RTS, _S.RESET, _S.ERR}),
    _S.RTS: frozenset({_S.RTS, _S.SQD, _S.RESET, _S.ERR}),
    _S.SQD: frozenset({_S.SQD, _S.RTS, _S.RESET, _S.ERR}),
    _S.SQE: frozenset({_S.RTS, _S.RESET, _S.ERR}),
    _S.ERR: frozenset({_S.RESET, _S.ERR}),
}

PMTU_VALUES = (256, 512, 1024, 2048, 4096)

#: IB RNR timer codes (5 bits) in milliseconds; code 0 is the longest (655.36 ms).
RNR_TIMER_MS = (655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48,
                0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72,
                40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52)

RNR_RETRY_INFINITE = 7


def ack_timeout(code: int) -> float | None:
    """Local ACK timeout in seconds: 4.096 µs × 2^code; code 0 means wait forever."""
    return None if code == 0 else 4.096e-6 * (1 << code)


def rnr_delay(code: int) -> float:
    """The RNR NAK timer code as seconds."""
    return RNR_TIMER_MS[code & 0x1F] / 1000.0


@dataclass(slots=True)
class QpAttr:
    """``ibv_qp_attr`` fields RC uses. PSNs are 24-bit; codes are the IB 5/3-bit codes.

    ``dest_addr`` is where datagrams go (the daemon's peer socket address);
    ``dest_gid`` is informational (the client exchanges it; the daemon maps it
    to ``dest_addr``). ``udp_sport`` 0 means "draw one" (the QP's entropy).
    """

    pmtu: int = 1024
    sq_psn: int = 0
    rq_psn: int = 0
    dest_qp_num: int = 0
    dest_gid: str = ""
    dest_addr: Addr | None = None
    timeout: int = 14
    retry_cnt: int = 7
    rnr_retry: int = 7
    min_rnr_timer: int = 12
    max_rd_atomic: int = 16
    max_dest_rd_atomic: int = 16
    pkey: int = 0xFFFF
    dscp: int = 26
    udp_sport: int = 0
    access: Access = Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
    # what verbs' modify_qp sets and query_qp reports, with no effect on the wire here:
    # one P_Key, the daemon's sockets' own TTL, DSCP as the priority (not the SL)
    pkey_index: int = 0
    port_num: int = 1
    sgid_index: int = 0
    hop_limit: int = 64
    flow_label: int = 0
    sl: int = 0
    #: IBV_QP_EN_SQD_ASYNC_NOTIFY: say when the send queue has drained in SQD
    sqd_notify: int = 0

    def update(self, changes: dict[str, Any]) -> None:
        """Apply ``changes`` after validating every value (all or nothing)."""
        names = {f.name for f in fields(self)}
        for k, v in changes.items():
            if k not in names:
                raise VerbsError(f"unknown QP attribute {k!r}")
            _validate(k, v)
        for k, v in changes.items():
            setattr(self, k, Access(v) if k == "access" else v)


_RANGES = {"sq_psn": (0, PSN24.mask), "rq_psn": (0, PSN24.mask), "dest_qp_num": (0, 0xFFFFFF),
           "timeout": (0, 31), "retry_cnt": (0, 7), "rnr_retry": (0, 7),
           "min_rnr_timer": (0, 31), "max_rd_atomic": (0, 255), "max_dest_rd_atomic": (0, 255),
           "pkey": (0, 0xFFFF), "dscp": (0, 63), "udp_sport": (0, 0xFFFF),
           "pkey_index": (0, 0xFFFF), "port_num": (1, 255), "sgid_index": (0, 255),
           "hop_limit": (0, 255), "flow_label": (0, 0xFFFFF), "sl": (0, 15),
           "sqd_notify": (0, 1)}


def _validate(name: str, v: Any) -> None:
    if name == "pmtu":
        if v not in PMTU_VALUES:
            raise VerbsError(f"pmtu must be one of {PMTU_VALUES}, got {v!r}")
    elif name in _RANGES:
        lo, hi = _RANGES[name]
        if not isinstance(v, int) or not lo <= v <= hi:
            raise VerbsError(f"{name} must be an integer in {lo}..{hi}, got {v!r}")


@dataclass(eq=False)
class QueuePair:
    """One RC QP: shared state of its requester and responder halves."""

    qpn: int
    pd: ProtectionDomain | None
    send_cq: Any
    recv_cq: Any
    max_send_wr: int
    max_recv_wr: int
    attr: QpAttr = field(default_factory=QpAttr)
    state: QpState = QpState.RESET
    timers: TimerSet = field(default_factory=TimerSet)
    cc: CongestionControl | None = None
    line_rate: float = 100e9
    burst_s: float = 0.0
    #: how far ahead of its schedule the pacer may let data go while the QP runs at the
    #: line rate (:meth:`lead`); 0: never ahead
    lead_s: float = 0.0
    #: bytes the port adds to each packet on the wire (IP, UDP, Ethernet), which the pacer
    #: charges too: at the line rate its schedule is then the port's own, not ~1 % ahead
    #: of it (a pacer running ahead filled the port's FIFO, and the daemon then woke for
    #: the port instead)
    frame_overhead: int = 0
    next_tx: float = float("-inf")  # pacer: earliest time the next paced packet may go
    data_meta: TxMeta = field(default_factory=lambda: TxMeta(0))
    ctrl_meta: TxMeta = field(default_factory=lambda: TxMeta(0))
    last_cnp_sent: float = float("-inf")
    cnp_pending: bool = False
    #: the QP's path policy when the engine changes its entropy (flowlets), else None:
    #: its source port stays ``attr.udp_sport``, per-flow ECMP as RoCEv2 has always been
    paths: Any = None
    #: SQD: the drained state was reached (and, if asked, announced) since entering SQD
    sqd_told: bool = False
    #: the pacer holds this QP's data back (its "pace" timer is armed), and nothing else
    #: does: :meth:`on_paced_send` then judges how late the daemon served it
    pace_held: bool = False
    #: … and it was running ahead of its schedule then (:meth:`hold`)
    held_ahead: bool = False
    #: the engine's counters (``pacer_late``, ``pacer_late_us``: see :meth:`on_paced_send`)
    stats: Any = None
    requester: Requester = field(init=False, repr=False)
    responder: Responder = field(init=False, repr=False)

    def refresh_meta(self) -> None:
        """Rebuild the per-QP TX metadata after an attribute change (reused per packet)."""
        a = self.attr
        self.data_meta = TxMeta(a.udp_sport, a.dscp, ECN_ECT0)
        self.ctrl_meta = TxMeta(a.udp_sport, a.dscp, ECN_NOT_ECT)

    @property
    def rate(self) -> float:
        """Bits/s the pacer enforces: the controller's rate, else the line rate."""
        return self.cc.rate if self.cc is not None else self.line_rate

    def lead(self) -> float:
        """Seconds the pacer may run ahead of its schedule now: ``lead_s`` at the line
        rate, else 0.

        Why: at the line rate the pacer's schedule is the port's — the port's
        serializer (and the kernel's shaper behind it) puts each frame on the wire at
        the same instant whether the QP handed it over on time or earlier — so running
        ahead into the port's FIFO changes nothing on the wire, and it lets the daemon
        serve the QP once per ``lead_s / 2`` instead of once per packet: a RoCEv2
        sender at 500 Mb/s woke for every ~4 packets and spent ~0.8 of a core on it
        (``docs/measurements.md``). Below the line rate (a DCQCN cut) the pacer spaces
        each packet itself: frames handed over early would reach the wire back to
        back, a burst the rate limiter exists to prevent."""
        return self.lead_s if self.lead_s and self.rate >= self.line_rate else 0.0

    def may_send(self, now: float) -> bool:
        return self.next_tx <= now + (self.lead() if self.lead_s else 0.0)

    def hold(self) -> float:
        """The pacer holds this QP's data back (``pace_held``); returns when it may send
        again: its next packet's time, or — when running ahead (:meth:`lead`) — once
        half the lead has drained, so that each turn hands the port half a lead of
        packets while the other half still feeds the wire. Remembers which
        (``held_ahead``): that decides how a late turn is judged (:meth:`on_paced_send`)."""
        lead = self.lead() if self.lead_s else 0.0
        self.pace_held = True
        self.held_ahead = lead > 0
        return self.next_tx - lead / 2

    def _pace_start(self, now: float) -> float:
        """When the pacer's next packet is due: credit saved while idle is capped at
        ``burst_s`` — and none while running ahead (:meth:`lead`): the port serializes no
        faster than the line rate, so credit would only overfill its FIFO."""
        start = self.next_tx
        floor = now if self.lead_s and self.lead() else now - self.burst_s
        return floor if start < floor else start

    def paced_count(self, nbytes: int, now: float, most: int) -> int:
        """How many packets of ``nbytes`` the pacer lets out now, at most ``most``."""
        start = self._pace_start(now)
        ahead = now + self.lead() if self.lead_s else now
        if start > ahead:
            return 0
        pkt = (nbytes + self.frame_overhead) * 8.0 / self.rate
        return min(most, int((ahead - start) / pkt) + 1)

    def on_paced_send(self, nbytes: int, now: float, count: int = 1) -> None:
        """Charge ``count`` packets of ``nbytes`` to the pacer and the controller — the
        one pacing rule of single packets and bursts.

        A QP its pacer held with data waiting (``pace_held``) that is served later than
        its due time by more than the pacer's saved credit (``burst_s``) lost the rest:
        a rate limiter in hardware is never late, so that is the daemon's lateness — a
        CPU-starved timer — and counts as emulator overload (``pacer_late``, with the
        time in ``pacer_late_us``) beyond a packet's time. Without it, a late daemon
        cost a RoCEv2 write-bw ~9 % of its rate with nothing said (pair, 1 Gb/s).
        A QP held while running ahead at the line rate (:meth:`hold`) has no credit to
        spend: the port serializes no faster than the line rate, so its schedule
        passing with nothing handed over is link time lost, all of it. (One held below
        the line rate, whose rate recovered before its turn, is judged as it was held:
        it had left the port idle between packets by design.)"""
        start = self._pace_start(now)
        pkt = (nbytes + self.frame_overhead) * 8.0 / self.rate
        if self.pace_held:
            self.pace_held = False
            # > 0: the port's FIFO ran dry before now (held ahead), or the credit cap
            # clipped the wait (held at its packet's time)
            lost = (now if self.held_ahead else now - self.burst_s) - self.next_tx
            if lost > pkt and self.stats is not None:
                self.stats["pacer_late"] += 1
                self.stats["pacer_late_us"] += int(lost * 1e6)
        self.next_tx = start + count * pkt
        if self.cc is not None:
            self.cc.on_sent(count * nbytes, now)

    def get_timer(self) -> float | None:
        t = self.timers.earliest()
        if self.cc is not None:
            c = self.cc.get_timer()
            if c is not None and (t is None or c < t):
                t = c
        return t

    @property
    def sending_allowed(self) -> bool:
        """The requester may send and take responses: RTS, and SQD while it drains (it
        finishes the messages it started, retransmissions included, and starts none:
        ``Requester.next_packet``, ``Requester.has_work``)."""
        return self.state is QpState.RTS or self.state is QpState.SQD

    @property
    def receiving_allowed(self) -> bool:
        """The responder accepts requests from RTR on: in RTR, RTS, SQD and SQE (a drained
        or failed send queue leaves the receive queue working, IBTA 10.3.1)."""
        s = self.state
        return s is QpState.RTS or s is QpState.RTR or s is QpState.SQD or s is QpState.SQE


class EngineCtx(Protocol):
    """What the requester and responder need from their engine (and nothing more)."""

    memory: MemoryTable
    stats: dict[str, int]
    trace: Trace
    ack_every: int
    ack_req_every: int
    max_psn_ahead: int

    def complete(self, cq: Any, wc: WorkCompletion) -> None: ...

    def qp_error(self, qp: QueuePair, status: WcStatus, reason: str, now: float) -> None: ...

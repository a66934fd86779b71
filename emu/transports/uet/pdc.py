# SPDX-License-Identifier: GPL-2.0-only
"""Packet delivery contexts (PDCs): the per-peer state of UET's PDS, as plain data.

A PDC replaces RoCE's queue pair: the initiator opens one per {job, source,
destination, traffic class} on demand, and the target creates its half when
the first SYN arrives (uet.md: Behaviour, PDC). The *behaviour* on these
records lives in :mod:`emu.transports.uet.pds`; this module holds what both
halves and the engine share — constants, the NACK reaction table, states and
the PDCID allocator — so the logic modules stay readable.

Sequence numbers are kept as *extended* integers internally (``start_psn``
plus a count, never wrapped) and wrapped to 32 bits only on the wire, so a
random Start_PSN near 2^32 needs no special cases (see :mod:`emu.core.psn`).
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from emu.core.psn import PSN32
from emu.core.reliable.retransmit import RetransmitQueue
from emu.core.reliable.scoreboard import Scoreboard
from emu.core.reliable.window import RecvWindow
from emu.core.reorder import PlacementTracker
from emu.core.rto import RtoEstimator
from emu.core.sack import RangeSet
from emu.core.timers import TimerSet
from emu.wire.uet_defs import NACK_CODES, PDS_TYPE

#: UDP destination port of UET (uet.md: Encapsulation)
UDP_PORT = 4793
#: MP_RANGE = mpr × this many PSNs (uet.md: Behaviour, Window)
MPR_UNIT = 128
#: ACK at least every this many accepted bytes … (uet.md: ACK generation)
ACK_BYTES = 16 * 1024
#: … each packet counting at least this much (uet.md: ACK generation)
ACK_MIN_COUNT = 1024
#: NSCC cc_state ``service_time`` (u16, uet.md: ACK_CC) counts in these seconds. The
#: unit is not in the public sources; a microsecond spans what a daemon may hold a
#: packet (up to 65 ms) and a peer that sends 0 — as emu-ref does — means "none"
SERVICE_TIME_UNIT = 1e-6


def service_field(held: float) -> int:
    """``held`` seconds as the ``service_time`` field (saturating, never negative)."""
    st = round(held / SERVICE_TIME_UNIT)
    return 0 if st <= 0 else st if st < 0xFFFF else 0xFFFF


def held_out(t: float, ack: Any) -> float:
    """A round-trip sample — or an ACK's arrival time — less the time the target says
    it held what the ACK answers (NSCC ``service_time``, ACK_CC only; uet.md): what
    the network took, or when the ACK would have come from a target answering at once."""
    st = getattr(ack, "service_time", 0)
    if st:
        t -= st * SERVICE_TIME_UNIT
        return t if t > 0.0 else 0.0
    return t


#: bytes a data packet puts on a wire beyond its payload, roughly (PDS and SES headers,
#: UDP, IPv6, Ethernet): only for the port model that tells when a waiting flow's port idled
WIRE_OVERHEAD = 120

#: a SYN's psn_offset is 12 bits: the initiator may not run further ahead before the first ACK
SYN_PSN_SPAN = 1 << 12
#: DSCPs (uet.md: Encapsulation — R: data CS0, ACK/NACK/control EF)
DSCP_DATA = 0
DSCP_CTRL = 46

# NACK codes (uet.md: NACK codes) — the ones the engine sends or reacts to by name
NACK_TRIMMED = 0x01
NACK_TRIMMED_LASTHOP = 0x02
NACK_TRIMMED_ACK = 0x03
NACK_NO_SES_MSG_AVAIL = 0x09
NACK_PSN_OOR_WINDOW = 0x0B
NACK_INV_DPDCID = 0x0E
NACK_PDC_HDR_MISMATCH = 0x0F
NACK_ROD_OOO = 0x0D
NACK_PDC_MODE_MISMATCH = 0x16
NACK_NEW_START_PSN = 0x17
NACK_RCVD_SES_PROCG = 0x18

# control packet types (uet.md: Control types)
(CP_NOOP, CP_ACK_REQ, CP_CLEAR, CP_CLEAR_REQ, CP_CLOSE, CP_CLOSE_REQ, CP_PROBE, CP_CREDIT,
 CP_CREDIT_REQ) = range(9)
# ACK REQ field (uet.md: Flags)
ACK_REQ_NONE, ACK_REQ_CLEAR, ACK_REQ_CLOSE = 0, 1, 2


class Reaction(enum.Enum):
    """What an initiator does with a NACK (uet.md: NACK codes, R's reaction column)."""

    RETRANSMIT = "retransmit"
    CLOSE = "close"
    NEW_START_PSN = "new_start_psn"
    IGNORE = "ignore"


_RETX_CODES = (*range(0x01, 0x0C), 0x0D, 0x12, 0x14, 0x1A)
_CLOSE_CODES = (0x0E, 0x0F, 0x10, 0x11, 0x13, 0x15, 0x16, 0x19)
#: NACK code → reaction; codes not listed are counted and ignored
NACK_REACTIONS: dict[int, Reaction] = {
    **{c: Reaction.RETRANSMIT for c in _RETX_CODES},
    **{c: Reaction.CLOSE for c in _CLOSE_CODES},
    NACK_NEW_START_PSN: Reaction.NEW_START_PSN,
    NACK_RCVD_SES_PROCG: Reaction.IGNORE,
}
#: trimming NACKs: retransmit at once, without waiting (uet.md: Trimming)
TRIM_CODES = frozenset({NACK_TRIMMED, NACK_TRIMMED_LASTHOP, NACK_TRIMMED_ACK})

#: counter name per NACK code: one per code the spec names, every other code in one
#: "other" — the code comes off the wire, and a counter per value ever seen let a
#: fuzzer grow the table without bound (issue #14)
_NACK_SUFFIX = {c: f"{c:#04x}" for c in NACK_CODES}


def nack_counter(prefix: str, code: int) -> str:
    """``rx_nack_0x01``-style counter name for ``code``; ``<prefix>_other`` if unnamed."""
    return f"{prefix}_{_NACK_SUFFIX.get(code, 'other')}"


class Mode(enum.IntEnum):
    """Delivery mode; the value is the PDS request type that carries it (uet.md: PDS
    prologue). RUD and ROD run on PDCs (keyed per mode), RUDI and UUD have none."""

    RUD = PDS_TYPE["RUD_REQ"]  # reliable, unordered: each packet goes to SES at once
    ROD = PDS_TYPE["ROD_REQ"]  # reliable, ordered: only the in-order prefix is delivered
    RUDI = PDS_TYPE["RUDI_REQ"]  # reliable, unordered, idempotent: no PDC, per-packet id
    UUD = PDS_TYPE["UUD_REQ"]  # unreliable datagrams: one packet, no ACK (:mod:`.uud`)

    @classmethod
    def parse(cls, mode: Mode | str | int) -> Mode:
        """``Mode.ROD``, ``"rod"`` or ``3`` → ``Mode.ROD``; ValueError otherwise."""
        if isinstance(mode, str):
            try:
                return cls[mode.upper()]
            except KeyError:
                raise ValueError(f"unknown UET delivery mode {mode!r} (rud, rod, rudi, uud)"
                                 ) from None
        return cls(mode)


class PdcState(enum.Enum):
    """Initiator PDC life cycle (uet.md: Behaviour, PDC and Close)."""

    SYN_SENT = "SYN_SENT"  # requests carry SYN + psn_offset; DPDCID unknown
    ESTABLISHED = "ESTABLISHED"
    CLOSING = "CLOSING"  # no new messages; CLOSE goes out once everything is ACKed
    CLOSED = "CLOSED"
    ERROR = "ERROR"  # closed in error: retries exhausted or a "close PDC" NACK


_P = PdcState
#: every move an initiator PDC may make (:meth:`InitiatorPdc.move` refuses the rest), as
#: RoCEv2's QP has ``qp.TRANSITIONS``: SYN_SENT → ESTABLISHED on the first ACK (it brings
#: DPDCID); → CLOSING on ``close_pdc`` or the target's ACK REQ=CLOSE; ESTABLISHED →
#: SYN_SENT on NEW_START_PSN (SYN again from the new Start_PSN); CLOSING → CLOSED when
#: the CLOSE is ACKed (or was never needed); any open state → ERROR. Ended PDCs stay ended.
PDC_TRANSITIONS: dict[PdcState, frozenset[PdcState]] = {
    _P.SYN_SENT: frozenset({_P.ESTABLISHED, _P.CLOSING, _P.ERROR}),
    _P.ESTABLISHED: frozenset({_P.CLOSING, _P.SYN_SENT, _P.ERROR}),
    _P.CLOSING: frozenset({_P.CLOSED, _P.ERROR}),
    _P.CLOSED: frozenset(),
    _P.ERROR: frozenset(),
}


class PdcStateError(RuntimeError):
    """A PDC was asked to make a move :data:`PDC_TRANSITIONS` does not have (a bug)."""


class PdcIds:
    """16-bit PDCIDs shared by initiator and target halves of one engine; 0 is reserved
    (uet.md: Behaviour, PDC), so an ACK's DPDCID always names exactly one PDC."""

    def __init__(self, first: int = 1) -> None:
        self._next = first if 0 < first <= 0xFFFF else 1
        self.used: set[int] = set()

    def alloc(self) -> int:
        for _ in range(0xFFFF):
            p = self._next
            self._next = p + 1 if p < 0xFFFF else 1
            if p not in self.used:
                self.used.add(p)
                return p
        raise RuntimeError("no free PDCID")

    def free(self, pdcid: int) -> None:
        self.used.discard(pdcid)


# -- initiator ------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class TxMessage:
    """One SES message (WRITE or SEND) on its way out.

    ``views`` are the application's gather buffers; retransmissions re-read
    them (RDMA semantics: the buffer is the application's until completion),
    so no packet bytes are stored. The message completes when every packet
    is ACKed *and* the target's SES response arrived (uet.md: SES Responses).
    """

    wr_id: int
    ep: int
    opcode: int  # SES opcode (WRITE 0x01, SEND 0x05)
    data: memoryview
    length: int
    dest_ep: int
    remote_addr: int = 0
    rkey: int = 0
    signaled: bool = True
    message_id: int = 0
    next_offset: int = 0  # segmentation progress
    all_sent: bool = False
    unacked: int = 0  # packets sent and not yet ACKed
    eom_psn: int | None = None  # extended PSN of the EOM packet (re-sent to fetch a response)
    response: int | None = None  # SES return code, once known
    waiting_since: float | None = None  # all packets ACKed, response missing
    retries: int = 0
    # what the SES operations beyond WRITE/SEND need (emu.transports.uet.ses_shape):
    #: next_hdr of its requests: 1 small, 2 medium, 3 standard SES header
    shape: int = 3
    #: the wire request_length when it differs from the bytes sent (a READ asks for
    #: ``req_length`` bytes and sends none)
    req_length: int | None = None
    ext: Any = None  # extension header (atomic, compare-and-swap, rendezvous)
    #: the initiator-side object that takes response data and owns the completion
    sink: Any = None
    sink_off: int = 0  # where this request's bytes sit in the sink's buffer


@dataclass(eq=False, slots=True)
class TxPacket:
    """One outstanding request packet (extended PSN); ``msg`` None for a CP (CLOSE)."""

    psn: int
    msg: TxMessage | None
    offset: int
    length: int
    sent_at: float
    retries: int = 0
    ctl_type: int = -1  # >= 0 for a PSN-consuming control packet
    resent: bool = False  # its ACK is no RTT sample (Karn's rule)
    rto_at: float | None = None  # when its first retransmission timeout fired


@dataclass(eq=False)
class InitiatorPdc:
    """The initiator half: messages, the PDC's state and UET's own fields; PSN allocation,
    the outstanding set and the resends owed are the shared core's (``sb``,
    :class:`emu.core.reliable.scoreboard.Scoreboard`)."""

    pdcid: int
    peer: str  # canonical host address of the target (lookup key)
    addr: Any  # the target's address as the caller gave it (where packets go)
    key: Hashable
    start_psn: int  # extended; wire value = start_psn & mask
    window: int  # MP_RANGE in PSNs (ours, lowered to the peer's advertised mpr)
    dpdcid: int | None = None
    state: PdcState = PdcState.SYN_SENT
    #: PSNs handed out and outstanding, and the resends owed (emu.core.reliable)
    sb: Scoreboard[TxPacket] = field(init=False)
    queue: deque[TxMessage] = field(default_factory=deque)  # not yet fully segmented
    msgs: dict[int, TxMessage] = field(default_factory=dict)  # message_id → in flight
    timers: TimerSet = field(default_factory=TimerSet)
    next_msg_id: int = 0
    ctl_pending: list[tuple[int, int]] = field(default_factory=list)  # (CP type, ext PSN)
    close_psn: int | None = None  # extended PSN of our CLOSE
    close_requested: bool = False
    last_ack_ecn: int = 0  # ACKs seen with M set (input for a future NSCC)
    acks: int = 0
    mode: Mode = Mode.RUD  # RUD or ROD (part of the lookup key)
    credit: int | None = None  # last CREDIT the target granted (CP CREDIT; for RCCC)
    #: smoothed round trip, its variation and the RTO they give (emu.core.rto); RTO 0.0
    #: until the first sample, or when the engine's RTO does not adapt
    rtt: RtoEstimator = field(default_factory=RtoEstimator)
    #: when the last loss probe went out (None: none yet): a packet sent before it that
    #: an ACK still shows missing is lost (emu.transports.uet.pds — Initiator.probe)
    probe_at: float | None = None
    probe_end: int = 0  # next_psn then: every PSN below it was sent before the probe
    probes: int = 0  # loss probes since the last ACK that released anything
    quiet_since: float = 0.0  # the last transmission or ACK progress (the probe's clock)

    def __post_init__(self) -> None:
        self.sb = Scoreboard(PSN32, self.start_psn)

    def move(self, new: PdcState) -> PdcState:
        """Change state along :data:`PDC_TRANSITIONS`; returns the old state."""
        old = self.state
        if new not in PDC_TRANSITIONS[old]:
            raise PdcStateError(f"PDC {self.pdcid}: no transition {old.value} → {new.value}")
        self.state = new
        return old

    @property
    def oldest(self) -> int:
        """The oldest unACKed extended PSN (= CLEAR_PSN), or next_psn when all are ACKed."""
        return self.sb.oldest

    @property
    def next_psn(self) -> int:
        """The extended PSN the next request or CP takes."""
        return self.sb.next_psn

    @property
    def unacked(self) -> dict[int, TxPacket]:
        """Outstanding packets, extended PSN → packet, in PSN order."""
        return self.sb.unacked

    def ext(self, wire_psn: int) -> int:
        """Unwrap a wire PSN against our sending position."""
        return PSN32.unwrap(wire_psn, self.sb.next_psn)

    @property
    def established(self) -> bool:
        return self.dpdcid is not None

    def send_window(self) -> int:
        """PSNs we may have in flight: MP_RANGE, and the SYN psn_offset span before the
        first ACK (uet.md: PDS headers — psn_offset is 12 bits)."""
        return self.window if self.established else min(self.window, SYN_PSN_SPAN)


# -- target -------------------------------------------------------------------------


@dataclass(eq=False)
class RecvAssign:
    """A posted receive buffer claimed by an incoming SEND (by message id)."""

    wr_id: int
    ep: int
    views: list[memoryview]
    capacity: int
    length: int
    src_ep: int


class PsnMessages:
    """Which message each received PSN carried, as runs of consecutive PSNs.

    Why runs: a message's packets take consecutive PSNs, so a 1 MiB WRITE is
    one run, not 128 entries, and recording an in-order packet is extending
    the last run (it was an ``OrderedDict`` insert plus trim per packet).
    Runs are sorted by PSN; past ``keep`` PSNs the lowest runs are forgotten
    (a CP ACK_REQ that old gets its ACK without the response)."""

    __slots__ = ("starts", "ends", "mids", "count", "keep")

    def __init__(self, keep: int = 8192) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []  # exclusive
        self.mids: list[int] = []
        self.count = 0
        self.keep = keep

    def add(self, psn: int, mid: int, count: int = 1) -> None:
        """PSN ``psn`` carried message ``mid`` — or the ``count`` PSNs from it, which must
        then lie above every PSN recorded (an in-order run)."""
        ends = self.ends
        if ends and ends[-1] == psn and self.mids[-1] == mid:
            ends[-1] = psn + count
        elif not ends or psn >= ends[-1]:
            self.starts.append(psn)
            ends.append(psn + count)
            self.mids.append(mid)
        elif count != 1:
            raise ValueError("PsnMessages.add: a run must lie above every recorded PSN")
        else:
            i = bisect_right(self.starts, psn)
            if i and psn < ends[i - 1]:
                return  # already recorded
            if i and ends[i - 1] == psn and self.mids[i - 1] == mid:
                ends[i - 1] = psn + 1
            else:
                self.starts.insert(i, psn)
                ends.insert(i, psn + 1)
                self.mids.insert(i, mid)
        self.count += count
        while self.count > self.keep:
            k = min(ends[0] - self.starts[0], self.count - self.keep)
            self.starts[0] += k
            self.count -= k
            if self.starts[0] == ends[0]:
                del self.starts[0], ends[0], self.mids[0]

    def get(self, psn: int) -> int | None:
        """The message id ``psn`` carried, if remembered."""
        i = bisect_right(self.starts, psn)
        return self.mids[i - 1] if i and psn < self.ends[i - 1] else None

    def last_psn(self, mid: int) -> int | None:
        """The highest remembered PSN that carried message ``mid``."""
        for i in range(len(self.mids) - 1, -1, -1):
            if self.mids[i] == mid:
                return self.ends[i] - 1
        return None

    def __len__(self) -> int:
        return self.count


def ack_count(n: int) -> int:
    """Bytes a request of ``n`` payload bytes adds toward the next ACK (the ACK every
    ``ack_bytes`` rule): at least :data:`ACK_MIN_COUNT`, so small requests are ACKed too."""
    return n if n > ACK_MIN_COUNT else ACK_MIN_COUNT


def cleared(clear_psn: int, cp: int, floor: int) -> int:
    """CLEAR_PSN after a request or CP CLEAR names ``cp`` (extended) while ``floor`` is the
    first missing PSN: it moves up, never past one beyond the first missing PSN — the
    initiator has seen everything below it ACKed (uet.md: PDS headers — CLEAR_PSN)."""
    return cp if clear_psn < cp <= floor + 1 else clear_psn


@dataclass(eq=False)
class TargetPdc:
    """The target half: ACK accounting, CLEAR_PSN, SES placement state; which PSNs arrived
    and what a request's PSN is are the shared core's (``win``,
    :class:`emu.core.reliable.window.RecvWindow`)."""

    pdcid: int
    peer: str  # canonical host of the initiator
    addr: Any  # its address as received (where ACKs go)
    ini_pdcid: int  # the initiator's PDCID = DPDCID of our ACKs
    start_psn: int  # wire value of the incarnation's Start_PSN
    window: int
    #: the PSN window (emu.core.reliable): what arrived, the verdict on a request, the SACK
    win: RecvWindow = field(init=False)
    clear_psn: int = 0  # extended; PSNs below it were seen ACKed by the initiator
    bytes_since_ack: int = 0
    #: first_missing when we last asked for a CLEAR (ask again only half a window later)
    clear_asked: int = -(1 << 40)
    rcvd_bytes: int = 0
    placement: PlacementTracker[int] = field(default_factory=PlacementTracker)
    responses: OrderedDict[int, tuple[int, int]] = field(default_factory=OrderedDict)
    sends: dict[int, RecvAssign] = field(default_factory=dict)
    psn_msg: PsnMessages = field(default_factory=PsnMessages)  # ext PSN → message id
    closed_at: int | None = None  # extended PSN of the CLOSE that ended it
    mode: Mode = Mode.RUD  # from the request type of the SYN that created it
    last_rx: float = 0.0  # when the initiator was last heard (idle reaping, :mod:`.control`)
    rod_nacked: int | None = None  # ROD: first_missing we already sent ROD_OOO for
    #: (message id, length, R_Key, buffer offset, region, assembly) of the WRITE the fast
    #: path placed last (Target.write_run): its checks hold for the next packet
    stream: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        # ROD delivers only the in-order prefix: a PSN past the hole is Rx.AHEAD (.rod)
        self.win = RecvWindow(PSN32, self.start_psn, self.window, ordered=self.mode is Mode.ROD)
        self.clear_psn = self.win.first_missing

    @property
    def rcvd(self) -> RangeSet:
        """The PSNs received at or above the first missing one."""
        return self.win.rcvd

    @property
    def ooo(self) -> int:
        """Packets accepted ahead of the first missing PSN."""
        return self.win.ooo

    @property
    def first_missing(self) -> int:
        """Extended PSN of the first PSN not received (CACK_PSN + 1)."""
        return self.win.rcvd.floor_ext

    def ext(self, wire_psn: int) -> int:
        return PSN32.unwrap(wire_psn, self.win.rcvd.floor_ext)

    def clear_to(self, cp: int) -> None:
        """CLEAR_PSN (extended ``cp``, from a request's clear_psn_offset or a CP CLEAR)
        moves up (:func:`cleared`)."""
        self.clear_psn = cleared(self.clear_psn, cp, self.win.rcvd.floor_ext)

    def clear_lags(self, fm: int) -> bool:
        """With ``fm`` the first missing PSN, CLEAR_PSN lags by more than half the window
        and was not asked for within the last half window: the next ACK asks for a
        CLEAR — once, not on every ACK while the initiator's answer (or its next
        requests' clear_psn_offset) is on its way."""
        half = self.window // 2
        return fm - self.clear_psn > half and fm - self.clear_asked > half

    def remember_response(self, message_id: int, rc: int, length: int, keep: int = 4096) -> None:
        """Store a message's SES response so a duplicate can fetch it again."""
        self.responses[message_id] = (rc, length)
        self.responses.move_to_end(message_id)
        while len(self.responses) > keep:
            self.responses.popitem(last=False)

    def remember_psn(self, psn: int, message_id: int) -> None:
        """Which message a PSN carried, so a CP ACK_REQ for it can fetch the response."""
        self.psn_msg.add(psn, message_id)

    def response_for_psn(self, psn: int) -> tuple[int, int, int] | None:
        """(message_id, return code, length) of the message PSN ``psn`` belonged to, if done."""
        mid = self.psn_msg.get(psn)
        if mid is None:
            return None
        r = self.responses.get(mid)
        return None if r is None else (mid, *r)


def snapshot(pdc: InitiatorPdc | TargetPdc) -> dict[str, Any]:
    """JSON-ready summary of a PDC (for ``pdcs()`` and tests)."""
    if isinstance(pdc, InitiatorPdc):
        return {"pdcid": pdc.pdcid, "role": "initiator", "peer": pdc.peer,
                "dpdcid": pdc.dpdcid, "state": pdc.state.value,
                "start_psn": pdc.start_psn & PSN32.mask, "next_psn": pdc.next_psn & PSN32.mask,
                "outstanding": len(pdc.unacked), "queued": len(pdc.queue),
                "window": pdc.window, "mode": pdc.mode.name.lower()}
    return {"pdcid": pdc.pdcid, "role": "target", "peer": pdc.peer, "dpdcid": pdc.ini_pdcid,
            "start_psn": pdc.start_psn, "cack_psn": (pdc.first_missing - 1) & PSN32.mask,
            "window": pdc.window, "mode": pdc.mode.name.lower()}


def resend_for_nack(retx: RetransmitQueue[Any], timers: TimerSet, key: Any, code: int,
                    now: float, delay: float) -> None:
    """Owe ``key`` a resend for a "retransmit" NACK: a trimmed packet at once (uet.md:
    Trimming — no waiting for a timeout), any other code after ``delay`` (the "nack"
    timer), so a packet merely reordered behind the NACK can still be ACKed first.

    The one rule for the PDC initiator and RUDI (which has no PDC)."""
    if code in TRIM_CODES:
        retx.at_once(key)
    else:
        retx.after(key, now + delay)
        timers.set_if_earlier("nack", now + delay)

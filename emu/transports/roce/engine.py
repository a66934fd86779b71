# SPDX-License-Identifier: GPL-2.0-only
"""``RoceEngine``: every RC QP of one NIC behind one UDP port (4791), sans-IO.

The daemon drives it through the :class:`emu.transports.base.Engine`
contract; the client API reaches it through the verbs methods here
(:meth:`RoceEngine.create_qp`, :meth:`~RoceEngine.connect`,
:meth:`~RoceEngine.post_send`, …). Incoming datagrams are demultiplexed by
the BTH destination QP; responses (opcodes 0x0D–0x12) go to that QP's
requester, requests to its responder, CNPs to its congestion controller.

DCQCN notification point: a datagram that arrived with ECN-CE (the daemon
passes the IP ECN bits as ``ecn=``) makes its QP owe the peer one CNP,
at most one per ``cnp_interval`` (50 µs) per QP. CNPs leave unpaced, ahead
of the QP's other output, with ``cnp_dscp`` and no ECT (a CNP must not
itself be marked).

Output order per QP on each :meth:`datagrams_to_send`: the owed CNP, then
responder control packets (ACK/NAK/atomic ACK) in PSN order, then paced data
(READ responses, then requests) while the QP's pacer allows — at most
``burst_bytes`` ahead of its rate (and a QP at the line rate ``lead_bytes`` ahead
of its schedule: ``QueuePair.lead``). QPs take turns in the order they became
active.

Trimmed packets (a switch cut the payload, kept BTH + extension headers,
rewrote the DSCP and recomputed the ICRC; the daemon says so with
``trimmed=True``): RoCEv2 has no use for them, so one that carries a payload
(SEND, WRITE, READ response) is discarded and counted (``trimmed_discarded``)
— a loss like any other, repaired by go-back-N (the PSN-sequence NAK when the
next packet arrives, an implied NAK for READ responses, or the ACK timeout).
Why the flag and not the length: a cut FIRST/MIDDLE is shorter than the
PMTU, but a cut SEND_ONLY/SEND_LAST of 0 B looks well-formed, and without
the flag IBTA makes a wrong length on a live QP an invalid request (NAK, QP
to ERR), which is what a packet without the trimmed DSCP still gets. Packets
without a payload lose nothing when trimmed and are processed; a CE mark on a
discarded packet still owes the sender a CNP (it is congestion).

ICRC: ``icrc`` is a function of the UDP payload; when given, every packet
is sealed with it and every received one checked (bad ones are counted
drops). Pass :func:`emu.transports.roce.packets.pseudo_header_icrc` in
tests; the daemon passes None and computes the real ICRC over the IP/UDP
headers it sends and receives.
"""

from __future__ import annotations

import struct
from collections import defaultdict, deque
from collections.abc import Callable, Hashable
from typing import Any

from emu import cc as cc_registry
from emu import paths as path_registry
from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.datagram import Run
from emu.core.memory import MemoryAccessError, MemoryTable, ProtectionDomain
from emu.core.psn import PSN24, RandomBits
from emu.core.trace import NULL_TRACE, Trace
from emu.core.verbs import RecvWR, SendWR, WrOpcode
from emu.transports.base import (
    ECN_CE,
    ECN_ECT0,
    ECN_NOT_ECT,
    Addr,
    Completion,
    Engine,
    Event,
    HostNames,
    StateChanged,
    TxMeta,
    VerbsError,
)
from emu.transports.roce import modify as M
from emu.transports.roce import packets as P
from emu.transports.roce.qp import PMTU_VALUES, TRANSITIONS, QpAttr, QpState, QueuePair
from emu.transports.roce.requester import Requester, SendWqe
from emu.transports.roce.responder import MIDDLES, RecvWqe, Responder

#: the path policies an in-order transport can take: one entropy per QP (per-flow ECMP),
#: or a new one per flowlet (emu.paths.flowlet); spraying would reorder every message
ROCE_PATHS = ("fixed", "flowlet")
#: RoCEv2's UDP source ports, the entropy the switches hash (0xC000..0xFFFF, the range
#: Linux draws them from, and :func:`~emu.transports.roce.modify.flow_label_to_udp_sport`)
ROCE_SPORTS = tuple(range(0xC000, 0x10000))

_RESPONSES = frozenset(range(P.READ_RESP_FIRST, P.ATOMIC_ACK + 1))
#: opcodes that carry a payload a switch can cut (their trimmed copies are discarded)
_WITH_PAYLOAD = frozenset({*range(P.SEND_FIRST, P.WRITE_ONLY_IMM + 1), P.READ_RESP_FIRST,
                           P.READ_RESP_MIDDLE, P.READ_RESP_LAST, P.READ_RESP_ONLY,
                           P.SEND_LAST_INV, P.SEND_ONLY_INV})
_MAX_MSG = 1 << 31
#: states a send WR may not be posted in (verbs: the send queue works from RTS on)
_NO_SEND = frozenset({QpState.RESET, QpState.INIT, QpState.RTR})


#: bytes 5..8 of the BTH: reserved byte + destination QP (masked to 24 bits)
_DQPN = struct.Struct("!I")


class RoceEngine(Engine):
    """Sans-IO RoCEv2 RC for one NIC (see the module docstring).

    ``memory`` is the device's registration table (shared with the client
    API); ``rng`` supplies QP start PSNs and UDP source ports. ``line_rate``
    (bits/s) is the emulated link rate: the pacer's ceiling and the scale of
    the congestion controller ``cc`` (a registry name, or None for none).
    ``ack_every`` is the responder's ACK coalescing (ACK at least every N
    packets, and on AckReq); ``ack_req_every`` makes the requester set AckReq
    every K packets besides the last of each message.
    """

    def __init__(self, memory: MemoryTable, rng: RandomBits, *, line_rate: float = 100e9,
                 cc: str | None = "dcqcn", cc_params: dict[str, Any] | None = None,
                 icrc: P.IcrcFn | None = None, ack_every: int = 16, ack_req_every: int = 32,
                 burst_bytes: int = 65536, lead_bytes: int = 0, frame_overhead: int = 0,
                 cnp_interval: float = 50e-6, cnp_dscp: int = 48,
                 class_of: Callable[[int], int] = lambda dscp: dscp >> 3,
                 trace: Trace = NULL_TRACE, first_qpn: int = 0x11,
                 local_addr: Addr | None = None, default_pmtu: int = 4096,
                 gather: bool = False, runs: bool = False,
                 max_psn_ahead: int = 1 << 15, paths: str = "fixed",
                 path_params: dict[str, Any] | None = None) -> None:
        if line_rate <= 0 or ack_every < 1 or ack_req_every < 1 or burst_bytes < 0 \
                or lead_bytes < 0 or frame_overhead < 0:
            raise ValueError("line_rate, ack_every, ack_req_every must be > 0, "
                             "burst, lead and frame_overhead >= 0")
        if cc is not None:
            cc_registry.create(cc, line_rate, 0.0, **(cc_params or {}))  # validate now
        if gather and icrc is not None:
            raise ValueError("gather=True is for daemons, which seal ICRCs themselves (icrc=None)")
        #: emit bulk packets as :class:`~emu.core.datagram.Gather` pieces (no payload copy)
        self.gather = gather
        #: … and a burst of middles as one :class:`~emu.core.datagram.Run` (with gather)
        self.runs = runs and gather
        #: SEND and WRITE middles take Responder.middle (no ICRC here to check, no tracing)
        self._fast_rx = icrc is None and not trace.enabled
        self.memory = memory
        self.rng = rng
        self.line_rate = float(line_rate)
        self.cc_name = cc
        self.cc_params = dict(cc_params or {})
        self.icrc = icrc
        self.ack_every = ack_every
        self.ack_req_every = ack_req_every
        if not 1 <= max_psn_ahead < 1 << 23:
            raise ValueError("max_psn_ahead is 1 .. 2^23 - 1 PSNs")
        #: a request further ahead of the expected PSN than this is dropped without the
        #: sequence-error NAK (responder.Responder.on_request)
        self.max_psn_ahead = max_psn_ahead
        self.burst_s = burst_bytes * 8.0 / self.line_rate
        #: how far a QP at the line rate may run ahead of its pacer (QueuePair.lead)
        self.lead_s = lead_bytes * 8.0 / self.line_rate
        self.frame_overhead = frame_overhead  # the port's bytes per packet (QueuePair)
        self.cnp_interval = cnp_interval
        self.cnp_dscp = cnp_dscp
        if paths not in ROCE_PATHS:
            raise ValueError(f"RoCEv2 paths {paths!r}: one of {', '.join(ROCE_PATHS)} (a "
                             "sprayed policy would reorder an in-order transport)")
        #: "flowlet": each QP's source port changes after an idle gap (emu.paths.flowlet)
        self.paths = paths
        self.path_params = dict(path_params or {})
        if paths != "fixed":
            path_registry.create(paths, ROCE_SPORTS[:2], rng, 0.0, **self.path_params)
        self.class_of = class_of
        self.trace = trace
        self.local_addr = local_addr
        if default_pmtu not in PMTU_VALUES:
            raise ValueError(f"default_pmtu must be one of {PMTU_VALUES}")
        self.default_pmtu = default_pmtu
        #: canonical host text of a peer address (cached)
        self._host = HostNames()
        self.stats: defaultdict[str, int] = defaultdict(int)
        #: QPs whose pacer held data back since the port last held the engine (port_held)
        self._pace_held: set[QueuePair] = set()
        self._qps: dict[int, QueuePair] = {}
        self._next_qpn = first_qpn
        self._events: deque[Event] = deque()
        self._active: dict[int, None] = {}  # QPs that may have output (ordered set)
        self._paused: dict[int, float] = {}
        self._now = 0.0  # the latest time an entry point was given (for trace records only)

    # -- verbs: QPs ---------------------------------------------------------

    def create_qp(self, *, pd: ProtectionDomain | None = None, send_cq: Hashable = 0,
                  recv_cq: Hashable = 0, max_send_wr: int = 4096, max_recv_wr: int = 4096,
                  attrs: dict[str, Any] | None = None, **kw: Any) -> int:
        """A new QP in RESET; returns its QPN. ``attrs``/``kw`` are :class:`QpAttr` fields.

        ``sq_psn`` defaults to a random start PSN and ``udp_sport`` to a random
        port in 49152..65535 (drawn from the injected RNG), as NICs do; ``pmtu``
        to the engine's ``default_pmtu``. ``send_cq``/``recv_cq`` are the
        caller's handles, echoed in :class:`Completion` events.
        """
        qpn = self._alloc_qpn()
        attr = QpAttr()
        attr.pmtu = self.default_pmtu
        attr.sq_psn = PSN24.random(self.rng)
        attr.udp_sport = 49152 + self.rng.getrandbits(14)
        attr.update({**(attrs or {}), **kw})
        qp = QueuePair(qpn, pd, send_cq, recv_cq, max_send_wr, max_recv_wr, attr,
                       line_rate=self.line_rate, burst_s=self.burst_s, lead_s=self.lead_s,
                       frame_overhead=self.frame_overhead)
        qp.stats = self.stats
        qp.requester = Requester(qp, self)
        qp.responder = Responder(qp, self)
        qp.refresh_meta()
        self._qps[qpn] = qp
        return qpn

    def _alloc_qpn(self) -> int:
        for _ in range(1 << 24):
            q = self._next_qpn
            self._next_qpn = q + 1 if q < 0xFFFFFF else 2
            if q not in self._qps:
                return q
        raise VerbsError("no free QPN")

    def _qp(self, qpn: int) -> QueuePair:
        qp = self._qps.get(qpn)
        if qp is None:
            raise VerbsError(f"no QP {qpn:#x}")
        return qp

    def query_qp(self, qpn: int) -> dict[str, Any]:
        """The QP's connection data for the peer (``connect``'s ``remote``) and its state.

        ``{"qpn", "psn" (our start PSN), "pmtu", "address", "port", "state",
        "transport": "roce"}``; address/port are the engine's ``local_addr``
        (the daemon fills them when it built the engine without one).
        """
        qp = self._qp(qpn)
        a = self.local_addr
        return {"qpn": qpn, "psn": qp.attr.sq_psn, "pmtu": qp.attr.pmtu,
                "address": a[0] if a else "", "port": a[1] if a else P.UDP_PORT,
                "state": qp.state.value, "transport": "roce"}

    def query_qp_attr(self, qpn: int) -> dict[str, Any]:
        """``ibv_query_qp``: the state and attributes by ``struct ibv_qp_attr`` names
        (``path_mtu`` as its ``ibv_mtu`` code, ``ah_attr`` with the GRH fields flat, and
        ``sq_draining`` while an SQD QP still finishes what it started)."""
        qp = self._qp(qpn)
        a = qp.attr
        mtu = {v: k for k, v in M.MTU_CODES.items()}[a.pmtu]
        dst = a.dest_addr
        return {"qp_state": qp.state.value, "cur_qp_state": qp.state.value,
                "path_mtu": mtu, "path_mig_state": 0, "qkey": 0, "rq_psn": a.rq_psn,
                "sq_psn": a.sq_psn, "dest_qp_num": a.dest_qp_num,
                "qp_access_flags": int(a.access), "pkey_index": a.pkey_index,
                "port_num": a.port_num, "en_sqd_async_notify": a.sqd_notify,
                "sq_draining": int(qp.state is QpState.SQD and not qp.requester.drained()),
                "max_rd_atomic": a.max_rd_atomic, "max_dest_rd_atomic": a.max_dest_rd_atomic,
                "min_rnr_timer": a.min_rnr_timer, "timeout": a.timeout,
                "retry_cnt": a.retry_cnt, "rnr_retry": a.rnr_retry,
                "cap": {"max_send_wr": qp.max_send_wr, "max_recv_wr": qp.max_recv_wr},
                "ah_attr": {"is_global": 1, "dgid": a.dest_gid, "sgid_index": a.sgid_index,
                            "hop_limit": a.hop_limit, "traffic_class": a.dscp << 2,
                            "flow_label": a.flow_label, "sl": a.sl, "port_num": a.port_num,
                            "address": dst[0] if dst else "",
                            "udp_dport": dst[1] if dst else P.UDP_PORT,
                            "udp_sport": a.udp_sport}}

    def modify(self, qpn: int, attr: dict[str, Any], mask: int, now: float = 0.0, *,
               ports: int = 1, gids: tuple[str, ...] | list[str] = ()) -> QpState:
        """``ibv_modify_qp(qp, attr, mask)`` as verbs applications call it: the IB rules
        for RC (:mod:`.modify`: required and optional attributes per transition, named
        in the error), then the change (:meth:`modify_qp`). Returns the new state.

        ``ports`` and ``gids`` are the device's (the daemon knows them): ``port_num``
        and ``ah_attr.sgid_index`` must name one. All or nothing: a refused call
        changes nothing."""
        qp = self._qp(qpn)
        new = M.check(qpn, qp.state, attr, mask)
        port = self.local_addr[1] if self.local_addr else P.UDP_PORT
        ch = M.changes(qpn, attr, mask, active_mtu=self.default_pmtu, ports=ports, gids=gids,
                       udp_port=port)
        if qp.state is QpState.SQD and new is QpState.SQD and ch \
                and not qp.requester.drained():
            raise VerbsError(f"modify_qp QP {qpn:#x}: SQD\u2192SQD with attributes waits "
                             f"until the send queue has drained (it is still draining)")
        try:
            self.modify_qp(qpn, new, now, **ch)
        except VerbsError as e:
            raise VerbsError(f"modify_qp QP {qpn:#x}: {e}") from None
        return qp.state

    def qp_attr(self, qpn: int) -> tuple[QpState, QpAttr]:
        """The live state and attributes (read-only use; change them with modify_qp)."""
        qp = self._qp(qpn)
        return qp.state, qp.attr

    def modify_qp(self, qpn: int, state: QpState | str | None = None, now: float = 0.0,
                  **attrs: Any) -> None:
        """``ibv_modify_qp``: apply ``attrs`` and move to ``state`` if legal (else VerbsError).

        Entering RTR starts the responder at ``rq_psn``; RTS starts the
        requester at ``sq_psn`` (its first entry only); ERR flushes; RESET
        drops all WRs silently, as verbs does.
        """
        qp = self._qp(qpn)
        new = qp.state if state is None else QpState(state)
        if new not in TRANSITIONS[qp.state]:
            raise VerbsError(f"QP {qpn:#x}: {qp.state.value} -> {new.value} is not allowed")
        if attrs:
            qp.attr.update(attrs)
            qp.refresh_meta()
        old = qp.state
        if new is old:
            return
        if new is QpState.ERR:
            self.qp_error(qp, WcStatus.WR_FLUSH_ERR, "modify_qp(ERR)", now)
            return
        qp.state = new
        if new is QpState.RESET:
            qp.requester.reset(0)
            qp.responder.clear()
            qp.timers.clear()
            qp.cnp_pending = False
            qp.cc = None
        elif new is QpState.RTR:
            qp.responder.reset(qp.attr.rq_psn)
        elif new is QpState.RTS and old is QpState.RTR:
            queued = qp.requester.sq[qp.requester.head:]
            qp.requester.reset(qp.attr.sq_psn)
            qp.requester.sq.extend(queued)
            if self.cc_name is not None:
                qp.cc = cc_registry.create(self.cc_name, self.line_rate, now, **self.cc_params)
        elif new is QpState.SQD:
            qp.sqd_told = False
            self._sq_drained(qp)
        self._activate(qpn)

    def _sq_drained(self, qp: QueuePair) -> None:
        """SQD with nothing left in flight: say so once (``IBV_EVENT_SQ_DRAINED``) if
        ``en_sqd_async_notify`` asked for it. Called where the send queue can drain:
        entering SQD, after a response, after a timer."""
        if qp.state is QpState.SQD and not qp.sqd_told and qp.requester.drained():
            qp.sqd_told = True
            if qp.attr.sqd_notify:
                self._events.append(StateChanged(qp.qpn, "SQD", "SQD", None, "SQ_DRAINED"))

    def connect(self, qpn: int, remote: dict[str, Any], now: float = 0.0, **attrs: Any) -> None:
        """RESET/INIT → INIT → RTR → RTS towards the peer described by ``remote``.

        ``remote`` is the peer's :meth:`query_qp` dict: ``qpn``, ``psn``,
        ``address`` and optionally ``port`` (default 4791) and ``pmtu`` (the
        path MTU becomes the smaller of both ends'). ``attrs`` are further
        :class:`QpAttr` fields (timeout, retry_cnt, …).
        """
        qp = self._qp(qpn)
        try:
            dest = (remote["address"], int(remote.get("port", P.UDP_PORT)))
            changes: dict[str, Any] = {"dest_qp_num": int(remote["qpn"]),
                                       "rq_psn": int(remote["psn"]), "dest_addr": dest}
            if remote.get("gid"):
                changes["dest_gid"] = str(remote["gid"])  # for query_qp's ah_attr.dgid
            if "pmtu" in remote:
                changes["pmtu"] = min(int(remote["pmtu"]), attrs.get("pmtu", qp.attr.pmtu))
        except (KeyError, TypeError, ValueError) as e:
            raise VerbsError(f"remote connection data needs qpn, psn and address ({e!r})"
                             ) from None
        changes.update(attrs)
        if qp.state is QpState.RESET:
            self.modify_qp(qpn, QpState.INIT, now)
        self.modify_qp(qpn, QpState.RTR, now, **changes)
        self.modify_qp(qpn, QpState.RTS, now)

    def destroy_qp(self, qpn: int, now: float = 0.0) -> None:
        """Forget the QP; outstanding WRs vanish without completions (verbs semantics).

        Its work requests and the message in progress hold views of registered memory,
        and a QP and its two halves point at each other — a cycle that only Python's
        cyclic collector frees, which in a quiet daemon can take very long. So the QP lets
        go of that memory here: otherwise a closed client's buffers stayed mapped in the
        NIC daemon (16 MiB per ``emu perf write-bw -s 1M`` run, until a full collection)."""
        qp = self._qp(qpn)
        del self._qps[qpn]
        self._active.pop(qpn, None)
        self._pace_held.discard(qp)
        qp.requester.reset(0)
        qp.responder.clear()

    # -- verbs: work requests -----------------------------------------------

    def post_send(self, qpn: int, wr: SendWR, now: float = 0.0) -> None:
        """Queue a send WR. Local keys and lengths are checked here (VerbsError, EINVAL-like);
        a QP in ERR completes it at once with WR_FLUSH_ERR."""
        qp = self._qp(qpn)
        if qp.state in _NO_SEND:
            raise VerbsError(f"post_send QP {qpn:#x}: the QP is in {qp.state.value}; sends "
                             f"are posted from RTS on (modify it to RTS first)")
        op = WrOpcode(wr.opcode)
        if (wr.imm is not None) != (op in (WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE_WITH_IMM)):
            raise VerbsError("imm goes with exactly the *_WITH_IMM opcodes")
        if wr.imm is not None and not 0 <= wr.imm <= 0xFFFFFFFF:
            raise VerbsError("imm is a 32-bit value")
        if qp.state is QpState.ERR:
            self._events.append(Completion(qp.send_cq, WorkCompletion.flushed(
                wr.wr_id, op.wc_opcode, qpn)))
            return
        if qp.requester.outstanding() >= qp.max_send_wr:
            raise VerbsError(f"QP {qpn:#x}: send queue full ({qp.max_send_wr})")
        write = op.is_read_or_atomic
        views = self._views(qp, wr.sg_list, write)
        length = sum(len(v) for v in views)
        if op.is_atomic and (length != 8 or len(views) != 1):
            raise VerbsError("an atomic needs exactly one 8-byte SGE")
        if write and qp.attr.max_rd_atomic == 0:
            raise VerbsError(f"post_send QP {qpn:#x}: {op.name} needs max_rd_atomic >= 1 "
                             f"(IBV_QP_MAX_QP_RD_ATOMIC is 0)")
        if length > _MAX_MSG:
            raise VerbsError("message larger than 2 GiB")
        self.stats["wr_posted"] += 1
        qp.requester.post(SendWqe(wr.wr_id, op, wr.signaled, wr.solicited, wr.imm, views,
                                  length, wr.remote_addr, wr.rkey, wr.compare_add, wr.swap))
        self._activate(qpn)

    def post_recv(self, qpn: int, wr: RecvWR, now: float = 0.0) -> None:
        """Queue a receive WR (any state but RESET; in ERR it is flushed at once)."""
        qp = self._qp(qpn)
        if qp.state is QpState.RESET:
            raise VerbsError(f"post_recv QP {qpn:#x}: the QP is in RESET; receives are "
                             f"posted from INIT on (modify it to INIT first)")
        if qp.state is QpState.ERR:
            self._events.append(Completion(qp.recv_cq, WorkCompletion.flushed(
                wr.wr_id, WcOpcode.RECV, qpn)))
            return
        if len(qp.responder.rq) >= qp.max_recv_wr:
            raise VerbsError(f"QP {qpn:#x}: receive queue full ({qp.max_recv_wr})")
        views = self._views(qp, wr.sg_list, True)
        qp.responder.post(RecvWqe(wr.wr_id, views, sum(len(v) for v in views)))

    def _views(self, qp: QueuePair, sges: Any, write: bool) -> list[memoryview]:
        try:
            return [self.memory.local_view(s.lkey, s.addr, s.length, write, qp.pd)
                    for s in sges] or [memoryview(b"")]
        except MemoryAccessError as e:
            raise VerbsError(f"bad SGE: {e}") from None

    # -- the Engine contract --------------------------------------------------

    def receive_datagram(self, data: bytes | bytearray | memoryview, addr: Addr, now: float,
                         *, ecn: int = ECN_NOT_ECT, trimmed: bool = False) -> None:
        """One UDP payload; ``trimmed``: its DSCP says a switch cut it (module docstring)."""
        self._now = now
        st = self.stats
        st["rx_packets"] += 1
        n = len(data)
        st["rx_bytes"] += n
        if (n > 16 and data[0] in MIDDLES and ecn != ECN_CE and self._fast_rx
                and not trimmed):
            # the bulk of a SEND or WRITE: placed without building a Pkt (falls back on
            # anything odd)
            qp = self._qps.get(_DQPN.unpack_from(data, 4)[0] & 0xFFFFFF)
            if (qp is not None and qp.receiving_allowed and self._from_peer(qp, addr)
                    and qp.responder.middle(data, n)):
                self._active[qp.qpn] = None
                return
        try:
            p = P.parse(data)
        except P.Malformed:
            st["rx_drop_malformed"] += 1
            return
        if self.icrc is not None and not P.icrc_ok(data, self.icrc):
            st["rx_drop_bad_icrc"] += 1
            return
        qp = self._qps.get(p.dqpn)
        if qp is None:
            st["rx_drop_unknown_qp"] += 1
            return
        if not self._from_peer(qp, addr):
            st["rx_drop_wrong_source"] += 1
            return
        try:
            self._dispatch(qp, p, now, ecn, trimmed)
        except Exception as e:  # a bug must not take the NIC down; tests assert this stays 0
            st["rx_drop_internal_error"] += 1
            if self.trace.enabled:
                self.trace.packet_dropped(now, qp=qp.qpn, reason=f"internal: {e!r}")
        self._activate(qp.qpn)

    def _from_peer(self, qp: QueuePair, addr: Addr) -> bool:
        """``addr`` is the QP's peer (any spelling of its address; a QP with no
        destination yet takes anyone) — the source rule of both receive paths."""
        dst = qp.attr.dest_addr
        return (dst is None or addr[0] == dst[0]
                or self._host(addr[0]) == self._host(dst[0]))

    def _dispatch(self, qp: QueuePair, p: P.Pkt, now: float, ecn: int,
                  trimmed: bool = False) -> None:
        op = p.opcode
        if op == P.CNP:
            self.stats["rx_cnps"] += 1
            if qp.cc is not None and qp.state is not QpState.ERR:
                before = qp.cc.rate
                qp.cc.on_cnp(now)
                if self.trace.enabled and qp.cc.rate != before:
                    self.trace.rate_updated(now, qp=qp.qpn, rate=qp.cc.rate, cause="cnp")
            return
        if ecn == ECN_CE:
            self.stats["rx_ce"] += 1
            if now - qp.last_cnp_sent >= self.cnp_interval and qp.state is not QpState.ERR:
                qp.last_cnp_sent = now
                qp.cnp_pending = True
        if trimmed and op in _WITH_PAYLOAD:
            self.stats["trimmed_discarded"] += 1  # a loss; go-back-N repairs it
            if self.trace.enabled:
                self.trace.packet_dropped(now, qp=qp.qpn, reason="trimmed", op=op, psn=p.psn)
            return
        if self.trace.enabled:
            self.trace.packet_received(now, qp=qp.qpn, op=op, psn=p.psn, len=len(p.payload))
        if op in _RESPONSES:
            qp.requester.on_response(p, now)
            if qp.state is QpState.SQD:
                self._sq_drained(qp)
        elif qp.receiving_allowed:
            qp.responder.on_request(p, now)
        else:
            self.stats["rx_drop_state"] += 1

    def _activate(self, qpn: int) -> None:
        self._active[qpn] = None

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, Addr, TxMeta]]:
        self._now = now
        out: list[tuple[bytes | bytearray, Addr, TxMeta]] = []
        active, self._active = self._active, {}
        for qpn in active:
            qp = self._qps.get(qpn)
            if qp is not None and qp.attr.dest_addr is not None:
                self._drain(qp, now, out)
        icrc = self.icrc
        if icrc is not None:
            for buf, _, _ in out:
                P.seal(buf, icrc)  # type: ignore[arg-type]
        st = self.stats
        n = len(out)
        if self.runs:
            for b, _, _ in out:
                if type(b) is Run:
                    n += b.count - 1
        st["tx_packets"] += n
        st["tx_bytes"] += sum(len(b) for b, _, _ in out)
        return out

    def _paused_until(self, dscp: int, now: float) -> float | None:
        if not self._paused:
            return None
        until = self._paused.get(self.class_of(dscp))
        return until if until is not None and until > now else None

    def _drain(self, qp: QueuePair, now: float, out: list) -> None:
        dst = qp.attr.dest_addr
        if qp.cnp_pending:
            until = self._paused_until(self.cnp_dscp, now)
            if until is None:
                qp.cnp_pending = False
                self.stats["tx_cnps"] += 1
                out.append((P.cnp(qp.attr.dest_qp_num), dst,
                            TxMeta(qp.attr.udp_sport, self.cnp_dscp, ECN_NOT_ECT)))
            else:
                qp.timers.set("pause", until)
        until = self._paused_until(qp.attr.dscp, now)
        if until is not None:
            qp.timers.set("pause", until)
            self.stats["tx_paused"] += 1
            return
        resp, req = qp.responder, qp.requester
        ctrl = qp.ctrl_meta
        if self.paths != "fixed" and req.has_work():
            self._repath(qp, now)
        data = qp.data_meta
        trace = self.trace
        bulk = self.gather and not trace.enabled
        while True:
            while (b := resp.pop_control()) is not None:
                out.append((b, dst, ctrl))
            if not qp.may_send(now):
                if resp.has_read() or req.has_work():
                    qp.timers.set("pace", qp.hold())
                    self._pace_held.add(qp)
                return
            if resp.has_read():
                b = resp.read_packet()
            else:
                if bulk and req.middles(now, out, dst, data):
                    continue  # a paced burst of middles went out in one go
                b = req.next_packet(now)
                if b is None:
                    return
            if trace.enabled:
                r0 = qp.rate
                qp.on_paced_send(len(b), now)
                if qp.rate != r0:
                    trace.rate_updated(now, qp=qp.qpn, rate=qp.rate, cause="bytes")
            else:
                qp.on_paced_send(len(b), now)
            out.append((b, dst, data))
            if trace.enabled:
                trace.packet_sent(now, qp=qp.qpn, op=b[0], psn=int.from_bytes(b[9:12], "big"),
                                  len=len(b))

    def _repath(self, qp: QueuePair, now: float) -> None:
        """The QP's source port for what it sends now: its path policy's (a flowlet's
        entropy), the first one the QP's own ``udp_sport``."""
        pol = qp.paths
        if pol is None or pol.entropy not in (qp.attr.udp_sport, qp.data_meta.entropy):
            own = qp.attr.udp_sport
            pol = qp.paths = path_registry.create(
                self.paths, ROCE_SPORTS, self.rng, now,
                **{"entropy": own if 0xC000 <= own else None, **self.path_params})
        sport = pol.choose(now)
        if sport != qp.data_meta.entropy:
            qp.data_meta = TxMeta(sport, qp.attr.dscp, ECN_ECT0)

    def port_held(self) -> None:
        """The daemon's port holds this engine's output (its serializer, or socket
        space, is the limit): a QP its pacer held meanwhile waited for the port, not for
        a late daemon, so its lateness is not counted (:meth:`QueuePair.on_paced_send`)."""
        for qp in self._pace_held:
            qp.pace_held = False
        self._pace_held.clear()

    def get_timer(self) -> float | None:
        t: float | None = None
        for qp in self._qps.values():
            d = qp.get_timer()
            if d is not None and (t is None or d < t):
                t = d
        return t

    def handle_timer(self, now: float) -> None:
        self._now = now
        for qpn, qp in list(self._qps.items()):
            d = qp.get_timer()
            if d is None or d > now:
                continue
            for name in qp.timers.expired(now):
                if name == "retx" or name == "rnr":
                    qp.requester.on_timer(name, now)
            if qp.state is QpState.SQD:
                self._sq_drained(qp)
            cc = qp.cc
            if cc is not None:
                c = cc.get_timer()
                if c is not None and c <= now:
                    before = cc.rate
                    cc.handle_timer(now)
                    if self.trace.enabled and cc.rate != before:
                        self.trace.rate_updated(now, qp=qpn, rate=cc.rate, cause="timer")
            self._activate(qpn)

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def counters(self) -> dict[str, int | float]:
        c: dict[str, int | float] = dict(self.stats)
        c["qps"] = len(self._qps)
        c["events_pending"] = len(self._events)
        return c

    def pause(self, cls: int, until: float) -> None:
        self._paused[cls] = until
        self.stats["pause_frames"] += 1
        for qpn in self._qps:  # resume (or re-evaluate) everyone; cheap and rare
            self._activate(qpn)

    # -- EngineCtx for the requester/responder --------------------------------

    def complete(self, cq: Any, wc: WorkCompletion) -> None:
        self._events.append(Completion(cq, wc))
        if self.trace.enabled:
            self.trace.completion(self._now, qp=wc.qp_num, wr_id=wc.wr_id, status=wc.status)

    def qp_error(self, qp: QueuePair, status: WcStatus, reason: str, now: float) -> None:
        """Move ``qp`` to ERR: flush both queues, stop timers, tell the owner."""
        if qp.state is QpState.ERR:
            return
        old = qp.state
        qp.state = QpState.ERR
        qp.requester.flush()
        qp.responder.flush()
        qp.timers.clear()
        qp.cc = None
        self.stats["qp_errors"] += 1
        self._events.append(StateChanged(qp.qpn, old.value, QpState.ERR.value, status, reason))
        if self.trace.enabled:
            self.trace.state_changed(now, old.value, "ERR", qp=qp.qpn, reason=reason)
        self._activate(qp.qpn)

    def cc_state(self, qpn: int) -> dict[str, Any] | None:
        """The QP's congestion-control numbers (rate, α, stage …), None without CC."""
        cc = self._qp(qpn).cc
        return None if cc is None else cc.state()





# SPDX-License-Identifier: GPL-2.0-only
"""``UetEngine``: every UET endpoint and PDC of one NIC behind UDP port 4793, sans-IO.

The daemon drives it through :class:`emu.transports.base.Engine`; the client
API through the verbs here: :meth:`UetEngine.create_ep`, :meth:`~UetEngine.post_write`,
:meth:`~UetEngine.post_send`, :meth:`~UetEngine.post_recv`,
:meth:`~UetEngine.close_pdc`. Delivery modes (``mode=`` on ``create_ep`` as the
endpoint's default, or per message on the post verbs): RUD (reliable,
unordered), ROD (:mod:`.rod`, in order), RUDI (:mod:`.rudi`, no PDC,
idempotent WRITEs) and UUD (:mod:`.uud`, best-effort datagrams). Control
packets that are not part of the data path (PROBE, CREDIT, CLOSE_REQ, the
idle reaper) live in :mod:`.control`.

PDCs are opened on demand, one per {mode, destination host, job} (uet.md:
Behaviour, PDC — the traffic class is fixed here), and shared by all local
endpoints. Incoming datagrams are demultiplexed by PDS type and DPDCID:
requests and CPs go to the target half (:mod:`.target`), ACKs and NACKs to
the initiator half (:mod:`.pds`). Each data packet leaves with a fresh
entropy (UDP source port) drawn from ``entropies`` with the injected RNG —
oblivious spraying (uet.md: Spraying); replies echo the entropy they answer.
The set is large by default — :data:`ENTROPY_COUNT` ports from
:data:`ENTROPY_BASE` (see there why) — and costs nothing per entropy: a
``range``, and each entropy's :class:`TxMeta` made on its first use.

Trimmed packets: the daemon passes ``trimmed=True`` when a datagram arrived
with a trimmed DSCP (``emu nicd --trimmed-dscp``, default the switch's 30/31);
the target also infers trimming from a request whose payload is shorter than
its SES header declares (a switch with a DSCP the NIC was not told about).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Container, Hashable, Sequence
from typing import Any

from emu.core.cq import WcStatus, WorkCompletion
from emu.core.datagram import Gather, Run
from emu.core.memory import MemoryAccessError, MemoryTable
from emu.core.psn import PSN32, RandomBits
from emu.core.trace import NULL_TRACE, Trace
from emu.transports.base import (
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
from emu.transports.uet import fastpath as FP
from emu.transports.uet import pdc as D
from emu.transports.uet import ses as S
from emu.transports.uet import ses_shape as SH
from emu.transports.uet.control import Control
from emu.transports.uet.flowctl import FlowCtl
from emu.transports.uet.pdc import InitiatorPdc, Mode, PdcIds, PdcState, TxMessage, snapshot
from emu.transports.uet.pds import Initiator
from emu.transports.uet.rudi import Rudi
from emu.transports.uet.ses_initiator import SesInitiator
from emu.transports.uet.ses_rdv import Rendezvous
from emu.transports.uet.target import Target
from emu.transports.uet.uud import Uud
from emu.wire.codec.uet import decode_packet
from emu.wire.errors import DecodeError
from emu.wire.uet_defs import PDS_TYPE

_REQ_TYPES = frozenset({PDS_TYPE["RUD_REQ"], PDS_TYPE["ROD_REQ"]})  # (CC_REQ: not yet)
#: every TOS marks a trimmed datagram (receive_datagram's ``trimmed=True``)
_ALL_TRIMMED = b"\x01" * 256
_ACK_TYPES = frozenset({PDS_TYPE["ACK"], PDS_TYPE["ACK_CC"], PDS_TYPE["ACK_CCX"]})
_NACK_TYPES = frozenset({PDS_TYPE["NACK"], PDS_TYPE["NACK_CCX"]})
_CP_TYPE = PDS_TYPE["CP"]
_RUDI_REQ, _RUDI_RESP, _UUD_REQ = PDS_TYPE["RUDI_REQ"], PDS_TYPE["RUDI_RESP"], PDS_TYPE["UUD_REQ"]
_MAX_MSG = 1 << 32
_MAX_SEG = (1 << 14) - 1  # payload_length is 14 bits
#: the first UDP source port of the default entropy set (the IANA dynamic range's start)
ENTROPY_BASE = 49152
#: entropies in the default set, ports 49152-53247 (engine option ``entropy_count``).
#: Why this many: a switch's ECMP hash sends each entropy to one uplink, so a sprayed
#: flow's share of an uplink is the share of its *set* the hash puts there. With the 64
#: ports the engine once had, that share was binomial — over 4 spines a standard
#: deviation of 22 % of an even share per flow, and a leaf's four flows up to 25 % apart
#: however long they ran (``scenarios/ecmp-vs-spray.toml``); with 4096 it is 2.7 %, as a
#: UET NIC spraying over the 16-bit entropy field would get. Why not more: MRC's default EVs
#: start at 53248 (:data:`emu.transports.mrc.engine.DEFAULT_PROFILE`) on the same
#: addresses, so the two transports' source ports never meet
ENTROPY_COUNT = 4096
#: the most ``entropy_count`` may ask for: up to MRC's first port (another set: ``entropies``)
ENTROPY_COUNT_MAX = 53248 - ENTROPY_BASE
#: TxMetas by (DSCP, ECN), then entropy: made on first use and shared by every engine
#: of the process (a TxMeta is immutable). Why: a meta per entropy of a 4096-entry set
#: made eagerly cost ~6 ms and ~0.6 MB per engine, and a worker process serves dozens of
#: hosts; shared, a process holds each (entropy, DSCP, ECN) once. Bounded by the 16-bit
#: port space (cleared past :data:`_METAS_MAX`, should anything else arrive)
_METAS: dict[tuple[int, int], dict[int, TxMeta]] = {}
_METAS_MAX = 1 << 16


def _metas(dscp: int, ecn: int) -> dict[int, TxMeta]:
    """The process's shared cache of TxMetas for one (DSCP, ECN) (see :data:`_METAS`)."""
    return _METAS.setdefault((dscp, ecn), {})


def _meta(cache: dict[int, TxMeta], entropy: int, dscp: int, ecn: int) -> TxMeta:
    """``cache``'s TxMeta for ``entropy``, made (and kept) on a miss."""
    m = cache.get(entropy)
    if m is None:
        if len(cache) >= _METAS_MAX:
            cache.clear()
        m = cache[entropy] = TxMeta(entropy, dscp, ecn)
    return m


def entropy_ports(entropies: Sequence[int] | None, count: int | None) -> Sequence[int]:
    """The engine's entropy set: ``entropies`` as given (a range kept, anything else a
    tuple without repeats), else ``count`` ports from :data:`ENTROPY_BASE`
    (default :data:`ENTROPY_COUNT`) as a ``range``."""
    if entropies and count is not None:
        raise ValueError("give entropies (the ports) or entropy_count (how many from "
                         f"{ENTROPY_BASE}), not both")
    if entropies:
        ents: Sequence[int] = (entropies if isinstance(entropies, range)
                               else tuple(dict.fromkeys(int(e) for e in entropies)))
        ends = (ents[0], ents[-1]) if isinstance(ents, range) else (min(ents), max(ents))
        if any(not 0 < e < 65536 for e in ends):
            raise ValueError("entropies are UDP source ports 1..65535")
        return ents
    n = ENTROPY_COUNT if count is None else count
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= ENTROPY_COUNT_MAX:
        raise ValueError(f"entropy_count must be 1..{ENTROPY_COUNT_MAX} (ports from "
                         f"{ENTROPY_BASE}, below MRC's EVs), got {count!r}")
    return range(ENTROPY_BASE, ENTROPY_BASE + n)


class UetEngine(Engine):
    """Sans-IO UET (RUD) for one NIC (see the module docstring).

    ``memory`` is the device's registration table (WRITE targets by rkey);
    ``rng`` supplies Start_PSNs and entropies. ``mtu`` is the SES payload per
    packet; ``mpr`` sets MP_RANGE = mpr × 128 PSNs; ``rto`` (1–5 ms) and
    ``max_retries`` govern retransmission — with ``rto_max`` above ``rto``, a
    PDC's RTO follows its measured round trip (RFC 6298's SRTT + 4·RTTVAR,
    Karn's rule) within ``[rto, rto_max]``, ``rto_max`` until the first sample
    (a new PDC's first window is all SYNs, slow at the target), instead of ``rto``;
    ``nack_retx_delay`` is the wait before resending after a non-trim
    "retransmit" NACK (resource shortage, window) so a busy target is not
    hammered. ``entropies`` (UDP source ports) is the set data packets spray over, or
    ``entropy_count`` ports from 49152 (default 4096: :data:`ENTROPY_COUNT`, why so many);
    give one or neither. ``cc`` (None, ``"nscc"``, ``"rccc"``, with ``cc_params``) limits
    each PDC's bytes in flight or to granted credit; ``paths`` (``"oblivious"``
    default, ``"reps"``, ``"fixed"``, with ``path_params``) picks each data
    packet's entropy; ``line_rate`` (bits/s) is the port rate the controllers
    scale to (:mod:`.flowctl`). ``gather`` emits data requests as
    :class:`~emu.core.datagram.Gather` pieces over registered memory, and ``runs``
    (with ``gather``) a message's full-size middles as one
    :class:`~emu.core.datagram.Run` per burst — both for daemons, whose send path
    takes them without copies; sans-IO callers get plain datagrams by default.
    ``tx_hold`` (seconds) is how long the port may hold an emitted datagram before it
    is on the wire (a daemon's transmit FIFO, ``emu nicd --tx-lead``): the spec's
    retransmit timer runs from transmission, the engine's from emission, so every
    timeout (``rto``, ``rto_max`` and the RTOs measured between them) is that much
    longer — else a packet still queued in its own port times out.
    ``loss_threshold`` resends a packet without waiting for its RTO once that many
    packets sent after it were ACKed or SACKed (0: RTO only;
    :meth:`~emu.core.reliable.scoreboard.Scoreboard.presumed_lost`). The default,
    16, lies above the reordering of paths whose queues differ by 16 packets
    (64 KiB: 1.3 µs at 400 Gb/s, a third of the default marking port's
    threshold band) and far below a window; TCP's single-path 3 would resend
    packets that a sprayed fabric merely delivered late.
    ``loss_probes`` (default on): a PDC with packets outstanding that sent nothing and
    heard of no progress for a probe timeout — a few measured round trips, not the
    RTO — asks the target for its SACK state with CP ACK_REQ and resends what the
    answer shows missing (:meth:`~emu.transports.uet.pds.Initiator.probe`): the losses
    no later packet reveals (a transfer's last ones, a retransmission lost while the
    window was full) then cost round trips, not an RTO.
    """

    def __init__(self, memory: MemoryTable, rng: RandomBits, *, mtu: int = 4096, mpr: int = 1,
                 rto: float = 2e-3, max_retries: int = 5, nack_retx_delay: float = 100e-6,
                 ack_bytes: int = D.ACK_BYTES, entropies: Sequence[int] | None = None,
                 entropy_count: int | None = None,
                 job_id: int = 0, dscp: int = D.DSCP_DATA, ctrl_dscp: int = D.DSCP_CTRL,
                 ecn: int = ECN_ECT0, port: int = D.UDP_PORT, local_addr: Addr | None = None,
                 trace: Trace = NULL_TRACE, first_pdcid: int = 1,
                 small_sends: bool = False, cc: str | None = None,
                 cc_params: dict[str, Any] | None = None, paths: str = "oblivious",
                 path_params: dict[str, Any] | None = None, line_rate: float = 10e9,
                 gather: bool = False, runs: bool = False, ack_coalesce: bool = False,
                 idle_timeout: float | None = None, rto_max: float | None = None,
                 tx_hold: float = 0.0, loss_threshold: int = 16,
                 loss_probes: bool = True) -> None:
        if not 1 <= mtu <= _MAX_SEG:
            raise ValueError(f"mtu must be 1..{_MAX_SEG} (payload_length is 14 bits)")
        if not 1 <= mpr <= 32:
            raise ValueError("mpr must be 1..32 (MP_RANGE ≤ the 4096-PSN SYN span)")
        if not 1e-3 <= rto <= 5e-3:
            raise ValueError("rto must be 1..5 ms (uet.md: Retransmit)")
        if rto_max is not None and not rto <= rto_max <= 1.0:
            raise ValueError("rto_max must lie between rto and 1 s")
        if not 0 <= loss_threshold <= 1 << 16:
            raise ValueError("loss_threshold is 0 (off) .. 65536 packets")
        if not 0 <= tx_hold <= 1.0:
            raise ValueError("tx_hold must lie between 0 and 1 s")
        if max_retries < 0 or ack_bytes < 1 or not 0 <= job_id < 1 << 24:
            raise ValueError("max_retries >= 0, ack_bytes >= 1, job_id is 24 bits")
        self.memory = memory
        self.rng = rng
        #: data requests as :class:`~emu.core.datagram.Gather` pieces (daemons: no copy)
        self.gather = gather
        #: a message's middles as one :class:`~emu.core.datagram.Run` each (with gather)
        self.runs = runs and gather
        #: the 16 KiB ACK rule fires once per PDC per receive batch (Target.flush_due)
        self.ack_coalesce = ack_coalesce
        self.mtu, self.mpr, self.max_retries = mtu, mpr, max_retries
        # timeouts count from emission: the port's hold comes on top of the spec's value
        self.tx_hold = tx_hold
        self.rto = rto + tx_hold
        self.rto_max = (rto_max if rto_max is not None else rto) + tx_hold
        self.nack_retx_delay = nack_retx_delay
        self.loss_threshold = loss_threshold
        self.loss_probes = loss_probes
        self.ack_bytes = ack_bytes
        #: the UDP source ports data packets spray over (a range by default)
        self.entropies = entropy_ports(entropies, entropy_count)
        #: membership of the set: a range answers it itself
        self._ent_set: Container[int] = (self.entropies if isinstance(self.entropies, range)
                                         else frozenset(self.entropies))
        self.job_id = job_id
        self.port = port
        self.local_addr = local_addr
        self.trace = trace
        self.now = 0.0
        #: when the datagram being received reached this NIC (its kernel receive stamp,
        #: from a daemon; else ``now``): what round-trip samples end at (see
        #: :meth:`receive_datagram`)
        self.rx_at = 0.0
        self.stats: defaultdict[str, int] = defaultdict(int)
        # TxMetas made on first use, shared by the process's engines (_METAS: why)
        self._dscp, self._ecn, self._ctrl_dscp = dscp, ecn, ctrl_dscp
        self._data_metas = _metas(dscp, ecn)
        self._ctrl_metas = _metas(ctrl_dscp, ECN_NOT_ECT)
        self._events: deque[Event] = deque()
        self._out: list[tuple[bytearray, Addr, TxMeta]] = []
        #: canonical host text of a peer address (cached)
        self._host = HostNames()
        self.ids = PdcIds(first_pdcid)
        self.eps: dict[int, S.Endpoint] = {}
        self._next_ep = 1
        self.ini: dict[int, InitiatorPdc] = {}
        self._ini_by_key: dict[Hashable, int] = {}
        self._active: dict[int, None] = {}
        self.initiator = Initiator(self)
        self.target = Target(self, self.ids, S.SesTarget(memory, self.eps, self._complete,
                                                         mtu=mtu))
        self.small_sends = small_sends
        self.ses_ini = SesInitiator(self)
        self.rdv = Rendezvous(self)
        self.target.ses.ops.exposed = self.rdv.view
        self.target.ses.pull = self.rdv.pull
        self.ep_mode: dict[int, Mode] = {}  # endpoint → its default delivery mode
        self.rudi = Rudi(self)
        self.uud = Uud(self)
        self.control = Control(self)
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError("idle_timeout is seconds > 0 (or None: never reap)")
        #: a target PDC silent this long is asked to close (then dropped): garbage SYNs and
        #: vanished initiators leave no state behind (emu.transports.uet.control)
        self.control.idle_timeout = idle_timeout
        # per-PDC congestion control and path choice (after control: RCCC hooks into it)
        self.flowctl = FlowCtl(self, cc=cc, cc_params=cc_params, paths=paths,
                               path_params=path_params, line_rate=line_rate)

    # -- verbs --------------------------------------------------------------------

    def create_ep(self, *, send_cq: Hashable = 0, recv_cq: Hashable = 0, pd: Any = None,
                  mode: Mode | str = Mode.RUD) -> int:
        """A new endpoint; its id is the PIDonFEP peers address SENDs to (12 bits).
        ``mode`` is the delivery mode its messages use unless a post names another."""
        try:
            m = Mode.parse(mode)
        except ValueError as e:
            raise VerbsError(str(e)) from None
        for _ in range(0xFFF):
            ep = self._next_ep
            self._next_ep = ep + 1 if ep < 0xFFF else 1
            if ep not in self.eps:
                self.eps[ep] = S.Endpoint(ep, send_cq, recv_cq, pd)
                self.ep_mode[ep] = m
                return ep
        raise VerbsError("no free endpoint id")

    def query_ep(self, ep: int) -> dict[str, Any]:
        """What a peer needs to reach ``ep``: ``{"ep", "address", "port", "transport"}``."""
        self._ep(ep)
        a = self.local_addr
        return {"ep": ep, "address": a[0] if a else "", "port": self.port, "transport": "uet"}

    def destroy_ep(self, ep: int) -> None:
        self._ep(ep)
        del self.eps[ep]
        self.ep_mode.pop(ep, None)

    def _ep(self, ep: int) -> S.Endpoint:
        e = self.eps.get(ep)
        if e is None:
            raise VerbsError(f"no UET endpoint {ep}")
        return e

    def post_write(self, ep: int, wr_id: int, sg_list: Sequence[Any], dest: Any,
                   remote_addr: int, rkey: int, now: float = 0.0, *,
                   signaled: bool = True, mode: Mode | str | None = None) -> None:
        """RDMA-style WRITE of the gathered SGEs (``addr``/``length``/``lkey`` objects) to
        ``remote_addr`` in the peer's region ``rkey``; ``dest`` is ``(address, ep)`` or
        the peer's :meth:`query_ep` dict."""
        self._post(ep, wr_id, S.OP_WRITE, sg_list, dest, remote_addr, rkey, now, signaled,
                   mode)

    def post_send(self, ep: int, wr_id: int, sg_list: Sequence[Any], dest: Any,
                  now: float = 0.0, *, signaled: bool = True,
                  mode: Mode | str | None = None, rendezvous: bool = False) -> None:
        """SEND into the next receive buffer posted on the peer endpoint; with
        ``rendezvous`` a RENDEZVOUS_SEND (one eager packet, the target READs the rest:
        :mod:`.ses_rdv`)."""
        if rendezvous:
            self.rdv.post(ep, wr_id, sg_list, dest, signaled)
            return
        self._post(ep, wr_id, S.OP_SEND, sg_list, dest, 0, 0, now, signaled, mode)

    def post_recv(self, ep: int, wr_id: int, sg_list: Sequence[Any], now: float = 0.0) -> None:
        """Post a receive buffer for incoming SENDs on ``ep``."""
        e = self._ep(ep)
        views = self._views(e, sg_list, True)
        e.rq.append(S.RecvWqe(wr_id, views, sum(len(v) for v in views)))

    def _views(self, e: S.Endpoint, sges: Sequence[Any], write: bool) -> list[memoryview]:
        try:
            return [self.memory.local_view(s.lkey, s.addr, s.length, write, e.pd) for s in sges]
        except MemoryAccessError as ex:
            raise VerbsError(f"bad SGE: {ex}") from None

    def _post(self, ep: int, wr_id: int, op: int, sges: Sequence[Any], dest: Any,
              remote_addr: int, rkey: int, now: float, signaled: bool,
              mode: Mode | str | None = None) -> None:
        e = self._ep(ep)
        try:
            m = self.ep_mode.get(ep, Mode.RUD) if mode is None else Mode.parse(mode)
        except ValueError as ex:
            raise VerbsError(str(ex)) from None
        views = self._views(e, sges, False)
        data = views[0] if len(views) == 1 else memoryview(b"".join(views))
        if len(data) >= _MAX_MSG:
            raise VerbsError("message larger than 4 GiB")
        addr, dest_ep = self._dest(dest)
        if m is Mode.RUDI or m is Mode.UUD:
            msg = TxMessage(wr_id, ep, op, data, len(data), dest_ep, remote_addr, rkey, signaled)
            try:
                self.rudi.post(msg, addr) if m is Mode.RUDI else self.uud.send(msg, addr)
            except ValueError as ex:
                raise VerbsError(str(ex)) from None
            self.stats["wr_posted"] += 1
            return
        pdc = self._pdc_for(addr, m)
        shape = SH.choose_shape(op, len(data), len(data), self.mtu, small_sends=self.small_sends)
        self._enqueue(pdc, TxMessage(wr_id, ep, op, data, len(data), dest_ep, remote_addr,
                                           rkey, signaled, shape=shape))

    def _dest(self, dest: Any) -> tuple[Addr, int]:
        """``(address, ep)`` or a :meth:`query_ep` dict → (UDP address, peer endpoint)."""
        try:
            return ((dest["address"], int(dest.get("port", self.port))),
                    int(dest["ep"])) if isinstance(dest, dict) else (
                (dest[0], self.port), int(dest[1]))
        except (KeyError, TypeError, ValueError, IndexError) as ex:
            raise VerbsError(f"dest must be (address, ep) or a query_ep dict ({ex!r})") from None

    def _enqueue(self, pdc: InitiatorPdc, msg: TxMessage) -> None:
        """Give ``msg`` the PDC's next message id and queue it for sending."""
        msg.message_id = pdc.next_msg_id
        pdc.next_msg_id = (pdc.next_msg_id + 1) & 0xFFFF
        pdc.queue.append(msg)
        self.stats["wr_posted"] += 1
        self._active[pdc.pdcid] = None

    # -- SES operations beyond WRITE/SEND (logic in .ses_initiator) ------------------

    def post_read(self, ep: int, wr_id: int, sg_list: Sequence[Any], dest: Any,
                  remote_addr: int, rkey: int, now: float = 0.0, *,
                  signaled: bool = True) -> None:
        """RDMA-style READ of ``remote_addr`` in the peer's region ``rkey`` into the local
        SGEs (which need LOCAL_WRITE); completes as RDMA_READ once every byte is in."""
        self.ses_ini.post_read(ep, wr_id, sg_list, dest, remote_addr, rkey, signaled)

    def post_atomic(self, ep: int, wr_id: int, sg_list: Sequence[Any], dest: Any,
                    remote_addr: int, rkey: int, op: str | int, operand: int, swap: int = 0,
                    now: float = 0.0, *, signaled: bool = True, datatype: str | int = "UINT64",
                    fetch: bool | None = None) -> None:
        """An 8-byte atomic on ``remote_addr`` (region ``rkey``, 8-byte aligned).

        ``op``: ``"fetch_add"``/``"SUM"``, ``"swap"``/``"WRITE"``, ``"cmp_swap"``/``"CSWAP"``,
        or another UET AMO name (MIN, MAX, BOR, BAND, BXOR, …). ``operand`` is the value
        (the *compare* value for CSWAP, with ``swap`` the value stored on a match — the
        verbs order). With an 8-byte result SGE in ``sg_list`` the op is a FETCHING_ATOMIC
        and the old value lands there (host order); an empty ``sg_list`` (or
        ``fetch=False``) sends a non-fetching ATOMIC. Completion opcode COMP_SWAP for
        CSWAP, FETCH_ADD otherwise."""
        self.ses_ini.post_atomic(ep, wr_id, sg_list, dest, remote_addr, rkey, op, operand,
                                 swap, signaled, datatype, fetch)

    def post_tsend(self, ep: int, wr_id: int, sg_list: Sequence[Any], dest: Any, tag: int,
                   now: float = 0.0, *, signaled: bool = True) -> None:
        """TAGGED_SEND with 64 match bits ``tag`` (matched by the peer's :meth:`post_trecv`)."""
        if not 0 <= tag < 1 << 64:
            raise VerbsError("tag is 64-bit unsigned")
        self._post(ep, wr_id, S.OP_TAGGED_SEND, sg_list, dest, 0, tag, now, signaled)

    def post_trecv(self, ep: int, wr_id: int, sg_list: Sequence[Any], tag: int,
                   ignore: int = 0, now: float = 0.0) -> None:
        """Post a tagged receive: takes the first TAGGED_SEND whose match bits equal ``tag``
        outside the ``ignore`` mask (libfabric ``fi_trecv``; :mod:`.ses_tagged`)."""
        self.ses_ini.post_trecv(ep, wr_id, sg_list, tag, ignore)

    def _pdc_for(self, addr: Addr, mode: Mode = Mode.RUD) -> InitiatorPdc:
        """The open ``mode`` PDC to ``addr``'s host for our job, or a new one with a random
        Start_PSN (uet.md: Behaviour, PDC)."""
        host = self._host(addr[0])
        key = (host, self.job_id, mode)
        pid = self._ini_by_key.get(key)
        pdc = self.ini.get(pid) if pid is not None else None
        if pdc is None or pdc.state not in (PdcState.SYN_SENT, PdcState.ESTABLISHED):
            pdc = InitiatorPdc(self.ids.alloc(), host, addr, key, PSN32.random(self.rng),
                               self.mpr * D.MPR_UNIT, mode=mode)
            self.ini[pdc.pdcid] = pdc
            self._ini_by_key[key] = pdc.pdcid
            self.stats["pdc_initiator_created"] += 1
        return pdc

    def close_pdc(self, pdcid: int, now: float = 0.0) -> None:
        """Graceful close: finish what is queued, wait for every ACK, then CP CLOSE
        (uet.md: Behaviour, Close). Later posts to that host open a new PDC."""
        pdc = self.ini.get(pdcid)
        if pdc is None:
            raise VerbsError(f"no initiator PDC {pdcid}")
        if pdc.state in (PdcState.SYN_SENT, PdcState.ESTABLISHED):
            pdc.move(PdcState.CLOSING)
            if self._ini_by_key.get(pdc.key) == pdcid:
                del self._ini_by_key[pdc.key]
        self._active[pdcid] = None

    def destroy_pdc(self, pdcid: int) -> None:
        """Forget a PDC at once, without telling the peer (an abort, or a test of INV_DPDCID)."""
        if pdcid in self.target.pdcs:
            self.target.drop(pdcid)
            return
        pdc = self.ini.pop(pdcid, None)
        if pdc is None:
            raise VerbsError(f"no PDC {pdcid}")
        self.initiator.fail(pdc, WcStatus.WR_FLUSH_ERR, "destroyed")

    def probe_pdc(self, pdcid: int, now: float = 0.0) -> int:
        """CP PROBE on initiator PDC ``pdcid``; the reply's RTT goes to ``control.on_probe``
        and ``control.rtt``; unanswered after the retries, the PDC closes in error."""
        pdc = self._ini_open(pdcid)
        self._active[pdcid] = None
        return self.control.probe(pdc, now)

    def request_credit(self, pdcid: int, now: float = 0.0) -> None:
        """CP CREDIT_REQ on initiator PDC ``pdcid`` (the CREDIT goes to ``control.on_credit``)."""
        self.control.request_credit(self._ini_open(pdcid), now)

    def grant_credit(self, pdcid: int, credit: int, now: float = 0.0) -> None:
        """CP CREDIT from target PDC ``pdcid`` to its initiator, unasked."""
        self.control.grant_credit(pdcid, credit, now)

    def request_close(self, pdcid: int, now: float = 0.0) -> None:
        """CP CLOSE_REQ from target PDC ``pdcid``: its initiator closes it gracefully."""
        self.control.request_close(pdcid, now)

    def _ini_open(self, pdcid: int) -> InitiatorPdc:
        pdc = self.ini.get(pdcid)
        if pdc is None or pdc.state in (PdcState.CLOSED, PdcState.ERROR):
            raise VerbsError(f"no open initiator PDC {pdcid}")
        return pdc

    def pdcs(self) -> list[dict[str, Any]]:
        """Every PDC (both halves), JSON-ready."""
        return ([snapshot(p) for p in self.ini.values()]
                + [snapshot(t) for t in self.target.pdcs.values()])

    # -- the Engine contract -----------------------------------------------------------

    def receive_datagram(self, data: bytes | bytearray | memoryview, addr: Addr, now: float,
                         *, ecn: int = ECN_NOT_ECT, trimmed: bool = False,
                         arrived: float | None = None) -> None:
        """One datagram from ``addr`` at ``now``. ``arrived`` (a daemon: the kernel's
        receive stamp, on the engine's clock; at most ``now``) is when it reached the
        port: an ACK's round-trip sample ends there, not when a late daemon got round
        to it — a NIC takes a packet off the wire at once, and the emulator's delay
        must not reach NSCC as queueing delay (``docs/credibility.md``; :meth:`arrival`).
        A receive batch of one (:meth:`receive_batch`)."""
        self.receive_batch(((data, addr, ecn),), now, trim=_ALL_TRIMMED if trimmed else None,
                           arrived=None if arrived is None else (arrived,))

    def receive_batch(self, items: Sequence[tuple[bytes | bytearray | memoryview, Addr, int]],
                      now: float, *, trim: Sequence[int] | None = None,
                      arrived: Sequence[float | None] | None = None) -> None:
        """Datagrams read together at ``now``, oldest first: ``(datagram, address, TOS)``
        as a daemon reads them (ECN is the TOS's low two bits). ``trim[tos]`` nonzero says
        a switch cut the datagram to its headers (its DSCP); ``arrived[i]``: as for
        :meth:`receive_datagram`.

        Why batches: a daemon reads its socket in batches (its "interrupt"), and most
        of a bulk transfer's batch is one WRITE's next packets. The target places
        such a run with one set of checks and one update of its window and ACK state
        (:meth:`Target.write_run`) instead of once per packet — what the same
        datagrams one at a time would have done, with the same ACKs."""
        self.now = now
        st = self.stats
        target = self.target
        i, n = 0, len(items)
        while i < n:
            data, addr, tos = items[i]
            self.arrival(now, None if arrived is None else arrived[i])
            ecn = tos & 3
            trimmed = trim is not None and trim[tos] != 0
            # the bulk of a WRITE first (Target.write_run: 0 = take the general path)
            if len(data) > FP.REQ_SIZE and data[0] >> 3 in _REQ_TYPES:
                try:
                    k = target.write_run(items, i, self._host(addr[0]), now, trim, arrived)
                except Exception as e:  # a bug must not take the NIC down; tests assert 0
                    k = 1
                    st["rx_drop_internal_error"] += 1
                    if self.trace.enabled:
                        self.trace.packet_dropped(now, reason=f"internal: {e!r}")
                if k:
                    st["rx_packets"] += k
                    st["rx_bytes"] += len(data) * k  # a run's datagrams are one size
                    i += k
                    continue
            st["rx_packets"] += 1
            st["rx_bytes"] += len(data)
            i += 1
            self._receive_general(data, addr, now, ecn, trimmed)

    def arrival(self, now: float, arrived: float | None) -> None:
        """The datagram being handled reached the port at ``arrived`` (None: unknown, now)."""
        self.rx_at = now if arrived is None or arrived > now else arrived

    def _receive_general(self, data: bytes | bytearray | memoryview, addr: Addr, now: float,
                         ecn: int, trimmed: bool) -> None:
        """A datagram no fast path took: decoded, then dispatched by its PDS type."""
        st = self.stats
        try:
            pkt = FP.decode_request(data) or FP.decode_ack(data) or decode_packet(data)
        except DecodeError:
            st["rx_drop_malformed"] += 1
            return
        pds = pkt.pds
        if pds is None:
            st["rx_drop_tss"] += 1  # no security associations configured
            return
        try:
            self._dispatch(pkt, pds.type, addr, now, ecn, trimmed)
        except Exception as e:  # a bug must not take the NIC down; tests assert this stays 0
            st["rx_drop_internal_error"] += 1
            if self.trace.enabled:
                self.trace.packet_dropped(now, reason=f"internal: {e!r}")

    def _dispatch(self, pkt: Any, typ: int, addr: Addr, now: float, ecn: int,
                  trimmed: bool) -> None:
        host = self._host(addr[0])
        if typ in _REQ_TYPES:
            self.target.on_request(pkt, addr, host, now, ecn, trimmed)
        elif typ == _CP_TYPE:
            if pkt.pds.syn or not self.control.from_target(pkt.pds, host, now):
                self.target.on_control(pkt, addr, host, now, ecn)
        elif typ == _RUDI_REQ:
            self.rudi.on_request(pkt, addr, now, ecn, trimmed)
        elif typ == _RUDI_RESP:
            self.rudi.on_response(pkt, host, now)
        elif typ == _UUD_REQ:
            self.uud.on_request(pkt, now, trimmed)
        elif typ in _NACK_TYPES and pkt.pds.nt:
            self.rudi.on_nack(pkt.pds, host, now)
        elif typ in _ACK_TYPES or typ in _NACK_TYPES:
            pdc = self.ini.get(pkt.pds.dpdcid)
            if pdc is None or pdc.peer != host:
                if typ in _NACK_TYPES and self.control.nack_at_target(pkt.pds, host):
                    return
                self.stats["rx_drop_unknown_pdc"] += 1
                return
            bad = self.initiator.reply_check(pdc, pkt.pds, typ in _ACK_TYPES)
            if bad:
                self.stats[bad] += 1  # a stray or forged reply changes nothing
                return
            if typ in _ACK_TYPES:
                self.stats["rx_acks"] += 1
                rsp = self.ses_ini.on_response(pdc, pkt.pds, pkt.ses, pkt.payload, now)
                self.initiator.on_ack(pdc, pkt.pds, rsp, now)
                self.flowctl.on_ack(pdc, addr[1] if len(addr) > 1 else None, pkt.pds, now)
                if pkt.pds.p:
                    self.control.probe_reply(pdc, pkt.pds, now)
            else:
                self.initiator.on_nack(pdc, pkt.pds, now)
                self.flowctl.on_nack(pdc, addr[1] if len(addr) > 1 else None, pkt.pds, now)
            self._active[pdc.pdcid] = None
        else:
            self.stats["rx_drop_unsupported_type"] += 1

    def emit(self, buf: bytearray | Gather, addr: Any, entropy: int | None, ctrl: bool
             ) -> None:
        """Queue one datagram. ``entropy`` None = spray (oblivious: a random one from the
        set); a data packet's entropy comes from its PDC's path policy (:mod:`.flowctl`);
        replies pass the entropy they echo."""
        if entropy is None:
            entropy = self.flowctl.default.choose(self.now)
        if ctrl or entropy not in self._ent_set:  # (outside the set: an echo, a reply's meta)
            meta = self._ctrl_meta(entropy)
        else:
            meta = self._data_metas.get(entropy) or _meta(self._data_metas, entropy,
                                                          self._dscp, self._ecn)
        self._out.append((buf, (addr[0], self.port) if ctrl else addr, meta))

    def emit_run(self, heads: bytearray, payload: memoryview, seg: int,
                 entropies: list[int], addr: Any) -> None:
        """Queue a run of data packets (:class:`~emu.core.datagram.Run`), packet ``i``
        on ``entropies[i]``."""
        dm, known = self._data_metas, self._ent_set
        get = dm.get
        metas = [(get(e) or _meta(dm, e, self._dscp, self._ecn)) if e in known
                 else self._ctrl_meta(e) for e in entropies]
        self._out.append((Run(heads, FP.REQ_SIZE, payload, seg, metas), addr, None))

    def _ctrl_meta(self, entropy: int) -> TxMeta:
        return self._ctrl_metas.get(entropy) or _meta(self._ctrl_metas, entropy,
                                                      self._ctrl_dscp, ECN_NOT_ECT)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, Addr, TxMeta]]:
        self.now = now
        if self.target.due:
            self.target.flush_due()
        active, self._active = self._active, {}
        for pid in active:
            pdc = self.ini.get(pid)
            if pdc is not None:
                self.initiator.pull(pdc, now)
        if self.rudi.queue or self.rudi.retx:
            self.rudi.pull(now)
        out, self._out = self._out, []
        st = self.stats
        n = len(out)
        for b, _, _ in out:
            if type(b) is Run:
                n += b.count - 1
        st["tx_packets"] += n
        st["tx_bytes"] += sum(len(b) for b, _, _ in out)
        return out  # type: ignore[return-value]

    def get_timer(self) -> float | None:
        t = self.rudi.earliest()
        c = self.control.earliest()
        if c is not None and (t is None or c < t):
            t = c
        for pdc in self.ini.values():
            d = pdc.timers.earliest()
            if d is not None and (t is None or d < t):
                t = d
        return t

    def handle_timer(self, now: float) -> None:
        self.now = now
        d = self.rudi.earliest()
        if d is not None and d <= now:
            self.rudi.on_timer(now)
        d = self.control.earliest()
        if d is not None and d <= now:
            self.control.on_timer(now)
        for pid, pdc in list(self.ini.items()):
            d = pdc.timers.earliest()
            if d is not None and d <= now:
                self.initiator.on_timer(pdc, now)
                self._active[pid] = None

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def counters(self) -> dict[str, int | float]:
        c: dict[str, int | float] = dict(self.stats)
        c["pdcs_initiator"] = len(self.ini)
        c["pdcs_target"] = len(self.target.pdcs)
        c["rudi_outstanding"] = len(self.rudi.out)
        c["events_pending"] = len(self._events)
        return c

    def pause(self, cls: int, until: float) -> None:
        """PFC is not modelled for UET yet (UET runs lossy); counted only."""
        self.stats["pause_frames"] += 1

    # -- PdsHost callbacks ------------------------------------------------------------

    def _complete(self, cq: Hashable, wc: WorkCompletion) -> None:
        self._events.append(Completion(cq, wc))
        if self.trace.enabled:
            self.trace.completion(self.now, ep=wc.qp_num, wr_id=wc.wr_id, status=wc.status)

    def finish(self, pdc: InitiatorPdc, msg: TxMessage, status: WcStatus, rc: int,
               vendor: int = 0) -> None:
        """A message is done: a send-side completion on its endpoint's send CQ (errors
        always, successes when signaled); ``vendor_err`` carries the SES return code or
        the NACK code that ended it."""
        if self.ses_ini.finished(pdc, msg, status, rc, vendor):
            return  # a READ piece or an atomic: its op reports the completion
        self.stats["msgs_completed" if status is WcStatus.SUCCESS else "msgs_failed"] += 1
        ep = self.eps.get(msg.ep)
        if ep is None or (status is WcStatus.SUCCESS and not msg.signaled):
            return
        self._complete(ep.send_cq, WorkCompletion(
            msg.wr_id, status, S.WC_OPCODE[msg.opcode], msg.ep, msg.length,
            vendor_err=vendor or (rc if status is not WcStatus.SUCCESS else 0)))

    def pdc_ended(self, pdc: InitiatorPdc, old: PdcState, reason: str,
                  status: WcStatus | None) -> None:
        """A PDC closed (gracefully or in error): forget it and tell the owner."""
        self.ini.pop(pdc.pdcid, None)
        if self._ini_by_key.get(pdc.key) == pdc.pdcid:
            del self._ini_by_key[pdc.key]
        self.ids.free(pdc.pdcid)
        self.flowctl.forget(pdc.pdcid)
        self.stats["pdc_closed" if status is None else "pdc_errors"] += 1
        self._events.append(StateChanged(pdc.pdcid, old.value, pdc.state.value, status, reason))
        if self.trace.enabled:
            self.trace.state_changed(self.now, old.value, pdc.state.value, pdc=pdc.pdcid,
                                     reason=reason)

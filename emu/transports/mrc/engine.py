# SPDX-License-Identifier: GPL-2.0-only
"""The MRC engine: every MRC QP of one NIC behind one UDP port (sans-IO).

It joins the two halves of each QP — :class:`~emu.transports.mrc.initiator.InitiatorQP`
(spraying, SACK/NACK/timeout recovery, NSCC) and
:class:`~emu.transports.mrc.target.TargetQP` (placement, SACKs, NACKs, the transport
ACK) — to the daemon's :class:`emu.transports.base.Engine` contract and verbs calls
(``create_qp``, ``connect``, ``post_send``, ``post_recv``, ``destroy_qp``).

The EV on the wire: in the QP's EV profile's format (:mod:`emu.transports.mrc.evwire`).
In the UDP format, the default, a packet's EV *is* its UDP source port
(``TxMeta.entropy``), so every switch's ECMP hash sees it and the receiver reads it
back from the source port to echo it; the default profile therefore generates ports
53248–65535 (a port is never 0 or well known, and UET's entropies, 49152–53247, stay
out of the way: :data:`DEFAULT_PROFILE`). STEV adds the IPv6 flow label; SRv6 also
an outer IPv6 header naming the EV's whole path, from the controller's path table
(``srv6_paths``, injected). ``ev_format`` picks the built-in profile's format.

Sans-IO: time is an argument, randomness the injected RNG; nothing raises on
input from the wire (counted ``rx_drop_*``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from emu.cc.nscc import Nscc
from emu.core.cq import WcStatus
from emu.core.datagram import ECN_CE, ECN_ECT0, ECN_NOT_ECT, Addr, TxMeta
from emu.core.memory import MemoryTable, ProtectionDomain
from emu.core.psn import PSN24, RandomBits
from emu.core.trace import NULL_TRACE, Trace
from emu.core.verbs import RecvWR, SendWR
from emu.transports.base import Completion, Engine, Event, StateChanged, VerbsError
from emu.transports.mrc.controller import ControllerCalls
from emu.transports.mrc.evprofile import EVGenMode, EVProfile, GenField
from emu.transports.mrc.evset import EVSet
from emu.transports.mrc.evwire import EVWire, PathTable, ranks
from emu.transports.mrc.fastpath import read_data, read_sack
from emu.transports.mrc.initiator import InitiatorQP, timeout_of
from emu.transports.mrc.profiles import Profiles
from emu.transports.mrc.target import TargetQP, trimmed_reason
from emu.transports.mrc.txlead import PortLead
from emu.wire.codec.ev import DEFAULT_SPLIT, EVMode, EVSplit, parse_split
from emu.wire.codec.mrc import (
    EETH,
    EETH_OK,
    EETH_STATUS,
    EETH_UNSUPPORTED_OP,
    ENDPOINT_QP,
    ERTH,
    ERTH_EV_PROBE,
    ERTH_PORT_STATUS_UPDATE,
    MPR_UNIT,
    MRC_ENDPOINT_REQUEST,
    MRC_ENDPOINT_RESPONSE,
    MRC_RELIABILITY_NACK,
    MRC_RELIABILITY_PROBE,
    MRC_RELIABILITY_SACK,
    MRC_TRANSPORT_ACK,
    NACK_TRIMMED,
    NACK_TRIMMED_LASTHOP,
    WRITE_OPCODES,
)
from emu.wire.codec.roce import BTH, decode_packet, encode_packet
from emu.wire.errors import DecodeError

#: MRC's UDP port in emu: the reconstructions' 4971 (specs/mrc.md: RoCEv2's 4791 is the
#: other reading). A daemon serves RoCEv2 on 4791 with a socket of its own, and each
#: engine has one socket, so MRC takes the setting the spec page names for it
UDP_PORT = 4971
#: EVs per QP (MRC: 128-256)
DEFAULT_EV_SET = 128
#: the receive window offered to the peer, in packets (16 MPR units)
DEFAULT_MPR = 16 * MPR_UNIT
#: the default EV profile: source ports 53248-65535, in order. Why not from 49152: the
#: daemon's UET engine sprays over 49152-53247 on the same addresses (binding the first
#: 64 where it sends by socket: emu.nic.txpath.TxPath.preopen), and where a
#: packet must leave by socket (a next hop not yet resolved, no frame ring) an EV that
#: cannot be bound went out from the engine's own port instead — 15 of a demo run's
#: first packets on a fresh plane carried source port 4971, not their EV
DEFAULT_PROFILE = EVProfile(fmt=EVMode.UDP, mode=EVGenMode.GEN,
                            fields=(GenField(16, init=0xD000, lo=0xD000),))
def default_profile(fmt: EVMode, split: EVSplit = DEFAULT_SPLIT) -> EVProfile:
    """The built-in EV profile of a format and (STEV, SRv6) a split: the same source ports
    as UDP's above a flow label from 1 (16+16: EV = sport << 16 | label; under a split
    with a base, e.g. 12+20@0xd000, the port field starts at 0 above it: ports from
    53248 again). The label field is the faster one, so a set's EVs share a port and
    differ in the label — what a switch that hashes the flow label spreads (SRv6 needs
    no hash: the path is in the header)."""
    if fmt is EVMode.UDP:
        return DEFAULT_PROFILE
    hi = 0 if split.sport_base else 0xD000 & ((1 << split.sport_bits) - 1)
    return EVProfile(fmt=fmt, mode=EVGenMode.GEN, split=split,
                     fields=(GenField(split.sport_bits, init=hi, lo=hi),
                             GenField(split.flow_label_bits, init=1, lo=1)))
#: a PORT_STATUS_UPDATE not answered within this many base round trips is sent again (with
#: the ports' state then), at most UPDATE_TRIES times in all: the peer must hear that a
#: plane came back, or its QPs never use it again (a lone update sent while the fabric
#: was still converging was lost for good)
UPDATE_RTTS, UPDATE_TRIES = 8, 16
#: DSCP of data (trimmable) and of SACKs, NACKs and ACKs (never trimmed, expedited)
DSCP_DATA, DSCP_CONTROL = 0, 46
STATES = ("RESET", "RTS", "ERR")


@dataclass
class _Qp:
    qpn: int
    pd: ProtectionDomain | None
    send_cq: Hashable
    recv_cq: Hashable
    attrs: dict[str, Any]
    sq_psn: int
    state: str = "RESET"
    dest: Addr | None = None
    dests: list[Addr] | None = None  # the peer's address on each plane
    reply: dict[int, str] | None = None  # EV → the peer address its packets came from
    last_data: str | None = None  # the peer address the latest WRITE packet came from
    peer_down: set[int] | None = None  # planes the peer said are down (PORT_STATUS_UPDATE)
    wire: EVWire | None = None  # where its EVs ride (the EV profile's format)
    ini: InitiatorQP | None = None
    tgt: TargetQP | None = None


class MrcEngine(ControllerCalls, Engine):
    """Every MRC QP of a NIC. ``line_rate`` (bits/s) and ``base_rtt`` (s) size NSCC's
    window (``cc=None``: the MPR window alone); ``planes``: the NIC's ports an EV set
    is split over. Behind a paced port (``tx_hold``: its FIFO, s; ``frame_overhead``: its
    bytes per datagram) output keeps within each port's FIFO (:mod:`.txlead`)."""

    #: the daemon hands over each datagram's IPv6 flow label (STEV and SRv6 EVs)
    reads_flow_label = True

    def __init__(self, memory: MemoryTable, rng: RandomBits, *,
                 local_addr: Addr | None = None, local_addrs: list[str] | None = None,
                 line_rate: float = 400e9,
                 base_rtt: float = 10e-6, cc: str | None = "nscc", pmtu: int = 4096,
                 ev_set: int = DEFAULT_EV_SET, planes: int = 1, mpr: int = DEFAULT_MPR,
                 timeout: int = 14, retry_linear: int = 7, retry_exp: int = 25,
                 loss_threshold: int = 16, profile: EVProfile | None = None,
                 ev_min_active: int = 1, trace: Trace = NULL_TRACE, ev_format: str = "udp",
                 ev_split: str = "16+16", srv6_paths: PathTable | None = None,
                 tx_hold: float = 0.0, frame_overhead: int = 0) -> None:
        if cc not in ("nscc", None):
            raise ValueError(f"MRC congestion control is nscc or none, not {cc!r}")
        try:
            fmt = EVMode(str(ev_format).lower())
        except ValueError:
            raise ValueError(f"MRC ev_format is one of {', '.join(m.value for m in EVMode)}, "
                             f"not {ev_format!r}") from None
        if profile is None:  # ev_split: where STEV/SRv6 put the EV (specs/mrc.md disagree)
            profile = default_profile(fmt, parse_split(ev_split))
        timeout_of(timeout)
        self.lead = PortLead.of(planes, line_rate, tx_hold, frame_overhead)
        self.memory = memory
        self.rng = rng
        self.local_addr = local_addr
        #: this NIC's address on each plane (port), the first the QP's own
        self.local_addrs = list(local_addrs or ([local_addr[0]] if local_addr else []))
        self.line_rate = line_rate
        self.base_rtt = base_rtt
        self.pmtu = pmtu
        self.ev_set = ev_set
        self.planes = planes
        self.mpr = mpr
        self.timeout = timeout
        self.retry_linear = retry_linear
        self.retry_exp = retry_exp
        self.loss_threshold = loss_threshold
        self.ev_min_active = ev_min_active
        #: the daemon's event trace (``emu nicd --trace``): packets, per-EV feedback, EV
        #: state changes, probes, ports
        self.trace = trace
        #: the controller's EV and CC profiles (emu mrc ev-profile / cc-profile); the
        #: built-in defaults are this engine's options
        self.profiles = Profiles(profile, {"algorithm": "none" if cc is None else
                                           "uet-1.0-nscc", "base_rtt": base_rtt})
        self._qps: dict[int, _Qp] = {}
        self.admin_down: set[int] = set()  # planes the controller took down
        self.link_down: set[int] = set()   # planes whose port lost its link (the daemon)
        #: ENDPOINT_REQUEST/RESPONSE to send: (datagram, to, source port: None = the NIC's)
        self._endpoint_out: list[tuple[bytearray, Addr, int | None]] = []
        self._port = local_addr[1] if local_addr else UDP_PORT
        #: the controller's SRv6 path table (None: the fabric is not source-routed)
        self.srv6_paths = srv6_paths
        #: where endpoint operations' EVs ride: the built-in profile's format
        self._ewire = EVWire(profile.fmt, profile.split, srv6_paths)
        self._request_id = 0
        #: our ENDPOINT_REQUESTs not answered yet: id -> (op, sent at, to, EV); the oldest
        #: is forgotten past 1024 (a peer that never answers)
        self._requests: dict[int, tuple[int, float, str, int | None]] = {}
        #: the PORT_STATUS_UPDATE each peer NIC has not answered yet: address → (request id,
        #: sent at, tries)
        self._updates: dict[str, tuple[int, float, int]] = {}
        #: EV_PROBE answers (and PORT_DOWN refusals) until the controller takes them
        self.probe_results: deque[dict[str, Any]] = deque(maxlen=1024)
        self._next_qpn = ENDPOINT_QP + 1  # QPN 2 is the endpoint's (BTH.DestQP of ERTH)
        self._events: deque[Event] = deque()
        self._paused_until = 0.0
        self._retired: dict[str, int] = {}  # the counts of destroyed QPs
        self.stats: dict[str, int] = dict.fromkeys((
            "rx_datagrams", "rx_drop_malformed", "rx_drop_unknown_qp", "rx_drop_not_connected",
            "rx_drop_unsupported", "qp_errors", "pause_frames", "tx_datagrams",
            "tx_port_updates", "rx_port_updates", "rx_port_update_acks",
            "rx_port_update_unknown", "rx_drop_unexpected_response", "link_downs",
            "link_ups", "tx_ev_probes", "rx_ev_probes", "rx_ev_probe_answers",
            "rx_drop_bad_ev", "tx_port_update_retries", "port_updates_unanswered"), 0)

    # -- verbs ---------------------------------------------------------------------------

    def create_qp(self, *, pd: ProtectionDomain | None = None, send_cq: Hashable = 0,
                  recv_cq: Hashable = 0, attrs: dict[str, Any] | None = None,
                  **kw: Any) -> int:
        """A new QP (RESET until :meth:`connect`); ``attrs``: ``pmtu``, ``mpr`` (packets,
        a multiple of 128), ``timeout``, ``retry_linear``, ``retry_exp``, ``ev_set``."""
        a = {**(attrs or {}), **kw}
        unknown = set(a) - {"pmtu", "mpr", "timeout", "retry_linear", "retry_exp", "ev_set",
                            "ev_profile", "cc_profile", "trim_nack", "dynamic_mpr",
                            "max_send_wr", "max_recv_wr",
                            "max_rd_atomic", "max_dest_rd_atomic"}
        if unknown:
            raise VerbsError(f"unknown MRC QP attribute(s): {', '.join(sorted(unknown))}")
        qpn = self._next_qpn
        while qpn in self._qps or qpn <= ENDPOINT_QP:
            qpn = qpn + 1 if qpn < 0xFFFFFF else ENDPOINT_QP + 1
        self._next_qpn = qpn + 1 if qpn < 0xFFFFFF else ENDPOINT_QP + 1
        self._qps[qpn] = _Qp(qpn, pd, send_cq, recv_cq, a, PSN24.random(self.rng))
        return qpn

    def _qp(self, qpn: int) -> _Qp:
        qp = self._qps.get(qpn)
        if qp is None:
            raise VerbsError(f"no MRC QP {qpn:#x}")
        return qp

    def query_qp(self, qpn: int) -> dict[str, Any]:
        """The connection data a peer's :meth:`connect` takes, and the state."""
        qp = self._qp(qpn)
        a = self.local_addr
        return {"qpn": qpn, "psn": qp.sq_psn, "pmtu": int(qp.attrs.get("pmtu", self.pmtu)),
                "mpr": int(qp.attrs.get("mpr", self.mpr)), "address": a[0] if a else "",
                "addresses": self.local_addrs[:self.planes] or ([a[0]] if a else []),
                "port": a[1] if a else UDP_PORT, "state": qp.state, "transport": "mrc",
                "trim_nack": bool(qp.attrs.get("trim_nack", True)),
                "dynamic_mpr": bool(qp.attrs.get("dynamic_mpr", False))}

    def connect(self, qpn: int, remote: dict[str, Any], now: float = 0.0) -> None:
        """RESET → RTS towards ``remote`` (the peer's :meth:`query_qp`): the sender sprays
        within the peer's MPR, the receiver's window starts at the peer's PSN."""
        qp = self._qp(qpn)
        if qp.state != "RESET":
            raise VerbsError(f"MRC QP {qpn:#x} is {qp.state}, not RESET")
        a = qp.attrs
        try:
            dest = (str(remote["address"]), int(remote.get("port", UDP_PORT)))
            peer, peer_psn = int(remote["qpn"]), int(remote["psn"])
            pmtu = min(int(a.get("pmtu", self.pmtu)), int(remote.get("pmtu", self.pmtu)))
            peer_mpr = int(remote.get("mpr", self.mpr))
            addrs = [str(x) for x in (remote.get("addresses") or [dest[0]])]
        except (KeyError, TypeError, ValueError) as e:
            raise VerbsError(f"remote connection data needs qpn, psn and address ({e!r})"
                             ) from None
        # the planes both ends have: an EV of plane p goes to the peer's plane-p address
        # (its own subnet, so the kernel sends it out of this NIC's plane-p port)
        planes = max(1, min(self.planes, len(addrs)))
        try:
            evp = self.profiles.for_qp("ev", a.get("ev_profile")).ev
            ccp = dict(self.profiles.for_qp("cc", a.get("cc_profile")).cc)
            assert evp is not None
            evs = EVSet.build(evp, int(a.get("ev_set", self.ev_set)), planes,
                              self.rng, ev_min_active=self.ev_min_active)
            wire = EVWire(evp.fmt, evp.split, self.srv6_paths,
                          ranks([(e.ev, e.plane) for e in evs.slots]))
            wire.check(addrs[:planes])
            algo = ccp.pop("algorithm")
            ccp.setdefault("base_rtt", self.base_rtt)
            cc = None if algo == "none" else Nscc(self.line_rate, now, mtu=pmtu,
                                                  trimming=True, **ccp)
            gate = None if self.lead is None else self.lead.gate(evs, addrs[:planes], pmtu)
            qp.ini = InitiatorQP(qpn, peer, self.memory, evs, start_psn=qp.sq_psn, pmtu=pmtu,
                                 mpr=peer_mpr, timeout=int(a.get("timeout", self.timeout)),
                                 retry_linear=int(a.get("retry_linear", self.retry_linear)),
                                 retry_exp=int(a.get("retry_exp", self.retry_exp)),
                                 loss_threshold=self.loss_threshold, cc=cc, pd=qp.pd,
                                 max_send_wr=int(a.get("max_send_wr", 4096)),
                                 trace=self.trace,
                                 # DYNAMIC_MPR is in force only when both ends enable it
                                 dynamic_mpr=bool(a.get("dynamic_mpr", False))
                                 and bool(remote.get("dynamic_mpr", False)), gate=gate)
            if self.trace.enabled:
                evs.listener = self._ev_tracer(qpn)
            qp.tgt = TargetQP(qpn, peer, self.memory, start_psn=peer_psn,
                              mpr=int(a.get("mpr", self.mpr)), pd=qp.pd,
                              trim_nack=bool(a.get("trim_nack", True)))
        except ValueError as e:
            raise VerbsError(str(e)) from None
        qp.dest = dest
        qp.dests = [(x, dest[1]) for x in addrs[:planes]]
        qp.wire = wire
        for p in self.ports_down:
            if p < planes:
                evs.plane_down(p, now)
        qp.reply = {}
        qp.peer_down = set()
        qp.state = "RTS"

    def _ev_tracer(self, qpn: int) -> Any:
        trace = self.trace

        def on_event(e: Any) -> None:
            d = e.to_dict()
            trace.event("ev_state", d.pop("time"), qp=qpn, **d)
        return on_event

    def post_send(self, qpn: int, wr: SendWR, now: float = 0.0) -> None:
        qp = self._qp(qpn)
        if qp.ini is None:
            raise VerbsError(f"MRC QP {qpn:#x} is not connected")
        try:
            qp.ini.post_send(wr, now)
        except ValueError as e:
            raise VerbsError(str(e)) from None

    def post_recv(self, qpn: int, wr: RecvWR, now: float = 0.0) -> None:
        qp = self._qp(qpn)
        if qp.tgt is None:
            raise VerbsError(f"MRC QP {qpn:#x} is not connected (post receives after "
                             f"connect)")
        qp.tgt.post_recv(wr)

    def destroy_qp(self, qpn: int, now: float = 0.0) -> None:
        qp = self._qp(qpn)
        del self._qps[qpn]
        for half in (qp.ini, qp.tgt):  # its counts stay in the NIC's: counters never go back
            if half is not None:
                for k, v in half.stats.items():
                    self._retired[k] = self._retired.get(k, 0) + v

    # -- the wire ------------------------------------------------------------------------

    def receive_datagram(self, data: bytes | bytearray | memoryview, addr: Addr, now: float,
                         *, ecn: int = ECN_NOT_ECT, trimmed: bool | int = False) -> None:
        """One UDP payload from ``addr`` (its source port is the packet's EV); ``trimmed``:
        a switch cut it (True, or the NACK reason its DSCP names)."""
        st = self.stats
        st["rx_datagrams"] += 1
        if not trimmed:  # the bulk (WRITEs, SACKs) read in one struct call: .fastpath
            f = read_data(data)
            if f is not None:
                got = self._rx(f[1], f[0], addr)
                if got is not None:
                    qp, ev = got
                    qp.tgt.write(f[0], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], ev,  # type: ignore[union-attr]
                                 now, ecn == ECN_CE)
                    self._completions(qp)
                return
            s = read_sack(data)
            if s is not None:
                got = self._rx(s[0], MRC_RELIABILITY_SACK, addr)
                if got is not None:
                    got[0].ini.sack(s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9],  # type: ignore[union-attr]
                                    now)
                return
        try:  # a trimmed packet has only its headers: its BTH is all that is read
            pkt = None if trimmed else decode_packet(data)
            bth = BTH.decode(data, 0) if pkt is None else pkt.bth
        except DecodeError:
            st["rx_drop_malformed"] += 1
            return
        if bth.opcode in (MRC_ENDPOINT_REQUEST, MRC_ENDPOINT_RESPONSE) and pkt is not None:
            self._endpoint(pkt, addr, now)
            return
        op = bth.opcode
        got = self._rx(bth.dqpn, op, addr)
        if got is None:
            return
        qp, ev = got
        assert qp.ini is not None and qp.tgt is not None
        if op in WRITE_OPCODES:
            if trimmed:
                reason = NACK_TRIMMED if trimmed is True else int(trimmed)
                if reason not in (NACK_TRIMMED, NACK_TRIMMED_LASTHOP):
                    reason = trimmed_reason(last_hop=False)
                qp.tgt.trimmed(bth, ev, ce=ecn == ECN_CE, reason=reason)
            else:
                assert pkt is not None
                qp.tgt.receive(pkt, ev, now, ce=ecn == ECN_CE)
                self._completions(qp)
        elif pkt is None:
            st["rx_drop_unsupported"] += 1  # only data is trimmable
        elif op == MRC_RELIABILITY_SACK:
            qp.ini.on_sack(pkt, now)
        elif op == MRC_RELIABILITY_NACK:
            qp.ini.on_nack(pkt, now)
        elif op == MRC_TRANSPORT_ACK:
            qp.ini.on_transport_ack(pkt, now)
            self._completions(qp)
        elif op == MRC_RELIABILITY_PROBE:
            qp.tgt.probe(pkt, ev, now)
        else:
            st["rx_drop_unsupported"] += 1  # an opcode a QP does not take

    def _rx(self, qpn: int, op: int, addr: Addr) -> tuple[_Qp, int] | None:
        """The connected QP a packet of opcode ``op`` from ``addr`` is for, and its EV;
        where answers to it go (a WRITE or a probe: back to the plane it came on). None,
        counted, for a QP that is unknown or not connected, or an EV its format cannot
        hold."""
        st = self.stats
        qp = self._qps.get(qpn)
        if qp is None:
            st["rx_drop_unknown_qp"] += 1
            return None
        if qp.ini is None or qp.tgt is None or qp.state != "RTS":
            st["rx_drop_not_connected"] += 1
            return None
        try:
            ev = qp.wire.ev_of(addr) if qp.wire is not None else int(addr[1])
        except ValueError:
            st["rx_drop_bad_ev"] += 1  # an STEV/SRv6 QP reached over IPv4, say
            return None
        if qp.reply is not None and (op in WRITE_OPCODES or op == MRC_RELIABILITY_PROBE):
            qp.reply[ev] = str(addr[0])  # answers go back to the plane it came on
            if op != MRC_RELIABILITY_PROBE:
                # where the transport ACK goes: where data comes from now (a probe tries a
                # path the sender does not use yet — one that may still be healing)
                qp.last_data = qp.reply[ev]
        return qp, ev

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, Addr, TxMeta]]:
        out: list[tuple[bytes | bytearray, Addr, TxMeta]] = []
        lead = self.lead  # what is not held back still takes its port's time
        for data, dest, ev in self._endpoint_out:
            if lead is not None:
                lead.charge_to(dest[0], len(data), now)
            # from the engine's own port: an endpoint operation is the NIC's, not a QP's EV
            # (an EV_PROBE and its answer: the EV it probes)
            out.append((data, dest, TxMeta(self._port, DSCP_CONTROL, ECN_NOT_ECT) if ev is None
                        else self._ewire.meta(ev, str(dest[0]), DSCP_CONTROL, ECN_NOT_ECT)))
        self._endpoint_out.clear()
        for qp in self._qps.values() if lead is None else lead.turns(self._qps):
            if qp.dest is None or qp.tgt is None or qp.ini is None or qp.dests is None:
                continue
            reply, port, wire = qp.reply or {}, qp.dest[1], qp.wire
            assert wire is not None
            down = qp.ini.evs.down
            dead = {qp.dests[p][0] for p in down if p < len(qp.dests)} if down else ()
            for data, ev in qp.tgt.take():
                # a SACK or NACK to the address the packet came from; the transport ACK
                # (ev 0) to the one the latest data came from — on a live plane
                back = ((reply.get(ev) if ev else qp.last_data)
                        or next(reversed(reply.values()), qp.dest[0]))
                if back in dead:
                    live = self._live_dest(qp)
                    back = live[0] if live is not None else back
                if lead is not None:
                    lead.charge_to(back, len(data), now)
                out.append((data, (back, port), wire.meta(ev or qp.ini.evs.slots[0].ev, back,
                                                          DSCP_CONTROL, ECN_NOT_ECT)))
            if now >= self._paused_until:
                dests = qp.dests  # an EV of plane p goes to the peer's plane-p address
                for data, ev, plane in qp.ini.pull(now):
                    dest = dests[plane]
                    out.append((data, dest, wire.meta(ev, dest[0], DSCP_DATA, ECN_ECT0)))
            self._completions(qp)
        self.stats["tx_datagrams"] += len(out)
        return out

    def _completions(self, qp: _Qp) -> None:
        """Hand the halves' completions to the CQs; an initiator that failed makes the QP
        enter ERR (once), as RC does."""
        ini, tgt = qp.ini, qp.tgt
        if ini is not None and ini.completions:
            for wc in ini.completions:
                self._events.append(Completion(qp.send_cq, wc))
            ini.completions.clear()
        if tgt is not None and tgt.completions:
            for wc in tgt.completions:
                self._events.append(Completion(qp.recv_cq, wc))
            tgt.completions.clear()
        if ini is not None and ini.error is not None and qp.state != "ERR":
            qp.state = "ERR"
            self.stats["qp_errors"] += 1
            self._events.append(StateChanged(qp.qpn, "RTS", "ERR", ini.error,
                                             _why(ini.error)))

    # -- timers, events, counters --------------------------------------------------------

    def get_timer(self) -> float | None:
        t: float | None = None
        for qp in self._qps.values():
            if qp.ini is not None:
                d = qp.ini.deadline()
                if d is not None and (t is None or d < t):
                    t = d
        if self._paused_until and (t is None or self._paused_until < t):
            t = self._paused_until
        u = self._update_due()
        if u is not None and (t is None or u < t):
            t = u
        return t

    def handle_timer(self, now: float) -> None:
        if self._paused_until and self._paused_until <= now:
            self._paused_until = 0.0
        if self._updates:
            self._resend_updates(now)
        for qp in list(self._qps.values()):
            if qp.ini is not None and qp.state == "RTS":
                qp.ini.on_timer(now)
                self._completions(qp)

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def counters(self) -> dict[str, int | float]:
        """The NIC's totals: its own counts, and every QP's, the destroyed ones' too."""
        c: dict[str, int | float] = dict(self.stats)
        for k, v in self._retired.items():
            c[k] = c.get(k, 0) + v
        for qp in self._qps.values():
            for half in (qp.ini, qp.tgt):
                if half is not None:
                    for k, v in half.stats.items():
                        c[k] = c.get(k, 0) + v
        c["qps"] = len(self._qps)
        c["events_pending"] = len(self._events)
        return c

    def pause(self, cls: int, until: float) -> None:
        """PFC: data waits until ``until`` (one class: MRC data is all one)."""
        self.stats["pause_frames"] += 1
        self._paused_until = until

    # -- the controller (emu mrc) --------------------------------------------------------

    @property
    def ports_down(self) -> set[int]:
        """The planes this NIC does not use: taken down by the controller or without link."""
        return self.admin_down | self.link_down

    def port_admin(self, plane: int, up: bool, now: float) -> dict[str, Any]:
        """A NIC port (plane) taken down or brought up by the controller: every connected
        QP's EVs of that plane leave the rotation (the others carry its traffic) or come
        back. Raises VerbsError for a plane this NIC does not have."""
        return self._port_change(self.admin_down, plane, up, now)

    def port_link(self, plane: int, up: bool, now: float) -> dict[str, Any]:
        """The daemon saw a port's link go down or come back (``emu.nic.linkwatch``: the
        cable, its switch or the plane failed): as :meth:`port_admin`, without anyone
        asking — a port the controller took down stays down when its link returns."""
        self.stats["link_downs" if not up else "link_ups"] += 1
        return self._port_change(self.link_down, plane, up, now)

    def _port_change(self, kind: set[int], plane: int, up: bool, now: float
                     ) -> dict[str, Any]:
        if not 0 <= plane < max(1, self.planes):
            raise VerbsError(f"port {plane} is not one of this NIC's {self.planes} plane(s)")
        if self.trace.enabled:
            self.trace.event("port_state", now, port=plane, up=up,
                             by="link" if kind is self.link_down else "controller")
        if up:
            kind.discard(plane)
        else:
            kind.add(plane)
        n = 0
        peers: dict[str, Addr] = {}
        for qp in self._qps.values():
            if qp.ini is not None and qp.dests and plane < qp.ini.evs.planes:
                self._plane_state(qp, plane, now)
                n += 1
                live = self._live_dest(qp)
                if live is not None:
                    peers.setdefault(qp.dests[0][0], live)
        # tell each peer NIC (ENDPOINT_REQUEST PORT_STATUS_UPDATE, over a live plane): it
        # stops sending to this NIC's address on the plane that went down
        for dest in peers.values():
            self._tell(dest[0], now, 1)
        return {"port": plane, "up": up, "qps": n, "ports_down": sorted(self.ports_down),
                "admin_down": sorted(self.admin_down), "link_down": sorted(self.link_down),
                "peers_told": len(peers)}

    def _tell(self, dest: str, now: float, tries: int) -> None:
        """A PORT_STATUS_UPDATE (this NIC's ports as they are now) to the NIC at ``dest``,
        sent again until answered (:data:`UPDATE_RTTS`, :data:`UPDATE_TRIES`)."""
        rid = self._request(ERTH_PORT_STATUS_UPDATE, dest, None, now)
        self._updates[dest] = (rid, now, tries)
        self.stats["tx_port_updates"] += 1

    def _update_due(self) -> float | None:
        if not self._updates:
            return None
        return min(at for _, at, _ in self._updates.values()) + UPDATE_RTTS * self.base_rtt

    def _resend_updates(self, now: float) -> None:
        wait = UPDATE_RTTS * self.base_rtt
        for dest, (_, at, tries) in list(self._updates.items()):
            if now - at < wait:
                continue
            if tries >= UPDATE_TRIES:
                del self._updates[dest]
                self.stats["port_updates_unanswered"] += 1
            else:
                self.stats["tx_port_update_retries"] += 1
                self._tell(dest, now, tries + 1)

    def _next_request_id(self) -> int:
        self._request_id = (self._request_id + 1) & 0xFFFF
        return self._request_id

    def _peer_port(self, address: str) -> int:
        """The UDP port the NIC at ``address`` takes MRC on: what a QP towards it was told
        (a peer may use another port than ours), else ours."""
        for qp in self._qps.values():
            for a, port in qp.dests or ():
                if a == address:
                    return port
        return self._port

    def _request(self, op: int, dest: str, ev: int | None, now: float) -> int:
        """An ENDPOINT_REQUEST (BTH.DestQP 2, its id in the PSN) to the NIC at ``dest``,
        from ``ev`` (None: the NIC's own port); remembered until its answer comes."""
        rid = self._next_request_id()
        erth = ERTH(op=op, port_status_mask=self._up_mask())
        bth = BTH(opcode=MRC_ENDPOINT_REQUEST, dqpn=ENDPOINT_QP, psn=rid)
        self._endpoint_out.append((encode_packet(bth, [erth]), (dest, self._peer_port(dest)),
                                   ev))
        if len(self._requests) >= 1024:
            self._requests.pop(next(iter(self._requests)))
        self._requests[rid] = (op, now, dest, ev)
        return rid

    def _up_mask(self) -> int:
        return sum(1 << p for p in range(max(1, self.planes)) if p not in self.ports_down)

    def _plane_state(self, qp: _Qp, plane: int, now: float) -> None:
        """A plane is in a QP's rotation unless this NIC's port or the peer's is down."""
        assert qp.ini is not None
        down = plane in self.ports_down or plane in (qp.peer_down or ())
        was = plane in qp.ini.evs.down
        if down:
            qp.ini.stats["evs_port_down"] += qp.ini.evs.plane_down(plane, now)
        else:
            qp.ini.evs.plane_up(plane, now)
        if down and not was:  # what is in flight on it is gone: resent now, not at the RTO
            qp.ini.plane_lost(plane, now)
        elif was and not down:  # back: its EVs are probed before traffic returns to them
            qp.ini.plane_back(plane, now)

    def _live_dest(self, qp: _Qp) -> Addr | None:
        """The peer's address on the first plane both ends have up."""
        for p, d in enumerate(qp.dests or ()):
            if p not in self.ports_down and p not in (qp.peer_down or ()):
                return d
        return None

    def _endpoint(self, pkt: Any, addr: Addr, now: float) -> None:
        """An ENDPOINT_REQUEST from a peer NIC — PORT_STATUS_UPDATE: which of its ports are
        up; every QP towards that NIC takes the down planes out of its rotation — answered
        with an ENDPOINT_RESPONSE; or a response to one of ours (counted)."""
        st = self.stats
        if pkt.bth.opcode == MRC_ENDPOINT_RESPONSE:
            rid = pkt.bth.psn & 0xFFFF
            req = self._requests.pop(rid, None)
            if req is None:
                st["rx_drop_unexpected_response"] += 1  # not an answer to ours
            elif req[0] == ERTH_EV_PROBE:
                eeth = pkt.header(EETH)
                ok = isinstance(eeth, EETH) and eeth.status == EETH_OK
                self.probe_results.append({
                    "request_id": rid, "to": req[2], "ev": req[3],
                    "rtt_ns": round((now - req[1]) * 1e9, 1),
                    "status": "OK" if ok else (EETH_STATUS.get(eeth.status, str(eeth.status))
                                               if isinstance(eeth, EETH) else "malformed")})
                st["rx_ev_probe_answers"] += 1
            else:
                st["rx_port_update_acks"] += 1
                if self._updates.get(req[2], (None,))[0] == rid:
                    del self._updates[req[2]]  # heard: no more resends
            return
        erth = pkt.header(ERTH)
        if not isinstance(erth, ERTH):
            st["rx_drop_malformed"] += 1
            return
        status = EETH_OK
        if erth.op == ERTH_PORT_STATUS_UPDATE:
            src, n = str(addr[0]), 0
            for qp in self._qps.values():
                if qp.ini is None or not qp.dests or src not in {d[0] for d in qp.dests}:
                    continue
                n += 1
                qp.peer_down = {p for p in range(len(qp.dests))
                                if not erth.port_status_mask >> p & 1}
                for p in range(qp.ini.evs.planes):
                    self._plane_state(qp, p, now)
            # from a NIC none of our QPs talks to: nothing changes (still answered)
            st["rx_port_updates" if n else "rx_port_update_unknown"] += 1
        elif erth.op == ERTH_EV_PROBE:
            st["rx_ev_probes"] += 1  # the path works: answered on the EV it came on
        else:
            status = EETH_UNSUPPORTED_OP
            st["rx_drop_unsupported"] += 1
        try:
            ev = self._ewire.ev_of(addr) if erth.op == ERTH_EV_PROBE else None
        except ValueError:
            st["rx_drop_bad_ev"] += 1
            return
        eeth = EETH(op=erth.op, status=status, request_id=pkt.bth.psn & 0xFFFF,
                    num_ports=max(1, self.planes), port_status_mask=self._up_mask(),
                    ev=ev or 0, tx_timestamp=erth.tx_timestamp)
        bth = BTH(opcode=MRC_ENDPOINT_RESPONSE, dqpn=ENDPOINT_QP, psn=pkt.bth.psn)
        self._endpoint_out.append((encode_packet(bth, [eeth]),
                                   (str(addr[0]), self._peer_port(str(addr[0]))), ev))

    def ev_probe(self, dest: str, ev: int, now: float, plane: int | None = None) -> int:
        """An EV_PROBE endpoint operation (``mrc_ctl.h``'s batch send) to the NIC at
        ``dest`` (on ``plane``: this NIC's port of that plane sends it; one that is down
        answers PORT_DOWN at once), leaving on ``ev`` (its UDP source port): whether that
        path works and its round trip, answered by the peer's ENDPOINT_RESPONSE on the same
        EV. Returns the request id; the answer lands in :attr:`probe_results`."""
        bits = 16 if self._ewire.fmt is EVMode.UDP else self._ewire.split.ev_bits
        if not 0 <= ev < 1 << bits:
            raise VerbsError(f"EV {ev:#x}: the {self._ewire.fmt.value} EV format has {bits} "
                             f"bits" + (" (a source port)" if bits == 16 else ""))
        try:
            self._ewire.check([dest])
        except ValueError as e:
            raise VerbsError(str(e)) from None
        if plane is not None and plane in self.ports_down:  # this NIC's port cannot send
            rid = self._next_request_id()
            self.probe_results.append({"request_id": rid, "to": dest, "ev": ev,
                                       "rtt_ns": None, "status": "PORT_DOWN"})
            return rid
        self.stats["tx_ev_probes"] += 1
        return self._request(ERTH_EV_PROBE, dest, ev, now)

def _why(status: WcStatus) -> str:
    return {WcStatus.RETRY_EXC_ERR: "retries exhausted (the peer does not answer)",
            WcStatus.REM_ACCESS_ERR: "the peer refused a remote access (transport NAK)"
            }.get(status, status.name)

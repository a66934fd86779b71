# SPDX-License-Identifier: GPL-2.0-only
"""emu-ref's MRC NIC: every :class:`~emuref.mrc_qp.MrcQp` of a process behind one UDP port.

The wire side the QPs do not see: the ICRC (checked over the headers each datagram
arrived with, its source port — the EV — included), decoding, recognising trimmed
packets (by the DSCP the switch wrote, or by a payload shorter than the opcode and
RETH say, for a receiver that cannot read the DSCP), demultiplexing by BTH.DestQP,
answering endpoint operations, and encoding what the QPs send. Sans-IO like the QP:
datagrams and ``now`` in, ``(payload, address, port, source port)`` out.
"""

from __future__ import annotations

import random
from collections import deque

from emuref import mrc_wire as W
from emuref.memory import Memory
from emuref.mrc_qp import M16, M24, Completion, MrcQp, Out
from emuref.mrc_stev import EvFormat

#: DSCPs a switch writes into trimmed packets: emu's pipeline (30; 31 at the last hop)
TRIMMED_DSCPS = {30: W.NACK_TRIMMED, 31: W.NACK_TRIMMED_LASTHOP}


class MrcNic:
    """Every MRC QP of one emu-ref process behind one UDP port (``port``, 4971), as a
    NIC: the wire side (ICRC, decode, trimmed detection, demultiplexing by BTH.DestQP,
    endpoint operations) around :class:`MrcQp`."""

    def __init__(self, local: str, memory: Memory, rng: random.Random, *, evs: list[int],
                 port: int = W.UDP_PORT, pmtu: int = 4096, mpr: int = 1024,
                 evfmt: EvFormat | None = None, **qp_kw: float | int | str) -> None:
        self.local, self.memory, self.rng = local, memory, rng
        #: where EVs ride (the UDP source port; STEV: port and flow label)
        self.evfmt = evfmt or EvFormat()
        self.evs, self.port, self.pmtu, self.mpr = list(evs), port, pmtu, mpr
        self.qp_kw = qp_kw
        self.qps: dict[int, MrcQp] = {}
        self.completions: deque[Completion] = deque()
        self._next_qpn = rng.randrange(W.ENDPOINT_QPN + 1, 1 << 23)
        self._out: list[Out] = []
        self.stats: dict[str, int] = dict.fromkeys((
            "rx_datagrams", "rx_drop_short", "rx_drop_icrc", "rx_drop_opcode", "rx_drop_cut",
            "rx_drop_unknown_qp", "rx_trimmed_dscp", "rx_trimmed_short",
            "rx_drop_trimmed_control", "rx_endpoint_requests", "rx_endpoint_responses",
            "rx_ce", "tx_datagrams"), 0)

    def create_qp(self) -> MrcQp:
        qpn = self._next_qpn
        while qpn in self.qps or qpn <= W.ENDPOINT_QPN:
            qpn = (qpn + 1) & M24
        self._next_qpn = (qpn + 1) & M24
        qp = MrcQp(qpn, self.rng.getrandbits(24), self.memory, self.completions,
                   evs=self.evs, pmtu=self.pmtu, mpr=self.mpr, **self.qp_kw)  # type: ignore[arg-type]
        self.qps[qpn] = qp
        return qp

    def destroy_qp(self, qpn: int) -> None:
        self.qps.pop(qpn, None)

    def receive_datagram(self, data: bytes, src: str, sport: int, now: float, *,
                         dport: int | None = None, tos: int = 0,
                         label: int | None = None) -> None:
        """One UDP payload from ``src``:``sport`` to our ``dport``; ``tos``: the IP TOS /
        traffic class as received (DSCP, ECN); ``label``: its IPv6 flow label. The EV is
        the source port (STEV: with the flow label, :attr:`evfmt`)."""
        st = self.stats
        ev = self.evfmt.ev(sport, label)
        st["rx_datagrams"] += 1
        trim = TRIMMED_DSCPS.get(tos >> 2)
        ce = tos & 3 == 3
        st["rx_ce"] += ce
        try:
            p = W.decode(data, src, self.local, sport, self.port if dport is None else dport,
                         verify=trim is None)
        except W.WireError as e:
            st[f"rx_drop_{e.kind}"] += 1
            return
        if trim is not None and p.opcode not in W.WRITE_OPS:
            st["rx_drop_trimmed_control"] += 1  # only data is trimmable; not ICRC-checked
            return
        if p.opcode in (W.ENDPOINT_REQUEST, W.ENDPOINT_RESPONSE):
            self._endpoint(p, src, ev)
            return
        qp = self.qps.get(p.dqpn)
        if qp is None:
            st["rx_drop_unknown_qp"] += 1
            return
        op = p.opcode
        if op in W.WRITE_OPS:
            if trim is None and len(p.payload) < W.expected_payload(op, p.dma_len, qp.pmtu):
                trim = W.NACK_TRIMMED  # cut, whatever the DSCP says
                st["rx_trimmed_short"] += 1
            elif trim is not None:
                st["rx_trimmed_dscp"] += 1
            if trim is not None:
                qp.on_trimmed(p, src, ev, trim, ce)
            else:
                qp.on_write(p, src, ev, now, ce)
        elif op == W.RELIABILITY_SACK:
            qp.on_sack(p, now)
        elif op == W.RELIABILITY_NACK:
            qp.on_nack(p, now)
        elif op == W.TRANSPORT_ACK:
            qp.on_transport_ack(p, now)
        elif op == W.RELIABILITY_PROBE:
            qp.on_probe(p, src, ev)

    def _endpoint(self, p: W.Packet, src: str, ev: int) -> None:
        """ENDPOINT_REQUEST: answered with an ENDPOINT_RESPONSE (status OK, this NIC's
        one port up); emu-ref has one plane, so a PORT_STATUS_UPDATE changes nothing.
        A response: counted (emu-ref sends no requests)."""
        if p.opcode == W.ENDPOINT_RESPONSE or p.erth is None:
            self.stats["rx_endpoint_responses"] += 1
            return
        self.stats["rx_endpoint_requests"] += 1
        e = W.Eeth(op=p.erth.op, status=W.EETH_OK, request_id=p.psn & M16, num_ports=1,
                   port_status_mask=1, ev=ev, tx_timestamp=p.erth.tx_timestamp,
                   port_states=1)
        self._out.append(Out(W.Packet(W.ENDPOINT_RESPONSE, W.ENDPOINT_QPN, p.psn, eeth=e),
                             src, self.port, self.evs[0]))

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, str, int, int]]:
        """``(udp payload, destination address, destination port, EV)`` each: the EV's
        source port (and STEV flow label) are :attr:`evfmt`'s."""
        outs = self._out
        self._out = []
        for qp in self.qps.values():
            outs += qp.pull(now)
        res = [(W.encode(o.packet, self.local, o.addr, self.evfmt.fields(o.sport)[0], o.port),
                o.addr, o.port, o.sport) for o in outs]
        self.stats["tx_datagrams"] += len(res)
        return res

    def get_timer(self) -> float | None:
        ts = [t for t in (qp.deadline() for qp in self.qps.values()) if t is not None]
        return min(ts) if ts else None

    def handle_timer(self, now: float) -> None:
        for qp in list(self.qps.values()):
            qp.on_timer(now)

    def counters(self) -> dict[str, int]:
        c = dict(self.stats)
        for qp in self.qps.values():
            for k, v in qp.c.items():
                c[k] = c.get(k, 0) + v
        c["qps"] = len(self.qps)
        return c

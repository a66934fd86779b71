# SPDX-License-Identifier: GPL-2.0-only
"""A deliberately tiny stub transport that exercises the daemon's plumbing.

Why it exists: the daemon, control protocol and client API are
transport-agnostic and must be testable before (and independently of) the
RoCE engine. ``LoopbackEngine`` speaks a private 12-byte-header protocol with
just enough behaviour to touch every path the daemon has: SEND (consumes a
posted receive, scatters into registered memory), RDMA WRITE (lands in the
peer's shared memory through :class:`~emu.core.memory.MemoryTable`), a
cumulative ACK, one retransmission timer per QP multiplexed onto the
engine's single timer (:class:`~emu.core.timers.TimerSet`), retry exhaustion
moving the QP to error with flushed completions, and counters for malformed
and unknown-QP datagrams. It is sans-IO like the real engines: time comes in
as ``now``, randomness from the context's RNG.

Header (network order): magic u16 0xE10B · op u8 · status u8 · dst QPN u32 ·
seq u32; WRITE adds VA u64 · R_Key u32. One work request is one datagram.
"""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.memory import MemoryAccessError
from emu.core.timers import TimerSet
from emu.core.verbs import RecvWR, SendWR, WrOpcode
from emu.nic.engines import EngineContext
from emu.transports.base import Completion, Engine, Event, StateChanged, TxMeta, VerbsError

HDR = struct.Struct("!HBBII")
RETH = struct.Struct("!QI")
MAGIC = 0xE10B
OP_SEND, OP_WRITE, OP_ACK = 1, 2, 3
ST_OK, ST_ACCESS = 0, 1
_IMM = struct.Struct("!I")


@dataclass
class _Qp:
    qpn: int
    pd: Any
    send_cq: Any
    recv_cq: Any
    meta: TxMeta
    state: str = "INIT"
    remote: tuple[str, int] | None = None
    remote_qpn: int = 0
    next_seq: int = 0
    expected: int = 0
    retries: int = 0
    unacked: OrderedDict[int, tuple[bytes, SendWR, int]] = field(default_factory=OrderedDict)
    recvq: deque[RecvWR] = field(default_factory=deque)


class LoopbackEngine(Engine):
    """Stub engine: SEND/WRITE with cumulative ACKs and timeout retransmission."""

    name = "loopback"

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.rto = float(ctx.options.get("rto", 0.05))
        self.retry_cnt = int(ctx.options.get("retry_cnt", 7))
        self._qps: dict[int, _Qp] = {}
        self._out: list[tuple[bytes, tuple[str, int], TxMeta]] = []
        self._events: deque[Event] = deque()
        self._paused_until = 0.0
        self._timers = TimerSet()
        self._c = dict.fromkeys(("rx", "tx", "malformed", "unknown_qp", "duplicates",
                                 "out_of_order", "rnr_drops", "retransmits", "access_errors"), 0)

    # -- verbs ------------------------------------------------------------------

    def create_qp(self, *, pd: Any = None, send_cq: Any = None, recv_cq: Any = None,
                  attrs: dict[str, Any] | None = None) -> int:
        while True:
            qpn = self.ctx.rng.getrandbits(24)
            if qpn > 1 and qpn not in self._qps:
                break
        meta = TxMeta(0xC000 | (qpn & 0x3FFF), int((attrs or {}).get("dscp", 0)), 2)
        self._qps[qpn] = _Qp(qpn, pd, send_cq, recv_cq, meta)
        return qpn

    def _complete(self, qp: _Qp, wc: WorkCompletion) -> None:
        self._events.append(Completion(qp.recv_cq if wc.opcode.is_recv else qp.send_cq, wc))

    def _state(self, qp: _Qp, new: str, status: WcStatus | None = None, reason: str = ""
               ) -> None:
        self._events.append(StateChanged(qp.qpn, qp.state, new, status, reason))
        qp.state = new

    def _qp(self, qpn: int) -> _Qp:
        try:
            return self._qps[qpn]
        except KeyError:
            raise VerbsError(f"no QP {qpn}") from None

    def query_qp(self, qpn: int) -> dict[str, Any]:
        qp = self._qp(qpn)
        addr = self.ctx.addresses[0] if self.ctx.addresses else ""
        return {"qpn": qpn, "psn": 0, "address": addr, "port": self.ctx.port,
                "state": qp.state, "transport": self.name}

    def connect(self, qpn: int, remote: dict[str, Any], now: float) -> None:
        qp = self._qp(qpn)
        try:
            qp.remote = (str(remote["address"]), int(remote.get("port", self.ctx.port)))
            qp.remote_qpn = int(remote["qpn"])
        except (KeyError, TypeError, ValueError) as e:
            raise VerbsError(f"remote connection data needs address and qpn ({e})") from None
        self._state(qp, "RTS")

    def post_recv(self, qpn: int, wr: RecvWR, now: float) -> None:
        qp = self._qp(qpn)
        if qp.state == "ERR":
            self._complete(qp, WorkCompletion.flushed(wr.wr_id, WcOpcode.RECV, qpn))
            return
        qp.recvq.append(wr)

    def post_send(self, qpn: int, wr: SendWR, now: float) -> None:
        qp = self._qp(qpn)
        op = wr.opcode
        if qp.state != "RTS" or qp.remote is None:
            raise VerbsError(f"QP {qpn} is {qp.state}, not RTS")
        if op.is_read_or_atomic:
            raise VerbsError(f"the loopback engine does not do {op.name}")
        mem = self.ctx.memory
        try:
            payload = b"".join(bytes(mem.local_view(s.lkey, s.addr, s.length, pd=qp.pd))
                               for s in wr.sg_list)
        except MemoryAccessError as e:
            raise VerbsError(f"local access: {e}") from None
        imm = wr.imm
        if op in (WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM):
            body = RETH.pack(wr.remote_addr, wr.rkey) + payload
            opcode = OP_WRITE
        else:
            body, opcode = payload, OP_SEND
        if imm is not None:
            body = _IMM.pack(imm & 0xFFFFFFFF) + body
        flags = 0x80 if imm is not None else 0
        seq = qp.next_seq
        qp.next_seq += 1
        dgram = HDR.pack(MAGIC, opcode | flags, ST_OK, qp.remote_qpn, seq) + body
        qp.unacked[seq] = (dgram, wr, len(payload))
        self._out.append((dgram, qp.remote, qp.meta))
        self._timers.set_if_earlier(str(qpn), now + self.rto)

    def destroy_qp(self, qpn: int, now: float) -> None:
        qp = self._qps.pop(qpn, None)
        if qp is not None:
            self._timers.cancel(str(qpn))

    # -- sans-IO ------------------------------------------------------------------

    def receive_datagram(self, data: bytes | bytearray | memoryview, addr: tuple[Any, ...],
                         now: float, *, ecn: int = 0) -> None:
        data = bytes(data)
        if len(data) < HDR.size:
            self._c["malformed"] += 1
            return
        magic, op, status, qpn, seq = HDR.unpack_from(data)
        kind = op & 0x7F
        if magic != MAGIC or kind not in (OP_SEND, OP_WRITE, OP_ACK):
            self._c["malformed"] += 1
            return
        qp = self._qps.get(qpn)
        if qp is None:
            self._c["unknown_qp"] += 1
            return
        self._c["rx"] += 1
        if kind == OP_ACK:
            self._on_ack(qp, seq, status, now)
            return
        if seq < qp.expected:
            self._c["duplicates"] += 1
            self._ack(qp, ST_OK)
            return
        if seq > qp.expected or qp.remote is None:
            self._c["out_of_order"] += 1
            return
        self._on_request(qp, op, data, HDR.size)

    def _on_request(self, qp: _Qp, op: int, data: bytes, off: int) -> None:
        imm = None
        if op & 0x80:
            if len(data) < off + 4:
                self._c["malformed"] += 1
                return
            (imm,) = _IMM.unpack_from(data, off)
            off += 4
        mem = self.ctx.memory
        status = ST_OK
        if op & 0x7F == OP_WRITE:
            if len(data) < off + RETH.size:
                self._c["malformed"] += 1
                return
            va, rkey = RETH.unpack_from(data, off)
            payload = memoryview(data)[off + RETH.size:]
            try:
                mem.remote_write(rkey, va, payload, pd=qp.pd)
            except MemoryAccessError:
                self._c["access_errors"] += 1
                status = ST_ACCESS
            if imm is not None and status == ST_OK:
                if not qp.recvq:
                    self._c["rnr_drops"] += 1
                    return
                wr = qp.recvq.popleft()
                self._complete(qp, WorkCompletion(wr.wr_id, WcStatus.SUCCESS,
                                                  WcOpcode.RECV_RDMA_WITH_IMM, qp.qpn,
                                                  len(payload), imm, qp.remote_qpn))
        else:
            if not qp.recvq:
                self._c["rnr_drops"] += 1  # no ACK: the sender retries, as an RNR would
                return
            wr = qp.recvq.popleft()
            payload = memoryview(data)[off:]
            self._complete(qp, self._scatter(qp, wr, payload, imm))
        qp.expected += 1
        self._ack(qp, status)

    def _scatter(self, qp: _Qp, wr: RecvWR, payload: memoryview, imm: int | None
                 ) -> WorkCompletion:
        pos = 0
        try:
            for s in wr.sg_list:
                take = min(s.length, len(payload) - pos)
                if take <= 0:
                    break
                self.ctx.memory.local_view(s.lkey, s.addr, take, write=True, pd=qp.pd)[:] = \
                    payload[pos:pos + take]
                pos += take
        except MemoryAccessError:
            return WorkCompletion(wr.wr_id, WcStatus.LOC_PROT_ERR, WcOpcode.RECV, qp.qpn)
        if pos < len(payload):
            return WorkCompletion(wr.wr_id, WcStatus.LOC_LEN_ERR, WcOpcode.RECV, qp.qpn)
        return WorkCompletion(wr.wr_id, WcStatus.SUCCESS, WcOpcode.RECV, qp.qpn, pos, imm,
                              qp.remote_qpn)

    def _ack(self, qp: _Qp, status: int) -> None:
        assert qp.remote is not None
        self._out.append((HDR.pack(MAGIC, OP_ACK, status, qp.remote_qpn, qp.expected),
                          qp.remote, qp.meta))

    def _on_ack(self, qp: _Qp, upto: int, status: int, now: float) -> None:
        while qp.unacked and next(iter(qp.unacked)) < upto:
            seq, (_, wr, n) = qp.unacked.popitem(last=False)
            failed = status != ST_OK and seq == upto - 1
            if failed:
                self._error(qp, wr, WcStatus.REM_ACCESS_ERR, "remote access error")
                return
            if wr.signaled:
                self._complete(qp, WorkCompletion(wr.wr_id, WcStatus.SUCCESS,
                                                  wr.opcode.wc_opcode, qp.qpn, n))
        qp.retries = 0
        if qp.unacked:
            self._timers.set(str(qp.qpn), now + self.rto)
        else:
            self._timers.cancel(str(qp.qpn))

    def _error(self, qp: _Qp, wr: SendWR, status: WcStatus, reason: str) -> None:
        self._complete(qp, WorkCompletion(wr.wr_id, status, wr.opcode.wc_opcode, qp.qpn))
        for _, w, _n in qp.unacked.values():
            self._complete(qp, WorkCompletion.flushed(w.wr_id, w.opcode.wc_opcode, qp.qpn))
        for r in qp.recvq:
            self._complete(qp, WorkCompletion.flushed(r.wr_id, WcOpcode.RECV, qp.qpn))
        qp.unacked.clear()
        qp.recvq.clear()
        self._timers.cancel(str(qp.qpn))
        self._state(qp, "ERR", status, reason)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, tuple[str, int], TxMeta]]:
        if now < self._paused_until:
            return []
        out, self._out = self._out, []
        self._c["tx"] += len(out)
        return out

    def get_timer(self) -> float | None:
        t = self._timers.earliest()
        if self._out and self._paused_until:
            return self._paused_until if t is None else min(t, self._paused_until)
        return t

    def pause(self, cls: int, until: float) -> None:
        """One class only here: any pause holds everything (plumbing stub)."""
        self._paused_until = until

    def handle_timer(self, now: float) -> None:
        for name in self._timers.expired(now):
            qp = self._qps.get(int(name))
            if qp is None or not qp.unacked:
                continue
            qp.retries += 1
            if qp.retries > self.retry_cnt:
                _, wr, _ = next(iter(qp.unacked.values()))
                qp.unacked.popitem(last=False)
                self._error(qp, wr, WcStatus.RETRY_EXC_ERR, "retry count exceeded")
                continue
            assert qp.remote is not None
            for dgram, _, _ in qp.unacked.values():
                self._out.append((dgram, qp.remote, qp.meta))
                self._c["retransmits"] += 1
            self._timers.set(name, now + self.rto)

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def counters(self) -> dict[str, int]:
        return {**self._c, "qps": len(self._qps)}

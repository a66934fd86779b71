# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's verbs (QP-shaped) calls on a :class:`UetEngine`: :class:`UetVerbs`.

Why an adapter and not more methods on the engine: the control server speaks
one protocol for every transport (``emu.nic.engines.Verbs``: ``create_qp``,
``connect``, ``post_send(qpn, SendWR)`` …), while UET's own verbs are
endpoint + destination shaped (``post_write(ep, wr_id, sges, dest, …)``) and
their names collide (``post_send``). The adapter keeps both honest:

* a "QP" is a UET endpoint (its id is the PIDonFEP peers address); ``connect``
  only remembers the peer's ``(address, port, ep)`` — the PDC to that host is
  opened by the engine on the first message, shared with every other endpoint
  talking to that host (uet.md: Behaviour, PDC);
* verbs opcodes map onto SES operations: SEND → SEND, RDMA_WRITE → WRITE,
  RDMA_READ → READ, the two atomics → (fetching) ATOMIC when the engine has
  those verbs; ``*_WITH_IMM`` are refused (the engine carries no header data);
  a work request with a ``tag`` is a TAGGED_SEND, a receive with one a tagged
  receive (when the engine has ``post_tsend``/``post_trecv``);
* **send completions are released in post order per endpoint**: RUD completes
  messages in whatever order their last ACK arrives, but verbs applications
  (perftest's loops among them) count "one completion covers every earlier
  post", so every message is posted signaled to the engine and the adapter
  holds a completion until all earlier ones of its endpoint are done, then
  reports it if the work request asked for it (errors always);
* PDC state changes (open, close, close in error) are not endpoint states —
  the messages a failed PDC carried already complete in error on their
  endpoints — so they are counted (``pdc_events``), not forwarded.

The datagram side (:class:`emu.transports.base.Engine`) is the engine's own
bound methods, so the daemon's hot path pays nothing for the adapter.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Hashable
from typing import Any

from emu.core.cq import WcStatus, WorkCompletion
from emu.core.verbs import RecvWR, SendWR, WrOpcode
from emu.transports.base import Completion, Event, StateChanged, VerbsError
from emu.transports.uet.engine import UetEngine


class NotSupported(VerbsError):
    """An operation this UET engine does not offer (yet); the control server
    reports it with ``code`` ENOTSUP."""

    code = "ENOTSUP"


@dataclasses.dataclass(slots=True)
class _Posted:
    """One send-side work request as the application posted it."""

    ep: int
    wr_id: int
    signaled: bool


class UetVerbs:
    """A :class:`UetEngine` behind the daemon's ``Verbs`` protocol (see the module docstring)."""

    def __init__(self, engine: UetEngine) -> None:
        self.engine = engine
        # the Engine contract: the engine's own bound methods (no extra call per datagram)
        self.receive_datagram = engine.receive_datagram
        self.receive_batch = engine.receive_batch
        self.datagrams_to_send = engine.datagrams_to_send
        self.get_timer = engine.get_timer
        self.handle_timer = engine.handle_timer
        self.pause = engine.pause
        #: the UDP source ports the engine sprays over (a socket-path daemon opens sockets for
        #: the first 64 up front and folds the rest onto them: TxPath.preopen)
        self.entropies = engine.entropies
        self._peer: dict[int, dict[str, Any]] = {}
        self._order: dict[int, deque[int]] = {}
        self._posted: dict[int, _Posted] = {}
        self._done: dict[int, WorkCompletion] = {}
        self._ready: deque[Event] = deque()
        self._seq = 0
        self.c = {"pdc_events": 0, "wc_reordered": 0, "wc_orphaned": 0}

    #: tagged SEND/receive work requests are accepted (the control server asks engines)
    tagged = True

    # -- the Engine contract (the rest is bound in __init__) ---------------------------

    def next_event(self) -> Event | None:
        """The engine's next event, with send completions put in post order per endpoint."""
        ready = self._ready
        while not ready:
            ev = self.engine.next_event()
            if ev is None:
                return None
            self._take(ev)
        return ready.popleft()

    def counters(self) -> dict[str, int | float]:
        return {**self.engine.counters(), **self.c, "wr_outstanding": len(self._posted)}

    def _take(self, ev: Event) -> None:
        if isinstance(ev, StateChanged):
            self.c["pdc_events"] += 1
            return
        if not isinstance(ev, Completion) or ev.wc.opcode.is_recv:
            self._ready.append(ev)
            return
        seq = ev.wc.wr_id
        p = self._posted.get(seq)
        if p is None:
            self.c["wc_orphaned"] += 1  # its endpoint was destroyed meanwhile
            return
        order = self._order[p.ep]
        if order[0] != seq:
            self.c["wc_reordered"] += 1
        self._done[seq] = dataclasses.replace(ev.wc, wr_id=p.wr_id)
        cq = ev.cq
        while order and order[0] in self._done:
            s = order.popleft()
            wc = self._done.pop(s)
            q = self._posted.pop(s)
            if q.signaled or wc.status is not WcStatus.SUCCESS:
                self._ready.append(Completion(cq, wc))

    # -- verbs --------------------------------------------------------------------------

    def create_qp(self, *, pd: Any, send_cq: Hashable, recv_cq: Hashable,
                  attrs: dict[str, Any]) -> int:
        """A new endpoint; ``attrs["mode"]`` picks its delivery mode (``rud`` default,
        ``rod`` …, as the engine knows them). RC attributes (``pmtu``, ``max_rd_atomic``
        …) have no UET meaning per endpoint and are ignored: the payload per packet is
        the NIC's."""
        kw = {"mode": str(attrs["mode"])} if attrs.get("mode") else {}
        try:
            ep = self.engine.create_ep(send_cq=send_cq, recv_cq=recv_cq, pd=pd, **kw)
        except (KeyError, ValueError) as e:
            raise VerbsError(f"bad endpoint attributes {attrs!r}: {e}") from None
        self._order[ep] = deque()
        return ep

    def query_qp(self, qpn: int) -> dict[str, Any]:
        """The endpoint's address for a peer (``ep``, ``address``, ``port``), plus the
        QP-shaped names verbs tools print (``qpn`` = ``ep``, ``psn`` 0: PSNs belong to
        PDCs, not endpoints; ``pmtu`` = payload bytes per packet)."""
        info = dict(self.engine.query_ep(qpn))
        info.update(qpn=qpn, psn=0, pmtu=self.engine.mtu,
                    state="RTS" if qpn in self._peer else "INIT")
        if qpn in self._peer:
            info["peer"] = dict(self._peer[qpn])
        return info

    def connect(self, qpn: int, remote: dict[str, Any], now: float) -> None:
        """Remember the peer endpoint (``address``, ``ep``, optional ``port``)."""
        self.engine._ep(qpn)  # noqa: SLF001 - the engine's own "no such endpoint" error
        try:
            addr = str(remote["address"])
            ep = int(remote["ep"] if "ep" in remote else remote["qpn"])
            port = int(remote.get("port") or self.engine.port)
        except (KeyError, TypeError, ValueError) as e:
            raise VerbsError(f"UET peer needs 'address' and 'ep' ({e!r})") from None
        if not addr or not 0 < ep <= 0xFFF or not 0 < port < 65536:
            raise VerbsError(f"bad UET peer: address {addr!r}, ep {ep}, port {port}")
        self._peer[qpn] = {"address": addr, "ep": ep, "port": port}

    def post_send(self, qpn: int, wr: SendWR, now: float) -> None:
        dest = self._peer.get(qpn)
        if dest is None:
            self.engine._ep(qpn)  # noqa: SLF001 - unknown endpoint first
            raise VerbsError(f"endpoint {qpn} is not connected (give it a peer first)")
        eng, op = self.engine, wr.opcode
        self._seq += 1
        seq = self._seq
        tag = getattr(wr, "tag", None)
        if op in (WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE_WITH_IMM):
            raise NotSupported(f"{op.name}: UET here carries no immediate data")
        if op == WrOpcode.SEND and tag is not None:
            fn = self._verb("post_tsend", "TAGGED_SEND")
            fn(qpn, seq, wr.sg_list, dest, int(tag), now, signaled=True)
        elif op == WrOpcode.SEND:
            eng.post_send(qpn, seq, wr.sg_list, dest, now, signaled=True)
        elif op == WrOpcode.RDMA_WRITE:
            eng.post_write(qpn, seq, wr.sg_list, dest, wr.remote_addr, wr.rkey, now,
                           signaled=True)
        elif op == WrOpcode.RDMA_READ:
            fn = self._verb("post_read", "RDMA_READ")
            fn(qpn, seq, wr.sg_list, dest, wr.remote_addr, wr.rkey, now, signaled=True)
        elif op.is_atomic:
            fn = self._verb("post_atomic", op.name)
            kind = "cmp_swap" if op == WrOpcode.ATOMIC_CMP_AND_SWP else "fetch_add"
            fn(qpn, seq, wr.sg_list, dest, wr.remote_addr, wr.rkey, kind, wr.compare_add,
               wr.swap, now, signaled=True)
        else:
            raise NotSupported(f"opcode {op!r}")
        self._posted[seq] = _Posted(qpn, wr.wr_id, wr.signaled)
        self._order[qpn].append(seq)

    def _verb(self, name: str, what: str) -> Any:
        fn = getattr(self.engine, name, None)
        if fn is None:
            raise NotSupported(f"{what} is not supported by this UET engine yet")
        return fn

    def post_recv(self, qpn: int, wr: RecvWR, now: float) -> None:
        tag = getattr(wr, "tag", None)
        if tag is not None:
            fn = self._verb("post_trecv", "tagged receive")
            fn(qpn, wr.wr_id, wr.sg_list, int(tag), int(getattr(wr, "ignore", 0)), now)
            return
        self.engine.post_recv(qpn, wr.wr_id, wr.sg_list, now)

    def destroy_qp(self, qpn: int, now: float) -> None:
        """Forget the endpoint; its messages still in flight finish without completions."""
        self.engine.destroy_ep(qpn)
        self._peer.pop(qpn, None)
        for seq in self._order.pop(qpn, ()):
            self._posted.pop(seq, None)
            self._done.pop(seq, None)

    # -- pass-throughs for tools and tests ---------------------------------------------

    def pdcs(self) -> list[dict[str, Any]]:
        return self.engine.pdcs()


__all__ = ["NotSupported", "UetVerbs"]

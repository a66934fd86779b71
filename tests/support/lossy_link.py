# SPDX-License-Identifier: GPL-2.0-only
"""An in-memory link between two sans-IO engines, with a hand-stepped clock.

Why: the transport acceptance tests ("16 MiB through seeded loss, reordering
and duplication arrive byte-exact") need a network that misbehaves
reproducibly and runs in milliseconds — no sockets, no root, no real time.
:class:`LossyLink` is a tiny discrete-event simulator: engines hand it
datagrams, it decides per datagram (from a seeded RNG) to drop, CE-mark,
delay, reorder or duplicate, and :meth:`LossyLink.run` advances the clock
straight to the next delivery or engine timer.

Impairments (each a probability per datagram, applied independently):

* ``loss`` — dropped;
* ``reorder`` — held back an extra ``reorder_delay`` (so later ones overtake);
* ``dup`` — delivered twice (the copy ``dup_delay`` later);
* ``ce`` — ECN-CE marked if the sender set ECT (as a switch queue would);
* ``drop`` — a callable ``(data, src, dst) -> bool`` for targeted drops;
* ``mark`` — a callable ``(data, meta, side) -> bool``: CE-mark this ECT datagram
  (targeted marking, e.g. every packet on one entropy's path);
* ``trim`` — a callable ``(data, src, dst) -> bool``: cut this RoCEv2 datagram as
  the switch pipeline does (:func:`trim_roce`, the real ``emu.switch.trim``) and
  deliver it with ``trimmed=True``, as the NIC daemon does when the DSCP says so.

With ``src_ports`` the receiver sees the sender's entropy (``meta.entropy``,
the UDP source port a daemon would send from) as the source port, so replies
that echo it reach the sender's path logic as they would on a real wire.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emu.core.datagram import expand
from emu.core.memory import Access, MemoryRegion, MemoryTable
from emu.transports.base import ECN_CE, Completion, Engine, Event, StateChanged

#: the DSCP a batch-delivering link marks a trimmed datagram with (its receive_batch
#: ``trim`` table says so)
_TRIM_DSCP = 9
_TRIM_TOS = bytes(tos >> 2 == _TRIM_DSCP for tos in range(256))


class HeapBuffer:
    """A plain-memory stand-in for SharedBuffer (what MemoryTable.register reads)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.closed = False
        self.name = f"heap-{size}"
        self.view = memoryview(bytearray(size))


def register(mem: MemoryTable, size: int, access: Access = Access.LOCAL_WRITE
             | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
             ) -> MemoryRegion:
    """A registered heap region of ``size`` bytes (test helper)."""
    return mem.register(mem.alloc_pd(), HeapBuffer(size), access)  # type: ignore[arg-type]


@dataclass
class LossyLink:
    """Two engines at ``addr_a``/``addr_b`` joined by a seeded, misbehaving wire."""

    a: Engine
    b: Engine
    addr_a: tuple[str, int] = ("10.0.0.1", 4791)
    addr_b: tuple[str, int] = ("10.0.0.2", 4791)
    seed: int = 0
    delay: float = 5e-6
    loss: float = 0.0
    reorder: float = 0.0
    reorder_delay: float = 20e-6
    dup: float = 0.0
    dup_delay: float = 3e-6
    ce: float = 0.0
    drop: Callable[[bytes, tuple, tuple], bool] | None = None
    #: drop by where the engine sent it: (side, data, the engine's address, its TxMeta)
    #: — a multi-plane engine's plane is in the address
    drop_sent: Callable[[str, bytes, Any, Any], bool] | None = None
    #: extra delay by where the engine sent it (same arguments as ``drop_sent``): one
    #: plane's or path's queue
    delay_sent: Callable[[str, bytes, Any, Any], float] | None = None
    mark: Callable[[bytes, Any, str], bool] | None = None
    trim: Callable[[bytes, tuple, tuple], bool] | None = None
    #: how a ``trim`` verdict cuts: :func:`trim_roce` (default) or :func:`trim_uet`
    trimmer: Callable[[bytes], bytes | None] | None = None
    src_ports: bool = False
    #: with ``src_ports``: the source address a datagram carries, from the sending side
    #: and its destination address (a multi-plane NIC sends from its port on that
    #: destination's plane); None: ``addr_a``/``addr_b``
    src_of: Callable[[str, str], str] | None = None
    now: float = 0.0
    events: dict[str, list[Event]] = field(default_factory=lambda: {"a": [], "b": []})
    sent: dict[str, int] = field(default_factory=lambda: {"a": 0, "b": 0})
    dropped: int = 0
    marked: int = 0
    trimmed: int = 0
    tap: list[tuple[float, str, bytes, int]] | None = None  # (time, from, data, ecn) if set
    #: if set, every datagram as sent: (time, from, data, address, TxMeta)
    wire: list[tuple[float, str, bytes, Any, Any]] | None = None
    #: deliver what arrives at one instant to an engine in one ``receive_batch`` (as a
    #: daemon hands over what one read brought), where the engine has it
    batch: bool = False
    #: bits/s of each direction's port (None: no serialization): a datagram leaves
    #: once the ones before it have, as through a NIC's serializer, so what an engine
    #: emits at once queues — a READ's answers behind each other, say
    rate: float | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._free = {"a": 0.0, "b": 0.0}  # when each side's port is idle again
        self._q: list[tuple[float, int, str, bytes, int, bool]] = []
        self._seq = 0

    def _peer(self, side: str) -> tuple[Engine, tuple[str, int], tuple[str, int]]:
        return (self.b, self.addr_a, self.addr_b) if side == "a" else (self.a, self.addr_b,
                                                                        self.addr_a)

    def _push(self, t: float, to: str, data: bytes, ecn: int, trimmed: bool = False) -> None:
        heapq.heappush(self._q, (t, self._seq, to, data, ecn, trimmed))
        self._seq += 1

    def _pump(self) -> bool:
        """Move every engine's output onto the wire; True if anything moved."""
        moved = False
        for side, eng in (("a", self.a), ("b", self.b)):
            for data, addr, meta in expand(eng.datagrams_to_send(self.now)):
                moved = True
                self.sent[side] += 1
                data = bytes(data)
                nbytes = len(data)
                to = "b" if side == "a" else "a"
                _, src, dst = self._peer(side)
                r = self.rng
                if self.tap is not None:
                    self.tap.append((self.now, side, data, meta.ecn))
                if self.wire is not None:
                    self.wire.append((self.now, side, data, addr, meta))
                if (self.drop is not None and self.drop(data, src, dst)) or (
                        self.drop_sent is not None and self.drop_sent(side, data, addr, meta)
                ) or (self.loss and r.random() < self.loss):
                    self.dropped += 1
                    continue
                cut = False
                if self.trim is not None and self.trim(data, src, dst):
                    t_data = (self.trimmer or trim_roce)(data)
                    if t_data is not None:
                        data, cut = t_data, True
                        self.trimmed += 1
                ecn = meta.ecn
                if ecn in (1, 2) and ((self.ce and r.random() < self.ce) or (
                        self.mark is not None and self.mark(data, meta, side))):
                    ecn = ECN_CE
                    self.marked += 1
                if self.src_ports:
                    data = (data, meta.entropy, getattr(meta, "label", None),  # type: ignore[assignment]
                            None if self.src_of is None else self.src_of(side, addr[0]))
                t = self.now + self.delay + (self.delay_sent(side, data, addr, meta)
                                             if self.delay_sent is not None else 0.0)
                if self.rate:
                    leave = max(self.now, self._free[side]) + nbytes * 8 / self.rate
                    self._free[side] = leave
                    t = leave + self.delay
                if self.reorder and r.random() < self.reorder:
                    t += self.reorder_delay * r.random()
                self._push(t, to, data, ecn, cut)
                if self.dup and r.random() < self.dup:
                    self._push(t + self.dup_delay, to, data, ecn, cut)
        return moved

    def _collect(self) -> None:
        for side, eng in (("a", self.a), ("b", self.b)):
            while (ev := eng.next_event()) is not None:
                self.events[side].append(ev)

    def step(self) -> bool:
        """Advance to the next thing that happens; False when nothing is left to do."""
        self._pump()
        self._collect()
        cand = [t for t in (self.a.get_timer(), self.b.get_timer()) if t is not None]
        if self._q:
            cand.append(self._q[0][0])
        if not cand:
            return False
        self.now = max(self.now, min(cand))
        batches: dict[str, list[tuple[Any, tuple, int]]] = {"a": [], "b": []}
        while self._q and self._q[0][0] <= self.now:
            _, _, to, data, ecn, cut = heapq.heappop(self._q)
            eng = self.a if to == "a" else self.b
            src = self.addr_b if to == "a" else self.addr_a
            if self.src_ports:
                data, port, label, ip = data  # type: ignore[misc]
                ip = src[0] if ip is None else ip
                # a flow label rides as the address tuple's flow info, as the daemon hands
                # it over (emu.nic.udp.PortSocket.enable_flowinfo)
                src = (ip, port) if label is None else (ip, port, label, 0)
            if self.batch and hasattr(eng, "receive_batch"):
                batches[to].append((data, src, ecn | (_TRIM_DSCP << 2 if cut else 0)))
            elif cut:
                eng.receive_datagram(data, src, self.now, ecn=ecn, trimmed=True)  # type: ignore[call-arg]
            else:
                eng.receive_datagram(data, src, self.now, ecn=ecn)
        for to, items in batches.items():
            if items:
                (self.a if to == "a" else self.b).receive_batch(  # type: ignore[attr-defined]
                    items, self.now, trim=_TRIM_TOS)
        for eng in (self.a, self.b):
            t = eng.get_timer()
            if t is not None and t <= self.now:
                eng.handle_timer(self.now)
        self._pump()
        self._collect()
        return True

    def run(self, until: float | None = None, stop: Callable[[], bool] | None = None,
            max_steps: int = 5_000_000) -> int:
        """Step until idle, ``stop()`` is true, or the clock passes ``until``; returns steps."""
        for n in range(max_steps):
            if stop is not None and stop():
                return n
            if until is not None:
                nxt = self._next_time()
                if nxt is None or nxt > until:
                    self.now = max(self.now, until)
                    self._pump()
                    self._collect()
                    return n
            if not self.step():
                return n
        raise AssertionError(f"no quiescence after {max_steps} steps at t={self.now}")

    def _next_time(self) -> float | None:
        self._pump()
        cand = [t for t in (self.a.get_timer(), self.b.get_timer()) if t is not None]
        if self._q:
            cand.append(self._q[0][0])
        return min(cand) if cand else None

    # -- conveniences for tests ----------------------------------------------

    def completions(self, side: str, cq: Any = None) -> list[Any]:
        """Work completions seen on ``side`` (optionally of one CQ), oldest first."""
        return [e.wc for e in self.events[side]
                if isinstance(e, Completion) and (cq is None or e.cq == cq)]

    def state_changes(self, side: str) -> list[StateChanged]:
        return [e for e in self.events[side] if isinstance(e, StateChanged)]


def trim_roce(data: bytes, port: int = 4791) -> bytes | None:
    """``data`` (a RoCEv2 UDP payload) as the switch pipeline trims it, or None if it
    has nothing to cut. It goes through :func:`emu.switch.trim.trim` inside the fixed
    IPv6/UDP header that :func:`~emu.transports.roce.packets.pseudo_header_icrc`
    assumes, so the ICRC the switch recomputes is the one sans-IO engines check."""
    import struct

    from emu.switch.trim import trim
    from emu.wire.uet_defs import DSCP_TRIMMED

    udp_len = 8 + len(data)
    ip = (struct.pack("!IHBB", 6 << 28, udp_len, 17, 64) + bytes(15) + b"\x01"
          + bytes(15) + b"\x02")
    udp = struct.pack("!HHHH", 0xC000, port, udp_len, 0)
    out = trim(ip + udp + bytes(data), DSCP_TRIMMED)
    return None if out is None else bytes(out[48:])


def trim_uet(data: bytes) -> bytes | None:
    """``data`` (a UET UDP payload) cut after its PDS/SES headers by the real switch
    pipeline, as :func:`trim_roce` does for RoCEv2 (the LossyLink ``trimmer``)."""
    return trim_roce(data, 4793)


@dataclass
class RocePair:
    """Two connected RoCE engines over a :class:`LossyLink` (test fixture)."""

    link: LossyLink
    ea: Any
    eb: Any
    ma: MemoryTable
    mb: MemoryTable
    qa: int
    qb: int


def roce_pair(seed: int = 1, *, pmtu: int = 1024, line_rate: float = 10e9,
              cc: str | None = "dcqcn", cc_params: dict | None = None,
              engine_kw: dict | None = None, qp_kw: dict | None = None, **link_kw: Any
              ) -> RocePair:
    """Engines A and B, one RC QP each, connected; ICRC sealed/checked with the pseudo header."""
    from emu.transports.roce import RoceEngine
    from emu.transports.roce.packets import pseudo_header_icrc

    ma, mb = MemoryTable(random.Random(seed)), MemoryTable(random.Random(seed + 1))
    kw = {"icrc": pseudo_header_icrc, "line_rate": line_rate, "cc": cc, "cc_params": cc_params,
          **(engine_kw or {})}
    ea = RoceEngine(ma, random.Random(seed + 2), **kw)
    eb = RoceEngine(mb, random.Random(seed + 3), **kw)
    link = LossyLink(ea, eb, seed=seed, **link_kw)
    qkw = {"pmtu": pmtu, "timeout": 8, "min_rnr_timer": 1, **(qp_kw or {})}
    qa = ea.create_qp(send_cq="a.scq", recv_cq="a.rcq", **qkw)
    qb = eb.create_qp(send_cq="b.scq", recv_cq="b.rcq", **qkw)
    ia, ib = ea.query_qp(qa), eb.query_qp(qb)
    ea.connect(qa, {**ib, "address": link.addr_b[0], "port": link.addr_b[1]})
    eb.connect(qb, {**ia, "address": link.addr_a[0], "port": link.addr_a[1]})
    return RocePair(link, ea, eb, ma, mb, qa, qb)


def mrc_pair(seed: int = 1, size: int = 1 << 20, *, pmtu: int = 1024,
             engine_kw: dict | None = None, **link_kw: Any) -> tuple:
    """Two MRC engines over a :class:`LossyLink` (source ports as EVs), one QP each,
    connected, and ``size`` bytes of seeded data registered at A with a region for it
    at B: ``(link, ea, eb, qa, qb, src, dst, data)``."""
    from emu.transports.mrc import MrcEngine

    ma, mb = MemoryTable(random.Random(seed)), MemoryTable(random.Random(seed + 1))
    kw = {"line_rate": 10e9, "base_rtt": 20e-6, "pmtu": pmtu, "timeout": 8,
          **(engine_kw or {})}
    ea = MrcEngine(ma, random.Random(seed + 2), **kw)
    eb = MrcEngine(mb, random.Random(seed + 3), **kw)
    link = LossyLink(ea, eb, seed=seed, src_ports=True, **link_kw)
    qa = ea.create_qp(send_cq="a.s", recv_cq="a.r")
    qb = eb.create_qp(send_cq="b.s", recv_cq="b.r")
    ia, ib = ea.query_qp(qa), eb.query_qp(qb)
    ea.connect(qa, {**ib, "address": link.addr_b[0], "port": link.addr_b[1]})
    eb.connect(qb, {**ia, "address": link.addr_a[0], "port": link.addr_a[1]})
    src, dst = register(ma, size), register(mb, size)
    data = random.Random(seed).randbytes(size)
    src.view[:size] = data
    return link, ea, eb, qa, qb, src, dst, data


def drop_first(pred, n: int = 1):
    """A LossyLink ``drop`` hook losing the first ``n`` datagrams matching ``pred``."""
    seen: list[bytes] = []

    def drop(data: bytes, src: tuple, dst: tuple) -> bool:
        if len(seen) < n and pred(data, src):
            seen.append(data)
            return True
        return False

    drop.seen = seen  # type: ignore[attr-defined]
    return drop

# SPDX-License-Identifier: GPL-2.0-only
"""The transport-agnostic engine contract the NIC daemon drives.

One :class:`Engine` per transport per daemon owns *many* endpoints (RoCE
QPs, UET/MRC PDCs) behind one UDP port, because that is how the wire works:
every RoCEv2 packet goes to port 4791 and the BTH's destination QP (UET: the
PDC id) says which endpoint it is for. The daemon therefore runs one socket,
one receive loop and one OS timer per engine, whatever the number of
endpoints — and holds no protocol logic (``DESIGN.md``).

The daemon's loop, after aioquic's ``QuicConnection``::

    engine.receive_datagram(data, addr, now, ecn=tos & 3)   # each datagram read
    engine.handle_timer(now)                               # when get_timer() is due
    for data, addr, meta in engine.datagrams_to_send(now): # after every input
        sendto(data, addr) with meta.dscp/meta.ecn as TOS, meta.entropy as source port
    while (ev := engine.next_event()) is not None:         # completions → clients
        ...
    rearm the one timer at engine.get_timer()              # None = nothing scheduled

and verbs-like calls (create/modify/destroy endpoints, post work) from the
control server in between, each followed by the same drain of
``datagrams_to_send``/``next_event``/``get_timer``.

Rules every engine keeps:

* **No exceptions from the wire.** ``receive_datagram`` never raises on
  input: malformed, truncated, unknown-endpoint, bad-ICRC or out-of-state
  datagrams are counted in :meth:`Engine.counters` (``rx_drop_*`` keys) and
  dropped, like a NIC. Verbs calls *do* raise (:class:`VerbsError`) on misuse
  by the local application — that is a programming error, not traffic.
* **Time is an argument.** ``now`` is seconds in the caller's clock (the
  daemon passes ``time.monotonic()``, tests a hand-stepped float); engines
  never read a clock and draw randomness only from an injected RNG.
* **Pacing through the timer.** A rate-limited engine returns only what it
  may send *now* and reports the next send time through ``get_timer()``. The
  daemon adds one thing a NIC has and an engine cannot see: each port's
  serializer (``emu.nic.pacer``), which lets datagrams onto the wire at the
  port's line rate, all engines together, and holds an engine's further
  output back while its queue waits for the port.
* **PFC pause is honoured.** :meth:`Engine.pause` ``(cls, until)`` stops
  every datagram of traffic class ``cls`` until ``until`` (``until <= now``
  resumes at once — XON); paused output waits, it is not dropped.
"""

from __future__ import annotations

import ipaddress
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from emu.core.cq import WcStatus, WorkCompletion

#: A peer address as the socket layer gives it: ("10.0.0.2", 4791) or an IPv6 4-tuple.
Addr = tuple[Any, ...]

ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3


@dataclass(frozen=True, slots=True)
class TxMeta:
    """How the daemon must send one datagram — the few IP/UDP fields a transport owns.

    ``entropy`` is the UDP source port (the ECMP hash input: RoCE keeps one per
    QP, spraying transports vary it per packet); ``dscp`` and ``ecn`` make the
    IP TOS byte (``dscp << 2 | ecn``), so the switch pipeline classifies and
    ECN-marks the packet. Engines reuse one instance per flow: treat it as
    read-only and compare with ``is`` to batch (GSO needs one destination and
    one source port per send).
    """

    entropy: int
    dscp: int = 0
    ecn: int = ECN_NOT_ECT

    @property
    def tos(self) -> int:
        return (self.dscp << 2) | self.ecn


class Gather:
    """One datagram handed over in pieces: header, payload, tail — sent by scatter-gather.

    Why: a bulk RDMA packet is 12 header bytes around 4 KiB that already sit in
    registered memory. Joining them into one buffer copied every byte once
    more in Python (~8 % of a sending daemon). The daemon instead passes the
    three pieces to ``sendmsg`` as an iovec (the kernel gathers them, as a NIC
    DMAs from the buffer), and seals a trailer such as the RoCE ICRC into
    :attr:`tail` piece by piece. ``body`` is a view of the application's
    memory, exactly as RDMA hardware reads it at send time.

    Only engines built for a daemon emit these (``gather=True``); sans-IO
    tests and in-memory links get plain ``bytearray`` datagrams. ``len()`` is
    the datagram's size; ``bytes()`` joins the pieces (for traces and tests).
    """

    __slots__ = ("head", "body", "tail", "size")

    def __init__(self, head: bytearray, body: memoryview, tail: bytearray,
                 size: int = -1) -> None:
        self.head = head
        self.body = body
        self.tail = tail
        self.size = size if size >= 0 else len(head) + len(body) + len(tail)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join((self.head, self.body, self.tail))

    def __getitem__(self, i: int | slice) -> int | bytes:
        return bytes(self)[i]


class Run:
    """``count`` datagrams to one destination, each a header from ``heads`` followed by its
    slice of one payload: the bulk of a message in one object instead of one
    :class:`Gather`, header object and queue entry per packet.

    Why: a sprayed transport's middles (UET) differ from packet to packet only in
    PSN, offsets and entropy. Built and queued one by one (header ``pack``,
    ``Gather``, queue tuple each), they cost the sending daemon ~1 µs more per
    8 KiB packet than this (measured A/B): the engine writes all the headers with
    a few C-level slice operations (:func:`emu.transports.uet.fastpath.middle_headers`)
    and the daemon's frame ring (:mod:`emu.nic.frames`) copies header and payload
    slices straight into its frames — as a NIC is handed one descriptor for a burst.

    Datagram ``i`` is ``heads[i * hlen:(i + 1) * hlen]`` + ``payload[i * seg:(i + 1) * seg]``
    and leaves with ``metas[i]``. Only engines asked for runs (UET ``runs=True``, the
    daemon's) emit them; :func:`expand` turns them back into single datagrams, byte
    for byte what the engine would otherwise have sent. ``done`` is the consumer's
    cursor: datagrams before it have left.
    """

    __slots__ = ("heads", "hlen", "payload", "seg", "metas", "count", "size", "done")

    def __init__(self, heads: bytes | bytearray, hlen: int, payload: memoryview, seg: int,
                 metas: list[TxMeta]) -> None:
        self.heads = heads
        self.hlen = hlen
        self.payload = payload
        self.seg = seg
        self.metas = metas
        self.count = len(metas)
        self.size = self.count * (hlen + seg)
        self.done = 0

    def __len__(self) -> int:
        return self.size

    def datagram(self, i: int) -> Gather:
        """Datagram ``i`` as a :class:`Gather` (header copied, payload a view)."""
        h, s = self.hlen, self.seg
        return Gather(bytearray(self.heads[i * h:(i + 1) * h]),
                      self.payload[i * s:(i + 1) * s], bytearray(), h + s)

    def rest(self, addr: Addr) -> list[tuple[Gather, Addr, TxMeta]]:
        """The datagrams not sent yet (from ``done``), as ``(Gather, addr, meta)``."""
        return [(self.datagram(i), addr, self.metas[i]) for i in range(self.done, self.count)]


def expand(out: list[tuple[Any, Addr, Any]]) -> list[tuple[Any, Addr, TxMeta]]:
    """``datagrams_to_send`` output with every :class:`Run` opened into its datagrams."""
    if not any(type(d) is Run for d, _, _ in out):
        return out
    res: list[tuple[Any, Addr, TxMeta]] = []
    for d, a, m in out:
        if type(d) is Run:
            res += d.rest(a)
        else:
            res.append((d, a, m))
    return res


class HostNames:
    """Canonical text of peer addresses (``%scope`` dropped, v4-mapped IPv6 → IPv4),
    cached: what engines key peers by, so one host is one key however it writes its
    address. The cache is bounded (cleared past ``limit`` entries) because addresses
    come off the wire."""

    __slots__ = ("_cache", "limit")

    def __init__(self, limit: int = 4096) -> None:
        self._cache: dict[Any, str] = {}
        self.limit = limit

    def __call__(self, a: Any) -> str:
        h = self._cache.get(a)
        if h is None:
            t = str(a).split("%", 1)[0]
            try:
                ip = ipaddress.ip_address(t)
                h = str(getattr(ip, "ipv4_mapped", None) or ip)
            except ValueError:
                h = t
            if len(self._cache) > self.limit:
                self._cache.clear()
            self._cache[a] = h
        return h


# -- events -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """Base of what :meth:`Engine.next_event` returns."""


@dataclass(frozen=True, slots=True)
class Completion(Event):
    """A work completion for the completion queue ``cq`` (a handle the owner chose
    when creating the endpoint; the engine only echoes it). The daemon routes it
    to the client that owns ``cq``; bounding and overflow are the CQ owner's job
    (see :class:`emu.core.cq.CompletionQueue`)."""

    cq: Hashable
    wc: WorkCompletion


@dataclass(frozen=True, slots=True)
class StateChanged(Event):
    """An endpoint changed state (e.g. RTS → ERR). ``status`` says why an
    error state was entered (the status of the completion that caused it) and
    ``reason`` is human-readable."""

    endpoint: int
    old: str
    new: str
    status: WcStatus | None = None
    reason: str = ""


class VerbsError(Exception):
    """A verbs call the engine refuses (unknown endpoint, wrong state, queue full,
    bad attribute) — the ``errno`` of ``ibv_post_send``/``ibv_modify_qp``."""


class Engine(ABC):
    """What the daemon calls. Verbs (create/connect/post) are per transport."""

    @abstractmethod
    def receive_datagram(self, data: bytes | bytearray | memoryview, addr: Addr, now: float,
                         *, ecn: int = ECN_NOT_ECT) -> None:
        """Process one received UDP payload from ``addr``.

        ``ecn`` is the ECN field of the IP header it arrived in (the daemon
        reads it with ``IP_RECVTOS``/``IPV6_RECVTCLASS``); ``ECN_CE`` drives the
        congestion notification point. ``data`` is only read during the call,
        so the daemon may reuse its receive buffer afterwards. Never raises on
        bad input (counted drop).
        """

    @abstractmethod
    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, Addr, TxMeta]]:
        """Everything that may leave now, in order, as ``(payload, addr, meta)``.

        Payloads are fresh buffers the daemon owns (or, from engines built for a
        daemon, :class:`Gather` pieces over registered memory). An engine asked for
        runs (UET ``runs=True``) may also return ``(Run, addr, None)``: several
        datagrams in one entry, each with its own meta; :func:`expand` opens them.
        Call after every input (datagram, timer, verbs call); an empty list with a
        ``get_timer()`` means "paced: come back then".
        """

    @abstractmethod
    def get_timer(self) -> float | None:
        """The earliest deadline (retransmission, pacing, CC, pause end), or None."""

    @abstractmethod
    def handle_timer(self, now: float) -> None:
        """Run every deadline due at or before ``now``; harmless if none is."""

    @abstractmethod
    def next_event(self) -> Event | None:
        """The oldest pending event, or None."""

    @abstractmethod
    def counters(self) -> dict[str, int | float]:
        """A snapshot of the engine's counters (JSON-ready; the daemon's ``stats``)."""

    @abstractmethod
    def pause(self, cls: int, until: float) -> None:
        """PFC: hold traffic class ``cls`` (0..7) until ``until``; ``until <= now`` resumes."""

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
  daemon passes fabric time, ``emu.fabricclock``, through its trio clock; tests
  a hand-stepped float); engines never read a clock and draw randomness only from
  an injected RNG, so a dilated run is the same to them (DESIGN.md, Fabric time).
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

# the datagram fields of the contract (emu.core.datagram), named here for the engines
from emu.core.datagram import ECN_CE, ECN_ECT0, ECN_ECT1, ECN_NOT_ECT, Addr, TxMeta  # noqa: F401


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
        daemon, ``Gather`` pieces over registered memory). An engine asked for
        runs (``runs=True``: UET, RoCEv2 middles) may also return ``(Run, addr, None)``: several
        datagrams in one entry, each with its own meta; ``expand`` opens them
        (all three in :mod:`emu.core.datagram`).
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

# SPDX-License-Identifier: GPL-2.0-only
"""What the daemon needs from a transport engine, and the registry engines plug into.

The daemon has no protocol logic (``DESIGN.md``): it moves datagrams between
sockets and a sans-IO engine, keeps one timer per engine, and routes the
engine's events to clients. One engine instance serves the whole device (all
QPs of one transport, behind one UDP port), so the daemon arms one timer per
transport, not one per QP.

The datagram side is :class:`emu.transports.base.Engine`, driven exactly so
(``now`` is ``trio.current_time()``, seconds)::

    engine.receive_datagram(data, addr, now, ecn=tos & 3)    # every datagram read
    #  … with trimmed=True instead when the DSCP is a trimmed one (--trimmed-dscp) and
    #  the engine's receive_datagram has that keyword (UET); decided once per engine
    engine.receive_batch(items, now, trim=, arrived=)        # instead, if it has one (UET):
    #  a read's (data, addr, tos) items as they are, trim[tos] for trimmed DSCPs
    engine.handle_timer(now)                                # when get_timer() is due
    engine.datagrams_to_send(now) -> [(data, addr, TxMeta)]  # after every input; data may
    #  be a Gather, or a Run (meta None: several datagrams, emu.transports.base) → TxPath
    engine.next_event() -> Completion | StateChanged | None  # after every input
    engine.get_timer()                                      # re-arm the one timer
    engine.counters(); engine.pause(cls, until)

Verbs are per transport in ``base``; the daemon calls these (the
:class:`Verbs` protocol; an engine implements them directly or its factory
wraps it)::

    create_qp(pd=, send_cq=, recv_cq=, attrs=dict) -> qpn   # cq values are daemon handles
    query_qp(qpn) -> dict          # local connection data: qpn, psn, gid/address, port …
    connect(qpn, remote: dict, now)                          # INIT → RTR → RTS
    post_send(qpn, SendWR, now); post_recv(qpn, RecvWR, now)
    destroy_qp(qpn, now)

Work requests are :mod:`emu.core.verbs`' ``SendWR``/``RecvWR``
(verbs opcodes and SGEs; transport-neutral data), built by the control
server from the protocol's JSON. ``VerbsError`` (or ``ValueError``) from a
verbs call becomes an error reply to the client.
"""

from __future__ import annotations

import importlib
import random
import socket
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from emu.core.memory import MemoryTable
from emu.core.trace import NULL_TRACE, Trace
from emu.core.verbs import RecvWR, SendWR
from emu.jsonable import jsonable
from emu.transports.base import Engine, VerbsError

__all__ = ["ENGINES", "Engine", "EngineContext", "Verbs", "VerbsError", "create", "register"]


def srv6_table(paths: dict[str, list[str]]) -> Callable[[str], tuple[bytes, ...]] | None:
    """The controller's SRv6 path table (``NicConfig.srv6_paths``) as engines take it:
    destination → its paths' outer destinations as bytes; None when there is none (the
    fabric is not source-routed)."""
    if not paths:
        return None
    table = {d: tuple(socket.inet_pton(socket.AF_INET6, c) for c in cs)
             for d, cs in paths.items()}
    return lambda dest: table.get(dest, ())


@dataclass
class EngineContext:
    """What the daemon hands an engine factory: device memory, randomness, addresses.

    ``addresses`` are the host's NIC addresses (IPv4 and IPv6 strings) in port
    order; ``mtu`` the smallest of the ports' IP MTUs (what a segmenting
    transport may put in one datagram, IP and UDP headers included); ``trace`` the
    daemon's event trace for this engine (``--trace``; disabled by default), which a
    factory passes to engines that take ``trace=``. A factory tells the daemon the
    options it built the engine with, its own defaults included, through
    :meth:`in_force` (``emu nicd stats`` shows them: what the user did not set is
    what most needs showing).
    """

    memory: MemoryTable
    rng: random.Random
    addresses: list[str]
    port: int
    mtu: int = 1500
    options: dict[str, Any] = field(default_factory=dict)
    trace: Trace = NULL_TRACE
    #: the options the engine was built with (:meth:`in_force`); empty until then
    options_in_force: dict[str, Any] = field(default_factory=dict)
    #: the addresses of each NIC port, in port order (a multi-plane NIC: one port per
    #: plane, which MRC sprays over); empty when unknown
    port_addresses: list[list[str]] = field(default_factory=list)
    #: the controller's SRv6 path table: destination address → the outer destinations
    #: (16-byte uSID containers) of its paths, () for none; None: the fabric is not
    #: source-routed
    srv6_paths: Callable[[str], Sequence[bytes]] | None = None

    def in_force(self, opts: dict[str, Any]) -> None:
        """Record the engine's options, as plain data (the trace object left out)."""
        self.options_in_force = jsonable({k: v for k, v in opts.items() if k != "trace"})


class Verbs(Protocol):
    """The verbs calls the control server makes (see the module docstring)."""

    def create_qp(self, *, pd: Any, send_cq: Hashable, recv_cq: Hashable,
                  attrs: dict[str, Any]) -> int: ...
    def query_qp(self, qpn: int) -> dict[str, Any]: ...
    def connect(self, qpn: int, remote: dict[str, Any], now: float) -> None: ...
    def post_send(self, qpn: int, wr: SendWR, now: float) -> None: ...
    def post_recv(self, qpn: int, wr: RecvWR, now: float) -> None: ...
    def destroy_qp(self, qpn: int, now: float) -> None: ...


EngineFactory = Callable[[EngineContext], Engine]


def _loopback(ctx: EngineContext) -> Engine:
    from emu.nic.loopback import LoopbackEngine

    return LoopbackEngine(ctx)


def _lazy(module: str, names: tuple[str, ...] = ("create_engine", "engine_factory")
          ) -> EngineFactory:
    """A factory that imports ``module`` only when a daemon actually runs that transport."""

    def factory(ctx: EngineContext) -> Engine:
        mod = importlib.import_module(module)
        for n in names:
            f = getattr(mod, n, None)
            if f is not None:
                return f(ctx)
        raise ImportError(f"{module} has no engine factory ({' or '.join(names)})")

    factory.__qualname__ = f"lazy({module})"
    return factory


#: transport name → factory. UET and MRC engines register here (or via
#: :func:`register`) without the daemon changing.
ENGINES: dict[str, EngineFactory] = {
    "loopback": _loopback,
    "roce": _lazy("emu.transports.roce"),
    "uet": _lazy("emu.transports.uet"),
    "mrc": _lazy("emu.transports.mrc"),
}


def register(name: str, factory: EngineFactory) -> None:
    """Add (or replace) a transport; tests register instrumented engines this way."""
    ENGINES[name] = factory


def create(name: str, ctx: EngineContext) -> Engine:
    try:
        factory = ENGINES[name]
    except KeyError:
        raise VerbsError(f"unknown transport {name!r} (known: {', '.join(sorted(ENGINES))})"
                         ) from None
    return factory(ctx)

# SPDX-License-Identifier: GPL-2.0-only
"""What the NIC daemon keeps per transport engine (:class:`EngineSlot`) and the small
decisions made once per engine: which keywords its ``receive_datagram`` takes, which
TOS bytes mean "trimmed", the delay line's counters.

Apart from :mod:`emu.nic.daemon` so that the daemon's I/O driver stays one readable
module; nothing here does I/O.
"""

from __future__ import annotations

import inspect
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import trio

from emu.nic.delayline import DelayLine
from emu.nic.timerfd import TimerFd
from emu.nic.txpath import TxPath

SLOT_COUNTERS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "rx_backlog_drops",
                  "rx_bad_icrc", "tx_backlog_drops", "rx_kernel_drops", "rx_truncated", "rx_errors",
                  "tx_errors", "tx_last_errno", "tx_gso_sends", "tx_gso_disabled",
                  "tx_entropy_fallback", "tx_entropy_folded", "tx_frames", "tx_raw",
                  "engine_errors", "engine_batches", "timer_fires", "rx_trimmed", "rx_holds")


@dataclass(eq=False)
class EngineSlot:
    """One transport engine and everything the daemon keeps for it."""

    name: str
    engine: Any  # emu.transports.base.Engine + emu.nic.engines.Verbs
    port: int
    tx: TxPath
    c: dict[str, int]
    backlog: deque[tuple[bytes, Any, int]] = field(default_factory=deque)  # (data, addr, tos)
    #: TOS byte → 1 if its DSCP says "trimmed by a switch" (256 entries; see trimmed_table)
    trimmed_tos: bytes = bytes(256)
    #: the engine's receive_datagram takes ``trimmed=`` (looked up once, not per packet)
    takes_trimmed: bool = False
    #: the backlog's raw kernel receive stamps (``udp.stamp_seconds``; None: none), in
    #: step with it — only for an engine whose receive_datagram takes ``arrived=``
    times: deque[bytes | None] | None = None
    #: the engine's ``receive_batch`` (UET), which takes the backlog's items as they are
    #: with ``trimmed_tos``, or None: one ``receive_datagram`` call per datagram
    batch: Any = None
    rx_lot: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)
    tx_lot: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)
    timer_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    #: the transmit task's precise sleep while the queue waits for a port's serializer
    tx_timer: TimerFd | None = None
    #: the timer task's precise sleep for an engine timer due soon (a QP's pacer)
    eng_timer: TimerFd | None = None
    #: the receive loops' coalescing sleeps (emu.nic.coalesce), one per port socket
    rx_timers: list[TimerFd] = field(default_factory=list)
    #: the engine's ``port_held()`` (RoCEv2), or None: told when the port holds its output
    port_held: Any = None
    check: Any = None  # the transport's receive framing check (RoCE ICRC), or None
    check_buf: Any = None  # its in-place form over the receive buffer, or None
    #: how the check learns the IPv4 header fields the ICRC covers (emu.nic.rxheader's
    #: AS_RECEIVED or ASSUMED); "" for a transport whose check needs none
    ip_header: str = ""
    #: the options the engine was built with, its factory's defaults included (stats)
    options_in_force: dict[str, Any] = field(default_factory=dict)
    #: propagation delay (emu.nic.delayline): datagrams wait there between the backlog
    #: and the engine; None = none configured (the backlog feeds the engine directly)
    delay: DelayLine | None = None
    #: what the line released and the engine has not taken yet, with release times
    ready: deque[tuple[bytes, Any, int]] = field(default_factory=deque)
    ready_times: deque[float] = field(default_factory=deque)
    takes_arrived: bool = False
    delay_lot: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)
    delay_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    delay_wake: float = math.inf  # the delay task's wake-up (CLOCK_REALTIME), inf: parked


def line_counters(line: DelayLine | None) -> dict[str, int] | None:
    """A delay line's counters for ``emu nicd stats`` (None: no propagation delay)."""
    if line is None:
        return None
    return {"held": line.held, "waiting": len(line), "late": line.late,
            "unstamped": line.unstamped}


def take(q: deque[Any], k: int) -> list[Any]:
    """The first ``k`` items of ``q``, removed (all of them at C speed)."""
    if k == len(q):
        items = list(q)
        q.clear()
        return items
    return [q.popleft() for _ in range(k)]


def trimmed_table(dscps: tuple[int, ...] | list[int]) -> bytes:
    """A 256-entry table TOS byte → 1 when its DSCP (``tos >> 2``) is one of ``dscps``:
    one index per datagram in the engine loop instead of a shift and a set lookup."""
    bad = [d for d in dscps if not (isinstance(d, int) and 0 <= d < 64)]
    if bad:
        raise ValueError(f"trimmed DSCP {bad[0]!r} is not a DSCP (0..63)")
    want = set(dscps)
    return bytes(1 if tos >> 2 in want else 0 for tos in range(256))


def takes(engine: Any, keyword: str) -> bool:
    """Whether ``engine.receive_datagram`` accepts ``keyword=``: ``trimmed`` (UET and
    RoCE; an engine without it gets trimmed datagrams as plain ones), ``arrived`` (UET).
    Decided once per engine from the signature, so the hot path tests a local bool."""
    try:
        params = inspect.signature(engine.receive_datagram).parameters
    except (TypeError, ValueError):
        return False
    return keyword in params or any(p.kind is inspect.Parameter.VAR_KEYWORD
                                    for p in params.values())

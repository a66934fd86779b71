# SPDX-License-Identifier: GPL-2.0-only
"""What the control server keeps per client, and work requests from JSON.

Split from :mod:`emu.nic.control` so the server reads as behaviour; these are
the records it hands around. Work requests become the engines' ``SendWR`` /
``RecvWR`` (:mod:`emu.core.verbs`: verbs opcodes and SGEs, no
RoCE specifics) here, once, so engines never see JSON.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from emu.core.cq import CompletionQueue
from emu.core.memory import MemoryRegion, ProtectionDomain
from emu.core.verbs import RecvWR, SendWR, Sge, WrOpcode

if TYPE_CHECKING:
    from emu.nic.slot import EngineSlot


class OpError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class Session:
    """One connected client and what it owns."""

    id: int
    sock: Any
    uid: int
    pid: int
    pd: ProtectionDomain
    out: deque[bytes] = field(default_factory=deque)
    events: deque[dict[str, Any]] = field(default_factory=deque)
    dirty: dict[int, None] = field(default_factory=dict)
    lot: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)
    drained: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)
    mrs: dict[int, MemoryRegion] = field(default_factory=dict)
    buffers: dict[str, list[Any]] = field(default_factory=dict)  # name → [buffer, refs]
    cqs: set[int] = field(default_factory=set)
    qps: set[int] = field(default_factory=set)
    closing: bool = False
    compact: bool = False  # completions as compact records (asked for in its hello)
    pending: memoryview | None = None  # the unsent rest of a write (the writer task owns it)
    events_dropped: int = 0

    def wake(self) -> None:
        self.lot.unpark_all()


@dataclass(eq=False)
class CqRec:
    handle: int
    cq: CompletionQueue
    owner: Session
    qps: set[int] = field(default_factory=set)
    reported: bool = False


@dataclass(eq=False)
class QpRec:
    handle: int
    slot: EngineSlot
    qpn: int
    owner: Session
    send_cq: int
    recv_cq: int


def _sges(d: dict[str, Any]) -> tuple[Sge, ...]:
    out = []
    for e in d.get("sg_list", ()):
        if isinstance(e, dict):
            out.append(Sge(int(e["addr"]), int(e["length"]), int(e["lkey"])))
        else:
            a, n, k = e
            out.append(Sge(int(a), int(n), int(k)))
    return tuple(out)


@dataclass(slots=True)
class TaggedSendWR(SendWR):
    """A SEND carrying 64 match bits (UET TAGGED_SEND; libfabric ``fi_tsend``)."""

    tag: int = 0


@dataclass(slots=True)
class TaggedRecvWR(RecvWR):
    """A receive that takes only SENDs whose tag matches ``tag`` outside ``ignore``."""

    tag: int = 0
    ignore: int = 0


def _u64(d: dict[str, Any], key: str) -> int:
    v = int(d.get(key, 0))
    if not 0 <= v < 1 << 64:
        raise ValueError(f"{key} must be 64 bits, got {v}")
    return v


def send_wr(d: dict[str, Any]) -> SendWR:
    """A protocol work request (JSON) as the engines' ``SendWR`` (``TaggedSendWR``
    when it has a ``tag``: only engines with tagged messages accept those)."""
    imm = d.get("imm")
    return make_send_wr(int(d["wr_id"]), d.get("opcode", "SEND"), _sges(d),
                        int(d.get("remote_addr", 0)), int(d.get("rkey", 0)),
                        None if imm is None else int(imm), int(d.get("compare_add", 0)),
                        int(d.get("swap", 0)), bool(d.get("signaled", True)),
                        bool(d.get("solicited", False)),
                        None if d.get("tag") is None else _u64(d, "tag"))


def make_send_wr(wr_id: int, op: Any, sg_list: Any, remote_addr: int = 0, rkey: int = 0,
                 imm: int | None = None, compare_add: int = 0, swap: int = 0,
                 signaled: bool = True, solicited: bool = False, tag: int | None = None
                 ) -> SendWR:
    """A send work request from protocol values, JSON's (:func:`send_wr`) or a compact
    record's (:mod:`emu.nic.compact`): the opcode and tag checks live here, once; the
    engine checks the rest (state, keys, bounds) at ``post_send``. ``sg_list``: Sge
    objects or ``(addr, length, lkey)`` triples."""
    opcode = WrOpcode[op] if isinstance(op, str) else WrOpcode(int(op))
    sges = tuple(e if type(e) is Sge else Sge(*e) for e in sg_list)
    args = (wr_id, opcode, sges, remote_addr, rkey, imm, compare_add, swap, signaled,
            solicited)
    if tag is not None:
        if opcode != WrOpcode.SEND:
            raise ValueError(f"a tag goes with SEND, not {opcode.name}")
        return TaggedSendWR(*args, tag=tag)
    return SendWR(*args)


def recv_wr(d: dict[str, Any]) -> RecvWR:
    """A protocol receive work request (JSON, or a compact record's fields as a dict)."""
    if d.get("tag") is not None:
        return TaggedRecvWR(int(d["wr_id"]), _sges(d), tag=_u64(d, "tag"),
                            ignore=_u64(d, "ignore"))
    return RecvWR(int(d["wr_id"]), _sges(d))

# SPDX-License-Identifier: GPL-2.0-only
"""Work requests as the client API hands them to the engine (``ibv_send_wr`` & co).

Plain data: the engine validates them in ``post_send``/``post_recv`` and
keeps its own per-WQE state. Transport-neutral — RoCEv2, UET and the NIC's
loopback engine all take them — so they live in ``emu.core``, and neither the
NIC nor UET depends on RoCEv2 for them. Opcode values are ``enum ibv_wr_opcode`` so the
client API can pass numbers through unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from emu.core.cq import WcOpcode


class WrOpcode(enum.IntEnum):
    """``ibv_wr_opcode`` (the subset RC supports here)."""

    RDMA_WRITE = 0
    RDMA_WRITE_WITH_IMM = 1
    SEND = 2
    SEND_WITH_IMM = 3
    RDMA_READ = 4
    ATOMIC_CMP_AND_SWP = 5
    ATOMIC_FETCH_AND_ADD = 6

    @property
    def wc_opcode(self) -> WcOpcode:
        return _WC[self]

    @property
    def is_read_or_atomic(self) -> bool:
        """Consumes responder resources (max_rd_atomic) and completes on a response."""
        return self >= WrOpcode.RDMA_READ

    @property
    def is_atomic(self) -> bool:
        return self >= WrOpcode.ATOMIC_CMP_AND_SWP


_WC = {
    WrOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE,
    WrOpcode.SEND: WcOpcode.SEND, WrOpcode.SEND_WITH_IMM: WcOpcode.SEND,
    WrOpcode.RDMA_READ: WcOpcode.RDMA_READ, WrOpcode.ATOMIC_CMP_AND_SWP: WcOpcode.COMP_SWAP,
    WrOpcode.ATOMIC_FETCH_AND_ADD: WcOpcode.FETCH_ADD,
}


@dataclass(frozen=True, slots=True)
class Sge:
    """One scatter/gather element: ``length`` bytes at ``addr`` in the region of ``lkey``."""

    addr: int
    length: int
    lkey: int


@dataclass(slots=True)
class SendWR:
    """``ibv_send_wr`` for RC. ``imm`` only with the ``*_WITH_IMM`` opcodes;
    ``compare_add``/``swap`` only for atomics (FETCH_ADD uses ``compare_add`` as
    the addend, as verbs does); the atomic result lands in the one 8-byte SGE."""

    wr_id: int
    opcode: WrOpcode
    sg_list: Sequence[Sge] = ()
    remote_addr: int = 0
    rkey: int = 0
    imm: int | None = None
    compare_add: int = 0
    swap: int = 0
    signaled: bool = True
    solicited: bool = False

    # -- readable constructors for the client API and tests ------------------

    @classmethod
    def send(cls, wr_id: int, sg: Sequence[Sge], imm: int | None = None, **kw: object
             ) -> SendWR:
        op = WrOpcode.SEND if imm is None else WrOpcode.SEND_WITH_IMM
        return cls(wr_id, op, tuple(sg), imm=imm, **kw)  # type: ignore[arg-type]

    @classmethod
    def write(cls, wr_id: int, sg: Sequence[Sge], remote_addr: int, rkey: int,
              imm: int | None = None, **kw: object) -> SendWR:
        op = WrOpcode.RDMA_WRITE if imm is None else WrOpcode.RDMA_WRITE_WITH_IMM
        return cls(wr_id, op, tuple(sg), remote_addr, rkey, imm=imm, **kw)  # type: ignore[arg-type]

    @classmethod
    def read(cls, wr_id: int, sg: Sequence[Sge], remote_addr: int, rkey: int, **kw: object
             ) -> SendWR:
        return cls(wr_id, WrOpcode.RDMA_READ, tuple(sg), remote_addr, rkey, **kw)  # type: ignore[arg-type]

    @classmethod
    def cmp_swap(cls, wr_id: int, sge: Sge, remote_addr: int, rkey: int, compare: int,
                 swap: int, **kw: object) -> SendWR:
        return cls(wr_id, WrOpcode.ATOMIC_CMP_AND_SWP, (sge,), remote_addr, rkey,
                   compare_add=compare, swap=swap, **kw)  # type: ignore[arg-type]

    @classmethod
    def fetch_add(cls, wr_id: int, sge: Sge, remote_addr: int, rkey: int, add: int,
                  **kw: object) -> SendWR:
        return cls(wr_id, WrOpcode.ATOMIC_FETCH_AND_ADD, (sge,), remote_addr, rkey,
                   compare_add=add, **kw)  # type: ignore[arg-type]


@dataclass(slots=True)
class RecvWR:
    """``ibv_recv_wr``: where an incoming SEND's bytes go."""

    wr_id: int
    sg_list: Sequence[Sge] = field(default_factory=tuple)


class QpAttrMask(enum.IntFlag):
    """``enum ibv_qp_attr_mask`` (libibverbs ``verbs.h``): which ``ibv_modify_qp``
    attributes a call sets. Here, not in a transport, so that the client API names
    them without loading an engine (the rules per transition are
    ``emu.transports.roce.modify``'s)."""

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    EN_SQD_ASYNC_NOTIFY = 1 << 2
    ACCESS_FLAGS = 1 << 3
    PKEY_INDEX = 1 << 4
    PORT = 1 << 5
    QKEY = 1 << 6
    AV = 1 << 7
    PATH_MTU = 1 << 8
    TIMEOUT = 1 << 9
    RETRY_CNT = 1 << 10
    RNR_RETRY = 1 << 11
    RQ_PSN = 1 << 12
    MAX_QP_RD_ATOMIC = 1 << 13
    ALT_PATH = 1 << 14
    MIN_RNR_TIMER = 1 << 15
    SQ_PSN = 1 << 16
    MAX_DEST_RD_ATOMIC = 1 << 17
    PATH_MIG_STATE = 1 << 18
    CAP = 1 << 19
    DEST_QPN = 1 << 20
    RATE_LIMIT = 1 << 25


#: ``enum ibv_qp_state``: IBV_QPS_RESET = 0 … IBV_QPS_ERR = 6, by name
QP_STATES = ("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR")
#: ``enum ibv_mtu`` (IBV_MTU_256 = 1 … IBV_MTU_4096 = 5) → bytes
MTU_CODES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}

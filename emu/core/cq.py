# SPDX-License-Identifier: GPL-2.0-only
"""Completion queues and work completions, with verbs names and numbers.

The status and opcode values are those of ``enum ibv_wc_status`` and
``enum ibv_wc_opcode`` (rdma-core ``verbs.h``), so the client API and the
perftest-style tools can print what users of real verbs expect, and UET/MRC
map onto the same names (libfabric's error completions translate cleanly).

A CQ is bounded as in hardware: a completion that finds it full is dropped,
counted, and puts the CQ into a permanent error state (``IBV_EVENT_CQ_ERR``).
Silently growing would hide an application that never polls.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass


class WcStatus(enum.IntEnum):
    """``ibv_wc_status``."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21

    def describe(self) -> str:
        """The text ``ibv_wc_status_str`` would print."""
        return _STATUS_TEXT.get(self, self.name.lower())


_STATUS_TEXT = dict(zip(WcStatus, (
    "success", "local length error", "local QP operation error",
    "local EE context operation error", "local protection error", "Work Request Flushed Error",
    "memory management operation error", "bad response error", "local access error",
    "remote invalid request error", "remote access error", "remote operation error",
    "transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
    "remote invalid RD request", "aborted error", "invalid EE context number",
    "invalid EE context state", "fatal error", "response timeout error", "general error",
), strict=True))


class WcOpcode(enum.IntEnum):
    """``ibv_wc_opcode`` (receive-side opcodes have bit 7 set)."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    COMP_SWAP = 3
    FETCH_ADD = 4
    BIND_MW = 5
    LOCAL_INV = 6
    RECV = 128
    RECV_RDMA_WITH_IMM = 129

    @property
    def is_recv(self) -> bool:
        return bool(self & 0x80)


@dataclass(frozen=True, slots=True)
class WorkCompletion:
    """One ``ibv_wc``: the fields the emulator fills.

    ``imm`` is None unless the completion carries immediate data (the verbs
    ``IBV_WC_WITH_IMM`` flag). ``byte_len`` is meaningful for receives and
    READ/atomic results. ``src_qp`` is the sender's QPN on receives (or the
    peer's endpoint id for UET/MRC). ``vendor_err`` carries a transport-
    specific code (e.g. the UET NACK code or RoCE syndrome) for errors.
    """

    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qp_num: int
    byte_len: int = 0
    imm: int | None = None
    src_qp: int = 0
    vendor_err: int = 0

    @property
    def ok(self) -> bool:
        return self.status is WcStatus.SUCCESS

    @classmethod
    def flushed(cls, wr_id: int, opcode: WcOpcode, qp_num: int) -> WorkCompletion:
        """The completion of a WR flushed because its QP entered the error state."""
        return cls(wr_id, WcStatus.WR_FLUSH_ERR, opcode, qp_num)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form for the control protocol and ``--json`` output."""
        return {"wr_id": self.wr_id, "status": self.status.name, "opcode": self.opcode.name,
                "qp_num": self.qp_num, "byte_len": self.byte_len, "imm": self.imm,
                "src_qp": self.src_qp, "vendor_err": self.vendor_err}


class CompletionQueue:
    """A bounded FIFO of work completions.

    ``push`` returns False when a completion is dropped (the CQ was full or is
    already in error); ``overflows`` counts those and ``error`` stays set —
    the owner should report the CQ error and move its QPs to error, as a NIC
    does. Notification follows ``ibv_req_notify_cq``: :meth:`arm` once, and the
    next push sets a pending notification that :meth:`take_notification`
    consumes (the daemon turns it into a wake-up for the client).
    """

    __slots__ = ("capacity", "_q", "error", "overflows", "pushed", "_armed", "_solicited_only",
                 "_notify")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("CQ capacity must be >= 1")
        self.capacity = capacity
        self._q: deque[WorkCompletion] = deque()
        self.error = False
        self.overflows = 0
        self.pushed = 0
        self._armed = False
        self._solicited_only = False
        self._notify = False

    def __len__(self) -> int:
        return len(self._q)

    def push(self, wc: WorkCompletion, *, solicited: bool = False) -> bool:
        """Add a completion; False (and counted) if it had to be dropped."""
        if self.error or len(self._q) >= self.capacity:
            self.error = True
            self.overflows += 1
            return False
        self._q.append(wc)
        self.pushed += 1
        if self._armed and (solicited or not self._solicited_only or not wc.ok):
            self._armed = False
            self._notify = True
        return True

    def poll(self, n: int = 1) -> list[WorkCompletion]:
        """Remove and return up to ``n`` completions, oldest first."""
        q = self._q
        if n >= len(q):
            out = list(q)
            q.clear()
            return out
        return [q.popleft() for _ in range(n)]

    def peek(self) -> WorkCompletion | None:
        return self._q[0] if self._q else None

    def arm(self, solicited_only: bool = False) -> None:
        """Request one notification on the next (solicited or error) completion."""
        self._armed = True
        self._solicited_only = solicited_only

    def take_notification(self) -> bool:
        """True once per fired notification."""
        fired, self._notify = self._notify, False
        return fired

# SPDX-License-Identifier: GPL-2.0-only
"""Completion queues: FIFO, bound and overflow state, notification, verbs numbering."""

import pytest

from emu.core.cq import CompletionQueue, WcOpcode, WcStatus, WorkCompletion


def wc(i, status=WcStatus.SUCCESS, **kw):
    return WorkCompletion(i, status, WcOpcode.RDMA_WRITE, qp_num=17, **kw)


def test_verbs_numbers_and_strings():
    assert WcStatus.SUCCESS == 0 and WcStatus.WR_FLUSH_ERR == 5
    assert WcStatus.REM_INV_REQ_ERR == 9 and WcStatus.REM_ACCESS_ERR == 10
    assert WcStatus.REM_OP_ERR == 11 and WcStatus.RETRY_EXC_ERR == 12
    assert WcStatus.RNR_RETRY_EXC_ERR == 13 and WcStatus.GENERAL_ERR == 21
    assert WcStatus.RETRY_EXC_ERR.describe() == "transport retry counter exceeded"
    assert WcOpcode.RECV == 128 and WcOpcode.RECV_RDMA_WITH_IMM == 129
    assert WcOpcode.RECV.is_recv and not WcOpcode.COMP_SWAP.is_recv


def test_fifo_poll():
    cq = CompletionQueue(8)
    for i in range(5):
        assert cq.push(wc(i, byte_len=i * 10))
    assert len(cq) == 5 and cq.peek().wr_id == 0
    assert [w.wr_id for w in cq.poll(2)] == [0, 1]
    assert [w.wr_id for w in cq.poll(10)] == [2, 3, 4]
    assert cq.poll() == [] and cq.peek() is None
    assert cq.pushed == 5 and not cq.error


def test_overflow_is_a_counted_error_state():
    cq = CompletionQueue(2)
    assert cq.push(wc(1)) and cq.push(wc(2))
    assert not cq.push(wc(3))
    assert cq.error and cq.overflows == 1
    assert [w.wr_id for w in cq.poll(5)] == [1, 2]  # what fitted is still readable
    assert not cq.push(wc(4))  # the error state is permanent, as in hardware
    assert cq.overflows == 2
    with pytest.raises(ValueError):
        CompletionQueue(0)


def test_notification_one_shot_and_solicited():
    cq = CompletionQueue(16)
    cq.push(wc(0))
    assert not cq.take_notification()  # not armed
    cq.arm()
    cq.push(wc(1))
    assert cq.take_notification() and not cq.take_notification()
    cq.push(wc(2))
    assert not cq.take_notification()  # one-shot
    cq.arm(solicited_only=True)
    cq.push(wc(3))
    assert not cq.take_notification()
    cq.push(wc(4), solicited=True)
    assert cq.take_notification()
    cq.arm(solicited_only=True)
    cq.push(wc(5, WcStatus.REM_ACCESS_ERR))  # errors always notify
    assert cq.take_notification()


def test_work_completion_fields():
    w = WorkCompletion(9, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM, 3, byte_len=4096,
                       imm=0xDEADBEEF, src_qp=5)
    assert w.ok and w.imm == 0xDEADBEEF
    d = w.to_dict()
    assert d["status"] == "SUCCESS" and d["opcode"] == "RECV_RDMA_WITH_IMM" and d["imm"] == w.imm
    f = WorkCompletion.flushed(11, WcOpcode.SEND, 3)
    assert f.status is WcStatus.WR_FLUSH_ERR and not f.ok and f.byte_len == 0
    with pytest.raises(AttributeError):
        w.wr_id = 1  # frozen

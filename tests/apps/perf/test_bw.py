# SPDX-License-Identifier: GPL-2.0-only
"""emu.apps.perf.bw.SendReceiver: send-bw's server checks each SEND by the receive that
completed, whatever order UET's unordered delivery completes and matches them in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from emu.apps.perf.bw import SendReceiver
from emu.apps.perf.endpoint import TransportError
from emu.apps.perf.pattern import DataError, Pattern, client_stream
from emu.core.cq import WcStatus

SIZE, DEPTH, N = 256, 4, 6


class _Cq:
    def __init__(self) -> None:
        self.batches: list[list] = []

    def wait(self, n: int, timeout: float) -> list:  # noqa: ARG002
        return self.batches.pop(0) if self.batches else []

    def poll(self, n: int) -> list:  # noqa: ARG002
        return []


class _Chan:
    def __init__(self, rx: _Cq) -> None:
        self.rx = rx

    def poll(self):
        return {"op": "done", "counts": [N]} if not self.rx.batches else None


def _server(order: list[tuple[int, int]]):
    """A server whose completions come as ``(receive, iteration it holds)`` in ``order``;
    the client's data is placed in the receive's slot just before its completion."""
    pattern = Pattern(SIZE)
    buf = bytearray(SIZE * 64)
    posted: list[int] = []
    cq = _Cq()
    ep = SimpleNamespace(
        qps=[SimpleNamespace(post_many=lambda wrs, recv, wait: posted.extend(
            w["wr_id"] for w in wrs))],
        mrs=[SimpleNamespace(va=0, lkey=1, view=memoryview(buf))],
        recv_cq=cq, by_qpn={7: 0}, check=lambda: None,
        dev=SimpleNamespace(conn=SimpleNamespace(call=lambda *a: None)))
    sr = SendReceiver(ep, SIZE, DEPTH, N, pattern)
    sr.prepost()
    slots = sr.slots

    class _Wc(SimpleNamespace):
        pass

    def wc_for(rx: int, it: int):
        off = (rx % slots) * SIZE
        assert rx in posted, f"receive {rx} completed before it was posted"
        buf[off:off + SIZE] = pattern.data(client_stream(0), it, SIZE)
        return _Wc(status=WcStatus.SUCCESS, qp_num=7, wr_id=rx, byte_len=SIZE)

    # completions are produced lazily so a slot is filled only when its receive is posted
    class _LazyCq(_Cq):
        def wait(self, n: int, timeout: float) -> list:  # noqa: ARG002
            return [wc_for(*order.pop(0))] if order else []

    lazy = _LazyCq()
    ep.recv_cq = lazy
    lazy.batches = order  # the channel says "done" once they are all delivered
    return sr, _Chan(lazy), posted


def test_completions_out_of_order_are_checked_by_their_receive():
    # receive 1 completes before receive 0 (message 0's last packet was resent)
    sr, chan, posted = _server([(1, 1), (0, 0), (2, 2), (3, 3), (5, 5), (4, 4)])
    assert sr.serve(chan, timeout=5) == [N]
    assert sorted(posted) == list(range(N))  # each receive posted once, none beyond N


def test_a_receive_matched_to_the_next_message_is_accepted_once():
    # message 1's first packet arrived before any of message 0's: receive 0 holds it
    sr, chan, _ = _server([(0, 1), (1, 0), (2, 2), (3, 3), (4, 4), (5, 5)])
    assert sr.serve(chan, timeout=5) == [N]


def test_the_same_message_twice_or_wrong_bytes_fail():
    sr, chan, _ = _server([(0, 0), (1, 0), (2, 2), (3, 3), (4, 4), (5, 5)])
    with pytest.raises(TransportError, match="arrived already"):
        sr.serve(chan, timeout=5)
    sr, chan, _ = _server([(0, 0), (1, 40), (2, 2), (3, 3), (4, 4), (5, 5)])
    with pytest.raises(DataError, match="iteration 1"):
        sr.serve(chan, timeout=5)


def _client_ep(quiet_waits: int):
    """A client endpoint whose send CQ answers nothing ``quiet_waits`` times, then
    completes every signaled post."""
    signaled: list[int] = []
    waits = [0]

    class _SendCq:
        def wait(self, n: int, timeout: float) -> list:  # noqa: ARG002
            waits[0] += 1
            if waits[0] <= quiet_waits or not signaled:
                return []
            return [SimpleNamespace(status=WcStatus.SUCCESS, qp_num=7, wr_id=signaled.pop(0))]

        def poll(self, n: int) -> list:  # noqa: ARG002
            return []

    def post_many(wrs, wait):  # noqa: ARG001
        signaled.extend(w["wr_id"] for w in wrs if w["signaled"])

    ep = SimpleNamespace(qps=[SimpleNamespace(post_many=post_many)],
                         mrs=[SimpleNamespace(va=0, lkey=1, view=memoryview(bytearray(4096)))],
                         send_cq=_SendCq(), by_qpn={7: 0}, check=lambda: None)
    return ep, [{"va": 0, "rkey": 2}]


def test_the_client_waits_for_progress_in_wall_time_not_fabric_time():
    """At a large time scale the fabric clock races past the wall clock (here 1000
    fabric s per reading): a quiet spell of a few empty CQ waits is not a stall unless
    ``timeout`` *wall* seconds pass (:mod:`emu.apps.perf.stall`). On the fabric clock the
    check would have given up at the first empty wait."""
    from emu.apps.perf import bw

    ticks = iter(range(0, 10**9, 1000))
    ep, remote = _client_ep(quiet_waits=3)
    run = bw.run_client(ep, remote, "write", 256, iters=4, duration=None, tx_depth=4,
                        cq_mod=1, pattern=None, chan=None, timeout=60.0, progress=False,
                        clock=lambda: float(next(ticks)))
    assert run.counts == [4]
    ep, remote = _client_ep(quiet_waits=10**9)  # nothing ever completes: a wall stall
    with pytest.raises(TransportError, match="no completion for 0.05 wall s"):
        bw.run_client(ep, remote, "write", 256, iters=4, duration=None, tx_depth=4,
                      cq_mod=1, pattern=None, chan=None, timeout=0.05, progress=False)


def test_stall_limit_is_timeout_plus_the_transports_waits_dilated():
    from emu.apps.perf import stall

    # RoCEv2 at perftest's -u 14: 67.1 fabric ms a wait; three of them at scale 7100
    wait = 4.096e-6 * 2**14
    assert stall.stall_limit(60, "roce", 14, 7100) == pytest.approx(60 + 3 * wait * 7100)
    assert stall.stall_limit(60, "roce", 8, 1) == pytest.approx(60 + 3 * 4.096e-6 * 256)
    assert stall.stall_limit(60, "uet", 14, 2) == pytest.approx(
        60 + 3 * stall.DEFAULT_DAEMON_RTO_MAX * 2)

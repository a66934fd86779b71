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

# SPDX-License-Identifier: GPL-2.0-only
"""Several of a daemon's tasks wait for room in one socket — a port's frame ring is its
transports' — and trio lets one task wait per fd: :meth:`NicDaemon.wait_writable` has
the first wait on the fd and the rest wait for it. (A worker serving two hosts died of
``BusyResourceError`` under eight concurrent flows before it.)"""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
import trio

from emu.nic.daemon import NicDaemon


def _full_pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:
            a.send(b"x" * 1024)
    return a, b


@pytest.mark.trio
async def test_three_tasks_wait_for_one_full_socket_and_all_wake():
    a, b = _full_pair()
    d = SimpleNamespace(_writable={})
    woke: list[int] = []
    try:
        async def waiter(i: int) -> None:
            await NicDaemon.wait_writable(d, a)  # type: ignore[arg-type]
            woke.append(i)

        async with trio.open_nursery() as n:
            for i in range(3):
                n.start_soon(waiter, i)
            await trio.sleep(0.05)
            assert woke == [] and len(d._writable) == 1  # one polls the fd
            b.setblocking(False)
            with pytest.raises(BlockingIOError):
                while True:
                    b.recv(2048)  # room again
        assert sorted(woke) == [0, 1, 2] and d._writable == {}
    finally:
        a.close()
        b.close()


@pytest.mark.trio
async def test_trio_alone_refuses_a_second_waiter():
    """What the helper is for: two plain waits on one fd."""
    a, b = _full_pair()
    try:
        with pytest.raises(ExceptionGroup) as e:
            async with trio.open_nursery() as n:
                n.start_soon(trio.lowlevel.wait_writable, a)
                await trio.sleep(0.01)
                await trio.lowlevel.wait_writable(a)
        assert e.group_contains(trio.BusyResourceError)
    finally:
        a.close()
        b.close()

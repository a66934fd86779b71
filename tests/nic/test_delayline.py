# SPDX-License-Identifier: GPL-2.0-only
"""The receiving NIC's propagation delay (:mod:`emu.nic.delayline`): each datagram is
released at its kernel receive stamp plus its path's delay (× the scale), in release
order across peers of different distances, and the daemon delivers nothing earlier."""

from __future__ import annotations

import socket
import struct
from collections import deque

import pytest
import trio

from emu.nic.config import NicConfig
from emu.nic.daemon import running
from emu.nic.delayline import DelayLine, parse_delays

_TS = struct.Struct("=qq")


def _stamp(t: float) -> bytes:
    """A raw ``SO_TIMESTAMPNS`` control message for ``t`` (CLOCK_REALTIME seconds)."""
    sec = int(t)
    return _TS.pack(sec, round((t - sec) * 1e9))


def test_parse_delays_takes_addresses_and_a_default_and_refuses_nonsense():
    assert parse_delays(["*=1e-6", "10.0.1.12=2.5e-6", "fd00::1=0"]) == {
        "*": 1e-6, "10.0.1.12": 2.5e-6, "fd00::1": 0.0}
    for bad in ("1e-6", "*=", "*=soon", "10.0.0.1=-1", "=1"):
        with pytest.raises(ValueError, match="--path-delay"):
            parse_delays([bad])


def test_each_datagram_is_released_at_its_stamp_plus_its_paths_delay_times_the_scale():
    # far peer 3 us, near peer (10.0.0.2) 1 us, at scale 1000: 3 ms and 1 ms of wall time
    line = DelayLine({"*": 3e-6, "10.0.0.2": 1e-6}, scale=1000)
    t0 = 1_000_000.0
    backlog = deque([(b"far", ("10.0.0.9", 4791), 0), (b"near", ("10.0.0.2", 4791), 0)])
    stamps: deque[bytes | None] = deque([_stamp(t0), _stamp(t0 + 0.0005)])
    line.absorb(backlog, stamps, now=t0 + 0.0006)
    assert not backlog and not stamps and len(line) == 2 and line.late == 0
    items: deque = deque()
    times: deque = deque()
    # the near peer's datagram came later but its path is shorter: it is due first
    assert line.next_release() == pytest.approx(t0 + 0.0015)
    assert line.release(t0 + 0.0014, items, times, 10) == 0  # nothing is early
    assert line.release(t0 + 0.0016, items, times, 10) == 1
    assert items[0][0] == b"near" and times[0] == pytest.approx(t0 + 0.0015)
    assert line.release(t0 + 0.0031, items, times, 10) == 1
    assert items[1][0] == b"far" and times[1] == pytest.approx(t0 + 0.003)
    assert line.next_release() is None and line.held == 2


def test_a_late_read_keeps_its_arrival_and_is_counted_and_an_unstamped_one_goes_at_once():
    line = DelayLine({"*": 1e-6}, scale=100)  # 100 us of wall time
    t0 = 5_000.0
    line.absorb(deque([(b"a", ("h", 1), 0), (b"b", ("h", 1), 0)]),
                deque([_stamp(t0), None]), now=t0 + 0.01)
    assert line.late == 1 and line.unstamped == 1
    items: deque = deque()
    times: deque = deque()
    assert line.release(t0 + 0.01, items, times, 1) == 1  # the limit holds
    # the late one still says when it would have arrived: stamp + delay
    assert items[0][0] == b"a" and times[0] == pytest.approx(t0 + 1e-4)
    assert line.release(t0 + 0.01, items, times, 5) == 1 and items[1][0] == b"b"


#: how far the daemon's stamp-to-engine clock skew may be off (two clock reads apart)
SKEW_READ = 1e-3


def test_the_daemon_delivers_nothing_before_the_paths_delay(tmp_path):
    """A real daemon on loopback with a 40 ms path delay: the engine takes the datagram
    no earlier than its kernel stamp + 40 ms, and is told that time as its arrival. (A
    lower bound, which a slow machine cannot break: the datagram may come later.)"""
    delay = 0.04
    seen: list[tuple[float, float | None]] = []

    async def main() -> None:
        cfg = NicConfig(sock_path=str(tmp_path / "t.sock"), cluster="t", host="t",
                        transports=["uet"], ports={"uet": 0},
                        addresses=["127.0.0.1"], path_delays={"*": delay})
        async with running(cfg) as d:
            slot = d.slots["uet"]
            slot.batch = None  # one datagram per call, through receive_datagram

            def recv(data, addr, now, ecn=0, trimmed=False, arrived=None):
                seen.append((trio.current_time(), arrived))

            slot.engine.receive_datagram = recv
            port = slot.port
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                sent = trio.current_time()
                tx.sendto(b"\0" * 64, ("127.0.0.1", port))
                with trio.fail_after(10):
                    while not seen:
                        await trio.sleep(0.005)
            assert seen[0][0] - sent >= delay * 0.999
            # the arrival is the kernel's stamp (CLOCK_REALTIME) + the delay, moved onto the
            # engine's clock by a skew read from both clocks one after the other: a
            # preemption between the two reads shifts it (a full-suite run here: 0.18 ms)
            assert seen[0][1] is not None and seen[0][1] - sent >= delay - SKEW_READ
            assert slot.delay is not None and slot.delay.held == 1

    trio.run(main)

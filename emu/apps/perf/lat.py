# SPDX-License-Identifier: GPL-2.0-only
"""Latency loops: ping-pong (WRITE, SEND) and one READ at a time.

- write-lat, as perftest's ``write_lat``: each side WRITEs into the other's
  buffer and *polls its own memory* until the message's last byte changes to
  the iteration's stamp (the RC responder places packets in order, so the
  last byte lands last); then it answers.
- send-lat: each side keeps one receive posted (before the message that
  will fill it can arrive) and answers each received message with a send.
- read-lat: the client READs the server's buffer, waits for the completion,
  repeats; the server only provides the data.

Buffers: bytes ``[0, size)`` receive, ``[size, 2·size)`` send. Samples are
taken from each post to the matching arrival (pong, receive or READ
completion), halved for ping-pong as perftest does, so filling and checking
the data is not counted on the measuring side.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from emu.apps.perf.channel import Channel, check
from emu.apps.perf.endpoint import Endpoint, TransportError
from emu.apps.perf.pattern import Pattern, client_stream, server_stream
from emu.core.cq import WcStatus

SIGNAL_EVERY = 16  # sender completions only free the send queue: signal one in 16
BACKOFF_AFTER = 0.002  # seconds of spinning before the poll loop starts to sleep a little


def stamp(i: int) -> int:
    """The last byte of write-lat message ``i``: never 0, never the previous one's."""
    return i % 255 + 1


class Waiter:
    """Spin for an event (memory byte, completion) while watching the side channel.

    The loops run inside the connection's busy-poll (:meth:`Connection.busy_poll`):
    the spinning thread reads the daemon's socket itself, every turn when it
    waits for a completion (``poll_every=1``), every 16th when it waits for
    memory (only the 1-in-16 signaled send completions come that way). A
    completion handed from the API's reader thread to a spinning one cost a
    thread wake-up and a GIL hand-off (measured: docs/measurements.md,
    "Latency"). Spinning calls ``sched_yield``, checks the channel and the
    clock every 64 turns, and naps for 20 µs per turn once it has spun for
    :data:`BACKOFF_AFTER`. ``expect`` names the channel messages that end the
    wait (the server's ``done`` in duration mode); anything else from the peer
    raises.
    """

    def __init__(self, ep: Endpoint, chan: Channel | None, timeout: float,
                 expect: tuple[str, ...] = ()) -> None:
        self.ep, self.chan, self.timeout, self.expect = ep, chan, timeout, expect
        self.poll_socket = ep.dev.conn.poll_socket

    def until(self, ready: Callable[[], bool], what: str, poll_every: int = 16
              ) -> dict[str, Any] | None:
        """None once ``ready()``; a channel message in ``expect`` if one came first.
        ``poll_every``: read the daemon's socket every this many turns (a power of 2)."""
        spins = 0
        start = time.monotonic()
        poll_socket, mask = self.poll_socket, poll_every - 1
        while not ready():
            spins += 1
            if spins & mask == 0:
                poll_socket()
                if ready():
                    break
            if spins & 63 == 0:
                now = time.monotonic()
                if self.chan is not None:
                    msg = self.chan.poll()
                    if msg is not None:
                        return check(msg, self.expect)
                if now - start > self.timeout:
                    self.ep.check()
                    raise TransportError(f"no {what} for {self.timeout:g} wall s")
                if now - start > BACKOFF_AFTER:
                    time.sleep(20e-6)
                    continue
            os.sched_yield()
        return None


def _wc_ok(wc: Any, what: str) -> None:
    if wc.status != WcStatus.SUCCESS:
        st = WcStatus(wc.status)
        raise TransportError(f"{what}: work completion error: {st.describe()} ({st.name})")


def _drain(ep: Endpoint) -> None:
    for wc in ep.send_cq.poll(1 << 16):
        _wc_ok(wc, "send queue")


class LatRun:
    """Per-iteration samples (µs) and the iteration count."""

    def __init__(self, size: int, rtt_factor: int) -> None:
        self.size, self.rtt_factor = size, rtt_factor
        self.samples: list[float] = []

    def add(self, t_post: float, t_done: float) -> None:
        self.samples.append((t_done - t_post) * 1e6 / self.rtt_factor)

    @property
    def iterations(self) -> int:
        return len(self.samples)


def _loop(iters: int, duration: float | None, clock: Callable[[], float]):
    """Iteration numbers until ``iters`` or until ``duration`` has passed."""
    if duration is None:
        yield from range(iters)
        return
    deadline = clock() + duration
    i = 0
    while clock() < deadline:
        yield i
        i += 1


def _areas(ep: Endpoint, size: int) -> tuple[memoryview, memoryview]:
    view = ep.mrs[0].view
    return view[0:size], view[size:2 * size]


def _fill_ping(send: memoryview, pattern: Pattern | None, stream: int, i: int) -> None:
    if pattern is not None:
        pattern.fill(send, stream, i)
    send[-1] = stamp(i)


def _check_pong(recv: memoryview, pattern: Pattern | None, stream: int, i: int,
                what: str) -> None:
    if pattern is not None and len(recv) > 1:
        pattern.check(recv[:-1], stream, i, what)


# -- client ----------------------------------------------------------------------------


def client(ep: Endpoint, remote: list[dict[str, Any]], verb: str, size: int, *, iters: int,
           duration: float | None, pattern: Pattern | None, chan: Channel | None,
           timeout: float, clock: Callable[[], float] = time.perf_counter) -> LatRun:
    """The measuring side's loop, busy-polling the daemon's socket (see :class:`Waiter`)."""
    with ep.dev.conn.busy_poll():
        return _client(ep, remote, verb, size, iters=iters, duration=duration,
                       pattern=pattern, chan=chan, timeout=timeout, clock=clock)


def _client(ep: Endpoint, remote: list[dict[str, Any]], verb: str, size: int, *, iters: int,
            duration: float | None, pattern: Pattern | None, chan: Channel | None,
            timeout: float, clock: Callable[[], float]) -> LatRun:
    qp, mr = ep.qps[0], ep.mrs[0]
    rva, rkey = remote[0]["va"], remote[0]["rkey"]
    recv, send = _areas(ep, size)
    wait = Waiter(ep, chan, timeout)
    run = LatRun(size, 1 if verb == "read" else 2)
    send_sge = [mr.va + size, size, mr.lkey]
    recv_sge = [mr.va, size, mr.lkey]
    recv_cq, send_cq = ep.recv_cq, ep.send_cq
    corked = ep.dev.conn.corked
    last = size - 1
    for i in _loop(iters, duration, clock):
        sig = i % SIGNAL_EVERY == SIGNAL_EVERY - 1
        if verb == "write":
            _fill_ping(send, pattern, client_stream(0), i)
            want = stamp(i)
            t = clock()
            qp.post_write(send_sge, rva, rkey, wr_id=i, signaled=sig, wait=False)
            wait.until(lambda w=want: recv[last] == w, f"write-lat reply {i}")
            run.add(t, clock())
            _check_pong(recv, pattern, server_stream(0), i, f"iteration {i} (the server's WRITE)")
        elif verb == "send":
            if pattern is not None:
                pattern.fill(send, client_stream(0), i)
            with corked():  # the receive for the reply, then the send: one write, in order
                qp.post_recv(recv_sge, wr_id=i, wait=False)  # (held: not timed)
                t = clock()
                qp.post_send(send_sge, wr_id=i, signaled=sig, wait=False)
            wait.until(lambda: len(recv_cq) > 0, f"send-lat reply {i}", poll_every=1)
            run.add(t, clock())
            [wc] = recv_cq.poll(1)
            _wc_ok(wc, f"receive {i}")
            if wc.byte_len != size:
                raise TransportError(f"reply {i}: {wc.byte_len} bytes, expected {size}")
            if pattern is not None:
                pattern.check(recv, server_stream(0), i, f"iteration {i} (the server's SEND)")
        else:  # read
            t = clock()
            qp.post_read(recv_sge, rva, rkey, wr_id=i, wait=False)
            wait.until(lambda: len(send_cq) > 0, f"READ completion {i}", poll_every=1)
            run.add(t, clock())
            [wc] = send_cq.poll(1)
            _wc_ok(wc, f"READ {i}")
            if pattern is not None:
                pattern.check(recv, server_stream(0), 0, f"iteration {i} (READ)")
        if verb != "read" and sig:
            _drain(ep)
    ep.check()
    return run


# -- server ----------------------------------------------------------------------------


def prepare_server(ep: Endpoint, verb: str, size: int, pattern: Pattern | None) -> None:
    """Before "go": clear the receive area, post the first receive, provide READ data."""
    recv, send = _areas(ep, size)
    recv[:] = bytes(size)
    if verb == "read":
        if pattern is not None:
            pattern.fill(recv, server_stream(0), 0)
    elif verb == "send":
        mr = ep.mrs[0]
        ep.qps[0].post_recv([mr.va, size, mr.lkey], wr_id=0)


def prepare_client(ep: Endpoint, size: int) -> None:
    recv, _ = _areas(ep, size)
    recv[:] = bytes(size)


def server(ep: Endpoint, verb: str, size: int, *, iters: int | None, pattern: Pattern | None,
           chan: Channel, timeout: float) -> tuple[int, dict[str, Any] | None]:
    """Answer pings until ``iters`` (or the client's ``done``); (answered, done message)."""
    if verb == "read":
        return 0, None  # nothing to do: the client READs
    with ep.dev.conn.busy_poll():
        return _server(ep, verb, size, iters=iters, pattern=pattern, chan=chan,
                       timeout=timeout)


def _server(ep: Endpoint, verb: str, size: int, *, iters: int | None, pattern: Pattern | None,
            chan: Channel, timeout: float) -> tuple[int, dict[str, Any] | None]:
    qp, mr = ep.qps[0], ep.mrs[0]
    recv, send = _areas(ep, size)
    wait = Waiter(ep, chan, timeout, expect=("done",))
    send_sge = [mr.va + size, size, mr.lkey]
    rva, rkey = ep.remote[0]["va"], ep.remote[0]["rkey"]
    recv_cq = ep.recv_cq
    corked = ep.dev.conn.corked
    last = size - 1
    i = 0
    while iters is None or i < iters:
        sig = i % SIGNAL_EVERY == SIGNAL_EVERY - 1
        if verb == "write":
            want = stamp(i)
            done = wait.until(lambda w=want: recv[last] == w, f"write-lat ping {i}")
            if done is not None:
                return i, done
            _check_pong(recv, pattern, client_stream(0), i, f"iteration {i} (the client's "
                        f"WRITE)")
            _fill_ping(send, pattern, server_stream(0), i)
            qp.post_write(send_sge, rva, rkey, wr_id=i, signaled=sig, wait=False)
        else:
            done = wait.until(lambda: len(recv_cq) > 0, f"send-lat ping {i}", poll_every=1)
            if done is not None:
                return i, done
            [wc] = recv_cq.poll(1)
            _wc_ok(wc, f"receive {i}")
            if wc.byte_len != size:
                raise TransportError(f"ping {i}: {wc.byte_len} bytes, expected {size}")
            if pattern is not None:
                pattern.check(recv, client_stream(0), i, f"iteration {i} (the client's SEND)")
            if pattern is not None:
                pattern.fill(send, server_stream(0), i)
            with corked():  # the next receive (before the reply can be answered), the reply
                if iters is None or i + 1 < iters:
                    qp.post_recv([mr.va, size, mr.lkey], wr_id=i + 1, wait=False)
                qp.post_send(send_sge, wr_id=i, signaled=sig, wait=False)
        if sig:
            _drain(ep)
        i += 1
    ep.check()
    return i, None


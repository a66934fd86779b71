# SPDX-License-Identifier: GPL-2.0-only
"""Receive interrupt coalescing for a NIC daemon's port: when the next read may wait.

Why: a NIC daemon pays for every wake-up — ``epoll_wait``, trio's turn, a
``recvmsg`` that says EAGAIN, the engine's fixed cost per call, an ACK's
send — about 150 µs of CPU on the 2-core VM, however few datagrams it
finds. Woken at every datagram of a 1 Gb/s stream of 9 KB frames (one per
70 µs), both daemons of the pair spent ~60 µs of CPU per data packet, four
times what they spend when busy enough to read in batches, and the sending
one fell behind its port (``tx_late``: the result is not credible). A NIC
answers the same problem with interrupt moderation (``ethtool -C
rx-usecs``): it reads what arrived at most every few tens of microseconds
while a stream lasts. Measured in ``docs/measurements.md`` (Receive
coalescing).

Two rules make the default (``adaptive``); neither touches a ping-pong:

* **stream**: while data arrives at a quarter of the port's line rate or
  more (over the last :data:`WINDOW` of reads), the daemon reads the port at
  most every :attr:`RxCoalescer.hold` — :data:`HOLD_FRAMES` frame times at
  the line rate, at most :data:`HOLD_MAX`, but two frames where that spans
  fewer (up to :data:`HOLD_SLOW_MAX`; slower ports have no stream hold). A
  slower flow, a latency test's lone datagram, the first datagram after a
  pause: read at once. What the wait adds is the
  emulator's, and the transports already keep it out of their figures: a
  UET target's ACK says how long it held the packet (``service_time``, from
  the kernel's receive stamp), so NSCC's round trips leave it out, and the
  initiator leaves the emulator's measured hold out of its window
  (``FlowCtl.emu_hold``).
* **transmit busy**: while the port has :data:`BUSY_MIN` or more of frames
  queued for the wire (its serializer's ``t_free``), nothing the daemon would
  send in answer to what it reads could leave before they have; the read can
  wait until the queue is :data:`GUARD` from running dry. This is the
  sender's side: its ACKs then come in batches instead of one wake-up each.

``--rx-coalesce 0`` turns both off; ``--rx-coalesce 200us`` holds that long
after every read that found data, streams or not (``ethtool``'s fixed
``rx-usecs``: latency tests pay it).
"""

from __future__ import annotations

import math

#: a stream is data at this fraction of the port's line rate or more …
STREAM_FRACTION = 0.25
#: … measured over reads this long (seconds)
WINDOW = 1e-3
#: the stream rule waits this many frame times at the line rate …
HOLD_FRAMES = 8
#: … at most this long (seconds): ~8 frames of 9 KB at 1 Gb/s
HOLD_MAX = 600e-6
#: … or two frame times where :data:`HOLD_MAX` spans fewer, up to this long. Why: at
#: 200 Mb/s (9 KB frames every 348 µs) a 600 µs cap held nothing, every datagram was a
#: wake-up, and the leaf-spine's daemons starved (A/B, UET h1 → h4 with the pipeline:
#: 696 µs holds took the receiver's CPU 187-205 → 139-161 ticks a run, the sender's
#: 207-230 → 178-205, RoCEv2's receiver 211-213 → 120-127, the same goodput). Not
#: longer: two frames at 100 Mb/s (1.4 ms) sent UET into spurious timeouts (23 % of
#: its packets resent, against 0.2-6 % without the hold)
HOLD_SLOW_MAX = 750e-6
#: the transmit rule waits only while this much wire time is queued (seconds) …
BUSY_MIN = 1e-3
#: … and reads again this long before the queue would run dry: the daemon's wake-up, its
#: backlog and the frames it then sends must fit in it (measured: 600 µs kept the pair's
#: UET flow at the same goodput; 100 µs lost 2-3 % of it)
GUARD = 600e-6


class RxCoalescer:
    """When one port's receive loop reads next (sans-IO: times are arguments, seconds of
    ``time.monotonic()``, the clock of the port's serializer).

    ``rate``: the port's line rate (bits/s; None or ``inf``: unpaced, where ``adaptive``
    never waits); ``fixed``: a hold after every read that found data, or None for the
    adaptive rules.
    """

    __slots__ = ("rate", "hold", "fixed", "streaming", "_start", "_bytes")

    def __init__(self, rate: float | None, mtu: int, fixed: float | None = None) -> None:
        self.rate = rate if rate and rate != math.inf else None
        self.fixed = fixed
        if fixed is not None:
            self.hold = fixed
        elif self.rate is None:
            self.hold = 0.0
        else:
            frame_s = (mtu + 14) * 8 / self.rate
            hold = max(min(HOLD_MAX, HOLD_FRAMES * frame_s), 2 * frame_s)
            self.hold = hold if hold <= HOLD_SLOW_MAX else 0.0
        self.streaming = False
        self._start: float | None = None
        self._bytes = 0

    @classmethod
    def for_port(cls, setting: float | None, rate: float | None, mtu: int
                 ) -> RxCoalescer | None:
        """The coalescer for a port under ``--rx-coalesce`` (None: adaptive, 0: off, else a
        fixed hold in seconds), or None when nothing would ever wait."""
        if setting is not None and setting <= 0:
            return None
        co = cls(rate, mtu, setting)
        return co if co.fixed is not None or co.rate is not None else None

    def on_read(self, now: float, nbytes: int) -> None:
        """A read (up to EAGAIN) brought ``nbytes``: measure the arrival rate per window."""
        if self._start is None:
            self._start = now
        self._bytes += nbytes
        elapsed = now - self._start
        if elapsed >= WINDOW:
            self.streaming = (self.rate is not None
                              and self._bytes * 8 >= STREAM_FRACTION * self.rate * elapsed)
            self._start, self._bytes = now, 0

    def paused(self) -> None:
        """A hold ended with nothing to read: the stream paused, the next datagram is read
        at once (a latency test after a bandwidth test is not held)."""
        self.streaming = False
        self._start, self._bytes = None, 0

    def hold_until(self, now: float, tx_free: float, got: bool = True) -> float | None:
        """When to read next (None: wait for the socket and read at once). ``got``: the
        last read found data — the stream rule and a fixed hold follow data only; the
        transmit rule holds whenever the port is busy, also before a datagram wakes the
        daemon (else every ACK would). ``tx_free``: when the port's serializer
        finishes what it was given."""
        if self.fixed is not None:
            return now + self.fixed if got else None
        until = now + self.hold if got and self.streaming and self.hold else None
        if tx_free - now >= BUSY_MIN:
            t = tx_free - GUARD
            until = t if until is None or t > until else until
        return until


#: the longest fixed hold a setting may ask for (seconds)
FIXED_MAX = 0.01


def parse_setting(value: object) -> float | None:
    """``--rx-coalesce`` / ``[nic] rx_coalesce`` → the daemon's setting: ``"adaptive"`` →
    None, ``"off"`` or 0 → 0.0, a time (``"200us"``; a bare number is seconds) → that
    many seconds. ValueError, with the reason, for anything else."""
    from emu.topology.units import UnitError, parse_time

    if value == "adaptive":
        return None
    if value == "off" or value == 0 or value == "0":
        return 0.0
    try:
        t = parse_time(value)
    except UnitError:
        raise ValueError(f'{value!r}: expected "adaptive", "off" (or 0) or a time such as '
                         '"200us"') from None
    if t < 0:
        raise ValueError(f"{value!r}: a hold cannot be negative")
    if t > FIXED_MAX:
        raise ValueError(f"{value!r}: more than 10 ms would stall any transport")
    return t


def describe_coalesce(setting: float | None) -> str:
    """``--rx-coalesce`` as ``emu nicd stats`` shows it: adaptive, off, or the fixed hold."""
    if setting is None:
        return "adaptive"
    return "off" if setting <= 0 else f"{setting * 1e6:g}us"

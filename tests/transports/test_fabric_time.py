# SPDX-License-Identifier: GPL-2.0-only
"""Sans-IO engines run dilated give the same trace in fabric time (issue 34).

Why: time dilation (DESIGN.md, Fabric time) is only sound if the engines cannot tell a
dilated world from a real-time one. Here the in-memory :class:`LossyLink` plays the
dilated world underneath: its clock is the wall clock, its delays are the fabric's ×
scale and its rate the fabric's / scale, exactly as ``emu up`` configures the kernel
from :class:`emu.plan.TimePlan`; the engines are handed fabric time through
:class:`emu.fabricclock.FabricClock`, as the NIC daemon's trio clock does. RoCEv2 and
UET, with seeded loss, reordering and duplication: every datagram on the wire, at its
fabric time, and every completion are the same at scale 1, 2 and 4.

Scales are powers of two and the epoch 0 so that wall = fabric × scale is exact in
floating point: the comparison is of the engines' behaviour, not of rounding.
"""

from __future__ import annotations

from typing import Any

import pytest
from lossy_link import register, roce_pair
from uet_pair import LOSSY as UET_LOSSY
from uet_pair import uet_pair
from uet_pair import write as uet_write

from emu.fabricclock import FabricClock
from emu.plan import TimePlan
from emu.transports.roce import SendWR, Sge

MiB = 1 << 20
RATE = 10e9  # the fabric's link rate, bits/s
DELAY = 5e-6  # the fabric's one-way delay


class Dilated:
    """An engine seen from a world on the wall clock: every time it is handed is
    converted to fabric time, every timer it asks for back to the wall (the NIC
    daemon's one boundary, :mod:`emu.nic.clock`)."""

    def __init__(self, engine: Any, clock: FabricClock) -> None:
        self.engine = engine
        self.clock = clock

    def datagrams_to_send(self, now: float) -> Any:
        return self.engine.datagrams_to_send(self.clock.fabric_at(now))

    def receive_datagram(self, data: Any, src: Any, now: float, **kw: Any) -> None:
        self.engine.receive_datagram(data, src, self.clock.fabric_at(now), **kw)

    def receive_batch(self, items: Any, now: float, **kw: Any) -> None:
        self.engine.receive_batch(items, self.clock.fabric_at(now), **kw)

    def handle_timer(self, now: float) -> None:
        self.engine.handle_timer(self.clock.fabric_at(now))

    def get_timer(self) -> float | None:
        t = self.engine.get_timer()
        return None if t is None else self.clock.wall_at(t)

    def next_event(self) -> Any:
        return self.engine.next_event()


def dilate(link: Any, scale: float) -> FabricClock:
    """Put ``link`` (built in fabric units) on the wall clock of time scale ``scale``: the
    wire's rate and delays through :class:`TimePlan`, as ``emu up`` does the kernel's."""
    tp = TimePlan(scale=scale, why="test")
    clock = tp.clock()
    link.a, link.b = Dilated(link.a, clock), Dilated(link.b, clock)
    link.delay = tp.wall_delay(link.delay)
    link.reorder_delay = tp.wall_delay(link.reorder_delay)
    link.dup_delay = tp.wall_delay(link.dup_delay)
    link.rate = tp.wall_rate(link.rate)
    return clock


def trace(link: Any, clock: FabricClock) -> list[tuple[float, str, bytes]]:
    """Every datagram the engines sent, at its fabric time."""
    return [(clock.fabric_at(t), side, bytes(data)) for t, side, data, _, _ in link.wire]


def roce_run(scale: float) -> tuple[list, list, bytes]:
    rp = roce_pair(seed=3, pmtu=1024, line_rate=RATE, rate=RATE, delay=DELAY,
                   loss=0.01, reorder=0.02, dup=0.01)
    rp.link.wire = []
    clock = dilate(rp.link, scale)
    size = 256 * 1024
    src, dst = register(rp.ma, size), register(rp.mb, size)
    src.view[:] = bytes(range(256)) * (size // 256)
    rp.ea.post_send(rp.qa, SendWR.write(7, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    wcs = [(w.wr_id, w.status) for w in rp.link.completions("a")]
    return trace(rp.link, clock), wcs, bytes(dst.view)


def uet_run(scale: float) -> tuple[list, list, bytes]:
    p = uet_pair(seed=5, rate=RATE, delay=DELAY, **UET_LOSSY)
    p.link.wire = []
    clock = dilate(p.link, scale)
    _, dst, data = uet_write(p, 9, 256 * 1024, seed=2)  # posted at time 0 on both clocks
    p.link.run()
    wcs = [(w.wr_id, w.status) for w in p.link.completions("a")]
    assert bytes(dst.view) == data
    return trace(p.link, clock), wcs, bytes(dst.view)


@pytest.mark.parametrize("run", [roce_run, uet_run], ids=["rocev2", "uet"])
def test_engines_cannot_tell_the_scale(run):
    base = run(1.0)
    assert base[1] and all(s.name == "SUCCESS" for _, s in base[1])
    assert len(base[0]) > 100  # a real transfer through loss, not a handful of datagrams
    for scale in (2.0, 4.0):
        got = run(scale)
        assert got[1] == base[1]
        assert got[2] == base[2]
        assert got[0] == base[0], f"the trace in fabric time differs at scale {scale:g}"


def test_the_wall_world_is_slower_by_the_scale():
    """The same run, read on the wall clock, takes ``scale`` times as long (the world
    underneath really was dilated: this is not a relabelling)."""
    t1 = roce_run(1.0)[0][-1][0]
    rp = roce_pair(seed=3, pmtu=1024, line_rate=RATE, rate=RATE, delay=DELAY,
                   loss=0.01, reorder=0.02, dup=0.01)
    rp.link.wire = []
    dilate(rp.link, 4.0)
    size = 256 * 1024
    src, dst = register(rp.ma, size), register(rp.mb, size)
    src.view[:] = bytes(range(256)) * (size // 256)
    rp.ea.post_send(rp.qa, SendWR.write(7, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    assert rp.link.wire[-1][0] == 4.0 * t1

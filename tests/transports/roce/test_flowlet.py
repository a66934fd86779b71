# SPDX-License-Identifier: GPL-2.0-only
"""RoCEv2 over flowlets: a QP keeps its source port while it sends back to back and
takes another after an idle gap, so an in-order transport changes path without
reordering; the data arrives intact either way."""

from __future__ import annotations

import pytest
from lossy_link import register, roce_pair

from emu.transports.roce import SendWR, Sge
from emu.transports.roce.engine import ROCE_SPORTS

SIZE = 40_000


def _send_two(engine_kw: dict, pause: float) -> tuple[list[set[int]], bytes, bytes]:
    """Two WRITEs ``pause`` fabric seconds apart; the source ports of each one's data."""
    rp = roce_pair(seed=5, cc=None, engine_kw=engine_kw, wire=[])
    src, dst = register(rp.ma, 2 * SIZE), register(rp.mb, 2 * SIZE)
    src.view[:] = bytes(range(256)) * (2 * SIZE // 256) + bytes(2 * SIZE % 256)
    ports = []
    for k in range(2):
        start = len(rp.link.wire)
        rp.ea.post_send(rp.qa, SendWR.write(k, [Sge(src.va + k * SIZE, SIZE, src.lkey)],
                                            dst.va + k * SIZE, dst.rkey))
        rp.link.run()
        ports.append({meta.entropy for _, side, data, _, meta in rp.link.wire[start:]
                      if side == "a" and len(data) > 100})
        rp.link.run(until=rp.link.now + pause)
    assert [wc.ok for wc in rp.link.completions("a")] == [True, True]
    return ports, bytes(src.view), bytes(dst.view)


def test_a_new_flowlet_after_an_idle_gap_takes_another_source_port():
    ports, sent, got = _send_two({"paths": "flowlet", "path_params": {"gap": 20e-6}}, 1e-3)
    assert len(ports[0]) == 1 and len(ports[1]) == 1  # one path per flowlet: no reordering
    assert ports[0] != ports[1]
    assert ports[1] <= set(ROCE_SPORTS)
    assert got == sent


def test_without_a_gap_longer_than_its_setting_the_flowlet_keeps_its_port():
    ports, sent, got = _send_two({"paths": "flowlet", "path_params": {"gap": 1.0}}, 1e-3)
    assert ports[0] == ports[1] and got == sent


def test_fixed_keeps_the_qps_port_for_good():
    ports, _, _ = _send_two({}, 1e-3)
    assert ports[0] == ports[1]


def test_a_spraying_policy_is_refused_for_an_in_order_transport():
    with pytest.raises(ValueError, match="reorder"):
        roce_pair(engine_kw={"paths": "oblivious"})
    with pytest.raises(ValueError, match="gap"):
        roce_pair(engine_kw={"paths": "flowlet", "path_params": {"gap": 0}})

# SPDX-License-Identifier: GPL-2.0-only
"""Event trace: in-memory and JSON-lines sinks, and the cost when disabled."""

import enum
import io
import json
import timeit

from emu.core.trace import (
    EV_PACKET_SENT,
    NULL_TRACE,
    STANDARD_EVENTS,
    Trace,
    read_trace,
    select,
)


class Color(enum.Enum):
    RED = 1


def test_memory_trace_records_events():
    tr = Trace.memory("h1/qp1")
    tr.packet_sent(0.5, psn=7, size=4096)
    tr.packet_received(0.6, psn=7)
    tr.packet_lost(0.7, psn=8, reason="rto")
    tr.packet_retransmitted(0.8, psn=8)
    tr.rate_updated(0.9, rate_bps=50e9, reason="cnp")
    tr.cwnd_updated(1.0, cwnd=12000)
    tr.state_changed(1.1, old="RTS", new="ERR")
    tr.ack_sent(1.2, psn=9)
    tr.child("h1/qp2").event("custom_thing", 1.3, x=1)
    ev = tr.events
    assert [e["name"] for e in ev][:3] == ["packet_sent", "packet_received", "packet_lost"]
    assert ev[0] == {"time": 0.5, "ep": "h1/qp1", "name": EV_PACKET_SENT,
                     "data": {"psn": 7, "size": 4096}}
    assert ev[-1]["ep"] == "h1/qp2" and tr.count == 9
    assert select(ev, "state_changed")[0]["data"] == {"old": "RTS", "new": "ERR"}
    assert len(select(ev, psn=8)) == 2 and select(ev, ep="h1/qp2", x=1)
    assert {"packet_sent", "rate_updated", "ack_sent"} <= STANDARD_EVENTS


def test_stream_trace_is_json_lines():
    buf = io.StringIO()
    tr = Trace.to_stream(buf, "ep0", header={"host": "h1"})
    tr.packet_sent(1e-6, psn=1, payload=b"\x01\x02", code=Color.RED, ranges={3, 1}, pair=(1, 2))
    tr.nack_received(2e-6, code="TRIMMED")
    tr.flush()
    lines = buf.getvalue().splitlines()
    assert json.loads(lines[0]) == {"emu_trace": 1, "time_unit": "s", "host": "h1"}
    recs = read_trace(lines)
    assert recs[0]["data"] == {"psn": 1, "payload": "0102", "code": "RED", "ranges": [1, 3],
                               "pair": [1, 2]}
    assert recs[1]["name"] == "nack_received" and tr.events == []


def test_disabled_trace_costs_nearly_nothing():
    tr = Trace.disabled()
    assert not tr.enabled and not NULL_TRACE.enabled and not tr.child("x").enabled
    tr.packet_sent(0.0, psn=1)
    tr.event("x", 0.0)
    assert tr.events == [] and tr.count == 0
    guarded = min(timeit.repeat("if tr.enabled: tr.packet_sent(0.0, psn=1, size=2)",
                                globals={"tr": tr}, number=100_000, repeat=3))
    empty = min(timeit.repeat("pass", number=100_000, repeat=3))
    assert (guarded - empty) / 100_000 < 2e-7  # ~20 ns on this machine

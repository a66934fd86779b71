# SPDX-License-Identifier: GPL-2.0-only
"""A qlog-like event trace, one JSON object per line.

Why: acceptance checks such as "after NACK TRIMMED the retransmission goes out
well before the RTO" are questions about event timing inside the sans-IO
engines; a machine-readable trace answers them from tests and from real runs
alike, and users can ``jq`` it next to the pcap.

Record shape (after qlog's JSON-SEQ events; ``time`` is the ``now`` the
engine was given, in seconds, never read from a clock here)::

    {"time": 0.001234, "ep": "h1/qp17", "name": "packet_sent", "data": {"psn": 5, ...}}

The first line a file sink gets is a header ``{"emu_trace": 1, "time_unit": "s",
...}``. Standard event names are the ``EV_*`` constants; transports may add
their own (snake_case).

Cost when off: a disabled trace is one attribute test. Hot paths write::

    if trace.enabled:
        trace.packet_sent(now, psn=psn, size=len(dgram))

so not even the keyword arguments are built; the methods also return at once
when disabled, so unguarded calls are correct, only slightly dearer.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from typing import IO, Any

TRACE_VERSION = 1

EV_PACKET_SENT = "packet_sent"
EV_PACKET_RECEIVED = "packet_received"
EV_PACKET_LOST = "packet_lost"
EV_PACKET_RETRANSMITTED = "packet_retransmitted"
EV_PACKET_DROPPED = "packet_dropped"  # discarded on receipt (bad, duplicate, out of window)
EV_ACK_SENT = "ack_sent"
EV_ACK_RECEIVED = "ack_received"
EV_NACK_SENT = "nack_sent"
EV_NACK_RECEIVED = "nack_received"
EV_RATE_UPDATED = "rate_updated"
EV_CWND_UPDATED = "cwnd_updated"
EV_STATE_CHANGED = "state_changed"
EV_TIMER_FIRED = "timer_fired"
EV_COMPLETION = "completion"

STANDARD_EVENTS = frozenset({
    EV_PACKET_SENT, EV_PACKET_RECEIVED, EV_PACKET_LOST, EV_PACKET_RETRANSMITTED,
    EV_PACKET_DROPPED, EV_ACK_SENT, EV_ACK_RECEIVED, EV_NACK_SENT, EV_NACK_RECEIVED,
    EV_RATE_UPDATED, EV_CWND_UPDATED, EV_STATE_CHANGED, EV_TIMER_FIRED, EV_COMPLETION,
})


def _default(o: Any) -> Any:
    """JSON for the values engines naturally pass: enums, bytes, sets."""
    if isinstance(o, enum.Enum):
        return o.name
    if isinstance(o, bytes | bytearray | memoryview):
        return bytes(o).hex()
    if isinstance(o, set | frozenset | tuple):
        return sorted(o) if isinstance(o, set | frozenset) else list(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"cannot trace a {type(o).__name__}")


class _Sink:
    """Where records go; shared by a trace and its per-endpoint children."""

    __slots__ = ("stream", "events", "count")

    def __init__(self, stream: IO[str] | None, keep: bool) -> None:
        self.stream = stream
        self.events: list[dict[str, Any]] | None = [] if keep else None
        self.count = 0

    def put(self, rec: dict[str, Any]) -> None:
        self.count += 1
        if self.events is not None:
            self.events.append(rec)
        if self.stream is not None:
            self.stream.write(json.dumps(rec, separators=(",", ":"), default=_default) + "\n")


class Trace:
    """An event trace bound to one endpoint id.

    Build with :meth:`to_stream` (JSON lines to a file-like), :meth:`memory`
    (records kept in :attr:`events`, for tests) or :meth:`disabled`; derive
    per-endpoint traces sharing the sink with :meth:`child`.
    """

    __slots__ = ("enabled", "endpoint", "_sink")

    def __init__(self, sink: _Sink | None, endpoint: str = "") -> None:
        self._sink = sink
        self.enabled = sink is not None
        self.endpoint = endpoint

    # -- construction -------------------------------------------------------

    @classmethod
    def disabled(cls) -> Trace:
        return cls(None)

    @classmethod
    def memory(cls, endpoint: str = "") -> Trace:
        return cls(_Sink(None, keep=True), endpoint)

    @classmethod
    def to_stream(cls, stream: IO[str], endpoint: str = "", *, keep: bool = False,
                  header: dict[str, Any] | None = None) -> Trace:
        """Write JSON lines to ``stream`` (opened by the caller: no I/O here)."""
        rec = {"emu_trace": TRACE_VERSION, "time_unit": "s", **(header or {})}
        stream.write(json.dumps(rec, separators=(",", ":"), default=_default) + "\n")
        return cls(_Sink(stream, keep), endpoint)

    def child(self, endpoint: str) -> Trace:
        """A trace for another endpoint writing to the same place (or disabled too)."""
        return Trace(self._sink, endpoint)

    @property
    def events(self) -> list[dict[str, Any]]:
        """Records kept in memory (empty when not keeping)."""
        if self._sink is None or self._sink.events is None:
            return []
        return self._sink.events

    @property
    def count(self) -> int:
        return self._sink.count if self._sink is not None else 0

    def flush(self) -> None:
        if self._sink is not None and self._sink.stream is not None:
            self._sink.stream.flush()

    # -- recording ----------------------------------------------------------

    def event(self, name: str, now: float, **data: Any) -> None:
        """Record ``name`` at ``now`` with ``data`` fields."""
        if self._sink is None:
            return
        self._sink.put({"time": now, "ep": self.endpoint, "name": name, "data": data})

    def packet_sent(self, now: float, **data: Any) -> None:
        if self._sink is not None:
            self._sink.put({"time": now, "ep": self.endpoint, "name": EV_PACKET_SENT,
                            "data": data})

    def packet_received(self, now: float, **data: Any) -> None:
        if self._sink is not None:
            self._sink.put({"time": now, "ep": self.endpoint, "name": EV_PACKET_RECEIVED,
                            "data": data})

    def packet_lost(self, now: float, **data: Any) -> None:
        self.event(EV_PACKET_LOST, now, **data)

    def packet_retransmitted(self, now: float, **data: Any) -> None:
        self.event(EV_PACKET_RETRANSMITTED, now, **data)

    def packet_dropped(self, now: float, **data: Any) -> None:
        self.event(EV_PACKET_DROPPED, now, **data)

    def ack_sent(self, now: float, **data: Any) -> None:
        self.event(EV_ACK_SENT, now, **data)

    def ack_received(self, now: float, **data: Any) -> None:
        self.event(EV_ACK_RECEIVED, now, **data)

    def nack_sent(self, now: float, **data: Any) -> None:
        self.event(EV_NACK_SENT, now, **data)

    def nack_received(self, now: float, **data: Any) -> None:
        self.event(EV_NACK_RECEIVED, now, **data)

    def rate_updated(self, now: float, **data: Any) -> None:
        self.event(EV_RATE_UPDATED, now, **data)

    def cwnd_updated(self, now: float, **data: Any) -> None:
        self.event(EV_CWND_UPDATED, now, **data)

    def state_changed(self, now: float, old: Any, new: Any, **data: Any) -> None:
        self.event(EV_STATE_CHANGED, now, old=old, new=new, **data)

    def timer_fired(self, now: float, **data: Any) -> None:
        self.event(EV_TIMER_FIRED, now, **data)

    def completion(self, now: float, **data: Any) -> None:
        self.event(EV_COMPLETION, now, **data)


#: A shared disabled trace for engines built without one.
NULL_TRACE = Trace.disabled()


def read_trace(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Parse JSON-lines trace text back into records (header line skipped)."""
    out = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        rec = json.loads(line)
        if "emu_trace" in rec:
            continue
        out.append(rec)
    return out


def select(events: Iterable[dict[str, Any]], name: str | None = None,
           ep: str | None = None, **fields: Any) -> list[dict[str, Any]]:
    """Records matching a name, endpoint and ``data`` field values (for tests, tools)."""
    return [e for e in events
            if (name is None or e["name"] == name) and (ep is None or e["ep"] == ep)
            and all(e["data"].get(k) == v for k, v in fields.items())]

# SPDX-License-Identifier: GPL-2.0-only
"""Priority flow control's bookkeeping: which ingress ports a switch has paused, for which
class, on behalf of which egress ports (sans-IO).

Why apart from the queues: both datapaths pause by the same rule — the user-space queue
model (:mod:`emu.switch.queue`) from its class queues, the kernel datapath's agent
(:mod:`emu.switch.kernel_pfc`) from the backlog the tc BPF program keeps — so the rule
lives here once:

* a lossless class whose queue on an egress port exceeds ``xoff`` pauses every ingress
  port that has packets of that class queued there, and any that sends more while it
  is paused;
* at or below ``xon`` the egress port releases all of them;
* an ingress port paused by several egress ports stays paused until the last releases;
* while anything is held, XOFF goes again every ``refresh`` (before the upstream's
  pause quanta run out).

The caller turns :class:`PauseEvent` into 802.1Qbb frames. Times are fabric seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PauseEvent:
    """Tell ingress ``indev`` to pause (``pause``) or resume class ``cls``."""

    indev: Any
    cls: int
    pause: bool


class PauseBook:
    """The paused state of every egress port of one switch (module docstring)."""

    def __init__(self, refresh: float) -> None:
        self.refresh = refresh
        #: egress port -> its lossless classes in XOFF -> the ingress ports it holds
        self.paused: dict[str, dict[int, set[Any]]] = {}
        #: egress port -> when it went XOFF (None: not paused)
        self.since: dict[str, float | None] = {}
        #: egress port -> {"xoff", "xon", "paused_time"}
        self.counts: dict[str, dict[str, float]] = {}
        #: (indev, cls) -> egress ports holding it paused
        self._holds: dict[tuple[Any, int], set[str]] = {}
        self.refresh_at: float | None = None
        self.events: list[PauseEvent] = []

    def _count(self, port: str) -> dict[str, float]:
        c = self.counts.get(port)
        if c is None:
            c = self.counts[port] = {"xoff": 0, "xon": 0, "paused_time": 0.0}
        return c

    def is_paused(self, port: str, cls: int) -> bool:
        return cls in self.paused.get(port, ())

    def check(self, now: float, port: str, cls: int, queued: int, xoff: int, xon: int,
              holders: Callable[[], Iterable[Any]], indev: Any = None) -> None:
        """Class ``cls`` of egress ``port`` holds ``queued`` bytes at ``now``; ``holders()``
        names the ingress ports with packets of it queued (asked only when it goes XOFF);
        ``indev``: the ingress a packet just came from (None: a departure)."""
        paused = self.paused.setdefault(port, {})
        held = paused.get(cls)
        if held is None:
            if queued > xoff:
                paused[cls] = set()
                self._count(port)["xoff"] += 1
                if self.since.get(port) is None:
                    self.since[port] = now
                for d in holders():
                    if d is not None:
                        self._hold(now, port, cls, d)
        elif queued <= xon:
            del paused[cls]
            self._count(port)["xon"] += 1
            for d in held:
                self._release(port, cls, d)
            since = self.since.get(port)
            if not paused and since is not None:
                self._count(port)["paused_time"] += now - since
                self.since[port] = None
        elif indev is not None and indev not in held:
            self._hold(now, port, cls, indev)

    def join(self, now: float, port: str, cls: int, indevs: Iterable[Any]) -> None:
        """Ingress ports found sending into a paused class: each is paused too (what
        :meth:`check` does for one ``indev``, for a caller that sees several at once)."""
        held = self.paused.get(port, {}).get(cls)
        if held is not None:
            for d in indevs:
                if d is not None and d not in held:
                    self._hold(now, port, cls, d)

    def _hold(self, now: float, port: str, cls: int, indev: Any) -> None:
        self.paused[port][cls].add(indev)
        h = self._holds.setdefault((indev, cls), set())
        if not h:
            self.events.append(PauseEvent(indev, cls, True))
        h.add(port)
        if self.refresh_at is None:
            self.refresh_at = now + self.refresh

    def _release(self, port: str, cls: int, indev: Any) -> None:
        h = self._holds.get((indev, cls))
        if h is None:
            return
        h.discard(port)
        if not h:
            del self._holds[(indev, cls)]
            self.events.append(PauseEvent(indev, cls, False))
        if not self._holds:
            self.refresh_at = None

    def tick(self, now: float) -> None:
        """Re-send XOFF for every held (indev, class) when the refresh is due."""
        if self.refresh_at is None or now < self.refresh_at:
            return
        for indev, cls in self._holds:
            self.events.append(PauseEvent(indev, cls, True))
        self.refresh_at = now + self.refresh if self._holds else None

    def take_events(self) -> list[PauseEvent]:
        ev, self.events = self.events, []
        return ev

    def port_counts(self, port: str, now: float | None = None) -> dict[str, float]:
        """``xoff``, ``xon`` and ``paused_time`` of an egress port (a pause still in
        progress counted up to ``now``)."""
        c = dict(self._count(port))
        since = self.since.get(port)
        if now is not None and since is not None:
            c["paused_time"] += now - since
        return c

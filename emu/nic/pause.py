# SPDX-License-Identifier: GPL-2.0-only
"""PFC (802.1Qbb) pause frames arriving on a NIC port, turned into engine pauses.

The switch pipeline (``emu/switch/pfc.py``, ``docs/switch.md``) sends real
pause frames (layout: :mod:`emu.wire.pfc`) out of the port that feeds a
congested lossless queue. A NIC must stop sending that priority for
``quanta × quantum`` seconds (a refresh extends it; quanta 0 resumes at
once). Per port the daemon opens one :class:`PortPause`: an ``AF_PACKET``
socket bound to the interface for ethertype 0x8808 only (the kernel hands it
nothing else), in the host's namespace. The daemon waits for it to become
readable, :meth:`PortPause.drain` returns ``(priority, until)`` for each
enabled priority, and the daemon calls ``engine.pause(priority, until)`` on
every engine and pumps them (what to hold is the engine's business: its class
map, ``DSCP >> 3`` by default, equals the switch's, and PFC priority = class % 8).
The frame parsing and the pause bookkeeping are :class:`emu.wire.pfc.PauseState`,
shared with the switch's test listener.
"""

from __future__ import annotations

import socket
from typing import Any

from emu.wire.pfc import DEFAULT_QUANTUM, ETH_P_PAUSE, PauseState, parse

__all__ = ["DEFAULT_QUANTUM", "PortPause", "parse"]


class PortPause:
    """The pause state one NIC port's peer asked for (open it in the port's namespace)."""

    def __init__(self, ifname: str, quantum: float = DEFAULT_QUANTUM) -> None:
        self.ifname = ifname
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_PAUSE))
        try:
            s.bind((ifname, ETH_P_PAUSE))
            s.setblocking(False)
        except BaseException:
            s.close()
            raise
        self.sock = s
        self.state = PauseState(quantum)

    def fileno(self) -> int:
        return self.sock.fileno()

    def drain(self, now: float) -> list[tuple[int, float]]:
        """Read every queued frame (BlockingIOError ends it); return (priority, until) per
        enabled priority in arrival order — ``until <= now`` means resume."""
        st = self.state
        st.expire(now)
        out: list[tuple[int, float]] = []
        while True:
            try:
                frame = self.sock.recv(256)
            except BlockingIOError:
                return out
            out += [(prio, until) for prio, _, until in st.on_frame(frame, now)]

    def counters(self, now: float) -> dict[str, Any]:
        """Frames, XOFF/XON and paused seconds (an ongoing pause counted up to ``now``)."""
        return self.state.counters(now)

    def close(self) -> None:
        self.sock.close()

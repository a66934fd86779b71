# SPDX-License-Identifier: GPL-2.0-only
"""PFC (802.1Qbb) pause frames arriving on a NIC port, turned into engine pauses.

The switch pipeline (``emu/switch/pfc.py``, ``docs/switch.md``) sends real
pause frames — ethertype 0x8808, opcode 0x0101, a class-enable vector and 8
quanta — out of the port that feeds a congested lossless queue. A NIC must
stop sending that priority for ``quanta × quantum`` seconds (a refresh
extends it; quanta 0 resumes at once). Per port the daemon opens one
:class:`PortPause`: an ``AF_PACKET`` socket bound to the interface for
ethertype 0x8808 only (the kernel hands it nothing else), in the host's
namespace. The daemon waits for it to become readable, :meth:`drain` returns
``(priority, until)`` for each enabled priority, and the daemon calls
``engine.pause(priority, until)`` on every engine and pumps them (what to
hold is the engine's business: its class map, ``DSCP >> 3`` by default,
equals the switch's, and PFC priority = class % 8).

Why not :class:`emu.switch.pfc.PauseListener` itself: that module imports
``emu.fabric`` (pyroute2), which costs the daemon ~130 ms of start-up and
~11 MiB of RSS. The frame layout here is the same (``tests/test_nic_pause.py``
feeds frames built by ``emu.switch.pfc.build``), and so is the bookkeeping:
frames, XOFF/XON per priority and paused time (from an XOFF until its expiry
or an XON).
"""

from __future__ import annotations

import socket
import struct
from typing import Any

ETH_P_PAUSE = 0x8808
PFC_OPCODE = 0x0101
DEFAULT_QUANTUM = 512e-9  # one quantum = 512 bit times at 1 Gb/s, as the switch assumes
_BODY = struct.Struct("!HH8H")


def parse(frame: bytes | bytearray | memoryview) -> dict[int, int] | None:
    """Priority → quanta of the enabled priorities, or None if not a PFC frame."""
    if len(frame) < 14 + _BODY.size or frame[12:14] != b"\x88\x08":
        return None
    op, vec, *q = _BODY.unpack_from(frame, 14)
    if op != PFC_OPCODE:
        return None
    return {p: q[p] for p in range(8) if vec >> p & 1}


class PortPause:
    """The pause state one NIC port's peer asked for (open it in the port's namespace)."""

    def __init__(self, ifname: str, quantum: float = DEFAULT_QUANTUM) -> None:
        self.ifname = ifname
        self.quantum = quantum
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_PAUSE))
        try:
            s.bind((ifname, ETH_P_PAUSE))
            s.setblocking(False)
        except BaseException:
            s.close()
            raise
        self.sock = s
        self.until = [0.0] * 8
        self._since: list[float | None] = [None] * 8
        self.paused_time = [0.0] * 8
        self.frames = self.xoff = self.xon = self.malformed = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def drain(self, now: float) -> list[tuple[int, float]]:
        """Read every queued frame (BlockingIOError ends it); return (priority, until) per
        enabled priority in arrival order — ``until <= now`` means resume."""
        self._expire(now)
        out: list[tuple[int, float]] = []
        while True:
            try:
                frame = self.sock.recv(256)
            except BlockingIOError:
                return out
            q = parse(frame)
            if q is None:
                self.malformed += 1
                continue
            self.frames += 1
            for prio, n in q.items():
                if n:
                    self.xoff += 1
                    until = now + n * self.quantum
                    if self._since[prio] is None:
                        self._since[prio] = now
                else:
                    self.xon += 1
                    until = now
                    self._end(prio, now)
                self.until[prio] = until
                out.append((prio, until))

    def _expire(self, now: float) -> None:
        for p in range(8):
            if self._since[p] is not None and self.until[p] <= now:
                self._end(p, self.until[p])

    def _end(self, prio: int, t: float) -> None:
        s = self._since[prio]
        if s is not None:
            self.paused_time[prio] += max(0.0, t - s)
            self._since[prio] = None

    def counters(self, now: float) -> dict[str, Any]:
        """Frames, XOFF/XON and paused seconds (an ongoing pause counted up to ``now``)."""
        self._expire(now)
        paused = [t + (now - s if s is not None else 0.0)
                  for t, s in zip(self.paused_time, self._since, strict=True)]
        return {"frames": self.frames, "xoff": self.xoff, "xon": self.xon,
                "malformed": self.malformed, "paused_s": round(sum(paused), 6),
                "paused_s_by_priority": {str(p): round(v, 6) for p, v in enumerate(paused) if v},
                "paused_now": [p for p in range(8) if self.until[p] > now]}

    def close(self) -> None:
        self.sock.close()

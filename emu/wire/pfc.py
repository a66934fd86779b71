# SPDX-License-Identifier: GPL-2.0-only
"""IEEE 802.1Qbb priority flow control (PFC) frames and the pause state they set.

Frame (60 bytes, no FCS on veth)::

    dst 01:80:c2:00:00:01 | src | 0x8808 | opcode 0x0101 | class-enable vector u16
    | 8 × quanta u16 (priority 0..7) | zero padding

A quantum is 512 bit times of the link; emu's links have emulated rates, so
both ends agree on ``quantum`` seconds (default 512 ns: 1 Gb/s). Quanta 0
for an enabled priority means "resume now" (XON).

Why here, in ``emu.wire``: the switch daemon builds these frames
(``emu.switch.pfc``) and both a NIC daemon (``emu.nic.pause``) and a test
sender honour them, with the same bookkeeping. This module imports nothing
heavy, so the NIC daemon keeps its start-up time and memory (the switch
module pulls in pyroute2).
"""

from __future__ import annotations

import struct
from typing import Any

ETH_P_PAUSE = 0x8808
PFC_OPCODE = 0x0101
PFC_DST = bytes.fromhex("0180c2000001")
DEFAULT_QUANTUM = 512e-9
MAX_QUANTA = 0xFFFF
_BODY = struct.Struct("!HH8H")
_ETHERTYPE = struct.Struct("!H")


def build(src_mac: bytes, quanta: dict[int, int]) -> bytes:
    """A PFC frame: ``quanta`` maps priority (0..7) to pause quanta (0 = resume)."""
    vec = 0
    q = [0] * 8
    for prio, n in quanta.items():
        if not 0 <= prio < 8:
            raise ValueError(f"PFC priority {prio} is not 0..7")
        if not 0 <= n <= MAX_QUANTA:
            raise ValueError(f"PFC quanta {n} is not 0..65535")
        vec |= 1 << prio
        q[prio] = n
    frame = PFC_DST + src_mac + _ETHERTYPE.pack(ETH_P_PAUSE) + _BODY.pack(PFC_OPCODE, vec, *q)
    return frame + b"\0" * (60 - len(frame))


def parse(frame: bytes | bytearray | memoryview) -> dict[int, int] | None:
    """Priority → quanta of the enabled priorities, or None if not a PFC frame."""
    if len(frame) < 14 + _BODY.size or _ETHERTYPE.unpack_from(frame, 12)[0] != ETH_P_PAUSE:
        return None
    op, vec, *q = _BODY.unpack_from(frame, 14)
    if op != PFC_OPCODE:
        return None
    return {p: q[p] for p in range(8) if vec >> p & 1}


class PauseState:
    """Which priorities a peer has paused, and for how long they were paused in all.

    Feed it each received frame (:meth:`on_frame`); a pause lasts ``quanta ×
    quantum`` unless refreshed, quanta 0 ends it at once. Counts frames,
    malformed frames, XOFF/XON per enabled priority and paused seconds (from
    an XOFF until its expiry or an XON)."""

    def __init__(self, quantum: float = DEFAULT_QUANTUM) -> None:
        self.quantum = quantum
        self.until = [0.0] * 8
        self._since: list[float | None] = [None] * 8
        self.paused_time = [0.0] * 8
        self.frames = self.xoff = self.xon = self.malformed = 0

    def on_frame(self, frame: bytes | bytearray | memoryview, now: float
                 ) -> list[tuple[int, int, float]]:
        """Apply one received frame: ``(priority, quanta, until)`` per enabled priority
        (``until <= now`` means resume); [] and counted when it is not a PFC frame."""
        q = parse(frame)
        if q is None:
            self.malformed += 1
            return []
        self.frames += 1
        out = []
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
            out.append((prio, n, until))
        return out

    def expire(self, now: float) -> None:
        """Close the accounting of pauses that ran out by ``now``."""
        for p in range(8):
            if self._since[p] is not None and self.until[p] <= now:
                self._end(p, self.until[p])

    def _end(self, prio: int, t: float) -> None:
        s = self._since[prio]
        if s is not None:
            self.paused_time[prio] += max(0.0, t - s)
            self._since[prio] = None

    def paused(self, prio: int, now: float) -> bool:
        return self.until[prio] > now

    def counters(self, now: float) -> dict[str, Any]:
        """Frames, XOFF/XON and paused seconds (an ongoing pause counted up to ``now``)."""
        self.expire(now)
        paused = [t + (now - s if s is not None else 0.0)
                  for t, s in zip(self.paused_time, self._since, strict=True)]
        return {"frames": self.frames, "xoff": self.xoff, "xon": self.xon,
                "malformed": self.malformed, "paused_s": round(sum(paused), 6),
                "paused_s_by_priority": {str(p): round(v, 6) for p, v in enumerate(paused) if v},
                "paused_now": [p for p in range(8) if self.until[p] > now]}

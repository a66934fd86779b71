# SPDX-License-Identifier: GPL-2.0-only
"""How a datagram leaves an engine: the IP/UDP fields it owns (:class:`TxMeta`) and
the two shapes that spare the daemon a copy (:class:`Gather`, :class:`Run`).

Why in ``emu.core``: every engine (RoCEv2, UET, MRC, the NIC's loopback)
emits them and the NIC daemon consumes them, so they belong below both
(issue #15: "Gather and Run move there too"). :mod:`emu.transports.base`
re-exports them as part of the engine contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A peer address as the socket layer gives it: ("10.0.0.2", 4791) or an IPv6 4-tuple.
Addr = tuple[Any, ...]

ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3


@dataclass(frozen=True, slots=True)
class TxMeta:
    """How the daemon must send one datagram — the few IP/UDP fields a transport owns.

    ``entropy`` is the UDP source port (the ECMP hash input: RoCE keeps one per
    QP, spraying transports vary it per packet); ``dscp`` and ``ecn`` make the
    IP TOS byte (``dscp << 2 | ecn``), so the switch pipeline classifies and
    ECN-marks the packet. Engines reuse one instance per flow: treat it as
    read-only and compare with ``is`` to batch (GSO needs one destination and
    one source port per send).

    ``label`` and ``outer`` are for MRC's STEV and SRv6 EV formats, which put part
    of the entropy in the IPv6 flow label and (SRv6) the path in an outer IPv6
    header whose destination is a uSID container: the daemon then builds the
    frame itself (:mod:`emu.nic.frames`) — a UDP socket can set neither per
    packet. ``label`` None: the kernel's own flow label; ``outer`` None: no
    encapsulation, else the outer destination's 16 bytes.
    """

    entropy: int
    dscp: int = 0
    ecn: int = ECN_NOT_ECT
    label: int | None = None
    outer: bytes | None = None

    @property
    def tos(self) -> int:
        return (self.dscp << 2) | self.ecn


class Gather:
    """One datagram handed over in pieces: header, payload, tail — sent by scatter-gather.

    Why: a bulk RDMA packet is 12 header bytes around 4 KiB that already sit in
    registered memory. Joining them into one buffer copied every byte once
    more in Python (~8 % of a sending daemon). The daemon instead passes the
    three pieces to ``sendmsg`` as an iovec (the kernel gathers them, as a NIC
    DMAs from the buffer), and seals a trailer such as the RoCE ICRC into
    :attr:`tail` piece by piece. ``body`` is a view of the application's
    memory, exactly as RDMA hardware reads it at send time.

    Only engines built for a daemon emit these (``gather=True``); sans-IO
    tests and in-memory links get plain ``bytearray`` datagrams. ``len()`` is
    the datagram's size; ``bytes()`` joins the pieces (for traces and tests).
    """

    __slots__ = ("head", "body", "tail", "size")

    def __init__(self, head: bytearray, body: memoryview, tail: bytearray,
                 size: int = -1) -> None:
        self.head = head
        self.body = body
        self.tail = tail
        self.size = size if size >= 0 else len(head) + len(body) + len(tail)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join((self.head, self.body, self.tail))

    def __getitem__(self, i: int | slice) -> int | bytes:
        return bytes(self)[i]


class Run:
    """``count`` datagrams to one destination, each a header from ``heads`` followed by its
    slice of one payload: the bulk of a message in one object instead of one
    :class:`Gather`, header object and queue entry per packet.

    Why: a sprayed transport's middles (UET) differ from packet to packet only in
    PSN, offsets and entropy. Built and queued one by one (header ``pack``,
    ``Gather``, queue tuple each), they cost the sending daemon ~1 µs more per
    8 KiB packet than this (measured A/B): the engine writes all the headers with
    a few C-level slice operations (:func:`emu.transports.uet.fastpath.middle_headers`)
    and the daemon's frame ring (:mod:`emu.nic.frames`) copies header and payload
    slices straight into its frames — as a NIC is handed one descriptor for a burst.

    Datagram ``i`` is ``heads[i * hlen:(i + 1) * hlen]`` + ``payload[i * seg:(i + 1) * seg]``
    + ``tlen`` zero bytes, and leaves with ``metas[i]``. The zero tail is a trailer the
    daemon's framing fills in (the RoCEv2 ICRC: RoCEv2 middles are runs too, differing
    only in PSN and AckReq). Only engines asked for runs (``runs=True``, the daemon's)
    emit them; :func:`expand` turns them back into single datagrams, byte for byte
    what the engine would otherwise have sent. ``done`` is the consumer's cursor:
    datagrams before it have left.
    """

    __slots__ = ("heads", "hlen", "payload", "seg", "metas", "count", "size", "done", "tlen")

    def __init__(self, heads: bytes | bytearray, hlen: int, payload: memoryview, seg: int,
                 metas: list[TxMeta], tlen: int = 0) -> None:
        self.heads = heads
        self.hlen = hlen
        self.payload = payload
        self.seg = seg
        self.metas = metas
        self.tlen = tlen
        self.count = len(metas)
        self.size = self.count * (hlen + seg + tlen)
        self.done = 0

    def __len__(self) -> int:
        return self.size

    def datagram(self, i: int) -> Gather:
        """Datagram ``i`` as a :class:`Gather` (header copied, payload a view, a zero
        tail of ``tlen`` bytes for the framing)."""
        h, s, t = self.hlen, self.seg, self.tlen
        return Gather(bytearray(self.heads[i * h:(i + 1) * h]),
                      self.payload[i * s:(i + 1) * s], bytearray(t), h + s + t)

    def rest(self, addr: Addr) -> list[tuple[Gather, Addr, TxMeta]]:
        """The datagrams not sent yet (from ``done``), as ``(Gather, addr, meta)``."""
        return [(self.datagram(i), addr, self.metas[i]) for i in range(self.done, self.count)]


def expand(out: list[tuple[Any, Addr, Any]]) -> list[tuple[Any, Addr, TxMeta]]:
    """``datagrams_to_send`` output with every :class:`Run` opened into its datagrams."""
    if not any(type(d) is Run for d, _, _ in out):
        return out
    res: list[tuple[Any, Addr, TxMeta]] = []
    for d, a, m in out:
        if type(d) is Run:
            res += d.rest(a)
        else:
            res.append((d, a, m))
    return res

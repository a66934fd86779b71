# SPDX-License-Identifier: GPL-2.0-only
"""One side's verbs resources: the device, a buffer + MR + QP per QP, two CQs.

Each QP has its own shared-memory buffer, cut into *slots* of one message:
iteration ``k`` uses slot ``k % slots`` on both sides (the sender's source,
the receiver's target), so a message's buffer is never rewritten while it
is in flight and the receiver knows where each iteration landed. Buffers
are capped at :data:`BUF_CAP` bytes per QP (or one message, if larger); with
large messages that caps the posts in flight at ``slots`` (perftest's cycle
buffer plays the same role).
"""

from __future__ import annotations

from typing import Any

from emu.api import QP, DaemonDown, Device, NicError, exchange
from emu.api.client import MR
from emu.core.memory import SharedBuffer

BUF_CAP = 16 << 20


class SetupError(Exception):
    """The NIC or the peer could not be set up (exit status 2)."""


class TransportError(Exception):
    """A work completion failed or the daemon went away mid-run (exit status 1)."""


def slot_count(size: int, depth: int) -> int:
    """Message slots per QP for ``size``-byte messages and ``depth`` in flight."""
    return max(1, min(depth, BUF_CAP // max(size, 1)))


def buffer_size(sizes: list[int], depth: int, lat: bool) -> int:
    """Bytes per QP buffer: a receive and a send area (latency tests), else slots."""
    if lat:
        return 2 * max(sizes)
    return max(slot_count(s, depth) * s for s in sizes)


def open_device(timeout: float) -> Device:
    """The NIC daemon serving this host (namespace), or :class:`SetupError` (a daemon not
    running says so itself: which one, and that it exited)."""
    try:
        return Device.open(timeout=timeout)
    except DaemonDown as e:
        raise SetupError(str(e)) from None
    except (OSError, NicError) as e:
        raise SetupError(f"cannot open the NIC daemon: {e}") from None


class Endpoint:
    """``nqp`` QPs on ``dev`` (which the endpoint closes when it is closed)."""

    def __init__(self, dev: Device, nqp: int, buf_size: int, *, mtu: int | None, outs: int,
                 cqe: int, transport: str = "roce", qp_timeout: int | None = None) -> None:
        self.dev = dev
        # a refused pipelined post is reported by check() (a TransportError that names it),
        # not raised by the client library in the middle of a timed loop
        dev.conn.raise_pipelined = False
        self.transport = transport
        self.bufs: list[SharedBuffer] = []
        self.mrs: list[MR] = []
        self.qps: list[QP] = []
        self.local: list[dict[str, Any]] = []  # our connection data, once :meth:`infos` ran
        self.remote: list[dict[str, Any]] = []  # the peer's connection data, once connected
        try:
            self.send_cq = self.dev.create_cq(cqe)
            self.recv_cq = self.dev.create_cq(cqe)
            attrs: dict[str, Any] = {"max_rd_atomic": outs, "max_dest_rd_atomic": outs}
            if mtu is not None:
                attrs["pmtu"] = mtu
            if qp_timeout is not None and transport == "roce":
                attrs["timeout"] = qp_timeout  # the local ACK timeout (perftest's -u)
            for _ in range(nqp):
                buf = self.dev.alloc_buffer(buf_size)
                self.bufs.append(buf)
                self.mrs.append(self.dev.reg_mr(buf))
                self.qps.append(self.dev.create_qp(self.send_cq, self.recv_cq,
                                                   transport=transport, **attrs))
        except (OSError, NicError) as e:
            self.close()
            raise SetupError(f"cannot create QPs: {e}") from None
        self.by_qpn = {qp.qpn: i for i, qp in enumerate(self.qps)}

    @property
    def device(self) -> str:
        a = self.dev.attrs
        return f"emu-{self.transport} ({a.get('cluster', '')}:{a.get('host', '')})"

    @property
    def mtu(self) -> int:
        """The path MTU the (connected) QPs use."""
        return int(self.qps[0].info.get("pmtu", 0)) if self.qps else 0

    def gid_index(self) -> int | None:
        if not self.qps:
            return None
        gid = self.qps[0].info.get("gid")
        gids = self.dev.gids
        return gids.index(gid) if gid in gids else None

    def infos(self) -> list[dict[str, Any]]:
        """Each QP's connection data with its MR (``exchange.conn_info``); kept in ``local``."""
        self.local = [exchange.conn_info(qp, mr)
                      for qp, mr in zip(self.qps, self.mrs, strict=True)]
        return self.local

    def connect(self, remote: list[dict[str, Any]]) -> None:
        if len(remote) != len(self.qps):
            raise SetupError(f"the peer has {len(remote)} QPs, we have {len(self.qps)}")
        try:
            for qp, info in zip(self.qps, remote, strict=True):
                qp.connect(info)
        except NicError as e:
            raise SetupError(f"cannot connect QPs: {e}") from None
        self.remote = list(remote)

    def check(self) -> None:
        """Raise :class:`TransportError` if a CQ overflowed, the daemon refused a pipelined
        post, or the daemon went away."""
        conn = self.dev.conn
        for cq in (self.send_cq, self.recv_cq):
            if cq.error:
                raise TransportError(f"completion queue overflow ({cq.overflows} lost)")
        if conn.async_errors:
            e = conn.async_errors[0]
            raise TransportError(f"post refused: {e.get('code')}: {e.get('error')}")
        if conn.closed_reason is not None:
            raise TransportError(f"NIC daemon connection lost: {conn.closed_reason}")

    def close(self) -> None:
        """Destroy the QPs, wait for the daemon's last words, disconnect, unlink the buffers.

        Work-around: ``emu nicd`` dies (all its clients with it) when a client
        closes its socket while the daemon still writes to it — e.g. a
        completion event racing the close (its session's ``except OSError``
        does not catch trio's ``ExceptionGroup``). Destroying the QPs first
        (no more completions) and waiting for a ``ping`` reply (the writer
        sends pending replies and completions together) leaves the daemon
        nothing to write when we hang up.
        """
        try:
            if self.dev.conn.closed_reason is None:
                for qp in self.qps:
                    qp.destroy()
                self.dev.conn.call("ping")
        except (NicError, OSError):
            pass
        try:
            self.dev.close()
        finally:
            for b in self.bufs:
                b.close()
            self.bufs.clear()

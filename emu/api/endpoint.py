# SPDX-License-Identifier: GPL-2.0-only
"""Message endpoints with libfabric's names, for connectionless transports (UET).

Why a second object beside :class:`~emu.api.client.QP`: UET has no queue
pairs — an endpoint is an address (``ep`` = PIDonFEP at the NIC's IP), and
the transport opens a packet delivery context per peer host by itself. The
verbs names (``post_write`` with RC's connection data) would mislead; the
libfabric names say what happens: ``send``/``recv``, ``tsend``/``trecv``
(tagged), ``write``/``read`` (RMA), ``atomic`` (``fi_atomic`` /
``fi_fetch_atomic``), completions on a transmit and a receive CQ (``tx_cq``,
``rx_cq``: ``poll``, ``wait``, ``wait_async`` as for QPs).

Underneath it is the same control protocol as QPs (``create_qp`` with
``transport="uet"``; ``docs/nic-protocol.md``), so tools can treat both alike.
Buffers are scatter/gather entries from :meth:`MR.sge` (one ``[addr, len,
lkey]`` or a list). Transmit completions come back in post order.

Typical use::

    ep = dev.endpoint()                       # transport "uet"
    peer = exchange.exchange(ep.getname() | mr.remote(), server)
    ep.connect(peer)                          # the one peer this endpoint talks to
    ep.write(mr.sge(0, n), peer["va"], peer["rkey"], context=1)
    [wc] = ep.tx_cq.wait(1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emu.api.client import CQ, QP, Device

#: ``fi_atomic`` operations → verbs opcodes the daemon maps to UET (fetching) atomics
ATOMIC_OPS = {"cswap": "ATOMIC_CMP_AND_SWP", "sum": "ATOMIC_FETCH_AND_ADD"}


class Endpoint:
    """One transport endpoint of a :class:`~emu.api.client.Device` (see the module docstring)."""

    def __init__(self, dev: Device, qp: QP, tx_cq: CQ, rx_cq: CQ, own_cqs: bool) -> None:
        self.dev, self.qp, self.tx_cq, self.rx_cq = dev, qp, tx_cq, rx_cq
        self._own_cqs = own_cqs

    @property
    def ep(self) -> int:
        """This endpoint's id at its NIC (what a peer sends to)."""
        return self.qp.qpn

    @property
    def transport(self) -> str:
        return self.qp.transport

    def getname(self) -> dict[str, Any]:
        """``fi_getname``: what a peer needs — ``{"ep", "address", "port", "transport", …}``."""
        return dict(self.qp.local_info())

    def connect(self, peer: dict[str, Any]) -> None:
        """Give the peer's :meth:`getname` (extra keys such as ``rkey``/``va`` are ignored)."""
        self.qp.connect(peer)

    def _wr(self, opcode: str, sg: Any, context: int, signaled: bool, **kw: Any
            ) -> dict[str, Any]:
        from emu.api.client import _sgl

        return {"wr_id": context, "opcode": opcode, "sg_list": _sgl(sg), "signaled": signaled,
                **kw}

    def _post(self, wr: dict[str, Any], wait: bool, recv: bool = False) -> None:
        self.dev.conn.post("post_recv" if recv else "post_send", self.qp.handle, wr, wait)

    # -- messages ---------------------------------------------------------------------
    def send(self, sg: Any, context: int = 0, *, signaled: bool = True, wait: bool = True
             ) -> None:
        """``fi_send``: into the next buffer the peer posted with :meth:`recv`."""
        self._post(self._wr("SEND", sg, context, signaled), wait)

    def tsend(self, sg: Any, tag: int, context: int = 0, *, signaled: bool = True,
              wait: bool = True) -> None:
        """``fi_tsend``: a SEND with 64 match bits, taken by a matching :meth:`trecv`."""
        self._post(self._wr("SEND", sg, context, signaled, tag=tag), wait)

    def recv(self, sg: Any, context: int = 0, *, wait: bool = True) -> None:
        """``fi_recv``: a buffer for the next untagged SEND (completes on ``rx_cq``)."""
        from emu.api.client import _sgl

        self._post({"wr_id": context, "sg_list": _sgl(sg)}, wait, recv=True)

    def trecv(self, sg: Any, tag: int, ignore: int = 0, context: int = 0, *,
              wait: bool = True) -> None:
        """``fi_trecv``: a buffer for a SEND whose tag equals ``tag`` outside ``ignore``."""
        from emu.api.client import _sgl

        self._post({"wr_id": context, "sg_list": _sgl(sg), "tag": tag, "ignore": ignore},
                   wait, recv=True)

    # -- RMA and atomics --------------------------------------------------------------
    def write(self, sg: Any, addr: int, key: int, context: int = 0, *, signaled: bool = True,
              wait: bool = True) -> None:
        """``fi_write``: the gathered bytes to ``addr`` in the peer's region ``key``."""
        self._post(self._wr("RDMA_WRITE", sg, context, signaled, remote_addr=addr, rkey=key),
                   wait)

    def read(self, sg: Any, addr: int, key: int, context: int = 0, *, signaled: bool = True,
             wait: bool = True) -> None:
        """``fi_read``: the peer's bytes at ``addr`` (region ``key``) into ``sg``."""
        self._post(self._wr("RDMA_READ", sg, context, signaled, remote_addr=addr, rkey=key),
                   wait)

    def atomic(self, op: str, result: Sequence[int], addr: int, key: int, operand: int,
               compare: int = 0, context: int = 0, *, wait: bool = True) -> None:
        """``fi_fetch_atomic`` / ``fi_compare_atomic`` on the peer's 8 bytes at ``addr``:
        ``op`` ``"sum"`` adds ``operand``, ``"cswap"`` stores ``operand`` if the value equals
        ``compare``; the original value lands in ``result`` (one 8-byte SGE)."""
        try:
            code = ATOMIC_OPS[op]
        except KeyError:
            raise ValueError(f"atomic op must be one of {sorted(ATOMIC_OPS)}, got {op!r}"
                             ) from None
        kw = ({"compare_add": compare, "swap": operand} if op == "cswap"
              else {"compare_add": operand})
        self._post(self._wr(code, result, context, True, remote_addr=addr, rkey=key, **kw),
                   wait)

    def post_many(self, wrs: list[dict[str, Any]], recv: bool = False, wait: bool = True
                  ) -> None:
        """Several raw work requests (protocol shape) in one message (bandwidth loops)."""
        self.qp.post_many(wrs, recv, wait)

    def close(self) -> None:
        """``fi_close``: the endpoint, then the CQs it created."""
        self.qp.destroy()
        if self._own_cqs:
            for cq in {id(c): c for c in (self.tx_cq, self.rx_cq)}.values():
                cq.destroy()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.dev.conn.closed_reason is None:
            self.close()

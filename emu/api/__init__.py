# SPDX-License-Identifier: GPL-2.0-only
"""The client API: a verbs-like library over the host's NIC daemon.

Typical use (inside a host: ``emu exec h1 -- python3 app.py``)::

    from emu.api import Device, exchange
    with Device.open() as dev:
        buf = dev.alloc_buffer(1 << 20)
        mr = dev.reg_mr(buf)
        cq = dev.create_cq()
        qp = dev.create_qp(cq)
        peer = exchange.exchange(exchange.conn_info(qp, mr), server=None)  # or "10.0.0.2"
        qp.connect(peer)
        qp.post_write(mr.sge(0, 4096), peer["va"], peer["rkey"], wr_id=1)
        [wc] = cq.wait(1)

UET endpoints (libfabric names: send, tsend, write, read, atomic, recv)::

    ep = dev.endpoint()                        # transport="uet"
    ep.connect(peer_name)                      # the peer's ep.getname()
    ep.write(mr.sge(0, 4096), peer["va"], peer["rkey"], context=1)
    [wc] = ep.tx_cq.wait(1)

See :mod:`emu.api.client` for the objects and ``docs/nic-protocol.md`` for the wire.
"""

from emu.api import exchange
from emu.api.client import CQ, DEFAULT_ACCESS, MR, QP, Connection, Device
from emu.api.endpoint import Endpoint
from emu.core.memory import Access
from emu.nic.protocol import DaemonDown, NicError, call_once

__all__ = ["CQ", "DEFAULT_ACCESS", "MR", "QP", "Access", "Connection", "DaemonDown", "Device",
           "Endpoint", "NicError", "call_once", "exchange"]

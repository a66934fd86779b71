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

Or step by step, as verbs programs (``ibv_rc_pingpong``) do — receives may be
posted from INIT::

    M = QpAttrMask
    qp.modify({"qp_state": "INIT", "pkey_index": 0, "port_num": 1,
               "qp_access_flags": 0}, M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS)
    qp.post_recv(mr.sge(0, 4096), wr_id=1)
    qp.modify({"qp_state": "RTR", "path_mtu": 3, "dest_qp_num": peer["qpn"],
               "rq_psn": peer["psn"], "max_dest_rd_atomic": 1, "min_rnr_timer": 12,
               "ah_attr": {"dgid": peer["gid"], "sgid_index": 0, "hop_limit": 64}},
              M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN
              | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER)
    qp.modify({"qp_state": "RTS", "sq_psn": qp.info["psn"], "timeout": 14,
               "retry_cnt": 7, "rnr_retry": 7, "max_rd_atomic": 1},
              M.STATE | M.SQ_PSN | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY
              | M.MAX_QP_RD_ATOMIC)

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
from emu.core.verbs import MTU_CODES, QpAttrMask
from emu.nic.protocol import DaemonDown, NicError, call_once

__all__ = ["CQ", "DEFAULT_ACCESS", "MR", "MTU_CODES", "QP", "Access", "Connection",
           "DaemonDown", "Device", "Endpoint", "NicError", "QpAttrMask", "call_once", "exchange"]

# SPDX-License-Identifier: GPL-2.0-only
"""The verbs QP state machine through the client API (issue #33 item 2), end to end
(root): two NIC daemons on a pair topology, real UDP.

``ibv_rc_pingpong``'s order: the responder creates its QP, moves it RESET → INIT,
posts its receives *in INIT*, then RTR and RTS; the requester goes INIT → RTR → RTS
and sends at once. Every SEND must land in a receive posted in INIT — no RNR NAK on
either daemon — byte for byte. And no refusal is silent: a post the QP's state
forbids raises at once (pipelined or not), a modify_qp missing an attribute names
the transition and the attribute, and a pipelined post the daemon refuses later is
raised at the next post or by a ``cq.wait`` that comes back short.

No wall-clock thresholds: timeouts only make failures fast.
"""

from __future__ import annotations

import os
import random
import subprocess

import pytest
from fabric_util import ns_of_cluster, pair
from rdma_util import start_nicd, stop_nicds

from emu.api import Device, NicError, QpAttrMask
from emu.core.verbs import MTU_CODES
from emu.fabric import Fabric, down, state
from emu.fabric.naming import random_cluster
from emu.nic.protocol import call_once, sock_path

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")
M = QpAttrMask
INIT = M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS
RTR = M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC \
    | M.MIN_RNR_TIMER
RTS = M.STATE | M.SQ_PSN | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.MAX_QP_RD_ATOMIC
MSG, N = 3000, 16  # bytes per SEND (several packets at any path MTU), messages


@pytest.fixture(scope="module")
def cluster():
    name = random_cluster("vq")
    procs: list[subprocess.Popen] = []
    try:
        Fabric(pair(), cluster=name).up()
        for i, h in enumerate(("h1", "h2"), 1):
            procs.append(start_nicd(name, h, "--seed", str(i), "-t", "roce", "-t", "uet",
                                    "--engine-opt", "roce.line_rate=5e8"))
        yield name
        assert stop_nicds(procs) == [0, 0]  # SIGTERM drains and exits 0
    finally:
        stop_nicds(procs)
        down(name)
        assert ns_of_cluster(name) == [] and state.load(name) is None


def rnr_naks(cluster: str, host: str) -> tuple[int, int]:
    eng = call_once(sock_path(cluster, host), "stats")["transports"]["roce"]["engine"]
    return eng.get("tx_rnr_naks", 0), eng.get("rx_rnr_naks", 0)


def to_init(qp) -> None:
    qp.modify({"qp_state": "INIT", "pkey_index": 0, "port_num": 1, "qp_access_flags": 0},
              INIT)


def to_rtr(dev: Device, qp, peer: dict) -> None:
    mtu = {v: k for k, v in MTU_CODES.items()}[min(qp.info["pmtu"], peer["pmtu"])]
    qp.modify({"qp_state": "RTR", "path_mtu": mtu, "dest_qp_num": peer["qpn"],
               "rq_psn": peer["psn"], "max_dest_rd_atomic": 1, "min_rnr_timer": 12,
               "ah_attr": {"dgid": peer["gid"], "sgid_index": dev.gids.index(qp.info["gid"]),
                           "hop_limit": 64, "traffic_class": 0}}, RTR)


def to_rts(qp) -> None:
    qp.modify({"qp_state": "RTS", "sq_psn": qp.info["psn"], "timeout": 14, "retry_cnt": 7,
               "rnr_retry": 7, "max_rd_atomic": 1}, RTS)


def test_receives_posted_in_init_take_the_first_sends(cluster):
    before = rnr_naks(cluster, "h1"), rnr_naks(cluster, "h2")
    data = random.Random(33).randbytes(MSG * N)
    with Device.open(cluster=cluster, host="h1") as a, \
            Device.open(cluster=cluster, host="h2") as b:
        ba, bb = a.alloc_buffer(MSG * N), b.alloc_buffer(MSG * N)
        try:
            ma, mb = a.reg_mr(ba), b.reg_mr(bb)
            ca, cb = a.create_cq(), b.create_cq()
            qa, qb = a.create_qp(ca), b.create_qp(cb)
            assert qa.state == qb.state == "RESET"
            ia, ib = qa.local_info(), qb.local_info()
            # the responder: INIT, its receives (pipelined, as a pingpong's loop), RTR, RTS
            to_init(qb)
            assert qb.state == "INIT"
            for i in range(N):
                qb.post_recv(mb.sge(i * MSG, MSG), wr_id=100 + i, wait=False)
            to_rtr(b, qb, ia)
            to_rts(qb)
            assert qb.query()["qp_state"] == "RTS"
            # the requester: three steps, then every SEND at once
            to_init(qa)
            to_rtr(a, qa, ib)
            to_rts(qa)
            ba.view[:] = data
            for i in range(N):
                qa.post_send(ma.sge(i * MSG, MSG), wr_id=i, wait=False)
            sent = ca.wait(N, timeout=120)
            got = cb.wait(N, timeout=120)
            assert [(w.wr_id, w.ok) for w in sent] == [(i, True) for i in range(N)], sent
            assert [(w.wr_id, w.ok, w.byte_len) for w in got] == \
                [(100 + i, True, MSG) for i in range(N)], got
            assert bytes(bb.view[:MSG * N]) == data
            assert a.conn.async_errors == [] and b.conn.async_errors == []
            q = qa.query()
            assert (q["dest_qp_num"], q["rq_psn"], q["ah_attr"]["dgid"]) == \
                (ib["qpn"], ib["psn"], ib["gid"])
        finally:
            ba.close()
            bb.close()
    assert (rnr_naks(cluster, "h1"), rnr_naks(cluster, "h2")) == before  # no RNR at all


def test_refusals_are_loud_and_named(cluster):
    with Device.open(cluster=cluster, host="h1") as a:
        buf = a.alloc_buffer(4096)
        try:
            mr = a.reg_mr(buf)
            cq = a.create_cq()
            qp = a.create_qp(cq)
            # a receive in RESET: refused at once, even pipelined (it used to vanish)
            with pytest.raises(NicError, match=r"post_recv QP 0x[0-9a-f]+: the QP is in RESET"):
                qp.post_recv(mr.sge(0, 64), wr_id=1, wait=False)
            # the daemon names the transition and the attribute
            with pytest.raises(NicError, match=r"RESET→INIT needs IBV_QP_PORT$"):
                qp.modify({"qp_state": "INIT", "pkey_index": 0, "qp_access_flags": 0},
                          M.STATE | M.PKEY_INDEX | M.ACCESS_FLAGS)
            with pytest.raises(NicError, match=r"RESET→RTS is not a legal transition"):
                qp.modify({"qp_state": "RTS"}, M.STATE)
            assert qp.state == "RESET" and qp.query()["qp_state"] == "RESET"
            to_init(qp)
            with pytest.raises(NicError, match=r"post_send QP 0x[0-9a-f]+: the QP is in INIT"):
                qp.post_send(mr.sge(0, 64), wr_id=2, wait=False)
            with pytest.raises(NicError, match="INIT→RTR needs IBV_QP_DEST_QPN"):
                qp.modify({"qp_state": "RTR"}, RTR & ~M.DEST_QPN)
            # a pipelined receive the daemon refuses (bad lkey) is raised, not kept quiet
            qp.post_recv([mr.va, 64, mr.lkey + 1], wr_id=3, wait=False)
            with pytest.raises(NicError, match="earlier pipelined request failed: "
                                               "work request 0"):
                cq.wait(1, timeout=120)  # woken by the error reply, not the timeout
            assert len(a.conn.async_errors) == 1  # kept, for callers that read them
            # the shortcut still works from INIT
            peer = a.create_qp(cq)
            qp.connect(peer.local_info())
            assert qp.state == "RTS"
            # the protocol's old alias: modify_qp with remote (no mask) is connect
            old = a.create_qp(cq)
            got = a.conn.call("modify_qp", qp=old.handle, remote=peer.local_info())
            assert got["state"] == "RTS"
            # a transport without the verbs state machine says so
            ep = a.create_qp(cq, transport="uet")
            with pytest.raises(NicError, match="'uet' has no verbs QP state machine") as ei:
                ep.modify({"qp_state": "INIT"}, M.STATE)
            assert ei.value.code == "EOPNOTSUPP"
        finally:
            buf.close()

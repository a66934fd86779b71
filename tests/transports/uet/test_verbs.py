# SPDX-License-Identifier: GPL-2.0-only
"""The UET verbs adapter (what the daemon calls), sans-IO over the in-memory lossy link.

Checks the QP-shaped protocol on UET endpoints: query/connect carry ``ep`` and
the address, verbs opcodes map to SES operations (bytes land exactly), send
completions come back in post order even when RUD finishes messages out of
order, unsignaled successes stay hidden, errors are clear refusals.
"""

from __future__ import annotations

import random

import pytest
from lossy_link import LossyLink, register

from emu.core.cq import WcOpcode, WcStatus
from emu.core.memory import MemoryTable
from emu.core.verbs import RecvWR, SendWR, Sge, WrOpcode
from emu.nic.session import TaggedRecvWR, TaggedSendWR
from emu.transports.base import VerbsError
from emu.transports.uet import UetEngine
from emu.transports.uet.verbs import NotSupported, UetVerbs

A = ("10.0.0.1", 4793)
B = ("10.0.0.2", 4793)


def _pair(seed: int = 1, **link_kw):  # noqa: ANN003, ANN202
    ma, mb = MemoryTable(random.Random(seed)), MemoryTable(random.Random(seed + 1))
    va = UetVerbs(UetEngine(ma, random.Random(seed + 2), local_addr=A, mtu=1024))
    vb = UetVerbs(UetEngine(mb, random.Random(seed + 3), local_addr=B, mtu=1024))
    link = LossyLink(va, vb, addr_a=A, addr_b=B, seed=seed, **link_kw)
    qa = va.create_qp(pd=None, send_cq="a.s", recv_cq="a.r", attrs={"pmtu": 4096})
    qb = vb.create_qp(pd=None, send_cq="b.s", recv_cq="b.r", attrs={})
    return link, va, vb, ma, mb, qa, qb


def test_query_and_connect_speak_endpoints():
    link, va, vb, ma, mb, qa, qb = _pair()
    ia = va.query_qp(qa)
    assert ia["ep"] == ia["qpn"] == qa and ia["address"] == A[0] and ia["port"] == 4793
    assert ia["transport"] == "uet" and ia["state"] == "INIT" and ia["pmtu"] == 1024
    va.connect(qa, vb.query_qp(qb), 0.0)
    assert va.query_qp(qa)["state"] == "RTS" and va.query_qp(qa)["peer"]["ep"] == qb
    with pytest.raises(VerbsError, match="address"):
        va.connect(qa, {"ep": 1}, 0.0)
    with pytest.raises(VerbsError, match="bad UET peer"):
        va.connect(qa, {"address": "10.0.0.2", "ep": 5000}, 0.0)
    with pytest.raises(VerbsError, match="no UET endpoint"):
        va.connect(999, vb.query_qp(qb), 0.0)
    with pytest.raises(VerbsError, match="not connected"):
        vb.post_send(qb, SendWR.send(1, ()), 0.0)


def test_writes_and_sends_exact_completions_in_post_order_through_loss_and_reordering():
    link, va, vb, ma, mb, qa, qb = _pair(5, loss=0.02, reorder=0.2, dup=0.02)
    va.connect(qa, vb.query_qp(qb), 0.0)
    vb.connect(qb, va.query_qp(qa), 0.0)
    rng = random.Random(9)
    sizes = [rng.choice([1, 100, 1024, 5000, 70000]) for _ in range(40)]
    srcs, dsts, datas = [], [], []
    for i, n in enumerate(sizes):
        s, d = register(ma, n), register(mb, n)
        data = rng.randbytes(n)
        s.view[:] = data
        srcs.append(s)
        dsts.append(d)
        datas.append(data)
        # every third one signaled; the last always
        va.post_send(qa, SendWR.write(100 + i, [Sge(s.va, n, s.lkey)], d.va, d.rkey,
                                      signaled=(i % 3 == 0 or i == len(sizes) - 1)), link.now)
    # a SEND into a posted receive
    rbuf = register(mb, 4096)
    sbuf = register(ma, 3000)
    sbuf.view[:] = b"s" * 3000
    vb.post_recv(qb, RecvWR(7, [Sge(rbuf.va, 4096, rbuf.lkey)]), link.now)
    va.post_send(qa, SendWR.send(200, [Sge(sbuf.va, 3000, sbuf.lkey)]), link.now)
    link.run(until=5.0, stop=lambda: len(link.completions("a")) >= 15)
    wcs = link.completions("a")
    expect = [100 + i for i in range(len(sizes)) if i % 3 == 0 or i == len(sizes) - 1] + [200]
    assert [w.wr_id for w in wcs] == expect
    assert all(w.status is WcStatus.SUCCESS and w.qp_num == qa for w in wcs)
    assert wcs[-1].opcode is WcOpcode.SEND and wcs[0].opcode is WcOpcode.RDMA_WRITE
    for d, data in zip(dsts, datas, strict=True):
        assert bytes(d.view[:len(data)]) == data
    [rx] = link.completions("b")
    assert rx.wr_id == 7 and rx.byte_len == 3000 and rx.opcode is WcOpcode.RECV
    assert bytes(rbuf.view[:3000]) == b"s" * 3000
    c = va.counters()
    assert c["wr_outstanding"] == 0 and c.get("rx_drop_internal_error", 0) == 0
    assert c["wc_reordered"] > 0, "RUD never finished out of order: the test proves nothing"


def test_unsupported_opcodes_are_clear_refusals():
    link, va, vb, ma, mb, qa, qb = _pair()
    va.connect(qa, vb.query_qp(qb), 0.0)
    s = register(ma, 64)
    with pytest.raises(NotSupported, match="immediate"):
        va.post_send(qa, SendWR.write(1, [Sge(s.va, 8, s.lkey)], 0, 0, imm=5), 0.0)
    with pytest.raises(NotSupported, match="immediate"):
        va.post_send(qa, SendWR.send(1, [Sge(s.va, 8, s.lkey)], imm=5), 0.0)
    assert NotSupported("x").code == "ENOTSUP"
    with pytest.raises(VerbsError, match="bad SGE"):
        va.post_send(qa, SendWR.send(2, [Sge(s.va, 999, s.lkey)]), 0.0)
    assert va.counters()["wr_outstanding"] == 0  # a refused post leaves nothing behind


def test_destroy_forgets_outstanding_and_pdc_events_are_not_endpoint_events():
    link, va, vb, ma, mb, qa, qb = _pair()
    va.connect(qa, {"address": "10.0.0.9", "ep": 3}, 0.0)  # nobody there: retries run out
    s = register(ma, 64)
    va.post_send(qa, SendWR(1, WrOpcode.RDMA_WRITE, [Sge(s.va, 64, s.lkey)], 0, 1), 0.0)
    link.run(until=1.0)
    [wc] = link.completions("a")
    assert wc.wr_id == 1 and wc.status is not WcStatus.SUCCESS  # error completions always
    assert link.state_changes("a") == [] and va.counters()["pdc_events"] >= 1
    va.post_send(qa, SendWR(2, WrOpcode.RDMA_WRITE, [Sge(s.va, 64, s.lkey)], 0, 1), link.now)
    va.destroy_qp(qa, link.now)
    assert va.counters()["wr_outstanding"] == 0
    with pytest.raises(VerbsError):
        va.query_qp(qa)


def test_read_atomics_and_tagged_sends_map_to_ses_operations():
    link, va, vb, ma, mb, qa, qb = _pair(3, reorder=0.1)
    va.connect(qa, vb.query_qp(qb), 0.0)
    vb.connect(qb, va.query_qp(qa), 0.0)
    remote = register(mb, 1 << 16)
    remote.view[:] = bytes(range(256)) * 256
    local = register(ma, 1 << 16)
    va.post_send(qa, SendWR.read(1, [Sge(local.va, 20000, local.lkey)], remote.va + 8,
                                 remote.rkey), link.now)
    remote.view[0:8] = (40).to_bytes(8, "little")
    res = register(ma, 16)
    va.post_send(qa, SendWR.fetch_add(2, Sge(res.va, 8, res.lkey), remote.va, remote.rkey, 2),
                 link.now)
    va.post_send(qa, SendWR.cmp_swap(3, Sge(res.va + 8, 8, res.lkey), remote.va, remote.rkey,
                                     42, 7), link.now)
    tbuf = register(mb, 4096)
    vb.post_recv(qb, TaggedRecvWR(9, [Sge(tbuf.va, 4096, tbuf.lkey)], tag=0xAB00, ignore=0xFF),
                 link.now)
    src = register(ma, 100)
    src.view[:] = b"t" * 100
    va.post_send(qa, TaggedSendWR(4, WrOpcode.SEND, [Sge(src.va, 100, src.lkey)], tag=0xAB12),
                 link.now)
    link.run(until=5.0, stop=lambda: len(link.completions("a")) >= 4
             and len(link.completions("b")) >= 1)
    wcs = link.completions("a")
    assert [w.wr_id for w in wcs] == [1, 2, 3, 4] and all(w.ok for w in wcs), wcs
    assert bytes(local.view[:20000]) == bytes(remote.view[8:20008])
    assert int.from_bytes(res.view[0:8], "little") == 40  # fetch_add saw 40, left 42
    assert int.from_bytes(res.view[8:16], "little") == 42  # cmp_swap matched 42
    assert int.from_bytes(remote.view[0:8], "little") == 7
    [rx] = link.completions("b")
    assert rx.wr_id == 9 and rx.byte_len == 100 and bytes(tbuf.view[:100]) == b"t" * 100
    assert va.tagged and va.counters().get("rx_drop_internal_error", 0) == 0

# SPDX-License-Identifier: GPL-2.0-only
"""RoCEv2 RC through an in-memory lossy link: data, completions, errors, RNR, duplicates.

No sockets: two :class:`RoceEngine` instances, a seeded :class:`LossyLink`
and a hand-stepped clock (issue 5's sans-IO acceptance).
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lossy_link import register, roce_pair

from emu.core.cq import WcOpcode, WcStatus
from emu.core.memory import Access
from emu.transports.base import StateChanged
from emu.transports.roce import QpState, RecvWR, SendWR, Sge
from emu.transports.roce import packets as P

MiB = 1 << 20
LOSSY = {"loss": 0.01, "reorder": 0.02, "dup": 0.01}


def fill(mr, seed: int) -> bytes:
    data = random.Random(seed).randbytes(len(mr.view))
    mr.view[:] = data
    return data


def ok(wcs, *wr_ids):
    assert [w.wr_id for w in wcs] == list(wr_ids), wcs
    assert all(w.status is WcStatus.SUCCESS for w in wcs), wcs


def no_internal_errors(rp):
    assert rp.ea.counters().get("rx_drop_internal_error", 0) == 0
    assert rp.eb.counters().get("rx_drop_internal_error", 0) == 0


# -- byte-exact transfers ------------------------------------------------------

SIZES = [0, 1, 1023, 1024, 1025, 64 * 1024 + 3, 1 * MiB]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["write", "send", "read"])
def test_transfer_sizes_byte_exact_through_loss(kind, size):
    rp = roce_pair(seed=size + len(kind), pmtu=1024, **LOSSY)
    n = max(size, 1)
    src = register(rp.ma, n)
    dst = register(rp.mb, n)
    data = fill(src, size)
    if kind == "write":
        rp.ea.post_send(rp.qa, SendWR.write(7, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    elif kind == "send":
        rp.eb.post_recv(rp.qb, RecvWR(70, [Sge(dst.va, n, dst.lkey)]))
        rp.ea.post_send(rp.qa, SendWR.send(7, [Sge(src.va, size, src.lkey)]))
    else:  # READ pulls B's bytes into A
        data = fill(dst, size + 1)
        src.view[:] = bytes(n)
        rp.ea.post_send(rp.qa, SendWR.read(7, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    ok(rp.link.completions("a"), 7)
    if kind == "read":
        assert bytes(src.view[:size]) == data[:size]
        assert rp.link.completions("a")[0].byte_len == size
    else:
        assert bytes(dst.view[:size]) == data[:size]
    if kind == "send":
        (wc,) = rp.link.completions("b")
        assert (wc.wr_id, wc.opcode, wc.byte_len, wc.src_qp) == (70, WcOpcode.RECV, size, rp.qa)
    no_internal_errors(rp)


def test_16_mib_write_mtu_4096_through_loss_reorder_dup():
    size = 16 * MiB
    rp = roce_pair(seed=16, pmtu=4096, line_rate=100e9, loss=0.005, reorder=0.01, dup=0.005)
    src, dst = register(rp.ma, size), register(rp.mb, size)
    data = fill(src, 16)
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    ok(rp.link.completions("a"), 1)
    assert bytes(dst.view) == data
    c = rp.ea.counters()
    assert c["tx_retransmits"] > 0 and rp.link.dropped > 0  # the loss really happened
    no_internal_errors(rp)


@pytest.mark.parametrize(("seed", "verb"), [(21, "write"), (22, "write"), (23, "send")])
def test_daemon_engines_fast_paths_exact_through_loss_reorder_dup(seed, verb, monkeypatch):
    """Engines as a daemon builds them — no ICRC in the engine, bulk packets sent as
    Gather pieces, SEND and WRITE middles placed by Responder.middle — stay byte-exact
    through loss, reordering and duplication, and the fast path really carried the bulk
    (while out-of-order and duplicate middles fell back to the general path). The SEND
    lands in a receive buffer of three SGEs out of order in the region."""
    from emu.core.datagram import Gather
    from emu.transports.roce.responder import Responder

    taken = {"fast": 0, "declined": 0}
    real = Responder.middle

    def spy(self, data, n):
        r = real(self, data, n)
        taken["fast" if r else "declined"] += 1
        return r

    monkeypatch.setattr(Responder, "middle", spy)
    size = 4 * MiB + 123
    rp = roce_pair(seed=seed, pmtu=4096, line_rate=100e9, engine_kw={"icrc": None,
                                                                      "gather": True},
                   loss=0.01, reorder=0.02, dup=0.01)
    sent = []
    orig = rp.ea.datagrams_to_send

    def unpack(now):  # what the daemon's scatter-gather sendmsg puts on the wire
        out = orig(now)
        sent.extend(type(b) for b, _, _ in out)
        return [(bytes(b) if type(b) is Gather else b, a, m) for b, a, m in out]

    rp.ea.datagrams_to_send = unpack
    src, dst = register(rp.ma, size), register(rp.mb, size)
    data = fill(src, seed)
    sg = [Sge(src.va, size, src.lkey)]
    if verb == "write":
        rp.ea.post_send(rp.qa, SendWR.write(1, sg, dst.va, dst.rkey))
    else:
        cut = [0, size // 3, 2 * size // 3 + 5, size]  # pieces placed 2, 0, 1 in dst
        pieces = [(cut[i], cut[i + 1] - cut[i]) for i in range(3)]
        at = {2: 0, 0: pieces[2][1], 1: pieces[2][1] + pieces[0][1]}
        rp.eb.post_recv(rp.qb, RecvWR(9, [Sge(dst.va + at[i], n, dst.lkey)
                                          for i, (_, n) in enumerate(pieces)]))
        rp.ea.post_send(rp.qa, SendWR.send(1, sg))
    rp.link.run()
    ok(rp.link.completions("a"), 1)
    if verb == "write":
        assert bytes(dst.view) == data
    else:
        ok(rp.link.completions("b"), 9)
        got = bytes(dst.view)
        assert b"".join(got[at[i]:at[i] + n] for i, (_, n) in enumerate(pieces)) == data
    assert rp.link.dropped > 0 and rp.ea.counters()["tx_retransmits"] > 0
    assert sent.count(Gather) > 0.9 * (size // 4096)  # middles left as pieces
    assert taken["fast"] > 0.8 * (size // 4096) and taken["declined"] > 0, taken
    no_internal_errors(rp)


def test_psn_wraps_mid_transfer():
    rp = roce_pair(seed=3, pmtu=256, qp_kw={"sq_psn": 0xFFFFF0}, **LOSSY)
    src, dst = register(rp.ma, 64 * 1024), register(rp.mb, 64 * 1024)
    data = fill(src, 3)
    for i in range(4):
        rp.ea.post_send(rp.qa, SendWR.write(i, [Sge(src.va + i * 16384, 16384, src.lkey)],
                                            dst.va + i * 16384, dst.rkey))
    rp.link.run()
    ok(rp.link.completions("a"), 0, 1, 2, 3)
    assert bytes(dst.view) == data


def _mixed_workload(rp, rng: random.Random, count: int):
    """Post ``count`` random WRs A→B; return a checker run after the link went idle."""
    slot = 8192
    src = register(rp.ma, slot * count)
    dst = register(rp.mb, slot * count)
    atom_a = register(rp.ma, 8 * count)
    atom_b = register(rp.mb, 8)
    fill(src, rng.random())
    fill(dst, rng.random())
    expect_dst = bytearray(dst.view)
    expect_src = bytearray(src.view)
    counter = 0
    recv_ids = []
    for i in range(count):
        n = rng.choice([0, 1, 100, 1024, 1025, 3000, slot])
        off = i * slot
        kind = rng.choice(["write", "write_imm", "send", "send_imm", "read", "fadd"])
        imm = rng.getrandbits(32)
        if kind.startswith("write"):
            wr = SendWR.write(i, [Sge(src.va + off, n, src.lkey)], dst.va + off, dst.rkey,
                              imm=imm if kind == "write_imm" else None)
            expect_dst[off:off + n] = expect_src[off:off + n]
            if kind == "write_imm":
                rp.eb.post_recv(rp.qb, RecvWR(1000 + i, []))
                recv_ids.append((1000 + i, WcOpcode.RECV_RDMA_WITH_IMM, n, imm))
        elif kind.startswith("send"):
            rp.eb.post_recv(rp.qb, RecvWR(1000 + i, [Sge(dst.va + off, slot, dst.lkey)]))
            wr = SendWR.send(i, [Sge(src.va + off, n, src.lkey)],
                             imm=imm if kind == "send_imm" else None)
            expect_dst[off:off + n] = expect_src[off:off + n]
            recv_ids.append((1000 + i, WcOpcode.RECV, n, imm if kind == "send_imm" else None))
        elif kind == "read":
            wr = SendWR.read(i, [Sge(src.va + off, n, src.lkey)], dst.va + off, dst.rkey)
            expect_src[off:off + n] = expect_dst[off:off + n]
        else:
            wr = SendWR.fetch_add(i, Sge(atom_a.va + 8 * i, 8, atom_a.lkey), atom_b.va,
                                  atom_b.rkey, 3)
            counter += 1
        rp.ea.post_send(rp.qa, wr)

    def check():
        ok(rp.link.completions("a"), *range(count))
        got = [(w.wr_id, w.opcode, w.byte_len, w.imm) for w in rp.link.completions("b")]
        assert got == recv_ids
        assert all(w.ok for w in rp.link.completions("b"))
        assert bytes(dst.view) == bytes(expect_dst)
        # READ targets are exact; atomics: executed exactly once despite duplicates
        for i, wc in enumerate(rp.link.completions("a")):
            if wc.opcode is WcOpcode.RDMA_READ:
                off = i * slot
                assert bytes(src.view[off:off + wc.byte_len]) == bytes(
                    expect_src[off:off + wc.byte_len])
        assert struct.unpack("=Q", atom_b.view)[0] == 3 * counter
        originals = sorted(struct.unpack_from("=Q", atom_a.view, 8 * w.wr_id)[0]
                           for w in rp.link.completions("a") if w.opcode is WcOpcode.FETCH_ADD)
        assert originals == [3 * k for k in range(counter)]
        no_internal_errors(rp)
    return check


def test_mixed_opcodes_complete_in_order_through_loss():
    rp = roce_pair(seed=11, pmtu=1024, loss=0.03, reorder=0.05, dup=0.05)
    check = _mixed_workload(rp, random.Random(11), 60)
    rp.link.run()
    check()


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), loss=st.floats(0, 0.08), reorder=st.floats(0, 0.1),
       dup=st.floats(0, 0.1), pmtu=st.sampled_from([256, 1024, 4096]))
def test_random_impairments_never_corrupt(seed, loss, reorder, dup, pmtu):
    rp = roce_pair(seed=seed % 1000, pmtu=pmtu, loss=loss, reorder=reorder, dup=dup,
                   qp_kw={"retry_cnt": 7, "timeout": 8})
    check = _mixed_workload(rp, random.Random(seed), 16)
    rp.link.run()
    check()


def test_multi_sge_gather_and_scatter():
    rp = roce_pair(seed=5, pmtu=256, **LOSSY)
    src = register(rp.ma, 4000)
    dst = register(rp.mb, 4000)
    data = fill(src, 5)
    sg = [Sge(src.va, 700, src.lkey), Sge(src.va + 1000, 1, src.lkey),
          Sge(src.va + 2000, 999, src.lkey)]
    rp.eb.post_recv(rp.qb, RecvWR(9, [Sge(dst.va, 1000, dst.lkey),
                                      Sge(dst.va + 3000, 1000, dst.lkey)]))
    rp.ea.post_send(rp.qa, SendWR.send(1, sg, imm=0xDEADBEEF))
    rp.link.run()
    ok(rp.link.completions("a"), 1)
    (wc,) = rp.link.completions("b")
    assert (wc.byte_len, wc.imm) == (1700, 0xDEADBEEF)
    sent = data[:700] + data[1000:1001] + data[2000:2999]
    assert bytes(dst.view[:1000]) + bytes(dst.view[3000:3700]) == sent


# -- every opcode ---------------------------------------------------------------


def test_write_with_imm_consumes_a_receive_and_carries_imm():
    rp = roce_pair(seed=6)
    src, dst = register(rp.ma, 5000), register(rp.mb, 5000)
    data = fill(src, 6)
    rp.eb.post_recv(rp.qb, RecvWR(42))
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, 5000, src.lkey)], dst.va, dst.rkey,
                                        imm=0x01020304))
    rp.link.run()
    ok(rp.link.completions("a"), 1)
    (wc,) = rp.link.completions("b")
    assert (wc.wr_id, wc.opcode, wc.imm, wc.byte_len) == (42, WcOpcode.RECV_RDMA_WITH_IMM,
                                                         0x01020304, 5000)
    assert bytes(dst.view) == data


def test_atomics_cmp_swap_and_fetch_add_execute_once_under_duplication():
    rp = roce_pair(seed=7, loss=0.1, dup=0.5, reorder=0.1)
    local = register(rp.ma, 96)
    target = register(rp.mb, 16)
    struct.pack_into("=QQ", target.view, 0, 5, 100)
    e, q = rp.ea, rp.qa
    e.post_send(q, SendWR.cmp_swap(1, Sge(local.va, 8, local.lkey), target.va, target.rkey,
                                   compare=5, swap=9))
    e.post_send(q, SendWR.cmp_swap(2, Sge(local.va + 8, 8, local.lkey), target.va,
                                   target.rkey, compare=5, swap=77))  # fails: value is 9
    for i in range(3, 13):
        e.post_send(q, SendWR.fetch_add(i, Sge(local.va + 8 * (i - 1), 8, local.lkey),
                                        target.va + 8, target.rkey, 10))
    rp.link.run()
    wcs = rp.link.completions("a")
    ok(wcs, *range(1, 13))
    assert [w.opcode for w in wcs[:3]] == [WcOpcode.COMP_SWAP, WcOpcode.COMP_SWAP,
                                           WcOpcode.FETCH_ADD]
    assert struct.unpack_from("=QQ", target.view) == (9, 200)
    origs = struct.unpack_from("=12Q", local.view)
    assert origs[:2] == (5, 9)
    assert list(origs[2:]) == [100 + 10 * k for k in range(10)]
    assert rp.eb.counters()["rx_duplicates"] > 0


def test_unsignaled_writes_complete_silently_but_in_order():
    rp = roce_pair(seed=8)
    src, dst = register(rp.ma, 300), register(rp.mb, 300)
    fill(src, 8)
    for i in range(3):
        rp.ea.post_send(rp.qa, SendWR.write(i, [Sge(src.va + 100 * i, 100, src.lkey)],
                                            dst.va + 100 * i, dst.rkey, signaled=(i == 2)))
    rp.link.run()
    ok(rp.link.completions("a"), 2)
    assert bytes(dst.view) == bytes(src.view)


# -- errors ------------------------------------------------------------------------


def test_retries_exhausted_moves_qp_to_error_and_flushes():
    rp = roce_pair(seed=9, qp_kw={"retry_cnt": 3, "timeout": 6})
    rp.link.drop = lambda data, s, d: s == rp.link.addr_a  # A's packets never arrive
    src, dst = register(rp.ma, 4096), register(rp.mb, 4096)
    for i in range(3):
        rp.ea.post_send(rp.qa, SendWR.write(i, [Sge(src.va, 100, src.lkey)], dst.va, dst.rkey))
    rp.eb.post_recv(rp.qb, RecvWR(99))
    rp.link.run()
    wcs = rp.link.completions("a", "a.scq")
    assert [(w.wr_id, w.status) for w in wcs] == [
        (0, WcStatus.RETRY_EXC_ERR), (1, WcStatus.WR_FLUSH_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert rp.ea.counters()["timeouts"] == 4  # the first try + 3 retries
    (sc,) = rp.link.state_changes("a")
    assert (sc.endpoint, sc.old, sc.new, sc.status) == (rp.qa, "RTS", "ERR",
                                                        WcStatus.RETRY_EXC_ERR)
    assert rp.ea.qp_attr(rp.qa)[0] is QpState.ERR
    # 4.096 µs × 2^6 per try: the error comes after four timeouts, not before
    assert rp.link.now >= 4 * 4.096e-6 * 64
    rp.ea.post_send(rp.qa, SendWR.write(5, [Sge(src.va, 1, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    assert rp.link.completions("a")[-1].status is WcStatus.WR_FLUSH_ERR
    assert rp.ea.get_timer() is None  # nothing left scheduled


@pytest.mark.parametrize("case", ["bad_rkey", "out_of_bounds", "no_remote_write",
                                  "multi_packet_out_of_bounds"])
def test_remote_access_error_writes_nothing(case):
    rp = roce_pair(seed=10, pmtu=256)
    src = register(rp.ma, 4096)
    fill(src, 10)
    access = Access.LOCAL_WRITE | (Access.REMOTE_READ if case == "no_remote_write"
                                   else Access.REMOTE_WRITE)
    dst = register(rp.mb, 2048, access)
    rkey, va, n = dst.rkey, dst.va, 100
    if case == "bad_rkey":
        rkey ^= 0x5A5A
    elif case == "out_of_bounds":
        va += 2000
    elif case == "multi_packet_out_of_bounds":
        n = 4096  # the first packets would fit; the RETH range does not
    rp.eb.post_recv(rp.qb, RecvWR(50))
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, n, src.lkey)], va, rkey))
    rp.ea.post_send(rp.qa, SendWR.write(2, [Sge(src.va, 10, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    wcs = rp.link.completions("a")
    assert [(w.wr_id, w.status) for w in wcs] == [(1, WcStatus.REM_ACCESS_ERR),
                                                 (2, WcStatus.WR_FLUSH_ERR)]
    assert wcs[0].vendor_err == P.nak_syndrome(P.NAK_REMOTE_ACCESS)
    assert bytes(dst.view) == bytes(2048)  # zero bytes written
    assert rp.ea.qp_attr(rp.qa)[0] is QpState.ERR
    assert rp.eb.qp_attr(rp.qb)[0] is QpState.ERR  # a class C responder error
    assert [(w.wr_id, w.status) for w in rp.link.completions("b")] == [
        (50, WcStatus.WR_FLUSH_ERR)]


def test_read_with_bad_rkey_is_remote_access_error():
    rp = roce_pair(seed=12)
    local, remote = register(rp.ma, 100), register(rp.mb, 100)
    rp.ea.post_send(rp.qa, SendWR.read(1, [Sge(local.va, 100, local.lkey)], remote.va,
                                       remote.rkey + 1))
    rp.link.run()
    assert [(w.wr_id, w.status) for w in rp.link.completions("a")] == [
        (1, WcStatus.REM_ACCESS_ERR)]
    assert bytes(local.view) == bytes(100)


def test_send_larger_than_receive_buffer_is_invalid_request():
    rp = roce_pair(seed=13, pmtu=256)
    src, dst = register(rp.ma, 1000), register(rp.mb, 1000)
    rp.eb.post_recv(rp.qb, RecvWR(5, [Sge(dst.va, 300, dst.lkey)]))
    rp.ea.post_send(rp.qa, SendWR.send(1, [Sge(src.va, 1000, src.lkey)]))
    rp.link.run()
    assert [(w.wr_id, w.status) for w in rp.link.completions("a")] == [
        (1, WcStatus.REM_INV_REQ_ERR)]
    assert [(w.wr_id, w.status) for w in rp.link.completions("b")] == [
        (5, WcStatus.LOC_LEN_ERR)]


# -- RNR -------------------------------------------------------------------------


def test_rnr_nak_then_retry_succeeds_once_a_receive_is_posted():
    rp = roce_pair(seed=14, pmtu=256, qp_kw={"rnr_retry": 7, "min_rnr_timer": 1})
    src, dst = register(rp.ma, 1000), register(rp.mb, 1000)
    data = fill(src, 14)
    rp.ea.post_send(rp.qa, SendWR.send(1, [Sge(src.va, 1000, src.lkey)]))
    rp.link.run(until=200e-6)
    assert rp.eb.counters()["tx_rnr_naks"] >= 3  # retried every 10 µs (timer code 1)
    assert rp.link.completions("a") == []
    rp.eb.post_recv(rp.qb, RecvWR(2, [Sge(dst.va, 1000, dst.lkey)]))
    rp.link.run()
    ok(rp.link.completions("a"), 1)
    ok(rp.link.completions("b"), 2)
    assert bytes(dst.view) == data


def test_rnr_retry_exhausted():
    rp = roce_pair(seed=15, qp_kw={"rnr_retry": 2, "min_rnr_timer": 1})
    src = register(rp.ma, 10)
    rp.ea.post_send(rp.qa, SendWR.send(1, [Sge(src.va, 10, src.lkey)]))
    rp.ea.post_send(rp.qa, SendWR.send(2, [Sge(src.va, 10, src.lkey)]))
    rp.link.run()
    assert [(w.wr_id, w.status) for w in rp.link.completions("a")] == [
        (1, WcStatus.RNR_RETRY_EXC_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert rp.eb.counters()["tx_rnr_naks"] == 3
    assert rp.ea.qp_attr(rp.qa)[0] is QpState.ERR
    assert rp.eb.qp_attr(rp.qb)[0] is QpState.RTS  # RNR is not a responder error


# -- duplicates --------------------------------------------------------------------


def _requests_from_a(tap):
    return [d for _, side, d, _ in tap if side == "a"]


def test_duplicate_write_is_re_acked_not_re_executed():
    rp = roce_pair(seed=16, tap=[])
    src, dst = register(rp.ma, 100), register(rp.mb, 100)
    fill(src, 16)
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, 100, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    (req,) = _requests_from_a(rp.link.tap)
    dst.view[:] = bytes(100)  # a re-execution would show
    rp.eb.receive_datagram(req, rp.link.addr_a, rp.link.now)
    out = rp.eb.datagrams_to_send(rp.link.now)
    assert len(out) == 1
    ack = P.parse(out[0][0])
    assert ack.opcode == P.ACKNOWLEDGE and ack.psn == P.parse(req).psn
    assert ack.syndrome >> 5 == 0
    assert bytes(dst.view) == bytes(100)
    assert rp.eb.counters()["rx_duplicates"] == 1


def test_duplicate_read_is_re_executed_from_the_request():
    rp = roce_pair(seed=17, pmtu=256, tap=[])
    local, remote = register(rp.ma, 1000), register(rp.mb, 1000)
    fill(remote, 17)
    rp.ea.post_send(rp.qa, SendWR.read(1, [Sge(local.va, 1000, local.lkey)], remote.va,
                                       remote.rkey))
    rp.link.run()
    ok(rp.link.completions("a"), 1)
    (req,) = _requests_from_a(rp.link.tap)
    remote.view[:4] = b"NEW!"
    rp.eb.receive_datagram(req, rp.link.addr_a, rp.link.now)
    out = [P.parse(d) for d, _, _ in rp.eb.datagrams_to_send(rp.link.now + 1)]
    assert [p.opcode for p in out] == [P.READ_RESP_FIRST, P.READ_RESP_MIDDLE,
                                       P.READ_RESP_MIDDLE, P.READ_RESP_LAST]
    assert bytes(out[0].payload[:4]) == b"NEW!"
    assert rp.eb.counters()["read_reexecuted"] == 1


def test_everything_duplicated_still_exact():
    rp = roce_pair(seed=18, pmtu=512, dup=1.0)
    src, dst = register(rp.ma, 20000), register(rp.mb, 20000)
    data = fill(src, 18)
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, 20000, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    ok(rp.link.completions("a"), 1)
    assert bytes(dst.view) == data
    assert rp.eb.counters()["rx_duplicates"] > 0


# -- coalesced ACKs, AckReq, go-back-N NAK --------------------------------------------


def test_acks_are_coalesced_and_one_nak_per_sequence_error_episode():
    rp = roce_pair(seed=19, pmtu=256, tap=[], engine_kw={"ack_every": 8, "ack_req_every": 64})
    src, dst = register(rp.ma, 256 * 64), register(rp.mb, 256 * 64)
    data = fill(src, 19)
    psns = []

    def drop_third(d, s, _d):
        p = P.parse(d)
        if s == rp.link.addr_a:
            psns.append(p.psn)
            return len(psns) == 3  # lose the third data packet, once
        return False
    rp.link.drop = drop_third
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, 256 * 64, src.lkey)], dst.va,
                                        dst.rkey))
    rp.link.run()
    ok(rp.link.completions("a"), 1)
    assert bytes(dst.view) == data
    from_b = [P.parse(d) for _, side, d, _ in rp.link.tap if side == "b"]
    naks = [p for p in from_b if p.syndrome >> 5 == 3]
    assert len(naks) == 1 and naks[0].psn == psns[2]  # one NAK, for the missing PSN
    acks = [p for p in from_b if p.syndrome >> 5 == 0]
    assert len(acks) <= 64 // 8 + 2  # coalesced: not one per packet
    assert [p.ackreq for p in map(P.parse, _requests_from_a(rp.link.tap))][-1] == 1
    assert acks[-1].msn == 1


def test_pfc_pause_holds_the_class_until_resumed():
    rp = roce_pair(seed=20)
    src, dst = register(rp.ma, 3000), register(rp.mb, 3000)
    data = fill(src, 20)
    cls = rp.ea.qp_attr(rp.qa)[1].dscp >> 3
    rp.ea.pause(cls, 100e-6)
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, 3000, src.lkey)], dst.va, dst.rkey))
    assert rp.ea.datagrams_to_send(0.0) == []
    assert rp.ea.get_timer() == 100e-6
    assert rp.ea.datagrams_to_send(50e-6) == []
    rp.ea.pause(cls + 1, 1.0)  # another class: no effect on this QP
    rp.link.now = 100e-6
    rp.link.run()
    ok(rp.link.completions("a"), 1)
    assert bytes(dst.view) == data
    assert rp.link.tap is None or True


def test_state_changed_is_an_event_and_errored_qp_can_be_reset_and_reused():
    rp = roce_pair(seed=21)
    rp.ea.modify_qp(rp.qa, "ERR")
    ev = rp.ea.next_event()
    assert isinstance(ev, StateChanged) and ev.new == "ERR"
    rp.ea.modify_qp(rp.qa, "RESET")
    rp.eb.modify_qp(rp.qb, "ERR")
    rp.eb.modify_qp(rp.qb, "RESET")
    ia, ib = rp.ea.query_qp(rp.qa), rp.eb.query_qp(rp.qb)
    rp.ea.connect(rp.qa, {**ib, "address": "10.0.0.2"})
    rp.eb.connect(rp.qb, {**ia, "address": "10.0.0.1"})
    src, dst = register(rp.ma, 10), register(rp.mb, 10)
    fill(src, 21)
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, 10, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    assert rp.link.completions("a")[-1].ok
    assert bytes(dst.view) == bytes(src.view)

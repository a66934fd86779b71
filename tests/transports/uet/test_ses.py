# SPDX-License-Identifier: GPL-2.0-only
"""UET SES operations beyond WRITE/SEND, sans-IO: READ, (fetching) atomics incl. CAS,
tagged sends with matching, and the small/medium/standard header shapes on the wire."""

from __future__ import annotations

import random
import struct

import pytest
from lossy_link import register
from uet_pair import LOSSY, B, MiB, clean, ok, uet_pair

from emu.core.cq import WcOpcode, WcStatus
from emu.core.memory import Access
from emu.core.verbs import Sge
from emu.transports.base import VerbsError
from emu.transports.uet import ses_amo as AMO
from emu.transports.uet import ses_tagged as TG
from emu.wire.codec.uet import (
    SesMediumRequest,
    SesResponseData,
    SesSmallRequest,
    SesStandardRequestSom,
    decode_packet,
)
from emu.wire.uet_defs import RETURN_CODE

U64 = struct.Struct("=Q")


def _read(p, wr_id: int, size: int, *, seed: int = 0, access=None, off: int = 0, n=None):
    """Fill a region on B with random bytes and post a READ of it from A."""
    kw = {} if access is None else {"access": access}
    src = register(p.mb, max(size, 1), **kw)
    data = random.Random(seed or size + 1).randbytes(max(size, 1))
    src.view[:] = data
    dst = register(p.ma, max(size, 1))
    length = size if n is None else n
    p.ea.post_read(p.a, wr_id, [Sge(dst.va, length, dst.lkey)], (B[0], p.b), src.va + off,
                   src.rkey, p.link.now)
    return src, dst, data


# -- READ ----------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 4096, 4097, 100_000, 1 * MiB])
def test_read_byte_exact_through_loss_reorder_dup(size):
    p = uet_pair(seed=size + 17, **LOSSY)
    _, dst, data = _read(p, 5, size)
    p.link.run()
    ok(p.link.completions("a"), 5)
    (wc,) = p.link.completions("a")
    assert (wc.opcode, wc.byte_len) == (WcOpcode.RDMA_READ, size)
    assert bytes(dst.view[:size]) == data[:size]
    assert p.link.completions("b") == []  # a READ is invisible to the target's application
    clean(p)


def test_read_scatters_into_several_sges_and_survives_heavy_response_loss():
    p = uet_pair(seed=4, ekw={"mtu": 1024}, loss=0.1, reorder=0.2, dup=0.1)
    size = 50_000
    src = register(p.mb, size)
    src.view[:] = data = random.Random(9).randbytes(size)
    dst = register(p.ma, size + 10)
    sges = [Sge(dst.va, 7, dst.lkey), Sge(dst.va + 7, 20_000, dst.lkey),
            Sge(dst.va + 20_007, size - 20_007, dst.lkey)]
    p.ea.post_read(p.a, 1, sges, (B[0], p.b), src.va, src.rkey)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:size]) == data
    assert p.ea.counters()["rx_rsp_data"] >= size // 1024
    clean(p)


@pytest.mark.parametrize("rate,reads", [(1e9, 16), (100e6, 2)])
def test_reads_behind_a_port_are_asked_for_once_and_fill_it(rate, reads):
    """perftest read-bw's shape — many 1 MiB READs outstanding — through a link that
    serializes at the engines' line rate. Each READ piece's data is asked for and sent
    once: no timeout, no re-ask, no duplicate at the target, and the link stays busy.
    Before, 16 READs queued ~16 MiB of answers at the target's port (~130 ms at 1 Gb/s),
    the RTO re-asked for data still on its way and 13 of 16 READs failed with
    RETRY_EXC_ERR; at 100 Mb/s one 128 KiB piece outlasts the 5 ms RTO by itself."""
    p = uet_pair(seed=31, ekw={"mtu": 8192, "rto": 5e-3, "line_rate": rate}, rate=rate,
                 delay=20e-6)
    size = MiB
    src = register(p.mb, size)
    src.view[:] = data = random.Random(31).randbytes(size)
    dsts = [register(p.ma, size) for _ in range(reads)]
    for i, d in enumerate(dsts):
        p.ea.post_read(p.a, i, [Sge(d.va, size, d.lkey)], (B[0], p.b), src.va, src.rkey)
    p.link.run()
    ok(p.link.completions("a"), *range(reads))
    assert all(bytes(d.view) == data for d in dsts)
    ca, cb = p.ea.counters(), p.eb.counters()
    assert ca.get("tx_retransmits", 0) == 0 and ca.get("tx_ack_req_for_response", 0) == 0
    assert cb.get("rx_duplicate", 0) == 0 and ca.get("rx_rsp_data_unmatched", 0) == 0
    assert ca["rx_rsp_data"] == reads * size // 8192  # every packet of data once
    assert reads * size * 8 / p.link.now > 0.9 * rate  # goodput, in the link's own time
    clean(p)


def test_read_data_travels_as_rsp_data_on_acks_with_offsets():
    p = uet_pair(seed=2, ekw={"mtu": 1024})
    p.link.tap = []
    _read(p, 1, 3000)
    p.link.run()
    ok(p.link.completions("a"), 1)
    rsps = [decode_packet(d) for _, s, d, _ in p.link.tap if s == "b"]
    data = [x for x in rsps if isinstance(x.ses, SesResponseData)]
    assert sorted((x.ses.message_offset, x.ses.payload_length) for x in data) == [
        (0, 1024), (1024, 1024), (2048, 952)]
    assert all(x.pds.type == 8 and x.ses.modified_length == 3000 for x in data)
    assert all(x.ses.read_req_message_id == x.ses.message_id for x in data)


@pytest.mark.parametrize("case,rc", [
    ("bad_key", "BAD_MKEY"), ("beyond", "BAD_ADDR"), ("no_read_access", "PERM_VIOLATION")])
def test_read_errors_return_codes_and_read_nothing(case, rc):
    p = uet_pair(seed=3)
    allowed = Access.REMOTE_WRITE if case == "no_read_access" else Access.REMOTE_READ
    src = register(p.mb, 4096, access=allowed | Access.LOCAL_WRITE)
    src.view[:] = b"\xaa" * 4096
    dst = register(p.ma, 8192)
    key = src.rkey + 1 if case == "bad_key" else src.rkey
    n = 8192 if case == "beyond" else 100
    p.ea.post_read(p.a, 9, [Sge(dst.va, n, dst.lkey)], (B[0], p.b), src.va, key)
    p.link.run()
    (wc,) = p.link.completions("a")
    assert wc.status is WcStatus.REM_ACCESS_ERR and wc.vendor_err == RETURN_CODE[rc]
    assert bytes(dst.view) == bytes(8192)  # nothing placed
    clean(p)


def test_read_into_read_only_local_buffer_is_refused_at_post():
    p = uet_pair(seed=3)
    dst = register(p.ma, 64, access=Access.REMOTE_READ)
    with pytest.raises(VerbsError):
        p.ea.post_read(p.a, 1, [Sge(dst.va, 64, dst.lkey)], (B[0], p.b), 0, 1)


def test_lost_read_responses_past_retry_limit_fail_the_read():
    p = uet_pair(seed=8, drop=lambda d, s, t: s[0] == B[0] and d[0] >> 3 == 8
                 and decode_packet(d).ses is not None)
    _read(p, 3, 5000)
    p.link.run()
    (wc,) = p.link.completions("a")
    assert wc.status is WcStatus.RETRY_EXC_ERR


# -- atomics ----------------------------------------------------------------------


def _atomic_region(p, value: int):
    r = register(p.mb, 64)
    U64.pack_into(r.view, 8, value)
    return r


def _result(p):
    return register(p.ma, 8)


def _run_atomic(p, wr_id, op, operand, swap=0, value=0, fetch=True):
    tgt = _atomic_region(p, value)
    res = _result(p)
    sg = [Sge(res.va, 8, res.lkey)] if fetch else []
    p.ea.post_atomic(p.a, wr_id, sg, (B[0], p.b), tgt.va + 8, tgt.rkey, op, operand, swap)
    p.link.run()
    return tgt, res


@pytest.mark.parametrize("op,operand,swap,start,after,wc", [
    ("fetch_add", 5, 0, 10, 15, WcOpcode.FETCH_ADD),
    ("SUM", 1, 0, (1 << 64) - 1, 0, WcOpcode.FETCH_ADD),  # wraps modulo 2^64
    ("swap", 77, 0, 10, 77, WcOpcode.FETCH_ADD),
    ("cmp_swap", 10, 99, 10, 99, WcOpcode.COMP_SWAP),  # compare matches: stored
    ("cmp_swap", 11, 99, 10, 10, WcOpcode.COMP_SWAP),  # no match: unchanged
    ("MAX", 3, 0, 10, 10, WcOpcode.FETCH_ADD),
    ("BXOR", 0xFF, 0, 0x0F, 0xF0, WcOpcode.FETCH_ADD),
])
def test_fetching_atomics_return_the_old_value(op, operand, swap, start, after, wc):
    p = uet_pair(seed=6)
    tgt, res = _run_atomic(p, 4, op, operand, swap, start)
    (c,) = p.link.completions("a")
    assert c.ok and c.opcode is wc and c.byte_len == 8
    assert U64.unpack_from(tgt.view, 8)[0] == after
    assert U64.unpack_from(res.view, 0)[0] == start
    clean(p)


def test_non_fetching_atomic_applies_without_data_back():
    p = uet_pair(seed=6)
    p.link.tap = []
    tgt, _ = _run_atomic(p, 4, "fetch_add", 3, value=4, fetch=False)
    ok(p.link.completions("a"), 4)
    assert U64.unpack_from(tgt.view, 8)[0] == 7
    reqs = [decode_packet(d) for _, s, d, _ in p.link.tap if s == "a" and d[0] >> 3 == 2]
    assert {r.ses.opcode for r in reqs} == {0x03}
    assert not any(isinstance(decode_packet(d).ses, SesResponseData)
                   for _, s, d, _ in p.link.tap if s == "b")


def test_int64_min_compares_signed():
    p = uet_pair(seed=6)
    tgt = _atomic_region(p, 5)
    res = _result(p)
    p.ea.post_atomic(p.a, 1, [Sge(res.va, 8, res.lkey)], (B[0], p.b), tgt.va + 8, tgt.rkey,
                     "MIN", (1 << 64) - 3, datatype="INT64")  # -3
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert U64.unpack_from(tgt.view, 8)[0] == (1 << 64) - 3


def test_atomics_apply_exactly_once_under_duplication_and_loss():
    p = uet_pair(seed=12, loss=0.1, dup=0.5, reorder=0.2)
    tgt = _atomic_region(p, 0)
    results = [_result(p) for _ in range(40)]
    for i, res in enumerate(results):
        p.ea.post_atomic(p.a, i, [Sge(res.va, 8, res.lkey)], (B[0], p.b), tgt.va + 8,
                         tgt.rkey, "fetch_add", 1)
    p.link.run()
    assert sorted(w.wr_id for w in p.link.completions("a")) == list(range(40))
    assert all(w.ok for w in p.link.completions("a"))
    assert U64.unpack_from(tgt.view, 8)[0] == 40  # 40 adds, however often they were resent
    olds = sorted(U64.unpack_from(r.view, 0)[0] for r in results)
    assert olds == list(range(40))  # each add saw a distinct old value
    assert p.eb.counters().get("rx_duplicate", 0) > 0
    clean(p)


def test_retransmitted_atomic_after_lost_response_is_answered_from_the_saved_result():
    first: list[bytes] = []

    def drop_first_response(d, s, t):
        if s[0] == B[0] and isinstance(decode_packet(d).ses, SesResponseData) and not first:
            first.append(d)
            return True
        return False

    p = uet_pair(seed=1, drop=drop_first_response)
    tgt, res = _run_atomic(p, 1, "fetch_add", 10, value=100)
    ok(p.link.completions("a"), 1)
    assert first  # the response really was lost once
    assert U64.unpack_from(tgt.view, 8)[0] == 110
    assert U64.unpack_from(res.view, 0)[0] == 100


@pytest.mark.parametrize("case,rc", [("misaligned", "AMO_UNALIGNED"),
                                     ("no_atomic_access", "PERM_VIOLATION"),
                                     ("bad_key", "BAD_MKEY")])
def test_atomic_errors(case, rc):
    p = uet_pair(seed=2)
    allowed = Access.REMOTE_READ if case == "no_atomic_access" else Access.REMOTE_ATOMIC
    tgt = register(p.mb, 64, access=allowed | Access.LOCAL_WRITE)
    res = _result(p)
    addr = tgt.va + 8
    if case == "misaligned":  # the verb refuses it; a hand-made request gets a return code
        with pytest.raises(VerbsError):
            p.ea.post_atomic(p.a, 1, [Sge(res.va, 8, res.lkey)], (B[0], p.b), addr + 4,
                             tgt.rkey, "SUM", 1)
        assert AMO.check(AMO.AMO_SUM, AMO.DT_UINT64, addr + 4) == RETURN_CODE[rc]
        return
    key = tgt.rkey + 1 if case == "bad_key" else tgt.rkey
    p.ea.post_atomic(p.a, 1, [Sge(res.va, 8, res.lkey)], (B[0], p.b), addr, key, "SUM", 1)
    p.link.run()
    (wc,) = p.link.completions("a")
    assert not wc.ok and wc.vendor_err == RETURN_CODE[rc]
    assert bytes(tgt.view) == bytes(64)


def test_atomic_verb_rejects_unknown_ops_and_types():
    p = uet_pair(seed=2)
    res = _result(p)
    for kw in ({"op": "NOPE"}, {"op": "SUM", "datatype": "FLOAT"}):
        with pytest.raises(VerbsError):
            p.ea.post_atomic(p.a, 1, [Sge(res.va, 8, res.lkey)], (B[0], p.b), 0, 1,
                             kw["op"], 1, datatype=kw.get("datatype", "UINT64"))


# -- tagged -----------------------------------------------------------------------


def test_tag_matching_rule():
    assert TG.matches(0x1234, 0x1234, 0)
    assert not TG.matches(0x1235, 0x1234, 0)
    assert TG.matches(0x12FF, 0x1200, 0xFF)
    q = [TG.TaggedRecv(1, [], 0, 0x10, 0), TG.TaggedRecv(2, [], 0, 0x00, 0xFF),
         TG.TaggedRecv(3, [], 0, 0x10, 0)]
    assert TG.match(q, 0x10).wr_id == 1  # first posted wins
    assert TG.match(q, 0x10).wr_id == 2  # the wildcard was posted before 3
    assert TG.match(q, 0x99) is None


def _tsend(p, wr_id, tag, payload: bytes):
    src = register(p.ma, max(len(payload), 1))
    src.view[:len(payload)] = payload
    p.ea.post_tsend(p.a, wr_id, [Sge(src.va, len(payload), src.lkey)], (B[0], p.b), tag)


def test_tagged_sends_land_in_the_matching_receive_not_in_post_order():
    p = uet_pair(seed=5, **LOSSY)
    bufs = {}
    for wr, tag in ((10, 0xA), (11, 0xB), (12, 0xC)):
        bufs[wr] = register(p.mb, 20_000)
        p.eb.post_trecv(p.b, wr, [Sge(bufs[wr].va, 20_000, bufs[wr].lkey)], tag)
    plain = register(p.mb, 100)
    p.eb.post_recv(p.b, 99, [Sge(plain.va, 100, plain.lkey)])
    msgs = {0xC: b"c" * 15_000, 0xA: b"a" * 7, 0xB: b"b" * 3000}
    for i, (tag, m) in enumerate(msgs.items()):
        _tsend(p, i, tag, m)
    p.link.run()
    assert sorted(w.wr_id for w in p.link.completions("a")) == [0, 1, 2]
    got = {w.wr_id: w for w in p.link.completions("b")}
    assert set(got) == {10, 11, 12}  # the plain receive was never used by a tagged send
    for wr, tag in ((10, 0xA), (11, 0xB), (12, 0xC)):
        assert got[wr].byte_len == len(msgs[tag]) and got[wr].opcode is WcOpcode.RECV
        assert bytes(bufs[wr].view[:len(msgs[tag])]) == msgs[tag]
    clean(p)


def test_unexpected_tagged_send_waits_until_a_matching_receive_is_posted():
    p = uet_pair(seed=7)
    wrong = register(p.mb, 100)
    p.eb.post_trecv(p.b, 1, [Sge(wrong.va, 100, wrong.lkey)], 0x77)
    _tsend(p, 5, 0x55, b"hello")
    p.link.run(until=2e-3)
    assert p.link.completions("a") == [] and p.link.completions("b") == []
    assert p.eb.counters()["tx_nack_0x09"] > 0  # NO_SES_MSG_AVAIL: not buffered, retried
    right = register(p.mb, 100)
    p.eb.post_trecv(p.b, 2, [Sge(right.va, 100, right.lkey)], 0x50, ignore=0x0F)
    p.link.run(stop=lambda: bool(p.link.completions("a")))
    ok(p.link.completions("a"), 5)
    (wc,) = p.link.completions("b")
    assert (wc.wr_id, wc.byte_len, wc.src_qp) == (2, 5, p.a)
    assert bytes(right.view[:5]) == b"hello" and bytes(wrong.view) == bytes(100)


# -- header shapes ----------------------------------------------------------------


def _ses_of(tap, side="a"):
    return [decode_packet(d).ses for _, s, d, _ in tap if s == side and d[0] >> 3 == 2]


def test_each_header_shape_appears_on_the_wire_and_decodes():
    p = uet_pair(seed=1, ekw={"mtu": 1024, "small_sends": True})
    p.link.tap = []
    rb = register(p.mb, 10_000)
    p.eb.post_recv(p.b, 1, [Sge(rb.va, 10_000, rb.lkey)])
    p.eb.post_recv(p.b, 2, [Sge(rb.va, 10_000, rb.lkey)])
    src = register(p.ma, 5000)
    src.view[:] = random.Random(1).randbytes(5000)
    p.ea.post_send(p.a, 1, [Sge(src.va, 100, src.lkey)], (B[0], p.b))  # small
    p.link.run()
    p.ea.post_write(p.a, 2, [Sge(src.va, 500, src.lkey)], (B[0], p.b), rb.va, rb.rkey)  # medium
    p.link.run()
    p.ea.post_send(p.a, 3, [Sge(src.va, 5000, src.lkey)], (B[0], p.b))  # standard
    p.link.run()
    ok(p.link.completions("a"), 1, 2, 3)
    kinds = [type(s) for s in _ses_of(p.link.tap)]
    assert kinds[0] is SesSmallRequest and kinds[1] is SesMediumRequest
    assert SesStandardRequestSom in kinds[2:]
    small, medium = _ses_of(p.link.tap)[:2]
    assert (small.som, small.eom, small.request_length) == (1, 1, 100)
    assert (medium.request_length, medium.mem_key_match_bits) == (500, rb.rkey)
    assert bytes(rb.view[:500]) == bytes(src.view[:500])
    b_wcs = p.link.completions("b")
    assert [w.src_qp for w in b_wcs] == [0, p.a]  # small headers do not name the sender


def test_compact_requests_through_loss_map_responses_by_psn():
    """Many single-packet (medium) WRITEs and READs in flight: their responses carry
    PSN-derived ids, and each must complete its own message exactly once."""
    p = uet_pair(seed=21, ekw={"mtu": 2048}, **LOSSY)
    dst = register(p.mb, 64 * 1000)
    src = register(p.ma, 64 * 1000)
    src.view[:] = data = random.Random(2).randbytes(64 * 1000)
    for i in range(64):
        p.ea.post_write(p.a, i, [Sge(src.va + i * 1000, 1000, src.lkey)], (B[0], p.b),
                        dst.va + i * 1000, dst.rkey)
    back = register(p.ma, 64 * 1000)
    p.link.run()
    for i in range(64):
        p.ea.post_read(p.a, 100 + i, [Sge(back.va + i * 1000, 1000, back.lkey)], (B[0], p.b),
                       dst.va + i * 1000, dst.rkey)
    p.link.run()
    wcs = p.link.completions("a")
    assert sorted(w.wr_id for w in wcs) == list(range(64)) + list(range(100, 164))
    assert all(w.ok for w in wcs)
    assert bytes(dst.view) == data and bytes(back.view) == data
    assert all(isinstance(s, SesMediumRequest) for s in _ses_of(p.link.tap or []))
    clean(p)


# -- rendezvous ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [3000, 2 * MiB + 5])
def test_rendezvous_send_pulls_the_rest_byte_exact_through_loss(size):
    p = uet_pair(seed=size % 97, ekw={"mtu": 4096}, **LOSSY)
    p.link.tap = []
    src = register(p.ma, size)
    src.view[:] = data = random.Random(size).randbytes(size)
    dst = register(p.mb, size + 64)
    p.eb.post_recv(p.b, 8, [Sge(dst.va, 100, dst.lkey), Sge(dst.va + 100, size - 36, dst.lkey)])
    p.ea.post_send(p.a, 3, [Sge(src.va, size, src.lkey)], (B[0], p.b), rendezvous=True)
    p.link.run()
    ok(p.link.completions("a"), 3)
    (sw,) = p.link.completions("a")
    assert (sw.opcode, sw.byte_len) == (WcOpcode.SEND, size)
    (rw,) = p.link.completions("b")
    assert (rw.wr_id, rw.opcode, rw.byte_len, rw.src_qp) == (8, WcOpcode.RECV, size, p.a)
    assert bytes(dst.view[:size]) == data
    firsts = [decode_packet(d) for _, s, d, _ in p.link.tap if s == "a" and d[0] >> 3 == 2]
    rdv = [x for x in firsts if x.ses.opcode == 0x06]
    assert rdv and all(x.ext.eager_length == 3000 if size == 3000 else 4096 for x in rdv)
    # the remainder was pulled: READ requests went from B to A
    reads = [x for _, s, d, _ in p.link.tap if s == "b" and d[0] >> 3 == 2
             for x in [decode_packet(d)] if x.ses.opcode == 0x02]
    assert bool(reads) == (size > 4096)
    assert p.ea.rdv.exposed == {}  # the buffer is no longer exposed after completion
    clean(p)


def test_withdrawn_rendezvous_key_is_refused():
    p = uet_pair(seed=2)
    dst = register(p.ma, 64)
    p.ea.post_read(p.a, 1, [Sge(dst.va, 64, dst.lkey)], (B[0], p.b), 0, (1 << 40) + 1)
    p.link.run()
    (wc,) = p.link.completions("a")
    assert wc.vendor_err == RETURN_CODE["BAD_MKEY"]


def test_every_ses_packet_dissects_in_the_scapy_reference_layers():
    """Small/medium/standard requests, atomic/CAS/rendezvous extension headers and
    RSP_DATA from a real run decode in scapy with the codec's classes, byte for byte."""
    from emu.wire import uet as SC

    p = uet_pair(seed=3, ekw={"mtu": 1024, "small_sends": True})
    p.link.tap = []
    rb = register(p.mb, 8192)
    p.eb.post_recv(p.b, 1, [Sge(rb.va, 100, rb.lkey)])
    p.eb.post_recv(p.b, 2, [Sge(rb.va, 8192, rb.lkey)])
    src = register(p.ma, 5000)
    p.ea.post_send(p.a, 1, [Sge(src.va, 10, src.lkey)], (B[0], p.b))
    p.ea.post_send(p.a, 2, [Sge(src.va, 5000, src.lkey)], (B[0], p.b), rendezvous=True)
    p.link.run()
    tgt = _atomic_region(p, 1)
    res = _result(p)
    for op in ("fetch_add", "cmp_swap"):
        p.ea.post_atomic(p.a, 3, [Sge(res.va, 8, res.lkey)], (B[0], p.b), tgt.va + 8,
                         tgt.rkey, op, 1, 2)
    _read(p, 4, 3000)
    p.link.run()
    assert all(w.ok for w in p.link.completions("a")) and len(p.link.completions("a")) == 5
    seen = set()
    for _, _, d, _ in p.link.tap:
        codec = decode_packet(d)
        names = [type(h).__name__ for h in codec.headers]
        layers = []
        pkt = SC.UetPds(d)
        while pkt is not None and type(pkt).__name__ not in ("Raw", "NoPayload", "Padding"):
            layers.append(type(pkt).__name__)
            pkt = pkt.payload if pkt.payload else None
        assert layers == names, (layers, names)
        seen.update(names)
    assert {"SesSmallRequest", "SesMediumRequest", "SesStandardRequestSom", "SesAtomic",
            "SesCompareSwap", "SesRendezvous", "SesResponseData", "SesResponse"} <= seen

# SPDX-License-Identifier: GPL-2.0-only
"""UET delivery modes beside RUD: ROD (in order), RUDI (no PDC, idempotent), UUD (best effort).

Sans-IO: two engines over the seeded in-memory LossyLink (issue 6 acceptance:
byte-exact delivery in every mode; ROD delivers in order; UUD losses are
visible to the application).
"""

from __future__ import annotations

import random

import pytest
from lossy_link import register
from uet_pair import LOSSY, A, B, clean, ok, uet_pair, write

from emu.core.cq import WcOpcode, WcStatus
from emu.core.memory import Access
from emu.core.verbs import Sge
from emu.transports.base import VerbsError
from emu.transports.uet import fastpath as FP
from emu.transports.uet import ses as S
from emu.wire.codec.uet import PdsRequest, decode_packet, encode_packet


def post_write(p, wr_id: int, size: int, mode: str, seed: int = 0, dst=None):
    _, dst, data = write(p, wr_id, size, seed, mode=mode, dst=dst)
    return dst, data


def record_writes(mem, target):
    """Spy on the target's placements: the (address, length) of every one, in order —
    through its memory's ``remote_write`` (the general path) or the WRITE fast path
    (``Target.write_run``, which writes into the region itself)."""
    log: list[tuple[int, int]] = []
    orig = mem.remote_write

    def spy(rkey, addr, data, pd=None):
        log.append((addr, len(data)))
        return orig(rkey, addr, data, pd)

    mem.remote_write = spy
    fast = target.write_run

    def spy_fast(items, i, *a):
        k = fast(items, i, *a)
        for data, _, _ in items[i:i + k]:
            f = FP.write_middle(data)  # it took a new PSN: its bytes were placed
            log.append((f[8] + f[11], f[10]))  # buffer_offset + message_offset, payload_length
        return k

    target.write_run = spy_fast
    return log


def pds_type(d: bytes) -> int:
    return d[0] >> 3


# -- ROD -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["rod", "rud"])
def test_rod_places_in_order_under_loss_reorder_dup_and_rud_does_not(mode):
    """The same seeded misbehaving link: ROD's placements are one contiguous ascending
    run; RUD's are not (so the check can fail)."""
    p = uet_pair(seed=21, ekw={"mtu": 1024}, loss=0.05, reorder=0.2, dup=0.05)
    log = record_writes(p.mb, p.eb.target)
    dst, data = post_write(p, 1, 200 * 1024, mode)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    offs = [a - dst.va for a, _ in log]
    in_order = offs == list(range(0, 200 * 1024, 1024))
    assert in_order if mode == "rod" else not in_order
    if mode == "rod":
        c = p.eb.counters()
        assert c["rx_rod_out_of_order"] > 0 and c["tx_nack_0x0d"] > 0
        assert p.ea.counters()["rod_go_back_packets"] > 0
        assert p.ea.pdcs()[0]["mode"] == "rod" and p.eb.pdcs()[0]["mode"] == "rod"
    clean(p)


def test_rod_sends_complete_in_post_order_on_both_sides():
    p = uet_pair(seed=22, ekw={"mtu": 512}, **{**LOSSY, "reorder": 0.2})
    n = 12
    dst = register(p.mb, n * 3000)
    src = register(p.ma, n * 3000)
    for i in range(n):
        p.eb.post_recv(p.b, 100 + i, [Sge(dst.va + i * 3000, 3000, dst.lkey)])
    datas = []
    for i in range(n):
        d = random.Random(i).randbytes(1000 + 150 * i)
        src.view[i * 3000:i * 3000 + len(d)] = d
        datas.append(d)
        p.ea.post_send(p.a, i, [Sge(src.va + i * 3000, len(d), src.lkey)], (B[0], p.b),
                       mode="rod")
    p.link.run()
    ok(p.link.completions("a"), *range(n))  # sender side: post order
    rc = p.link.completions("b")
    assert [w.wr_id for w in rc] == [100 + i for i in range(n)]  # receiver: post order
    for i, d in enumerate(datas):
        assert rc[i].byte_len == len(d)
        assert bytes(dst.view[i * 3000:i * 3000 + len(d)]) == d
    clean(p)


def test_rod_drops_out_of_order_and_nacks_once_per_hole():
    p = uet_pair(seed=23, ekw={"mtu": 1024})
    first = []
    p.link.drop = lambda d, s, dst: s == A and pds_type(d) == 3 and not first and (
        first.append(d) or True)
    dst, data = post_write(p, 1, 5 * 1024, "rod")
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    c = p.eb.counters()
    assert c["rx_rod_out_of_order"] == 4  # packets 2..5 arrived behind the hole
    assert c["tx_nack_0x0d"] == 1  # one NACK for that hole
    assert p.ea.counters()["rod_go_back_packets"] == 5
    assert p.ea.counters().get("rto_retransmits", 0) == 0  # recovered without the RTO


def test_pdcs_are_keyed_per_mode_and_a_mode_mismatch_is_nacked():
    p = uet_pair(seed=24)
    post_write(p, 1, 100, "rud")
    post_write(p, 2, 100, "rod")
    p.link.run()
    ok(sorted(p.link.completions("a"), key=lambda w: w.wr_id), 1, 2)
    assert sorted(x["mode"] for x in p.ea.pdcs()) == ["rod", "rud"]
    rod_t = next(x for x in p.eb.pdcs() if x["mode"] == "rod")
    rod_i = next(x for x in p.ea.pdcs() if x["mode"] == "rod")
    # a RUD_REQ naming the ROD PDC: PDC_MODE_MISMATCH, nothing placed
    bad = encode_packet(PdsRequest(type=2, psn=(rod_i["next_psn"]) & 0xFFFFFFFF,
                                   spdcid=rod_i["pdcid"], dpdcid=rod_t["pdcid"]))
    p.eb.receive_datagram(bad, A, p.link.now)
    ((d, _, _),) = p.eb.datagrams_to_send(p.link.now)
    n = decode_packet(d).pds
    assert (n.type, n.nack_code) == (10, 0x16)
    assert p.eb.counters()["rx_mode_mismatch"] == 1


def test_endpoint_default_mode_and_bad_mode():
    p = uet_pair(seed=25)
    ep = p.ea.create_ep(send_cq="a.scq", mode="rod")
    src, dst = register(p.ma, 10), register(p.mb, 10)
    p.ea.post_write(ep, 1, [Sge(src.va, 10, src.lkey)], (B[0], p.b), dst.va, dst.rkey)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert [x["mode"] for x in p.ea.pdcs()] == ["rod"]
    with pytest.raises(VerbsError, match="delivery mode"):
        p.ea.create_ep(mode="fast")
    with pytest.raises(VerbsError, match="delivery mode"):
        p.ea.post_write(p.a, 2, [Sge(src.va, 10, src.lkey)], (B[0], p.b), dst.va, dst.rkey,
                        mode="xyz")


# -- RUDI ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 4096, 4097, 300_000])
def test_rudi_write_byte_exact_through_loss_reorder_dup_without_a_pdc(size):
    p = uet_pair(seed=size + 31, **{**LOSSY, "loss": 0.05, "dup": 0.05})
    dst, data = post_write(p, 7, size, "rudi")
    p.link.run()
    ok(p.link.completions("a"), 7)
    assert p.link.completions("a")[0].opcode is WcOpcode.RDMA_WRITE
    assert bytes(dst.view[:size]) == data
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []  # no PDC in RUDI
    assert p.ea.counters()["rudi_outstanding"] == 0
    if size > 4096:
        assert p.eb.counters()["rx_rudi_requests"] >= size // 4096
    clean(p)


def test_rudi_duplicates_are_reexecuted_harmlessly_and_extra_responses_ignored():
    p = uet_pair(seed=32, dup=1.0)  # every datagram twice
    dst, data = post_write(p, 1, 10_000, "rudi")
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:10_000]) == data
    assert p.eb.counters()["rx_rudi_requests"] == 6  # 3 packets, each executed twice
    assert p.ea.counters()["rx_rudi_resp_unknown"] >= 3


def test_rudi_refuses_non_idempotent_operations():
    p = uet_pair(seed=33)
    src = register(p.ma, 10)
    with pytest.raises(VerbsError, match="idempotent"):
        p.ea.post_send(p.a, 1, [Sge(src.va, 10, src.lkey)], (B[0], p.b), mode="rudi")


def test_rudi_bad_key_writes_nothing_and_fails_with_the_code():
    p = uet_pair(seed=34, ekw={"mtu": 1024})
    dst = register(p.mb, 8192, Access.LOCAL_WRITE)  # no remote write
    post_write(p, 1, 8192, "rudi", dst=dst)
    p.link.run()
    (wc,) = p.link.completions("a")
    assert wc.status is WcStatus.REM_ACCESS_ERR and wc.vendor_err == S.RC_PERM_VIOLATION
    assert bytes(dst.view[:]) == bytes(8192)
    assert p.ea.counters()["rudi_outstanding"] == 0 and p.ea.get_timer() is None


def test_rudi_retransmits_at_the_rto_and_fails_after_the_retries():
    p = uet_pair(seed=35, ekw={"rto": 1e-3, "max_retries": 3})
    lost = []
    p.link.drop = lambda d, s, dst: s == A and len(lost) < 2 and (lost.append(d) or True)
    dst, data = post_write(p, 1, 100, "rudi")
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:100]) == data and p.ea.counters()["rto_retransmits"] == 2
    assert all(decode_packet(d).pds.retx == 0 for d in lost[:1])
    p.link.drop = lambda d, s, dst: s == A
    post_write(p, 2, 100, "rudi")
    t0 = p.link.now
    p.link.run()
    wc = p.link.completions("a")[-1]
    assert (wc.wr_id, wc.status) == (2, WcStatus.RETRY_EXC_ERR)
    assert 4e-3 - 1e-9 <= p.link.now - t0 < 5e-3  # 1 + 3 retries × 1 ms


def test_rudi_trimmed_packet_is_nacked_with_nt_and_resent_at_once():
    p = uet_pair(seed=36, ekw={"rto": 5e-3})
    orig = p.eb.receive_datagram
    trimmed = []

    def rx(data, addr, now, *, ecn=0):
        first = pds_type(data) == 4 and not trimmed
        if first:
            trimmed.append(1)
        return orig(data, addr, now, ecn=ecn, trimmed=first)

    p.eb.receive_datagram = rx
    dst, data = post_write(p, 1, 3000, "rudi")
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:3000]) == data
    assert p.ea.counters()["rx_nack_0x01"] == 1 and p.ea.counters()["tx_rudi_retransmits"] == 1
    assert p.link.now < 1e-3  # well before the 5 ms RTO


# -- UUD -------------------------------------------------------------------------------


def test_uud_lost_datagrams_are_simply_missing_and_counted():
    p = uet_pair(seed=41)
    n = 10
    src, dst = register(p.ma, n * 100), register(p.mb, n * 100)
    for i in range(n):
        p.eb.post_recv(p.b, 100 + i, [Sge(dst.va + i * 100, 100, dst.lkey)])
    k = [0]

    def drop(d, s, _dst):
        if s == A and pds_type(d) == 6:
            k[0] += 1
            return k[0] in (3, 7)
        return False

    p.link.drop = drop
    for i in range(n):
        src.view[i * 100:(i + 1) * 100] = bytes([i + 1]) * 100
        p.ea.post_send(p.a, i, [Sge(src.va + i * 100, 100, src.lkey)], (B[0], p.b), mode="uud")
    p.link.run()
    ok(p.link.completions("a"), *range(n))  # sender completes on send, loss or not
    rc = p.link.completions("b")
    assert len(rc) == n - 2 and all(w.ok and w.byte_len == 100 and w.src_qp == p.a for w in rc)
    got = [bytes(dst.view[i * 100:(i + 1) * 100]) for i in range(n - 2)]
    assert got == [bytes([i + 1]) * 100 for i in range(n) if i not in (2, 6)]
    assert p.ea.counters()["tx_uud_datagrams"] == n
    assert p.eb.counters()["rx_uud_datagrams"] == n - 2 and p.link.dropped == 2
    assert p.eb.counters().get("tx_acks", 0) == 0  # nothing acknowledged
    assert p.ea.pdcs() == [] and p.eb.pdcs() == []
    clean(p)


def test_uud_without_buffer_or_too_long_is_a_counted_drop():
    p = uet_pair(seed=42)
    src, dst = register(p.ma, 200), register(p.mb, 200)
    p.ea.post_send(p.a, 1, [Sge(src.va, 200, src.lkey)], (B[0], p.b), mode="uud")
    p.link.run()
    assert p.eb.counters()["rx_drop_uud_no_buffer"] == 1 and not p.link.completions("b")
    p.eb.post_recv(p.b, 9, [Sge(dst.va, 50, dst.lkey)])
    p.ea.post_send(p.a, 2, [Sge(src.va, 200, src.lkey)], (B[0], p.b), mode="uud")
    p.link.run()
    (wc,) = p.link.completions("b")
    assert wc.status is WcStatus.LOC_LEN_ERR and p.eb.counters()["rx_drop_uud_too_long"] == 1
    big = register(p.ma, 5000)
    with pytest.raises(VerbsError, match="one packet"):
        p.ea.post_send(p.a, 3, [Sge(big.va, 5000, big.lkey)], (B[0], p.b), mode="uud")
    with pytest.raises(VerbsError, match="SEND"):
        p.ea.post_write(p.a, 4, [Sge(src.va, 10, src.lkey)], (B[0], p.b), dst.va, dst.rkey,
                        mode="uud")
    clean(p)


def test_random_bodies_of_every_mode_and_cp_are_counted_never_raised():
    """Valid prologues of ROD/RUDI/UUD/CP/NACK(NT) with random rest: drops, no exceptions."""
    p = uet_pair(seed=43)
    rng = random.Random(43)
    for e in (p.ea, p.eb):
        for _ in range(3000):
            typ = rng.choice([3, 4, 5, 6, 10, 11])
            body = bytes([typ << 3 | rng.getrandbits(3), rng.getrandbits(8)])
            e.receive_datagram(body + rng.randbytes(rng.randrange(0, 90)), A, 0.0)
            e.datagrams_to_send(0.0)
    clean(p)
    dst, data = post_write(p, 1, 5000, "rudi")  # and the engines still work
    p.link.run()
    assert p.link.completions("a")[-1].ok and bytes(dst.view[:5000]) == data

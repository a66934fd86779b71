# SPDX-License-Identifier: GPL-2.0-only
"""UET RUD WRITE/SEND through an in-memory lossy link: byte-exact data, responses, robustness.

No sockets: two :class:`UetEngine` instances, a seeded :class:`LossyLink`
and a hand-stepped clock (issue 6's sans-IO acceptance).
"""

from __future__ import annotations

import random

import pytest
from lossy_link import register
from uet_pair import LOSSY, A, B, MiB, clean, ok, uet_pair, write

from emu.core.cq import WcOpcode, WcStatus
from emu.core.memory import MemoryTable
from emu.core.verbs import Sge
from emu.transports.uet import UetEngine
from emu.transports.uet import ses as S

SIZES = [0, 1, 4095, 4096, 4097, 64 * 1024 + 3, 1 * MiB, 4 * MiB]


@pytest.mark.parametrize("size", SIZES)
def test_write_sizes_byte_exact_through_loss_reorder_dup(size):
    p = uet_pair(seed=size + 3, **LOSSY)
    _, dst, data = write(p, 7, size)
    p.link.run()
    ok(p.link.completions("a"), 7)
    assert p.link.completions("a")[0].opcode is WcOpcode.RDMA_WRITE
    assert p.link.completions("a")[0].byte_len == size
    assert bytes(dst.view[:size]) == data
    clean(p)


def test_many_messages_in_flight_complete_exactly_once():
    p = uet_pair(seed=11, ekw={"mtu": 1024}, **LOSSY)
    bufs = [write(p, i, 1000 * i + 17, seed=i) for i in range(1, 21)]
    p.link.run()
    assert sorted(w.wr_id for w in p.link.completions("a")) == list(range(1, 21))
    assert all(w.ok for w in p.link.completions("a"))
    for _, dst, data in bufs:
        assert bytes(dst.view[:len(data)]) == data
    clean(p)


def test_start_psn_near_wrap_is_harmless():
    p = uet_pair(seed=5, ekw={"mtu": 512}, **LOSSY)
    p.ea.rng = type("R", (), {"getrandbits": lambda self, k: (1 << k) - 20})()  # Start_PSN
    _, dst, data = write(p, 1, 64 * 1024)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data


@pytest.mark.parametrize("size", [0, 5000, 300_000])
def test_send_into_posted_receive_through_loss(size):
    p = uet_pair(seed=size + 9, **LOSSY)
    n = max(size, 1)
    src, dst = register(p.ma, n), register(p.mb, n + 100)
    data = random.Random(size).randbytes(n)[:size]
    src.view[:size] = data
    p.eb.post_recv(p.b, 70, [Sge(dst.va, 50, dst.lkey), Sge(dst.va + 50, n + 50, dst.lkey)])
    p.ea.post_send(p.a, 7, [Sge(src.va, size, src.lkey)], (B[0], p.b))
    p.link.run()
    ok(p.link.completions("a"), 7)
    (wc,) = p.link.completions("b")
    assert (wc.wr_id, wc.opcode, wc.byte_len, wc.src_qp) == (70, WcOpcode.RECV, size, p.a)
    assert bytes(dst.view[:size]) == data
    clean(p)


def test_send_without_receive_waits_for_a_buffer():
    """NO_SES_MSG_AVAIL is a "retransmit" NACK: the SEND lands once a buffer is posted."""
    p = uet_pair(seed=3)
    src, dst = register(p.ma, 100), register(p.mb, 100)
    src.view[:] = bytes(range(100))
    p.ea.post_send(p.a, 7, [Sge(src.va, 100, src.lkey)], (B[0], p.b))
    p.link.run(until=0.5e-3)
    assert p.eb.counters()["tx_nack_0x09"] >= 1 and not p.link.completions("a")
    p.eb.post_recv(p.b, 70, [Sge(dst.va, 100, dst.lkey)])
    p.link.run()
    ok(p.link.completions("a"), 7)
    assert bytes(dst.view[:]) == bytes(range(100))


@pytest.mark.parametrize("what", ["bad_key", "out_of_bounds", "no_write_access"])
def test_bad_write_writes_nothing_and_returns_the_code(what):
    p = uet_pair(seed=4, ekw={"mtu": 1024})
    src = register(p.ma, 8192)
    from emu.core.memory import Access
    dst = register(p.mb, 8192, Access.LOCAL_WRITE if what == "no_write_access"
                   else Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    src.view[:] = b"\x55" * 8192
    rkey, va = dst.rkey, dst.va
    if what == "bad_key":
        rkey ^= 0x1234
    elif what == "out_of_bounds":
        va += 4096
    p.ea.post_write(p.a, 9, [Sge(src.va, 8192, src.lkey)], (B[0], p.b), va, rkey)
    p.link.run()
    (wc,) = p.link.completions("a")
    want = {"bad_key": S.RC_BAD_MKEY, "out_of_bounds": S.RC_BAD_ADDR,
            "no_write_access": S.RC_PERM_VIOLATION}[what]
    assert wc.status is WcStatus.REM_ACCESS_ERR and wc.vendor_err == want
    assert bytes(dst.view[:]) == bytes(8192)  # zero bytes written
    # the PDC survives a failed message
    _, dst2, data = write(p, 10, 5000)
    p.link.run()
    assert p.link.completions("a")[-1].ok and bytes(dst2.view[:5000]) == data


@pytest.mark.parametrize("probes", [True, False])
def test_lost_response_ack_is_recovered_with_ack_req(probes):
    """The ACK carrying the SES response is lost: the initiator asks (CP ACK_REQ) and the
    target repeats the stored response — a loss probe's few round trips after the ACK
    that left the message waiting, or (probes off) the RTO after."""
    p = uet_pair(seed=8, ekw={"loss_probes": probes})
    lost = []

    def drop(data: bytes, src: tuple, dst: tuple) -> bool:
        if src == B and data[0] >> 3 == 8 and (data[1] >> 7 | (data[0] & 7) << 1) == 4:
            if not lost:
                lost.append(data)
                return True
        return False

    p.link.drop = drop
    _, dst, data = write(p, 1, 3000)
    write(p, 2, 3000)  # its ACK covers message 1's PSN cumulatively, without the response
    p.link.run()
    ok(p.link.completions("a"), 2, 1)
    assert bytes(dst.view[:3000]) == data
    c = p.ea.counters()
    assert lost and p.eb.counters()["rx_ack_req"] == 1
    if probes:
        assert c["tx_loss_probes"] == 1 and "tx_ack_req_for_response" not in c
        assert p.link.now < p.ea.rto / 10
    else:
        assert c["tx_ack_req_for_response"] == 1 and p.link.now > p.ea.rto


def test_malformed_datagrams_are_counted_never_raised():
    p = uet_pair(seed=2)
    rng = random.Random(0)
    bad = [b"", b"\x00", b"\xff" * 3, bytes([2 << 3, 0x84]) + b"\x00" * 5,  # truncated RUD_REQ
           bytes([31 << 3, 0]) + bytes(20)]  # unknown type
    bad += [rng.randbytes(rng.randrange(0, 80)) for _ in range(2000)]
    for e in (p.ea, p.eb):
        for d in bad:
            e.receive_datagram(d, A, 0.0)
        c = e.counters()
        assert c["rx_drop_malformed"] >= 4
        assert c.get("rx_drop_internal_error", 0) == 0
    # and the engines still work
    p.link.run()
    _, dst, data = write(p, 1, 10_000)
    p.link.run()
    assert p.link.completions("a")[-1].ok and bytes(dst.view[:10_000]) == data


def test_factory_builds_an_engine_from_a_daemon_context():
    from emu.transports.uet import create_engine, payload_for

    class Ctx:
        memory = MemoryTable(random.Random(1))
        rng = random.Random(2)
        addresses = ["10.0.0.1"]
        port = 4793
        mtu = 9000
        options = {"rto": 3e-3, "bogus": 1}

    e = create_engine(Ctx()).engine  # the daemon gets it behind its verbs adapter
    assert isinstance(e, UetEngine) and e.rto == 3e-3 and e.mtu == payload_for(9000)
    assert e.query_ep(e.create_ep())["address"] == "10.0.0.1"
    assert payload_for(1500) == 1280

# SPDX-License-Identifier: GPL-2.0-only
"""A trimmed RoCEv2 packet is a lost packet (issue #12, item 4), sans-IO.

The switch pipeline can cut a RoCEv2 packet to its headers (BTH + extension
headers, ICRC recomputed, DSCP rewritten); the NIC daemon tells the engine
with ``trimmed=True``. RoCEv2 has no trimming-aware recovery, so the engine
must take it as a loss — counted in ``trimmed_discarded`` and repaired by
go-back-N — and never as the invalid request its short length would
otherwise be (that killed the QP with ``REM_INV_REQ_ERR``). The packets here
are cut by the real :func:`emu.switch.trim.trim` (``lossy_link.trim_roce``).
"""

from __future__ import annotations

import random

import pytest
from lossy_link import register, roce_pair, trim_roce

from emu.core.cq import WcStatus
from emu.transports.roce import RecvWR, SendWR, Sge
from emu.transports.roce import packets as P

PMTU = 1024


def trim_first(opcode: int, n: int = 1, skip: int = 0):
    """A LossyLink ``trim`` hook cutting the first ``n`` datagrams with ``opcode``
    (after ``skip`` of them)."""
    seen = {"match": 0, "cut": 0}

    def hook(data: bytes, src: tuple, dst: tuple) -> bool:
        if data[0] != opcode:
            return False
        seen["match"] += 1
        if seen["match"] > skip and seen["cut"] < n:
            seen["cut"] += 1
            return True
        return False

    return hook


def healthy(rp) -> None:
    assert rp.link.state_changes("a") == [] and rp.link.state_changes("b") == []
    for e in (rp.ea, rp.eb):
        c = e.counters()
        assert c.get("qp_errors", 0) == 0 and c.get("rx_drop_internal_error", 0) == 0
        assert c.get("tx_error_naks", 0) == 0 and c.get("rx_error_naks", 0) == 0


def test_trim_roce_cuts_to_headers_with_a_valid_icrc():
    """The harness's trimmed packet is what the engine will see from the switch."""
    pkt = P.build(P.WRITE_MIDDLE, 0x11, 5, b"", bytes(range(256)) * 4)
    P.seal(pkt, P.pseudo_header_icrc)
    cut = trim_roce(bytes(pkt))
    assert cut is not None and len(cut) == P.BTH_SIZE + P.ICRC_SIZE
    assert cut[:P.BTH_SIZE] == pkt[:P.BTH_SIZE]
    assert P.icrc_ok(cut, P.pseudo_header_icrc)
    ack = P.build(P.ACKNOWLEDGE, 0x11, 5, P.aeth(P.ack_syndrome(), 1))
    P.seal(ack, P.pseudo_header_icrc)
    assert trim_roce(bytes(ack)) is None  # headers only: nothing to cut


def write_through(rp, size: int, seed: int):
    """WRITE ``size`` random bytes a → b through the pair's link until it is quiet;
    returns (the one completion at a, b's region, the bytes written)."""
    src, dst = register(rp.ma, size), register(rp.mb, size)
    data = random.Random(seed).randbytes(size)
    src.view[:] = data
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    (wc,) = rp.link.completions("a")
    return wc, dst, data


@pytest.mark.parametrize("daemon", [False, True], ids=["icrc", "daemon-engines"])
@pytest.mark.parametrize("opcode,skip", [(P.WRITE_FIRST, 0), (P.WRITE_MIDDLE, 2),
                                         (P.WRITE_LAST, 0)])
def test_trimmed_write_packet_is_a_loss_repaired_by_go_back_n(opcode, skip, daemon):
    kw = {"engine_kw": {"icrc": None, "gather": True}} if daemon else {}
    rp = roce_pair(seed=4, pmtu=PMTU, trim=trim_first(opcode, skip=skip), **kw)
    wc, dst, data = write_through(rp, 8 * PMTU + 100, seed=5)
    assert wc.status is WcStatus.SUCCESS and wc.wr_id == 1
    assert bytes(dst.view) == data
    assert rp.link.trimmed == 1
    b, a = rp.eb.counters(), rp.ea.counters()
    assert b["trimmed_discarded"] == 1
    if opcode != P.WRITE_LAST:  # the next packet shows the hole: NAK, then go-back-N
        assert b["tx_seq_naks"] == 1 and a["rx_seq_naks"] == 1
    else:  # nothing follows the last packet: the ACK timeout finds the loss
        assert a["timeouts"] >= 1
    assert a["tx_retransmits"] > 0
    healthy(rp)


def test_trimmed_send_only_that_still_looks_valid_is_a_loss():
    """A SEND_ONLY cut to 0 B has a perfectly legal length; only the flag tells. Taking it
    would complete the receive with no data (silent corruption)."""
    rp = roce_pair(seed=6, pmtu=PMTU, trim=trim_first(P.SEND_ONLY))
    src, dst = register(rp.ma, 300), register(rp.mb, 300)
    data = random.Random(6).randbytes(300)
    src.view[:] = data
    rp.eb.post_recv(rp.qb, RecvWR(9, [Sge(dst.va, 300, dst.lkey)]))
    rp.ea.post_send(rp.qa, SendWR.send(1, [Sge(src.va, 300, src.lkey)]))
    rp.link.run()
    (wc,) = rp.link.completions("a")
    assert wc.status is WcStatus.SUCCESS
    (rwc,) = rp.link.completions("b")
    assert rwc.status is WcStatus.SUCCESS and rwc.byte_len == 300
    assert bytes(dst.view) == data and rp.eb.counters()["trimmed_discarded"] == 1
    healthy(rp)


def test_trimmed_read_response_is_a_loss_at_the_requester():
    rp = roce_pair(seed=7, pmtu=PMTU, trim=trim_first(P.READ_RESP_MIDDLE, skip=1))
    size = 6 * PMTU
    local, remote = register(rp.ma, size), register(rp.mb, size)
    data = random.Random(7).randbytes(size)
    remote.view[:] = data
    rp.ea.post_send(rp.qa, SendWR.read(1, [Sge(local.va, size, local.lkey)], remote.va,
                                       remote.rkey))
    rp.link.run()
    (wc,) = rp.link.completions("a")
    assert wc.status is WcStatus.SUCCESS and bytes(local.view) == data
    a = rp.ea.counters()
    assert a["trimmed_discarded"] == 1 and a["implied_naks"] >= 1
    healthy(rp)


def test_one_mib_write_with_many_trims_is_exact():
    rng = random.Random(8)
    rp = roce_pair(seed=8, pmtu=PMTU, line_rate=100e9,
                   trim=lambda d, s, t: d[0] <= P.WRITE_ONLY_IMM and rng.random() < 0.03)
    wc, dst, data = write_through(rp, 1 << 20, seed=9)
    assert wc.status is WcStatus.SUCCESS and bytes(dst.view) == data
    assert rp.link.trimmed > 10
    assert rp.eb.counters()["trimmed_discarded"] == rp.link.trimmed
    healthy(rp)


def test_short_middle_without_the_trimmed_dscp_is_still_an_invalid_request():
    """IBTA: a wrong length at the expected PSN is an invalid request (NAK, QP to ERR).
    Only the DSCP, passed as ``trimmed=True``, makes the same bytes a loss."""
    rp = roce_pair(seed=10, pmtu=PMTU)
    rp.link.trim = trim_first(P.WRITE_MIDDLE)
    size = 4 * PMTU
    src, dst = register(rp.ma, size), register(rp.mb, size)
    # deliver the cut packet as a plain datagram: what a daemon without the DSCP would do
    orig = rp.eb.receive_datagram

    def no_flag(data, addr, now, *, ecn=0, trimmed=False):
        return orig(data, addr, now, ecn=ecn)

    rp.eb.receive_datagram = no_flag  # type: ignore[method-assign]
    rp.ea.post_send(rp.qa, SendWR.write(1, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    rp.link.run()
    (wc,) = rp.link.completions("a")
    assert wc.status is WcStatus.REM_INV_REQ_ERR
    assert rp.eb.counters().get("trimmed_discarded", 0) == 0
    assert rp.link.trimmed == 1

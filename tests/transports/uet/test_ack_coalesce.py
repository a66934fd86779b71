# SPDX-License-Identifier: GPL-2.0-only
"""ACK coalescing (the daemons' setting) and CLEAR requests: fewer control packets, the
same delivery."""

from __future__ import annotations

import pytest
from lossy_link import LossyLink
from uet_pair import LOSSY, MiB, clean, ok, uet_pair, write

from emu.wire.codec.uet import decode_packet

PKT = 8192


def burst(coalesce: bool, n: int = 10):
    """A sends an n-packet WRITE; B receives the whole burst, then drains once."""
    p = uet_pair(3, ekw={"mtu": PKT, "ack_coalesce": coalesce})
    write(p, 0, 100)  # establish the PDC (until the first ACK every request has SYN)
    p.link.run()
    ok(p.link.completions("a"), 0)
    _, dst, data = write(p, 1, n * PKT)
    t = p.link.now
    out = p.ea.datagrams_to_send(t)
    assert len(out) == n
    for d, _, meta in out:
        p.eb.receive_datagram(bytes(d), ("10.0.0.1", meta.entropy), t + 1e-6)
    acks = [decode_packet(d).pds for d, _, _ in p.eb.datagrams_to_send(t + 2e-6)]
    return p, acks, out


def test_one_ack_per_batch_when_coalescing():
    p, acks, out = burst(True)
    # AR on the last packet is answered at once; the 16 KiB rule's ACKs before it fold
    # into that one, which covers the whole burst cumulatively
    assert len(acks) == 1
    last = acks[-1]
    first_psn = decode_packet(bytes(out[0][0])).pds.psn
    assert last.cack_psn == (first_psn + len(out) - 1) & 0xFFFFFFFF


def test_spec_rule_without_coalescing():
    p, acks, out = burst(False)
    # every 16 KiB (two 8 KiB packets), plus SYN and AR
    assert len(acks) >= len(out) // 2


def test_a_coalesced_ack_is_sent_when_no_ar_follows():
    """The 16 KiB rule still fires when the batch ends on a packet without AR."""
    p = uet_pair(4, ekw={"mtu": PKT, "ack_coalesce": True})
    write(p, 0, 100)
    p.link.run()
    write(p, 1, 40 * PKT)
    t = p.link.now
    out = p.ea.datagrams_to_send(t)  # the whole window: AR only on the last
    for d, _, meta in out[:6]:  # a batch ending mid-message
        p.eb.receive_datagram(bytes(d), ("10.0.0.1", meta.entropy), t + 1e-6)
    acks = [decode_packet(d).pds for d, _, _ in p.eb.datagrams_to_send(t + 2e-6)]
    cacks = sorted(a.cack_psn for a in acks)
    first = decode_packet(bytes(out[0][0])).pds.psn
    assert cacks[-1] == (first + 5) & 0xFFFFFFFF  # the batch's newest packet is ACKed


@pytest.mark.parametrize("seed", [1, 2])
def test_coalescing_keeps_lossy_transfers_exact(seed):
    p = uet_pair(seed, ekw={"mtu": 4096, "ack_coalesce": True}, **LOSSY)
    src, dst, data = write(p, 7, 3 * MiB + 11)
    p.link.run()
    ok(p.link.completions("a"), 7)
    assert bytes(dst.view[:len(data)]) == data
    clean(p)


def test_clear_is_asked_once_per_half_window_not_per_ack():
    """A full window in flight makes CLEAR_PSN lag; the target asks for a CLEAR once,
    not on every ACK while the answer is on its way (it was one CP per two packets)."""
    p = uet_pair(5, ekw={"mtu": PKT})
    _, dst, data = write(p, 1, 32 * MiB)
    link: LossyLink = p.link
    link.run()
    ok(link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    c = p.ea.counters()
    assert c["tx_cp"] * 20 < c["tx_data_packets"], c

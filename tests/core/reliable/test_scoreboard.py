# SPDX-License-Identifier: GPL-2.0-only
"""emu.core.reliable.scoreboard: the sender's outstanding PSNs."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from emu.core.psn import PSN32
from emu.core.reliable.scoreboard import Scoreboard

NEAR_WRAP = (1 << 32) - 3


@dataclass
class Pkt:
    psn: int
    sent_at: float
    resent: bool = False


def sent(sb: Scoreboard[Pkt], k: int, now: float = 0.0) -> list[int]:
    first = sb.take(k)
    for p in range(first, first + k):
        sb.track(Pkt(p, now))
    return list(range(first, first + k))


def test_release_cumulative_named_and_sacked():
    sb: Scoreboard[Pkt] = Scoreboard(PSN32, NEAR_WRAP)
    assert sb.oldest == sb.next_psn == NEAR_WRAP and sb.span == 0
    ps = sent(sb, 10)
    assert sb.span == 10 and sb.oldest == ps[0] and len(sb) == 10
    assert sb.ext(ps[5] & PSN32.mask) == ps[5]  # across the 32-bit wrap
    assert [p.psn for p in sb.ack_through(ps[2])] == ps[:3]
    assert sb.ack(ps[4]) is not None and sb.ack(ps[4]) is None  # released once
    assert [p.psn for p in sb.sack(ps[3], 0b11110)] == ps[5:8]  # ps[4] gone already
    assert list(sb.unacked) == [ps[3], ps[8], ps[9]] and sb.oldest == ps[3]
    assert sb.span == sb.next_psn - ps[3]
    assert sb.sent(ps[0]) and sb.sent(ps[9]) and not sb.sent(ps[9] + 1)


def test_round_trip_follows_karns_rule():
    sb: Scoreboard[Pkt] = Scoreboard(PSN32, 0)
    a, b = sent(sb, 2, now=1.0)
    sb.unacked[b].resent = True
    assert sb.round_trip(a, 1.25) == 0.25
    assert sb.round_trip(b, 1.25) is None  # which copy was ACKed is unknown
    assert sb.round_trip(b + 1, 1.25) is None  # never sent


def test_release_cancels_a_delayed_resend_and_go_back_brings_them_forward():
    sb: Scoreboard[Pkt] = Scoreboard(PSN32, 0)
    ps = sent(sb, 6)
    sb.retx.after(ps[1], 5.0)
    sb.retx.after(ps[4], 5.0)
    sb.ack_through(ps[1])
    assert list(sb.retx.later) == [ps[4]]
    sb.retx.at_once(ps[3])
    assert sb.go_back(ps[2]) == 3  # ps[3] already owed at once: not doubled
    assert list(sb.retx.now) == [ps[3], ps[2], ps[4], ps[5]] and not sb.retx.later
    sb.restart(1000)
    assert not sb.unacked and not sb.retx and sb.next_psn == sb.start == sb.oldest == 1000


def test_a_packet_is_presumed_lost_once_enough_sent_after_it_were_delivered():
    sb: Scoreboard[Pkt] = Scoreboard(PSN32, NEAR_WRAP)
    ps = sent(sb, 20)
    sb.ack_through(ps[1])
    sb.sack(ps[3], (1 << 16) - 1)  # ps[3..18] delivered: 16 after ps[2]; ps[19] in flight
    assert sb.presumed_lost(17) == [] and sb.presumed_lost(16) == [ps[2]]
    sb.retx.at_once(ps[2])
    assert sb.presumed_lost(16) == []  # owed already: not named twice
    assert sb.retx.pop() == ps[2]
    sb.resending(sb.unacked[ps[2]], 1.0)  # its place in send order is now after ps[19]
    more = sent(sb, 20)
    assert sb.presumed_lost(16) == []
    sb.sack(more[0], (1 << 15) - 1)  # 15 delivered after the resend, ps[19] still out
    assert sb.presumed_lost(16) == []
    sb.ack(ps[19])  # before the resend: it does not count for ps[2]
    assert sb.presumed_lost(16) == [] and sb.presumed_lost(15) == [ps[2]]
    sb.ack(more[15])
    assert sb.presumed_lost(16) == [ps[2]]
    sb.ack(ps[2])  # the resent copy (or the first) arrived: no news about what followed
    assert sb.high_delivered == more[15] and list(sb.unacked) == more[16:]
    assert sb.presumed_lost(1) == []  # nothing below the highest delivered is outstanding


def test_at_the_tail_every_packet_sent_after_a_hole_delivered_is_enough():
    """RFC 5827's Early Retransmit: nothing more will be sent, so the 3 packets after a
    hole are all the evidence there will ever be."""
    sb: Scoreboard[Pkt] = Scoreboard(PSN32, 0)
    ps = sent(sb, 6)
    sb.ack_through(ps[1])
    sb.sack(ps[3], 0b111)  # ps[2] missing, the 3 after it delivered
    assert sb.presumed_lost(16) == [] and sb.presumed_lost(16, tail=True) == [ps[2]]
    sb.retx.at_once(ps[2])
    sb.resending(sb.unacked[sb.retx.pop()], 1.0)
    assert sb.presumed_lost(16, tail=True) == []  # nothing sent after the resend


def test_presumed_lost_counts_only_what_was_delivered_between():
    """Two holes: the older one has the younger hole above it, which was not delivered."""
    sb: Scoreboard[Pkt] = Scoreboard(PSN32, 0)
    ps = sent(sb, 12)
    for p in ps:
        if p not in (ps[0], ps[1]):
            sb.ack(p)
    assert sb.presumed_lost(10) == [ps[0], ps[1]]
    assert sb.presumed_lost(11) == []  # 10 delivered above either hole, not 11



def test_an_ack_after_a_probe_shows_what_was_sent_before_it_missing():
    """What a loss probe's answer shows missing — above CACK, inside the SACK window, bit
    clear — is lost if it was (last) sent before the probe; later sends, PSNs outside the
    window and PSNs owed a resend already are not named."""
    sb: Scoreboard[Pkt] = Scoreboard(PSN32, NEAR_WRAP)
    ps = sent(sb, 100, now=1.0)
    sb.ack_through(ps[9])
    sb.sack(ps[11], (1 << 69 - 11) - 1)  # ps[11..68] delivered; ps[10] and ps[69..] not
    sb.resending(sb.unacked[ps[10]], 2.0)  # resent after the probe below
    sb.retx.at_once(ps[70])
    # an answer with CACK ps[9] and a window ps[40..103]: ps[69..99] missing in it
    bm = (1 << 69 - 40) - 1
    assert sb.shown_missing(ps[9], ps[40], bm, sent_before=1.5) == [ps[69], *ps[71:]]
    assert sb.shown_missing(ps[9], ps[40], bm, sent_before=1.0) == []  # sent at the probe
    # a window ps[5..68] shows ps[10] missing, but it was resent after the probe
    low = (1 << 64) - 1 - (1 << 5)
    assert sb.shown_missing(ps[9], ps[5], low, sent_before=1.5) == []
    assert sb.shown_missing(ps[9], ps[5], low, sent_before=2.5) == [ps[10]]
    # CACK covers it: the cumulative part names nothing missing
    assert sb.shown_missing(ps[10], ps[5], 0, sent_before=2.5) == []

ops = st.lists(st.one_of(
    st.tuples(st.just("send"), st.integers(1, 8)),
    st.tuples(st.just("cack"), st.integers(-2, 40)),
    st.tuples(st.just("ack"), st.integers(-2, 40)),
    st.tuples(st.just("sack"), st.integers(-2, 40), st.integers(0, (1 << 64) - 1)),
    st.tuples(st.just("later"), st.integers(0, 40)),
    st.tuples(st.just("goback"), st.integers(0, 40)),
    st.tuples(st.just("resend"), st.integers(0, 40)),
    st.tuples(st.just("lost"), st.integers(1, 12), st.booleans()),
), max_size=60)


@given(ops)
def test_never_both_acked_and_outstanding(seq):
    """Under any mix of sends, cumulative ACKs, named ACKs, SACKs and resends owed: a PSN
    is released at most once and then never outstanding again; every handed-out PSN is
    outstanding or released; oldest and span agree with the outstanding set; a released PSN is owed
    no delayed resend."""
    start = NEAR_WRAP
    sb: Scoreboard[Pkt] = Scoreboard(PSN32, start)
    released: set[int] = set()
    resent_at: dict[int, int] = {}  # PSN → next_psn when resent

    def took(pkts: list[Pkt]) -> None:
        for p in pkts:
            assert p.psn not in released
            released.add(p.psn)

    for op in seq:
        kind = op[0]
        if kind == "send":
            sent(sb, op[1])
        elif kind == "cack":
            took(sb.ack_through(start + op[1]))
        elif kind == "ack":
            p = sb.ack(start + op[1])
            took([] if p is None else [p])
        elif kind == "sack":
            took(sb.sack(start + op[1], op[2]))
        elif kind == "later" and start + op[1] in sb.unacked:
            sb.retx.after(start + op[1], 1.0)
        elif kind == "goback":
            sb.go_back(start + op[1])
        elif kind == "resend" and start + op[1] in sb.unacked:
            sb.resending(sb.unacked[start + op[1]], 0.0)
            resent_at[start + op[1]] = sb.next_psn
        elif kind == "lost":  # RFC 6675's IsLost (RFC 5827's at the tail), by brute force
            k, tail, high, last = op[1], op[2], sb.high_delivered, sb.next_psn - 1
            firsts = [p for p in released if p not in resent_at]
            assert high == max(firsts, default=start - 1)
            want = []
            for p in sb.unacked:
                after = resent_at.get(p, p + 1)  # first PSN sent after it
                need = min(k, last - after + 1) if tail else k
                if (not sb.retx.owes(p) and need >= 1 and
                        sum(1 for q in released if after <= q <= high) >= need):
                    want.append(p)
            assert sb.presumed_lost(k, tail) == want
        out = set(sb.unacked)
        assert not out & released
        assert out | released == set(range(start, sb.next_psn))  # nothing lost
        assert all(start <= p < sb.next_psn for p in out)
        assert sb.oldest == (min(out) if out else sb.next_psn)
        assert sb.span == (sb.next_psn - min(out) if out else 0)
        assert list(sb.unacked) == sorted(out)  # PSN order: cumulative release is a prefix
        assert not set(sb.retx.later) & released

# SPDX-License-Identifier: GPL-2.0-only
"""A late read is the emulator's delay, not the network's: NSCC's ``service_time``.

A daemon hands the engine each datagram with ``arrived=`` (its kernel receive stamp).
The target's ACK_CC then says how long the NIC held what it answers (cc_state
``service_time``), and the initiator's round-trip sample ends at the ACK's arrival
less that time — so NSCC does not read a daemon that ran late as queueing
(``docs/credibility.md``, Known gaps)."""

from __future__ import annotations

from typing import Any

import pytest
from uet_pair import ok, uet_pair, write

from emu.core.datagram import expand
from emu.transports.uet import pdc as D
from emu.transports.uet.flowctl import HOLD_GAIN, HOLD_MAX
from emu.wire.codec.uet import decode_packet

A = ("10.0.0.1", 4793)
B = ("10.0.0.2", 4793)
KW = {"cc": "nscc", "line_rate": 10e9, "mtu": 4096, "cc_params": {"base_rtt": 20e-6}}


def _one_exchange(late: float, *, stamps: bool) -> tuple[int, float]:
    """A 1-packet WRITE, read by B ``late`` seconds after it arrived and by A's daemon
    at once; returns (the ACK's service_time field, A's NSCC delay sample)."""
    p = uet_pair(5, ekw=KW)
    write(p, 0, 100)  # establish the PDC first (SYN, DPDCID)
    p.link.run()
    ok(p.link.completions("a"), 0)
    t0 = p.link.now + 1e-3
    write(p, 1, 1000)
    [(data, _, meta)] = list(expand(p.ea.datagrams_to_send(t0)))
    arrival = t0 + 10e-6  # on the wire for 10 µs
    read = arrival + late  # the receiving daemon got round to it this much later
    p.eb.receive_datagram(bytes(data), (A[0], meta.entropy), read,
                          arrived=arrival if stamps else None)
    [(ack, _, ameta)] = list(expand(p.eb.datagrams_to_send(read)))
    service = decode_packet(bytes(ack)).pds.service_time
    back = read + 10e-6
    p.ea.receive_datagram(bytes(ack), (B[0], ameta.entropy), back,
                          arrived=back if stamps else None)
    (f,) = p.ea.flowctl.flows.values()
    return service, f.cc.last_delay


def test_a_late_read_is_held_out_of_the_round_trip():
    service, delay = _one_exchange(3e-3, stamps=True)
    assert service == round(3e-3 / D.SERVICE_TIME_UNIT)  # 3 ms held, in µs
    assert delay < 1e-4  # the network took 20 µs: no queueing seen


def test_without_stamps_the_sample_is_what_it_was():
    # sans-IO callers (and peers that send 0) are unchanged: the hold is in the sample
    service, delay = _one_exchange(3e-3, stamps=False)
    assert service == 0
    assert delay > 2.5e-3


def test_service_time_saturates_and_never_goes_negative():
    assert _one_exchange(0.2, stamps=True)[0] == 0xFFFF  # 65.5 ms at most
    assert D.held_out(1e-3, type("Ack", (), {"service_time": 0xFFFF})()) == 0.0
    assert D.held_out(1e-3, object()) == 1e-3  # a plain ACK has no cc_state


def _timeout_then_ack(held: float, ack_delay: float) -> dict[str, int]:
    """A 1-packet WRITE whose ACK comes back after A's 2 ms RTO fired: the target holds
    the packet ``held`` s before answering, the ACK spends ``ack_delay`` s on the way
    back. Returns A's counters. (No loss probe: it would ask first, and this is about
    what the RTO's resend is counted as.)"""
    p = uet_pair(7, ekw={**KW, "rto": 2e-3, "rto_max": 2e-3, "loss_probes": False})
    write(p, 0, 100)
    p.link.run()
    ok(p.link.completions("a"), 0)
    t0 = p.link.now + 1e-3
    write(p, 1, 1000)
    [(data, _, meta)] = list(expand(p.ea.datagrams_to_send(t0)))
    arrival = t0 + 10e-6
    p.eb.receive_datagram(bytes(data), (A[0], meta.entropy), arrival + held, arrived=arrival)
    [(ack, _, ameta)] = list(expand(p.eb.datagrams_to_send(arrival + held)))
    t = p.ea.get_timer()
    assert t is not None and t < arrival + held + ack_delay  # the RTO fires first …
    p.ea.handle_timer(t)
    assert len(list(expand(p.ea.datagrams_to_send(t)))) == 1  # … and resends the packet
    back = arrival + held + ack_delay
    p.ea.receive_datagram(bytes(ack), (B[0], ameta.entropy), back, arrived=back)
    return p.ea.counters()


def test_a_timeout_caused_by_the_targets_holding_is_counted_as_overload():
    c = _timeout_then_ack(held=8e-3, ack_delay=10e-6)
    assert c["rto_retransmits"] == 1 and c.get("rto_held") == 1


def test_a_timeout_the_network_caused_is_protocol_behaviour():
    # the target answered at once; the ACK took 8 ms on the way back (a queue, a slow
    # link): the timeout is the protocol's business, not overload
    c = _timeout_then_ack(held=0.0, ack_delay=8e-3)
    assert c["rto_retransmits"] == 1 and not c.get("rto_held")


# -- the ACK clock: what the daemons hold is not the window's ------------------------------


def _window_limited(late: float, *, wire_free: float | None = None) -> tuple[Any, Any]:
    """A's flow sends until NSCC's window refuses a packet; the first ACK then reaches
    A's port at ``arrival`` and A's daemon reads it ``late`` s after. Returns the pair
    and A's flow."""
    p = uet_pair(9, ekw=KW)
    write(p, 0, 100)
    p.link.run()
    ok(p.link.completions("a"), 0)
    t0 = p.link.now + 1e-3
    write(p, 1, 200_000)  # far more than NSCC's 1.5-BDP window at 10 Gb/s, 20 µs
    out = list(expand(p.ea.datagrams_to_send(t0)))
    (f,) = p.ea.flowctl.flows.values()
    assert f.blocked and p.ea.counters()["tx_cc_blocked"] >= 1  # the window is full
    if wire_free is not None:
        p.ea.flowctl.wire_free = wire_free
    arrival = t0 + 40e-6
    for data, _, meta in out:  # the window's packets reach B; it answers the batch
        p.eb.receive_datagram(bytes(data), (A[0], meta.entropy), arrival, arrived=arrival)
    acks = list(expand(p.eb.datagrams_to_send(arrival)))
    assert acks
    back = arrival + 10e-6
    ack, _, meta = acks[0]
    p.ea.receive_datagram(bytes(ack), (B[0], meta.entropy), back + late, arrived=back)
    return p, f


def test_a_late_read_of_an_ack_widens_the_window_by_what_the_daemon_held():
    """The ACK clock carries the daemons' lateness even when the round-trip samples do
    not: the engine estimates that hold and leaves line rate × hold out of the bytes
    in flight, so a window sized for the path is not shrunk by the emulator."""
    p, f = _window_limited(500e-6)
    fc = p.ea.flowctl
    # one sample: mean 1/8 of it, mean deviation 1/8 of it; the hold is mean + 2 dev
    assert fc.emu_hold == pytest.approx(3 * 500e-6 * HOLD_GAIN, rel=1e-6)
    # what it allows now is the window less in flight, plus the held bytes
    held = int(fc.emu_hold * fc.line_rate / 8)
    assert held > 0
    (pdc,) = (x for x in p.ea.ini.values() if x.pdcid in fc.flows)
    assert fc.allowance(pdc) == f.cc.send_allowance(max(0, f.ledger.in_flight - held))
    assert fc.allowance(pdc) > f.cc.send_allowance(f.ledger.in_flight)
    prompt, _ = _window_limited(0.0)
    assert prompt.ea.flowctl.emu_hold == 0.0  # read at once: nothing held, nothing added


def test_the_window_leaves_out_no_more_than_hold_max():
    """An overloaded daemon's hold (here a 40 ms late read) widens the window by at most
    HOLD_MAX of line rate: more in flight would only feed a retransmission storm."""
    p, f = _window_limited(40e-3)
    fc = p.ea.flowctl
    assert fc.emu_hold > HOLD_MAX
    (pdc,) = (x for x in p.ea.ini.values() if x.pdcid in fc.flows)
    cap = int(HOLD_MAX * fc.line_rate / 8)
    assert fc.allowance(pdc) == f.cc.send_allowance(max(0, f.ledger.in_flight - cap))


def test_a_window_idled_by_a_late_ack_is_counted_as_overload():
    p, f = _window_limited(2e-3)
    assert not f.blocked  # the ACK let it go again
    late = p.ea.counters()["ack_late_us"]
    # the port had finished its frames long before: idle from the ACK's arrival
    assert late == pytest.approx(2e3, abs=2)


def test_no_overload_while_the_port_was_still_busy_or_the_read_was_prompt():
    # the port still had frames to put on the wire when the ACK was read: nothing idled
    p, _ = _window_limited(2e-3, wire_free=1e9)
    assert not p.ea.counters().get("ack_late_us")
    p, _ = _window_limited(0.0)
    assert not p.ea.counters().get("ack_late_us")


def test_the_rto_waits_for_what_the_daemons_held():
    """NSCC leaves the target's hold out of its round trips; the retransmission timer
    must not: it waits for the ACK itself, which comes that much later. Its sample is
    the whole loop as the timer sees it (sent → the ACK taken in) — with the sample
    held out, a daemon engine's RTO sat a hold below the ACKs it waited for, and
    timeouts fired that only the daemons' holding caused (``rto_held``)."""
    p = uet_pair(5, ekw={**KW, "rto": 1e-3, "rto_max": 0.1})
    t0 = p.link.now + 1e-3
    write(p, 0, 1000)  # the PDC's first packet: its ACK gives the first sample
    [(data, _, meta)] = list(expand(p.ea.datagrams_to_send(t0)))
    arrival, late = t0 + 10e-6, 3e-3
    p.eb.receive_datagram(bytes(data), (A[0], meta.entropy), arrival + late, arrived=arrival)
    [(ack, _, ameta)] = list(expand(p.eb.datagrams_to_send(arrival + late)))
    back = arrival + late + 10e-6
    p.ea.receive_datagram(bytes(ack), (B[0], ameta.entropy), back, arrived=back)
    (pdc,) = p.ea.ini.values()
    assert pdc.rtt.srtt > late          # the loop the timer waited through …
    assert p.ea.flowctl.flows[pdc.pdcid].cc.last_delay < 1e-4  # … NSCC's is the network's

# SPDX-License-Identifier: GPL-2.0-only
"""MRC's STEV and SRv6 EV formats (issue #35, items 2 and 4), sans-IO: the EV rides in
the UDP source port and the IPv6 flow label and comes back in the SACKs; under SRv6
every EV's packets carry an outer destination from the controller's path table, the
paths shared evenly on each plane, one EV always on one path."""

from __future__ import annotations

import ipaddress
import random
from collections import Counter

import pytest
from lossy_link import LossyLink, register

from emu.core.memory import MemoryTable
from emu.core.verbs import SendWR, Sge
from emu.transports.base import VerbsError
from emu.transports.mrc import MrcEngine
from emu.transports.mrc.evwire import EVWire, ranks
from emu.wire.codec.ev import EVMode, ev_from_fields
from emu.wire.codec.mrc import WRITE_OPCODES
from emu.wire.codec.roce import BTH

PMTU = 1024
A, B = ("fd00::1", 4971), ("fd00::2", 4971)
#: two paths to each peer address (say, one per spine)
PATHS = {a: [ipaddress.IPv6Address(f"fc00:0:{s}:5:800{i}::").packed for s in (1, 2)]
         for i, a in ((1, A[0]), (2, B[0]))}


def _pair(fmt: str, seed: int = 1, size: int = 64 * PMTU, paths=PATHS.get,
          splits: tuple[str, str] = ("16+16", "16+16"), **link_kw):
    ma, mb = MemoryTable(random.Random(seed)), MemoryTable(random.Random(seed + 1))
    kw = {"line_rate": 10e9, "base_rtt": 20e-6, "pmtu": PMTU, "timeout": 8,
          "ev_format": fmt, "srv6_paths": paths}
    ea = MrcEngine(ma, random.Random(seed + 2), local_addr=A, ev_split=splits[0], **kw)
    eb = MrcEngine(mb, random.Random(seed + 3), local_addr=B, ev_split=splits[1], **kw)
    link = LossyLink(ea, eb, seed=seed, src_ports=True, addr_a=A, addr_b=B, **link_kw)
    link.wire = []
    qa, qb = ea.create_qp(send_cq="a.s"), eb.create_qp(send_cq="b.s")
    ea.connect(qa, eb.query_qp(qb))
    eb.connect(qb, ea.query_qp(qa))
    src, dst = register(ma, size), register(mb, size)
    data = random.Random(seed).randbytes(size)
    src.view[:size] = data
    ea.post_send(qa, SendWR.write(1, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    return link, ea, eb, qa, dst, data


@pytest.mark.parametrize("fmt", ["stev", "srv6"])
def test_the_ev_rides_in_port_and_flow_label_and_comes_back_in_the_sacks(fmt):
    link, ea, eb, qa, dst, data = _pair(fmt, loss=0.05, reorder=0.2)
    link.run()
    assert bytes(dst.view) == data
    evs = set(ea._qps[qa].ini.evs.by_ev)  # the set as it is and the EVs it retired
    sent = Counter()
    for _, side, d, _, meta in link.wire:
        if side == "a" and BTH.decode(d).opcode in WRITE_OPCODES:
            assert meta.label is not None
            sent[ev_from_fields(meta.entropy, meta.label, EVMode(fmt))] += 1
    assert set(sent) <= evs and len(sent) > 32  # sprayed, every EV one of the set's
    # the receiver rebuilt each EV and echoed it: the sender's scoreboard knew them all
    assert eb.counters()["rx_drop_bad_ev"] == 0 and ea.counters()["rx_drop_bad_ev"] == 0
    c = ea.counters()
    assert c["tx_retransmits"] > 0 and c["rx_echo_unknown_ev"] == 0


def test_srv6_sends_each_ev_on_one_path_and_shares_the_paths_evenly():
    link, ea, eb, qa, dst, data = _pair("srv6")
    link.run()
    assert bytes(dst.view) == data
    path_of: dict[int, set[bytes]] = {}
    for _, side, d, _, meta in link.wire:
        if side == "a" and BTH.decode(d).opcode in WRITE_OPCODES:
            ev = ev_from_fields(meta.entropy, meta.label, EVMode.SRV6)
            path_of.setdefault(ev, set()).add(meta.outer)
    wire = ea._qps[qa].wire
    assert all(p == {wire.outer(ev, B[0])} for ev, p in path_of.items())  # one EV, one path
    # the set's EVs share the paths evenly (a plane's EVs by rank, whatever their values)
    share = Counter(wire.outer(e.ev, B[0]) for e in ea._qps[qa].ini.evs.slots)
    assert set(share) == set(PATHS[B[0]]) and max(share.values()) - min(share.values()) <= 1
    # the SACKs go back on paths to A (the receiver's table), never on B's
    back = {meta.outer for _, side, d, _, meta in link.wire if side == "b"}
    assert back <= set(PATHS[A[0]]) and back


def test_the_formats_refuse_what_cannot_carry_them():
    with pytest.raises(VerbsError, match="needs the controller's SRv6 path table"):
        _pair("srv6", paths=None)
    with pytest.raises(VerbsError, match="no SRv6 path to fd00::2"):
        _pair("srv6", paths=lambda a: PATHS[a] if a == A[0] else [])
    with pytest.raises(ValueError, match="ev_format is one of"):
        MrcEngine(MemoryTable(random.Random(1)), random.Random(2), ev_format="ecmp")


def test_a_foreign_ev_takes_a_path_by_its_value_and_ranks_count_per_plane():
    w = EVWire(EVMode.SRV6, paths=lambda a: PATHS[B[0]], rank=ranks([(10, 0), (11, 1),
                                                                      (12, 0), (13, 1)]))
    assert w.rank == {10: 0, 11: 0, 12: 1, 13: 1}
    assert [w.outer(ev, B[0]) for ev in (10, 12)] == PATHS[B[0]]
    assert w.outer(0x1234, B[0]) == w.outer(0x1234, B[0]) in PATHS[B[0]]
    assert w.meta(10, B[0], 0, 2) is w.meta(10, B[0], 0, 2)  # one object per flow
    assert w.ev_of(("fd00::9", 0xD000, 0x42, 0)) == 0xD000_0042
    with pytest.raises(ValueError):
        w.ev_of(("fd00::9", 0xD000))  # no flow label: not an STEV/SRv6 packet


def test_the_stev_split_is_an_engine_option_both_ends_must_share():
    """specs/mrc.md reads the STEV split two ways (16+16; a 20-bit flow label): the
    ``ev_split`` option. Cut alike, every echo names an EV of the set; cut apart, the data
    still lands byte-exact but every echo names an EV the sender never had (counted:
    ``rx_echo_unknown_ev``) and no EV gets a SACK's credit."""
    link, ea, eb, qa, dst, data = _pair("stev", splits=("12+20@0xd000", "12+20@0xd000"))
    link.run()
    assert bytes(dst.view) == data
    for _, side, d, _, meta in link.wire:
        if side == "a" and BTH.decode(d).opcode in WRITE_OPCODES:
            assert 0xD000 <= meta.entropy <= 0xDFFF and meta.label is not None
    ini = ea._qps[qa].ini
    assert ea.counters()["rx_echo_unknown_ev"] == 0
    assert sum(e.counts["sacked"] for e in ini.evs.slots) > 0
    link, ea, eb, qa, dst, data = _pair("stev", seed=2, splits=("16+16", "12+20@0xd000"))
    link.run()
    assert bytes(dst.view) == data
    ini = ea._qps[qa].ini
    assert ea.counters()["rx_echo_unknown_ev"] == ea.counters()["rx_sacks"] > 0
    assert sum(e.counts["sacked"] for e in ini.evs.slots) == 0
    with pytest.raises(ValueError, match="S\\+F"):
        MrcEngine(MemoryTable(random.Random(1)), random.Random(1), local_addr=A,
                  ev_format="stev", ev_split="12-20")

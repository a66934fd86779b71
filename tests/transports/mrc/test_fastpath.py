# SPDX-License-Identifier: GPL-2.0-only
"""MRC's one-``struct`` fast path (``emu.transports.mrc.fastpath``) equals the checked
codec byte for byte and field for field, declines (→ the general decoder) whatever it
does not cover, and the ranges it no longer checks per packet are checked where the
values are made: at connect, post and resize."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lossy_link import mrc_pair

from emu.core.verbs import SendWR, Sge
from emu.transports.base import VerbsError
from emu.transports.mrc import fastpath as F
from emu.transports.mrc.target import TargetQP
from emu.wire.codec.mrc import (
    CC_STATE,
    METH,
    MRC_RELIABILITY_SACK,
    MRC_TRANSPORT_ACK,
    MRC_WRITE_FIRST,
    MRC_WRITE_LAST_IMM,
    MRC_WRITE_ONLY_IMM,
    SETH,
    TSETH,
    WRITE_IMM_OPCODES,
    WRITE_OPCODES,
)
from emu.wire.codec.roce import AETH, BTH, RETH, ImmDt, decode_packet, encode_packet

u = st.integers
data_fields = st.fixed_dictionaries({
    "op": st.sampled_from(sorted(WRITE_OPCODES)), "dqpn": u(0, (1 << 24) - 1),
    "psn": u(0, (1 << 24) - 1), "ackreq": u(0, 1), "rtx": u(0, 1), "msn": u(0, 0xFFFF),
    "va": u(0, (1 << 64) - 1), "rkey": u(0, (1 << 32) - 1), "dmalen": u(0, (1 << 32) - 1),
    "imm": u(0, (1 << 32) - 1)})
sack_fields = st.fixed_dictionaries({
    "dqpn": u(0, (1 << 24) - 1), "cack": u(0, (1 << 24) - 1), "m": u(0, 3), "pr": u(0, 1),
    "ack_psn_offset": u(-(1 << 15), (1 << 15) - 1), "ev": u(0, (1 << 32) - 1),
    "spdcid": u(0, 0xFFFF), "dpdcid": u(0, 0xFFFF), "cc_flags": u(0, 15), "cc_type": u(0, 15),
    "mpr": u(0, 255), "sack_offset": u(-(1 << 15), (1 << 15) - 1),
    "bitmap": u(0, (1 << 64) - 1), "ts": u(0, 0xFFFF), "ooo": u(0, 0x7FFF),
    "rcvd": u(0, (1 << 24) - 1)})


def _imm(f: dict) -> int | None:
    return f["imm"] if f["op"] in WRITE_IMM_OPCODES else None


def codec_data(f: dict, payload: bytes) -> bytearray:
    hdrs: list = [METH(rqmsn=0, msn=f["msn"]), RETH(va=f["va"], rkey=f["rkey"],
                                                    dmalen=f["dmalen"])]
    if _imm(f) is not None:
        hdrs.append(ImmDt(imm=f["imm"]))
    bth = BTH(opcode=f["op"], dqpn=f["dqpn"], psn=f["psn"], ackreq=f["ackreq"], rtx=f["rtx"],
              padcount=-len(payload) & 3)
    return encode_packet(bth, hdrs, payload)


@settings(max_examples=300, deadline=None)
@given(data_fields, st.binary(max_size=67))
def test_a_write_packet_is_the_codecs_and_reads_back_as_decode_packet_reads_it(f, payload):
    fast = F.data(f["op"], f["dqpn"], f["psn"], f["ackreq"], f["rtx"], f["msn"], f["va"],
                  f["rkey"], f["dmalen"], _imm(f), memoryview(payload))
    assert type(fast) is bytearray and fast == codec_data(f, payload)
    got = F.read_data(bytes(fast))
    pkt = decode_packet(fast)
    imm = pkt.header(ImmDt)
    assert got is not None
    assert got[:9] == (pkt.bth.opcode, pkt.bth.dqpn, pkt.bth.psn, pkt.bth.ackreq,
                       pkt.header(METH).msn, pkt.header(RETH).va, pkt.header(RETH).rkey,
                       pkt.header(RETH).dmalen, None if imm is None else imm.imm)
    assert bytes(got[9]) == bytes(pkt.payload) == payload


@settings(max_examples=300, deadline=None)
@given(sack_fields)
def test_a_sack_is_the_codecs_and_reads_back_as_decode_packet_reads_it(f):
    fast = F.sack(f["dqpn"], f["cack"], f["m"], f["pr"], f["ack_psn_offset"], f["ev"],
                  f["spdcid"], f["dpdcid"], f["cc_flags"], f["cc_type"], f["mpr"],
                  f["sack_offset"], f["bitmap"], f["ts"], f["ooo"], f["rcvd"])
    seth = SETH(m=f["m"], pr=f["pr"], ack_psn_offset=f["ack_psn_offset"], ev=f["ev"],
                spdcid=f["spdcid"], dpdcid=f["dpdcid"], cack_psn=f["cack"],
                cc_type=f["cc_type"], cc_flags=f["cc_flags"], mpr=f["mpr"],
                sack_offset=f["sack_offset"], sack_bitmap=f["bitmap"])
    cc = CC_STATE(tx_timestamp=f["ts"], ooo_count=f["ooo"], rcvd_bytes=f["rcvd"])
    want = encode_packet(BTH(opcode=MRC_RELIABILITY_SACK, dqpn=f["dqpn"], psn=f["cack"]),
                         [seth, cc])
    assert type(fast) is bytearray and fast == want
    s = decode_packet(fast).header(SETH)
    assert F.read_sack(bytes(fast)) == (f["dqpn"], s.m, s.pr, s.ack_psn_offset, s.ev,
                                        s.cack_psn, s.cc_flags, s.mpr, s.sack_offset,
                                        s.sack_bitmap)


def test_what_the_fast_path_does_not_cover_goes_to_the_general_decoder():
    """A WRITE with a TSETH, one cut short, one whose pad count exceeds its payload, an
    immediate opcode without room for its ImmDt, a SACK cut short or padded out, and any
    other opcode: None, so that decode_packet decides (and counts what is malformed)."""
    plain = {"op": MRC_WRITE_FIRST, "dqpn": 5, "psn": 9, "ackreq": 0, "rtx": 0, "msn": 1,
             "va": 0x1000, "rkey": 7, "dmalen": 4096, "imm": 0}
    whole = codec_data(plain, b"abcd")
    assert F.read_data(whole) is not None
    ts = encode_packet(BTH(opcode=MRC_WRITE_FIRST, dqpn=5, psn=9, ts=1),
                       [METH(msn=1), TSETH(tx_timestamp=3), RETH(va=0x1000, rkey=7,
                                                                   dmalen=4096)], b"abcd")
    assert F.read_data(ts) is None and decode_packet(ts).header(TSETH).tx_timestamp == 3
    assert F.read_data(whole[:35]) is None
    padded = bytearray(codec_data(plain, b""))
    padded[1] |= 3 << 4  # a pad of 3 bytes with no payload to take them from
    assert F.read_data(padded) is None
    imm = codec_data({**plain, "op": MRC_WRITE_ONLY_IMM}, b"")
    assert F.read_data(imm) is not None and F.read_data(imm[:-4]) is None
    assert F.read_data(codec_data({**plain, "op": MRC_WRITE_LAST_IMM}, b"x"))[8] == 0
    ack = encode_packet(BTH(opcode=MRC_TRANSPORT_ACK, dqpn=5), [AETH(msn=1)])
    assert F.read_data(ack) is None and F.read_sack(ack) is None
    sack = F.sack(5, 9, 0, 0, 0, 0xD000, 1, 2, 0, 1, 16, 0, 0, 0, 0, 0)
    assert F.read_sack(sack) is not None and F.read_sack(sack[:-1]) is None
    sack[1] |= 1 << 4  # a pad byte that is not there
    assert F.read_sack(sack) is None
    assert F.read_data(sack) is None


def test_values_the_packets_carry_are_checked_when_they_are_made():
    """The fast path packs without a range check per field: a peer QPN, a message's
    R_Key, address, length or immediate, or a window that would not fit the wire is
    refused where it is given — at connect, post or resize — by the codec's own rule."""
    link, ea, eb, qa, qb, src, dst, data = mrc_pair(size=4096)
    post = ea.post_send
    with pytest.raises(VerbsError, match="rkey"):
        post(qa, SendWR.write(1, [Sge(src.va, 64, src.lkey)], dst.va, 1 << 32))
    with pytest.raises(VerbsError, match="va"):
        post(qa, SendWR.write(1, [Sge(src.va, 64, src.lkey)], 1 << 64, dst.rkey))
    with pytest.raises(VerbsError, match="imm"):
        post(qa, SendWR.write(1, [Sge(src.va, 64, src.lkey)], dst.va, dst.rkey, imm=-1))
    q = ea.create_qp()
    with pytest.raises(VerbsError, match="dqpn"):
        ea.connect(q, {**eb.query_qp(qb), "qpn": 1 << 24})
    with pytest.raises(VerbsError, match="mpr"):
        ea.resize_window(qa, 256 * 128)
    assert ea.resize_window(qa, 255 * 128)["mpr"] == 255 * 128
    with pytest.raises(ValueError, match="mpr"):
        TargetQP(3, 4, ea.memory, mpr=256 * 128)
    # and nothing was sent: the QP still works
    post(qa, SendWR.write(2, [Sge(src.va, 4096, src.lkey)], dst.va, dst.rkey))
    link.run()
    assert bytes(dst.view) == data and [w.wr_id for w in link.completions("a", "a.s")] == [2]


def _fed(mutated: list[tuple[bytes, tuple]], fast: bool, monkeypatch) -> tuple:
    """A fresh connected pair's B engine fed ``mutated``; what it sent and counted."""
    from emu.transports.mrc import engine as E

    with monkeypatch.context() as m:
        if not fast:
            m.setattr(E, "read_data", lambda b: None)
            m.setattr(E, "read_sack", lambda b: None)
        link, ea, eb, qa, qb, src, dst, data = mrc_pair(seed=5, size=16 * 1024, pmtu=1024)
        for i, (d, addr) in enumerate(mutated):
            eb.receive_datagram(d, addr, 1e-6 * i, ecn=i % 4)
        out = [(bytes(d), a, m_) for d, a, m_ in eb.datagrams_to_send(1.0)]
        return out, eb.counters(), bytes(dst.view)


def test_the_fast_path_and_the_general_one_agree_on_mutated_datagrams(monkeypatch):
    """Every datagram of a transfer (both ways), each also with a byte flipped, cut short
    or padded out, fed to an engine with and without the fast path: the same replies,
    counters and bytes placed — the fast path only skips decoding."""
    import random

    link, ea, eb, qa, qb, src, dst, data = mrc_pair(seed=5, size=16 * 1024, pmtu=1024)
    link.wire = []
    ea.post_send(qa, SendWR.write(1, [Sge(src.va, 16 * 1024, src.lkey)], dst.va, dst.rkey))
    link.run()
    rng = random.Random(7)
    feed: list[tuple[bytes, tuple]] = []
    for _, _, d, _, meta in link.wire:
        addr = (link.addr_a[0], meta.entropy)
        feed.append((d, addr))
        for _ in range(3):
            b = bytearray(d)
            k = rng.randrange(3)
            if k == 0:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            elif k == 1:
                del b[rng.randrange(len(b)):]
            else:
                b[1] |= rng.randrange(1, 4) << 4  # a pad count
            feed.append((bytes(b), addr))
    assert _fed(feed, True, monkeypatch) == _fed(feed, False, monkeypatch)

# SPDX-License-Identifier: GPL-2.0-only
"""The UET engines' one-``struct`` fast path equals the checked codec, byte for byte and
field for field, and declines (→ the generic decoder) whatever it does not cover."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from uet_pair import uet_pair, write

from emu.core.cq import WcStatus
from emu.core.datagram import Gather, Run, expand
from emu.transports.base import TxMeta
from emu.transports.uet import fastpath as F
from emu.wire.codec.uet import decode_packet, encode_packet
from emu.wire.codec.uet_pds import PdsAckCcNscc, PdsRequest, PdsRequestSyn
from emu.wire.codec.uet_ses import (
    SesAtomic,
    SesResponseData,
    SesStandardRequest,
    SesStandardRequestSom,
)

u = st.integers
req_fields = st.fixed_dictionaries({
    "typ": st.sampled_from([2, 3]), "retx": u(0, 1), "ar": u(0, 1),
    "clear_psn_offset": u(-(1 << 15), (1 << 15) - 1), "psn": u(0, (1 << 32) - 1),
    "spdcid": u(0, 0xFFFF), "dpdcid": u(0, 0xFFFF),
    "opcode": st.sampled_from([0x01, 0x05, 0x09]), "eom": u(0, 1), "som": u(0, 1),
    "message_id": u(0, 0xFFFF), "job_id": u(0, (1 << 24) - 1), "pid_on_fep": u(0, 0xFFF),
    "buffer_offset": u(0, (1 << 64) - 1), "initiator": u(0, (1 << 32) - 1),
    "mem_key": u(0, (1 << 64) - 1), "message_offset": u(0, (1 << 32) - 1),
    "request_length": u(0, (1 << 32) - 1)})


def codec_request(f: dict, payload: bytes) -> bytearray:
    pds = PdsRequest(type=f["typ"], next_hdr=3, retx=f["retx"], ar=f["ar"],
                     clear_psn_offset=f["clear_psn_offset"], psn=f["psn"], spdcid=f["spdcid"],
                     dpdcid=f["dpdcid"])
    common = {"opcode": f["opcode"], "eom": f["eom"], "message_id": f["message_id"],
              "job_id": f["job_id"], "pid_on_fep": f["pid_on_fep"],
              "buffer_offset": f["buffer_offset"], "initiator": f["initiator"],
              "mem_key_match_bits": f["mem_key"], "request_length": f["request_length"]}
    if f["som"]:
        ses = SesStandardRequestSom(som=1, **common)
    else:
        ses = SesStandardRequest(som=0, payload_length=len(payload),
                                 message_offset=f["message_offset"], **common)
    return encode_packet(pds, ses, None, payload)


def fast_request(f: dict, payload: bytes, gather: bool):
    return F.request(f["typ"], f["retx"], f["ar"], f["clear_psn_offset"], f["psn"],
                     f["spdcid"], f["dpdcid"], f["opcode"], f["eom"], f["som"],
                     f["message_id"], f["job_id"], f["pid_on_fep"], f["buffer_offset"],
                     f["initiator"], f["mem_key"], len(payload), f["message_offset"],
                     f["request_length"], memoryview(payload), gather)


@given(req_fields, u(1, 40), u(1, 64), st.booleans())
def test_a_runs_headers_are_the_codecs_packet_by_packet(f, k, seg, ar):
    """middle_headers(k, …) = the codec's header of each of k consecutive middles (PSN
    + 1, CLEAR_PSN offset − 1, message offset + seg; AR on the last with ar_last), and a
    Run of them opens into exactly those datagrams (expand)."""
    f = {**f, "retx": 0, "ar": 0, "eom": 0, "som": 0,
         "psn": min(f["psn"], (1 << 32) - k),  # the caller keeps a run from wrapping
         "clear_psn_offset": max(f["clear_psn_offset"], -(1 << 15) + k),
         "message_offset": min(f["message_offset"], (1 << 32) - 1 - k * seg)}
    heads = F.middle_headers(k, f["typ"], f["clear_psn_offset"], f["psn"], f["spdcid"],
                             f["dpdcid"], f["opcode"], f["message_id"], f["job_id"],
                             f["pid_on_fep"], f["buffer_offset"], f["initiator"], f["mem_key"],
                             seg, f["message_offset"], f["request_length"], ar)
    payload = bytes(range(256)) * (k * seg // 256 + 1)
    want = []
    for i in range(k):
        g = {**f, "psn": f["psn"] + i, "clear_psn_offset": f["clear_psn_offset"] - i,
             "message_offset": f["message_offset"] + i * seg, "ar": int(ar and i == k - 1)}
        want.append(bytes(codec_request(g, payload[i * seg:(i + 1) * seg])))
    assert [bytes(heads[i * F.REQ_SIZE:(i + 1) * F.REQ_SIZE]) for i in range(k)] == \
        [w[:F.REQ_SIZE] for w in want]
    metas = [TxMeta(49152 + i) for i in range(k)]
    run = Run(heads, F.REQ_SIZE, memoryview(payload)[:k * seg], seg, metas)
    assert len(run) == sum(len(w) for w in want) and run.count == k
    out = expand([(b"before", ("h", 1), metas[0]), (run, ("h", 1), None)])
    assert [bytes(d) for d, _, _ in out] == [b"before", *want]
    assert [m for _, _, m in out[1:]] == metas and all(a == ("h", 1) for _, a, _ in out)
    run.done = k - 1  # a consumer's cursor: only the rest is left
    assert [bytes(d) for d, _, _ in run.rest(("h", 1))] == want[-1:]


@given(req_fields, st.binary(max_size=300), st.booleans())
def test_request_bytes_equal_the_codec(f, payload, gather):
    b = fast_request(f, payload, gather)
    if gather:
        assert type(b) is Gather and len(b) == F.REQ_SIZE + len(payload)
        b = bytes(b)
    assert bytes(b) == bytes(codec_request(f, payload))


@given(req_fields, st.binary(max_size=300))
def test_decoded_request_equals_the_generic_decoder(f, payload):
    data = bytes(codec_request(f, payload))
    fast, slow = F.decode_request(data), decode_packet(data)
    assert fast is not None
    assert type(fast.pds) is type(slow.pds) and fast.pds.values() == slow.pds.values()
    assert type(fast.ses) is type(slow.ses) and fast.ses.values() == slow.ses.values()
    assert fast.ext is None and bytes(fast.payload) == bytes(slow.payload) == payload


def test_it_declines_what_it_does_not_cover():
    syn = encode_packet(PdsRequestSyn(next_hdr=3, syn=1, psn=5, spdcid=1),
                        SesStandardRequestSom(opcode=1, som=1), None, b"x")
    assert F.decode_request(bytes(syn)) is None  # SYN: the generic decoder
    atomic = encode_packet(PdsRequest(next_hdr=3, psn=5), SesStandardRequestSom(opcode=4, som=1),
                           SesAtomic(), b"x" * 8)
    assert F.decode_request(bytes(atomic)) is None  # an extension header follows
    zero = dict.fromkeys(("retx", "ar", "clear_psn_offset", "psn", "spdcid", "dpdcid", "eom",
                          "som", "message_id", "job_id", "pid_on_fep", "buffer_offset",
                          "initiator", "mem_key", "message_offset", "request_length"), 0)
    medium = bytearray(codec_request({**zero, "typ": 2, "opcode": 1}, b"y" * 60))
    medium[1] = (medium[1] & 0x7F)  # next_hdr 3 → 2 (low bit of the nibble)
    assert F.decode_request(bytes(medium)) is None
    assert F.decode_request(b"\x10" * 40) is None  # short
    assert F.decode_request(bytes(F.ack_cc_nscc(0, 0, 0, 0, 0, 1, 2, 3, 1, 1, 1, 0, 0))) is None


@given(u(0, 15), u(0, 1), u(0, 1), u(0, 3), u(-(1 << 15), (1 << 15) - 1), u(0, (1 << 32) - 1),
       u(0, 0xFFFF), u(0, 0xFFFF), u(0, 255), u(-(1 << 15), (1 << 15) - 1),
       u(0, (1 << 64) - 1), u(0, (1 << 24) - 1), u(0, 0xFFFF))
def test_ack_bytes_equal_the_codec(nh, m, retx, req, off, cack, s, d, mpr, soff, bm, rb, ooo):
    h = PdsAckCcNscc(next_hdr=nh, m=m, retx=retx, req=req, ack_psn_offset=off, cack_psn=cack,
                     spdcid=s, dpdcid=d, cc_type=0, mpr=mpr, sack_psn_offset=soff,
                     sack_bitmap=bm, rcvd_bytes=rb, ooo_count=ooo)
    assert bytes(F.ack_cc_nscc(nh, m, retx, req, off, cack, s, d, mpr, soff, bm, rb, ooo)) == \
        bytes(encode_packet(h))


@given(u(0, 1), u(0, 1), u(0, 3), u(-(1 << 15), (1 << 15) - 1), u(0, (1 << 32) - 1),
       u(0, 0xFFFF), u(0, 0xFFFF), u(0, 255), u(-(1 << 15), (1 << 15) - 1),
       u(0, (1 << 64) - 1), u(0, (1 << 24) - 1), u(0, 0xFFFF), u(0, 0xFFFF))
def test_decoded_ack_equals_the_generic_decoder(m, retx, req, off, cack, s, d, mpr, soff, bm,
                                                rb, ooo, st_):
    data = bytes(F.ack_cc_nscc(0, m, retx, req, off, cack, s, d, mpr, soff, bm, rb, ooo, st_))
    fast, slow = F.decode_ack(data), decode_packet(data)
    assert fast is not None and type(fast.pds) is PdsAckCcNscc
    assert (fast.pds, fast.ses, fast.ext, bytes(fast.payload)) == \
        (slow.pds, slow.ses, slow.ext, bytes(slow.payload))


@settings(max_examples=200)
@given(u(0, 1), u(0, 3), u(-(1 << 15), (1 << 15) - 1), u(0, (1 << 32) - 1), u(0, 0xFFFF),
       u(0, 0xFFFF), u(0, 63), u(0, 63), u(0, 0xFFFF), u(0, (1 << 24) - 1), u(0, 0xFFFF),
       u(0, 0x3FFF), u(0, (1 << 32) - 1), u(0, (1 << 32) - 1), st.binary(max_size=64))
def test_decoded_read_data_equals_the_generic_decoder(retx, req, off, cack, s, d, opcode, rc,
                                                      mid, job, rmid, pl, ml, mo, payload):
    """An ACK_CC carrying READ data (SES response with data, RSP_DATA), any field values
    and any payload length — the fast decoder reads what ``decode_packet`` reads."""
    ses = SesResponseData(opcode=opcode, return_code=rc, message_id=mid, job_id=job,
                          read_req_message_id=rmid, payload_length=pl, modified_length=ml,
                          message_offset=mo)
    data = bytes(F.ack_cc_nscc(5, 0, retx, req, off, cack, s, d, 1, 0, 0, 0, 0)) \
        + bytes(encode_packet(None, ses)) + payload
    fast, slow = F.decode_ack(data), decode_packet(data)
    assert fast is not None and type(fast.ses) is SesResponseData
    assert (fast.pds, fast.ses, fast.ext, bytes(fast.payload)) == \
        (slow.pds, slow.ses, slow.ext, bytes(slow.payload))


def test_the_ack_decoder_declines_what_it_does_not_cover():
    """Anything but a bare NSCC ACK_CC goes to the generic decoder, which knows it."""
    ack = F.ack_cc_nscc(0, 0, 0, 0, 0, 1, 2, 3, 1, 1, 1, 0, 0)
    assert F.decode_ack(bytes(ack)) is not None
    with_rsp = F.ack_cc_nscc(4, 0, 0, 0, 0, 1, 2, 3, 1, 1, 1, 0, 0)  # an SES response follows
    assert F.decode_ack(bytes(with_rsp) + bytes(12)) is None
    rsp_data = bytes(F.ack_cc_nscc(5, 0, 0, 0, 0, 1, 2, 3, 1, 1, 1, 0, 0))
    assert F.decode_ack(rsp_data + bytes(20)) is not None  # READ data, none of it yet
    assert F.decode_ack(rsp_data + bytes(19)) is None  # its SES header cut short
    small = bytes(F.ack_cc_nscc(6, 0, 0, 0, 0, 1, 2, 3, 1, 1, 1, 0, 0))  # small RSP_DATA
    assert F.decode_ack(small + bytes(20)) is None
    assert F.decode_ack(bytes(ack) + b"x") is None  # more bytes than the header
    credit = bytearray(ack)
    credit[12] = 0x10  # cc_type 1: credit (RCCC)
    assert F.decode_ack(bytes(credit)) is None
    plain = bytearray(ack)
    plain[0] = (7 << 3) | (plain[0] & 7)  # type ACK, not ACK_CC
    assert F.decode_ack(bytes(plain)) is None
    assert F.decode_ack(bytes(ack[:31])) is None
    assert F.decode_ack(bytes(32)) is None


# -- the target's WRITE fast path (Target.write_run) ------------------------------------

def _transfer(seed: int, fast: bool, ekw: dict | None = None, mode: str | None = None,
              batch: bool = False, **link_kw):
    """Five WRITEs A → B through a seeded lossy link; the fast paths (the sender's runs
    of middles, the target's write_run) on or off; ``batch``: each instant's arrivals
    reach an engine in one ``receive_batch`` (the target's runs of a WRITE)."""
    p = uet_pair(seed=seed, ekw={"mtu": 1024, **(ekw or {})}, batch=batch, **link_kw)
    if not fast:
        p.eb.target.write_run = lambda *a: 0
        p.ea.initiator._run = lambda *a: 0
    p.link.tap = []
    p.run_objects = 0  # Runs handed out (engine option runs): the link opens them
    emit_run = p.ea.emit_run

    def counted(*a):
        p.run_objects += 1
        emit_run(*a)

    p.ea.emit_run = counted
    bufs = [write(p, i, 37_000 * i + 11, seed=i, mode=mode) for i in range(1, 6)]
    p.link.run()
    return p, bufs


@pytest.mark.parametrize("link", [{}, {"loss": 0.02, "reorder": 0.05, "dup": 0.02},
                                  {"loss": 0.01, "reorder": 0.1, "ce": 0.05}],
                         ids=["clean", "lossy", "reorder-ce"])
@pytest.mark.parametrize("ekw", [{}, {"gather": True, "runs": True, "cc": "nscc"},
                                 {"gather": True, "runs": True, "cc": "rccc"},
                                 {"gather": True, "runs": True}, {"gather": True, "cc": "nscc"}],
                         ids=["plain", "runs-nscc", "runs-rccc", "runs-nocc", "gather-nscc"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_write_fast_path_changes_nothing_on_the_wire_or_in_the_target(link, ekw, batch):
    """Same seed, fast path on and off: every datagram either engine sent (time, bytes,
    ECN) is the same, so are the target PDC's state and the data — and the fast path
    really carried packets (with a clean link, the bulk of them). ``batch``: the fast
    side takes each instant's arrivals in one ``receive_batch``, placing runs."""
    fast, bufs_f = _transfer(7, True, ekw, batch=batch, **link)
    slow, bufs_s = _transfer(7, False, ekw, **link)
    assert [(t, side, bytes(d), ecn) for t, side, d, ecn in fast.link.tap] == \
        [(t, side, bytes(d), ecn) for t, side, d, ecn in slow.link.tap]
    for (_, dst_f, data), (_, dst_s, _) in zip(bufs_f, bufs_s, strict=True):
        assert bytes(dst_f.view[:len(data)]) == bytes(dst_s.view[:len(data)]) == data
    tf, ts = (list(x.eb.target.pdcs.values()) for x in (fast, slow))
    for a, b in zip(tf, ts, strict=True):
        assert (a.first_missing, a.rcvd_bytes, a.ooo, a.clear_psn, a.bytes_since_ack,
                len(a.psn_msg)) == (b.first_missing, b.rcvd_bytes, b.ooo, b.clear_psn,
                                    b.bytes_since_ack, len(b.psn_msg))
        assert [a.psn_msg.get(x) for x in range(a.start_psn, a.first_missing)] == \
            [b.psn_msg.get(x) for x in range(b.start_psn, b.first_missing)]
    cf, cs = fast.eb.counters(), slow.eb.counters()
    n = cf.pop("rx_write_fast", 0)
    assert cs.get("rx_write_fast", 0) == 0 and cf == cs
    assert n > (cf["rx_data_packets"] // 2 if not link else 0)  # the bulk, on a clean link
    assert cf.get("rx_drop_internal_error", 0) == 0
    assert fast.ea.counters() == slow.ea.counters()
    if ekw.get("gather"):  # the runs carried packets (they only run in daemon engines)
        assert fast.ea.initiator.runs > 0
        assert (fast.run_objects > 0) == bool(ekw.get("runs"))


def test_rod_runs_change_nothing_on_the_wire():
    """ROD through loss and reordering (go-back-N on ROD_OOO NACKs): the sender's runs
    leave the same datagrams as packet-by-packet sending, and the data arrive."""
    kw = {"loss": 0.02, "reorder": 0.05}
    ekw = {"gather": True, "runs": True, "cc": "nscc"}
    fast, bufs = _transfer(11, True, ekw, mode="rod", **kw)
    slow, _ = _transfer(11, False, ekw, mode="rod", **kw)
    assert [(t, side, bytes(d)) for t, side, d, _ in fast.link.tap] == \
        [(t, side, bytes(d)) for t, side, d, _ in slow.link.tap]
    for _, dst, data in bufs:
        assert bytes(dst.view[:len(data)]) == data
    assert fast.run_objects > 0


def test_write_middle_fields_and_what_it_declines():
    zero = dict.fromkeys(("retx", "ar", "clear_psn_offset", "psn", "spdcid", "dpdcid", "eom",
                          "som", "message_id", "job_id", "pid_on_fep", "buffer_offset",
                          "initiator", "mem_key", "message_offset", "request_length"), 0)
    f = {**zero, "typ": 2, "opcode": 1, "retx": 1, "clear_psn_offset": -3, "psn": 99,
         "spdcid": 4, "dpdcid": 5, "message_id": 6, "buffer_offset": 7, "mem_key": 8,
         "message_offset": 1024, "request_length": 4096}
    data = bytes(codec_request(f, b"p" * 100))
    assert F.write_middle(data) == (2, 1, 0, -3, 99, 4, 5, 6, 7, 8, 100, 1024, 4096)
    ar = bytes(codec_request({**f, "ar": 1}, b"p" * 100))  # ACK now: still a middle
    assert F.write_middle(ar) == (2, 1, 1, -3, 99, 4, 5, 6, 7, 8, 100, 1024, 4096)
    for change in ({"som": 1}, {"opcode": 5}):  # first packet, a SEND
        assert F.write_middle(bytes(codec_request({**f, **change}, b"p" * 100))) is None
    syn = encode_packet(PdsRequestSyn(next_hdr=3, syn=1, psn=5, spdcid=1),
                        SesStandardRequest(opcode=1, som=0, payload_length=1), None, b"x")
    assert F.write_middle(bytes(syn)) is None
    assert F.write_middle(data[:40]) is None


def test_psn_messages_runs_lookup_and_eviction():
    from emu.transports.uet.pdc import PsnMessages

    pm = PsnMessages(keep=10)
    for psn in range(100, 104):
        pm.add(psn, 1)  # one run
    pm.add(104, 2)
    pm.add(110, 3)  # out of order: a gap
    pm.add(106, 2)
    pm.add(105, 2)  # fills in: extends 2's run
    pm.add(105, 9)  # already recorded: ignored
    assert [pm.get(x) for x in range(99, 112)] == [None, 1, 1, 1, 1, 2, 2, 2, None, None,
                                                   None, 3, None]
    assert pm.last_psn(2) == 106 and pm.last_psn(1) == 103 and pm.last_psn(7) is None
    assert len(pm) == 8
    for psn in range(111, 115):
        pm.add(psn, 3)
    assert len(pm) == 10 and pm.get(100) is None and pm.get(101) is None  # oldest forgotten
    assert pm.get(102) == 1 and pm.get(114) == 3


def test_a_region_deregistered_mid_write_stops_the_fast_path():
    """The target's fast path checks a WRITE's region once per message (Target.write_middle
    keeps it in TargetPdc.stream); deregistering the region mid-message must still stop
    placement at once: the next packet takes the general path, which NACKs it, and the
    WRITE completes in error — nothing written through a stale region, no internal error."""
    p = uet_pair(seed=5, ekw={"mtu": 1024, "gather": True, "runs": True})
    _, dst, data = write(p, 1, 2_000_000)
    p.link.run(stop=lambda: p.eb.stats.get("rx_write_fast", 0) >= 20)
    t = next(iter(p.eb.target.pdcs.values()))
    assert t.stream is not None and t.stream[4] is dst  # cached for this message
    placed = t.rcvd_bytes
    p.mb.deregister(dst)
    p.link.run()
    wcs = [e.wc for e in p.link.events["a"] if hasattr(e, "wc")]
    assert [w.wr_id for w in wcs] == [1] and wcs[0].status is not WcStatus.SUCCESS
    c = p.eb.counters()
    assert c.get("rx_drop_internal_error", 0) == 0
    assert c["rx_write_fast"] <= placed // 1024  # none after the deregistration
    assert placed < len(data) // 2

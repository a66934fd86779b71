# SPDX-License-Identifier: GPL-2.0-only
"""The bulk of a UET transfer in one ``struct`` call each way: data requests and ACK_CCs
(with READ data, RSP_DATA, or without).

Why: a WRITE or SEND is almost all RUD/ROD requests with a standard SES
header and no extension header, answered by ACK_CC (NSCC). Building those
through the checked codec headers (a range check per field) and decoding
them through the generic ``decode_packet`` (layout lookups per header) cost
more than everything else the engines do per packet — measured at ~45 µs of
engine time per 8 KiB packet for both ends together. Here each is one
precompiled :class:`struct.Struct` over the PDS and SES headers at once, and
the decoded headers are the codec's own classes built with their unchecked
``_trusted`` constructors (fields come out of masks, so they are in range),
so everything downstream is unchanged.

The layouts are the codec's (``emu.wire.codec.uet_pds`` / ``uet_ses``);
``tests/transports/uet/test_fastpath.py`` holds the two against each other on random
field values, and the decoder falls back to :func:`decode_packet` for
anything it does not recognise (SYN, small/medium headers, extension
headers, responses without data, control packets), so nothing off the fast path
changes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from emu.core.datagram import Gather
from emu.transports.base import ECN_CE
from emu.transports.uet import ses_shape as SH
from emu.wire.codec.uet import UetPacket
from emu.wire.codec.uet_pds import PdsAckCcNscc, PdsRequest
from emu.wire.codec.uet_ses import SesResponseData, SesStandardRequest, SesStandardRequestSom
from emu.wire.uet_defs import NEXT_HDR, PDS_TYPE

#: PDS RUD/ROD_REQ (12 B, no SYN) + SES standard request without SOM (44 B)
_REQ_STD = struct.Struct("!HhIHH" + "BBHIHHQIQIII")
#: PDS RUD/ROD_REQ (12 B, no SYN) + SES standard request with SOM (44 B)
_REQ_STD_SOM = struct.Struct("!HhIHH" + "BBHIHHQIQQI")
#: PDS ACK_CC with NSCC cc_state (32 B)
_ACK_NSCC = struct.Struct("!HhIHHBBhQHIH")
REQ_SIZE = 56
_NH_STANDARD = 3
_RUD_REQ, _ROD_REQ = PDS_TYPE["RUD_REQ"], PDS_TYPE["ROD_REQ"]
_ACK_CC = PDS_TYPE["ACK_CC"]
ACK_SIZE = 32
_NH_RSP_DATA = NEXT_HDR["RSP_DATA"]
#: an ACK_CC (NSCC) carrying READ data: SES response with data, then the data
RSP_DATA_SIZE = ACK_SIZE + SesResponseData.SIZE
_TYPES_REQ = (_RUD_REQ, _ROD_REQ)
#: request opcodes with no extension header after a standard header (uet_defs.ext_layout)
_PLAIN_OPCODES = frozenset({0x01, 0x05, 0x07, 0x08, 0x09})
_EMPTY = b""


def request(typ: int, retx: int, ar: int, clear_psn_offset: int, psn: int, spdcid: int,
            dpdcid: int, opcode: int, eom: int, som: int, message_id: int, job_id: int,
            pid_on_fep: int, buffer_offset: int, initiator: int, mem_key: int,
            payload_length: int, message_offset: int, request_length: int,
            payload: memoryview, gather: bool) -> bytearray | Gather:
    """A data request with a standard SES header (``som``: header_data 0 instead of
    payload_length/message_offset) and ``payload``; a :class:`Gather` when ``gather``
    (the daemon sends the payload from registered memory without a copy)."""
    w0 = (typ << 11) | (_NH_STANDARD << 7) | (retx << 4) | (ar << 3)
    flags = (eom << 1) | som
    if som:
        head = _REQ_STD_SOM.pack(w0, clear_psn_offset, psn, spdcid, dpdcid, opcode, flags,
                                 message_id, job_id, pid_on_fep, 0, buffer_offset, initiator,
                                 mem_key, 0, request_length)
    else:
        head = _REQ_STD.pack(w0, clear_psn_offset, psn, spdcid, dpdcid, opcode, flags,
                             message_id, job_id, pid_on_fep, 0, buffer_offset, initiator,
                             mem_key, payload_length, message_offset, request_length)
    if gather:
        n = len(payload)
        return Gather(bytearray(head), payload, bytearray(), REQ_SIZE + n)
    return bytearray().join((head, payload))


def middle_headers(k: int, typ: int, clear_psn_offset: int, psn: int, spdcid: int,
                   dpdcid: int, opcode: int, message_id: int, job_id: int, pid_on_fep: int,
                   buffer_offset: int, initiator: int, mem_key: int, seg: int,
                   message_offset: int, request_length: int, ar_last: bool = False
                   ) -> bytearray:
    """The headers of ``k`` consecutive middle packets (no RETX, SOM or EOM; AR on the last
    one with ``ar_last``) of ``seg`` payload bytes each, back to back
    (:class:`~emu.core.datagram.Run`): the first one's fields, then PSN + 1, CLEAR_PSN
    offset − 1 (the same oldest PSN seen from one PSN later) and message offset + ``seg``
    per packet.

    Why slices: patching three fields per packet in Python while writing the frames
    (the first form of runs) made a run slower to write than separate datagrams
    (~0.4 µs per packet, measured); here each field's bytes are packed for all ``k``
    packets at once and spread with one extended-slice assignment per byte — a
    fixed number of C-level operations whatever ``k``. The caller keeps the fields in
    range (no PSN wrap, the CLEAR_PSN offset within 16 bits)."""
    w0 = (typ << 11) | (_NH_STANDARD << 7)
    one = _REQ_STD.pack(w0, clear_psn_offset, psn, spdcid, dpdcid, opcode, 0, message_id,
                        job_id, pid_on_fep, 0, buffer_offset, initiator, mem_key, seg,
                        message_offset, request_length)
    hdrs = bytearray(one * k)
    if k > 1:
        n = REQ_SIZE
        c = struct.pack(f"!{k}h", *range(clear_psn_offset, clear_psn_offset - k, -1))
        p = struct.pack(f"!{k}I", *range(psn, psn + k))
        m = struct.pack(f"!{k}I", *range(message_offset, message_offset + k * seg, seg))
        hdrs[2::n] = c[0::2]
        hdrs[3::n] = c[1::2]
        for j in range(4):
            hdrs[4 + j::n] = p[j::4]
            hdrs[48 + j::n] = m[j::4]
    if ar_last:  # the last one asks for an ACK (AR, bit 3 of the first 16-bit word)
        hdrs[(k - 1) * REQ_SIZE + 1] |= 0x08
    return hdrs


def decode_request(data: bytes | bytearray | memoryview) -> UetPacket | None:
    """A RUD/ROD request (no SYN) with a plain standard SES header, decoded in one
    ``unpack``; None for anything else (the caller then uses ``decode_packet``)."""
    if len(data) < REQ_SIZE:
        return None
    b0 = data[0]
    typ = b0 >> 3
    if typ not in _TYPES_REQ:
        return None
    w0 = (b0 << 8) | data[1]
    if w0 & 0x4 or ((w0 >> 7) & 0xF) != _NH_STANDARD or data[12] not in _PLAIN_OPCODES:
        return None
    som = data[13] & 1
    if som:
        (w, off, psn, s, d, b12, b13, mid, w16, w20, w22, bo, ini, mk, hd,
         rl) = _REQ_STD_SOM.unpack_from(data, 0)
    else:
        (w, off, psn, s, d, b12, b13, mid, w16, w20, w22, bo, ini, mk, pl, mo,
         rl) = _REQ_STD.unpack_from(data, 0)
    pds = PdsRequest._trusted(typ, (w >> 7) & 0xF, (w >> 5) & 3, (w >> 4) & 1, (w >> 3) & 1,
                              0, w & 3, off, psn, s, d)
    head = (b12 >> 6, b12 & 0x3F, b13 >> 6, (b13 >> 5) & 1, (b13 >> 4) & 1, (b13 >> 3) & 1,
            (b13 >> 2) & 1, (b13 >> 1) & 1, som, mid, w16 >> 24, w16 & 0xFFFFFF, w20 >> 12,
            w20 & 0xFFF, w22 >> 12, w22 & 0xFFF, bo, ini, mk)
    if som:
        ses = SesStandardRequestSom._trusted(*head, hd, rl)
    else:
        ses = SesStandardRequest._trusted(*head, pl >> 14, pl & 0x3FFF, mo, rl)
    mv = data if type(data) is memoryview else memoryview(data)
    return UetPacket(pds, ses, None, mv[REQ_SIZE:])


def decode_ack(data: bytes | bytearray | memoryview) -> UetPacket | None:
    """An ACK_CC with NSCC cc_state — the reply to almost every data packet, with no SES
    header, or carrying READ data (an SES response with data, RSP_DATA) — decoded with
    the codec's own header decoders and no layout lookups; None for anything else
    (``decode_packet`` then).

    Why: at a line rate the daemons sustain, an initiator takes an ACK every two or
    three packets, one at a time, and the generic decoder's layout lookups and length
    checks were a quarter of its ACK handling (sans-IO, UET ACKs one by one); a READ's
    data comes back as one RSP_DATA per packet, and their generic decoding was ~16 %
    of the reading daemon (py-spy, ``emu perf read-bw --transport uet``)."""
    # type ACK_CC, cc_type 0 (NSCC); next_hdr 0 and 32 bytes exactly, or RSP_DATA
    n = len(data)
    if n < ACK_SIZE or data[0] >> 3 != _ACK_CC or data[12] >> 4:
        return None
    nh = ((data[0] & 7) << 1) | (data[1] >> 7)
    mv = data if type(data) is memoryview else memoryview(data)
    if nh == 0:
        if n != ACK_SIZE:
            return None
        return UetPacket(PdsAckCcNscc.decode(mv, 0), None, None, mv[ACK_SIZE:])
    if nh != _NH_RSP_DATA or n < RSP_DATA_SIZE:
        return None
    return UetPacket(PdsAckCcNscc.decode(mv, 0), SesResponseData.decode(mv, ACK_SIZE), None,
                     mv[RSP_DATA_SIZE:])


def unmarked(tos: int, trim: Sequence[int] | None) -> bool:
    """Whether a datagram read at ``tos`` (the whole TOS byte) may take the WRITE fast
    path: not CE-marked (the general path ACKs a mark at once) and not trimmed
    (``trim[tos]`` nonzero: a switch cut it to its headers, which the general path
    NACKs)."""
    return tos & 3 != ECN_CE and (trim is None or trim[tos] == 0)


def write_middle(data: bytes | bytearray | memoryview) -> tuple[int, ...] | None:
    """The fields the target's WRITE fast path needs (``Target.write_run``) of a RUD or
    ROD request with a standard header, no SYN and no SOM, opcode WRITE:
    ``(type, retx, ar, clear_psn_offset, psn, spdcid, dpdcid, message_id, buffer_offset,
    mem_key, payload_length, message_offset, request_length)``; None for anything else."""
    if len(data) < REQ_SIZE:
        return None
    b0 = data[0]
    typ = b0 >> 3
    # type RUD/ROD, standard next header, no SYN (bit 2); WRITE; no SOM
    if (typ != _RUD_REQ and typ != _ROD_REQ) or data[12] != SH.OP_WRITE or data[13] & 1:
        return None
    w0 = (b0 << 8) | data[1]
    if w0 & 0x4 or ((w0 >> 7) & 0xF) != _NH_STANDARD:
        return None
    (w, off, psn, s, d, _b12, _b13, mid, _w16, _w20, _w22, bo, _ini, mk, pl, mo,
     rl) = _REQ_STD.unpack_from(data, 0)
    return (typ, (w >> 4) & 1, (w >> 3) & 1, off, psn, s, d, mid, bo, mk, pl & 0x3FFF, mo, rl)


def ack_cc_nscc(next_hdr: int, m: int, retx: int, req: int, ack_psn_offset: int,
                cack_psn: int, spdcid: int, dpdcid: int, mpr: int, sack_psn_offset: int,
                sack_bitmap: int, rcvd_bytes: int, ooo_count: int,
                service_time: int = 0) -> bytearray:
    """An ACK_CC (cc_type NSCC) with no SES response: one ``pack``."""
    w0 = (8 << 11) | (next_hdr << 7) | (m << 5) | (retx << 4) | (req << 1)
    return bytearray(_ACK_NSCC.pack(w0, ack_psn_offset, cack_psn, spdcid, dpdcid, 0, mpr,
                                    sack_psn_offset, sack_bitmap, service_time, rcvd_bytes,
                                    ooo_count))


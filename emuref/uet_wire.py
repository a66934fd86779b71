# SPDX-License-Identifier: GPL-2.0-only
"""UET wire format for emu-ref (UDP encapsulation, port 4793), from ``specs/uet.md``.

Only the headers RUD with WRITE / SEND / READ needs, in plain ``struct``:
PDS RUD_REQ (with and without SYN), ACK, ACK_CC, NACK and CP; SES standard,
medium and small requests, RSP and RSP_DATA. Every layout is the spec page's
(W, Wireshark's dissector, normative for layout); offsets in the comments are
the page's. No TSS, no entropy header (UDP mode: the source port is the
entropy), no CCX variants.

Decoding returns plain dataclasses; anything short or of a type we do not
read raises :class:`WireError` with one line saying what.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

UDP_PORT = 4793

# PDS types (spec: PDS prologue)
T_RUD_REQ, T_ROD_REQ, T_ACK, T_ACK_CC, T_NACK, T_CP = 2, 3, 7, 8, 10, 11
# next_hdr
NH_NONE, NH_SMALL, NH_MEDIUM, NH_STANDARD, NH_RSP, NH_RSP_DATA = 0, 1, 2, 3, 4, 5
# request / CP flags (values inside the 16-bit prologue)
F_RETX, F_AR, F_SYN = 0x10, 0x08, 0x04
# ACK flags
F_M, F_P = 0x20, 0x08
# control types
CP_NOOP, CP_ACK_REQ, CP_CLEAR, CP_CLEAR_REQ, CP_CLOSE, CP_CLOSE_REQ = range(6)
# SES request opcodes
OP_WRITE, OP_READ, OP_SEND = 0x01, 0x02, 0x05
# SES header flags (byte 1)
SES_EOM, SES_SOM = 0x02, 0x01
# SES response opcodes / return code
RSP_OP_RESPONSE, RSP_OP_WITH_DATA = 1, 2
RC_OK = 0x01
#: the code emu-ref answers a WRITE/READ with a bad key or range with: the spec page
#: names only OK; 0x1C is BAD_MKEY in Wireshark's table (README: choices)
RC_BAD_KEY = 0x1C

_PRO = struct.Struct("!H")
_REQ = struct.Struct("!HhIHH")  # prologue, clear_psn_offset, PSN, SPDCID, DPDCID|SYN word
_ACK = struct.Struct("!HhIHH")  # prologue, ack_psn_offset, CACK_PSN, SPDCID, DPDCID
_ACK_CC = struct.Struct("!BBhQQ")  # cc_type|cc_flags, mpr, sack_psn_offset, bitmap, cc_state
_NACK = struct.Struct("!HBBIHHI")
_CP = struct.Struct("!HHIHHI")
_SES_COMMON = struct.Struct("!BBHBBHHH")  # opcode, flags, mid|len14, ri_gen, job(3 bytes)…
_STD_TAIL = struct.Struct("!QIQ")  # buffer_offset, initiator, mem_key
_RSP = struct.Struct("!BBHII")  # opcode, rc, message_id, ri_gen|job, modified_length
_RSP_DATA = struct.Struct("!BBHIHHII")


class WireError(ValueError):
    """Bytes we cannot read as UET (one line, names header and problem)."""


def prologue(typ: int, next_hdr: int, flags: int) -> int:
    return (typ << 11) | ((next_hdr & 0xF) << 7) | (flags & 0x7F)


@dataclass
class Pds:
    """Any PDS header we read; unused fields stay 0. ``syn_offset`` is the psn_offset
    of a SYN request (its bytes 10-11), ``dpdcid`` then 0."""

    type: int
    next_hdr: int
    flags: int
    psn: int = 0  # request/CP PSN, ACK CACK_PSN, NACK nack_psn
    spdcid: int = 0
    dpdcid: int = 0
    offset: int = 0  # clear_psn_offset (request) / ack_psn_offset (ACK)
    syn_offset: int = 0
    pdc_info: int = 0
    # ACK_CC
    cc_type: int = 0
    mpr: int = 0
    sack_offset: int = 0
    sack_bitmap: int = 0
    cc_state: int = 0
    # NACK / CP
    code: int = 0  # NACK code, CP ctl_type
    vendor: int = 0
    payload: int = 0
    size: int = 0

    @property
    def syn(self) -> bool:
        return self.type in (T_RUD_REQ, T_ROD_REQ, T_CP) and bool(self.flags & F_SYN)


def encode_request(next_hdr: int, flags: int, clear_off: int, psn: int, spdcid: int,
                   dpdcid: int, syn_offset: int | None = None) -> bytes:
    """A RUD_REQ; with ``syn_offset`` the SYN form (pdc_info 0, psn_offset)."""
    if syn_offset is not None:
        flags |= F_SYN
        last = syn_offset & 0xFFF
    else:
        last = dpdcid
    return _REQ.pack(prologue(T_RUD_REQ, next_hdr, flags), clear_off, psn & 0xFFFFFFFF,
                     spdcid, last)


def encode_ack_cc(next_hdr: int, flags: int, ack_off: int, cack: int, spdcid: int,
                  dpdcid: int, mpr: int, sack_off: int, bitmap: int, cc_state: int = 0) -> bytes:
    """An ACK_CC with cc_type 0 (NSCC) carrying a 64-bit SACK bitmap."""
    return (_ACK.pack(prologue(T_ACK_CC, next_hdr, flags), ack_off, cack & 0xFFFFFFFF, spdcid,
                      dpdcid)
            + _ACK_CC.pack(0, mpr, sack_off, bitmap, cc_state))


def encode_nack(code: int, psn: int, spdcid: int, dpdcid: int, payload: int = 0,
                flags: int = 0) -> bytes:
    return _NACK.pack(prologue(T_NACK, NH_NONE, flags), code, 0, psn & 0xFFFFFFFF, spdcid,
                      dpdcid, payload & 0xFFFFFFFF)


def encode_cp(ctl: int, flags: int, psn: int, spdcid: int, dpdcid: int,
              syn_offset: int | None = None, payload: int = 0) -> bytes:
    if syn_offset is not None:
        flags |= F_SYN
        dpdcid = syn_offset & 0xFFF
    return _CP.pack(prologue(T_CP, ctl, flags), 0, psn & 0xFFFFFFFF, spdcid, dpdcid, payload)


def decode_pds(b: bytes) -> Pds:
    """The PDS header at the start of ``b`` (``size`` says how long it was)."""
    if len(b) < 2:
        raise WireError("UET packet shorter than the PDS prologue")
    (w,) = _PRO.unpack_from(b, 0)
    typ, nh, fl = w >> 11, (w >> 7) & 0xF, w & 0x7F
    p = Pds(typ, nh, fl)
    try:
        if typ in (T_RUD_REQ, T_ROD_REQ):
            _, p.offset, p.psn, p.spdcid, last = _REQ.unpack_from(b, 0)
            if fl & F_SYN:
                p.pdc_info, p.syn_offset = last >> 12, last & 0xFFF
            else:
                p.dpdcid = last
            p.size = 12
        elif typ in (T_ACK, T_ACK_CC):
            _, p.offset, p.psn, p.spdcid, p.dpdcid = _ACK.unpack_from(b, 0)
            p.size = 12
            if typ == T_ACK_CC:
                cc, p.mpr, p.sack_offset, p.sack_bitmap, p.cc_state = _ACK_CC.unpack_from(b, 12)
                p.cc_type = cc >> 4
                p.size = 32
        elif typ == T_NACK:
            _, p.code, p.vendor, p.psn, p.spdcid, p.dpdcid, p.payload = _NACK.unpack_from(b, 0)
            p.size = 16
        elif typ == T_CP:
            _, _, p.psn, p.spdcid, last, p.payload = _CP.unpack_from(b, 0)
            p.code = nh
            p.next_hdr = NH_NONE
            if fl & F_SYN:
                p.pdc_info, p.syn_offset = last >> 12, last & 0xFFF
            else:
                p.dpdcid = last
            p.size = 16
        else:
            raise WireError(f"PDS type {typ} is not one emu-ref reads")
    except struct.error:
        raise WireError(f"PDS type {typ}: header cut short ({len(b)} bytes)") from None
    return p


@dataclass
class SesRequest:
    """A SES request in any of the three shapes. ``message_id`` is None for small and
    medium headers (they carry request_length there instead)."""

    opcode: int
    som: bool
    eom: bool
    message_id: int | None
    job_id: int
    pid_on_fep: int
    resource_index: int
    buffer_offset: int
    initiator: int = 0
    mem_key: int = 0
    header_data: int = 0
    payload_length: int | None = None  # None on a SOM packet (not on the wire)
    message_offset: int = 0
    request_length: int = 0
    size: int = 44


def _common(opcode: int, flags: int, third: int, job: int, pid: int, ri: int) -> bytes:
    return _SES_COMMON.pack(opcode & 0x3F, flags, third, 0, (job >> 16) & 0xFF, job & 0xFFFF,
                            pid & 0xFFF, ri & 0xFFF)


def encode_standard(r: SesRequest) -> bytes:
    flags = (SES_SOM if r.som else 0) | (SES_EOM if r.eom else 0)
    out = _common(r.opcode, flags, r.message_id or 0, r.job_id, r.pid_on_fep, r.resource_index)
    out += _STD_TAIL.pack(r.buffer_offset, r.initiator, r.mem_key)
    if r.som:
        out += struct.pack("!Q", r.header_data)
    else:
        out += struct.pack("!II", (r.payload_length or 0) & 0x3FFF, r.message_offset)
    return out + struct.pack("!I", r.request_length)


def decode_request(nh: int, b: bytes) -> SesRequest:
    """The SES request at the start of ``b`` for PDS next_hdr ``nh`` (1, 2 or 3)."""
    try:
        op, fl, third, _rig, jhi, jlo, pid, ri = _SES_COMMON.unpack_from(b, 0)
        job = (jhi << 16) | jlo
        som, eom = bool(fl & SES_SOM), bool(fl & SES_EOM)
        if nh == NH_STANDARD:
            bo, ini, mk = _STD_TAIL.unpack_from(b, 12)
            r = SesRequest(op & 0x3F, som, eom, third, job, pid & 0xFFF, ri & 0xFFF, bo, ini, mk)
            if som:
                (r.header_data,) = struct.unpack_from("!Q", b, 32)
            else:
                pl, r.message_offset = struct.unpack_from("!II", b, 32)
                r.payload_length = pl & 0x3FFF
            (r.request_length,) = struct.unpack_from("!I", b, 40)
            r.size = 44
            return r
        if nh == NH_MEDIUM:
            bo, ini, mk = _STD_TAIL.unpack_from(b, 12)
            return SesRequest(op & 0x3F, som, eom, None, job, pid & 0xFFF, ri & 0xFFF, bo, ini,
                              mk, request_length=third & 0x3FFF, size=32)
        if nh == NH_SMALL:
            (bo,) = struct.unpack_from("!Q", b, 12)
            return SesRequest(op & 0x3F, som, eom, None, job, pid & 0xFFF, ri & 0xFFF, bo,
                              request_length=third & 0x3FFF, size=20)
    except struct.error:
        raise WireError(f"SES request (next_hdr {nh}) cut short ({len(b)} bytes)") from None
    raise WireError(f"next_hdr {nh} is not a SES request")


@dataclass
class SesResponse:
    """RSP (12 B) or RSP_DATA (20 B, ``data`` True)."""

    opcode: int
    return_code: int
    message_id: int
    job_id: int = 0
    modified_length: int = 0
    data: bool = False
    read_req_message_id: int = 0
    payload_length: int = 0
    message_offset: int = 0
    size: int = 12


def encode_response(r: SesResponse) -> bytes:
    if r.data:
        return _RSP_DATA.pack(r.opcode & 0x3F, r.return_code & 0x3F, r.message_id,
                              r.job_id & 0xFFFFFF, r.read_req_message_id,
                              r.payload_length & 0x3FFF, r.modified_length, r.message_offset)
    return _RSP.pack(r.opcode & 0x3F, r.return_code & 0x3F, r.message_id,
                     r.job_id & 0xFFFFFF, r.modified_length)


def decode_response(nh: int, b: bytes) -> SesResponse:
    try:
        if nh == NH_RSP:
            op, rc, mid, jw, ml = _RSP.unpack_from(b, 0)
            return SesResponse(op & 0x3F, rc & 0x3F, mid, jw & 0xFFFFFF, ml)
        if nh == NH_RSP_DATA:
            op, rc, mid, jw, rr, pl, ml, mo = _RSP_DATA.unpack_from(b, 0)
            return SesResponse(op & 0x3F, rc & 0x3F, mid, jw & 0xFFFFFF, ml, True, rr,
                               pl & 0x3FFF, mo, size=20)
    except struct.error:
        raise WireError(f"SES response (next_hdr {nh}) cut short ({len(b)} bytes)") from None
    raise WireError(f"next_hdr {nh} is not a SES response emu-ref reads")

# SPDX-License-Identifier: GPL-2.0-only
"""struct codecs for UET's entropy header, TSS and every PDS header.

Mirrors :mod:`emu.wire.uet` (the scapy reference) field for field: same class
names, field names, order and widths. Which class decodes which bytes is
decided by :func:`emu.wire.uet_defs.pds_layout`, shared with the scapy side.
The 16-bit prologue ``type:5 | next_hdr:4 | flags:7`` is packed with the rest
of each header in one ``struct`` call.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from emu.wire.codec._base import Header
from emu.wire.errors import DecodeError, need
from emu.wire.uet_defs import PDS_TYPES, AckView, RequestView, SackView, SynView, pds_layout

_ENT = struct.Struct("!HH")
_TSS = struct.Struct("!IQ")
_TSS_SSI = struct.Struct("!IIQ")
_REQ = struct.Struct("!HhIHH")
_CC_REQ = struct.Struct("!HhIHHI")
_RUDI = struct.Struct("!HHI")
_UUD = struct.Struct("!HH")
_ACK = struct.Struct("!HhIHH")
_ACK_CC = struct.Struct("!HhIHHBBhQQ")
_ACK_NSCC = struct.Struct("!HhIHHBBhQHIH")
_ACK_CCX = struct.Struct("!HhIHHBBhQQQ")
_NACK = struct.Struct("!HBBIHHI")
_NACK_CCX = struct.Struct("!HBBIHHIQQ")
_CP = struct.Struct("!HHIHHI")

_M64 = (1 << 64) - 1

Buf = bytes | bytearray | memoryview
WBuf = bytearray | memoryview


@dataclass(slots=True)
class UetEntropy(Header):
    """Entropy header of native-IP UET (4 B)."""

    NAME: ClassVar[str] = "UET entropy"
    SIZE: ClassVar[int] = 4
    WIDTHS: ClassVar[tuple[int, ...]] = (16, 16)

    entropy: int = 0
    rsvd: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _ENT.pack_into(buf, offset, self.entropy, self.rsvd)
        return offset + 4

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> UetEntropy:
        need(cls.NAME, buf, offset, 4)
        return cls._trusted(*_ENT.unpack_from(buf, offset))


@dataclass(slots=True)
class UetTss(Header):
    """TSS without SSI (12 B); what follows is ciphertext."""

    NAME: ClassVar[str] = "UET TSS"
    SIZE: ClassVar[int] = 12
    WIDTHS: ClassVar[tuple[int, ...]] = (5, 1, 1, 1, 24, 64)

    type: int = 1
    sp: int = 0
    rsvd: int = 0
    an: int = 0
    sdi: int = 0
    tsc: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _TSS.pack_into(buf, offset, (self.type << 27) | (self.sp << 26) | (self.rsvd << 25)
                       | (self.an << 24) | self.sdi, self.tsc)
        return offset + 12

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> UetTss:
        need(cls.NAME, buf, offset, 12)
        w, tsc = _TSS.unpack_from(buf, offset)
        return cls._trusted(w >> 27, (w >> 26) & 1, (w >> 25) & 1, (w >> 24) & 1, w & 0xFFFFFF, tsc)


@dataclass(slots=True)
class UetTssSsi(Header):
    """TSS with SSI (SP set), 16 B."""

    NAME: ClassVar[str] = "UET TSS+SSI"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = (5, 1, 1, 1, 24, 32, 64)

    type: int = 1
    sp: int = 1
    rsvd: int = 0
    an: int = 0
    sdi: int = 0
    ssi: int = 0
    tsc: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _TSS_SSI.pack_into(buf, offset, (self.type << 27) | (self.sp << 26) | (self.rsvd << 25)
                           | (self.an << 24) | self.sdi, self.ssi, self.tsc)
        return offset + 16

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> UetTssSsi:
        need(cls.NAME, buf, offset, 16)
        w, ssi, tsc = _TSS_SSI.unpack_from(buf, offset)
        return cls._trusted(
            w >> 27, (w >> 26) & 1, (w >> 25) & 1, (w >> 24) & 1, w & 0xFFFFFF, ssi, tsc)


# --------------------------------------------------------------------------
# Requests: prologue flags rsvd:2 | RETX | AR | SYN | rsvd:2
# --------------------------------------------------------------------------

def _req_w0(h: PdsRequest | PdsRequestSyn | PdsCcRequest | PdsCcRequestSyn) -> int:
    return ((h.type << 11) | (h.next_hdr << 7) | (h.flag_rsvd0 << 5) | (h.retx << 4)
            | (h.ar << 3) | (h.syn << 2) | h.flag_rsvd1)


def _req_prologue(w: int) -> tuple[int, ...]:
    return (w >> 11, (w >> 7) & 0xF, (w >> 5) & 3, (w >> 4) & 1, (w >> 3) & 1, (w >> 2) & 1,
            w & 3)


_REQ_WIDTHS = (5, 4, 2, 1, 1, 1, 2, -16, 32, 16)


@dataclass(slots=True)
class PdsRequest(Header, RequestView):
    """RUD_REQ / ROD_REQ without SYN (12 B)."""

    NAME: ClassVar[str] = "UET PDS RUD/ROD_REQ"
    SIZE: ClassVar[int] = 12
    WIDTHS: ClassVar[tuple[int, ...]] = (*_REQ_WIDTHS, 16)

    type: int = 2
    next_hdr: int = 0
    flag_rsvd0: int = 0
    retx: int = 0
    ar: int = 0
    syn: int = 0
    flag_rsvd1: int = 0
    clear_psn_offset: int = 0
    psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _REQ.pack_into(buf, offset, _req_w0(self), self.clear_psn_offset, self.psn,
                       self.spdcid, self.dpdcid)
        return offset + 12

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsRequest:
        need(cls.NAME, buf, offset, 12)
        w, off, psn, s, d = _REQ.unpack_from(buf, offset)
        return cls._trusted(*_req_prologue(w), off, psn, s, d)


@dataclass(slots=True)
class PdsRequestSyn(Header, RequestView, SynView):
    """RUD_REQ / ROD_REQ with SYN (12 B): pdc_info:4 | psn_offset:12 instead of DPDCID."""

    NAME: ClassVar[str] = "UET PDS RUD/ROD_REQ+SYN"
    SIZE: ClassVar[int] = 12
    WIDTHS: ClassVar[tuple[int, ...]] = (*_REQ_WIDTHS, 4, 12)

    type: int = 2
    next_hdr: int = 0
    flag_rsvd0: int = 0
    retx: int = 0
    ar: int = 0
    syn: int = 1
    flag_rsvd1: int = 0
    clear_psn_offset: int = 0
    psn: int = 0
    spdcid: int = 0
    pdc_info: int = 0
    psn_offset: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _REQ.pack_into(buf, offset, _req_w0(self), self.clear_psn_offset, self.psn,
                       self.spdcid, (self.pdc_info << 12) | self.psn_offset)
        return offset + 12

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsRequestSyn:
        need(cls.NAME, buf, offset, 12)
        w, off, psn, s, x = _REQ.unpack_from(buf, offset)
        return cls._trusted(*_req_prologue(w), off, psn, s, x >> 12, x & 0xFFF)


@dataclass(slots=True)
class PdsCcRequest(Header, RequestView):
    """RUD_CC_REQ / ROD_CC_REQ without SYN (16 B)."""

    NAME: ClassVar[str] = "UET PDS RUD/ROD_CC_REQ"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = (*_REQ_WIDTHS, 16, 8, 24)

    type: int = 13
    next_hdr: int = 0
    flag_rsvd0: int = 0
    retx: int = 0
    ar: int = 0
    syn: int = 0
    flag_rsvd1: int = 0
    clear_psn_offset: int = 0
    psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    ccc_id: int = 0
    credit_target: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _CC_REQ.pack_into(buf, offset, _req_w0(self), self.clear_psn_offset, self.psn,
                          self.spdcid, self.dpdcid, (self.ccc_id << 24) | self.credit_target)
        return offset + 16

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsCcRequest:
        need(cls.NAME, buf, offset, 16)
        w, off, psn, s, d, c = _CC_REQ.unpack_from(buf, offset)
        return cls._trusted(*_req_prologue(w), off, psn, s, d, c >> 24, c & 0xFFFFFF)


@dataclass(slots=True)
class PdsCcRequestSyn(Header, RequestView, SynView):
    """RUD_CC_REQ / ROD_CC_REQ with SYN (16 B)."""

    NAME: ClassVar[str] = "UET PDS RUD/ROD_CC_REQ+SYN"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = (*_REQ_WIDTHS, 4, 12, 8, 24)

    type: int = 13
    next_hdr: int = 0
    flag_rsvd0: int = 0
    retx: int = 0
    ar: int = 0
    syn: int = 1
    flag_rsvd1: int = 0
    clear_psn_offset: int = 0
    psn: int = 0
    spdcid: int = 0
    pdc_info: int = 0
    psn_offset: int = 0
    ccc_id: int = 0
    credit_target: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _CC_REQ.pack_into(buf, offset, _req_w0(self), self.clear_psn_offset, self.psn,
                          self.spdcid, (self.pdc_info << 12) | self.psn_offset,
                          (self.ccc_id << 24) | self.credit_target)
        return offset + 16

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsCcRequestSyn:
        need(cls.NAME, buf, offset, 16)
        w, off, psn, s, x, c = _CC_REQ.unpack_from(buf, offset)
        return cls._trusted(
            *_req_prologue(w), off, psn, s, x >> 12, x & 0xFFF, c >> 24, c & 0xFFFFFF)


# --------------------------------------------------------------------------
# RUDI, UUD
# --------------------------------------------------------------------------

@dataclass(slots=True)
class PdsRudi(Header):
    """RUDI_REQ / RUDI_RESP (8 B); flags rsvd | M | RETX | rsvd:4."""

    NAME: ClassVar[str] = "UET PDS RUDI"
    SIZE: ClassVar[int] = 8
    WIDTHS: ClassVar[tuple[int, ...]] = (5, 4, 1, 1, 1, 4, 16, 32)

    type: int = 4
    next_hdr: int = 0
    flag_rsvd0: int = 0
    m: int = 0
    retx: int = 0
    flag_rsvd1: int = 0
    rsvd: int = 0
    pkt_id: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _RUDI.pack_into(buf, offset, (self.type << 11) | (self.next_hdr << 7)
                        | (self.flag_rsvd0 << 6) | (self.m << 5) | (self.retx << 4)
                        | self.flag_rsvd1, self.rsvd, self.pkt_id)
        return offset + 8

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsRudi:
        need(cls.NAME, buf, offset, 8)
        w, r, pid = _RUDI.unpack_from(buf, offset)
        return cls._trusted(
            w >> 11, (w >> 7) & 0xF, (w >> 6) & 1, (w >> 5) & 1, (w >> 4) & 1, w & 0xF,
                   r, pid)


@dataclass(slots=True)
class PdsUud(Header):
    """UUD_REQ (4 B); all flags reserved."""

    NAME: ClassVar[str] = "UET PDS UUD_REQ"
    SIZE: ClassVar[int] = 4
    WIDTHS: ClassVar[tuple[int, ...]] = (5, 4, 7, 16)

    type: int = 6
    next_hdr: int = 0
    flag_rsvd0: int = 0
    rsvd: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _UUD.pack_into(buf, offset, (self.type << 11) | (self.next_hdr << 7) | self.flag_rsvd0,
                       self.rsvd)
        return offset + 4

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsUud:
        need(cls.NAME, buf, offset, 4)
        w, r = _UUD.unpack_from(buf, offset)
        return cls._trusted(w >> 11, (w >> 7) & 0xF, w & 0x7F, r)


# --------------------------------------------------------------------------
# ACKs: prologue flags rsvd | M | RETX | P | REQ:2 | rsvd
# --------------------------------------------------------------------------

def _ack_w0(h: PdsAck | PdsAckCc | PdsAckCcNscc | PdsAckCcCredit | PdsAckCcx) -> int:
    return ((h.type << 11) | (h.next_hdr << 7) | (h.flag_rsvd0 << 6) | (h.m << 5)
            | (h.retx << 4) | (h.p << 3) | (h.req << 1) | h.flag_rsvd1)


def _ack_prologue(w: int) -> tuple[int, ...]:
    return (w >> 11, (w >> 7) & 0xF, (w >> 6) & 1, (w >> 5) & 1, (w >> 4) & 1, (w >> 3) & 1,
            (w >> 1) & 3, w & 1)


_ACK_WIDTHS = (5, 4, 1, 1, 1, 1, 2, 1, -16, 32, 16, 16)
_ACK_EXT_WIDTHS = (4, 4, 8, -16, 64)


@dataclass(slots=True)
class PdsAck(Header, AckView):
    """ACK (12 B); ack_psn_offset is probe_opaque when P is set."""

    NAME: ClassVar[str] = "UET PDS ACK"
    SIZE: ClassVar[int] = 12
    WIDTHS: ClassVar[tuple[int, ...]] = _ACK_WIDTHS

    type: int = 7
    next_hdr: int = 0
    flag_rsvd0: int = 0
    m: int = 0
    retx: int = 0
    p: int = 0
    req: int = 0
    flag_rsvd1: int = 0
    ack_psn_offset: int = 0
    cack_psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _ACK.pack_into(buf, offset, _ack_w0(self), self.ack_psn_offset, self.cack_psn,
                       self.spdcid, self.dpdcid)
        return offset + 12

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsAck:
        need(cls.NAME, buf, offset, 12)
        w, off, cack, s, d = _ACK.unpack_from(buf, offset)
        return cls._trusted(*_ack_prologue(w), off, cack, s, d)


@dataclass(slots=True)
class PdsAckCc(Header, SackView):
    """ACK_CC (32 B) with an undecoded cc_type: cc_state as a raw u64."""

    NAME: ClassVar[str] = "UET PDS ACK_CC"
    SIZE: ClassVar[int] = 32
    WIDTHS: ClassVar[tuple[int, ...]] = (*_ACK_WIDTHS, *_ACK_EXT_WIDTHS, 64)

    type: int = 8
    next_hdr: int = 0
    flag_rsvd0: int = 0
    m: int = 0
    retx: int = 0
    p: int = 0
    req: int = 0
    flag_rsvd1: int = 0
    ack_psn_offset: int = 0
    cack_psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    cc_type: int = 2
    cc_flags: int = 0
    mpr: int = 0
    sack_psn_offset: int = 0
    sack_bitmap: int = 0
    cc_state: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _ACK_CC.pack_into(buf, offset, _ack_w0(self), self.ack_psn_offset, self.cack_psn,
                          self.spdcid, self.dpdcid, (self.cc_type << 4) | self.cc_flags, self.mpr,
                          self.sack_psn_offset, self.sack_bitmap, self.cc_state)
        return offset + 32

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsAckCc:
        need(cls.NAME, buf, offset, 32)
        w, off, cack, s, d, cc, mpr, soff, bm, st = _ACK_CC.unpack_from(buf, offset)
        return cls._trusted(
            *_ack_prologue(w), off, cack, s, d, cc >> 4, cc & 0xF, mpr, soff, bm, st)


@dataclass(slots=True)
class PdsAckCcNscc(Header, SackView):
    """ACK_CC with cc_type 0 (NSCC): cc_state spelled out (32 B)."""

    NAME: ClassVar[str] = "UET PDS ACK_CC NSCC"
    SIZE: ClassVar[int] = 32
    WIDTHS: ClassVar[tuple[int, ...]] = (*_ACK_WIDTHS, *_ACK_EXT_WIDTHS, 16, 1, 7, 24, 16)

    type: int = 8
    next_hdr: int = 0
    flag_rsvd0: int = 0
    m: int = 0
    retx: int = 0
    p: int = 0
    req: int = 0
    flag_rsvd1: int = 0
    ack_psn_offset: int = 0
    cack_psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    cc_type: int = 0
    cc_flags: int = 0
    mpr: int = 0
    sack_psn_offset: int = 0
    sack_bitmap: int = 0
    service_time: int = 0
    restore_cwnd: int = 0
    rcv_cwnd_pend: int = 0
    rcvd_bytes: int = 0
    ooo_count: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _ACK_NSCC.pack_into(buf, offset, _ack_w0(self), self.ack_psn_offset, self.cack_psn,
                            self.spdcid, self.dpdcid, (self.cc_type << 4) | self.cc_flags,
                            self.mpr, self.sack_psn_offset, self.sack_bitmap, self.service_time,
                            (self.restore_cwnd << 31) | (self.rcv_cwnd_pend << 24)
                            | self.rcvd_bytes, self.ooo_count)
        return offset + 32

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsAckCcNscc:
        need(cls.NAME, buf, offset, 32)
        w, off, cack, s, d, cc, mpr, soff, bm, st, x, ooo = _ACK_NSCC.unpack_from(buf, offset)
        return cls._trusted(
            *_ack_prologue(w), off, cack, s, d, cc >> 4, cc & 0xF, mpr, soff, bm, st,
                   x >> 31, (x >> 24) & 0x7F, x & 0xFFFFFF, ooo)


@dataclass(slots=True)
class PdsAckCcCredit(Header, SackView):
    """ACK_CC with cc_type 1 (credit/RCCC): credit u24, 3 reserved bytes, ooo_count (32 B)."""

    NAME: ClassVar[str] = "UET PDS ACK_CC credit"
    SIZE: ClassVar[int] = 32
    WIDTHS: ClassVar[tuple[int, ...]] = (*_ACK_WIDTHS, *_ACK_EXT_WIDTHS, 24, 24, 16)

    type: int = 8
    next_hdr: int = 0
    flag_rsvd0: int = 0
    m: int = 0
    retx: int = 0
    p: int = 0
    req: int = 0
    flag_rsvd1: int = 0
    ack_psn_offset: int = 0
    cack_psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    cc_type: int = 1
    cc_flags: int = 0
    mpr: int = 0
    sack_psn_offset: int = 0
    sack_bitmap: int = 0
    credit: int = 0
    cc_rsvd: int = 0
    ooo_count: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _ACK_CC.pack_into(buf, offset, _ack_w0(self), self.ack_psn_offset, self.cack_psn,
                          self.spdcid, self.dpdcid, (self.cc_type << 4) | self.cc_flags, self.mpr,
                          self.sack_psn_offset, self.sack_bitmap,
                          (self.credit << 40) | (self.cc_rsvd << 16) | self.ooo_count)
        return offset + 32

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsAckCcCredit:
        need(cls.NAME, buf, offset, 32)
        w, off, cack, s, d, cc, mpr, soff, bm, st = _ACK_CC.unpack_from(buf, offset)
        return cls._trusted(*_ack_prologue(w), off, cack, s, d, cc >> 4, cc & 0xF, mpr, soff, bm,
                   st >> 40, (st >> 16) & 0xFFFFFF, st & 0xFFFF)


@dataclass(slots=True)
class PdsAckCcx(Header, SackView):
    """ACK_CCX (40 B): ACK_CC up to the SACK bitmap, then a 128-bit CCX state."""

    NAME: ClassVar[str] = "UET PDS ACK_CCX"
    SIZE: ClassVar[int] = 40
    WIDTHS: ClassVar[tuple[int, ...]] = (*_ACK_WIDTHS, *_ACK_EXT_WIDTHS, 128)

    type: int = 9
    next_hdr: int = 0
    flag_rsvd0: int = 0
    m: int = 0
    retx: int = 0
    p: int = 0
    req: int = 0
    flag_rsvd1: int = 0
    ack_psn_offset: int = 0
    cack_psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    cc_type: int = 0
    cc_flags: int = 0
    mpr: int = 0
    sack_psn_offset: int = 0
    sack_bitmap: int = 0
    ccx_state: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _ACK_CCX.pack_into(buf, offset, _ack_w0(self), self.ack_psn_offset, self.cack_psn,
                           self.spdcid, self.dpdcid, (self.cc_type << 4) | self.cc_flags,
                           self.mpr, self.sack_psn_offset, self.sack_bitmap,
                           self.ccx_state >> 64, self.ccx_state & _M64)
        return offset + 40

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsAckCcx:
        need(cls.NAME, buf, offset, 40)
        w, off, cack, s, d, cc, mpr, soff, bm, hi, lo = _ACK_CCX.unpack_from(buf, offset)
        return cls._trusted(*_ack_prologue(w), off, cack, s, d, cc >> 4, cc & 0xF, mpr, soff, bm,
                   (hi << 64) | lo)


# --------------------------------------------------------------------------
# NACKs: prologue flags rsvd | M | RETX | NT | rsvd:3
# --------------------------------------------------------------------------

def _nack_w0(h: PdsNack | PdsNackCcx) -> int:
    return ((h.type << 11) | (h.next_hdr << 7) | (h.flag_rsvd0 << 6) | (h.m << 5)
            | (h.retx << 4) | (h.nt << 3) | h.flag_rsvd1)


def _nack_prologue(w: int) -> tuple[int, ...]:
    return (w >> 11, (w >> 7) & 0xF, (w >> 6) & 1, (w >> 5) & 1, (w >> 4) & 1, (w >> 3) & 1,
            w & 7)


_NACK_WIDTHS = (5, 4, 1, 1, 1, 1, 3, 8, 8, 32, 16, 16, 32)


@dataclass(slots=True)
class PdsNack(Header):
    """NACK (16 B); nack_psn is the pkt_id when NT (RUDI) is set."""

    NAME: ClassVar[str] = "UET PDS NACK"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = _NACK_WIDTHS

    type: int = 10
    next_hdr: int = 0
    flag_rsvd0: int = 0
    m: int = 0
    retx: int = 0
    nt: int = 0
    flag_rsvd1: int = 0
    nack_code: int = 0
    vendor_code: int = 0
    nack_psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    nack_payload: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _NACK.pack_into(buf, offset, _nack_w0(self), self.nack_code, self.vendor_code,
                        self.nack_psn, self.spdcid, self.dpdcid, self.nack_payload)
        return offset + 16

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsNack:
        need(cls.NAME, buf, offset, 16)
        w, code, vc, psn, s, d, pl = _NACK.unpack_from(buf, offset)
        return cls._trusted(*_nack_prologue(w), code, vc, psn, s, d, pl)


@dataclass(slots=True)
class PdsNackCcx(Header):
    """NACK_CCX (32 B): NACK, then an opaque 128-bit NACK CCX state."""

    NAME: ClassVar[str] = "UET PDS NACK_CCX"
    SIZE: ClassVar[int] = 32
    WIDTHS: ClassVar[tuple[int, ...]] = (*_NACK_WIDTHS, 128)

    type: int = 12
    next_hdr: int = 0
    flag_rsvd0: int = 0
    m: int = 0
    retx: int = 0
    nt: int = 0
    flag_rsvd1: int = 0
    nack_code: int = 0
    vendor_code: int = 0
    nack_psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    nack_payload: int = 0
    nccx_state: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _NACK_CCX.pack_into(buf, offset, _nack_w0(self), self.nack_code, self.vendor_code,
                            self.nack_psn, self.spdcid, self.dpdcid, self.nack_payload,
                            self.nccx_state >> 64, self.nccx_state & _M64)
        return offset + 32

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsNackCcx:
        need(cls.NAME, buf, offset, 32)
        w, code, vc, psn, s, d, pl, hi, lo = _NACK_CCX.unpack_from(buf, offset)
        return cls._trusted(*_nack_prologue(w), code, vc, psn, s, d, pl, (hi << 64) | lo)


# --------------------------------------------------------------------------
# CP: ctl_type in place of next_hdr; flags rsvd | ISROD | RETX | AR | SYN | rsvd:2
# --------------------------------------------------------------------------

def _cp_w0(h: PdsControl | PdsControlSyn) -> int:
    return ((h.type << 11) | (h.ctl_type << 7) | (h.flag_rsvd0 << 6) | (h.isrod << 5)
            | (h.retx << 4) | (h.ar << 3) | (h.syn << 2) | h.flag_rsvd1)


def _cp_prologue(w: int) -> tuple[int, ...]:
    return (w >> 11, (w >> 7) & 0xF, (w >> 6) & 1, (w >> 5) & 1, (w >> 4) & 1, (w >> 3) & 1,
            (w >> 2) & 1, w & 3)


_CP_HEAD_WIDTHS = (5, 4, 1, 1, 1, 1, 1, 2, 16, 32, 16)


@dataclass(slots=True)
class PdsControl(Header):
    """CP (16 B) without SYN."""

    NAME: ClassVar[str] = "UET PDS CP"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = (*_CP_HEAD_WIDTHS, 16, 32)

    type: int = 11
    ctl_type: int = 0
    flag_rsvd0: int = 0
    isrod: int = 0
    retx: int = 0
    ar: int = 0
    syn: int = 0
    flag_rsvd1: int = 0
    probe_opaque: int = 0
    psn: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    ctl_payload: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _CP.pack_into(buf, offset, _cp_w0(self), self.probe_opaque, self.psn, self.spdcid,
                      self.dpdcid, self.ctl_payload)
        return offset + 16

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsControl:
        need(cls.NAME, buf, offset, 16)
        w, po, psn, s, d, pl = _CP.unpack_from(buf, offset)
        return cls._trusted(*_cp_prologue(w), po, psn, s, d, pl)


@dataclass(slots=True)
class PdsControlSyn(Header, SynView):
    """CP with SYN (16 B): pdc_info:4 | psn_offset:12 instead of DPDCID."""

    NAME: ClassVar[str] = "UET PDS CP+SYN"
    SIZE: ClassVar[int] = 16
    WIDTHS: ClassVar[tuple[int, ...]] = (*_CP_HEAD_WIDTHS, 4, 12, 32)

    type: int = 11
    ctl_type: int = 0
    flag_rsvd0: int = 0
    isrod: int = 0
    retx: int = 0
    ar: int = 0
    syn: int = 1
    flag_rsvd1: int = 0
    probe_opaque: int = 0
    psn: int = 0
    spdcid: int = 0
    pdc_info: int = 0
    psn_offset: int = 0
    ctl_payload: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _CP.pack_into(buf, offset, _cp_w0(self), self.probe_opaque, self.psn, self.spdcid,
                      (self.pdc_info << 12) | self.psn_offset, self.ctl_payload)
        return offset + 16

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> PdsControlSyn:
        need(cls.NAME, buf, offset, 16)
        w, po, psn, s, x, pl = _CP.unpack_from(buf, offset)
        return cls._trusted(*_cp_prologue(w), po, psn, s, x >> 12, x & 0xFFF, pl)


# --------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------

#: class name -> class for the TSS and PDS headers (names from uet_defs.pds_layout)
PDS_CLASSES: dict[str, type[Header]] = {c.__name__: c for c in (
    UetTss, UetTssSsi, PdsRequest, PdsRequestSyn, PdsCcRequest, PdsCcRequestSyn, PdsRudi,
    PdsUud, PdsAck, PdsAckCc, PdsAckCcNscc, PdsAckCcCredit, PdsAckCcx, PdsNack, PdsNackCcx,
    PdsControl, PdsControlSyn,
)}
_TYPE_NAMES = {t: f"UET PDS {n}" for t, n in PDS_TYPES.items()}


def decode_pds(buf: Buf, offset: int = 0) -> Header:
    """Decode the TSS or PDS header at ``offset``, its class chosen by type, SYN, SP or cc_type.

    DecodeError when fewer than 2 bytes are left, the type is unknown (0, 15-31)
    or the buffer is shorter than the type's header; the message names the
    PDS type (``"UET PDS ROD_REQ at offset 0: truncated: need 12 bytes, have 7"``).
    """
    need("UET PDS", buf, offset, 2)
    name = pds_layout(buf, offset)
    if name is None:
        raise DecodeError("UET PDS", offset, f"unknown PDS type {buf[offset] >> 3}")
    cls = PDS_CLASSES[name]
    need(_TYPE_NAMES[buf[offset] >> 3], buf, offset, cls.SIZE)
    return cls.decode(buf, offset)  # type: ignore[attr-defined, no-any-return]

# SPDX-License-Identifier: GPL-2.0-only
"""struct codecs for UET's SES headers and the extension headers after SES requests.

Mirrors :mod:`emu.wire.uet` field for field. Which class follows a PDS header
(``next_hdr``, a standard request's SOM flag) and which extension header
follows a request (opcode, AMO opcode) is decided by
:mod:`emu.wire.uet_defs`, shared with the scapy side.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from emu.wire.codec._base import Header
from emu.wire.errors import need

_STD_SOM = struct.Struct("!BBHIHHQIQQI")
_STD = struct.Struct("!BBHIHHQIQIII")
_SMALL = struct.Struct("!BBHIHHQ")
_MEDIUM = struct.Struct("!BBHIHHQIQ")
_RSP = struct.Struct("!BBHII")
_RSP_DATA = struct.Struct("!BBHIHHII")
_RSP_SMALL = struct.Struct("!BBH")
_RSP_SMALL12 = struct.Struct("!BBHII")
_ATOMIC = struct.Struct("!BBBB")
_CAS = struct.Struct("!BBBBQQQQ")
_RDV = struct.Struct("!IHHQQ")

_M64 = (1 << 64) - 1

Buf = bytes | bytearray | memoryview
WBuf = bytearray | memoryview

# byte 1 of a request: ver:2 | DC | IE | REL | HD (reserved in small) | EOM | SOM


def _flags(h: SesStandardRequest | SesStandardRequestSom | SesMediumRequest) -> int:
    return ((h.ver << 6) | (h.dc << 5) | (h.ie << 4) | (h.rel << 3) | (h.hd << 2) | (h.eom << 1)
            | h.som)


def _unflags(b: int) -> tuple[int, ...]:
    return (b >> 6, (b >> 5) & 1, (b >> 4) & 1, (b >> 3) & 1, (b >> 2) & 1, (b >> 1) & 1, b & 1)


_STD_HEAD_WIDTHS = (2, 6, 2, 1, 1, 1, 1, 1, 1, 16, 8, 24, 4, 12, 4, 12, 64, 32, 64)
_LEN_HEAD_WIDTHS = (2, 6, 2, 1, 1, 1, 1, 1, 1, 2, 14, 8, 24, 4, 12, 4, 12)


@dataclass(slots=True)
class SesStandardRequest(Header):
    """Standard request without SOM (44 B): payload_length and message_offset at byte 32."""

    NAME: ClassVar[str] = "UET SES standard request"
    SIZE: ClassVar[int] = 44
    WIDTHS: ClassVar[tuple[int, ...]] = (*_STD_HEAD_WIDTHS, 18, 14, 32, 32)

    rsvd0: int = 0
    opcode: int = 0
    ver: int = 0
    dc: int = 0
    ie: int = 0
    rel: int = 0
    hd: int = 0
    eom: int = 0
    som: int = 0
    message_id: int = 0
    ri_generation: int = 0
    job_id: int = 0
    rsvd2: int = 0
    pid_on_fep: int = 0
    rsvd3: int = 0
    resource_index: int = 0
    buffer_offset: int = 0
    initiator: int = 0
    mem_key_match_bits: int = 0
    rsvd4: int = 0
    payload_length: int = 0
    message_offset: int = 0
    request_length: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _STD.pack_into(buf, offset, (self.rsvd0 << 6) | self.opcode, _flags(self),
                       self.message_id, (self.ri_generation << 24) | self.job_id,
                       (self.rsvd2 << 12) | self.pid_on_fep,
                       (self.rsvd3 << 12) | self.resource_index, self.buffer_offset,
                       self.initiator, self.mem_key_match_bits,
                       (self.rsvd4 << 14) | self.payload_length, self.message_offset,
                       self.request_length)
        return offset + 44

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesStandardRequest:
        need(cls.NAME, buf, offset, 44)
        b0, b1, mid, w4, w8, w10, bo, ini, mk, pl, mo, rl = _STD.unpack_from(buf, offset)
        return cls._trusted(
            b0 >> 6, b0 & 0x3F, *_unflags(b1), mid, w4 >> 24, w4 & 0xFFFFFF, w8 >> 12,
                   w8 & 0xFFF, w10 >> 12, w10 & 0xFFF, bo, ini, mk, pl >> 14, pl & 0x3FFF, mo, rl)


@dataclass(slots=True)
class SesStandardRequestSom(Header):
    """Standard request with SOM (44 B): header_data u64 at byte 32."""

    NAME: ClassVar[str] = "UET SES standard request (SOM)"
    SIZE: ClassVar[int] = 44
    WIDTHS: ClassVar[tuple[int, ...]] = (*_STD_HEAD_WIDTHS, 64, 32)

    rsvd0: int = 0
    opcode: int = 0
    ver: int = 0
    dc: int = 0
    ie: int = 0
    rel: int = 0
    hd: int = 0
    eom: int = 0
    som: int = 1
    message_id: int = 0
    ri_generation: int = 0
    job_id: int = 0
    rsvd2: int = 0
    pid_on_fep: int = 0
    rsvd3: int = 0
    resource_index: int = 0
    buffer_offset: int = 0
    initiator: int = 0
    mem_key_match_bits: int = 0
    header_data: int = 0
    request_length: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _STD_SOM.pack_into(buf, offset, (self.rsvd0 << 6) | self.opcode, _flags(self),
                           self.message_id, (self.ri_generation << 24) | self.job_id,
                           (self.rsvd2 << 12) | self.pid_on_fep,
                           (self.rsvd3 << 12) | self.resource_index, self.buffer_offset,
                           self.initiator, self.mem_key_match_bits, self.header_data,
                           self.request_length)
        return offset + 44

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesStandardRequestSom:
        need(cls.NAME, buf, offset, 44)
        b0, b1, mid, w4, w8, w10, bo, ini, mk, hdr, rl = _STD_SOM.unpack_from(buf, offset)
        return cls._trusted(
            b0 >> 6, b0 & 0x3F, *_unflags(b1), mid, w4 >> 24, w4 & 0xFFFFFF, w8 >> 12,
                   w8 & 0xFFF, w10 >> 12, w10 & 0xFFF, bo, ini, mk, hdr, rl)


@dataclass(slots=True)
class SesSmallRequest(Header):
    """Small (optimized non-matching) request (20 B); HD's bit is reserved (``flag_rsvd``)."""

    NAME: ClassVar[str] = "UET SES small request"
    SIZE: ClassVar[int] = 20
    WIDTHS: ClassVar[tuple[int, ...]] = (*_LEN_HEAD_WIDTHS, 64)

    rsvd0: int = 0
    opcode: int = 0
    ver: int = 0
    dc: int = 0
    ie: int = 0
    rel: int = 0
    flag_rsvd: int = 0
    eom: int = 0
    som: int = 0
    rsvd1: int = 0
    request_length: int = 0
    ri_generation: int = 0
    job_id: int = 0
    rsvd2: int = 0
    pid_on_fep: int = 0
    rsvd3: int = 0
    resource_index: int = 0
    buffer_offset: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _SMALL.pack_into(buf, offset, (self.rsvd0 << 6) | self.opcode,
                         (self.ver << 6) | (self.dc << 5) | (self.ie << 4) | (self.rel << 3)
                         | (self.flag_rsvd << 2) | (self.eom << 1) | self.som,
                         (self.rsvd1 << 14) | self.request_length,
                         (self.ri_generation << 24) | self.job_id,
                         (self.rsvd2 << 12) | self.pid_on_fep,
                         (self.rsvd3 << 12) | self.resource_index, self.buffer_offset)
        return offset + 20

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesSmallRequest:
        need(cls.NAME, buf, offset, 20)
        b0, b1, rl, w4, w8, w10, bo = _SMALL.unpack_from(buf, offset)
        return cls._trusted(b0 >> 6, b0 & 0x3F, *_unflags(b1), rl >> 14, rl & 0x3FFF, w4 >> 24,
                   w4 & 0xFFFFFF, w8 >> 12, w8 & 0xFFF, w10 >> 12, w10 & 0xFFF, bo)


@dataclass(slots=True)
class SesMediumRequest(Header):
    """Medium request (32 B); ``buffer_offset`` holds header_data when HD is set."""

    NAME: ClassVar[str] = "UET SES medium request"
    SIZE: ClassVar[int] = 32
    WIDTHS: ClassVar[tuple[int, ...]] = (*_LEN_HEAD_WIDTHS, 64, 32, 64)

    rsvd0: int = 0
    opcode: int = 0
    ver: int = 0
    dc: int = 0
    ie: int = 0
    rel: int = 0
    hd: int = 0
    eom: int = 0
    som: int = 0
    rsvd1: int = 0
    request_length: int = 0
    ri_generation: int = 0
    job_id: int = 0
    rsvd2: int = 0
    pid_on_fep: int = 0
    rsvd3: int = 0
    resource_index: int = 0
    buffer_offset: int = 0
    initiator: int = 0
    mem_key_match_bits: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _MEDIUM.pack_into(buf, offset, (self.rsvd0 << 6) | self.opcode, _flags(self),
                          (self.rsvd1 << 14) | self.request_length,
                          (self.ri_generation << 24) | self.job_id,
                          (self.rsvd2 << 12) | self.pid_on_fep,
                          (self.rsvd3 << 12) | self.resource_index, self.buffer_offset,
                          self.initiator, self.mem_key_match_bits)
        return offset + 32

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesMediumRequest:
        need(cls.NAME, buf, offset, 32)
        b0, b1, rl, w4, w8, w10, bo, ini, mk = _MEDIUM.unpack_from(buf, offset)
        return cls._trusted(b0 >> 6, b0 & 0x3F, *_unflags(b1), rl >> 14, rl & 0x3FFF, w4 >> 24,
                   w4 & 0xFFFFFF, w8 >> 12, w8 & 0xFFF, w10 >> 12, w10 & 0xFFF, bo, ini, mk)


# --------------------------------------------------------------------------
# Responses: list:2 | opcode:6 · ver:2 | return_code:6 · ...
# --------------------------------------------------------------------------

@dataclass(slots=True)
class SesResponse(Header):
    """Response (12 B)."""

    NAME: ClassVar[str] = "UET SES response"
    SIZE: ClassVar[int] = 12
    WIDTHS: ClassVar[tuple[int, ...]] = (2, 6, 2, 6, 16, 8, 24, 32)

    list: int = 0
    opcode: int = 1
    ver: int = 0
    return_code: int = 1
    message_id: int = 0
    ri_generation: int = 0
    job_id: int = 0
    modified_length: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _RSP.pack_into(buf, offset, (self.list << 6) | self.opcode,
                       (self.ver << 6) | self.return_code, self.message_id,
                       (self.ri_generation << 24) | self.job_id, self.modified_length)
        return offset + 12

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesResponse:
        need(cls.NAME, buf, offset, 12)
        b0, b1, mid, w4, ml = _RSP.unpack_from(buf, offset)
        return cls._trusted(
            b0 >> 6, b0 & 0x3F, b1 >> 6, b1 & 0x3F, mid, w4 >> 24, w4 & 0xFFFFFF, ml)


@dataclass(slots=True)
class SesResponseData(Header):
    """Response with data (20 B + data)."""

    NAME: ClassVar[str] = "UET SES response with data"
    SIZE: ClassVar[int] = 20
    WIDTHS: ClassVar[tuple[int, ...]] = (2, 6, 2, 6, 16, 8, 24, 16, 2, 14, 32, 32)

    list: int = 0
    opcode: int = 2
    ver: int = 0
    return_code: int = 1
    message_id: int = 0
    rsvd0: int = 0
    job_id: int = 0
    read_req_message_id: int = 0
    rsvd1: int = 0
    payload_length: int = 0
    modified_length: int = 0
    message_offset: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _RSP_DATA.pack_into(buf, offset, (self.list << 6) | self.opcode,
                            (self.ver << 6) | self.return_code, self.message_id,
                            (self.rsvd0 << 24) | self.job_id, self.read_req_message_id,
                            (self.rsvd1 << 14) | self.payload_length, self.modified_length,
                            self.message_offset)
        return offset + 20

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesResponseData:
        need(cls.NAME, buf, offset, 20)
        b0, b1, mid, w4, rmid, pl, ml, mo = _RSP_DATA.unpack_from(buf, offset)
        return cls._trusted(
            b0 >> 6, b0 & 0x3F, b1 >> 6, b1 & 0x3F, mid, w4 >> 24, w4 & 0xFFFFFF, rmid,
                   pl >> 14, pl & 0x3FFF, ml, mo)


@dataclass(slots=True)
class SesSmallResponseData(Header):
    """Small response with data, 4 B (W's layout, the default)."""

    NAME: ClassVar[str] = "UET SES small response with data"
    SIZE: ClassVar[int] = 4
    WIDTHS: ClassVar[tuple[int, ...]] = (2, 6, 2, 6, 2, 14)

    list: int = 0
    opcode: int = 2
    ver: int = 0
    return_code: int = 1
    rsvd0: int = 0
    payload_length: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _RSP_SMALL.pack_into(buf, offset, (self.list << 6) | self.opcode,
                             (self.ver << 6) | self.return_code,
                             (self.rsvd0 << 14) | self.payload_length)
        return offset + 4

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesSmallResponseData:
        need(cls.NAME, buf, offset, 4)
        b0, b1, pl = _RSP_SMALL.unpack_from(buf, offset)
        return cls._trusted(b0 >> 6, b0 & 0x3F, b1 >> 6, b1 & 0x3F, pl >> 14, pl & 0x3FFF)


@dataclass(slots=True)
class SesSmallResponseData12(Header):
    """Small response with data, 12-byte variant (setting ``small_rsp_data_size=12``)."""

    NAME: ClassVar[str] = "UET SES small response with data (12 B)"
    SIZE: ClassVar[int] = 12
    WIDTHS: ClassVar[tuple[int, ...]] = (2, 6, 2, 6, 2, 14, 8, 24, 32)

    list: int = 0
    opcode: int = 2
    ver: int = 0
    return_code: int = 1
    rsvd0: int = 0
    payload_length: int = 0
    rsvd1: int = 0
    job_id: int = 0
    original_request_psn: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _RSP_SMALL12.pack_into(buf, offset, (self.list << 6) | self.opcode,
                               (self.ver << 6) | self.return_code,
                               (self.rsvd0 << 14) | self.payload_length,
                               (self.rsvd1 << 24) | self.job_id, self.original_request_psn)
        return offset + 12

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesSmallResponseData12:
        need(cls.NAME, buf, offset, 12)
        b0, b1, pl, w4, psn = _RSP_SMALL12.unpack_from(buf, offset)
        return cls._trusted(b0 >> 6, b0 & 0x3F, b1 >> 6, b1 & 0x3F, pl >> 14, pl & 0x3FFF, w4 >> 24,
                   w4 & 0xFFFFFF, psn)


# --------------------------------------------------------------------------
# Extension headers
# --------------------------------------------------------------------------

@dataclass(slots=True)
class SesAtomic(Header):
    """Atomic extension header (4 B)."""

    NAME: ClassVar[str] = "UET SES atomic ext"
    SIZE: ClassVar[int] = 4
    WIDTHS: ClassVar[tuple[int, ...]] = (8, 8, 8, 8)

    amo_opcode: int = 0
    datatype: int = 0
    sem_ctl: int = 0
    rsvd: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _ATOMIC.pack_into(buf, offset, self.amo_opcode, self.datatype, self.sem_ctl, self.rsvd)
        return offset + 4

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesAtomic:
        need(cls.NAME, buf, offset, 4)
        return cls._trusted(*_ATOMIC.unpack_from(buf, offset))


@dataclass(slots=True)
class SesCompareSwap(Header):
    """Compare-and-swap extension header (36 B): 128-bit compare and swap operands."""

    NAME: ClassVar[str] = "UET SES compare-and-swap ext"
    SIZE: ClassVar[int] = 36
    WIDTHS: ClassVar[tuple[int, ...]] = (8, 8, 8, 8, 128, 128)

    amo_opcode: int = 0x0D
    datatype: int = 0
    sem_ctl: int = 0
    rsvd: int = 0
    compare: int = 0
    swap: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _CAS.pack_into(buf, offset, self.amo_opcode, self.datatype, self.sem_ctl, self.rsvd,
                       self.compare >> 64, self.compare & _M64, self.swap >> 64,
                       self.swap & _M64)
        return offset + 36

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesCompareSwap:
        need(cls.NAME, buf, offset, 36)
        op, dt, sc, r, ch, cl, sh, sl = _CAS.unpack_from(buf, offset)
        return cls._trusted(op, dt, sc, r, (ch << 64) | cl, (sh << 64) | sl)


@dataclass(slots=True)
class SesRendezvous(Header):
    """Rendezvous extension header (24 B)."""

    NAME: ClassVar[str] = "UET SES rendezvous ext"
    SIZE: ClassVar[int] = 24
    WIDTHS: ClassVar[tuple[int, ...]] = (32, 2, 14, 4, 12, 64, 64)

    eager_length: int = 0
    rsvd0: int = 0
    read_pid_on_fep: int = 0
    rsvd1: int = 0
    read_resource_index: int = 0
    read_offset: int = 0
    read_match_bits: int = 0

    def pack_into(self, buf: WBuf, offset: int = 0) -> int:
        _RDV.pack_into(buf, offset, self.eager_length, (self.rsvd0 << 14) | self.read_pid_on_fep,
                       (self.rsvd1 << 12) | self.read_resource_index, self.read_offset,
                       self.read_match_bits)
        return offset + 24

    @classmethod
    def decode(cls, buf: Buf, offset: int = 0) -> SesRendezvous:
        need(cls.NAME, buf, offset, 24)
        el, p, r, ro, mb = _RDV.unpack_from(buf, offset)
        return cls._trusted(el, p >> 14, p & 0x3FFF, r >> 12, r & 0xFFF, ro, mb)


#: class name -> class for SES and extension headers (names from uet_defs)
SES_CLASSES: dict[str, type[Header]] = {c.__name__: c for c in (
    SesStandardRequest, SesStandardRequestSom, SesSmallRequest, SesMediumRequest, SesResponse,
    SesResponseData, SesSmallResponseData, SesSmallResponseData12, SesAtomic, SesCompareSwap,
    SesRendezvous,
)}

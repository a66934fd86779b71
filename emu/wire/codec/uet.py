# SPDX-License-Identifier: GPL-2.0-only
"""struct codecs for whole UET packets: entropy, TSS, PDS, SES, extension header, payload.

The header classes live in :mod:`emu.wire.codec.uet_pds` and
:mod:`emu.wire.codec.uet_ses` (re-exported here); each mirrors the scapy
layer of the same name in :mod:`emu.wire.uet`. This module walks a packet:

    [entropy (native IP)] · TSS → stop (ciphertext)
                          | PDS · [SES by next_hdr] · [ext by opcode] · payload

Which class decodes which bytes is decided by :mod:`emu.wire.uet_defs`, the
same functions the scapy layers use. Each header is one ``struct`` call.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.wire.codec._base import Header
from emu.wire.codec.uet_pds import (
    PDS_CLASSES,
    PdsAck,
    PdsAckCc,
    PdsAckCcCredit,
    PdsAckCcNscc,
    PdsAckCcx,
    PdsCcRequest,
    PdsCcRequestSyn,
    PdsControl,
    PdsControlSyn,
    PdsNack,
    PdsNackCcx,
    PdsRequest,
    PdsRequestSyn,
    PdsRudi,
    PdsUud,
    UetEntropy,
    UetTss,
    UetTssSsi,
    decode_pds,
)
from emu.wire.codec.uet_ses import (
    SES_CLASSES,
    SesAtomic,
    SesCompareSwap,
    SesMediumRequest,
    SesRendezvous,
    SesResponse,
    SesResponseData,
    SesSmallRequest,
    SesSmallResponseData,
    SesSmallResponseData12,
    SesStandardRequest,
    SesStandardRequestSom,
)
from emu.wire.errors import DecodeError, need
from emu.wire.uet_defs import PDS_TYPES, UET_UDP_PORT, ext_layout, ses_layout

__all__ = [
    "UET_UDP_PORT", "HEADER_CLASSES", "UetPacket", "decode_packet", "encode_packet", "decode_pds",
    "UetEntropy", "UetTss", "UetTssSsi", "PdsRequest", "PdsRequestSyn", "PdsCcRequest",
    "PdsCcRequestSyn", "PdsRudi", "PdsUud", "PdsAck", "PdsAckCc", "PdsAckCcNscc",
    "PdsAckCcCredit", "PdsAckCcx", "PdsNack", "PdsNackCcx", "PdsControl", "PdsControlSyn",
    "SesStandardRequest", "SesStandardRequestSom", "SesSmallRequest", "SesMediumRequest",
    "SesResponse", "SesResponseData", "SesSmallResponseData", "SesSmallResponseData12",
    "SesAtomic", "SesCompareSwap", "SesRendezvous",
]

#: class name -> codec class, every UET header (the same names as emu.wire.uet.LAYERS)
HEADER_CLASSES: dict[str, type[Header]] = {
    "UetEntropy": UetEntropy, **PDS_CLASSES, **SES_CLASSES,
}

_CP_TYPE = 11
_MAX_NEXT_HDR = 6
_Buf = bytes | bytearray | memoryview


@dataclass(slots=True)
class UetPacket:
    """A decoded UET packet (UDP payload, or IP payload in native-IP mode).

    ``pds`` is None when a TSS header is present (``tss`` set; everything
    after it, ``payload``, is ciphertext + ICV). ``ses`` / ``ext`` are None when
    absent. ``payload`` is a memoryview into the decoded buffer (no copy); in
    native-IP mode it includes R's CRC32C trailer, if the sender adds one.
    """

    pds: Header | None
    ses: Header | None = None
    ext: Header | None = None
    payload: bytes | memoryview = b""
    entropy: UetEntropy | None = None
    tss: UetTss | UetTssSsi | None = None

    @property
    def headers(self) -> list[Header]:
        """The headers present, in wire order."""
        return [h for h in (self.entropy, self.tss, self.pds, self.ses, self.ext) if h is not None]

    def encode(self) -> bytearray:
        """The packet's bytes (see :func:`encode_packet`)."""
        return encode_packet(self.pds, self.ses, self.ext, self.payload, entropy=self.entropy,
                             tss=self.tss)


def decode_packet(data: _Buf, *, native_ip: bool = False) -> UetPacket:
    """Decode a UET packet: [entropy] then TSS (stop) or PDS, SES, extension header, payload.

    ``native_ip``: the buffer is an IP payload starting with the entropy header
    (otherwise a UDP payload on port 4793). Raises DecodeError on truncation of
    any header, an unknown PDS type, or an unknown next_hdr (7-15); the message
    names the header and its offset.
    """
    mv = data if isinstance(data, memoryview) else memoryview(data)
    off = 0
    entropy = None
    if native_ip:
        entropy = UetEntropy.decode(mv, 0)
        off = 4
    need("UET PDS", mv, off, 2)
    b0 = mv[off]
    if b0 >> 3 == 1:
        tss = (UetTssSsi if b0 & 0x04 else UetTss).decode(mv, off)
        return UetPacket(None, None, None, mv[off + tss.SIZE:], entropy, tss)
    pds = decode_pds(mv, off)
    pds_off = off
    off += pds.SIZE
    if b0 >> 3 == _CP_TYPE:
        return UetPacket(pds, None, None, mv[off:], entropy)
    nh = (mv[pds_off + 1] >> 7) | ((b0 & 0x07) << 1)
    if nh == 0:
        return UetPacket(pds, None, None, mv[off:], entropy)
    if nh > _MAX_NEXT_HDR:
        raise DecodeError(f"UET PDS {PDS_TYPES[b0 >> 3]}", pds_off, f"unknown next_hdr {nh}")
    name = ses_layout(nh, mv, off)
    ses_cls = SES_CLASSES[name]  # type: ignore[index]
    ses = ses_cls.decode(mv, off)  # type: ignore[attr-defined]
    ext = None
    ext_name = ext_layout(name, ses.opcode, mv, off + ses_cls.SIZE)  # type: ignore[arg-type]
    off += ses_cls.SIZE
    if ext_name is not None:
        ext_cls = SES_CLASSES[ext_name]
        ext = ext_cls.decode(mv, off)  # type: ignore[attr-defined]
        off += ext_cls.SIZE
    return UetPacket(pds, ses, ext, mv[off:], entropy)


def encode_packet(pds: Header | None, ses: Header | None = None, ext: Header | None = None,
                  payload: _Buf = b"", *, entropy: UetEntropy | None = None,
                  tss: UetTss | UetTssSsi | None = None) -> bytearray:
    """Build a packet from its headers, in wire order: entropy, TSS, PDS, SES, ext, payload.

    No consistency checks (next_hdr, opcode, SYN): the caller builds what it
    means, as scapy does; the test-suite checks the decoder reads it back.
    With ``tss``, ``pds`` is normally None and ``payload`` the ciphertext.
    """
    hdrs = [h for h in (entropy, tss, pds, ses, ext) if h is not None]
    size = sum(h.SIZE for h in hdrs)
    buf = bytearray(size + len(payload))
    off = 0
    for h in hdrs:
        off = h.pack_into(buf, off)
    buf[off:] = payload
    return buf

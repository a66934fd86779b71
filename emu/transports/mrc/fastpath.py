# SPDX-License-Identifier: GPL-2.0-only
"""MRC's bulk packets in one ``struct`` call each way: WRITE data and SACKs.

Why: a WRITE is almost all data packets (BTH, METH, RETH, a PMTU of payload), each
answered by a SACK (BTH, SETH, CC_STATE). Built through the codec's header classes
(a range check per field: 16 for a BTH, 16 for a SETH) and read through the generic
:func:`~emu.wire.codec.roce.decode_packet` (a header chain to look up, a length check
and an object per header), the four steps cost more than everything else MRC's
engines do per packet (measured: ~17 of ~70 µs per data packet, both ends together;
``bench-mrc --part engine``). Here each is one precompiled :class:`struct.Struct`
over all of a packet's headers, as UET's ``fastpath`` does.

What the fields may hold is checked where they are made, not per packet: the peer's
QPN once per QP (:func:`check_qp`), a message's RETH and immediate once per message
(:func:`check_message`), the SACK's window once per window (:func:`check_mpr`) — each
by building the codec's own header, so its range rule stays the one rule; PSNs, MSNs
and offsets are masked or clamped where they are computed.

The decoders read the same fields :func:`decode_packet` would and return None for
anything else — a WRITE with a TSETH, a short or padded-out datagram, any other
opcode — which then takes the general decoder, so nothing off the fast path changes
and every error is still the general path's. The layouts are the codec's
(``emu.wire.codec.roce`` / ``emu.wire.codec.mrc``); ``tests/transports/mrc/test_fastpath.py``
holds the two against each other.
"""

from __future__ import annotations

import struct

from emu.wire.codec.mrc import (
    MPR_UNIT,
    MRC_RELIABILITY_SACK,
    MRC_WRITE_FIRST,
    MRC_WRITE_LAST,
    MRC_WRITE_LAST_IMM,
    MRC_WRITE_MIDDLE,
    MRC_WRITE_ONLY,
    MRC_WRITE_ONLY_IMM,
    SETH,
)
from emu.wire.codec.roce import BTH, ICRC_SIZE, RETH, ImmDt

#: BTH + METH + RETH (32 B); with ImmDt (36 B)
_DATA = struct.Struct("!BBHII" "HH" "QII")
_DATA_IMM = struct.Struct("!BBHII" "HH" "QII" "I")
#: BTH + SETH + CC_STATE (48 B)
_SACK = struct.Struct("!BBHII" "HhIHHIBBhQ" "HHI")
_U32 = struct.Struct("!I")
DATA_HEAD, DATA_IMM_HEAD = _DATA.size, _DATA_IMM.size
SACK_SIZE = _SACK.size + ICRC_SIZE
#: a BTH's P_Key as emu sends it (the codec's default)
_PKEY = 0xFFFF
_TS_BIT = 1 << 28
_PLAIN = frozenset({MRC_WRITE_FIRST, MRC_WRITE_MIDDLE, MRC_WRITE_LAST, MRC_WRITE_ONLY})
_IMM = frozenset({MRC_WRITE_LAST_IMM, MRC_WRITE_ONLY_IMM})
_M24 = 0xFFFFFF


# -- the checks, once (the codec's own) ------------------------------------------------

def check_qp(peer_qpn: int) -> None:
    """Raise ValueError (the codec's ``FieldRangeError``) if ``peer_qpn`` does not fit a
    BTH's DestQP: what every packet to the peer carries."""
    BTH(dqpn=peer_qpn)


def check_message(remote_addr: int, rkey: int, length: int, imm: int | None) -> None:
    """Raise ValueError if a WRITE's RETH (its first packet's) or its immediate does not
    fit the wire. (A later packet's address past 2^64 still fails where it is packed.)"""
    RETH(va=remote_addr, rkey=rkey, dmalen=length)
    if imm is not None:
        ImmDt(imm=imm)


def check_mpr(mpr: int) -> None:
    """Raise ValueError if a receive window of ``mpr`` packets does not fit SETH.mpr."""
    SETH(mpr=mpr // MPR_UNIT)


# -- building ----------------------------------------------------------------------

def data(op: int, dqpn: int, psn: int, ackreq: int, rtx: int, msn: int, va: int, rkey: int,
         dmalen: int, imm: int | None, payload: memoryview | bytes) -> bytearray:
    """A WRITE packet: ``encode_packet(BTH(opcode=op, dqpn, psn, ackreq, rtx, padcount),
    [METH(msn=msn), RETH(va, rkey, dmalen)] (+ ImmDt(imm)), payload)`` with its pad and a
    zero ICRC (the daemon seals it)."""
    n = len(payload)
    pad = -n & 3
    head = DATA_HEAD if imm is None else DATA_IMM_HEAD
    buf = bytearray(head + n + pad + ICRC_SIZE)
    w3 = (ackreq << 31) | (rtx << 29) | psn
    if imm is None:
        _DATA.pack_into(buf, 0, op, pad << 4, _PKEY, dqpn, w3, 0, msn, va, rkey, dmalen)
    else:
        _DATA_IMM.pack_into(buf, 0, op, pad << 4, _PKEY, dqpn, w3, 0, msn, va, rkey, dmalen,
                            imm)
    buf[head:head + n] = payload
    return buf


def sack(dqpn: int, cack: int, m: int, pr: int, ack_psn_offset: int, ev: int, spdcid: int,
         dpdcid: int, cc_flags: int, cc_type: int, mpr: int, sack_offset: int, bitmap: int,
         ts: int, ooo: int, rcvd: int) -> bytearray:
    """A RELIABILITY_SACK: ``encode_packet(BTH(opcode=SACK, dqpn, psn=cack), [SETH(m, pr,
    ack_psn_offset, ev, spdcid, dpdcid, cack_psn=cack, cc_type, cc_flags, mpr, sack_offset,
    sack_bitmap), CC_STATE(tx_timestamp=ts, ooo_count=ooo, rcvd_bytes=rcvd)])``."""
    buf = bytearray(SACK_SIZE)
    _SACK.pack_into(buf, 0, MRC_RELIABILITY_SACK, 0, _PKEY, dqpn, cack, (m << 5) | (pr << 1),
                    ack_psn_offset, ev, spdcid, dpdcid, cack, (cc_type << 4) | cc_flags, mpr,
                    sack_offset, bitmap, ts, ooo, rcvd)
    return buf


# -- reading -------------------------------------------------------------------------

def read_data(buf: bytes | bytearray | memoryview
              ) -> tuple[int, int, int, int, int, int, int, int, int | None, memoryview] | None:
    """A WRITE without TSETH: ``(opcode, dqpn, psn, ackreq, msn, va, rkey, dmalen, imm,
    payload)`` as :func:`decode_packet` reads them (``imm`` None but for the _IMM
    opcodes; ``payload`` a view without pad and ICRC); None for anything else."""
    n = len(buf)
    if n < DATA_HEAD + ICRC_SIZE:
        return None
    op = buf[0]
    if op in _PLAIN:
        head, imm = DATA_HEAD, None
    elif op in _IMM:
        head = DATA_IMM_HEAD
        if n < head + ICRC_SIZE:
            return None
        (imm,) = _U32.unpack_from(buf, DATA_HEAD)
    else:
        return None
    _, b1, _, w2, w3, _, msn, va, rkey, dmalen = _DATA.unpack_from(buf, 0)
    end = n - ICRC_SIZE - ((b1 >> 4) & 3)
    if w3 & _TS_BIT or end < head:
        return None
    return (op, w2 & _M24, w3 & _M24, w3 >> 31, msn, va, rkey, dmalen, imm,
            memoryview(buf)[head:end])


def read_sack(buf: bytes | bytearray | memoryview
              ) -> tuple[int, int, int, int, int, int, int, int, int, int] | None:
    """A RELIABILITY_SACK: ``(dqpn, m, pr, ack_psn_offset, ev, cack_psn, cc_flags, mpr,
    sack_offset, sack_bitmap)`` as :func:`decode_packet` reads them; None for anything
    else."""
    n = len(buf)
    if n < SACK_SIZE or buf[0] != MRC_RELIABILITY_SACK:
        return None
    (_, b1, _, w2, _, fl, apo, ev, _, _, w, cc, mpr, so, bm, _, _, _) = _SACK.unpack_from(buf)
    if n - SACK_SIZE < (b1 >> 4) & 3:
        return None
    return w2 & _M24, (fl >> 5) & 3, (fl >> 1) & 1, apo, ev, w & _M24, cc & 0xF, mpr, so, bm

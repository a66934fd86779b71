# SPDX-License-Identifier: GPL-2.0-only
"""MRC wire format for emu-ref, from ``specs/mrc.md`` with ``struct`` only.

An MRC packet is a RoCEv2 packet with MRC's own opcodes (0xC6–0xDE) and
extension headers: IP / UDP (dport 4971 here: the reconstructions' port) /
BTH / MRC headers / payload / pad / ICRC. This module builds and parses the
part after UDP, and reuses :func:`emuref.roce_wire.icrc` for the ICRC (the
spec page: "ICRC (4 B, RoCEv2 rules)"), computed over the *sender's* UDP
source port, which in the UDP EV format is the packet's entropy value (EV).

**Provisional.** The MRC 1.0 text is not public; the header layouts are the
spec page's reading of two third-party reconstructions. Every layout below is
one ``struct`` format plus one pair of pack/unpack lines, named after the
page's table, so a correction touches one place; :data:`WIRE_VERSION` names
the revision this module implements.

Where the page leaves a layout open (ERTH's ``vendor_info`` offset, EETH's
contents) this follows emu's choice, because the only point of an EETH here is
that emu can read it; both are marked below.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from emuref.roce_wire import icrc

#: revision of the layouts in this module (the spec page's provisional tables)
WIRE_VERSION = 1
UDP_PORT = 4971
PSN_MASK = 0xFFFFFF

# Opcodes (spec: Opcodes; BTH opcode byte, manufacturer-specific range)
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = \
    range(0xC6, 0xCC)
TRANSPORT_ACK = 0xD1
ENDPOINT_REQUEST, ENDPOINT_RESPONSE = 0xD8, 0xD9
RELIABILITY_SACK, RELIABILITY_NACK, RELIABILITY_PROBE = 0xDC, 0xDD, 0xDE
WRITE_OPS = frozenset(range(0xC6, 0xCC))
IMM_OPS = frozenset({WRITE_LAST_IMM, WRITE_ONLY_IMM})
#: opcodes that start / end a message (a packet may be both: *_ONLY)
FIRST_OPS = frozenset({WRITE_FIRST, WRITE_ONLY, WRITE_ONLY_IMM})
LAST_OPS = frozenset({WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM})
KNOWN_OPS = WRITE_OPS | {TRANSPORT_ACK, ENDPOINT_REQUEST, ENDPOINT_RESPONSE,
                         RELIABILITY_SACK, RELIABILITY_NACK, RELIABILITY_PROBE}

# NETH reasons (spec: "same codes as UET")
NACK_TRIMMED, NACK_TRIMMED_LASTHOP = 0x01, 0x02
NACK_NO_BITMAP, NACK_NO_PKT_BUFFER, NACK_NO_RESOURCE = 0x06, 0x07, 0x0A
NACK_PSN_OOR_WINDOW, NACK_UNEXP_EVENT = 0x0B, 0x19

# SETH M field (spec: EV skip hint)
M_NONE, M_SKIP_ONCE, M_ALWAYS_SKIP = 0, 1, 2
#: SETH.mpr unit (PSNs), CC_STATE.rcvd_bytes unit (bytes)
MPR_UNIT = 128
RCVD_BYTES_UNIT = 256
#: TSETH/PETH/ERTH timestamp format code (16-bit, 128 ns units)
TS_FTYPE = 1

# AETH (TRANSPORT_ACK): syndrome kind in bits 6:5 as RoCEv2 (0 ACK, 1 RNR NAK, 3 NAK)
ACK_CREDIT_INVALID = 0x1F  # an ACK: "no credit information"
NAK_REMOTE_ACCESS = 0x62  # a NAK: remote access error

# ERTH ops; BTH.DestQP of endpoint operations (the NIC, not a QP)
ERTH_PORT_STATUS_UPDATE, ERTH_EV_PROBE = 0, 1
ENDPOINT_QPN = 2
# EETH status (emu-defined: the contents of EETH are not public)
EETH_OK, EETH_UNSUPPORTED_OP = 0, 1

_BTH = struct.Struct("!BBHII")   # opcode, SE|M|Pad|TVer, P_Key, F|B|rsvd|DestQP, A|r|RTX|TS|r|PSN
_METH = struct.Struct("!HH")     # RQMSN, MSN
_TSETH = struct.Struct("!HH")    # tx_timestamp, tsr:1|rsvd:11|ftype:4
_RETH = struct.Struct("!QII")    # VA, R_Key, DMA length
_IMM = struct.Struct("!I")
_AETH = struct.Struct("!I")      # syndrome:8 | MSN:24
# SETH: flags u16, ack_psn_offset s16, EV u32, spdcid u16, dpdcid u16, rsvd:8|cack:24,
#       cc_type:4|cc_flags:4, mpr u8, sack_offset s16, bitmap u64
_SETH = struct.Struct("!HhIHHIBBhQ")
_CC = struct.Struct("!HHI")      # tx_timestamp, rsvd:1|ooo:15, r_c:1|pen:7|rcvd_bytes:24
# NETH: flags u16, reason u8, vendor u8, EV u32, spdcid u16, dpdcid u16, rsvd:8|psn:24,
#       cc_type:4|cc_flags:4, rsvd u8, tx_timestamp u16
_NETH = struct.Struct("!HBBIHHIBBH")
# PETH: rsvd:24|vendor:8, probe_id u16, rsvd u16, spdcid u16, dpdcid u16, ts u16, tsr|ftype
_PETH = struct.Struct("!IHHHHHH")
# ERTH: rsvd u8, rsvd:6|op:2, rsvd u8, vendor u8 (emu: byte 3, as in NETH/PETH),
#       port_status_mask u32, rsvd u32, ts u16, tsr|ftype u16
_ERTH = struct.Struct("!BBBBIIHH")
# EETH (emu-defined, 36 B): rsvd u8, rsvd:6|op:2, status u8, vendor u8, request_id u16,
#       num_ports u8, rsvd u8, port_status_mask u32, EV u32, ts u16, rsvd u16, states u128
_EETH = struct.Struct("!BBBBHBBIIHHQQ")

SIZES = {"BTH": 12, "METH": 4, "TSETH": 4, "RETH": 16, "ImmDt": 4, "AETH": 4, "SETH": 28,
         "CC_STATE": 8, "NETH": 20, "PETH": 16, "ERTH": 16, "EETH": 36, "ICRC": 4}


class WireError(ValueError):
    """Bytes that are not an MRC packet we can read (one line, names the problem);
    ``kind`` sorts them for the counters: ``short``, ``icrc``, ``opcode``, ``cut``."""

    def __init__(self, msg: str, kind: str = "cut") -> None:
        super().__init__(msg)
        self.kind = kind


@dataclass
class Seth:
    """Selective ACK: cumulative PSN (inclusive) + 64-bit bitmap from ``cack + sack_offset``."""

    ev: int = 0
    cack_psn: int = 0
    sack_offset: int = 1
    sack_bitmap: int = 0
    ack_psn_offset: int = 0
    m: int = M_NONE
    pr: bool = False
    spdcid: int = 0
    dpdcid: int = 0
    cc_type: int = 0
    cc_flags: int = 0
    mpr: int = 0  # units of MPR_UNIT PSNs
    # CC_STATE, which always follows SETH in a SACK
    tx_timestamp: int = 0
    ooo_count: int = 0
    r_c: int = 0
    rcv_cwnd_pen: int = 0
    rcvd_bytes: int = 0  # units of RCVD_BYTES_UNIT

    def psns(self) -> list[int]:
        """The 24-bit PSNs the bitmap acknowledges (bit i = cack + sack_offset + i)."""
        base = self.cack_psn + self.sack_offset
        return [(base + i) & PSN_MASK for i in range(64) if self.sack_bitmap >> i & 1]


@dataclass
class Neth:
    """Reliability NACK: why, which PSN, and the EV it came on."""

    reason: int = NACK_TRIMMED
    nack_psn: int = 0
    ev: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    vendor_info: int = 0
    flags: int = 0
    cc_type: int = 0
    cc_flags: int = 0
    tx_timestamp: int = 0


@dataclass
class Peth:
    """Reliability probe (consumes no PSN; answered by a SACK with PR set)."""

    probe_id: int = 0
    spdcid: int = 0
    dpdcid: int = 0
    vendor_info: int = 0
    tx_timestamp: int = 0
    tsr: int = 0
    ftype: int = TS_FTYPE


@dataclass
class Erth:
    """Endpoint request (BTH.DestQP 2, BTH.PSN[15:0] = request id)."""

    op: int = ERTH_PORT_STATUS_UPDATE
    vendor_info: int = 0
    port_status_mask: int = 0
    tx_timestamp: int = 0
    tsr: int = 0
    ftype: int = TS_FTYPE


@dataclass
class Eeth:
    """Endpoint response (emu's layout: the spec page says the contents are not public)."""

    op: int = 0
    status: int = EETH_OK
    vendor_info: int = 0
    request_id: int = 0
    num_ports: int = 0
    port_status_mask: int = 0
    ev: int = 0
    tx_timestamp: int = 0
    port_states: int = 0  # 4 bits per port, port i in bits 4i+3..4i


@dataclass
class Packet:
    """One decoded MRC packet (after UDP; ICRC checked and stripped). Which of the header
    fields mean anything depends on the opcode (spec: Opcodes table)."""

    opcode: int
    dqpn: int
    psn: int
    ackreq: bool = False
    rtx: bool = False
    ts: bool = False
    se: bool = False
    pkey: int = 0xFFFF
    fecn: bool = False
    becn: bool = False
    # METH (writes)
    rqmsn: int = 0
    msn: int = 0
    # TSETH (writes with BTH.TS)
    tx_timestamp: int = 0
    tsr: int = 0
    # RETH (every write packet: this packet's VA, the message's length)
    va: int = 0
    rkey: int = 0
    dma_len: int = 0
    imm: int | None = None
    # AETH (TRANSPORT_ACK)
    syndrome: int = 0
    aeth_msn: int = 0
    seth: Seth | None = None
    neth: Neth | None = None
    peth: Peth | None = None
    erth: Erth | None = None
    eeth: Eeth | None = None
    payload: bytes = b""

    @property
    def is_write(self) -> bool:
        return self.opcode in WRITE_OPS


def header_length(p: Packet) -> int:
    """Bytes from the BTH to the payload for ``p``'s opcode (and TS bit)."""
    op = p.opcode
    if op in WRITE_OPS:
        return 12 + 4 + (4 if p.ts else 0) + 16 + (4 if op in IMM_OPS else 0)
    return 12 + {TRANSPORT_ACK: 4, RELIABILITY_SACK: 36, RELIABILITY_NACK: 20,
                 RELIABILITY_PROBE: 16, ENDPOINT_REQUEST: 16, ENDPOINT_RESPONSE: 36}.get(op, 0)


def expected_payload(opcode: int, dma_len: int, pmtu: int) -> int:
    """The payload length a whole write packet carries, from its opcode and its RETH's
    message length: every packet but the last is full (``pmtu``), so the last holds the
    remainder. A shorter payload means a switch trimmed the packet."""
    if opcode in (WRITE_ONLY, WRITE_ONLY_IMM):
        return dma_len
    if opcode in (WRITE_FIRST, WRITE_MIDDLE):
        return pmtu
    return (dma_len - 1) % pmtu + 1 if dma_len > 0 else 0


def encode(p: Packet, src: str, dst: str, sport: int, dport: int = UDP_PORT) -> bytes:
    """The UDP payload for ``p``: BTH, the opcode's headers, payload, pad and ICRC (over
    the IP/UDP headers the kernel writes from ``src``:``sport`` to ``dst``:``dport``)."""
    op = p.opcode
    pad = (-len(p.payload)) % 4
    b1 = (int(p.se) << 7) | (pad << 4)  # MigReq 0, TVer 0
    w2 = (int(p.fecn) << 31) | (int(p.becn) << 30) | (p.dqpn & 0xFFFFFF)
    w3 = (int(p.ackreq) << 31) | (int(p.rtx) << 29) | (int(p.ts) << 28) | (p.psn & PSN_MASK)
    out = bytearray(_BTH.pack(op, b1, p.pkey, w2, w3))
    if op in WRITE_OPS:
        out += _METH.pack(p.rqmsn & 0xFFFF, p.msn & 0xFFFF)
        if p.ts:
            out += _TSETH.pack(p.tx_timestamp & 0xFFFF, (p.tsr << 15) | TS_FTYPE)
        out += _RETH.pack(p.va, p.rkey, p.dma_len)
        if op in IMM_OPS:
            out += _IMM.pack(p.imm or 0)
    elif op == TRANSPORT_ACK:
        out += _AETH.pack((p.syndrome << 24) | (p.aeth_msn & 0xFFFFFF))
    elif op == RELIABILITY_SACK:
        s = p.seth or Seth()
        out += _SETH.pack((s.m << 5) | (int(s.pr) << 1), s.ack_psn_offset, s.ev,
                          s.spdcid, s.dpdcid, s.cack_psn & PSN_MASK,
                          (s.cc_type << 4) | s.cc_flags, s.mpr, s.sack_offset, s.sack_bitmap)
        out += _CC.pack(s.tx_timestamp, s.ooo_count & 0x7FFF,
                        (s.r_c << 31) | (s.rcv_cwnd_pen << 24) | (s.rcvd_bytes & 0xFFFFFF))
    elif op == RELIABILITY_NACK:
        n = p.neth or Neth()
        out += _NETH.pack(n.flags, n.reason, n.vendor_info, n.ev, n.spdcid, n.dpdcid,
                          n.nack_psn & PSN_MASK, (n.cc_type << 4) | n.cc_flags, 0,
                          n.tx_timestamp)
    elif op == RELIABILITY_PROBE:
        r = p.peth or Peth()
        out += _PETH.pack(r.vendor_info, r.probe_id, 0, r.spdcid, r.dpdcid, r.tx_timestamp,
                          (r.tsr << 15) | r.ftype)
    elif op == ENDPOINT_REQUEST:
        e = p.erth or Erth()
        out += _ERTH.pack(0, e.op & 3, 0, e.vendor_info, e.port_status_mask, 0,
                          e.tx_timestamp, (e.tsr << 15) | e.ftype)
    elif op == ENDPOINT_RESPONSE:
        r2 = p.eeth or Eeth()
        out += _EETH.pack(0, r2.op & 3, r2.status, r2.vendor_info, r2.request_id,
                          r2.num_ports, 0, r2.port_status_mask, r2.ev, r2.tx_timestamp, 0,
                          r2.port_states >> 64, r2.port_states & ((1 << 64) - 1))
    else:
        raise WireError(f"opcode {op:#04x} is not an MRC opcode")
    out += p.payload
    out += b"\x00" * pad
    out += icrc(src, dst, sport, dport, out)
    return bytes(out)


def decode(data: bytes, src: str, dst: str, sport: int, dport: int = UDP_PORT, *,
           verify: bool = True) -> Packet:
    """Parse one UDP payload. :class:`WireError` for short packets, a bad ICRC (unless
    ``verify`` is false: a packet the DSCP says was trimmed is read for its headers only),
    unknown opcodes, or headers cut short."""
    if len(data) < 16:
        raise WireError(f"MRC packet of {len(data)} bytes is shorter than BTH+ICRC", "short")
    body = data[:-4]
    if verify and icrc(src, dst, sport, dport, body) != data[-4:]:
        raise WireError("bad ICRC", "icrc")
    op, b1, pkey, w2, w3 = _BTH.unpack_from(body, 0)
    if op not in KNOWN_OPS:
        raise WireError(f"opcode {op:#04x} is not an MRC opcode", "opcode")
    p = Packet(op, w2 & 0xFFFFFF, w3 & PSN_MASK, ackreq=bool(w3 >> 31),
               rtx=bool(w3 >> 29 & 1), ts=bool(w3 >> 28 & 1), se=bool(b1 >> 7), pkey=pkey,
               fecn=bool(w2 >> 31), becn=bool(w2 >> 30 & 1))
    off = 12
    try:
        if op in WRITE_OPS:
            p.rqmsn, p.msn = _METH.unpack_from(body, off)
            off += 4
            if p.ts:
                p.tx_timestamp, w = _TSETH.unpack_from(body, off)
                p.tsr = w >> 15
                off += 4
            p.va, p.rkey, p.dma_len = _RETH.unpack_from(body, off)
            off += 16
            if op in IMM_OPS:
                (p.imm,) = _IMM.unpack_from(body, off)
                off += 4
        elif op == TRANSPORT_ACK:
            (a,) = _AETH.unpack_from(body, off)
            p.syndrome, p.aeth_msn = a >> 24, a & 0xFFFFFF
            off += 4
        elif op == RELIABILITY_SACK:
            fl, apo, ev, sp, dp, w, cc, mpr, so, bm = _SETH.unpack_from(body, off)
            ts, w1, w2b = _CC.unpack_from(body, off + 28)
            p.seth = Seth(ev, w & PSN_MASK, so, bm, apo, (fl >> 5) & 3, bool(fl >> 1 & 1), sp,
                          dp, cc >> 4, cc & 0xF, mpr, ts, w1 & 0x7FFF, w2b >> 31,
                          (w2b >> 24) & 0x7F, w2b & 0xFFFFFF)
            off += 36
        elif op == RELIABILITY_NACK:
            fl, reason, vi, ev, sp, dp, w, cc, _r, ts = _NETH.unpack_from(body, off)
            p.neth = Neth(reason, w & PSN_MASK, ev, sp, dp, vi, fl, cc >> 4, cc & 0xF, ts)
            off += 20
        elif op == RELIABILITY_PROBE:
            w0, pid, _r, sp, dp, ts, w = _PETH.unpack_from(body, off)
            p.peth = Peth(pid, sp, dp, w0 & 0xFF, ts, w >> 15, w & 0xF)
            off += 16
        elif op == ENDPOINT_REQUEST:
            _r0, b, _r2, vi, psm, _r3, ts, w = _ERTH.unpack_from(body, off)
            p.erth = Erth(b & 3, vi, psm, ts, w >> 15, w & 0xF)
            off += 16
        else:  # ENDPOINT_RESPONSE
            _r0, b, st, vi, rid, n, _r2, psm, ev, ts, _r3, hi, lo = _EETH.unpack_from(body, off)
            p.eeth = Eeth(b & 3, st, vi, rid, n, psm, ev, ts, (hi << 64) | lo)
            off += 36
    except struct.error:
        raise WireError(f"opcode {op:#04x}: headers cut short at byte {off}") from None
    pad = (b1 >> 4) & 3
    end = len(body) - pad
    if end < off:
        raise WireError(f"opcode {op:#04x}: pad count {pad} longer than the payload")
    p.payload = bytes(body[off:end])
    return p


def sack_bitmap(base: int, received: Callable[[int], bool]) -> int:
    """The 64-bit bitmap from ``base`` (bit i = PSN base + i) of what ``received`` says
    arrived; a helper both the tests and the QP use so the LSB-first rule lives once."""
    bm = 0
    for i in range(64):
        if received(base + i):
            bm |= 1 << i
    return bm

# SPDX-License-Identifier: GPL-2.0-only
"""UET tables, settings and header-selection rules shared by the scapy layers and the codecs.

Why a third module: the scapy layers (:mod:`emu.wire.uet`) and the struct
codecs (:mod:`emu.wire.codec.uet`) must pick the *same* header class for the
same bytes, and the codecs may not import scapy. So the choice of header is
made here once, by scapy-free functions that return a class *name*
(:func:`pds_layout`, :func:`ses_layout`, :func:`ext_layout`); each side maps
the name to its own class of that name. The two sides cannot drift.

Layouts follow ``/work/shared/specs/uet.md``; where the public sources
disagree, a setting below selects the variant and defaults to Wireshark's
upstream dissector (**W**), the layout authority. Settings are read at call
time, so change them with :func:`configure` (or by assigning the module
attribute) and both sides follow.
"""

from __future__ import annotations

from typing import Protocol

UET_UDP_PORT = 4793
#: IP protocol number of native-IP UET (R uses 253, an experimental number)
UET_IP_PROTO_DEFAULT = 253
#: DSCPs a switch writes on a packet it trimmed (uet.md: Encapsulation — "deployment-chosen",
#: so configurable: ``emu.switch`` ``trimmed_dscp``/``trimmed_lasthop``, ``emu nicd
#: --trimmed-dscp``); these are emu's defaults, defined once here for switch and NIC alike.
DSCP_TRIMMED = 30
DSCP_TRIMMED_LASTHOP = 31

# --------------------------------------------------------------------------
# Enumerations (specs/uet.md; names as in W's Info column where it has one)
# --------------------------------------------------------------------------

PDS_TYPES: dict[int, str] = {
    0: "RESERVED", 1: "TSS", 2: "RUD_REQ", 3: "ROD_REQ", 4: "RUDI_REQ", 5: "RUDI_RESP",
    6: "UUD_REQ", 7: "ACK", 8: "ACK_CC", 9: "ACK_CCX", 10: "NACK", 11: "CP", 12: "NACK_CCX",
    13: "RUD_CC_REQ", 14: "ROD_CC_REQ",
}
PDS_TYPE: dict[str, int] = {v: k for k, v in PDS_TYPES.items()}
#: wire size of each PDS header type, prologue included (TSS: 12, or 16 with SSI)
PDS_SIZES: dict[int, int] = {
    2: 12, 3: 12, 4: 8, 5: 8, 6: 4, 7: 12, 8: 32, 9: 40, 10: 16, 11: 16, 12: 32, 13: 16, 14: 16,
}

NEXT_HDRS: dict[int, str] = {
    0: "NONE", 1: "REQ_SMALL", 2: "REQ_MEDIUM", 3: "REQ_STD", 4: "RSP", 5: "RSP_DATA",
    6: "RSP_DATA_SMALL",
}
NEXT_HDR: dict[str, int] = {v: k for k, v in NEXT_HDRS.items()}

CTL_TYPES: dict[int, str] = {
    0: "NOOP", 1: "ACK_REQ", 2: "CLEAR", 3: "CLEAR_REQ", 4: "CLOSE", 5: "CLOSE_REQ",
    6: "PROBE", 7: "CREDIT", 8: "CREDIT_REQ",
}
CTL_TYPE: dict[str, int] = {v: k for k, v in CTL_TYPES.items()}

#: ACK REQ field (flags mask 0x06)
ACK_REQS: dict[int, str] = {0: "NONE", 1: "CLEAR", 2: "CLOSE", 3: "RESERVED"}
CC_TYPES: dict[int, str] = {0: "NSCC", 1: "CREDIT"}

NACK_CODES: dict[int, str] = {
    0x01: "TRIMMED", 0x02: "TRIMMED_LASTHOP", 0x03: "TRIMMED_ACK", 0x04: "NO_PDC_AVAIL",
    0x05: "NO_CCC_AVAIL", 0x06: "NO_BITMAP", 0x07: "NO_PKT_BUFFER", 0x08: "NO_GTD_DEL_AVAIL",
    0x09: "NO_SES_MSG_AVAIL", 0x0A: "NO_RESOURCE", 0x0B: "PSN_OOR_WINDOW", 0x0D: "ROD_OOO",
    0x0E: "INV_DPDCID", 0x0F: "PDC_HDR_MISMATCH", 0x10: "CLOSING", 0x11: "CLOSING_IN_ERR",
    0x12: "PKT_NOT_RCVD", 0x13: "GTD_RESP_UNAVAIL", 0x14: "ACK_WITH_DATA",
    0x15: "INVALID_SYN", 0x16: "PDC_MODE_MISMATCH", 0x17: "NEW_START_PSN",
    0x18: "RCVD_SES_PROCG", 0x19: "UNEXP_EVENT", 0x1A: "RCVR_INFER_LOSS",
    0xFD: "EXP_NACK_NORMAL", 0xFE: "EXP_NACK_ERR", 0xFF: "EXP_NACK_FATAL",
}
NACK_CODE: dict[str, int] = {v: k for k, v in NACK_CODES.items()}

SES_OPCODES: dict[int, str] = {
    0x00: "NO_OP", 0x01: "WRITE", 0x02: "READ", 0x03: "ATOMIC", 0x04: "FETCHING_ATOMIC",
    0x05: "SEND", 0x06: "RENDEZVOUS_SEND", 0x07: "DATAGRAM_SEND", 0x08: "DEFERRABLE_SEND",
    0x09: "TAGGED_SEND", 0x0A: "RENDEZVOUS_TSEND", 0x0B: "DEFERRABLE_TSEND",
    0x0C: "DEFERRABLE_RTR", 0x0D: "TSEND_ATOMIC", 0x0E: "TSEND_FETCH_ATOMIC", 0x0F: "MSG_ERROR",
}
SES_OPCODE: dict[str, int] = {v: k for k, v in SES_OPCODES.items()}

RSP_OPCODES: dict[int, str] = {
    0: "DEFAULT_RESPONSE", 1: "RESPONSE", 2: "RESPONSE_W_DATA", 3: "NO_RESPONSE",
}
RSP_OPCODE: dict[str, int] = {v: k for k, v in RSP_OPCODES.items()}

RETURN_CODES: dict[int, str] = dict(enumerate((
    "NULL", "OK", "BAD_GENERATION", "DISABLED", "DISABLED_GEN", "NO_MATCH", "UNSUPPORTED_OP",
    "UNSUPPORTED_SIZE", "AT_INVALID", "AT_PERM", "AT_ATS_ERROR", "AT_NO_TRANS",
    "AT_OUT_OF_RANGE", "HOST_POISONED", "HOST_UNSUCCESS_CMPL", "AMO_UNSUPPORTED_OP",
    "AMO_UNSUPPORTED_DT", "AMO_UNSUPPORTED_SIZE", "AMO_UNALIGNED", "AMO_FP_NAN",
    "AMO_FP_UNDERFLOW", "AMO_FP_OVERFLOW", "AMO_FP_INEXACT", "PERM_VIOLATION", "OP_VIOLATION",
    "BAD_INDEX", "BAD_PID", "BAD_JOB_ID", "BAD_MKEY", "BAD_ADDR", "CANCELLED", "UNDELIVERABLE",
    "UNCOR", "UNCOR_TRNSNT", "TOO_LONG", "INITIATOR_ERR", "DROPPED",
)))
RETURN_CODE: dict[str, int] = {v: k for k, v in RETURN_CODES.items()}

#: AMO opcodes in UET's own numbering: libfabric's ``fi_op`` with DIFF inserted
#: at 3, so FI_CSWAP (12 in libfabric) is 0x0D here — as in W.
AMO_OPCODES: dict[int, str] = dict(enumerate((
    "MIN", "MAX", "SUM", "DIFF", "PROD", "LOR", "LAND", "BOR", "BAND", "LXOR", "BXOR", "READ",
    "WRITE", "CSWAP", "CSWAP_NE", "CSWAP_LE", "CSWAP_LT", "CSWAP_GE", "CSWAP_GT", "MSWAP",
)))
AMO_OPCODE: dict[str, int] = {v: k for k, v in AMO_OPCODES.items()}
AMO_DATATYPES: dict[int, str] = dict(enumerate((
    "INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64", "UINT64", "INT128",
    "UINT128", "FLOAT", "DOUBLE", "FLOAT_COMPLEX", "DOUBLE_COMPLEX", "LONG_DOUBLE",
    "LONG_DOUBLE_COMPLEX", "BF16", "FP16",
)))
SEM_CTLS: dict[int, str] = {0: "NONE", 1: "CACHEABLE", 2: "CPU_COHERENT",
                            3: "CACHEABLE_CPU_COHERENT"}

# --------------------------------------------------------------------------
# Settings where the sources disagree (default: W)
# --------------------------------------------------------------------------

#: SYN ``pdc_info``: bit of the 16-bit word at bytes 10-11 that carries use_rsv_pdc
USE_RSV_PDC_BIT_W = 15  # W and X: the top bit of pdc_info
USE_RSV_PDC_BIT_R = 12  # R: the bottom bit of pdc_info
USE_RSV_PDC_BIT = USE_RSV_PDC_BIT_W

#: request opcodes followed by an atomic (or compare-and-swap) extension header.
#: W omits TSEND_ATOMIC (0x0D) but keeps TSEND_FETCH_ATOMIC; a tagged atomic
#: cannot say which AMO to run without the header, so we include it (W then
#: shows those 4 bytes as data; no expert error).
ATOMIC_EXT_OPCODES: frozenset[int] = frozenset({0x03, 0x04, 0x0D, 0x0E})
#: standard-request opcodes followed by the rendezvous extension header
RENDEZVOUS_OPCODES: frozenset[int] = frozenset({0x06, 0x0A})
#: AMO opcodes whose extension is the 36-byte compare-and-swap header (W: CSWAP..CSWAP_GT)
CAS_AMO_OPCODES: frozenset[int] = frozenset(range(0x0D, 0x13))
#: MSWAP (0x13) takes a mask and a value; W dissects it with the 4-byte header
MSWAP_USES_CAS = False
#: next_hdr 6 (small response with data): 4 bytes in W; 12 in another public
#: header file (adds rsvd u8, job_id u24, original_request_psn u32)
SMALL_RSP_DATA_SIZE = 4

_SETTINGS = {"use_rsv_pdc_bit": (USE_RSV_PDC_BIT_W, USE_RSV_PDC_BIT_R),
             "mswap_uses_cas": (False, True), "small_rsp_data_size": (4, 12)}


def configure(**settings: int | bool) -> dict[str, int | bool]:
    """Set layout options by lower-case name; returns the previous values (to restore).

    ``configure(use_rsv_pdc_bit=12)`` selects R's pdc_info layout,
    ``configure(small_rsp_data_size=12)`` the 12-byte small response.
    """
    old: dict[str, int | bool] = {}
    for name, value in settings.items():
        if name not in _SETTINGS:
            raise KeyError(f"unknown UET setting {name!r}; known: {sorted(_SETTINGS)}")
        if value not in _SETTINGS[name]:
            raise ValueError(f"UET setting {name} = {value!r}; allowed: {_SETTINGS[name]}")
        old[name] = globals()[name.upper()]
        globals()[name.upper()] = value
    return old


# --------------------------------------------------------------------------
# Which header follows (returns class names; both sides hold classes of these names)
# --------------------------------------------------------------------------

class _Buf(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, i: int, /) -> int: ...


#: PDS type -> (class without SYN, class with SYN); types without SYN repeat the name
_PDS_LAYOUTS: dict[int, tuple[str, str]] = {
    1: ("UetTss", "UetTssSsi"),          # the second element is chosen by SP here
    2: ("PdsRequest", "PdsRequestSyn"), 3: ("PdsRequest", "PdsRequestSyn"),
    4: ("PdsRudi", "PdsRudi"), 5: ("PdsRudi", "PdsRudi"), 6: ("PdsUud", "PdsUud"),
    7: ("PdsAck", "PdsAck"), 8: ("PdsAckCc", "PdsAckCc"), 9: ("PdsAckCcx", "PdsAckCcx"),
    10: ("PdsNack", "PdsNack"), 11: ("PdsControl", "PdsControlSyn"),
    12: ("PdsNackCcx", "PdsNackCcx"),
    13: ("PdsCcRequest", "PdsCcRequestSyn"), 14: ("PdsCcRequest", "PdsCcRequestSyn"),
}
_ACK_CC_LAYOUTS = {0: "PdsAckCcNscc", 1: "PdsAckCcCredit"}


def pds_layout(buf: _Buf, off: int = 0) -> str | None:
    """Class name of the TSS/PDS header at ``buf[off:]``; None for an unknown type or < 2 bytes.

    The type (first 5 bits) picks the layout; for requests and CP the SYN flag
    picks the view of bytes 10-11; for TSS the SP bit adds the SSI; for ACK_CC
    the cc_type nibble at byte 12 picks the cc_state layout (the generic
    raw-u64 class for unknown cc types, or when byte 12 is missing).
    """
    if len(buf) - off < 2:
        return None
    b0 = buf[off]
    pair = _PDS_LAYOUTS.get(b0 >> 3)
    if pair is None:
        return None
    t = b0 >> 3
    if t == 1:
        return pair[1] if b0 & 0x04 else pair[0]
    if t == 8:
        if len(buf) - off > 12:
            return _ACK_CC_LAYOUTS.get(buf[off + 12] >> 4, pair[0])
        return pair[0]
    return pair[1] if buf[off + 1] & 0x04 else pair[0]


_SES_LAYOUTS = {1: "SesSmallRequest", 2: "SesMediumRequest", 4: "SesResponse",
                5: "SesResponseData"}
#: SES request classes (those that may carry an extension header)
SES_REQUEST_LAYOUTS = frozenset({"SesSmallRequest", "SesMediumRequest", "SesStandardRequest",
                                 "SesStandardRequestSom"})


def ses_layout(next_hdr: int, buf: _Buf, off: int = 0) -> str | None:
    """Class name of the SES header selected by ``next_hdr``; None for none (0) or unknown (> 6).

    A standard request's SOM flag (byte 1, bit 0) picks the variant: SOM
    carries header_data u64, the others payload_length + message_offset.
    """
    if next_hdr == 3:
        if len(buf) - off > 1 and buf[off + 1] & 0x01:
            return "SesStandardRequestSom"
        return "SesStandardRequest"
    if next_hdr == 6:
        return "SesSmallResponseData" if SMALL_RSP_DATA_SIZE == 4 else "SesSmallResponseData12"
    return _SES_LAYOUTS.get(next_hdr)


def ext_layout(ses_name: str, opcode: int, buf: _Buf, off: int = 0) -> str | None:
    """Class name of the extension header after SES request ``ses_name`` with ``opcode``, or None.

    Atomic opcodes (after any request kind, as W does) take the atomic header,
    or the compare-and-swap header when the AMO opcode at ``buf[off]`` is a
    CSWAP-family op; rendezvous opcodes take the rendezvous header after a
    standard request only.
    """
    if ses_name not in SES_REQUEST_LAYOUTS:
        return None
    if opcode in ATOMIC_EXT_OPCODES:
        if len(buf) - off > 0:
            amo = buf[off]
            if amo in CAS_AMO_OPCODES or (MSWAP_USES_CAS and amo == 0x13):
                return "SesCompareSwap"
        return "SesAtomic"
    if opcode in RENDEZVOUS_OPCODES and ses_name.startswith("SesStandardRequest"):
        return "SesRendezvous"
    return None


# --------------------------------------------------------------------------
# Derived values (serial arithmetic mod 2^32) and helper mixins for both sides
# --------------------------------------------------------------------------

def psn_add(psn: int, offset: int) -> int:
    """``psn + offset`` modulo 2^32 (offsets are signed 16-bit on the wire)."""
    return (psn + offset) & 0xFFFFFFFF


def start_psn(psn: int, psn_offset: int) -> int:
    """Start_PSN of a SYN packet: PSN − psn_offset (mod 2^32)."""
    return (psn - psn_offset) & 0xFFFFFFFF


def pdc_info_use_rsv_pdc(pdc_info: int) -> bool:
    """The use_rsv_pdc bit of a 4-bit ``pdc_info``, at the position :data:`USE_RSV_PDC_BIT` says."""
    return bool((pdc_info >> (USE_RSV_PDC_BIT - 12)) & 1)


def make_pdc_info(use_rsv_pdc: bool, other: int = 0) -> int:
    """A 4-bit ``pdc_info`` with use_rsv_pdc set as asked; ``other`` fills the remaining 3 bits."""
    if USE_RSV_PDC_BIT == USE_RSV_PDC_BIT_W:
        return (int(use_rsv_pdc) << 3) | (other & 0x7)
    return ((other & 0x7) << 1) | int(use_rsv_pdc)


class SynView:
    """Helpers for headers whose bytes 10-11 are ``pdc_info:4 | psn_offset:12`` (SYN set)."""

    __slots__ = ()
    psn: int
    psn_offset: int
    pdc_info: int

    def start_psn(self) -> int:
        """PSN − psn_offset (mod 2^32): the PDC's first PSN."""
        return start_psn(self.psn, self.psn_offset)

    def use_rsv_pdc(self) -> bool:
        """Whether the initiator asks for a reserved PDC (bit position per settings)."""
        return pdc_info_use_rsv_pdc(self.pdc_info)


class RequestView:
    """Helpers for RUD/ROD requests."""

    __slots__ = ()
    psn: int
    clear_psn_offset: int

    def clear_psn(self) -> int:
        """CLEAR_PSN = PSN + clear_psn_offset (mod 2^32)."""
        return psn_add(self.psn, self.clear_psn_offset)


class AckView:
    """Helpers for ACK, ACK_CC and ACK_CCX."""

    __slots__ = ()
    cack_psn: int
    ack_psn_offset: int

    def ack_psn(self) -> int:
        """ACK_PSN = CACK_PSN + ack_psn_offset (mod 2^32); meaningless when P (probe) is set."""
        return psn_add(self.cack_psn, self.ack_psn_offset)


class SackView(AckView):
    """Helpers for ACK_CC and ACK_CCX: the SACK bitmap's base and the PSNs it marks."""

    __slots__ = ()
    sack_psn_offset: int
    sack_bitmap: int

    def sack_base(self) -> int:
        """SACK base PSN = CACK_PSN + sack_psn_offset (mod 2^32)."""
        return psn_add(self.cack_psn, self.sack_psn_offset)

    def sacked_psns(self) -> list[int]:
        """PSNs marked received: bit i (LSB first) = base + i."""
        base, bm = self.sack_base(), self.sack_bitmap
        return [(base + i) & 0xFFFFFFFF for i in range(64) if bm >> i & 1]

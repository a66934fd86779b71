# SPDX-License-Identifier: GPL-2.0-only
"""scapy layers for Ultra Ethernet Transport: entropy, TSS, every PDS header, SES headers.

This module is the reference for the UET layouts (``/work/shared/specs/uet.md``;
Wireshark's upstream dissector, **W**, is normative for layout). The struct
codecs in :mod:`emu.wire.codec.uet` are checked against it field by field.

Shape of a packet::

    UDP dport 4793 / UetTss* / Raw (ciphertext)
    UDP dport 4793 / Pds* / [Ses*] / [SesAtomic | SesCompareSwap | SesRendezvous] / Raw
    IP proto 253  / UetEntropy / (either of the above, after UDP)

Which class follows which is decided by :mod:`emu.wire.uet_defs` (shared with
the codecs, so both pick the same class for the same bytes):

* UDP and the entropy header hand the bytes to :class:`UetPds`, whose
  ``dispatch_hook`` reads the 5-bit type and picks the concrete class —
  including the SYN view of requests/CP, the SP variant of TSS and the
  cc_state layout of ACK_CC.
* A PDS header's ``next_hdr`` picks the SES header (a standard request's SOM
  flag picks between its two variants); CP has ``ctl_type`` there and no SES.
* A SES request's opcode (and the AMO opcode) picks the extension header.

Every field is an integer field (our :class:`_BitEnum` is a ``BitField``)
so the generic codec ≡ scapy harness in ``tests/support/wirecheck.py`` applies. Each
reserved bit range is a field of its own, so a capture with non-zero reserved
bits round-trips.

Modelling choices (the spec text is not reachable; see specs/uet.md):

* **SYN overload**: two classes per request/CP layout — ``PdsRequest`` has
  ``dpdcid``, ``PdsRequestSyn`` has ``pdc_info:4 | psn_offset:12`` in the same
  16 bits — chosen by the SYN flag; ``start_psn()`` = PSN − psn_offset.
* **ACK_CC cc_state**: one class per cc_type (``PdsAckCcNscc``,
  ``PdsAckCcCredit``) with the cc_state fields spelled out, and ``PdsAckCc``
  with a raw ``cc_state`` u64 for other cc types. NSCC's restore_cwnd /
  rcv_cwnd_pend sit in byte 2 of cc_state (W reads byte 0; we do not copy that).
* **NACK_CCX**: NACK's 16 bytes, then ``nccx_state`` 128 bits, opaque — W skips
  exactly those 16 bytes (its CCX decode is a TODO).
* **Small response with data**: 4 bytes as W decodes it (``SesSmallResponseData``);
  ``uet_defs.configure(small_rsp_data_size=12)`` selects the 12-byte variant.
* **Compare-and-swap**: after an atomic opcode, AMO opcodes 0x0D-0x12 (UET
  numbering: CSWAP..CSWAP_GT) take the 36-byte header as in W; MSWAP (0x13)
  takes the 4-byte header unless ``mswap_uses_cas`` is set.
* **TSS**: spec-page layout ``type:5 | SP | rsvd | AN | SDI:24``, SSI if SP,
  TSC u64 (12/16 B); W's TSS decoder is unfinished (fixed 20 B, different bits).
* **Medium request**: the common 12-byte layout; W reads its fields one byte late.
"""

from __future__ import annotations

from scapy.fields import (
    BitField,
    ByteEnumField,
    ByteField,
    IntField,
    ShortField,
    SignedShortField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Packet, Raw, bind_bottom_up, bind_layers, bind_top_down, split_layers

from emu.wire import uet_defs as D
from emu.wire.uet_defs import (
    UET_IP_PROTO_DEFAULT,
    UET_UDP_PORT,
    AckView,
    RequestView,
    SackView,
    SynView,
)

#: IP protocol native-IP UET is bound to; change with :func:`bind_native_ip`
UET_IP_PROTO = UET_IP_PROTO_DEFAULT


class _BitEnum(BitField):
    """A BitField that shows and accepts names from a table.

    scapy's ``BitEnumField`` is not a ``BitField`` subclass, and the wirecheck
    harness (and anything else that introspects widths) keys on ``BitField``.
    """

    __slots__ = ("names", "by_name")

    def __init__(self, name: str, default: int, size: int, names: dict[int, str]) -> None:
        super().__init__(name, default, size)
        self.names = names
        self.by_name = {v: k for k, v in names.items()}

    def any2i(self, pkt: Packet | None, x: object) -> int:
        if isinstance(x, str):
            return self.by_name[x]
        return super().any2i(pkt, x)

    def i2repr(self, pkt: Packet | None, x: int) -> str:
        n = self.names.get(x)
        return f"{n} ({x})" if n is not None else repr(x)


def _type(default: int) -> _BitEnum:
    return _BitEnum("type", default, 5, D.PDS_TYPES)


def _next_hdr() -> _BitEnum:
    return _BitEnum("next_hdr", 0, 4, D.NEXT_HDRS)


# --------------------------------------------------------------------------
# Encapsulation: entropy header (native IP), TSS
# --------------------------------------------------------------------------

class UetEntropy(Packet):
    """Entropy header (4 B) that starts native-IP UET; with UDP the source port is the entropy."""

    name = "UET entropy"
    fields_desc = [XShortField("entropy", 0), XShortField("rsvd", 0)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return UetPds


class _Tss(Packet):
    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return Raw  # encrypted PDS/SES + ICV: opaque without the key


class UetTss(_Tss):
    """Transport security header without SSI (SP=0), 12 B; the rest of the packet is ciphertext."""

    name = "UET TSS"
    fields_desc = [
        _type(1), BitField("sp", 0, 1), BitField("rsvd", 0, 1), BitField("an", 0, 1),
        XBitField("sdi", 0, 24), XLongField("tsc", 0),
    ]


class UetTssSsi(_Tss):
    """Transport security header with SSI (SP=1), 16 B."""

    name = "UET TSS+SSI"
    fields_desc = [
        _type(1), BitField("sp", 1, 1), BitField("rsvd", 0, 1), BitField("an", 0, 1),
        XBitField("sdi", 0, 24), XIntField("ssi", 0), XLongField("tsc", 0),
    ]


# --------------------------------------------------------------------------
# PDS
# --------------------------------------------------------------------------

class UetPds(Packet):
    """Dispatcher for whatever starts a UET payload: reads the 5-bit type, becomes its class.

    Built or dissected on its own (an unknown type) it is just the 16-bit
    prologue with the rest as Raw.
    """

    name = "UET PDS"
    fields_desc = [_type(0), _next_hdr(), XBitField("flags", 0, 7)]

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args: object,
                      **kargs: object) -> type[Packet]:
        if _pkt:
            name = D.pds_layout(_pkt, 0)
            if name is not None:
                return LAYERS[name]
        return cls


class _PdsLayer(Packet):
    """Base of every PDS header: ``next_hdr`` (via uet_defs) says which SES header follows."""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        name = D.ses_layout(self.next_hdr, payload, 0) if payload else None
        return LAYERS[name] if name else Raw

    def mysummary(self) -> str:
        return self.sprintf("UET %type%")


def _req_flags() -> list[BitField]:
    return [BitField("flag_rsvd0", 0, 2), BitField("retx", 0, 1), BitField("ar", 0, 1),
            BitField("syn", 0, 1), BitField("flag_rsvd1", 0, 2)]


def _req_fields(t: int, syn: bool) -> list:
    flags = _req_flags()
    if syn:
        flags[3] = BitField("syn", 1, 1)
        last = [BitField("pdc_info", 0, 4), BitField("psn_offset", 0, 12)]
    else:
        last = [XShortField("dpdcid", 0)]
    return [_type(t), _next_hdr(), *flags, SignedShortField("clear_psn_offset", 0),
            XIntField("psn", 0), XShortField("spdcid", 0), *last]


class PdsRequest(_PdsLayer, RequestView):
    """RUD_REQ (type 2) / ROD_REQ (type 3), SYN clear: 12 B."""

    name = "UET PDS RUD/ROD_REQ"
    fields_desc = _req_fields(2, syn=False)


class PdsRequestSyn(_PdsLayer, RequestView, SynView):
    """RUD_REQ / ROD_REQ with SYN: bytes 10-11 are pdc_info:4 | psn_offset:12 (no DPDCID yet)."""

    name = "UET PDS RUD/ROD_REQ+SYN"
    fields_desc = _req_fields(2, syn=True)


_CC_REQ_TAIL = [ByteField("ccc_id", 0), BitField("credit_target", 0, 24)]


class PdsCcRequest(_PdsLayer, RequestView):
    """RUD_CC_REQ (13) / ROD_CC_REQ (14): a request plus ccc_id and credit_target, 16 B."""

    name = "UET PDS RUD/ROD_CC_REQ"
    fields_desc = _req_fields(13, syn=False) + _CC_REQ_TAIL


class PdsCcRequestSyn(_PdsLayer, RequestView, SynView):
    """RUD_CC_REQ / ROD_CC_REQ with SYN."""

    name = "UET PDS RUD/ROD_CC_REQ+SYN"
    fields_desc = _req_fields(13, syn=True) + _CC_REQ_TAIL


class PdsRudi(_PdsLayer):
    """RUDI_REQ (4) / RUDI_RESP (5): 8 B, no PDC; pkt_id identifies the packet."""

    name = "UET PDS RUDI"
    fields_desc = [
        _type(4), _next_hdr(), BitField("flag_rsvd0", 0, 1), BitField("m", 0, 1),
        BitField("retx", 0, 1), BitField("flag_rsvd1", 0, 4), XShortField("rsvd", 0),
        XIntField("pkt_id", 0),
    ]


class PdsUud(_PdsLayer):
    """UUD_REQ (6): 4 B, unacknowledged datagram."""

    name = "UET PDS UUD_REQ"
    fields_desc = [_type(6), _next_hdr(), XBitField("flag_rsvd0", 0, 7), XShortField("rsvd", 0)]


def _ack_fields(t: int) -> list:
    return [
        _type(t), _next_hdr(), BitField("flag_rsvd0", 0, 1), BitField("m", 0, 1),
        BitField("retx", 0, 1), BitField("p", 0, 1), _BitEnum("req", 0, 2, D.ACK_REQS),
        BitField("flag_rsvd1", 0, 1),
        SignedShortField("ack_psn_offset", 0),  # probe_opaque when P is set
        XIntField("cack_psn", 0), XShortField("spdcid", 0), XShortField("dpdcid", 0),
    ]


def _ack_ext(cc_type: int) -> list:
    return [_BitEnum("cc_type", cc_type, 4, D.CC_TYPES), BitField("cc_flags", 0, 4),
            ByteField("mpr", 0), SignedShortField("sack_psn_offset", 0),
            XLongField("sack_bitmap", 0)]


class PdsAck(_PdsLayer, AckView):
    """ACK (7): 12 B."""

    name = "UET PDS ACK"
    fields_desc = _ack_fields(7)


class PdsAckCc(_PdsLayer, SackView):
    """ACK_CC (8) with a cc_type we do not decode: cc_state as a raw u64. 32 B."""

    name = "UET PDS ACK_CC"
    fields_desc = _ack_fields(8) + _ack_ext(2) + [XLongField("cc_state", 0)]


class PdsAckCcNscc(_PdsLayer, SackView):
    """ACK_CC with cc_type 0 (NSCC), 32 B.

    cc_state: service_time u16 · restore_cwnd:1 | rcv_cwnd_pend:7 · rcvd_bytes u24 · ooo_count u16.
    """

    name = "UET PDS ACK_CC NSCC"
    fields_desc = _ack_fields(8) + _ack_ext(0) + [
        ShortField("service_time", 0), BitField("restore_cwnd", 0, 1),
        BitField("rcv_cwnd_pend", 0, 7), BitField("rcvd_bytes", 0, 24),
        ShortField("ooo_count", 0),
    ]


class PdsAckCcCredit(_PdsLayer, SackView):
    """ACK_CC with cc_type 1 (credit, RCCC): cc_state = credit u24, 3 reserved bytes, ooo_count."""

    name = "UET PDS ACK_CC credit"
    fields_desc = _ack_fields(8) + _ack_ext(1) + [
        BitField("credit", 0, 24), XBitField("cc_rsvd", 0, 24), ShortField("ooo_count", 0),
    ]


class PdsAckCcx(_PdsLayer, SackView):
    """ACK_CCX (9): ACK_CC up to the SACK bitmap, then a 128-bit CCX state. 40 B."""

    name = "UET PDS ACK_CCX"
    fields_desc = _ack_fields(9) + _ack_ext(0) + [XBitField("ccx_state", 0, 128)]


def _nack_fields(t: int) -> list:
    return [
        _type(t), _next_hdr(), BitField("flag_rsvd0", 0, 1), BitField("m", 0, 1),
        BitField("retx", 0, 1), BitField("nt", 0, 1), BitField("flag_rsvd1", 0, 3),
        ByteEnumField("nack_code", 0, D.NACK_CODES), XByteField("vendor_code", 0),
        XIntField("nack_psn", 0),  # pkt_id when NT (RUDI)
        XShortField("spdcid", 0), XShortField("dpdcid", 0),
        XIntField("nack_payload", 0),  # W: max received PSN + 1; R: NEW_START_PSN
    ]


class PdsNack(_PdsLayer):
    """NACK (10): 16 B."""

    name = "UET PDS NACK"
    fields_desc = _nack_fields(10)


class PdsNackCcx(_PdsLayer):
    """NACK_CCX (12): NACK, then an opaque 128-bit NACK CCX state (W skips these 16 B). 32 B."""

    name = "UET PDS NACK_CCX"
    fields_desc = _nack_fields(12) + [XBitField("nccx_state", 0, 128)]


def _cp_fields(syn: bool) -> list:
    last = ([BitField("pdc_info", 0, 4), BitField("psn_offset", 0, 12)] if syn
            else [XShortField("dpdcid", 0)])
    return [
        _type(11), _BitEnum("ctl_type", 0, 4, D.CTL_TYPES), BitField("flag_rsvd0", 0, 1),
        BitField("isrod", 0, 1), BitField("retx", 0, 1), BitField("ar", 0, 1),
        BitField("syn", int(syn), 1), BitField("flag_rsvd1", 0, 2),
        XShortField("probe_opaque", 0), XIntField("psn", 0), XShortField("spdcid", 0), *last,
        XIntField("ctl_payload", 0),
    ]


class _Cp(_PdsLayer):
    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return Raw  # the 4 bits after the type are ctl_type, not next_hdr

    def mysummary(self) -> str:
        return self.sprintf("UET CP %ctl_type%")


class PdsControl(_Cp):
    """CP (11): control packet, 16 B; ``ctl_type`` replaces next_hdr. ISROD is R's bit 0x20."""

    name = "UET PDS CP"
    fields_desc = _cp_fields(syn=False)


class PdsControlSyn(_Cp, SynView):
    """CP with SYN: bytes 10-11 are pdc_info:4 | psn_offset:12 as in requests."""

    name = "UET PDS CP+SYN"
    fields_desc = _cp_fields(syn=True)


# --------------------------------------------------------------------------
# SES
# --------------------------------------------------------------------------

class _SesRequest(Packet):
    """Base of SES requests: the opcode (and AMO opcode) pick the extension header."""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        name = D.ext_layout(type(self).__name__, self.opcode, payload, 0) if payload else None
        return LAYERS[name] if name else Raw

    def mysummary(self) -> str:
        return self.sprintf("UET SES %opcode%")


def _ses_head(third: str, som: int = 0) -> list:
    """Bytes 0-11 shared by SES requests; bytes 2-3 are message_id (standard) or request_length."""
    flags = [BitField("ver", 0, 2), BitField("dc", 0, 1), BitField("ie", 0, 1),
             BitField("rel", 0, 1), BitField("hd", 0, 1), BitField("eom", 0, 1),
             BitField("som", som, 1)]
    if third == "message_id":
        mid = [XShortField("message_id", 0)]
    else:
        mid = [BitField("rsvd1", 0, 2), BitField("request_length", 0, 14)]
    if third == "small":
        flags[4] = BitField("flag_rsvd", 0, 1)  # HD is reserved in the small request
    return [
        BitField("rsvd0", 0, 2), _BitEnum("opcode", 0, 6, D.SES_OPCODES), *flags, *mid,
        ByteField("ri_generation", 0), XBitField("job_id", 0, 24),
        BitField("rsvd2", 0, 4), BitField("pid_on_fep", 0, 12),
        BitField("rsvd3", 0, 4), BitField("resource_index", 0, 12),
    ]


_STD_MIDDLE = [
    XLongField("buffer_offset", 0),  # restart token for DEFERRABLE_SEND/TSEND
    XIntField("initiator", 0),
    XLongField("mem_key_match_bits", 0),  # restart token for DEFERRABLE_RTR
]


class SesStandardRequest(_SesRequest):
    """Standard request, SOM clear (44 B): payload_length + message_offset at byte 32."""

    name = "UET SES standard request"
    fields_desc = _ses_head("message_id") + _STD_MIDDLE + [
        BitField("rsvd4", 0, 18), BitField("payload_length", 0, 14),
        IntField("message_offset", 0), IntField("request_length", 0),
    ]


class SesStandardRequestSom(_SesRequest):
    """Standard request, SOM set (44 B): header_data u64 at byte 32."""

    name = "UET SES standard request (SOM)"
    fields_desc = _ses_head("message_id", som=1) + _STD_MIDDLE + [
        XLongField("header_data", 0), IntField("request_length", 0),
    ]




class SesSmallRequest(_SesRequest):
    """Small (optimized non-matching) request, 20 B; SOM and EOM are both set."""

    name = "UET SES small request"
    fields_desc = _ses_head("small") + [XLongField("buffer_offset", 0)]


class SesMediumRequest(_SesRequest):
    """Medium request, 32 B; ``buffer_offset`` holds header_data when HD is set."""

    name = "UET SES medium request"
    fields_desc = _ses_head("request_length") + _STD_MIDDLE


def _rsp_head(opcode: int) -> list:
    return [BitField("list", 0, 2), _BitEnum("opcode", opcode, 6, D.RSP_OPCODES),
            BitField("ver", 0, 2), _BitEnum("return_code", 1, 6, D.RETURN_CODES)]


class _SesLeaf(Packet):
    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return Raw


class SesResponse(_SesLeaf):
    """Response (12 B): DEFAULT_RESPONSE / RESPONSE / NO_RESPONSE."""

    name = "UET SES response"
    fields_desc = _rsp_head(1) + [
        XShortField("message_id", 0), ByteField("ri_generation", 0), XBitField("job_id", 0, 24),
        IntField("modified_length", 0),
    ]


class SesResponseData(_SesLeaf):
    """Response with data (20 B + data); byte 4 is reserved (W), not ri_generation."""

    name = "UET SES response with data"
    fields_desc = _rsp_head(2) + [
        XShortField("message_id", 0), XByteField("rsvd0", 0), XBitField("job_id", 0, 24),
        XShortField("read_req_message_id", 0), BitField("rsvd1", 0, 2),
        BitField("payload_length", 0, 14), IntField("modified_length", 0),
        IntField("message_offset", 0),
    ]


class SesSmallResponseData(_SesLeaf):
    """Small response with data, 4 B as W decodes it (default layout)."""

    name = "UET SES small response with data"
    fields_desc = _rsp_head(2) + [BitField("rsvd0", 0, 2), BitField("payload_length", 0, 14)]


class SesSmallResponseData12(_SesLeaf):
    """Small response with data, 12-byte variant (setting ``small_rsp_data_size=12``)."""

    name = "UET SES small response with data (12 B)"
    fields_desc = _rsp_head(2) + [
        BitField("rsvd0", 0, 2), BitField("payload_length", 0, 14), XByteField("rsvd1", 0),
        XBitField("job_id", 0, 24), XIntField("original_request_psn", 0),
    ]


class SesAtomic(_SesLeaf):
    """Atomic extension header (4 B)."""

    name = "UET SES atomic ext"
    fields_desc = [
        ByteEnumField("amo_opcode", 0, D.AMO_OPCODES),
        ByteEnumField("datatype", 0, D.AMO_DATATYPES),
        ByteEnumField("sem_ctl", 0, D.SEM_CTLS), XByteField("rsvd", 0),
    ]


class SesCompareSwap(_SesLeaf):
    """Compare-and-swap extension header (36 B): atomic header + compare[16] + swap[16]."""

    name = "UET SES compare-and-swap ext"
    fields_desc = [
        ByteEnumField("amo_opcode", 0x0D, D.AMO_OPCODES),
        ByteEnumField("datatype", 0, D.AMO_DATATYPES),
        ByteEnumField("sem_ctl", 0, D.SEM_CTLS), XByteField("rsvd", 0),
        XBitField("compare", 0, 128), XBitField("swap", 0, 128),
    ]


class SesRendezvous(_SesLeaf):
    """Rendezvous extension header (24 B); read_pid_on_fep is 14 bits as in W."""

    name = "UET SES rendezvous ext"
    fields_desc = [
        IntField("eager_length", 0), BitField("rsvd0", 0, 2), BitField("read_pid_on_fep", 0, 14),
        BitField("rsvd1", 0, 4), BitField("read_resource_index", 0, 12),
        XLongField("read_offset", 0), XLongField("read_match_bits", 0),
    ]


# --------------------------------------------------------------------------
# Registry and bindings
# --------------------------------------------------------------------------

#: class name -> class, for every header (the names uet_defs' selectors return)
LAYERS: dict[str, type[Packet]] = {c.__name__: c for c in (
    UetEntropy, UetTss, UetTssSsi, PdsRequest, PdsRequestSyn, PdsCcRequest, PdsCcRequestSyn,
    PdsRudi, PdsUud, PdsAck, PdsAckCc, PdsAckCcNscc, PdsAckCcCredit, PdsAckCcx, PdsNack,
    PdsNackCcx, PdsControl, PdsControlSyn, SesStandardRequest, SesStandardRequestSom,
    SesSmallRequest, SesMediumRequest, SesResponse, SesResponseData, SesSmallResponseData,
    SesSmallResponseData12, SesAtomic, SesCompareSwap, SesRendezvous,
)}
#: classes that can start a UDP payload
FIRST_LAYERS = [c for n, c in LAYERS.items() if n.startswith(("Pds", "UetTss"))]

bind_bottom_up(UDP, UetPds, dport=UET_UDP_PORT)
for _c in (UetPds, *FIRST_LAYERS):
    bind_top_down(UDP, _c, dport=UET_UDP_PORT)
bind_layers(IP, UetEntropy, proto=UET_IP_PROTO)
bind_layers(IPv6, UetEntropy, nh=UET_IP_PROTO)


def bind_native_ip(proto: int) -> None:
    """Bind native-IP UET (entropy header first) to IP protocol ``proto``, unbinding the old one.

    R uses 253 (RFC 3692 experimental); deployments may pick another, and
    Wireshark leaves it to a "Decode As" preference.
    """
    global UET_IP_PROTO
    if not 0 <= proto <= 255:
        raise ValueError(f"IP protocol {proto} out of range")
    split_layers(IP, UetEntropy, proto=UET_IP_PROTO)
    split_layers(IPv6, UetEntropy, nh=UET_IP_PROTO)
    UET_IP_PROTO = proto
    bind_layers(IP, UetEntropy, proto=proto)
    bind_layers(IPv6, UetEntropy, nh=proto)

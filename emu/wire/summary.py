# SPDX-License-Identifier: GPL-2.0-only
"""Short, filterable summaries of decoded headers for ``emu dissect``.

Works on codec objects (no scapy): each header contributes the fields an
engineer looks for, with codes turned into names (AETH syndromes, NACK
reasons, SACK marks). Reserved fields are left out; everything else of a
header without a special rule is shown under its own name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emu.wire import mrc_defs
from emu.wire.codec import mrc as CM
from emu.wire.codec import roce as CR
from emu.wire.codec._base import Header

_RESERVED = ("resv", "rsvd", "reserved")


def _plain(h: Header) -> dict[str, Any]:
    return {k: v for k, v in h.values().items() if not k.startswith(_RESERVED)}


def _aeth(h: CR.AETH) -> dict[str, Any]:
    return {"aeth": CR.aeth_meaning(h.syndrome), "msn": h.msn}


def _seth(h: CM.SETH) -> dict[str, Any]:
    out: dict[str, Any] = {"cack_psn": h.cack_psn,
                           # the PSN this SACK answers (the packet whose EV it echoes)
                           "ack_psn": (h.cack_psn + h.ack_psn_offset) & 0xFFFFFF,
                           "ev_echo": h.ev,
                           "spdcid": h.spdcid, "dpdcid": h.dpdcid}
    if h.m:
        out["mark"] = mrc_defs.m_name(h.m)  # a skip hint or an ECN echo: the setting's
    if h.pr:
        out["probe_reply"] = True
    if h.sack_bitmap:
        out["sack"] = ",".join(f"0x{p:x}" for p in CM.sack_bitmap_psns(h.cack_psn, h.sack_offset,
                                                                      h.sack_bitmap))
    return out


def _neth(h: CM.NETH) -> dict[str, Any]:
    return {"nack": CM.NACK_REASONS.get(h.nack_reason, f"0x{h.nack_reason:02x}"),
            "nack_psn": h.nack_psn, "ev_echo": h.ev, "spdcid": h.spdcid, "dpdcid": h.dpdcid}


def _cc_state(h: CM.CC_STATE) -> dict[str, Any]:
    return {"ooo": h.ooo_count, "rcvd_bytes": h.rcvd_bytes * 256, "ts_echo": h.tx_timestamp}


def _tseth(h: CM.TSETH) -> dict[str, Any]:
    return {"tx_ts": h.tx_timestamp}


def _eeth(h: CM.EETH) -> dict[str, Any]:
    return {"status": CM.EETH_STATUS.get(h.status, h.status), "request_id": h.request_id,
            "port_status_mask": h.port_status_mask}


def _erth(h: CM.ERTH) -> dict[str, Any]:
    return {"op": CM.ERTH_OPS.get(h.op, h.op), "port_status_mask": h.port_status_mask}


_RULES: dict[str, Callable[[Any], dict[str, Any]]] = {
    "AETH": _aeth, "SETH": _seth, "NETH": _neth, "CC_STATE": _cc_state, "TSETH": _tseth,
    "EETH": _eeth, "ERTH": _erth, "CNPPadding": lambda h: {},
}


def header_summary(h: Header) -> dict[str, Any]:
    """The fields of one decoded header worth a place on a one-line summary."""
    rule = _RULES.get(h.NAME)
    return rule(h) if rule else _plain(h)


# --------------------------------------------------------------------------
# UET
# --------------------------------------------------------------------------

_UET_FLAGS = ("syn", "ar", "retx", "m", "p", "nt")
_SES_SHORT = {"standard": "std", "small": "small", "medium": "medium"}


def uet_summary(pkt: Any) -> tuple[str, dict[str, Any], list[str]]:
    """(type, fields, flags) of a decoded :class:`emu.wire.codec.uet.UetPacket`."""
    from emu.wire import uet_defs as D

    fields: dict[str, Any] = {}
    flags: list[str] = []
    if pkt.entropy is not None:
        fields["entropy"] = pkt.entropy.entropy
    if pkt.tss is not None:
        t = pkt.tss
        fields.update(sdi=t.sdi, tsc=t.tsc, ciphertext_len=len(pkt.payload))
        if getattr(t, "ssi", None) is not None:
            fields["ssi"] = t.ssi
        return "TSS", fields, flags
    pds = pkt.pds
    v = pds.values()
    kind = D.PDS_TYPES.get(pds.type, str(pds.type))
    if "ctl_type" in v:
        kind += " " + D.CTL_TYPES.get(pds.ctl_type, str(pds.ctl_type))
    for key in ("psn", "cack_psn", "nack_psn", "pkt_id", "spdcid", "dpdcid", "psn_offset"):
        if key in v:
            fields[key] = v[key]
    if v.get("syn"):
        fields["start_psn"] = pds.start_psn()
    if "nack_code" in v:
        fields["nack"] = D.NACK_CODES.get(pds.nack_code, f"0x{pds.nack_code:02x}")
    if "sack_bitmap" in v and pds.sack_bitmap:
        fields["sack"] = ",".join(f"0x{p:x}" for p in pds.sacked_psns())
    if "req" in v and pds.req:
        fields["ack_req"] = D.ACK_REQS.get(pds.req, pds.req)
    flags += [f.upper() for f in _UET_FLAGS if v.get(f)]
    ses = pkt.ses
    if ses is not None:
        s = ses.values()
        if "return_code" in s:
            kind += " / " + D.RSP_OPCODES.get(ses.opcode, str(ses.opcode))
            fields["rc"] = D.RETURN_CODES.get(ses.return_code, ses.return_code)
        else:
            shape = next((short for word, short in _SES_SHORT.items() if word in ses.NAME), "?")
            kind += f" / {shape} {D.SES_OPCODES.get(ses.opcode, ses.opcode)}"
            flags += [f.upper() for f in ("som", "eom") if s.get(f)]
        for key in ("message_id", "job_id", "request_length", "payload_length",
                    "message_offset", "modified_length"):
            if key in s:
                fields[key] = s[key]
    if pkt.ext is not None:
        fields.update((k, w) for k, w in pkt.ext.values().items() if not k.startswith("rsvd"))
    if len(pkt.payload):
        fields["len"] = len(pkt.payload)
    return kind, fields, flags

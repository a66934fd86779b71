# SPDX-License-Identifier: GPL-2.0-only
"""What a test case's capture shows, from ``emu dissect``'s records.

Why: the outputs of two endpoints can agree while the wire is wrong (a bad
ICRC that both tolerate, a client that "passes" without sending anything), so
every case is also judged on the capture. :func:`summarise` reads the pcapng
with :func:`emu.wire.dissect.dissect_file` — the decoder ``emu dissect`` uses —
and keeps what the checks need: malformed packets, bad ICRCs, payload bytes,
connections seen, retransmissions (a request PSN sent again, or flagged RETX),
NAKs and error responses, trimmed-packet NACKs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from emu.wire.dissect import Record, dissect_file
from emu.wire.pcapio import CaptureError


@dataclass
class Wire:
    """The facts of one capture the checks ask about."""

    packets: int = 0
    transport_packets: int = 0
    malformed: list[str] = field(default_factory=list)
    bad_icrc: list[str] = field(default_factory=list)
    payload_bytes: int = 0
    types: Counter = field(default_factory=Counter)
    qpns: set[int] = field(default_factory=set)       # RoCE destination QPs of requests
    pdcs: set[int] = field(default_factory=set)       # UET source PDC ids of requests
    retransmissions: int = 0
    naks: Counter = field(default_factory=Counter)    # RoCE AETH meanings other than ACK
    uet_nacks: Counter = field(default_factory=Counter)
    uet_error_rcs: Counter = field(default_factory=Counter)
    error: str | None = None                          # the capture itself could not be read

    def describe(self) -> str:
        return (f"{self.transport_packets} transport packets, {self.payload_bytes} payload bytes, "
                f"{self.retransmissions} retransmissions, {len(self.malformed)} malformed, "
                f"{len(self.bad_icrc)} bad ICRC")


_ROCE_REQ = ("SEND", "WRITE", "READ_REQUEST", "CMP_SWAP", "FETCH_ADD")


def _is_request(rec: Record) -> bool:
    if rec.protocol == "RoCEv2":
        return any(k in rec.type for k in _ROCE_REQ)
    return rec.protocol == "UET" and "_REQ" in rec.type


def add(w: Wire, rec: Record, highest: dict[Any, int]) -> None:
    """Account one record (``highest``: the highest request PSN per flow so far)."""
    w.packets += 1
    if rec.error:
        w.malformed.append(f"#{rec.no} {rec.protocol} {rec.type}: {rec.error}")
        return
    if rec.protocol not in ("RoCEv2", "UET", "MRC"):
        return
    w.transport_packets += 1
    w.types[rec.type] += 1
    f = rec.fields
    if rec.icrc is not None and rec.icrc != "ok":
        w.bad_icrc.append(f"#{rec.no} {rec.type} psn={f.get('psn')} ICRC {rec.icrc}")
    w.payload_bytes += int(f.get("len", 0) or 0)
    aeth = f.get("aeth")
    if isinstance(aeth, str) and aeth != "ACK" and not aeth.startswith("ACK"):
        w.naks[aeth] += 1
    if rec.protocol == "UET":
        if "nack" in f:
            w.uet_nacks[str(f["nack"])] += 1
        rc = f.get("rc")
        if rc is not None and rc != "OK":
            w.uet_error_rcs[str(rc)] += 1
    if not _is_request(rec) or "psn" not in f:
        return
    if rec.protocol == "RoCEv2":
        w.qpns.add(int(f.get("qp", 0)))
        key: Any = ("roce", rec.src, rec.dst, f.get("qp"))
        psn, mod = int(f["psn"]), 1 << 24
    else:
        w.pdcs.add(int(f.get("spdcid", -1)))
        key = ("uet", rec.src, rec.dst, f.get("spdcid"))
        psn, mod = int(f["psn"]), 1 << 32
    if "RETX" in rec.flags:
        w.retransmissions += 1
    elif key in highest and (highest[key] - psn) % mod < mod // 2:
        w.retransmissions += 1  # at or below the highest PSN already sent on this flow
    if key not in highest or (psn - highest[key]) % mod < mod // 2:
        highest[key] = psn


def summarise(path: str) -> Wire:
    """Read a pcapng; a capture that cannot be read is reported, not raised."""
    w = Wire()
    highest: dict[Any, int] = {}
    try:
        for rec in dissect_file(path):
            add(w, rec, highest)
    except (CaptureError, OSError) as e:
        w.error = f"capture unreadable: {e}"
    return w


def write_text(path: str, out: str) -> None:
    """``emu dissect``'s text form of the capture (kept next to it in the log dir)."""
    with open(out, "w") as f:
        try:
            n = 0
            for rec in dissect_file(path):
                f.write(rec.line() + "\n")
                n += 1
            f.write(f"# {n} packets\n")
        except (CaptureError, OSError) as e:
            f.write(f"# capture unreadable: {e}\n")

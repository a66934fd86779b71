# SPDX-License-Identifier: GPL-2.0-only
"""What a test case's capture shows, from ``emu dissect``'s records.

Why: the outputs of two endpoints can agree while the wire is wrong (a bad
ICRC that both tolerate, a client that "passes" without sending anything), so
every case is also judged on the capture. :func:`summarise` reads the pcapng
with :func:`emu.wire.dissect.dissect_file` — the decoder ``emu dissect`` uses —
and keeps what the checks need: malformed packets, bad ICRCs, payload bytes,
connections seen, retransmissions (a request PSN sent again, or flagged RETX),
NAKs and error responses, trimmed-packet NACKs, packets that arrived out of
order, back-to-back copies of one packet (a duplicating link) and packets with
a trimmed DSCP.

Out of order and retransmitted are told apart by whether the PSN was seen
before on that flow: a request below the flow's highest PSN that appears for
the first time overtook nothing of its own — it was overtaken (``reordered``),
unless it carries RETX; one seen before is sent again (``retransmissions``).
A *duplicate* is a transport packet byte-for-byte equal to the transport
packet just before it on the same interface: a link's copy goes out right
after (or before) its original, while a retransmission is separated from its
original at least by the ACK or NAK that caused it.

Trimmed packets (IP DSCP :data:`TRIMMED_DSCPS`, emu's switch defaults, or the DSCP the
runner had the switch write: ``summarise(…, trimmed_dscps=…)``) have
their payload cut by the switch. emu's switch recomputes a trimmed RoCEv2
packet's ICRC (a NIC drops a bad-ICRC packet before it could NAK it), so the
ICRC check applies to them like to every other packet.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from emu.wire.codec.ev import DEFAULT_SPLIT, EVMode, EVSplit, ev_from_fields, parse_split
from emu.wire.dissect import Record, dissect_file
from emu.wire.pcapio import CaptureError
from emu.wire.uet_defs import DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP

TRIMMED_DSCPS = (DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP)


@dataclass(frozen=True)
class EvSpec:
    """An MRC sender's EV format (``udp``, ``stev``) and STEV split: an implementation's
    ``mrc_ev`` (``"stev:12+20@0xd000"``)."""

    mode: EVMode = EVMode.UDP
    split: EVSplit = DEFAULT_SPLIT

    @classmethod
    def parse(cls, text: str | None) -> EvSpec:
        fmt, _, split = str(text or "udp").partition(":")
        mode = EVMode(fmt.strip().lower())
        if mode is EVMode.SRV6:
            raise ValueError("srv6 EVs need a source-routed fabric, not an interop pair")
        return cls(mode, parse_split(split) if split else DEFAULT_SPLIT)

    def ev(self, sport: int, flow_label: int | None) -> int | None:
        """The EV a packet from ``sport`` with ``flow_label`` was sent on (None: a STEV
        packet without a flow label, i.e. IPv4, cannot carry one)."""
        try:
            return ev_from_fields(sport, flow_label, self.mode, self.split)
        except ValueError:
            return None

    def __str__(self) -> str:
        return self.mode.value + (f" {self.split}" if self.mode is not EVMode.UDP else "")


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
    naks: Counter = field(default_factory=Counter)    # RoCE/MRC AETH meanings other than ACK
    nack_reasons: Counter = field(default_factory=Counter)  # UET/MRC NACK reasons
    mrc: bool = False         # MRC packets on the wire (its cases use WRITE with immediate)
    uet_error_rcs: Counter = field(default_factory=Counter)
    reordered: int = 0        # requests that arrived after a higher PSN of their flow
    #: transport packets the network delivered ahead of one that entered it before them
    #: (``summarise(…, ingress=…)`` only; None: not compared)
    overtook: int | None = None
    duplicates: int = 0       # transport packets equal to the one just before them
    trimmed: int = 0          # packets with a trimmed DSCP
    #: duplicates the server's emu NIC daemon counted (None: not an emu daemon, not read)
    server_duplicates: int | None = None
    #: transport packets the impaired cable dropped client → server (None: not counted)
    link_dropped: int | None = None
    error: str | None = None                          # the capture itself could not be read
    #: the DSCPs that mean "trimmed" in this capture (what the switch was told to write)
    trimmed_dscps: tuple[int, ...] = TRIMMED_DSCPS
    #: MRC: where each sender's EVs ride, by its address (absent: the UDP format, the EV
    #: is the source port) — what an EV echo is checked against
    ev_formats: dict[str, EvSpec] = field(default_factory=dict)
    ev_echoes: int = 0        # MRC SACK/NACK EV echoes checked against their packet
    #: echoes naming an EV the answered packet was not sent on (first few described)
    ev_echo_wrong: int = 0
    ev_echo_first: list[str] = field(default_factory=list)

    def describe(self) -> str:
        extra = "".join(f", {n} {what}" for n, what in ((self.reordered, "reordered"),
                                                         (self.duplicates, "duplicates"),
                                                         (self.trimmed, "trimmed")) if n)
        if self.overtook is not None:
            extra += f", {self.overtook} overtook an earlier packet in the network"
        if self.link_dropped is not None:
            extra += f", {self.link_dropped} dropped by the link client → server"
        return (f"{self.transport_packets} transport packets, {self.payload_bytes} payload bytes, "
                f"{self.retransmissions} retransmissions{extra}, {len(self.malformed)} "
                f"malformed, {len(self.bad_icrc)} bad ICRC")


_ROCE_REQ = ("SEND", "WRITE", "READ_REQUEST", "CMP_SWAP", "FETCH_ADD")


def _is_request(rec: Record) -> bool:
    if rec.protocol == "RoCEv2":
        return any(k in rec.type for k in _ROCE_REQ)
    if rec.protocol == "MRC":
        return "WRITE" in rec.type
    return rec.protocol == "UET" and "_REQ" in rec.type


@dataclass
class _Flows:
    """Per-capture state of :func:`add`."""

    highest: dict[Any, int] = field(default_factory=dict)      # highest request PSN per flow
    seen: dict[Any, set[int]] = field(default_factory=dict)    # request PSNs per flow
    last: dict[Any, bytes] = field(default_factory=dict)       # last transport packet per iface
    #: MRC: (src, dst, psn) of a write → the (sport, flow label) of each time it was sent
    sent_on: dict[Any, set[tuple[int, int | None]]] = field(default_factory=dict)


def _check_echo(w: Wire, rec: Record, flows: _Flows) -> None:
    """An MRC SACK or NACK echoes the EV of the packet it answers (``specs/mrc.md``): the
    EV that packet carried as its *sender* placed it. A receiver that rebuilds the EV from
    the wire another way (the STEV split) echoes EVs the sender never sent on, and per-EV
    feedback — what spraying, ECN and path health rest on — reaches no path."""
    f = rec.fields
    psn = f.get("ack_psn", f.get("nack_psn"))
    if psn is None or "ev_echo" not in f or f.get("probe_reply") or rec.dst is None:
        return
    sent = flows.sent_on.get((rec.dst, rec.src, int(psn)))
    if not sent:
        return  # the packet it answers is not in this capture
    spec = w.ev_formats.get(rec.dst, EvSpec())
    evs = {spec.ev(sp, fl) for sp, fl in sent}
    w.ev_echoes += 1
    if int(f["ev_echo"]) not in evs:
        w.ev_echo_wrong += 1
        if len(w.ev_echo_first) < 3:
            want = ", ".join(f"{e:#x}" for e in sorted(e for e in evs if e is not None))
            w.ev_echo_first.append(f"#{rec.no} {rec.type} psn={int(psn):#x} echoes EV "
                                   f"{int(f['ev_echo']):#x}, the packet was sent on {want} "
                                   f"({spec} at {rec.dst})")


def add(w: Wire, rec: Record, flows: _Flows) -> None:
    """Account one record."""
    w.packets += 1
    if rec.error:
        w.malformed.append(f"#{rec.no} {rec.protocol} {rec.type}: {rec.error}")
        return
    if rec.protocol not in ("RoCEv2", "UET", "MRC"):
        return
    w.transport_packets += 1
    w.mrc = w.mrc or rec.protocol == "MRC"
    if rec.dscp in w.trimmed_dscps:
        w.trimmed += 1
    copy = rec.raw is not None and flows.last.get(rec.interface) == rec.raw
    if rec.raw is not None:
        flows.last[rec.interface] = rec.raw
    if copy:  # the link's copy: neither a retransmission nor out of order
        w.duplicates += 1
        return
    w.types[rec.type] += 1
    f = rec.fields
    if rec.icrc is not None and rec.icrc != "ok":
        w.bad_icrc.append(f"#{rec.no} {rec.type} psn={f.get('psn')} ICRC {rec.icrc}")
    w.payload_bytes += int(f.get("len", 0) or 0)
    aeth = f.get("aeth")
    if isinstance(aeth, str) and aeth != "ACK" and not aeth.startswith("ACK"):
        w.naks[aeth] += 1
    if rec.protocol == "MRC" and "nack" in f:
        w.nack_reasons[str(f["nack"])] += 1  # MRC's NACK reasons are UET's codes
    if rec.protocol == "MRC":
        if "WRITE" in rec.type and "psn" in f and rec.sport is not None:
            flows.sent_on.setdefault((rec.src, rec.dst, int(f["psn"])), set()).add(
                (rec.sport, rec.flow_label))
        elif "ev_echo" in f:
            _check_echo(w, rec, flows)
    if rec.protocol == "UET":
        if "nack" in f:
            w.nack_reasons[str(f["nack"])] += 1
        rc = f.get("rc")
        if rc is not None and rc != "OK":
            w.uet_error_rcs[str(rc)] += 1
    if not _is_request(rec) or "psn" not in f:
        return
    if rec.protocol in ("RoCEv2", "MRC"):
        w.qpns.add(int(f.get("qp", 0)))
        key: Any = (rec.protocol, rec.src, rec.dst, f.get("qp"))
        psn, mod = int(f["psn"]), 1 << 24
    else:
        w.pdcs.add(int(f.get("spdcid", -1)))
        key = ("uet", rec.src, rec.dst, f.get("spdcid"))
        psn, mod = int(f["psn"]), 1 << 32
    highest, seen = flows.highest, flows.seen.setdefault(key, set())
    below = key in highest and (highest[key] - psn) % mod < mod // 2
    if "RETX" in rec.flags or "RTX" in rec.flags:
        w.retransmissions += 1
    elif rec.protocol == "MRC" and below:
        # MRC flags every resend (BTH.RTX): an unflagged one below the highest PSN was
        # sprayed over another path and overtaken, not sent again
        w.reordered += 1
    elif below and psn in seen:
        w.retransmissions += 1  # sent again: at or below the flow's highest, seen before
    elif below:
        # below the highest, first time seen: overtaken on the way — or sent again after
        # the original was lost before the capture point (loss at the sender's egress)
        w.reordered += 1
        w.retransmissions += 1
    seen.add(psn)
    if key not in highest or (psn - highest[key]) % mod < mod // 2:
        highest[key] = psn


def overtaking(sent: list[bytes], got: list[bytes]) -> int:
    """How many of ``got`` arrived ahead of a packet that was ``sent`` before them.

    Packets are matched by their bytes, the k-th copy in ``got`` to the k-th in
    ``sent`` (retransmissions can be byte-equal); packets only on one side are
    ignored. Counted like this, one packet held back behind ten counts ten."""
    where: dict[bytes, list[int]] = {}
    for i, b in enumerate(sent):
        where.setdefault(b, []).append(i)
    taken: dict[bytes, int] = {}
    n = 0
    latest = -1
    for b in got:
        k = taken.get(b, 0)
        at = where.get(b, [])
        if k >= len(at):
            continue
        taken[b] = k + 1
        if at[k] < latest:
            n += 1
        latest = max(latest, at[k])
    return n


def summarise(path: str, judge: str | None = None, ingress: str | None = None,
              trimmed_dscps: tuple[int, ...] = TRIMMED_DSCPS,
              ev_formats: dict[str, EvSpec] | None = None) -> Wire:
    """Read a pcapng; a capture that cannot be read is reported, not raised.

    ``judge``: count only the packets of that interface (link); ``ingress``: also
    compare the order of requests there with ``judge``'s (:attr:`Wire.overtook`);
    ``trimmed_dscps``: the DSCPs the switch wrote on packets it trimmed; ``ev_formats``:
    each MRC sender's EV format by address (default UDP: EV = source port).
    """
    w = Wire(trimmed_dscps=tuple(trimmed_dscps), ev_formats=dict(ev_formats or {}))
    flows = _Flows()
    order: dict[str, list[bytes]] = {judge or "": [], ingress or "": []}
    try:
        for rec in dissect_file(path, keep_raw=True):
            # requests only: responses and ACKs travel the other way, and their order
            # relative to requests differs between the two links without any reordering
            if ingress and rec.interface in (judge, ingress) and rec.raw is not None \
                    and not rec.error and _is_request(rec):
                order[rec.interface or ""].append(rec.raw)
            if judge is None or rec.interface == judge:
                add(w, rec, flows)
    except (CaptureError, OSError) as e:
        w.error = f"capture unreadable: {e}"
    if ingress and judge:
        w.overtook = overtaking(order[ingress], order[judge])
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

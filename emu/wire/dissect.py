# SPDX-License-Identifier: GPL-2.0-only
"""``emu dissect``: one line (or one JSON object) per packet of a capture.

Decoding uses the struct codecs, not scapy, so a large capture reads fast and
the output is an independent second opinion next to Wireshark's. Each record
names the protocol and packet type and gives the fields engineers filter on:
PSN, QP, PDC ids, entropy / EV, flags, ICRC status. Packets that are not ours
are listed as such; packets that are ours but malformed carry ``error`` and
are counted, never dropped silently.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from emu.wire import icrc as _icrc
from emu.wire import pcapio
from emu.wire.errors import DecodeError
from emu.wire.frames import Datagram, ip_start, parse_ip

ROCE_PORT = 4791
UET_PORT = 4793
#: emu's MRC port (``emu/transports/mrc/engine.py``: the reconstructions' 4971; an MRC
#: packet to 4791 is told from RoCEv2 by its opcode)
MRC_PORT = 4971
UET_NATIVE_PROTO = 253


@dataclass
class Record:
    """What ``emu dissect`` says about one frame."""

    no: int
    time: float
    interface: str | None = None
    src: str | None = None
    dst: str | None = None
    sport: int | None = None
    dport: int | None = None
    protocol: str = "-"
    type: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    icrc: str | None = None
    error: str | None = None
    dscp: int = 0             # IP DSCP of the innermost IP header
    flow_label: int | None = None  # the innermost IPv6 header's flow label (None: IPv4)
    #: the innermost IP packet's L4 bytes (UDP payload), only with ``keep_raw``: lets a
    #: caller compare packets byte for byte; not part of the JSON form
    raw: bytes | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("raw")
        return d

    def line(self) -> str:
        """The human-readable one-line form."""
        parts = [f"{self.no:6d}", f"{self.time:14.6f}"]
        if self.interface:
            parts.append(self.interface)
        if self.src:
            parts.append(f"{_endpoint(self.src, self.sport)} > {_endpoint(self.dst, self.dport)}")
        parts.append(f"{self.protocol:6s}")
        parts.append(self.type)
        parts.extend(f"{k}={_fmt(k, v)}" for k, v in self.fields.items())
        if self.dscp:
            parts.append(f"dscp={self.dscp}")
        if self.flags:
            parts.append("[" + ",".join(self.flags) + "]")
        if self.icrc:
            parts.append(f"ICRC {self.icrc}")
        if self.error:
            parts.append(f"MALFORMED: {self.error}")
        return " ".join(p for p in parts if p)


#: fields shown in decimal; identifiers, addresses, keys and PSNs are shown in hex
_DECIMAL = ("len", "length", "bytes", "count", "ooo", "msn", "mpr", "status")


def _fmt(key: str, v: Any) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v) if key.endswith(_DECIMAL) else f"0x{v:x}"
    return str(v)


def _endpoint(addr: str | None, port: int | None) -> str:
    if port is None:
        return str(addr)
    return f"[{addr}]:{port}" if addr and ":" in addr else f"{addr}:{port}"


# --------------------------------------------------------------------------
# Per-protocol summarisers: fill a Record from a Datagram.
# --------------------------------------------------------------------------

def _roce(rec: Record, dg: Datagram) -> None:
    from emu.wire import ev, summary
    from emu.wire.codec import mrc, roce

    pkt = roce.decode_packet(dg.l4)
    bth = pkt.bth
    is_mrc = bth.opcode in mrc.MRC_OPCODES
    rec.protocol = "MRC" if is_mrc else "RoCEv2"
    rec.type = roce.opcode_name(bth.opcode)
    rec.fields["qp"] = bth.dqpn
    rec.fields["psn"] = bth.psn
    rec.flags += [n for n, on in (("SE", bth.solicited), ("AckReq", bth.ackreq),
                                  ("FECN", bth.fecn), ("BECN", bth.becn)) if on]
    if is_mrc:
        rec.flags += [n for n, on in (("RTX", bth.rtx), ("TS", bth.ts)) if on]
        mode = ev.EVMode.STEV if dg.version == 6 else ev.EVMode.UDP
        rec.fields["ev"] = ev.ev_from_fields(dg.sport or 0, dg.flow_label, mode)
    for h in pkt.headers:
        rec.fields.update(summary.header_summary(h))
    if len(pkt.payload):
        rec.fields["len"] = len(pkt.payload)
    rec.icrc = "ok" if _icrc.compute_icrc(dg.ip) == pkt.icrc else "BAD"


def _uet(rec: Record, dg: Datagram, native: bool) -> None:
    from emu.wire import summary
    from emu.wire.codec import uet

    pkt = uet.decode_packet(dg.l4, native_ip=native)
    rec.protocol = "UET"
    rec.type, fields, flags = summary.uet_summary(pkt)
    if dg.sport is not None:
        fields = {"entropy": dg.sport, **fields}
    rec.fields.update(fields)
    rec.flags += flags


def summarise(no: int, frame: pcapio.Frame, roce_port: int = ROCE_PORT,
              uet_port: int = UET_PORT, uet_proto: int = UET_NATIVE_PROTO,
              keep_raw: bool = False, mrc_port: int = MRC_PORT) -> Record:
    """Describe one frame; never raises for bad packet bytes."""
    rec = Record(no, frame.time, frame.interface)
    try:
        start = ip_start(frame.data, frame.linktype)
        dg = parse_ip(memoryview(frame.data)[start:])
    except DecodeError as e:
        rec.type = "not IP" if "not IP" in e.reason or "not an IP" in e.reason else "malformed"
        if rec.type == "malformed":
            rec.error = str(e)
        return rec
    rec.src, rec.dst, rec.sport, rec.dport = dg.src, dg.dst, dg.sport, dg.dport
    rec.dscp = dg.dscp
    if dg.version == 6:
        rec.flow_label = dg.flow_label
    if keep_raw:
        rec.raw = bytes(dg.l4)
    if dg.encap:
        rec.flags.append("encap:" + " / ".join(dg.encap))
    if dg.ecn == 3:
        rec.flags.append("CE")
    try:
        if dg.dport == roce_port or dg.dport == mrc_port:
            _roce(rec, dg)
        elif dg.dport == uet_port:
            _uet(rec, dg, native=False)
        elif dg.sport is None and dg.proto == uet_proto:
            _uet(rec, dg, native=True)
        else:
            rec.type = "UDP" if dg.sport is not None else f"IP proto {dg.proto}"
    except DecodeError as e:
        rec.error = str(e)
    return rec


def dissect_file(path: str, keep_raw: bool = False, **ports: int) -> Iterator[Record]:
    """Records for every frame of a pcap/pcapng file (raises pcapio.CaptureError)."""
    for no, frame in enumerate(pcapio.read_frames(path), 1):
        yield summarise(no, frame, keep_raw=keep_raw, **ports)


def add_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dissect", help="print every packet of a capture as emu decodes it",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("file", help="pcap or pcapng file")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--all", action="store_true",
                   help="also list packets that are not RoCEv2, MRC or UET")
    p.add_argument("--roce-port", type=int, default=ROCE_PORT, metavar="PORT")
    p.add_argument("--uet-port", type=int, default=UET_PORT, metavar="PORT")
    p.add_argument("--mrc-port", type=int, default=MRC_PORT, metavar="PORT")
    p.add_argument("--uet-proto", type=int, default=UET_NATIVE_PROTO, metavar="N",
                   help="IP protocol of native-IP UET (default %(default)s)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from emu.errors import UserError

    counts = {"packets": 0, "shown": 0, "malformed": 0, "icrc_bad": 0}
    try:
        for rec in dissect_file(args.file, roce_port=args.roce_port, uet_port=args.uet_port,
                                uet_proto=args.uet_proto, mrc_port=args.mrc_port):
            counts["packets"] += 1
            counts["malformed"] += rec.error is not None
            counts["icrc_bad"] += rec.icrc == "BAD"
            if rec.protocol == "-" and not args.all and rec.error is None:
                continue
            counts["shown"] += 1
            print(json.dumps(rec.to_json()) if args.json else rec.line())
    except pcapio.CaptureError as e:
        raise UserError(str(e)) from None
    sys.stdout.flush()
    if not args.json:
        print(f"# {counts['packets']} packets, {counts['shown']} shown, "
              f"{counts['malformed']} malformed, {counts['icrc_bad']} with a bad ICRC",
              file=sys.stderr)
    return 0

# SPDX-License-Identifier: GPL-2.0-only
"""A capture holding every header type of RoCEv2, UET and MRC.

``emu sample -w FILE`` writes it; ``scripts/demo`` prints it as emu and as
tshark decode it; the tests use it as the set of known-good packets for the
Wireshark, ``emu dissect`` and fuzz checks. Field values are distinct and
non-zero where possible so a decoder that reads the wrong offset shows it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from emu.wire import roce as R

MAC_A, MAC_B = "02:00:00:00:00:01", "02:00:00:00:00:02"
V4_A, V4_B = "10.0.1.1", "10.0.2.1"
V6_A, V6_B = "fd00:1::1", "fd00:2::1"


@dataclass
class Sample:
    """One sample packet: protocol ("roce", "mrc", "uet"), a name, the frame."""

    protocol: str
    name: str
    frame: Packet
    native_ip: bool = False


def _v4(sport: int, dport: int) -> Packet:
    return Ether(src=MAC_A, dst=MAC_B) / IP(src=V4_A, dst=V4_B, flags="DF", id=0) / UDP(
        sport=sport, dport=dport)


def _v6(sport: int, dport: int, fl: int = 0) -> Packet:
    return Ether(src=MAC_A, dst=MAC_B) / IPv6(src=V6_A, dst=V6_B, fl=fl) / UDP(
        sport=sport, dport=dport)


_HEADER_VALUES: dict[str, dict[str, int]] = {
    "RETH": {"va": 0x00007F0012345000, "rkey": 0x1234ABCD, "dmalen": 4096},
    "AETH": {"syndrome": 0x1F, "msn": 0x000123},
    "ImmDt": {"imm": 0xDEADBEEF},
    "IETH": {"rkey": 0x0BADC0DE},
    "AtomicETH": {"va": 0x00007F0000001000, "rkey": 0x2222, "swap_add": 7, "compare": 5},
    "AtomicAckETH": {"orig_data": 0x1122334455667788},
    "DETH": {"qkey": 0x80010000, "src_qp": 0x000042},
    "CNPPadding": {},
}


#: operations whose packets carry no payload: READ request, ACK, atomic ACK, atomics
_NO_PAYLOAD = {0x0C, 0x11, 0x12, 0x13, 0x14}


def roce_samples() -> list[Sample]:
    """One packet per RoCEv2 opcode (RC, UC, UD, CNP) with its headers and a short payload."""
    out = []
    for op in sorted(o for o in R.OPCODE_CHAINS if o < 0xC0):
        name = R.OPCODE_NAMES[op]
        cnp = op == R.CNP_OPCODE
        bth = R.BTH(opcode=op, dqpn=0x000100 + op, psn=0x010000 + op,
                    ackreq=0 if cnp else op & 1, becn=int(cnp))
        pkt = _v4(0xC000 + op, R.ROCE_UDP_PORT) / bth
        for cls in R.header_chain(bth):
            pkt = pkt / cls(**_HEADER_VALUES[cls.__name__])
        if (op & 0x1F) not in _NO_PAYLOAD and op != R.CNP_OPCODE:
            pkt = pkt / Raw(bytes(range(32)))
        out.append(Sample("roce", name, pkt))
    return out


def mrc_samples() -> list[Sample]:
    """Every MRC opcode over IPv6 with a STEV entropy value, plus TS, RTX and SRv6 variants."""
    from emu.wire import mrc as M
    from emu.wire.codec import mrc as C

    def frame(ev: int, pkt: Packet) -> Packet:
        return Ether(src=MAC_A, dst=MAC_B) / M.ip6_udp(V6_A, V6_B, ev) / pkt

    out = []
    for i, op in enumerate(sorted(C.WRITE_OPCODES)):
        imm = 0xC0FFEE00 + i if op in C.WRITE_IMM_OPCODES else None
        pkt = M.write(op, dqpn=0x000200, psn=0x000100 + i, rqmsn=7, msn=3 + i,
                      va=0x7F0000000000 + 4096 * i, rkey=0xA5A5, dmalen=4096 * 4,
                      payload=bytes(range(48)), imm=imm, ackreq=int(op == C.MRC_WRITE_LAST))
        out.append(Sample("mrc", C.MRC_OPCODES[op], frame(0x1234_0000 + i, pkt)))
    ts = M.write(C.MRC_WRITE_MIDDLE, dqpn=0x200, psn=0x123, va=0x7F0000001000, rkey=0xA5A5,
                 dmalen=4096, payload=bytes(32), tx_timestamp=0x4321, rtx=1)
    out.append(Sample("mrc", "MRC_WRITE_MIDDLE+TSETH+RTX", frame(0xBEEF_0001, ts)))
    out.append(Sample("mrc", "MRC_TRANSPORT_ACK", frame(0x0001_0002, M.transport_ack(
        dqpn=0x201, psn=0x105, syndrome=0x1F, msn=9))))
    out.append(Sample("mrc", "MRC_RELIABILITY_SACK", frame(0x0001_0003, M.sack(
        dqpn=0x201, m=C.SACK_M_SKIP_ONCE, ack_psn_offset=-2, ev=0x1234_0002, spdcid=0x11,
        dpdcid=0x22, cack_psn=0x104, mpr=1, sack_offset=2, sack_bitmap=0b1011,
        cc={"tx_timestamp": 0x4321, "ooo_count": 3, "r_c": 1, "rcv_cwnd_pen": 5,
            "rcvd_bytes": 0x40}))))
    out.append(Sample("mrc", "MRC_RELIABILITY_NACK", frame(0x0001_0004, M.nack(
        dqpn=0x201, nack_reason=C.NACK_TRIMMED, ev=0x1234_0003, spdcid=0x11, dpdcid=0x22,
        nack_psn=0x106, tx_timestamp=0x55))))
    out.append(Sample("mrc", "MRC_RELIABILITY_PROBE", frame(0x0001_0005, M.probe(
        dqpn=0x201, probe_id=0x77, spdcid=0x11, dpdcid=0x22, tx_timestamp=0x66))))
    out.append(Sample("mrc", "MRC_ENDPOINT_REQUEST", frame(0x0001_0006, M.endpoint_request(
        request_id=0x0042, op=C.ERTH_PORT_STATUS_UPDATE, port_status_mask=0b1101,
        tx_timestamp=0x99))))
    out.append(Sample("mrc", "MRC_ENDPOINT_RESPONSE", frame(0x0001_0007, M.endpoint_response(
        request_id=0x0042, op=C.ERTH_PORT_STATUS_UPDATE, port_status_mask=0b1111, num_ports=4,
        ev=0x0001_0006, tx_timestamp=0x99))))
    inner = M.ip6_udp(V6_A, V6_B, 0xCAFE_0001) / M.write(
        C.MRC_WRITE_ONLY, dqpn=0x200, psn=0x200, va=0x7F0000002000, rkey=0xA5A5, dmalen=64,
        payload=bytes(64))
    out.append(Sample("mrc", "MRC_WRITE_ONLY over SRv6", Ether(src=MAC_A, dst=MAC_B) /
                      M.srv6_encap(inner, outer_src="fc00:0:1::1", outer_dst="fc00:0:2:3:4::",
                                   segments=["fc00:0:9::"])))
    return out


def all_samples() -> list[Sample]:
    """Every sample packet of every protocol."""
    return roce_samples() + mrc_samples()  # + uet_samples()


def transport_payloads() -> list[tuple[str, str, bytes]]:
    """(protocol, name, bytes handed to the transport decoder) for every sample."""
    out = []
    for s in all_samples():
        if s.native_ip:
            ip = s.frame.getlayer(IP) or s.frame.getlayer(IPv6)
            out.append((s.protocol, s.name, bytes(ip.payload)))
        else:
            out.append((s.protocol, s.name, bytes(s.frame[UDP].payload)))
    return out


def write(path: str) -> int:
    """Write every sample to a pcap/pcapng file (by extension); returns the packet count."""
    from emu.wire.pcapio import LINKTYPE_ETHERNET, PcapngWriter

    samples = all_samples()
    if path.endswith(".pcapng"):
        with open(path, "wb") as f:
            w = PcapngWriter(f)
            for i, s in enumerate(samples):
                w.write(bytes(s.frame), time=1_700_000_000 + i * 1e-6,
                        interface=f"sample-{s.protocol}", linktype=LINKTYPE_ETHERNET)
    else:
        from scapy.utils import wrpcap
        frames = [s.frame for s in samples]
        for i, f in enumerate(frames):
            f.time = 1_700_000_000 + i * 1e-6
        wrpcap(path, frames)
    return len(samples)


def add_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sample", help="write a capture with every RoCEv2, UET and MRC header type")
    p.add_argument("-w", "--write", required=True, metavar="FILE",
                   help="output file (.pcapng for pcapng, anything else for pcap)")
    p.set_defaults(func=lambda a: print(f"wrote {write(a.write)} packets to {a.write}"))

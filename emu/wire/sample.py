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
        bth = R.BTH(opcode=op, dqpn=0x000100 + op, psn=0x010000 + op, ackreq=op & 1,
                    becn=int(op == R.CNP_OPCODE))
        pkt = _v4(0xC000 + op, R.ROCE_UDP_PORT) / bth
        for cls in R.header_chain(bth):
            pkt = pkt / cls(**_HEADER_VALUES[cls.__name__])
        if (op & 0x1F) not in _NO_PAYLOAD and op != R.CNP_OPCODE:
            pkt = pkt / Raw(bytes(range(32)))
        out.append(Sample("roce", name, pkt))
    return out


def all_samples() -> list[Sample]:
    """Every sample packet of every protocol."""
    return roce_samples() + mrc_samples() + uet_samples()


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

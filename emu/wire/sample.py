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

from emu.errors import UserError
from emu.outpath import cannot_write, check_file
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


def uet_samples() -> list[Sample]:
    """Every UET PDS type, SES header and extension header; UDP (v4, v6), native IP and TSS."""
    from emu.wire import uet as U
    from emu.wire import uet_defs as D

    T, NH, OP = D.PDS_TYPE, D.NEXT_HDR, D.SES_OPCODE
    pdc = {"spdcid": 0x0A01, "dpdcid": 0x0B02}
    job = {"ri_generation": 1, "job_id": 0x00ABCD, "pid_on_fep": 0x012, "resource_index": 0x034}
    data = bytes(range(64))

    def udp(entropy: int, *layers: Packet, v6: bool = False) -> Packet:
        pkt = (_v6 if v6 else _v4)(entropy, D.UET_UDP_PORT)
        for layer in layers:
            pkt = pkt / layer
        return pkt

    def req(t: str = "RUD_REQ", nh: str = "REQ_STD", psn: int = 0x1000, **kw: int) -> Packet:
        cls = U.PdsCcRequest if t.endswith("_CC_REQ") else U.PdsRequest
        extra = {"ccc_id": 3, "credit_target": 0x4000} if cls is U.PdsCcRequest else {}
        return cls(type=T[t], next_hdr=NH[nh], psn=psn, clear_psn_offset=-4, **pdc,
                   **extra, **kw)

    def std(opcode: str, mid: int = 0x77, **kw: int) -> Packet:
        som = kw.pop("som", 1)
        cls = U.SesStandardRequestSom if som else U.SesStandardRequest
        fields = {"message_id": mid, "buffer_offset": 0x7F0000000000, "initiator": 0x11,
                  "mem_key_match_bits": 0xC0DE, "request_length": 4096, **job, **kw}
        if som:
            fields.setdefault("header_data", 0xFEEDFACE)
        return cls(opcode=OP[opcode], som=som, eom=1, **fields)

    out = [
        Sample("uet", "RUD_REQ+SYN / SES std WRITE (SOM)", udp(
            0xC001, U.PdsRequestSyn(type=T["RUD_REQ"], next_hdr=NH["REQ_STD"], ar=1,
                                    psn=0x98765432, spdcid=0x3456, pdc_info=0, psn_offset=5),
            std("WRITE"), Raw(data))),
        Sample("uet", "RUD_REQ / SES std SEND (middle)", udp(
            0xC002, req(psn=0x98765433), std("SEND", som=0, payload_length=64,
                                            message_offset=4096), Raw(data))),
        Sample("uet", "ROD_REQ / SES small WRITE", udp(
            0xC003, req("ROD_REQ", "REQ_SMALL"), U.SesSmallRequest(
                opcode=OP["WRITE"], som=1, eom=1, request_length=64,
                buffer_offset=0x1000, **job), Raw(data))),
        Sample("uet", "RUD_REQ / SES medium SEND", udp(
            0xC004, req(nh="REQ_MEDIUM", retx=1), U.SesMediumRequest(
                opcode=OP["SEND"], som=1, eom=1, hd=1, request_length=64, buffer_offset=0x55,
                initiator=0x11, mem_key_match_bits=0x99, **job), Raw(data))),
        Sample("uet", "RUD_CC_REQ / SES std TAGGED_SEND", udp(
            0xC005, req("RUD_CC_REQ"), std("TAGGED_SEND", mem_key_match_bits=0x1234_5678),
            Raw(data))),
        Sample("uet", "ROD_CC_REQ+SYN / SES std READ", udp(
            0xC006, U.PdsCcRequestSyn(type=T["ROD_CC_REQ"], next_hdr=NH["REQ_STD"], ar=1,
                                      psn=0x2000, spdcid=0x0A01, psn_offset=0, ccc_id=1,
                                      credit_target=0x8000), std("READ"))),
        Sample("uet", "RUD_REQ / SES std ATOMIC / atomic ext", udp(
            0xC007, req(), std("ATOMIC", request_length=8),
            U.SesAtomic(amo_opcode=D.AMO_OPCODE["SUM"], datatype=3), Raw(bytes(8)))),
        Sample("uet", "RUD_REQ / SES std FETCHING_ATOMIC / compare-and-swap ext", udp(
            0xC008, req(), std("FETCHING_ATOMIC", request_length=8),
            U.SesCompareSwap(amo_opcode=D.AMO_OPCODE["CSWAP"], datatype=3, compare=5,
                             swap=7))),
        Sample("uet", "RUD_REQ / SES std RENDEZVOUS_SEND / rendezvous ext", udp(
            0xC009, req(), std("RENDEZVOUS_SEND", request_length=1 << 20),
            U.SesRendezvous(eager_length=64, read_pid_on_fep=0x12, read_resource_index=0x34,
                            read_offset=0x2000, read_match_bits=0xABC), Raw(data))),
        Sample("uet", "RUDI_REQ / SES small WRITE", udp(
            0xC00A, U.PdsRudi(type=T["RUDI_REQ"], next_hdr=NH["REQ_SMALL"], pkt_id=0x99887766),
            U.SesSmallRequest(opcode=OP["WRITE"], som=1, eom=1, request_length=64, **job),
            Raw(data))),
        Sample("uet", "RUDI_RESP / SES response", udp(
            0xC00B, U.PdsRudi(type=T["RUDI_RESP"], next_hdr=NH["RSP"], pkt_id=0x99887766),
            U.SesResponse(opcode=D.RSP_OPCODE["RESPONSE"], return_code=D.RETURN_CODE["OK"],
                          message_id=0x77, job_id=0xABCD, modified_length=64))),
        Sample("uet", "UUD_REQ / SES std DATAGRAM_SEND", udp(
            0xC00C, U.PdsUud(type=T["UUD_REQ"], next_hdr=NH["REQ_STD"]),
            std("DATAGRAM_SEND"), Raw(data))),
        Sample("uet", "ACK / SES response", udp(
            0xC001, U.PdsAck(type=T["ACK"], next_hdr=NH["RSP"], ack_psn_offset=1,
                             cack_psn=0x98765432, spdcid=0x0B02, dpdcid=0x3456),
            U.SesResponse(opcode=D.RSP_OPCODE["RESPONSE"], return_code=D.RETURN_CODE["OK"],
                          message_id=0x77, job_id=0xABCD, modified_length=4096))),
        Sample("uet", "ACK / SES response with data (READ)", udp(
            0xC006, U.PdsAck(type=T["ACK"], next_hdr=NH["RSP_DATA"], cack_psn=0x2000,
                             spdcid=0x0B02, dpdcid=0x0A01),
            U.SesResponseData(opcode=D.RSP_OPCODE["RESPONSE_W_DATA"], return_code=1,
                              message_id=0x78, job_id=0xABCD, read_req_message_id=0x77,
                              payload_length=64, modified_length=64, message_offset=0),
            Raw(data))),
        Sample("uet", "ACK / SES small response with data", udp(
            0xC006, U.PdsAck(type=T["ACK"], next_hdr=NH["RSP_DATA_SMALL"], cack_psn=0x2001,
                             spdcid=0x0B02, dpdcid=0x0A01),
            U.SesSmallResponseData(opcode=D.RSP_OPCODE["RESPONSE_W_DATA"], return_code=1,
                                   payload_length=64), Raw(data))),
        Sample("uet", "ACK_CC NSCC", udp(
            0xC002, U.PdsAckCcNscc(type=T["ACK_CC"], m=1, cack_psn=0x98765433, spdcid=0x0B02,
                                   dpdcid=0x3456, cc_type=0, mpr=1, sack_psn_offset=2,
                                   sack_bitmap=0b1101, service_time=0x120, restore_cwnd=1,
                                   rcv_cwnd_pend=3, rcvd_bytes=0x4000, ooo_count=2))),
        Sample("uet", "ACK_CC credit", udp(
            0xC003, U.PdsAckCcCredit(type=T["ACK_CC"], cack_psn=0x1000, spdcid=0x0B02,
                                     dpdcid=0x0A01, cc_type=1, mpr=1, credit=0x8000,
                                     ooo_count=1))),
        Sample("uet", "ACK_CCX", udp(
            0xC004, U.PdsAckCcx(type=T["ACK_CCX"], cack_psn=0x1001, spdcid=0x0B02,
                                dpdcid=0x0A01, mpr=1, sack_bitmap=1, ccx_state=(1 << 100) | 5))),
        Sample("uet", "NACK TRIMMED", udp(
            0xC005, U.PdsNack(type=T["NACK"], nack_code=D.NACK_CODE["TRIMMED"],
                              nack_psn=0x1002, spdcid=0x0B02, dpdcid=0x0A01,
                              nack_payload=0x1003))),
        Sample("uet", "NACK_CCX", udp(
            0xC006, U.PdsNackCcx(type=T["NACK_CCX"], nack_code=D.NACK_CODE["NEW_START_PSN"],
                                 nack_psn=0x1004, spdcid=0x0B02, dpdcid=0x0A01,
                                 nack_payload=0x5000, nccx_state=0xABC))),
    ]
    for ctl in ("ACK_REQ", "CLEAR", "CLOSE", "PROBE", "CREDIT"):
        out.append(Sample("uet", f"CP {ctl}", udp(0xC010, U.PdsControl(
            type=T["CP"], ctl_type=D.CTL_TYPE[ctl], ar=int(ctl in ("ACK_REQ", "CLOSE")),
            psn=0x1005, probe_opaque=0x42 if ctl == "PROBE" else 0,
            ctl_payload=0x100 if ctl == "CREDIT" else 0, **pdc))))
    out.append(Sample("uet", "CP NOOP+SYN", udp(0xC011, U.PdsControlSyn(
        type=T["CP"], ctl_type=D.CTL_TYPE["NOOP"], psn=0x1006, spdcid=0x0A01, psn_offset=6))))
    out.append(Sample("uet", "TSS / ciphertext", udp(0xC012, U.UetTss(
        an=1, sdi=0x000123, tsc=0x0000_0001_0000_0002), Raw(bytes(48)))))
    out.append(Sample("uet", "TSS+SSI / ciphertext", udp(0xC013, U.UetTssSsi(
        sdi=0x000124, ssi=0xCAFE, tsc=3), Raw(bytes(48)))))
    out.append(Sample("uet", "RUD_REQ / SES std WRITE over IPv6", udp(
        0xC014, req(psn=0x98765434), std("WRITE", mid=0x79), Raw(data), v6=True)))
    native = Ether(src=MAC_A, dst=MAC_B) / IP(src=V4_A, dst=V4_B, proto=U.UET_IP_PROTO) / \
        U.UetEntropy(entropy=0xE001) / req(psn=0x98765435) / std("WRITE", mid=0x7A) / Raw(data)
    out.append(Sample("uet", "native IP: entropy / RUD_REQ / SES std WRITE", native,
                      native_ip=True))
    return out


def all_samples() -> list[Sample]:
    """Every sample packet of every protocol."""
    return roce_samples() + mrc_samples() + uet_samples()


def transport_payloads() -> list[tuple[str, str, bytes]]:
    """(decoder, name, bytes handed to the transport decoder) for every sample.

    decoder is the protocol, or ``uet-native`` for native-IP UET (IP payload).
    """
    out = []
    for s in all_samples():
        if s.native_ip:
            ip = s.frame.getlayer(IP) or s.frame.getlayer(IPv6)
            out.append((s.protocol + "-native", s.name, bytes(ip.payload)))
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
    p.set_defaults(func=_main)


def _main(a: argparse.Namespace) -> int:
    """``emu sample -w FILE``: an unwritable FILE is one line (exit 2), not a traceback."""
    check_file(a.write)
    try:
        n = write(a.write)
    except OSError as e:
        raise UserError(cannot_write(a.write, e)) from None
    print(f"wrote {n} packets to {a.write}")
    return 0

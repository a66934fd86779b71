# SPDX-License-Identifier: GPL-2.0-only
"""Seeded hostile datagrams for a NIC daemon's RoCEv2 (4791), UET (4793) and MRC (4971)
ports.

Six classes, in turn (issue #14's acceptance list, and MRC since issue #35):

* ``random`` — noise of any length to any of the ports;
* ``mutated`` — a sample capture's packet (:mod:`emu.wire.sample`) with 1–4
  bytes changed (a RoCEv2 one keeps its old ICRC, so it fails the check);
* ``roce_icrc`` — a RoCEv2 RC packet with a random opcode, PSN, flags and
  extension bytes, aimed at the low QP numbers daemons hand out first, with
  the *correct* ICRC for the sender's addresses: it reaches the engine;
* ``uet_header`` — a well-formed UET packet (request, ACK, NACK or CP) with
  random PDCIDs, PSNs and fields;
* ``uet_syn`` — a forged RUD request with SYN from the low SPDCIDs a daemon's
  initiator uses, at a random Start_PSN, half with a valid SES WRITE header
  (a random R_Key), half with none or garbage;
* ``mrc_icrc`` — an MRC packet: a random opcode of MRC's range (defined or not),
  QP number, PSN and header bytes, with the correct ICRC, so it reaches the
  MRC engine's parser.

Why a corpus and not a generator in the sender: the sender runs as an
unprivileged user with the system Python (no access to the emu venv), and
generation costs more per packet than sending; :func:`corpus` writes the
packets once, :mod:`emu.chaos.send` replays them at a rate.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path

from emu.nic.framing import framer_for
from emu.transports.roce import packets as P
from emu.wire.codec.uet import (
    PdsAckCcNscc,
    PdsControl,
    PdsNack,
    PdsRequest,
    PdsRequestSyn,
    encode_packet,
)
from emu.wire.codec.uet_ses import SesStandardRequestSom

ROCE_PORT, UET_PORT, MRC_PORT = 4791, 4793, 4971
CLASSES = ("random", "mutated", "roce_icrc", "uet_header", "uet_syn", "mrc_icrc")
_REC = struct.Struct("!HH")  # corpus record: destination port, length


def _samples() -> dict[str, list[bytes]]:
    from emu.wire import sample  # scapy: only when a corpus is made
    out: dict[str, list[bytes]] = {"roce": [], "uet": []}
    for proto, _name, payload in sample.transport_payloads():
        if proto in out:
            out[proto].append(payload)
    return out


class Fuzzer:
    """Packets of the six classes from ``seed``; ``src``/``sport``/``dst`` are the
    addresses the sender will use (the RoCEv2 ICRC covers them)."""

    def __init__(self, seed: int, *, src: str, sport: int, dst: str,
                 qpns: range = range(2, 34), spdcids: range = range(1, 9)) -> None:
        self.rng = random.Random(f"emu-chaos-{seed}")
        self.src, self.sport, self.dst = src, sport, dst
        self.qpns, self.spdcids = qpns, spdcids
        self.samples = _samples()
        self.framer = framer_for("roce")

    def packets(self, n: int) -> Iterator[tuple[str, int, bytes]]:
        """``n`` packets as (class, destination port, UDP payload), classes in turn."""
        for i in range(n):
            cls = CLASSES[i % len(CLASSES)]
            port, data = getattr(self, "_" + cls)()
            yield cls, port, data

    def _random(self) -> tuple[int, bytes]:
        r = self.rng
        n = r.choice((r.randrange(0, 16), r.randrange(0, 128), r.randrange(0, 1400)))
        return r.choice((ROCE_PORT, UET_PORT, MRC_PORT)), r.randbytes(n)

    def _mutated(self) -> tuple[int, bytes]:
        r = self.rng
        proto = r.choice(("roce", "uet"))
        p = bytearray(r.choice(self.samples[proto]))
        for _ in range(r.randrange(1, 5)):
            p[r.randrange(len(p))] = r.randrange(256)
        return (ROCE_PORT if proto == "roce" else UET_PORT), bytes(p)

    def _roce_icrc(self) -> tuple[int, bytes]:
        r = self.rng
        op = r.choice((*range(0x00, 0x15), 0x16, 0x17))
        ext = r.randbytes(r.choice((0, 4, 16, 28)))
        buf = P.build(op, r.choice(self.qpns), r.randrange(1 << 24), ext,
                      r.randbytes(r.choice((0, 64, 1024, 4096))), ackreq=r.randrange(2),
                      se=r.randrange(2))
        self.framer.seal(buf, self.src, self.sport, self.dst, ROCE_PORT)
        return ROCE_PORT, bytes(buf)

    def _mrc_icrc(self) -> tuple[int, bytes]:
        r = self.rng
        op = r.randrange(0xC0, 0xE0)  # MRC's manufacturer-specific range, holes included
        ext = r.randbytes(r.choice((0, 4, 16, 20, 24, 36, 40)))
        buf = P.build(op, r.choice(self.qpns), r.randrange(1 << 24), ext,
                      r.randbytes(r.choice((0, 64, 1024, 4096))), ackreq=r.randrange(2),
                      se=r.randrange(2))
        self.framer.seal(buf, self.src, self.sport, self.dst, MRC_PORT)
        return MRC_PORT, bytes(buf)

    def _ses(self) -> SesStandardRequestSom:
        r = self.rng
        return SesStandardRequestSom(opcode=1, som=1, eom=r.randrange(2),
                                     message_id=r.randrange(1 << 16),
                                     pid_on_fep=r.randrange(4096),
                                     buffer_offset=r.randrange(1 << 64),
                                     mem_key_match_bits=r.randrange(1 << 64),
                                     request_length=r.randrange(1 << 20))

    def _uet_header(self) -> tuple[int, bytes]:
        r = self.rng
        k = r.randrange(4)
        psn, spd, dpd = r.randrange(1 << 32), r.randrange(1 << 16), r.randrange(1 << 16)
        if k == 0:
            h = PdsRequest(type=r.choice((2, 3)), next_hdr=3, ar=r.randrange(2),
                           retx=r.randrange(2), clear_psn_offset=r.randrange(-32768, 32768),
                           psn=psn, spdcid=spd, dpdcid=dpd)
            return UET_PORT, bytes(encode_packet(h, self._ses(), None, r.randbytes(
                r.choice((0, 64, 4096)))))
        if k == 1:
            h = PdsAckCcNscc(cack_psn=psn, spdcid=spd, dpdcid=dpd, mpr=r.randrange(256),
                             ack_psn_offset=r.randrange(-32768, 32768),
                             sack_psn_offset=r.randrange(-32768, 32768),
                             sack_bitmap=r.randrange(1 << 64))
        elif k == 2:
            h = PdsNack(nack_code=r.randrange(256), nack_psn=psn, spdcid=spd, dpdcid=dpd,
                        nack_payload=r.randrange(1 << 32))
        else:
            h = PdsControl(ctl_type=r.randrange(16), ar=r.randrange(2), psn=psn, spdcid=spd,
                           dpdcid=dpd, ctl_payload=r.randrange(1 << 32))
        return UET_PORT, bytes(encode_packet(h))

    def _uet_syn(self) -> tuple[int, bytes]:
        r = self.rng
        off = r.randrange(4096)
        h = PdsRequestSyn(type=2, next_hdr=3, ar=1, psn=r.randrange(1 << 32),
                          spdcid=r.choice(self.spdcids), psn_offset=off)
        k = r.randrange(4)
        if k < 2:
            return UET_PORT, bytes(encode_packet(h, self._ses(), None, r.randbytes(64)))
        if k == 2:
            h.next_hdr = 0  # no SES header at all
            return UET_PORT, bytes(encode_packet(h))
        return UET_PORT, bytes(encode_packet(h)) + r.randbytes(r.randrange(1, 60))


def corpus(path: Path, fuzzer: Fuzzer, n: int) -> dict[str, int]:
    """Write ``n`` packets to ``path`` (records of port, length, bytes) for
    :mod:`emu.chaos.send`; returns how many of each class."""
    counts = dict.fromkeys(CLASSES, 0)
    with open(path, "wb") as f:
        for cls, port, data in fuzzer.packets(n):
            f.write(_REC.pack(port, len(data)) + data)
            counts[cls] += 1
    return counts


#: engine counters that each count one received datagram that changed nothing besides
#: a reply (duplicates re-ACKed, PSNs refused with a NACK, ...), beside every ``rx_drop_*``
_NOOP = {"roce": ("rx_duplicates", "rx_duplicate_responses", "rx_out_of_sequence",
                  "rx_ack_old"),
         "uet": ("rx_duplicate", "rx_psn_oor_window", "rx_mode_mismatch",
                 "rx_rudi_resp_unknown", "rx_rudi_nack_unknown", "rx_close_early"),
         "mrc": ("rx_duplicate", "rx_stale", "rx_out_of_window", "rx_trimmed",
                 "rx_stale_ack", "rx_port_update_unknown", "rx_ev_probes")}
#: ``rx_drop_*`` counters that count a subset of another counter of the set
_SUBSETS = frozenset({"rx_drop_bad_duplicate"})


def rejected(engine: dict[str, int], transport: str) -> int:
    """How many received datagrams an engine's counters say it refused (dropped, or
    answered without a change of state) — what a fuzz run's packets must add up to."""
    return (sum(v for k, v in engine.items() if k.startswith("rx_drop_") and k not in _SUBSETS)
            + sum(engine.get(k, 0) for k in _NOOP[transport]))

# SPDX-License-Identifier: GPL-2.0-only
"""How long a transport packet's headers are, as tables the kernel trimmer indexes.

Why tables: the tc BPF program (``bpf/port.bpf.c``) must cut a packet after its
transport headers, as :mod:`emu.switch.trim` does with emu's codecs. Restating the
codecs' rules in C would be a second copy that drifts; instead the loader asks the
codecs here — for every opcode, PDS type, next-header value, SES opcode and AMO
opcode — and the program only looks the answers up. What the program still reads
from the packet is which entry applies (the BTH opcode and TS bit; the PDS type and
its SYN/SP bit; next_hdr, the SOM bit, the SES opcode and the AMO opcode).

A size of 0 (0xFF for RoCE) means "not trimmed here": an unknown opcode or type, or
a UET packet that is not a request (acknowledgements and control packets carry
nothing after their headers to cut).
"""

from __future__ import annotations

from functools import cache

from emu.wire import uet_defs as U
from emu.wire.codec import roce as RC
from emu.wire.codec import uet as UC
from emu.wire.codec.uet_pds import PDS_CLASSES

#: PDS types whose packets carry data to cut (requests), and TSS (type 1: its payload
#: is the ciphertext)
_TRIMMABLE_PDS = ("UetTss", "UetTssSsi", "PdsRequest", "PdsRequestSyn", "PdsRudi", "PdsUud",
                  "PdsCcRequest", "PdsCcRequestSyn")


@cache
def roce_ext() -> bytes:
    """512 bytes: the extension headers' size after the BTH, by [TS bit][opcode] (0xFF:
    an opcode the codec does not know). MRC's data opcodes carry TSETH when TS is set."""
    out = bytearray(b"\xff" * 512)
    for ts in (0, 1):
        for op in range(256):
            try:
                chain = RC.chain_for(RC.BTH(opcode=op, ts=ts))
            except Exception:  # noqa: BLE001 - an opcode the codec refuses: not trimmed
                continue
            size = sum(h.SIZE for h in chain)
            if size < 0xFF:
                out[ts * 256 + op] = size
    return bytes(out)


@cache
def uet_pds() -> bytes:
    """64 bytes: the PDS (or TSS) header size by [type][bit], the bit being SP for TSS
    and SYN for the others (what :func:`emu.wire.uet_defs.pds_layout` reads)."""
    out = bytearray(64)
    for t in range(32):
        for v in (0, 1):
            buf = bytearray(16)
            buf[0] = (t << 3) | (0x04 if t == 1 and v else 0)
            buf[1] = 0x04 if t != 1 and v else 0
            name = U.pds_layout(buf)
            if name in _TRIMMABLE_PDS:  # (PDS_CLASSES has the TSS layouts too)
                out[t * 2 + v] = PDS_CLASSES[name].SIZE
    return bytes(out)


@cache
def uet_ses() -> tuple[bytes, bytes]:
    """(32 bytes: the SES header size by [next_hdr][SOM]; 16 bytes: by next_hdr, 1 a
    request layout, 2 a standard request — where an extension header may follow)."""
    sizes, req = bytearray(32), bytearray(16)
    for nh in range(16):
        for som in (0, 1):
            buf = bytes([0, som]) + bytes(62)
            name = U.ses_layout(nh, buf) if nh else None
            if name is not None:
                sizes[nh * 2 + som] = UC.SES_CLASSES[name].SIZE
                if name in U.SES_REQUEST_LAYOUTS:
                    req[nh] = 2 if name.startswith("SesStandardRequest") else 1
    return bytes(sizes), bytes(req)


@cache
def uet_ext() -> tuple[bytes, bytes, bytes]:
    """(64 bytes by SES opcode: 1 atomic, 2 rendezvous; 256 bytes by AMO opcode: 1 the
    compare-and-swap header; 3 bytes: the atomic, compare-and-swap and rendezvous
    headers' sizes), from :func:`emu.wire.uet_defs.ext_layout`."""
    op_kind, cas = bytearray(64), bytearray(256)
    for op in range(64):
        if U.ext_layout("SesSmallRequest", op, b"\x00") is not None:
            op_kind[op] = 1
        elif U.ext_layout("SesStandardRequest", op, b"\x00") == "SesRendezvous":
            op_kind[op] = 2
    atomic_op = next((op for op in range(64) if op_kind[op] == 1), None)
    for amo in range(256):
        if atomic_op is not None and \
                U.ext_layout("SesSmallRequest", atomic_op, bytes([amo])) == "SesCompareSwap":
            cas[amo] = 1
    sizes = bytes(UC.SES_CLASSES[n].SIZE for n in ("SesAtomic", "SesCompareSwap",
                                                   "SesRendezvous"))
    return bytes(op_kind), bytes(cas), sizes

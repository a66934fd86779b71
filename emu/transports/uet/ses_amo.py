# SPDX-License-Identifier: GPL-2.0-only
"""SES atomic memory operations (AMOs): names, datatypes and the arithmetic itself.

Pure functions so both halves agree and the tests can check the table on its
own. The AMO numbering is UET's (uet.md: Extension headers; ``uet_defs.AMO_OPCODES``:
libfabric's ``fi_op`` with DIFF inserted). Supported here: the 8-byte integer
types (INT64, UINT64) — what RDMA verbs offer and what collectives use — with
MIN, MAX, SUM, DIFF, PROD, LOR, LAND, BOR, BAND, LXOR, BXOR, READ, WRITE (swap)
and CSWAP. Anything else is answered with AMO_UNSUPPORTED_OP / _DT, never
guessed at.

Operands travel big-endian (network order) in the request payload, the
compare-and-swap operands in the 36-byte extension header; target memory
holds host-order values, like RDMA atomics (:meth:`emu.core.memory.MemoryTable.fetch_add`).
"""

from __future__ import annotations

import struct

from emu.wire.uet_defs import AMO_DATATYPES, AMO_OPCODE, AMO_OPCODES, RETURN_CODE

SIZE = 8
_M64 = (1 << 64) - 1
_BE = struct.Struct("!Q")
_HOST = struct.Struct("=Q")

DT_INT64 = 6
DT_UINT64 = 7
DATATYPES = frozenset({DT_INT64, DT_UINT64})

AMO_SUM = AMO_OPCODE["SUM"]
AMO_WRITE = AMO_OPCODE["WRITE"]
AMO_CSWAP = AMO_OPCODE["CSWAP"]
#: verbs-style names (what the daemon's adapter passes) → UET AMO opcode
ALIASES = {"fetch_add": AMO_SUM, "add": AMO_SUM, "cmp_swap": AMO_CSWAP, "cas": AMO_CSWAP,
           "swap": AMO_WRITE}

RC_UNSUPPORTED_OP = RETURN_CODE["AMO_UNSUPPORTED_OP"]
RC_UNSUPPORTED_DT = RETURN_CODE["AMO_UNSUPPORTED_DT"]
RC_UNALIGNED = RETURN_CODE["AMO_UNALIGNED"]


def _signed(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


def _binary(name: str, old: int, v: int, signed: bool) -> int:
    if name in ("MIN", "MAX"):
        a, b = (_signed(old), _signed(v)) if signed else (old, v)
        return v if (b < a if name == "MIN" else b > a) else old
    if name == "SUM":
        return old + v
    if name == "DIFF":
        return old - v
    if name == "PROD":
        return old * v
    if name == "LOR":
        return int(bool(old) or bool(v))
    if name == "LAND":
        return int(bool(old) and bool(v))
    if name == "LXOR":
        return int(bool(old) != bool(v))
    if name == "BOR":
        return old | v
    if name == "BAND":
        return old & v
    if name == "BXOR":
        return old ^ v
    if name == "READ":
        return old
    if name == "WRITE":
        return v
    raise KeyError(name)


SUPPORTED = frozenset(AMO_OPCODE[n] for n in ("MIN", "MAX", "SUM", "DIFF", "PROD", "LOR",
                                               "LAND", "BOR", "BAND", "LXOR", "BXOR", "READ",
                                               "WRITE", "CSWAP"))


def parse_op(op: str | int) -> int:
    """``"fetch_add"``, ``"SUM"``, ``"cswap"`` or an AMO opcode → the AMO opcode (ValueError)."""
    if isinstance(op, str):
        key = op.lower()
        if key in ALIASES:
            return ALIASES[key]
        code = AMO_OPCODE.get(op.upper())
        if code is None:
            raise ValueError(f"unknown atomic op {op!r}")
        op = code
    if op not in SUPPORTED:
        raise ValueError(f"unsupported atomic op {AMO_OPCODES.get(op, op)!r}")
    return op


def parse_datatype(dt: str | int) -> int:
    """``"UINT64"`` / ``"INT64"`` or their numbers → the datatype code (ValueError)."""
    if isinstance(dt, str):
        names = {v: k for k, v in AMO_DATATYPES.items()}
        if dt.upper() not in names:
            raise ValueError(f"unknown atomic datatype {dt!r}")
        dt = names[dt.upper()]
    if dt not in DATATYPES:
        raise ValueError(f"unsupported atomic datatype {AMO_DATATYPES.get(dt, dt)!r} "
                         "(INT64, UINT64)")
    return dt


def check(amo: int, datatype: int, addr: int) -> int | None:
    """The return code that refuses this AMO before memory is touched, or None."""
    if amo not in SUPPORTED:
        return RC_UNSUPPORTED_OP
    if datatype not in DATATYPES:
        return RC_UNSUPPORTED_DT
    if addr % SIZE:
        return RC_UNALIGNED
    return None


def apply(view: memoryview, off: int, amo: int, datatype: int, operand: int,
          compare: int = 0) -> int:
    """Run one AMO on the 8 host-order bytes at ``view[off:]``; return the old value.

    The caller has validated ``amo``/``datatype`` (:func:`check`) and the bounds.
    """
    (old,) = _HOST.unpack_from(view, off)
    if amo == AMO_CSWAP:
        if old == compare & _M64:
            _HOST.pack_into(view, off, operand & _M64)
        return old
    new = _binary(AMO_OPCODES[amo], old, operand & _M64, datatype == DT_INT64) & _M64
    _HOST.pack_into(view, off, new)
    return old


def to_wire(value: int) -> bytes:
    """An 8-byte operand or result in network order."""
    return _BE.pack(value & _M64)


def from_wire(data: bytes | memoryview) -> int:
    return _BE.unpack(bytes(data[:SIZE]))[0]


def to_host(value: int) -> bytes:
    """A fetched value as the application reads it from its result buffer (host order)."""
    return _HOST.pack(value & _M64)

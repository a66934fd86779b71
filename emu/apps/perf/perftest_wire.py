# SPDX-License-Identifier: GPL-2.0-only
"""perftest's out-of-band bytes, encoded and decoded (no sockets here).

Why a codec of its own: ``ib_write_bw`` and friends do not speak emu's JSON
side channel; they exchange fixed-size C buffers over one TCP connection.
Written from perftest's sources (``src/perftest_communication.[ch]``,
``src/perftest_parameters.[ch]``, linux-rdma/perftest), not copied:

- the version: ``char version[MAX_VERSION]`` (16 bytes, a NUL-terminated
  string such as ``"6.25"``), read back with ``atof``; a peer older than
  5.70 is refused (``check_version_compatibility``);
- ``check_sys_data`` (peer >= 5.32): two 4-byte big-endian ints, the cycle
  buffer (the page size, 4096) and the cache line size (64); each side uses
  the larger of its own and the peer's;
- ``check_mtu`` (peer >= 5.1): the active MTU as its ``enum ibv_mtu`` number
  printed with ``%d`` into 2 bytes (peer >= 5.31): ``"3\\0"`` is 1024; each
  side uses the smaller;
- ``negotiate_params`` only when the peer says 6.28 or later: a host-layout
  struct that ends in ``struct ibv_device_attr`` (and, in builds with mlx5dv,
  one more field), so its size depends on the peer's build. emu says
  :data:`VERSION` = 6.27, and perftest skips the negotiation for any peer
  below 6.28, as it does for older perftests;
- one "key message" per QP (``ethernet_write_keys``): the text
  ``%04x:%04x:%06x:%06x:%08x:%016llx`` (LID, outstanding reads, QPN, PSN,
  R_Key, VA), then — when the GID is used, which on RoCE it always is —
  16 ``%02x:`` GID bytes, then ``%08x:`` (SRQ number), NUL-terminated: 108
  bytes with the GID (``KEY_MSG_SIZE_GID``), else ``%08x`` and 59 bytes
  (``KEY_MSG_SIZE``); the same message again is perftest's "hand shake"
  (``ctx_hand_shake``), its only way to synchronise;
- ``xchg_bw_reports``: 8-byte size, 8-byte iterations (peer >= 5.33), then
  BW peak, BW average and message rate as byte-swapped IEEE doubles; each
  field is a separate exchange.

In every exchange (``ctx_xchg_data``, ``ctx_hand_shake``) the client writes
first and then reads; the server reads, then writes.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

DEFAULT_PORT = 18515
#: what emu says it is: the last perftest version before the binary parameter negotiation
VERSION = "6.27"
#: after the version's NUL, where perftest leaves zeros (``strncpy``), emu says it is emu:
#: an emu server then knows the client's data carries emu's patterns (perftest reads only
#: up to the NUL, so a real perftest never sees it)
EMU_MARK = b"emu-perf"
MAX_VERSION = 16
MIN_VERSION = 5.70  # check_version_compatibility
NEGOTIATE_FROM = 6.28  # negotiate_params
SYS_DATA_FROM = 5.32
MTU_FROM = 5.1
MTU_2_BYTES_FROM = 5.31
ITERS_64_FROM = 5.33
CYCLE_BUFFER = 4096  # perftest's default: sysconf(_SC_PAGESIZE)
CACHE_LINE = 64  # DEF_CACHE_LINE_SIZE
KEY_MSG_SIZE = 59
KEY_MSG_SIZE_GID = 108
#: ``enum ibv_mtu`` ↔ bytes
MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
MTU_BYTES = {v: k for k, v in MTU_ENUM.items()}


class WireError(ValueError):
    """Bytes from the peer that are not what perftest sends; ``str()`` says what."""


@dataclass(frozen=True)
class KeyMsg:
    """One QP's ``pingpong_dest`` as perftest sends it."""

    lid: int
    out_reads: int
    qpn: int
    psn: int
    rkey: int
    vaddr: int
    gid: bytes | None  # 16 bytes, or None: the short form (InfiniBand without -x)
    srqn: int = 0


_WIDTHS = (("lid", 4), ("out_reads", 4), ("qpn", 6), ("psn", 6), ("rkey", 8), ("vaddr", 16))


def encode_key(k: KeyMsg) -> bytes:
    """The message ``ethernet_write_keys`` writes, NUL included (59 or 108 bytes)."""
    fields = []
    for name, width in _WIDTHS:
        v = getattr(k, name)
        if not 0 <= v < 16 ** width:
            raise WireError(f"{name} {v:#x} does not fit perftest's {width} hex digits")
        fields.append(f"{v:0{width}x}")
    if not 0 <= k.srqn <= 0xFFFFFFFF:
        raise WireError(f"srqn {k.srqn:#x} does not fit 8 hex digits")
    text = ":".join(fields)
    if k.gid is None:
        text += f":{k.srqn:08x}"
    else:
        if len(k.gid) != 16:
            raise WireError(f"a GID is 16 bytes, not {len(k.gid)}")
        text += ":" + "".join(f"{b:02x}:" for b in k.gid) + f"{k.srqn:08x}:"
    data = text.encode("ascii") + b"\0"
    assert len(data) == (KEY_MSG_SIZE if k.gid is None else KEY_MSG_SIZE_GID)
    return data


def _hex(field: bytes, what: str, width: int | None = None) -> int:
    if not field or (width is not None and len(field) != width) or \
            any(c not in b"0123456789abcdefABCDEF" for c in field):
        raise WireError(f"{what}: {field!r} is not {width or 'some'} hex digits")
    return int(field, 16)


def decode_key(data: bytes, with_gid: bool = True) -> KeyMsg:
    """Parse a key message (both forms); :class:`WireError` on anything else.

    Stricter than perftest's own parser (``sscanf``/``strtol``), which takes
    short fields and garbage silently: here every field has perftest's width."""
    size = KEY_MSG_SIZE_GID if with_gid else KEY_MSG_SIZE
    if len(data) != size:
        raise WireError(f"a perftest QP message is {size} bytes, got {len(data)}")
    if data[-1:] != b"\0":
        raise WireError(f"QP message not NUL-terminated: {data[:80]!r}")
    parts = data[:-1].split(b":")
    want = 6 + (16 + 2 if with_gid else 1)  # with the GID: a trailing ':' leaves one empty
    if len(parts) != want or (with_gid and parts[-1] != b""):
        raise WireError(f"not a perftest QP message ({'with' if with_gid else 'without'} "
                        f"GID): {data[:-1]!r}")
    vals = {name: _hex(parts[i], name, width) for i, (name, width) in enumerate(_WIDTHS)}
    if with_gid:
        gid = bytes(_hex(p, f"GID byte {i}", 2) for i, p in enumerate(parts[6:22]))
        srqn = _hex(parts[22], "srqn", 8)
    else:
        gid, srqn = None, _hex(parts[6], "srqn", 8)
    return KeyMsg(gid=gid, srqn=srqn, **vals)


# -- GIDs -----------------------------------------------------------------------------

def gid_of(address: str) -> bytes:
    """A RoCEv2 GID: the IPv6 address, or an IPv4 address mapped (``::ffff:a.b.c.d``)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.version == 4:
        return b"\0" * 10 + b"\xff\xff" + ip.packed
    return ip.packed


def is_v4_mapped(gid: bytes) -> bool:
    """perftest's ``ipv6_addr_v4mapped``: its GID-type check compares exactly this."""
    return gid[:12] == b"\0" * 10 + b"\xff\xff"


def address_of(gid: bytes) -> str:
    """The IP address a RoCEv2 GID stands for (what emu's engine sends to)."""
    if is_v4_mapped(gid):
        return str(ipaddress.IPv4Address(gid[12:]))
    return str(ipaddress.IPv6Address(gid))


# -- version, system data, MTU -----------------------------------------------------------

def encode_version(version: str = VERSION, mark: bool = True) -> bytes:
    """The 16-byte version field; emu's mark after the NUL (see :data:`EMU_MARK`)."""
    raw = version.encode("ascii") + b"\0"
    if mark:
        raw += EMU_MARK
    if len(raw) > MAX_VERSION:
        raise WireError(f"version field longer than {MAX_VERSION} bytes")
    return raw.ljust(MAX_VERSION, b"\0")


def decode_version(data: bytes) -> tuple[str, float, bool]:
    """``(text, number as atof reads it, the peer is emu)``; :class:`WireError` if the
    field holds no version number at all."""
    if len(data) != MAX_VERSION:
        raise WireError(f"a perftest version is {MAX_VERSION} bytes, got {len(data)}")
    text_b, _, rest = data.partition(b"\0")
    try:
        text = text_b.decode("ascii")
    except UnicodeDecodeError:
        raise WireError(f"not a perftest version: {data!r}") from None
    num = _atof(text)
    if num is None:
        raise WireError(f"not a perftest version: {data!r} (is the peer perftest, or emu "
                        f"perf without --oob perftest?)")
    return text, num, rest.startswith(EMU_MARK)


def _atof(text: str) -> float | None:
    """The leading number of ``text``, as C's ``atof`` takes it (None: no digits)."""
    n = 0
    while n < len(text) and (text[n].isdigit() or (text[n] == "." and "." not in text[:n])):
        n += 1
    try:
        return float(text[:n])
    except ValueError:
        return None


def encode_int(v: int) -> bytes:
    """``hton_int``: a 4-byte big-endian int (``check_sys_data``)."""
    return struct.pack(">i", v)


def decode_int(data: bytes, what: str) -> int:
    if len(data) != 4:
        raise WireError(f"{what}: 4 bytes expected, got {len(data)}")
    return int(struct.unpack(">i", data)[0])


def encode_mtu(mtu_bytes: int) -> bytes:
    """``check_mtu``'s 2 bytes: the ``enum ibv_mtu`` digit and a NUL."""
    return f"{MTU_ENUM[mtu_bytes]}".encode() + b"\0"


def decode_mtu(data: bytes) -> int | None:
    """The peer's MTU in bytes, or None if it is not a valid ``enum ibv_mtu`` (perftest
    then keeps its own)."""
    if len(data) != 2:
        raise WireError(f"the MTU field is 2 bytes, got {len(data)}")
    digits = data.partition(b"\0")[0]
    try:
        return MTU_BYTES.get(int(digits))
    except ValueError:
        return None


# -- BW reports ------------------------------------------------------------------------

@dataclass(frozen=True)
class BwReport:
    """``struct bw_report_data``'s exchanged fields (BW in the sender's unit)."""

    size: int
    iters: int
    bw_peak: float
    bw_avg: float
    msg_rate: float


def encode_report(r: BwReport) -> list[bytes]:
    """The five fields ``xchg_bw_reports`` exchanges one by one (peer >= 5.33)."""
    return [struct.pack(">Q", r.size), struct.pack(">Q", r.iters), struct.pack(">d", r.bw_peak),
            struct.pack(">d", r.bw_avg), struct.pack(">d", r.msg_rate)]


REPORT_SIZES = (8, 8, 8, 8, 8)


def decode_report(fields: list[bytes]) -> BwReport:
    if [len(f) for f in fields] != list(REPORT_SIZES):
        raise WireError(f"a BW report is 5 fields of 8 bytes, got {[len(f) for f in fields]}")
    size, iters = (int(struct.unpack(">Q", f)[0]) for f in fields[:2])
    peak, avg, rate = (float(struct.unpack(">d", f)[0]) for f in fields[2:])
    return BwReport(size, iters, peak, avg, rate)


# -- perftest's buffer layout -------------------------------------------------------------

def slot_stride(size: int, cache_line: int = CACHE_LINE) -> int:
    """``INC``: the distance between two messages' addresses in perftest's cycle buffer."""
    if size > cache_line:
        return -(-size // cache_line) * cache_line
    return cache_line


def cycle_slots(size: int, cycle: int = CYCLE_BUFFER, cache_line: int = CACHE_LINE) -> int:
    """How many message addresses a BW test cycles through (``increase_rem_addr``): the
    cycle buffer in ``INC`` steps for messages up to half of it, else one."""
    if size <= cycle // 2:
        return max(1, cycle // slot_stride(size, cache_line))
    return 1


def region_size(size: int, cycle: int = CYCLE_BUFFER, cache_line: int = CACHE_LINE) -> int:
    """Bytes per QP a peer may touch from the published VA (``BUFF_SIZE`` rounded by
    ``INC``): the larger of the message and the cycle buffer."""
    return slot_stride(max(size, cycle), cache_line)

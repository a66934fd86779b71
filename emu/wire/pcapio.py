# SPDX-License-Identifier: GPL-2.0-only
"""Read and write pcap and pcapng files without scapy.

``emu dissect`` and the capture tools need three things scapy's readers make
awkward: a clear one-line error for a file that is not a capture, the
interface *name* of every pcapng packet (emu names interfaces after links),
and speed. Both formats, either byte order, micro- or nanosecond pcap.

The writer also carries comments (pcapng ``opt_comment`` on the section and on each
interface) and takes integer nanosecond times: ``emu capture`` states there what
its timestamps mean (fabric time, the scale, the epoch), and a float of seconds
since 1970 cannot hold nanoseconds (its step there is ~238 ns), while the gaps of a
fabric's packets are tens of nanoseconds. :func:`read_info` reads the comments back.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000_000),
    b"\xa1\xb2\xc3\xd4": (">", 1_000_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1_000_000_000),
    b"\xa1\xb2\x3c\x4d": (">", 1_000_000_000),
}
_PCAPNG_SHB = 0x0A0D0D0A
_PCAPNG_IDB = 0x00000001
_PCAPNG_SPB = 0x00000003
_PCAPNG_EPB = 0x00000006
_BYTE_ORDER_MAGIC = 0x1A2B3C4D
_OPT_COMMENT = 1
_OPT_SHB_USERAPPL = 4
_OPT_IF_NAME = 2
_OPT_IF_TSRESOL = 9


class CaptureError(ValueError):
    """The file is not a pcap/pcapng capture, or is cut off mid-record."""


@dataclass(slots=True)
class Frame:
    """One captured frame: time (s), link type, interface name (pcapng) and bytes.
    ``time_ns``: the time in exact integer nanoseconds where the file holds them
    (pcapng with a decimal resolution; ``time`` as a float of seconds since 1970 is
    good to ~238 ns only), else None."""

    time: float
    linktype: int
    data: bytes
    interface: str | None = None
    orig_len: int = 0
    time_ns: int | None = None


def read_frames(path: str | Path) -> Iterator[Frame]:
    """Yield every frame of a pcap or pcapng file; CaptureError if it is neither."""
    p = Path(path)
    try:
        f = p.open("rb")
    except OSError as e:
        raise CaptureError(f"{p}: cannot open: {e.strerror}") from None
    with f:
        head = f.read(4)
        if head in _PCAP_MAGIC:
            yield from _read_pcap(f, p, head)
        elif len(head) == 4 and struct.unpack("<I", head)[0] == _PCAPNG_SHB:
            yield from _read_pcapng(f, p, head)
        else:
            start = head.hex() or "nothing"
            raise CaptureError(f"{p}: not a pcap or pcapng capture (starts with {start})")


def _read_pcap(f: BinaryIO, p: Path, magic: bytes) -> Iterator[Frame]:
    order, scale = _PCAP_MAGIC[magic]
    rest = f.read(20)
    if len(rest) < 20:
        raise CaptureError(f"{p}: pcap header cut short")
    linktype = struct.unpack(order + "HHiIII", rest)[5] & 0x0FFFFFFF
    rec = struct.Struct(order + "IIII")
    n = 0
    while True:
        h = f.read(16)
        if not h:
            return
        if len(h) < 16:
            raise CaptureError(f"{p}: record {n + 1} header cut short")
        sec, frac, incl, orig = rec.unpack(h)
        data = f.read(incl)
        if len(data) < incl:
            raise CaptureError(f"{p}: record {n + 1} data cut short")
        n += 1
        yield Frame(sec + frac / scale, linktype, data, None, orig)


def _blocks(f: BinaryIO, p: Path, first: bytes) -> Iterator[tuple[int, bytes, str]]:
    """Every pcapng block as (type, body, byte order); a section header's body starts
    with its byte-order magic."""
    order = "<"
    head = first
    while True:
        if not head:
            head = f.read(4)
            if not head:
                return
        rest = f.read(4)
        if len(head) < 4 or len(rest) < 4:
            raise CaptureError(f"{p}: pcapng block header cut short")
        raw_type = head
        if struct.unpack("<I", raw_type)[0] == _PCAPNG_SHB:
            bom = f.read(4)
            if len(bom) < 4:
                raise CaptureError(f"{p}: pcapng section header cut short")
            order = "<" if struct.unpack("<I", bom)[0] == _BYTE_ORDER_MAGIC else ">"
            if struct.unpack(order + "I", bom)[0] != _BYTE_ORDER_MAGIC:
                raise CaptureError(f"{p}: pcapng byte-order magic is wrong")
            length = struct.unpack(order + "I", rest)[0]
            body = bom + f.read(length - 16)
        else:
            length = struct.unpack(order + "I", rest)[0]
            if length < 12 or length % 4:
                raise CaptureError(f"{p}: pcapng block with bad length {length}")
            body = f.read(length - 12)
        trailer = f.read(4)
        if len(body) < length - 12 or len(trailer) < 4:
            raise CaptureError(f"{p}: pcapng block cut short")
        yield struct.unpack(order + "I", raw_type)[0], body, order
        head = b""


def _read_pcapng(f: BinaryIO, p: Path, first: bytes) -> Iterator[Frame]:
    interfaces: list[tuple[int, str | None, float]] = []  # linktype, name, tick seconds
    ns_per_tick: list[int | None] = []
    for btype, body, order in _blocks(f, p, first):
        if btype == _PCAPNG_SHB:
            interfaces, ns_per_tick = [], []
        elif btype == _PCAPNG_IDB:
            linktype = struct.unpack_from(order + "H", body, 0)[0]
            opts = _options(body[8:], order)
            interfaces.append((linktype, _idb_name(opts), _idb_tick(opts)))
            ns_per_tick.append(_ns_per_tick(opts))
        elif btype == _PCAPNG_EPB:
            if len(body) < 20:
                raise CaptureError(f"{p}: enhanced packet block too short")
            ifid, hi, lo, cap, orig = struct.unpack_from(order + "IIIII", body, 0)
            if ifid >= len(interfaces):
                raise CaptureError(f"{p}: packet names interface {ifid}, which is not described")
            lt, name, tick = interfaces[ifid]
            ticks, per = (hi << 32) | lo, ns_per_tick[ifid]
            yield Frame(ticks * tick, lt, bytes(body[20:20 + cap]), name, orig,
                        None if per is None else ticks * per)
        elif btype == _PCAPNG_SPB:
            if not interfaces:
                raise CaptureError(f"{p}: simple packet block before any interface")
            orig = struct.unpack_from(order + "I", body, 0)[0]
            lt, name, _ = interfaces[0]
            yield Frame(0.0, lt, bytes(body[4:4 + orig]), name, orig)


def _options(opts: bytes, order: str) -> list[tuple[int, bytes]]:
    """A block's options as (code, value), in order, up to ``opt_endofopt``."""
    out = []
    i = 0
    while i + 4 <= len(opts):
        code, olen = struct.unpack_from(order + "HH", opts, i)
        if code == 0:
            break
        out.append((code, bytes(opts[i + 4:i + 4 + olen])))
        i += 4 + ((olen + 3) & ~3)
    return out


def _text(val: bytes) -> str:
    return val.decode("utf-8", "replace").rstrip("\0")


def _idb_name(opts: list[tuple[int, bytes]]) -> str | None:
    return next((_text(v) for c, v in opts if c == _OPT_IF_NAME), None)


def _idb_tick(opts: list[tuple[int, bytes]]) -> float:
    """Seconds per timestamp unit (``if_tsresol``; microseconds without it)."""
    for code, val in opts:
        if code == _OPT_IF_TSRESOL and val:
            r = val[0]
            return 2.0 ** -(r & 0x7F) if r & 0x80 else 10.0 ** -r
    return 1e-6


def _ns_per_tick(opts: list[tuple[int, bytes]]) -> int | None:
    """Nanoseconds per timestamp unit when whole (decimal resolutions to 1 ns), else None."""
    r = next((v[0] for c, v in opts if c == _OPT_IF_TSRESOL and v), 6)
    return None if r & 0x80 or r > 9 else 10 ** (9 - r)


@dataclass
class InterfaceInfo:
    """One pcapng interface as described: name, link type, seconds per timestamp unit,
    and its comments."""

    name: str | None
    linktype: int
    tick: float
    comments: list[str] = field(default_factory=list)


@dataclass
class CaptureInfo:
    """What a pcapng says about itself: its sections' comments and ``shb_userappl``, and
    its interfaces (all sections, in order)."""

    comments: list[str] = field(default_factory=list)
    application: str | None = None
    interfaces: list[InterfaceInfo] = field(default_factory=list)


def read_info(path: str | Path) -> CaptureInfo:
    """The comments and interface descriptions of a pcapng file (CaptureError if it is
    not one): e.g. what ``emu capture`` wrote about its timestamps."""
    p = Path(path)
    try:
        f = p.open("rb")
    except OSError as e:
        raise CaptureError(f"{p}: cannot open: {e.strerror}") from None
    info = CaptureInfo()
    with f:
        head = f.read(4)
        if len(head) < 4 or struct.unpack("<I", head)[0] != _PCAPNG_SHB:
            raise CaptureError(f"{p}: not a pcapng capture (starts with {head.hex() or 'nothing'})")
        for btype, body, order in _blocks(f, p, head):
            if btype == _PCAPNG_SHB:
                opts = _options(body[16:], order)
                info.comments += [_text(v) for c, v in opts if c == _OPT_COMMENT]
                info.application = next((_text(v) for c, v in opts if c == _OPT_SHB_USERAPPL),
                                        info.application)
            elif btype == _PCAPNG_IDB:
                opts = _options(body[8:], order)
                info.interfaces.append(InterfaceInfo(
                    _idb_name(opts), struct.unpack_from(order + "H", body, 0)[0],
                    _idb_tick(opts), [_text(v) for c, v in opts if c == _OPT_COMMENT]))
    return info


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\0" * ((-len(value)) % 4)


class PcapngWriter:
    """Write a pcapng file whose interfaces carry names (e.g. emu link names).

    ``comments``: the section's ``opt_comment`` options (what the file is, what its
    timestamps mean); ``application``: its ``shb_userappl``. Neither is written when
    not given, so a plain capture is byte for byte what it always was."""

    def __init__(self, f: BinaryIO, comments: Iterable[str] = (),
                 application: str | None = None) -> None:
        self._f = f
        self._ifaces: dict[tuple[str, int], int] = {}
        opts = b"".join(_option(_OPT_COMMENT, c.encode()) for c in comments)
        if application:
            opts += _option(_OPT_SHB_USERAPPL, application.encode())
        if opts:
            opts += struct.pack("<HH", 0, 0)
        shb_body = struct.pack("<IHHq", _BYTE_ORDER_MAGIC, 1, 0, -1) + opts
        self._block(_PCAPNG_SHB, shb_body)

    def _block(self, btype: int, body: bytes) -> None:
        pad = (-len(body)) % 4
        length = 12 + len(body) + pad
        self._f.write(struct.pack("<II", btype, length) + body + b"\0" * pad
                      + struct.pack("<I", length))

    def interface(self, name: str, linktype: int = LINKTYPE_ETHERNET,
                  comments: Iterable[str] = ()) -> int:
        """The id of the interface called ``name``, describing it on first use (with
        ``comments`` then; later calls' are ignored). Timestamps are nanoseconds
        (``if_tsresol`` 9)."""
        key = (name, linktype)
        if key not in self._ifaces:
            opts = _option(_OPT_IF_NAME, name.encode())
            opts += struct.pack("<HHB3x", _OPT_IF_TSRESOL, 1, 9)  # nanosecond timestamps
            opts += b"".join(_option(_OPT_COMMENT, c.encode()) for c in comments)
            opts += struct.pack("<HH", 0, 0)
            self._block(_PCAPNG_IDB, struct.pack("<HHI", linktype, 0, 0) + opts)
            self._ifaces[key] = len(self._ifaces)
        return self._ifaces[key]

    def write(self, data: bytes, time: float = 0.0, interface: str = "eth0",
              linktype: int = LINKTYPE_ETHERNET, orig_len: int | None = None, *,
              time_ns: int | None = None) -> None:
        """One packet at ``time`` seconds, or exactly at ``time_ns`` nanoseconds (what a
        kernel stamp is: seconds since 1970 as a float are only good to ~238 ns)."""
        ifid = self.interface(interface, linktype)
        ts = int(round(time * 1e9)) if time_ns is None else int(time_ns)
        if ts < 0:
            raise ValueError(f"a pcapng timestamp cannot be negative ({ts} ns)")
        body = struct.pack("<IIIII", ifid, ts >> 32, ts & 0xFFFFFFFF, len(data),
                           len(data) if orig_len is None else orig_len) + data
        self._block(_PCAPNG_EPB, body)

# SPDX-License-Identifier: GPL-2.0-only
"""Read and write pcap and pcapng files without scapy.

``emu dissect`` and the capture tools need three things scapy's readers make
awkward: a clear one-line error for a file that is not a capture, the
interface *name* of every pcapng packet (emu names interfaces after links),
and speed. Both formats, either byte order, micro- or nanosecond pcap.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
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


class CaptureError(ValueError):
    """The file is not a pcap/pcapng capture, or is cut off mid-record."""


@dataclass(slots=True)
class Frame:
    """One captured frame: time (s), link type, interface name (pcapng) and bytes."""

    time: float
    linktype: int
    data: bytes
    interface: str | None = None
    orig_len: int = 0


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


def _read_pcapng(f: BinaryIO, p: Path, first: bytes) -> Iterator[Frame]:
    order = "<"
    interfaces: list[tuple[int, str | None, float]] = []  # linktype, name, tick seconds
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
            interfaces = []
        else:
            length = struct.unpack(order + "I", rest)[0]
            if length < 12 or length % 4:
                raise CaptureError(f"{p}: pcapng block with bad length {length}")
            body = f.read(length - 12)
        trailer = f.read(4)
        if len(body) < length - 12 or len(trailer) < 4:
            raise CaptureError(f"{p}: pcapng block cut short")
        btype = struct.unpack(order + "I", raw_type)[0]
        if btype == _PCAPNG_IDB:
            linktype = struct.unpack_from(order + "H", body, 0)[0]
            name, tick = _idb_options(body[8:], order)
            interfaces.append((linktype, name, tick))
        elif btype == _PCAPNG_EPB:
            if len(body) < 20:
                raise CaptureError(f"{p}: enhanced packet block too short")
            ifid, hi, lo, cap, orig = struct.unpack_from(order + "IIIII", body, 0)
            if ifid >= len(interfaces):
                raise CaptureError(f"{p}: packet names interface {ifid}, which is not described")
            lt, name, tick = interfaces[ifid]
            yield Frame(((hi << 32) | lo) * tick, lt, bytes(body[20:20 + cap]), name, orig)
        elif btype == _PCAPNG_SPB:
            if not interfaces:
                raise CaptureError(f"{p}: simple packet block before any interface")
            orig = struct.unpack_from(order + "I", body, 0)[0]
            lt, name, _ = interfaces[0]
            yield Frame(0.0, lt, bytes(body[4:4 + orig]), name, orig)
        head = b""


def _idb_options(opts: bytes, order: str) -> tuple[str | None, float]:
    name: str | None = None
    tick = 1e-6
    i = 0
    while i + 4 <= len(opts):
        code, olen = struct.unpack_from(order + "HH", opts, i)
        val = opts[i + 4:i + 4 + olen]
        if code == 0:
            break
        if code == 2:
            name = val.decode("utf-8", "replace").rstrip("\0")
        elif code == 9 and val:
            r = val[0]
            tick = 2.0 ** -(r & 0x7F) if r & 0x80 else 10.0 ** -r
        i += 4 + ((olen + 3) & ~3)
    return name, tick


class PcapngWriter:
    """Write a pcapng file whose interfaces carry names (e.g. emu link names)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._ifaces: dict[tuple[str, int], int] = {}
        shb_body = struct.pack("<IHHq", _BYTE_ORDER_MAGIC, 1, 0, -1)
        self._block(_PCAPNG_SHB, shb_body)

    def _block(self, btype: int, body: bytes) -> None:
        pad = (-len(body)) % 4
        length = 12 + len(body) + pad
        self._f.write(struct.pack("<II", btype, length) + body + b"\0" * pad
                      + struct.pack("<I", length))

    def interface(self, name: str, linktype: int = LINKTYPE_ETHERNET) -> int:
        """The id of the interface called ``name``, describing it on first use."""
        key = (name, linktype)
        if key not in self._ifaces:
            raw = name.encode()
            opts = struct.pack("<HH", 2, len(raw)) + raw + b"\0" * ((-len(raw)) % 4)
            opts += struct.pack("<HHB3x", 9, 1, 9)  # nanosecond timestamps
            opts += struct.pack("<HH", 0, 0)
            self._block(_PCAPNG_IDB, struct.pack("<HHI", linktype, 0, 0) + opts)
            self._ifaces[key] = len(self._ifaces)
        return self._ifaces[key]

    def write(self, data: bytes, time: float = 0.0, interface: str = "eth0",
              linktype: int = LINKTYPE_ETHERNET, orig_len: int | None = None) -> None:
        ifid = self.interface(interface, linktype)
        ts = int(round(time * 1e9))
        body = struct.pack("<IIIII", ifid, ts >> 32, ts & 0xFFFFFFFF, len(data),
                           len(data) if orig_len is None else orig_len) + data
        self._block(_PCAPNG_EPB, body)

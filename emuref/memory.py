# SPDX-License-Identifier: GPL-2.0-only
"""Registered memory for emu-ref: a key, a base address and the bytes, nothing more.

Both transports address remote memory as (key, virtual address, length); the
only rule a reference peer must get right is that a request outside the
region, or with a key nobody handed out, touches *no* byte and is answered
with an error. That check lives here once so both transports share it.
"""

from __future__ import annotations

from dataclasses import dataclass


class AccessError(Exception):
    """A remote access that must be refused: ``kind`` is ``"key"`` or ``"bounds"``."""

    def __init__(self, kind: str, msg: str) -> None:
        super().__init__(msg)
        self.kind = kind


@dataclass
class Region:
    """One registered region: ``data`` holds bytes [va, va + len(data))."""

    key: int
    va: int
    data: bytearray

    def contains(self, va: int, n: int) -> bool:
        return self.va <= va and va + n <= self.va + len(self.data)


class Memory:
    """The regions of one endpoint process, by key."""

    def __init__(self) -> None:
        self.regions: dict[int, Region] = {}

    def register(self, key: int, va: int, data: bytearray) -> Region:
        r = Region(key, va, data)
        self.regions[key] = r
        return r

    def deregister(self, key: int) -> None:
        self.regions.pop(key, None)

    def check(self, key: int, va: int, n: int) -> Region:
        """The region for ``n`` bytes at ``va`` under ``key``, or :class:`AccessError`."""
        r = self.regions.get(key)
        if r is None:
            raise AccessError("key", f"unknown key {key:#x}")
        if not r.contains(va, n):
            raise AccessError("bounds", f"{n} bytes at {va:#x} outside region {key:#x}")
        return r

    def write(self, key: int, va: int, data: bytes | memoryview) -> None:
        r = self.check(key, va, len(data))
        off = va - r.va
        r.data[off:off + len(data)] = data

    def read(self, key: int, va: int, n: int) -> bytes:
        r = self.check(key, va, n)
        off = va - r.va
        return bytes(r.data[off:off + n])

# SPDX-License-Identifier: GPL-2.0-only
"""Registered memory: shared-memory buffers, keys, bounds and access checks.

RDMA's defining property is that the remote NIC writes into the
application's buffer without the application running. Here the NIC is a
daemon process, so a registered region must be memory both processes map:
:class:`SharedBuffer` is a file in ``/dev/shm`` mapped with :mod:`mmap`.
The application creates it, registers it through the daemon, and the daemon
attaches by name; a remote WRITE then lands in the application's pages.

Why not ``multiprocessing.shared_memory.SharedMemory``: on Python < 3.13 every
*attaching* process registers the segment with its resource tracker, which
unlinks it when that process exits — the daemon would delete the
application's buffer (bpo-38119). A plain file + mmap has no tracker; the
creator owns the name and unlinks it on :meth:`SharedBuffer.close` — or, if
it never calls close, when the buffer is garbage-collected or the process
exits (a ``weakref.finalize``, which also runs at interpreter exit, after an
uncaught exception too). A SIGKILLed owner is covered by the daemon and by
``emu down``/``emu clean`` (:mod:`emu.core.shm`).

:class:`MemoryTable` is the device's registration table: it hands out
lkey/rkey from an injected RNG, and resolves ``(key, address, length, access,
pd)`` to a memoryview, or raises :class:`MemoryAccessError` with a precise
:class:`MemError` (invalid key, out of bounds, access violation, wrong PD,
misaligned). Every check happens before the first byte moves, so a failed
access writes zero bytes — what the RoCE responder's "remote access error"
NAK promises.

Atomics (8-byte CMP_SWAP, FETCH_ADD, native byte order on 8-aligned VAs) are
atomic with respect to other operations of the same daemon, which runs them
on one thread — the ``IBV_ATOMIC_HCA`` guarantee real NICs give: atomic versus
other NIC operations, not versus the CPU.
"""

from __future__ import annotations

import enum
import itertools
import mmap
import os
import struct
import weakref
from dataclasses import dataclass, field

from emu.core.psn import RandomBits
from emu.core.shm import SHM_DIR, SHM_PREFIX  # noqa: F401 - where callers found them

_U64 = struct.Struct("=Q")
_U64_MASK = (1 << 64) - 1
_PAGE = 4096
_VA_BASE = 0x7F00_0000_0000  # where default VAs start: looks like a user address


class Access(enum.IntFlag):
    """Access rights of a region; values are ``ibv_access_flags``."""

    NONE = 0
    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8


class MemError(enum.Enum):
    """Why an access was refused; the transport maps these to NAK codes."""

    INVALID_KEY = "invalid_key"  # no region (or a deregistered one) has this key
    OUT_OF_BOUNDS = "out_of_bounds"  # [addr, addr+len) not inside the region
    ACCESS_VIOLATION = "access_violation"  # region lacks the right (e.g. REMOTE_WRITE)
    WRONG_PD = "wrong_pd"  # region belongs to another protection domain
    MISALIGNED = "misaligned"  # atomic on an address that is not 8-byte aligned


class MemoryAccessError(Exception):
    """An access refused before any byte moved."""

    def __init__(self, kind: MemError, detail: str = "") -> None:
        super().__init__(f"{kind.value}: {detail}" if detail else kind.value)
        self.kind = kind


# -- shared buffers -------------------------------------------------------------


_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class SharedBuffer:
    """A named shared-memory mapping (a file under ``/dev/shm``).

    :meth:`create` makes a new one (the creator unlinks it on close);
    :meth:`attach` maps an existing one by name from any process. ``view`` is
    a writable memoryview over the whole mapping.
    """

    _seq = itertools.count()

    def __init__(self, name: str, size: int, mm: mmap.mmap, owner: bool, path: str) -> None:
        self.name = name
        self.size = size
        self._mmap: mmap.mmap | None = mm
        self.view: memoryview = memoryview(mm)[:size]
        self.owner = owner
        self._path = path
        # the owner's file goes when the owner does, even without close()
        self._unlink = weakref.finalize(self, _unlink_owned, path, os.getpid()) \
            if owner else None

    @classmethod
    def create(cls, size: int, name: str | None = None, *, shm_dir: str = SHM_DIR) -> SharedBuffer:
        """A new zero-filled buffer of ``size`` bytes (a 0-byte one maps one page)."""
        if size < 0:
            raise ValueError("size must be >= 0")
        while True:
            nm = name or f"{SHM_PREFIX}{os.getpid()}-{next(cls._seq)}"
            _check_name(nm)
            path = os.path.join(shm_dir, nm)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                if name is not None:
                    raise
                continue  # a stale file from an earlier process with our pid
            break
        try:
            os.ftruncate(fd, max(size, 1))
            mm = mmap.mmap(fd, max(size, 1))
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return cls(nm, size, mm, True, path)

    @classmethod
    def attach(cls, name: str, *, shm_dir: str = SHM_DIR) -> SharedBuffer:
        """Map an existing buffer by name (the daemon's side); never unlinks it."""
        _check_name(name)
        path = os.path.join(shm_dir, name)
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            # populated now, as ibv_reg_mr pins a region's pages: faulting them in one at a
            # time on first DMA cost the receiving daemon ~1 µs per 4 KiB page mid-transfer
            mm = mmap.mmap(fd, max(size, 1), flags=mmap.MAP_SHARED | _MAP_POPULATE)
        finally:
            os.close(fd)
        return cls(name, size, mm, False, path)

    @property
    def closed(self) -> bool:
        return self._mmap is None

    def close(self, unlink: bool | None = None) -> None:
        """Unmap; the creator (or ``unlink=True``) also removes the name.

        The name goes first: if a caller still holds a slice of :attr:`view`,
        the mapping stays alive until that slice is released, but nothing is
        left behind in ``/dev/shm``.
        """
        if self._mmap is None:
            return
        if self._unlink is not None:
            self._unlink.detach()
        if self.owner if unlink is None else unlink:
            _unlink_quietly(self._path)
        self.view.release()
        mm, self._mmap = self._mmap, None
        try:
            mm.close()
        except BufferError:
            pass  # exported slices outlive us; the kernel unmaps when they go

    def __enter__(self) -> SharedBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SharedBuffer({self.name!r}, {self.size}, owner={self.owner})"


def _unlink_owned(path: str, pid: int) -> None:
    """The finalizer: only in the creating process (a forked child that exits leaves it)."""
    if os.getpid() == pid:
        _unlink_quietly(path)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"bad shared-memory name {name!r}")


# -- regions and the registration table -----------------------------------------


@dataclass(eq=False)
class ProtectionDomain:
    """Groups QPs and regions; a QP may only use regions of its own PD."""

    handle: int


@dataclass(eq=False)
class MemoryRegion:
    """A registered window ``[va, va+length)`` onto ``buffer[offset:offset+length]``."""

    pd: ProtectionDomain
    buffer: SharedBuffer
    offset: int
    length: int
    va: int
    access: Access
    lkey: int
    rkey: int
    view: memoryview = field(repr=False)
    valid: bool = True

    def contains(self, addr: int, length: int) -> bool:
        return self.va <= addr and addr + length <= self.va + self.length


class MemoryTable:
    """A device's registered regions, looked up by key on every RDMA access.

    Keys are random 32-bit values from the injected ``rng`` (unguessable, as a
    peer must not forge an R_Key), unique among live regions. Deregistered
    keys are not reused while ``retired_keys`` remembers them, so a stale
    peer's late WRITE hits INVALID_KEY rather than a newer region.
    """

    def __init__(self, rng: RandomBits, *, retired_keys: int = 4096) -> None:
        self._rng = rng
        self._by_lkey: dict[int, MemoryRegion] = {}
        self._by_rkey: dict[int, MemoryRegion] = {}
        self._retired: dict[int, None] = {}  # insertion-ordered set
        self._retired_max = retired_keys
        self._next_pd = 1
        self._next_va = _VA_BASE

    def alloc_pd(self) -> ProtectionDomain:
        pd = ProtectionDomain(self._next_pd)
        self._next_pd += 1
        return pd

    def __len__(self) -> int:
        return len(self._by_rkey)

    def _new_key(self, avoid: int = 0) -> int:
        while True:
            k = self._rng.getrandbits(32)
            if (k and k != avoid and k not in self._by_lkey and k not in self._by_rkey
                    and k not in self._retired):
                return k

    def register(self, pd: ProtectionDomain, buffer: SharedBuffer, access: Access, *,
                 offset: int = 0, length: int | None = None, va: int | None = None
                 ) -> MemoryRegion:
        """Register ``buffer[offset:offset+length]`` at virtual address ``va``.

        ``va`` defaults to a fresh page-aligned address (distinct per region,
        so a wrong VA in a test fails loudly). As in verbs, remote write or
        atomic access requires LOCAL_WRITE too.
        """
        if buffer.closed:
            raise ValueError("buffer is closed")
        if length is None:
            length = buffer.size - offset
        if offset < 0 or length < 0 or offset + length > buffer.size:
            raise ValueError(f"[{offset}, {offset}+{length}) is outside the {buffer.size}-byte "
                             "buffer")
        access = Access(access)
        if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not (
                access & Access.LOCAL_WRITE):
            raise ValueError("REMOTE_WRITE/REMOTE_ATOMIC require LOCAL_WRITE (as in verbs)")
        if va is None:
            va = self._next_va
            self._next_va += ((length + _PAGE - 1) // _PAGE + 1) * _PAGE  # + a guard page
        elif va < 0 or va + length > _U64_MASK + 1:
            raise ValueError("va out of the 64-bit range")
        lkey = self._new_key()
        rkey = self._new_key(avoid=lkey)
        mr = MemoryRegion(pd, buffer, offset, length, va, access, lkey, rkey,
                          buffer.view[offset:offset + length])
        self._by_lkey[lkey] = mr
        self._by_rkey[rkey] = mr
        return mr

    def deregister(self, mr: MemoryRegion) -> None:
        """Invalidate the region's keys; later accesses get INVALID_KEY."""
        if not mr.valid:
            return
        mr.valid = False
        self._by_lkey.pop(mr.lkey, None)
        self._by_rkey.pop(mr.rkey, None)
        for k in (mr.lkey, mr.rkey):
            self._retired[k] = None
        while len(self._retired) > self._retired_max:
            del self._retired[next(iter(self._retired))]
        mr.view.release()

    def by_rkey(self, rkey: int) -> MemoryRegion | None:
        return self._by_rkey.get(rkey)

    def by_lkey(self, lkey: int) -> MemoryRegion | None:
        return self._by_lkey.get(lkey)

    # -- checks -------------------------------------------------------------

    @staticmethod
    def _check(mr: MemoryRegion | None, pd: ProtectionDomain | None, addr: int, length: int,
               need: Access) -> MemoryRegion:
        if mr is None:
            raise MemoryAccessError(MemError.INVALID_KEY)
        if pd is not None and mr.pd is not pd:
            raise MemoryAccessError(MemError.WRONG_PD, f"region in PD {mr.pd.handle}")
        nb = int(need)  # plain ints: IntFlag's & and bool are Python-level (hot path)
        if nb and (int(mr.access) & nb) != nb:
            raise MemoryAccessError(MemError.ACCESS_VIOLATION,
                                    f"needs {need!r}, region has {mr.access!r}")
        if length < 0 or addr < mr.va or addr + length > mr.va + mr.length:
            raise MemoryAccessError(MemError.OUT_OF_BOUNDS,
                                    f"[{addr:#x}, +{length}) vs [{mr.va:#x}, +{mr.length})")
        return mr

    def check_remote(self, rkey: int, addr: int, length: int, need: Access,
                     pd: ProtectionDomain | None = None) -> MemoryRegion:
        """Resolve a remote access (an R_Key from the wire) or raise MemoryAccessError."""
        return self._check(self._by_rkey.get(rkey), pd, addr, length, need)

    def check_local(self, lkey: int, addr: int, length: int, write: bool,
                    pd: ProtectionDomain | None = None) -> MemoryRegion:
        """Resolve a local SGE; writing into it (a receive, a READ's data) needs LOCAL_WRITE."""
        return self._check(self._by_lkey.get(lkey), pd, addr, length,
                           Access.LOCAL_WRITE if write else Access.NONE)

    # -- data movement ------------------------------------------------------

    def remote_write(self, rkey: int, addr: int, data: bytes | memoryview,
                     pd: ProtectionDomain | None = None) -> None:
        """RDMA WRITE payload into the region, or raise having written nothing.

        A zero-length WRITE validates nothing, as the IB spec lets a responder
        skip R_Key checks when the DMA length is 0.
        """
        n = len(data)
        if n == 0:
            return
        mr = self._check(self._by_rkey.get(rkey), pd, addr, n, Access.REMOTE_WRITE)
        off = addr - mr.va
        mr.view[off:off + n] = data

    def remote_read(self, rkey: int, addr: int, length: int,
                    pd: ProtectionDomain | None = None) -> memoryview:
        """The bytes an RDMA READ returns, as a zero-copy view into the region.

        Valid until the region is deregistered; copy it if it must outlive that.
        """
        if length == 0:
            return memoryview(b"")
        mr = self._check(self._by_rkey.get(rkey), pd, addr, length, Access.REMOTE_READ)
        off = addr - mr.va
        return mr.view[off:off + length]

    def _atomic_target(self, rkey: int, addr: int, pd: ProtectionDomain | None
                       ) -> tuple[memoryview, int]:
        mr = self._check(self._by_rkey.get(rkey), pd, addr, 8, Access.REMOTE_ATOMIC)
        if addr & 7:
            raise MemoryAccessError(MemError.MISALIGNED, f"{addr:#x}")
        return mr.view, addr - mr.va

    def compare_swap(self, rkey: int, addr: int, compare: int, swap: int,
                     pd: ProtectionDomain | None = None) -> int:
        """8-byte CMP_SWAP: store ``swap`` if the value equals ``compare``; return the original."""
        view, off = self._atomic_target(rkey, addr, pd)
        (orig,) = _U64.unpack_from(view, off)
        if orig == compare & _U64_MASK:
            _U64.pack_into(view, off, swap & _U64_MASK)
        return orig

    def fetch_add(self, rkey: int, addr: int, add: int,
                  pd: ProtectionDomain | None = None) -> int:
        """8-byte FETCH_ADD (wraps modulo 2**64); return the original value."""
        view, off = self._atomic_target(rkey, addr, pd)
        (orig,) = _U64.unpack_from(view, off)
        _U64.pack_into(view, off, (orig + add) & _U64_MASK)
        return orig

    def local_view(self, lkey: int, addr: int, length: int, write: bool = False,
                   pd: ProtectionDomain | None = None) -> memoryview:
        """A view of a local SGE (gather for send, scatter for receive/READ data)."""
        mr = self.check_local(lkey, addr, length, write, pd)
        off = addr - mr.va
        return mr.view[off:off + length]

    def close(self) -> None:
        """Deregister everything (buffers belong to their owners; close those separately)."""
        for mr in list(self._by_rkey.values()):
            self.deregister(mr)


def gather(views: list[memoryview], off: int, n: int) -> memoryview | bytes:
    """``n`` bytes at message offset ``off`` across an SGE list (zero-copy for one SGE)."""
    if len(views) == 1:
        return views[0][off:off + n]
    out = bytearray()
    for v in views:
        ln = len(v)
        if off >= ln:
            off -= ln
            continue
        take = min(ln - off, n - len(out))
        out += v[off:off + take]
        off = 0
        if len(out) == n:
            break
    return bytes(out)


def scatter(views: list[memoryview], off: int, data: bytes | memoryview) -> None:
    """Write ``data`` at message offset ``off`` across an SGE list (caller checked the length)."""
    if len(views) == 1:
        views[0][off:off + len(data)] = data
        return
    pos = 0
    n = len(data)
    for v in views:
        ln = len(v)
        if off >= ln:
            off -= ln
            continue
        take = min(ln - off, n - pos)
        v[off:off + take] = data[pos:pos + take]
        pos += take
        off = 0
        if pos == n:
            return

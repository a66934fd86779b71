# SPDX-License-Identifier: GPL-2.0-only
"""tc BPF objects: build with clang (cached per source), load with ``tc``, reach the maps.

Shared by the fabric's SRv6 datapath (:mod:`emu.fabric.srv6bpf`) and the switch
pipeline's kernel queue (:mod:`emu.switch.kernel`):

* :func:`build_object` compiles a ``*.bpf.c`` once per source version with
  Debian's clang into :data:`CACHE` (``~/.cache/emu/bpf/<name>-<sha>.o``),
  atomically, so concurrent builders may race;
* :func:`tc` runs the ``tc`` command (argv lists only, never a shell string),
  inside a named network namespace when asked (``tc -n``) — tc loads the
  object (``tc filter … bpf da obj``) through its libbpf;
* :func:`maps_of_prog` and :class:`BpfMap` reach a loaded program's maps by id
  through the ``bpf(2)`` syscall (:mod:`ctypes`, no bpftool).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import struct
import subprocess
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "emu" / "bpf"

SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
_MAP_LOOKUP_ELEM, _MAP_UPDATE_ELEM = 1, 2
_PROG_GET_FD_BY_ID, _MAP_GET_FD_BY_ID, _OBJ_GET_INFO_BY_FD = 13, 14, 15
_OBJ_PIN = 6
_F_LOCK = 4


class BpfError(RuntimeError):
    """A BPF object cannot be built or loaded here (no clang, tc refused, …)."""


def missing(source: Path, cache: Path = CACHE) -> str | None:
    """None when this machine can build (or has built) ``source`` and load it with tc,
    else why not."""
    if SYS_BPF is None:
        return f"bpf(2) syscall number unknown on {platform.machine()}"
    if shutil.which("tc") is None:
        return "no tc (apt-get install iproute2)"
    if not cached(source, cache) and shutil.which("clang") is None:
        return "no clang (apt-get install clang libbpf-dev)"
    return None


def source_hash(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()[:12]


def object_path(source: Path, cache: Path = CACHE) -> Path:
    """Where the object of this version of ``source`` is cached (``port.bpf.c`` →
    ``port-<sha>.o``)."""
    return cache / f"{source.name.split('.')[0]}-{source_hash(source)}.o"


def cached(source: Path, cache: Path = CACHE) -> bool:
    """Whether the compiled object is in ``cache`` (a cache this user may not read, as
    root's for ``emu up --dry-run`` run by another user, is no cache)."""
    try:
        return object_path(source, cache).exists()
    except OSError:
        return False


def build_object(source: Path, cache: Path = CACHE) -> Path:
    """Compile ``source`` once per version (by hash); atomic, so concurrent builders may
    race. Raises :class:`BpfError` without clang or when it fails."""
    out = object_path(source, cache)
    if out.exists():
        return out
    clang = shutil.which("clang")
    if clang is None:
        raise BpfError("no clang (apt-get install clang libbpf-dev)")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    arch = f"/usr/include/{platform.machine()}-linux-gnu"
    p = subprocess.run([clang, "-O2", "-g", "-target", "bpf", f"-I{arch}", "-c", str(source),
                        "-o", str(tmp)], capture_output=True, text=True)
    if p.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BpfError(f"clang failed on {source.name}: {p.stderr.strip()[-400:]}")
    os.replace(tmp, out)
    return out


def tc(args: list[str], netns: str | None = None, check: bool = True) -> str:
    """Run ``tc ARGS`` (inside the named namespace ``netns`` when given: ``tc -n``) and
    return its output; a failure raises :class:`BpfError` with tc's message unless
    ``check`` is false."""
    argv = ["tc", *(["-n", netns] if netns else []), *args]
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        where = f" (in {netns})" if netns else ""
        raise BpfError(f"tc {' '.join(args)}{where}: {(p.stderr or p.stdout).strip()}")
    return p.stdout


# ------------------------------------------------------------------ bpf(2)

_libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd: int, attr: bytearray) -> int:
    """The ``bpf(2)`` syscall; OSError on failure."""
    if SYS_BPF is None:
        raise BpfError(f"bpf(2) syscall number unknown on {platform.machine()}")
    buf = (ctypes.c_char * len(attr)).from_buffer(attr)
    r = _libc.syscall(SYS_BPF, cmd, buf, len(attr))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf cmd {cmd}: {os.strerror(e)}")
    return int(r)


def info(fd: int, size: int, preset: tuple[tuple[str, int, int], ...] = ()) -> bytearray:
    """``BPF_OBJ_GET_INFO_BY_FD``: the first ``size`` bytes of the object's info struct;
    ``preset`` fields ``(struct format, offset, value)`` are written first (where the
    kernel is to copy arrays, and how many)."""
    buf = bytearray(size)
    for fmt, off, val in preset:
        struct.pack_into(fmt, buf, off, val)
    ib = (ctypes.c_char * size).from_buffer(buf)
    attr = bytearray(16)
    struct.pack_into("<IIQ", attr, 0, fd, size, ctypes.addressof(ib))
    bpf(_OBJ_GET_INFO_BY_FD, attr)
    return buf


class BpfMap:
    """One entry (``key``: its index) of an array map of a loaded program, by fd;
    ``owner``: this object closes the fd (:meth:`at` makes views of other entries that
    do not)."""

    def __init__(self, fd: int, value_size: int, key: int = 0, owner: bool = True,
                 max_entries: int = 1) -> None:
        self.fd = fd
        self.value_size = value_size
        self.key = key
        self.owner = owner
        self.max_entries = max_entries
        self._key = (ctypes.c_char * 4).from_buffer(bytearray(struct.pack("<I", key)))
        self._val = bytearray(value_size)
        self._vbuf = (ctypes.c_char * value_size).from_buffer(self._val)

    def _attr(self, flags: int) -> bytearray:
        a = bytearray(32)
        struct.pack_into("<IIQQQ", a, 0, self.fd, 0, ctypes.addressof(self._key),
                         ctypes.addressof(self._vbuf), flags)
        return a

    def read(self, lock: bool = False) -> bytes:
        bpf(_MAP_LOOKUP_ELEM, self._attr(_F_LOCK if lock else 0))
        return bytes(self._val)

    def write(self, value: bytes) -> None:
        self._val[:] = value.ljust(self.value_size, b"\0")
        bpf(_MAP_UPDATE_ELEM, self._attr(0))

    def at(self, key: int, indexed: bool = True) -> BpfMap:
        """The same map's entry ``key`` (the fd stays this object's); ``indexed``: an
        array's index, checked against its size (a hash map's key is any u32)."""
        if indexed and not 0 <= key < self.max_entries:
            raise BpfError(f"map entry {key} outside 0..{self.max_entries - 1}")
        return BpfMap(self.fd, self.value_size, key, owner=False,
                      max_entries=self.max_entries)

    def close(self) -> None:
        if self.owner:
            os.close(self.fd)


def pin_prog(prog_id: int, path: str) -> None:
    """Pin the loaded program ``prog_id`` at ``path`` in a bpffs (``BPF_OBJ_PIN``), so
    that ``tc … bpf object-pinned PATH`` attaches that very program elsewhere; the
    caller unlinks it. BpfError where it cannot (no bpffs there)."""
    a = bytearray(12)
    struct.pack_into("<I", a, 0, prog_id)
    try:
        pfd = bpf(_PROG_GET_FD_BY_ID, a)
    except OSError as e:
        raise BpfError(f"program {prog_id}: {e}") from e
    try:
        name = ctypes.create_string_buffer(path.encode())
        attr = bytearray(16)
        struct.pack_into("<QI", attr, 0, ctypes.addressof(name), pfd)
        bpf(_OBJ_PIN, attr)
    except OSError as e:
        raise BpfError(f"pin program {prog_id} at {path}: {e}") from e
    finally:
        os.close(pfd)


def maps_of_prog(prog_id: int) -> dict[str, BpfMap]:
    """The maps a loaded program uses, by name (``bpf_prog_info.map_ids``); the caller
    closes them."""
    a = bytearray(12)
    struct.pack_into("<I", a, 0, prog_id)
    pfd = bpf(_PROG_GET_FD_BY_ID, a)
    try:
        ids = (ctypes.c_uint32 * 8)()
        # bpf_prog_info: nr_map_ids (u32 at 52), map_ids (u64 pointer at 56)
        pinfo = info(pfd, 80, (("<I", 52, len(ids)), ("<Q", 56, ctypes.addressof(ids))))
        n = struct.unpack_from("<I", pinfo, 52)[0]
        out: dict[str, BpfMap] = {}
        for mid in list(ids)[:min(n, len(ids))]:
            a = bytearray(12)
            struct.pack_into("<I", a, 0, mid)
            mfd = bpf(_MAP_GET_FD_BY_ID, a)
            mi = info(mfd, 40)
            vsize, entries = struct.unpack_from("<II", mi, 12)
            name = mi[24:40].split(b"\0")[0].decode()
            out[name] = BpfMap(mfd, vsize, max_entries=entries)
        return out
    finally:
        os.close(pfd)

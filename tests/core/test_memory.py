# SPDX-License-Identifier: GPL-2.0-only
"""Memory regions: shared buffers across processes, key/bounds/access checks, atomics."""

import multiprocessing
import os
import random

import pytest

from emu.core.memory import (
    SHM_DIR,
    SHM_PREFIX,
    Access,
    MemError,
    MemoryAccessError,
    MemoryTable,
    SharedBuffer,
)

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
ALL = RW | Access.REMOTE_ATOMIC


def our_shm():
    return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(f"{SHM_PREFIX}{os.getpid()}-"))


@pytest.fixture
def table():
    t = MemoryTable(random.Random(42))
    yield t
    t.close()


@pytest.fixture
def buf():
    b = SharedBuffer.create(4096)
    yield b
    b.close()


def test_create_attach_close_leaves_nothing():
    before = our_shm()
    b = SharedBuffer.create(10_000)
    assert b.name in os.listdir(SHM_DIR) and b.size == 10_000 and b.owner
    a = SharedBuffer.attach(b.name)
    assert a.size == 10_000 and not a.owner
    b.view[5:8] = b"abc"
    assert bytes(a.view[5:8]) == b"abc"  # same pages
    a.close()
    assert b.name in os.listdir(SHM_DIR)  # an attacher never unlinks
    held = b.view[0:4]  # a slice outliving close must not leave the name behind
    b.close()
    b.close()  # idempotent
    assert our_shm() == before and b.closed
    held.release()
    z = SharedBuffer.create(0)
    assert z.size == 0 and len(z.view) == 0
    z.close()
    with SharedBuffer.create(8) as c:
        name = c.name
    assert name not in os.listdir(SHM_DIR)
    with pytest.raises(ValueError):
        SharedBuffer.attach("../etc/passwd")
    with pytest.raises(FileNotFoundError):
        SharedBuffer.attach(name)


def _child(name, conn):
    b = SharedBuffer.attach(name)
    seen = bytes(b.view[0:5])
    b.view[100:105] = b"child"
    b.close()
    conn.send(seen)


def test_write_visible_from_another_process(table):
    """The daemon/application split: a spawned process maps the region by name."""
    b = SharedBuffer.create(4096)
    try:
        pd = table.alloc_pd()
        mr = table.register(pd, b, RW)
        table.remote_write(mr.rkey, mr.va, b"hello", pd)  # a remote WRITE lands in b
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_child, args=(b.name, child))
        p.start()
        seen = parent.recv()
        p.join(30)
        assert p.exitcode == 0
        assert seen == b"hello"
        assert bytes(b.view[100:105]) == b"child"
        assert bytes(table.remote_read(mr.rkey, mr.va + 100, 5, pd)) == b"child"
    finally:
        b.close()
    assert b.name not in os.listdir(SHM_DIR)


def test_keys_are_random_unique_and_from_the_rng(buf):
    t1, t2 = MemoryTable(random.Random(1)), MemoryTable(random.Random(1))
    pd1, pd2 = t1.alloc_pd(), t2.alloc_pd()
    mrs1 = [t1.register(pd1, buf, RW, offset=i * 64, length=64) for i in range(20)]
    mrs2 = [t2.register(pd2, buf, RW, offset=i * 64, length=64) for i in range(20)]
    assert [m.rkey for m in mrs1] == [m.rkey for m in mrs2]  # deterministic under a seed
    keys = [m.rkey for m in mrs1] + [m.lkey for m in mrs1]
    assert len(set(keys)) == 40 and all(0 < k < 1 << 32 for k in keys)
    vas = sorted(m.va for m in mrs1)
    assert all(b - a >= 2 * 4096 for a, b in zip(vas, vas[1:], strict=False))  # guard pages
    assert len(t1) == 20
    t1.close()
    t2.close()
    assert len(t1) == 0


def snapshot(b):
    return bytes(b.view)


@pytest.mark.parametrize("case", [
    "invalid_key", "deregistered", "out_of_bounds_high", "out_of_bounds_low", "straddle",
    "no_remote_write", "wrong_pd",
])
def test_refused_writes_write_zero_bytes(table, buf, case):
    pd, other = table.alloc_pd(), table.alloc_pd()
    mr = table.register(pd, buf, RW, offset=1024, length=1024, va=0x10000)
    ro = table.register(pd, buf, Access.REMOTE_READ, offset=0, length=1024)
    rkey, addr, use_pd, data = mr.rkey, 0x10000, pd, b"\xAA" * 64
    expect = MemError.OUT_OF_BOUNDS
    if case == "invalid_key":
        rkey, expect = mr.rkey ^ 0x5A5A, MemError.INVALID_KEY
    elif case == "deregistered":
        table.deregister(mr)
        expect = MemError.INVALID_KEY
    elif case == "out_of_bounds_high":
        addr = 0x10000 + 1024 - 63
    elif case == "out_of_bounds_low":
        addr = 0x10000 - 1
    elif case == "straddle":
        data = b"\xAA" * 1025
    elif case == "no_remote_write":
        rkey, addr, expect = ro.rkey, ro.va, MemError.ACCESS_VIOLATION
    elif case == "wrong_pd":
        use_pd, expect = other, MemError.WRONG_PD
    before = snapshot(buf)
    with pytest.raises(MemoryAccessError) as ei:
        table.remote_write(rkey, addr, data, use_pd)
    assert ei.value.kind is expect
    assert snapshot(buf) == before


def test_reads_and_local_checks(table, buf):
    pd = table.alloc_pd()
    mr = table.register(pd, buf, RW, offset=100, length=200, va=0x5000)
    table.remote_write(mr.rkey, 0x5000 + 10, memoryview(b"xyz"), pd)
    assert bytes(buf.view[110:113]) == b"xyz"
    view = table.remote_read(mr.rkey, 0x5000 + 10, 3)  # pd=None: caller checked elsewhere
    assert isinstance(view, memoryview) and bytes(view) == b"xyz"
    assert bytes(table.remote_read(0xDEAD, 0, 0)) == b""  # zero length validates nothing
    table.remote_write(0xDEAD, 0, b"")
    wo = table.register(pd, buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    with pytest.raises(MemoryAccessError) as ei:
        table.remote_read(wo.rkey, wo.va, 8)
    assert ei.value.kind is MemError.ACCESS_VIOLATION
    ro = table.register(pd, buf, Access.REMOTE_READ)
    assert bytes(table.local_view(ro.lkey, ro.va + 110, 3)) == b"xyz"  # local read: always
    with pytest.raises(MemoryAccessError) as ei:
        table.local_view(ro.lkey, ro.va, 8, write=True)
    assert ei.value.kind is MemError.ACCESS_VIOLATION
    with pytest.raises(MemoryAccessError) as ei:
        table.check_local(mr.rkey ^ 1, 0, 1, False)
    assert ei.value.kind is MemError.INVALID_KEY
    table.local_view(mr.lkey, 0x5000, 200, write=True)[:3] = b"abc"
    assert bytes(buf.view[100:103]) == b"abc"
    assert table.by_rkey(mr.rkey) is mr and table.by_lkey(mr.lkey) is mr


def test_register_validation(table, buf):
    pd = table.alloc_pd()
    with pytest.raises(ValueError):
        table.register(pd, buf, Access.REMOTE_WRITE)  # needs LOCAL_WRITE, as verbs says
    with pytest.raises(ValueError):
        table.register(pd, buf, Access.REMOTE_ATOMIC)
    with pytest.raises(ValueError):
        table.register(pd, buf, RW, offset=4000, length=200)
    with pytest.raises(ValueError):
        table.register(pd, buf, RW, va=(1 << 64) - 10)
    b2 = SharedBuffer.create(8)
    b2.close()
    with pytest.raises(ValueError):
        table.register(pd, b2, RW)


def test_atomics(table, buf):
    pd = table.alloc_pd()
    mr = table.register(pd, buf, ALL, va=0x20000)
    a = 0x20000 + 64
    assert table.fetch_add(mr.rkey, a, 5, pd) == 0
    assert table.fetch_add(mr.rkey, a, (1 << 64) - 1, pd) == 5  # wraps: 5 + (-1)
    assert int.from_bytes(buf.view[64:72], "little") == 4
    assert table.compare_swap(mr.rkey, a, 3, 99, pd) == 4  # mismatch: unchanged
    assert int.from_bytes(buf.view[64:72], "little") == 4
    assert table.compare_swap(mr.rkey, a, 4, 0xFFFF_FFFF_FFFF_FFFF, pd) == 4
    assert table.fetch_add(mr.rkey, a, 1, pd) == (1 << 64) - 1
    assert int.from_bytes(buf.view[64:72], "little") == 0
    before = snapshot(buf)
    for addr, kind in ((a + 4, MemError.MISALIGNED), (0x20000 + 4092, MemError.OUT_OF_BOUNDS)):
        with pytest.raises(MemoryAccessError) as ei:
            table.fetch_add(mr.rkey, addr, 1, pd)
        assert ei.value.kind is kind
    rw = table.register(pd, buf, RW)
    with pytest.raises(MemoryAccessError) as ei:
        table.compare_swap(rw.rkey, rw.va, 0, 1, pd)
    assert ei.value.kind is MemError.ACCESS_VIOLATION
    assert snapshot(buf) == before


def test_deregistered_keys_are_not_reused(buf):
    class Repeating:
        """An RNG that offers the same key again and again before a fresh one."""

        def __init__(self):
            self.vals = [7, 8, 7, 8, 7, 8, 9, 10]

        def getrandbits(self, k):
            return self.vals.pop(0)

    t = MemoryTable(Repeating())
    pd = t.alloc_pd()
    mr = t.register(pd, buf, RW)
    assert (mr.lkey, mr.rkey) == (7, 8)
    t.deregister(mr)
    t.deregister(mr)  # idempotent
    mr2 = t.register(pd, buf, RW)
    assert (mr2.lkey, mr2.rkey) == (9, 10)
    with pytest.raises(MemoryAccessError):
        t.remote_write(8, mr.va, b"x")

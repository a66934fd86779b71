# SPDX-License-Identifier: GPL-2.0-only
"""Two UET engines over an in-memory lossy link, and checks shared by the UET tests."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from lossy_link import LossyLink, register

from emu.core.cq import WcStatus
from emu.core.memory import MemoryTable
from emu.core.verbs import Sge
from emu.transports.uet import UetEngine

MiB = 1 << 20
LOSSY = {"loss": 0.02, "reorder": 0.05, "dup": 0.02}
A = ("10.0.0.1", 4793)
B = ("10.0.0.2", 4793)


@dataclass
class UetPair:
    link: LossyLink
    ea: UetEngine
    eb: UetEngine
    ma: MemoryTable
    mb: MemoryTable
    a: int  # endpoint on A
    b: int  # endpoint on B


def uet_pair(seed: int = 1, *, ekw: dict | None = None, ekw_b: dict | None = None,
             **link_kw: Any) -> UetPair:
    """Engines A and B (endpoint a on A, b on B) joined by a seeded LossyLink."""
    ma, mb = MemoryTable(random.Random(seed)), MemoryTable(random.Random(seed + 1))
    ea = UetEngine(ma, random.Random(seed + 2), **(ekw or {}))
    eb = UetEngine(mb, random.Random(seed + 3), **(ekw_b if ekw_b is not None else ekw or {}))
    link = LossyLink(ea, eb, addr_a=A, addr_b=B, seed=seed, **link_kw)
    a = ea.create_ep(send_cq="a.scq", recv_cq="a.rcq")
    b = eb.create_ep(send_cq="b.scq", recv_cq="b.rcq")
    return UetPair(link, ea, eb, ma, mb, a, b)


def write(p: UetPair, wr_id: int, size: int, seed: int = 0, *, mode: str | None = None,
          dst: Any = None) -> tuple[Any, Any, bytes]:
    """Post a WRITE of ``size`` random bytes from A to a fresh region on B (or ``dst``),
    in delivery ``mode`` (None: the endpoint's default)."""
    src = register(p.ma, max(size, 1))
    dst = dst or register(p.mb, max(size, 1))
    data = random.Random(seed or size).randbytes(max(size, 1))
    src.view[:] = data
    p.ea.post_write(p.a, wr_id, [Sge(src.va, size, src.lkey)], (B[0], p.b), dst.va, dst.rkey,
                    p.link.now, mode=mode)
    return src, dst, data[:size]


def ok(wcs: list, *wr_ids: int) -> None:
    assert [w.wr_id for w in wcs] == list(wr_ids), wcs
    assert all(w.status is WcStatus.SUCCESS for w in wcs), wcs


def clean(p: UetPair) -> None:
    for e in (p.ea, p.eb):
        assert e.counters().get("rx_drop_internal_error", 0) == 0, e.counters()

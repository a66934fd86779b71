# SPDX-License-Identifier: GPL-2.0-only
"""Golden wire traces: seeded sans-IO transfers per transport, every datagram kept.

Why: refactoring an engine (one rule path, batch-first sending, a shared
reliable core) must not change what goes on the wire. Equivalence tests
compare two paths of today's code; a golden trace compares today's code with
the code as it was when the trace was recorded — every datagram either side
emitted, byte for byte and in order, with its send time, UDP ports, DSCP and ECN.

Each scenario runs two engines over a seeded :class:`~lossy_link.LossyLink`
with loss, reordering, duplication, CE marking and trimming (the real switch
pipeline, :func:`lossy_link.trim_roce` / :func:`lossy_link.trim_uet`), posts a
mix of operations, runs to quiescence and checks the data arrived. The
recorded datagrams live in ``tests/golden/<scenario>.bin.xz``.

Re-record (only when a change is *meant* to alter the wire, which is then a
wire change and not a refactoring)::

    .venv/bin/python tests/support/golden_trace.py record
"""

from __future__ import annotations

import lzma
import pathlib
import random
import struct
import sys
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lossy_link import LossyLink, register, roce_pair, trim_uet  # noqa: E402

DIR = pathlib.Path(__file__).resolve().parents[1] / "golden"
IMPAIR = {"loss": 0.02, "reorder": 0.05, "dup": 0.02, "ce": 0.05}
TRIM_P = 0.04
LIGHT = {"loss": 0.003, "reorder": 0.005, "dup": 0.002}  # bulk: mostly in order
#: time in ps, side (0 a, 1 b), entropy (UDP source port), DSCP, ECN, UDP destination
#: port, length — then the datagram
_REC = struct.Struct("!QBHBBHI")

Record = tuple[int, int, int, int, int, int, bytes]


def _run_and_check(link: LossyLink, n: int, checks: list) -> None:
    """Run the link dry; A's ``n`` WRs completed OK and every target holds its bytes."""
    link.run()
    wcs = link.completions("a")
    assert sorted(w.wr_id for w in wcs) == list(range(n)), wcs
    assert all(w.ok for w in wcs), wcs
    for mr, data in checks:
        assert bytes(mr.view[:len(data)]) == data

def _pattern(seed: int, size: int) -> bytes:
    """Payload bytes: seeded, and compressible so the stored trace stays small."""
    base = random.Random(seed).randbytes(251)
    return (base * (size // 251 + 1))[:size]


def _trim_hook(seed: int, p: float = TRIM_P) -> Callable[[bytes, tuple, tuple], bool]:
    rng = random.Random(seed)
    return lambda data, src, dst: rng.random() < p


def _records(link: LossyLink) -> list[Record]:
    assert link.wire is not None
    return [(round(t * 1e12), 0 if side == "a" else 1, m.entropy, m.dscp, m.ecn, addr[1], data)
            for t, side, data, addr, m in link.wire]


def _impaired(link: LossyLink, ce: bool = True) -> None:
    """The scenario really went through the impairments it claims (else it guards little)."""
    assert link.dropped > 0 and link.trimmed > 0 and (link.marked > 0 or not ce), (
        link.dropped, link.trimmed, link.marked)


# -- RoCEv2 -------------------------------------------------------------------------


ROCE_MIXED = [("write", 0), ("write", 1), ("write", 40_000), ("send", 9_000),
              ("read", 20_000), ("write", 70_001), ("send", 1024), ("read", 3)]
ROCE_BULK = [("write", 1 << 20), ("read", 300_000), ("send", 200_001)]


def _roce(seed: int, engine_kw: dict | None, plan: list = ROCE_MIXED, impair: dict = IMPAIR,
          trim_p: float = TRIM_P, pmtu: int = 1024) -> list[Record]:
    from emu.transports.roce import RecvWR, SendWR, Sge

    rp = roce_pair(seed=seed, pmtu=pmtu, engine_kw=engine_kw, trim=_trim_hook(seed, trim_p),
                   **impair)
    rp.link.wire = []
    checks = []
    for i, (kind, size) in enumerate(plan):
        n = max(size, 1)
        src, dst = register(rp.ma, n), register(rp.mb, n)
        data = _pattern(seed + i, n)
        if kind == "read":
            dst.view[:] = data
            rp.ea.post_send(rp.qa, SendWR.read(i, [Sge(src.va, size, src.lkey)], dst.va,
                                               dst.rkey))
            checks.append((src, data[:size]))
            continue
        src.view[:] = data
        if kind == "write":
            rp.ea.post_send(rp.qa, SendWR.write(i, [Sge(src.va, size, src.lkey)], dst.va,
                                                dst.rkey))
        else:
            rp.eb.post_recv(rp.qb, RecvWR(100 + i, [Sge(dst.va, n, dst.lkey)]))
            rp.ea.post_send(rp.qa, SendWR.send(i, [Sge(src.va, size, src.lkey)]))
        checks.append((dst, data[:size]))
    _run_and_check(rp.link, len(plan), checks)
    _impaired(rp.link, "ce" in impair)
    return _records(rp.link)


def roce_icrc() -> list[Record]:
    """RoCEv2 with ICRCs sealed and checked (the general receive path), DCQCN."""
    return _roce(21, None)


def roce_daemon() -> list[Record]:
    """RoCEv2 as the daemons run it: Gather output, no ICRC, the WRITE-middle fast path."""
    return _roce(22, {"icrc": None, "gather": True, "runs": True})


def roce_bulk() -> list[Record]:
    """RoCEv2 daemon engines, bulk transfers at PMTU 4096 with light loss (fast paths)."""
    return _roce(23, {"icrc": None, "gather": True, "runs": True}, ROCE_BULK, LIGHT, 0.004,
                 4096)


# -- UET ------------------------------------------------------------------------------


MIXED = [("write", 0, None), ("write", 1, None), ("write", 40_000, None),
         ("send", 9_000, None), ("read", 20_000, None), ("write", 70_001, None),
         ("write", 30_000, "rod"), ("write", 3_000, "rudi"), ("tsend", 5_000, None),
         ("write", 100_000, None)]
#: mostly in order, so the receive fast path and Run bursts carry most packets
BULK = [("write", 1 << 20, None), ("write", (1 << 20) + 5, None), ("send", 300_000, None)]


def _uet(seed: int, ekw: dict, src_ports: bool, plan: list = MIXED,
         impair: dict = IMPAIR, trim_p: float = TRIM_P, batch: bool = False) -> list[Record]:
    from uet_pair import B, uet_pair

    from emu.core.verbs import Sge

    p = uet_pair(seed=seed, ekw=ekw, trim=_trim_hook(seed, trim_p), trimmer=trim_uet,
                 src_ports=src_ports, batch=batch, **impair)
    p.link.wire = []
    checks = []
    for i, (kind, size, mode) in enumerate(plan):
        n = max(size, 1)
        src, dst = register(p.ma, n), register(p.mb, n)
        data = _pattern(seed + i, n)
        sge = [Sge(src.va, size, src.lkey)]
        if kind == "read":
            dst.view[:] = data
            p.ea.post_read(p.a, i, sge, (B[0], p.b), dst.va, dst.rkey)
            checks.append((src, data[:size]))
            continue
        src.view[:] = data
        if kind == "write":
            p.ea.post_write(p.a, i, sge, (B[0], p.b), dst.va, dst.rkey, p.link.now, mode=mode)
        elif kind == "send":
            p.eb.post_recv(p.b, 100 + i, [Sge(dst.va, n, dst.lkey)])
            p.ea.post_send(p.a, i, sge, (B[0], p.b))
        else:
            p.eb.post_trecv(p.b, 100 + i, [Sge(dst.va, n, dst.lkey)], 0xABC0 + i)
            p.ea.post_tsend(p.a, i, sge, (B[0], p.b), 0xABC0 + i)
        checks.append((dst, data[:size]))
    _run_and_check(p.link, len(plan), checks)
    for e in (p.ea, p.eb):
        assert e.counters().get("rx_drop_internal_error", 0) == 0
    assert p.eb.counters().get("rx_trimmed", 0) > 0
    _impaired(p.link, "ce" in impair)
    return _records(p.link)


def uet_plain() -> list[Record]:
    """UET with plain datagrams and the engine's defaults (the general paths)."""
    return _uet(31, {"mtu": 1024}, False)


def uet_daemon(batch: bool = False) -> list[Record]:
    """UET as the daemons run it: Gather and Run output, ACK coalescing, NSCC, REPS
    paths (entropies echoed by the link), an adaptive RTO. ``batch``: what arrives at
    one instant reaches the target in one ``receive_batch``, as a daemon's read
    hands it over — the same datagrams must leave (the recording was made one by one)."""
    return _uet(32, {"mtu": 2048, "gather": True, "runs": True, "ack_coalesce": True,
                     "cc": "nscc", "paths": "reps", "rto_max": 8e-3}, True, batch=batch)


def uet_bulk(batch: bool = False) -> list[Record]:
    """UET daemon-style bulk WRITEs and a SEND with light loss: the fast paths at work
    (``batch``: as for :func:`uet_daemon`)."""
    return _uet(33, {"mtu": 4096, "gather": True, "runs": True, "ack_coalesce": True},
                False, BULK, LIGHT, 0.004, batch=batch)


SCENARIOS: dict[str, Callable[[], list[Record]]] = {
    "roce-icrc": roce_icrc, "roce-daemon": roce_daemon, "roce-bulk": roce_bulk,
    "uet-plain": uet_plain, "uet-daemon": uet_daemon, "uet-bulk": uet_bulk,
}


# -- storage ------------------------------------------------------------------------


def encode(records: list[Record]) -> bytes:
    out = bytearray()
    for *head, data in records:
        out += _REC.pack(*head, len(data)) + data
    return lzma.compress(bytes(out), preset=9)


def decode(blob: bytes) -> list[Record]:
    raw, off, out = lzma.decompress(blob), 0, []
    while off < len(raw):
        *head, n = _REC.unpack_from(raw, off)
        off += _REC.size
        out.append((*head, raw[off:off + n]))
        off += n
    return out


def path(name: str) -> pathlib.Path:
    return DIR / f"{name}.bin.xz"


def record() -> None:
    DIR.mkdir(exist_ok=True)
    for name, fn in SCENARIOS.items():
        recs = fn()
        path(name).write_bytes(encode(recs))
        print(f"{name}: {len(recs)} datagrams, {path(name).stat().st_size} B stored")


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        sys.exit("usage: golden_trace.py record")
    record()

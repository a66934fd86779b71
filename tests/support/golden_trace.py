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

    .venv/bin/python tests/support/golden_trace.py record [scenario ...]
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
#: time in ps, side (0 a, 1 b; MRC: plus twice the plane the destination address is on),
#: entropy (UDP source port), DSCP, ECN, UDP destination port, length — then the datagram
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


def _records(link: LossyLink, plane: Callable[[str], int] = lambda a: 0) -> list[Record]:
    """The link's wire as records; ``plane``: the plane of a destination address (MRC's
    planes are told apart by the address a datagram goes to)."""
    assert link.wire is not None
    return [(round(t * 1e12), (0 if side == "a" else 1) + 2 * plane(addr[0]), m.entropy,
             m.dscp, m.ecn, addr[1], data)
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


# -- MRC ------------------------------------------------------------------------------


#: (bytes, with an immediate): WRITEs, WRITEs with immediate, an empty one
MRC_MIXED = [(1, False), (40_000, False), (9_000, True), (0, False), (70_001, False),
             (3_000, True), (100_000, False)]
MRC_BULK = [(1 << 20, False), ((1 << 20) + 5, False), (300_001, True)]
_MRC_A, _MRC_B = ["10.0.0.1", "10.1.0.1"], ["10.0.0.2", "10.1.0.2"]


def _mrc_plane(addr: str) -> int:
    return int(addr.split(".")[1])  # 10.<plane>.0.x


def _mrc(seed: int, ekw: dict, plan: list, impair: dict, trim_p: float,
         fail_at: int | None = None, rate: float | None = None,
         delay: float = 5e-6) -> list[Record]:
    """Two MRC engines of two planes each (a port per plane, the EV its source port),
    over a seeded impaired link with the real switch trim; ``fail_at``: plane 1 fails at
    both NICs once A has sent that many datagrams, and comes back once the rest is in."""
    from lossy_link import trim_roce

    from emu.core.memory import MemoryTable
    from emu.core.verbs import RecvWR, SendWR, Sge
    from emu.transports.mrc import MrcEngine

    ma, mb = MemoryTable(random.Random(seed)), MemoryTable(random.Random(seed + 1))
    kw = {"planes": 2, **ekw}
    ea = MrcEngine(ma, random.Random(seed + 2), local_addr=(_MRC_A[0], 4971),
                   local_addrs=_MRC_A, **kw)
    eb = MrcEngine(mb, random.Random(seed + 3), local_addr=(_MRC_B[0], 4971),
                   local_addrs=_MRC_B, **kw)
    link = LossyLink(ea, eb, addr_a=(_MRC_A[0], 4971), addr_b=(_MRC_B[0], 4971), seed=seed,
                     src_ports=True, delay=delay, rate=rate, trim=_trim_hook(seed, trim_p),
                     trimmer=trim_roce,
                     src_of=lambda side, dest: (_MRC_A if side == "a" else _MRC_B)[
                         _mrc_plane(dest)], **impair)
    qa, qb = ea.create_qp(send_cq="a.s", recv_cq="a.r"), eb.create_qp(send_cq="b.s",
                                                                       recv_cq="b.r")
    ia, ib = ea.query_qp(qa), eb.query_qp(qb)
    ea.connect(qa, ib)
    eb.connect(qb, ia)
    link.wire = []
    checks = []
    for i, (size, imm) in enumerate(plan):
        n = max(size, 1)
        src, dst = register(ma, n), register(mb, n)
        data = _pattern(seed + i, n)
        src.view[:] = data
        if imm:
            eb.post_recv(qb, RecvWR(100 + i))
        ea.post_send(qa, SendWR.write(i, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey,
                                      imm=0xC0DE0000 + i if imm else None))
        checks.append((dst, data[:size]))
    if fail_at is not None:
        link.run(stop=lambda: link.sent["a"] >= fail_at)
        for e in (ea, eb):
            e.port_link(1, False, link.now)
        link.run(stop=lambda: link.sent["a"] >= 2 * fail_at)
        for e in (ea, eb):
            e.port_link(1, True, link.now)
    _run_and_check(link, len(plan), checks)
    assert [w.imm for w in link.completions("b", "b.r")] == [
        0xC0DE0000 + i for i, (_, imm) in enumerate(plan) if imm]
    _impaired(link, "ce" in impair)
    return _records(link, _mrc_plane)


def mrc_impaired() -> list[Record]:
    """MRC with NSCC behind a paced port (``tx_hold``), a small EV set that loss, trims
    and timeouts keep replacing and probing, and plane 1 failing and coming back at both
    NICs mid-transfer (resends at once, PORT_STATUS_UPDATEs, probes)."""
    return _mrc(41, {"ev_set": 32, "pmtu": 1024, "line_rate": 10e9, "base_rtt": 20e-6,
                     "timeout": 8, "tx_hold": 20e-6, "frame_overhead": 62},
                MRC_MIXED, IMPAIR, TRIM_P, fail_at=60)


def mrc_timeouts() -> list[Record]:
    """MRC with a local ACK timeout shorter than its round trips under 5 % loss: timeouts
    that retire EVs, resends by the timer, probes lost and answered, one plane's EVs
    floored by ``ev_min_active`` (no ``tx_hold``: the whole window at once)."""
    return _mrc(43, {"ev_set": 16, "pmtu": 1024, "line_rate": 10e9, "base_rtt": 20e-6,
                     "timeout": 3, "ev_min_active": 4}, MRC_MIXED, {**IMPAIR, "loss": 0.05},
                0.02)


def mrc_bulk() -> list[Record]:
    """MRC as the daemons run it on 400 Gb/s ports (2 fabric-µs FIFO, 256 EVs, PMTU
    4096), bulk WRITEs with light loss: the bulk send and receive paths."""
    return _mrc(42, {"ev_set": 256, "pmtu": 4096, "line_rate": 400e9, "base_rtt": 8e-6,
                     "tx_hold": 2e-6, "frame_overhead": 42}, MRC_BULK, LIGHT, 0.004,
                rate=800e9, delay=3e-6)


SCENARIOS: dict[str, Callable[[], list[Record]]] = {
    "roce-icrc": roce_icrc, "roce-daemon": roce_daemon, "roce-bulk": roce_bulk,
    "uet-plain": uet_plain, "uet-daemon": uet_daemon, "uet-bulk": uet_bulk,
    "mrc-impaired": mrc_impaired, "mrc-timeouts": mrc_timeouts, "mrc-bulk": mrc_bulk,
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


def record(names: list[str] | None = None) -> None:
    """Record ``names`` (default: every scenario)."""
    DIR.mkdir(exist_ok=True)
    for name, fn in SCENARIOS.items():
        if names and name not in names:
            continue
        recs = fn()
        path(name).write_bytes(encode(recs))
        print(f"{name}: {len(recs)} datagrams, {path(name).stat().st_size} B stored")


if __name__ == "__main__":
    if sys.argv[1:2] != ["record"] or not set(sys.argv[2:]) <= set(SCENARIOS):
        sys.exit(f"usage: golden_trace.py record [{'|'.join(SCENARIOS)} ...]")
    record(sys.argv[2:])

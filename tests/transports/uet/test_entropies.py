# SPDX-License-Identifier: GPL-2.0-only
"""UET's entropy set (emu.transports.uet.engine: ENTROPY_COUNT): large by default, a
setting, and what it is for — a sprayed flow spreads evenly over ECMP's uplinks.

Sans-IO through the in-memory lossy link. The switches are modelled the way the
kernel's ECMP is (``fib_multipath_hash_policy`` 1): a fixed hash of (source address,
destination address, source port) — the UDP source port being the entropy — modulo
the number of uplinks.
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections import Counter
from types import SimpleNamespace

import pytest
from uet_pair import A, B, MiB, clean, ok, uet_pair, write

from emu.core.memory import MemoryTable
from emu.nic.topology import check_section, daemon_args
from emu.topology.loader import loads
from emu.topology.model import TopologyError
from emu.transports.uet import UetEngine
from emu.transports.uet.engine import ENTROPY_BASE, ENTROPY_COUNT
from emu.transports.uet.factory import build_engine

SPINES = 4


def spine(sport: int, seed: int = 0, src: str = A[0], dst: str = B[0]) -> int:
    """The uplink a switch's ECMP hash sends a packet to: a fixed hash of source address,
    destination address and source port, keyed by ``seed`` (as the kernel's jhash by
    ``fib_multipath_hash_seed``), modulo :data:`SPINES`. (Not CRC-32: it is linear, and
    over consecutive ports it splits them exactly evenly — no real switch's hash does.)"""
    key = src.encode() + b">" + dst.encode() + struct.pack("!H", sport)
    h = hashlib.blake2b(key, digest_size=4, key=struct.pack("!I", seed)).digest()
    return int.from_bytes(h, "big") % SPINES


def _flow(packets: int, seed: int, **ekw) -> Counter:
    """The UDP source ports of one flow's data packets (A's UET requests): a WRITE of
    ``packets`` 1 KiB packets over a clean link, byte-exact."""
    sent: Counter = Counter()

    def count(data: bytes, meta, side: str) -> bool:
        if side == "a" and meta.dscp == 0:  # A's data packets (control leaves as EF)
            sent[meta.entropy] += 1
        return False

    p = uet_pair(seed, ekw={"mtu": 1024, **ekw}, mark=count)
    _, dst, data = write(p, 1, packets * 1024, seed=seed)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert bytes(dst.view[:len(data)]) == data
    clean(p)
    assert sum(sent.values()) == packets  # a clean link: each packet once
    return sent


def _worst_share_error(ports: Counter, seed: int) -> float:
    """The largest |share − 1/SPINES| over the spines, for one hash seed."""
    per = Counter()
    for sport, n in ports.items():
        per[spine(sport, seed)] += n
    total = sum(ports.values())
    return max(abs(per[s] / total - 1 / SPINES) for s in range(SPINES))


def test_the_default_set_is_4096_ports_below_mrcs_evs():
    e = UetEngine(MemoryTable(random.Random(1)), random.Random(2))
    assert e.entropies == range(ENTROPY_BASE, ENTROPY_BASE + ENTROPY_COUNT)
    assert (ENTROPY_BASE, ENTROPY_COUNT) == (49152, 4096)
    assert e.entropies[-1] < 0xD000  # MRC's default EVs start at 53248


def test_oblivious_spreads_a_long_flow_over_thousands_of_entropies():
    """10,000 packets of one flow meet the switches' hash on thousands of source ports
    (~3,700 distinct expected from 10,000 uniform draws of 4096), all in the set."""
    ports = _flow(10_000, 7)
    assert len(ports) >= 1000, len(ports)
    assert set(ports) <= set(range(49152, 53248))


def test_one_flow_keeps_four_spines_even_where_64_entropies_did_not():
    """What a user cares about: one sprayed flow's 8192 packets put within 3 points of a
    quarter on each of 4 spines, for every one of 10 hash seeds (the scenario's
    sweep). With the 64 entropies the engine once had, the hash's share of the *set*
    decides: at some seed a spine got far more or less than its quarter."""
    big = _flow(8192, 11)
    small = _flow(8192, 11, entropy_count=64)
    assert len(small) == 64
    errs = [_worst_share_error(big, seed) for seed in range(1, 11)]
    assert max(errs) <= 0.03, errs
    errs64 = [_worst_share_error(small, seed) for seed in range(1, 11)]
    assert max(errs64) > 0.05, errs64  # ±22 % of a quarter: ±5.4 points, one sd


def test_reps_still_steers_off_a_congested_spine_over_the_large_set():
    """REPS over 4096 entropies with the sans-IO default of an ACK per 16 KiB (four
    packets): an explored entropy is almost always new, so REPS cannot learn a bad
    *entropy* twice — but those that hashed onto the congested spine come back
    ECN-marked and are not recycled, and every packet a clean ACK released is: the
    flow's share of that spine falls far below the quarter oblivious spraying gives."""
    bad = 2
    shares = {}
    for paths in ("oblivious", "reps"):
        sent: Counter = Counter()

        def mark(data: bytes, meta, side: str, sent: Counter = sent) -> bool:
            if side == "a" and meta.dscp == 0:
                sent[meta.entropy] += 1
            return spine(meta.entropy) == bad

        p = uet_pair(3, ekw={"paths": paths, "mtu": 4096}, src_ports=True, mark=mark)
        _, dst, data = write(p, 1, 4 * MiB, seed=3)
        p.link.run()
        ok(p.link.completions("a"), 1)
        assert bytes(dst.view[:len(data)]) == data
        on_bad = sum(n for e, n in sent.items() if spine(e) == bad)
        shares[paths] = on_bad / sum(sent.values())
    assert shares["oblivious"] > 0.2, shares
    # (recycling only the ACK's own entropy: ~0.2 here — three packets in four explored)
    assert shares["reps"] < 0.25 * shares["oblivious"], shares


def test_entropy_count_is_a_setting_and_entropies_still_work():
    mem, rng = MemoryTable(random.Random(1)), random.Random(2)
    assert UetEngine(mem, rng, entropy_count=256).entropies == range(49152, 49408)
    assert UetEngine(mem, rng, entropies=[50000, 50001, 50000]).entropies == (50000, 50001)
    assert UetEngine(mem, rng, entropies=range(50000, 50016)).entropies == range(50000, 50016)
    for bad in (0, 4097, True, "8"):
        with pytest.raises(ValueError, match="entropy_count"):
            UetEngine(mem, rng, entropy_count=bad)
    with pytest.raises(ValueError, match="not both"):
        UetEngine(mem, rng, entropies=[50000], entropy_count=8)
    with pytest.raises(ValueError, match="1..65535"):
        UetEngine(mem, rng, entropies=[0, 5])

    # what a daemon hands the factory (emu nicd --engine-opt uet.entropy_count=N)
    ctx = SimpleNamespace(memory=mem, rng=rng, addresses=["10.0.0.1"], port=4793, mtu=9000,
                          options={"entropy_count": 512})
    assert build_engine(ctx).entropies == range(49152, 49664)
    # the topology's [nic.uet] table and --set nic.uet.entropy_count=N are checked at load
    assert check_section({"uet": {"entropy_count": 1024}}) is None
    where, why = check_section({"uet": {"entropy_count": 100_000}})
    assert where.startswith("nic.uet") and "entropy_count" in why
    # … and reach every daemon as an engine option (emu up: emu nicd --engine-opt)
    topo = loads('[topology]\nkind = "pair"\n', overrides=["nic.uet.entropy_count=1024"])
    assert daemon_args(topo.nic) == ("--engine-opt", "uet.entropy_count=1024")
    with pytest.raises(TopologyError, match="entropy_count"):
        loads('[topology]\nkind = "pair"\n', overrides=["nic.uet.entropy_count=0"])


def test_a_data_packets_meta_is_made_on_first_use_and_shared():
    """No TxMeta per entropy up front (4096 would cost ~6 ms and ~0.6 MB an engine): a
    data packet's is made the first time its entropy is drawn, and engines with the
    same DSCP and ECN share it."""
    from emu.transports.uet import engine as E

    p = uet_pair(4, ekw={"mtu": 1024})
    q = uet_pair(5, ekw={"mtu": 1024})
    cache = E._metas(p.ea._dscp, p.ea._ecn)
    assert p.ea._data_metas is cache is q.ea._data_metas
    cache.clear()  # (a cache: other tests' engines fill it; a miss only makes one again)
    write(p, 1, 64 * 1024)
    p.link.run()
    ok(p.link.completions("a"), 1)
    assert 1 <= len(cache) <= 64  # only the entropies drawn (64 packets), not the set
    assert all(m.entropy == e and m.entropy in p.ea.entropies for e, m in cache.items())

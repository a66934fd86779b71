# SPDX-License-Identifier: GPL-2.0-only
"""What a workload is: flows between hosts, each a number of bytes from a start time or in
a step of a collective. Pure data and generators (no cluster, no clock), so a scenario's
traffic can be printed, checked and tested before anything runs.

Two kinds of timing, as the traffic engineers study:

* **independent flows** (``step is None``) start at ``start`` fabric seconds after the
  workload's common start and run on their own: incast, permutation, all-to-all, a list
  of flows. Their metric is each flow's completion time (FCT) and goodput.
* **a synchronized collective** (every flow has a ``step``): step *k*'s flows all start
  when every flow of step *k − 1* has completed — each step waits for every participant,
  so the slowest link sets the pace of the whole job, which is what makes one degraded
  link expensive in training. Ring all-reduce is 2(N − 1) steps in which host *i* sends
  ``size / N`` bytes to host *i + 1* (reduce-scatter, then all-gather); all-to-all is
  N − 1 steps in which host *i* sends ``size / N`` to host *i + k*. Their metric is the
  job completion time (JCT).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

#: the workload kinds a scenario may name (``[workload] kind``)
KINDS = ("flows", "incast", "permutation", "all-to-all", "allreduce", "alltoall-collective")


@dataclass(frozen=True)
class Flow:
    """``size`` bytes written from ``src`` to ``dst``."""

    src: str
    dst: str
    size: int
    start: float = 0.0  # fabric s after the workload's start (independent flows)
    step: int | None = None  # the collective's step, or None

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}" + ("" if self.step is None else f"#{self.step}")


@dataclass(frozen=True)
class Workload:
    """A workload: its flows, and the WRITE size each flow is cut into."""

    kind: str
    flows: tuple[Flow, ...]
    message: int = 1 << 20  # bytes per WRITE (the last one of a flow may be shorter)
    params: dict[str, object] = field(default_factory=dict)

    @property
    def collective(self) -> bool:
        return any(f.step is not None for f in self.flows)

    @property
    def steps(self) -> int:
        return 1 + max((f.step or 0) for f in self.flows) if self.collective else 0

    def in_step(self, k: int) -> list[Flow]:
        return [f for f in self.flows if f.step == k]

    def senders(self) -> int:
        """Hosts that send at once at most: what the plan's auto time scale must fit
        (``[time] senders``)."""
        if self.collective:
            return max(len({f.src for f in self.in_step(k)}) for k in range(self.steps))
        return len({f.src for f in self.flows})

    def total_bytes(self) -> int:
        return sum(f.size for f in self.flows)


def _check_hosts(hosts: Sequence[str], need: int, kind: str) -> None:
    if len(hosts) < need:
        raise ValueError(f"{kind} needs at least {need} hosts, the topology has {len(hosts)}")


def incast(hosts: Sequence[str], n: int, size: int, dst: str | None = None) -> list[Flow]:
    """``n`` senders to one receiver (the last host unless ``dst``), all at once."""
    if n < 1:
        raise ValueError(f"incast n = {n}: at least one sender")
    dst = dst or hosts[-1]
    if dst not in hosts:
        raise ValueError(f"incast dst {dst!r} is not a host ({', '.join(hosts)})")
    others = [h for h in hosts if h != dst]
    _check_hosts(others, n, f"incast {n} -> 1 (senders besides {dst})")
    return [Flow(s, dst, size) for s in others[:n]]


def permutation(hosts: Sequence[str], size: int, seed: int = 0,
                shift: int | None = None) -> list[Flow]:
    """Every host sends to one other and receives from one other: a random derangement
    (``seed`` fixed so every transport of a sweep sees the same pairs), or, with
    ``shift``, host i to host i + shift — with ``shift`` = the hosts under one leaf, every
    flow crosses the spines (the permutation that loads a Clos's uplinks fully)."""
    _check_hosts(hosts, 2, "permutation")
    if shift is not None:
        if shift % len(hosts) == 0:
            raise ValueError(f"permutation shift {shift}: a multiple of the {len(hosts)} "
                             "hosts sends every host to itself")
        return [Flow(h, hosts[(i + shift) % len(hosts)], size) for i, h in enumerate(hosts)]
    rng = random.Random(seed)
    while True:
        dst = list(hosts)
        rng.shuffle(dst)
        if all(a != b for a, b in zip(hosts, dst, strict=True)):
            return [Flow(a, b, size) for a, b in zip(hosts, dst, strict=True)]


def all_to_all(hosts: Sequence[str], size: int) -> list[Flow]:
    """Every ordered pair at once, ``size`` bytes each (independent flows)."""
    _check_hosts(hosts, 2, "all-to-all")
    return [Flow(a, b, size) for a in hosts for b in hosts if a != b]


def ring_allreduce(hosts: Sequence[str], size: int) -> list[Flow]:
    """Ring all-reduce of a ``size``-byte buffer: 2(N − 1) steps, host i → host i+1, a
    chunk of ``size / N`` each step (what NCCL's ring algorithm puts on the wire)."""
    n = len(hosts)
    _check_hosts(hosts, 2, "allreduce")
    chunk = max(1, size // n)
    return [Flow(hosts[i], hosts[(i + 1) % n], chunk, step=k)
            for k in range(2 * (n - 1)) for i in range(n)]


def alltoall_collective(hosts: Sequence[str], size: int) -> list[Flow]:
    """All-to-all as a collective: N − 1 steps, host i → host i+k in step k − 1, a chunk
    of ``size / N`` each."""
    n = len(hosts)
    _check_hosts(hosts, 2, "alltoall-collective")
    chunk = max(1, size // n)
    return [Flow(hosts[i], hosts[(i + k) % n], chunk, step=k - 1)
            for k in range(1, n) for i in range(n)]


def make(kind: str, hosts: Sequence[str], *, size: int, message: int = 1 << 20,
         n: int | None = None, dst: str | None = None, seed: int = 0,
         flows: Sequence[Flow] = (), participants: int | None = None,
         shift: int | None = None) -> Workload:
    """The workload ``kind`` over ``hosts`` (a scenario's ``[workload]`` table, parsed).
    ``participants``: the first N hosts only (a collective over part of the fabric)."""
    if kind not in KINDS:
        raise ValueError(f"unknown workload kind {kind!r} (one of {', '.join(KINDS)})")
    if size < 1:
        raise ValueError(f"size {size}: at least one byte")
    if message < 1:
        raise ValueError(f"message {message}: at least one byte")
    if participants is not None:
        _check_hosts(hosts, participants, kind)
        hosts = list(hosts)[:participants]
    params: dict[str, object] = {"size": size}
    if kind == "flows":
        if not flows:
            raise ValueError("kind = \"flows\" needs a list of flows")
        out = list(flows)
    elif kind == "incast":
        out = incast(hosts, n if n is not None else len(hosts) - 1, size, dst)
        params["n"] = len(out)
    elif kind == "permutation":
        out = permutation(hosts, size, seed, shift)
        params["seed" if shift is None else "shift"] = seed if shift is None else shift
    elif kind == "all-to-all":
        out = all_to_all(hosts, size)
    elif kind == "allreduce":
        out = ring_allreduce(hosts, size)
    else:
        out = alltoall_collective(hosts, size)
    for f in out:
        for h in (f.src, f.dst):
            if h not in hosts:
                raise ValueError(f"flow {f.name}: {h!r} is not a host ({', '.join(hosts)})")
        if f.src == f.dst:
            raise ValueError(f"flow {f.name}: a host cannot send to itself")
    return Workload(kind, tuple(out), message, params)

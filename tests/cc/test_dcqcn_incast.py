# SPDX-License-Identifier: GPL-2.0-only
"""DCQCN reaction points sharing one RED/ECN-marking port, without sockets.

A small fluid model of the ``incast`` scenario (N senders at 400 Gb/s into one
400 Gb/s port with the shipped leaf-spine's marking band): the port's queue integrates
the senders' rates minus the line rate in 0.1 µs steps, marks the bytes it admits with
RED's probability, and the receiver (the notification point) answers a flow's marked
packets with at most one CNP per interval, a round trip later. It checks what the live
scenario depends on and a unit test of one reaction point cannot see: which DCQCN
parameter set keeps a 400 Gb/s port busy with its queue inside the port's 8 MB.

- emu's default is the paper's (specs/rocev2.md): α updated every 55 µs with g = 1/256,
  a CNP at most every 50 µs — chosen at 40 Gb/s. At 400 Gb/s a millisecond-long incast
  ends before α has decayed, so every CNP halves the rate;
- the scenario runs ConnectX's defaults as a whole: α every 1 µs with g = 5/1024 and a
  CNP at most every 4 µs (NVIDIA's DCQCN parameters);
- the two mixed — ConnectX's α with the paper's 50 µs CNPs, what a first attempt at the
  scenario ran — keep α near 0 between CNPs too rare to stop fast recovery: the 4 -> 1
  queue grew past 8 MB and the live run dropped 4,955 packets and never finished.
"""

from __future__ import annotations

import random

import pytest

from emu.cc.dcqcn import Dcqcn

LINE = 400e9
PKT = 4096 + 84  # a 4 KiB RoCEv2 payload and its headers on the wire
KMIN, KMAX, PMAX = 200e3, 1600e3, 0.2  # namespaces/leaf-spine.toml's ports
RTT = 6.6e-6  # the leaf-spine's base round trip (emu doctor)
CNP_GAP = 50e-6  # the notification point: at most one CNP per QP per 50 µs
DEPTH = 8e6  # the port's buffer (namespaces/leaf-spine.toml)
PAPER = {"alpha_period": 55e-6, "g": 1 / 256}  # emu's defaults, the paper's
CONNECTX = {"cnp_gap": 4e-6, "alpha_period": 1e-6, "g": 5 / 1024}  # scenarios/incast.toml
MIXED = {"alpha_period": 1e-6, "g": 5 / 1024}  # ConnectX's α, the paper's CNP interval
DT = 0.1e-6


def mark_probability(q: float) -> float:
    if q <= KMIN:
        return 0.0
    if q >= KMAX:
        return 1.0
    return PMAX * (q - KMIN) / (KMAX - KMIN)


def jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def steady(busy: list[float], first_done: float, settle: float = 0.25) -> float:
    a, b = int(settle * first_done / DT), int(first_done / DT)
    return sum(busy[a:b]) / (LINE * DT / 8 * (b - a)) if b > a else 0.0


def incast(n: int, size: int, seed: int = 1, cnp_gap: float = CNP_GAP,
           **params: float) -> dict[str, float]:
    """``n`` DCQCN senders start at the line rate together, ``size`` bytes each, into one
    port (no buffer limit: ``max_queue`` says what it would have needed). Returns the
    whole run's aggregate goodput as a share of the line rate (``utilisation``), the
    port's busy share after convergence (``steady``: the scenario's rule, the time
    every sender is active without its first quarter), Jain's index, the cuts."""
    rng = random.Random(seed)
    flows = [Dcqcn(LINE, 0.0, **params) for _ in range(n)]
    left = [float(size)] * n
    done = [0.0] * n
    last_cnp = [-1.0] * n
    pending: list[tuple[float, int]] = []  # (arrival, flow) of CNPs on their way back
    carry = [0.0] * n  # fractional packets not yet sent
    q = qmax = 0.0
    t = 0.0
    busy: list[float] = []  # bytes served per step
    while not all(done) or q > 0:
        pending.sort()
        while pending and pending[0][0] <= t:
            _, i = pending.pop(0)
            flows[i].on_cnp(t)
        for i, f in enumerate(flows):
            if done[i]:
                continue
            d = f.get_timer()
            if d is not None and d <= t:
                f.handle_timer(t)
            carry[i] += f.rate * DT / 8 / PKT
            k = min(int(carry[i]), -int(-left[i] // PKT))
            carry[i] -= k
            if not k:
                continue
            f.on_sent(k * PKT, t)
            q += k * PKT
            left[i] -= k * PKT
            if left[i] <= 0:  # its last byte leaves the FIFO after the queue ahead of it
                done[i] = t + q * 8 / LINE + RTT / 2
            p = mark_probability(q)
            if p and t - last_cnp[i] >= cnp_gap and any(rng.random() < p for _ in range(k)):
                last_cnp[i] = t
                pending.append((t + RTT, i))
        qmax = max(qmax, q)
        busy.append(min(q, LINE * DT / 8))
        q -= busy[-1]
        t += DT
    jct = max(done)
    return {"utilisation": n * size * 8 / jct / LINE,
            "jain": jain([size / d for d in done]),
            "cuts": sum(f.counts["cut"] for f in flows), "max_queue": qmax,
            "steady": steady(busy, min(done))}


@pytest.mark.parametrize("n", [2, 4])
def test_connectx_dcqcn_keeps_the_port_busy_and_fair_within_its_buffer(n):
    r = incast(n, 16 << 20, **CONNECTX)  # the incast scenario's flows
    assert r["cuts"] >= 2 * n, r  # the port really congested and every sender reacted
    assert r["steady"] >= 0.9, r
    assert r["jain"] >= 0.9, r
    assert r["max_queue"] < DEPTH, r


def test_connectx_alpha_with_the_papers_cnp_interval_overflows_the_port():
    """Why the scenario takes ConnectX's set whole: its α with CNPs 50 µs apart."""
    assert incast(4, 16 << 20, **MIXED)["max_queue"] > DEPTH
    assert incast(4, 16 << 20, **CONNECTX)["max_queue"] < DEPTH / 2


def test_the_papers_dcqcn_at_400g_idles_the_port_where_connectx_does_not():
    """The paper's α barely moves in a millisecond: after each CNP halves the rates, the
    2 -> 1 port idles until the 55 µs timer brings them back."""
    paper = incast(2, 16 << 20, **PAPER)
    assert paper["steady"] < 0.9 <= incast(2, 16 << 20, **CONNECTX)["steady"], paper

# SPDX-License-Identifier: GPL-2.0-only
"""The nftables rules of a link direction's loss, duplication and ECN-CE marking (pure:
text from numbers; :mod:`emu.fabric.linkctl` applies it and says why nftables).

Which packets a probability picks: with a seed (the default,
:class:`~emu.topology.model.Direction`) a rule counts the packets it sees
(``numgen inc mod PERIOD``) and picks those whose ordinal is in a set drawn once from
a pseudo-random sequence of the seed, the link and the direction
(:func:`seeded_pattern`) — the same ordinals (the n-th UDP packet through the rule
since it was applied) in every run and at every time scale, as a seeded simulator
draws them. They are the same packets only where the traffic is the same sequence:
RoCEv2's ACKs and go-back-N follow time, so its runs part from their first packets
(docs/measurements.md). Only UDP packets (the transports') are counted so: the rest
keep the kernel's draw (:func:`chances`). Without one
(``seed = "random"``) it is ``numgen random``, the kernel's draw, different every
run. Either way a probability has a resolution of 10⁻⁶ and 1 writes no match at all.
"""

from __future__ import annotations

import hashlib
import math
import random
import re

#: every nftables table we make starts with this
NFT_PREFIX = "emu_lc_"
#: numgen modulus: probabilities have a resolution of 1 / PROB_SCALE
PROB_SCALE = 1_000_000
#: a seeded draw lists about this many packet ordinals per rule (never twice as many:
#: :func:`seeded_pattern`) …
SEEDED_SET_MAX = 8192
#: … in a period of at most this many packets, after which its pattern repeats
SEEDED_PERIOD_MAX = 1 << 24
#: skb mark bit a duplicate carries while in the egress hook (so it is not duplicated
#: again); distinct from the switch pipeline's CE bit (0x20000000)
DUP_MARK = 0x40000000


def nft_table(ifname: str) -> str:
    """The nftables table emu uses for ``ifname`` (an nft identifier)."""
    safe = re.sub(r"[^A-Za-z0-9_]", "_", ifname)
    if safe != ifname:  # keep distinct names distinct after sanitising
        safe += "_" + format(sum(ifname.encode()) * 2654435761 % (1 << 24), "06x")
    return NFT_PREFIX + safe


def stream_key(seed: int | None, link: str, direction: str) -> str | None:
    """What a link direction's seeded draws are derived from: the seed, the link's name
    and the direction (so every direction of every link has a sequence of its own, and
    the same one in every cluster built from the file); None for the kernel's draw."""
    return None if seed is None else f"{seed}/{link}/{direction}"


def seeded_pattern(k: int, key: str) -> tuple[int, list[int], bool]:
    """Which packets a seeded draw of probability ``k / PROB_SCALE`` picks, by ordinal.

    Returns ``(period, ordinals, picked)``: the ``n``-th packet the rule sees is picked
    iff ``n mod period`` is in ``ordinals`` (``picked`` True) or is not (False: for
    ``p > 1/2`` the rarer outcome is listed). Each ordinal of the period is a Bernoulli
    trial of a ``random.Random`` seeded from ``key``'s SHA-256 (drawn as geometric gaps,
    so the cost is the list's length). The period is as long as a list of about
    :data:`SEEDED_SET_MAX` allows, up to :data:`SEEDED_PERIOD_MAX` packets (at 1 % loss
    819,200 packets, 3.4 GB of 4 KiB frames, before the pattern repeats); a list that
    would pass twice that (≈ 90 standard deviations) ends the period there.
    """
    p = k / PROB_SCALE
    picked = p <= 0.5
    q = p if picked else 1.0 - p
    period = max(1, min(SEEDED_PERIOD_MAX, math.floor(SEEDED_SET_MAX / q)))
    rng = random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))
    log_miss = math.log1p(-q)
    ordinals: list[int] = []
    n = -1
    while True:
        n += 1 + math.floor(math.log(1.0 - rng.random()) / log_miss)
        if n >= period:
            break
        if len(ordinals) >= 2 * SEEDED_SET_MAX:
            period = n
            break
        ordinals.append(n)
    if not ordinals:  # p ~ 1e-6 drew nothing in 16.7 M trials (~e^-17): one in the period
        ordinals.append(period - 1)
    return period, ordinals, picked


def chances(k: int, key: str | None = None) -> list[str]:
    """The nft matches that together say "with probability k / PROB_SCALE", one rule each:
    nothing for always; the kernel's random draw (``key`` None); or, seeded, the UDP
    packets :func:`seeded_pattern` picks by their order through the rule (``numgen inc``:
    one counter per rule, from 0 when the table is replaced) and the kernel's draw for
    the rest.

    Why only UDP is counted: the transports (RoCEv2, UET, MRC) are UDP, and their packet
    sequence is what a run repeats. Everything else on a link — the perf tools' TCP side
    channel with its delayed ACKs, ARP and neighbour discovery — is sent on the kernel's
    wall-clock timers, so counting it would move the pattern by a packet wherever it
    happened to fall, differently in every run and at every time scale.
    """
    if k >= PROB_SCALE:
        return [""]
    rand = f"numgen random mod {PROB_SCALE} < {k} "
    if key is None:
        return [rand]
    period, ordinals, picked = seeded_pattern(k, key)
    return [f"meta l4proto udp numgen inc mod {period} {'' if picked else '!= '}"
            f"{{ {', '.join(map(str, ordinals))} }} ",
            f"meta l4proto != udp {rand}"]


def nft_ruleset(ifname: str, loss: int, ce: int, egress: bool, dup: int = 0,
                key: str | None = None) -> str:
    """The ruleset (for ``nft -f -``) that replaces ``ifname``'s table: loss, then
    duplication, then marking, with probabilities in 1 / :data:`PROB_SCALE` (seeded with
    ``key``: :func:`chances`); on the netdev egress hook (``egress``) or, where the kernel
    has none, inet postrouting. Rules of one kind share a comment: the counters add up."""
    table = nft_table(ifname)
    family = "netdev" if egress else "inet"
    if egress:
        hook = f'type filter hook egress device "{ifname}" priority 0; policy accept;'
        match = ""
    else:
        hook = "type filter hook postrouting priority 0; policy accept;"
        match = f'oifname "{ifname}" '

    def sub(what: str) -> str | None:
        return None if key is None else f"{key}/{what}"

    rules = []
    if loss:
        rules += [f'{match}{c}counter drop comment "emu:loss"'
                  for c in chances(loss, sub("loss"))]
    if dup:
        keep = 0xFFFFFFFF & ~DUP_MARK
        rules += [f"{match}meta mark & {DUP_MARK:#010x} == 0 {c}"
                  f"meta mark set meta mark | {DUP_MARK:#010x} counter "
                  f'dup to "{ifname}" meta mark set meta mark & {keep:#010x} '
                  'comment "emu:dup"' for c in chances(dup, sub("dup"))]
    if ce:
        for fam, tag in (("ip", "ce4"), ("ip6", "ce6")):
            rules += [f"{match}{fam} ecn {{ ect0, ect1 }} {c}"
                      f'counter {fam} ecn set ce comment "emu:{tag}"'
                      for c in chances(ce, sub(tag))]
    body = "".join(f"    {r}\n" for r in rules)
    return (f"table {family} {table} {{}}\n"
            f"delete table {family} {table}\n"
            f"table {family} {table} {{\n"
            f'  comment "emu linkctl {ifname}"\n'
            f"  chain egress {{\n    {hook}\n{body}  }}\n}}\n")

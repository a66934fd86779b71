# SPDX-License-Identifier: GPL-2.0-only
"""The networks the interop runner puts between client and server, one per kind of case.

Why a module of its own: a test case names *what* the network does to packets
(``docs/interop.md`` §5); this says *how* the runner makes it on one Linux
machine without netem, and the runner brings each network up once per
server × client pair and reuses it for every case (and transport) that names it.

* ``pair`` — two hosts, one cable (the shape and addresses of
  ``namespaces/pair.toml``: client ``h1`` 10.0.1.11, server ``h2`` 10.0.1.12). Clean
  cases run on it as is; ``loss`` and ``duplication`` add an nftables impairment on
  the cable for the case (``emu impair``: 2 % drop both ways; every packet client →
  server sent twice, a duplicate never duplicated again). Captured on h1's end, so the capture
  shows what the client sent — lost packets excluded, both copies of a
  duplicate included.
* ``reordering`` — one switch (leaf-spine with one leaf, one spine, two hosts:
  same host names and addresses) whose pipeline holds every transport packet
  toward the server for ``delay`` ± uniform ``jitter`` after it arrives (a
  port without a rate has no queue, so nothing is dropped): packets of one
  flow overtake each other at the server, as over sprayed paths of unequal
  delay. The hold (1 ms ± 1 ms) is longer than the spacing of a sender's
  packets: ~30 µs for RoCEv2's 4 KiB at line rate, but 1–2 ms for emu's UET
  here, whose congestion control sees the added delay (at ±400 µs a paced UET
  flow saw only 3–9 of its 121 packets overtaken, sometimes none).
* ``trimming`` — the same switch with the client's port at 1 Gbit/s and the
  server's at 100 Mbit/s, ECN marking at the pipeline's defaults, and trimming
  above 100 KB of queue (what ``tests/scenarios/test_roce_trim_e2e.py`` runs): a 1 MiB
  WRITE overruns the 100 Mbit/s port ten to one, so the switch trims
  whatever the sender's congestion control does. emu's NIC daemons get the
  ports' rates as their line rates (``emu up`` does the same). The switch marks
  trimmed packets with its DSCPs 30/31, or with the one the server's implementation
  names (``trimmed_dscp`` in the implementations file, or ``emu interop run
  --trimmed-dscp`` for the whole run).

Every network runs in real time (``[time] scale = 1``): an implementation that keeps its
own clock — emu-ref, Linux rxe, any real NIC — cannot be dilated, and the contract has no
way yet for one to declare fabric time (``docs/interop.md``), so no case is dilated and
the runner's log says so. Their cables have no rate of their own unless ``--rate`` gives
one: emu's daemons then pace at the rate this machine sustains.

Switch networks are judged on the server's cable (``h2-leaf1``, the ``h2``
end): after the switch, so reordered and trimmed packets are seen as the
server got them, each packet once. ``reordering`` also captures the client's
cable (``h1-leaf1``, the ``h1`` end: what entered the switch) so the runner
can show that the *network* reordered — packets delivered ahead of packets
sent before them — whatever the transports did (a sender's retransmission
arriving below a higher PSN is not a reordering, and a paced sender can
space its packets wider than the jitter for a while).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: every interop network's clock (see the module docstring)
REAL_TIME = "[time]\nscale = 1\n"

_PAIR = """\
[topology]
kind = "pair"
name = "{name}"
description = "interop: client h1 and server h2, one cable"
[defaults.link]
mtu = 9000
""" + REAL_TIME

_ONE_SWITCH = """\
[topology]
kind = "leaf-spine"
name = "{name}"
description = "interop: client h1 and server h2 behind one switch (leaf1)"
[params]
spines = 1
leaves = 1
hosts_per_leaf = 2
[defaults.link]
mtu = 9000
[switch]
seed = 13
""" + REAL_TIME

REORDER_DELAY, REORDER_JITTER = "1ms", "1ms"

_REORDER = _ONE_SWITCH + f"""\
[[switch.override]]
node = "leaf1"
port = "h2"
delay = "{REORDER_DELAY}"
jitter = "{REORDER_JITTER}"
"""

_TRIM = _ONE_SWITCH + """\
[[switch.override]]
node = "leaf1"
port = "h*"
rate = "1gbit"
[[switch.override]]
node = "leaf1"
port = "h2"
rate = "100mbit"
depth = "2MB"
trim = true
trim_threshold = "100KB"
"""


@dataclass(frozen=True)
class Network:
    """How to build one network: a topology file or text, and which link to capture."""

    name: str
    topology_text: str             # TOML with {name}
    capture: tuple[str, ...]       # "all" or link names (each captured on its a end)
    switch: str | None = None      # the switch whose counters the runner keeps
    judge: str | None = None       # the link whose packets the checks count (None: all)
    ingress: str | None = None     # compare the order on this link with ``judge``'s

    def topology_file(self, directory: str, cluster: str, rate: str | None = None,
                      trimmed_dscp: int | None = None) -> str:
        """A file to load the topology from (written into ``directory`` if generated).

        ``rate`` (``emu interop run --rate``): every cable's rate where the network does
        not set its own (``trimming`` does) — the hosts' NIC daemons pace to it. Why: a
        peer slower than emu's line rate (linux-rxe under TCG takes ~170 Mb/s) would
        otherwise be flooded by a sender without congestion signals.

        ``trimmed_dscp``: the DSCP the ``trimming`` switch writes on packets it trims, at
        every hop (``trimmed_dscp`` and ``trimmed_lasthop``; None: the switch's 30 and 31)
        — the one the server's implementation takes as "trimmed" (specs/mrc.md: DSCP 9
        in one reconstruction). The runner's ``emu nicd``s follow it (``emu up`` gives
        every daemon the switches' trimmed DSCPs)."""
        text = self.topology_text.format(name=cluster)
        if rate is not None and self.name != "trimming":
            text = text.replace("[defaults.link]\n", f'[defaults.link]\nrate = "{rate}"\n', 1)
        if trimmed_dscp is not None and self.name == "trimming":
            text = text.replace("[switch]\n", f"[switch]\ntrimmed_dscp = {int(trimmed_dscp)}\n"
                                f"trimmed_lasthop = {int(trimmed_dscp)}\n", 1)
        path = os.path.join(directory, f"{cluster}.toml")
        with open(path, "w") as f:
            f.write(text)
        return path


PAIR = Network("pair", _PAIR, ("all",))
REORDERING = Network("reordering", _REORDER, ("h2-leaf1", "h1-leaf1"), switch="leaf1",
                     judge="h2-leaf1", ingress="h1-leaf1")
TRIMMING = Network("trimming", _TRIM, ("h2-leaf1",), switch="leaf1")
BY_NAME = {n.name: n for n in (PAIR, REORDERING, TRIMMING)}

#: per-case nftables impairment of the pair's cable: ``emu impair`` arguments
LOSS_ARGS = ("--loss", "2%")
DUPLICATE_ARGS = ("--duplicate", "100%", "--direction", "a_to_b")   # h1 → h2 only

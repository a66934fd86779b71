# SPDX-License-Identifier: GPL-2.0-only
"""The SRv6 datapath in tc BPF: loads ``bpf/srv6.bpf.c`` on a node's ports.

Two programs on each port's clsact **ingress** hook (before the kernel's
routing decision), configured with the node's 48-bit locator:

* ``shift`` on every switch port, where the kernel has no ``seg6local``
  (``[routing] srv6 = "bpf"``, or ``"auto"`` on such a kernel): the uSID shift
  of ``seg6local End`` with NEXT-C-SID (lblen 32, nflen 16), falling back to
  classic SRH End when the container is exhausted;
* ``decap`` on every host port, whatever serves the switches: what ``End.DT6``
  does, plus the ECN combination of RFC 6040 that the kernel's ``End.DT6``
  lacks (``net/ipv6/seg6_local.c``: ``decap_and_validate`` pulls the outer
  header and copies nothing from it) — a CE mark a switch set on the outer
  header must reach the receiver's transport. Removing the tunnel header is the
  NIC's job anyway.

The source's comment says what each program does and what it approximates. Each
``tc filter`` loads its own copy of the two maps: one configuration and one set of
counters (:data:`STATS`) per port. :func:`attach` returns the programs' ids, which
the cluster's state file keeps, so :func:`counters` reads them back later with no
``tc`` call. Namespaces' removal removes the filters; nothing else to clean.
"""

from __future__ import annotations

import ipaddress
import json
import struct
import subprocess
from pathlib import Path

from emu.fabric import bpfobj
from emu.fabric.bpfobj import BpfError

SOURCE = Path(__file__).with_name("bpf") / "srv6.bpf.c"
PROGRAMS = {"shift": "srv6_shift", "decap": "srv6_decap"}
#: the filter's priority and handle on each port's ingress hook (ours alone)
TC_PRIO, TC_HANDLE = "49150", "0x5e6"
#: struct srv6_stats (srv6.bpf.c): u64 counters in this order
STATS = ("seen", "not_mine", "shifted", "srh_end", "passed", "bare", "decapped", "ce_copied",
         "dropped_ecn", "dropped_srh", "malformed", "failed")
_STATS = struct.Struct("<" + "Q" * len(STATS))
#: struct srv6_cfg: locator (6 bytes), on, pad
_CFG = struct.Struct("<6sBx")
CFG_MAP, STATS_MAP = "srv6_cfg", "srv6_stats"


def available() -> str | None:
    """None when this machine can build and load the programs, else why not."""
    return bpfobj.missing(SOURCE)


def locator(loopback6: ipaddress.IPv6Address | str) -> bytes:
    """The 48-bit locator (uSID block + the node's uSID) of a node's IPv6 loopback."""
    return ipaddress.IPv6Address(loopback6).packed[:6]


def build() -> Path:
    """The compiled object (cached per source version). Raises :class:`BpfError`."""
    return bpfobj.build_object(SOURCE)


def attach(netns: str, ports: list[str], program: str, loc: bytes, obj: Path) -> dict[str, int]:
    """Load ``program`` (``shift``/``decap``) on the ingress hook of every port of the
    namespace ``netns`` and configure it with the locator ``loc``; returns
    {ifname: program id}. One ``tc`` batch per node, then one ``tc filter show`` per
    port (for the program's id). Raises :class:`BpfError`."""
    sec = f"tc/{PROGRAMS[program]}"
    if len(loc) != 6:
        raise ValueError(f"locator {loc.hex()}: expected 6 bytes")
    lines = []
    for ifname in ports:
        lines.append(f"qdisc replace dev {ifname} clsact")
        lines.append(f"filter replace dev {ifname} ingress prio {TC_PRIO} handle {TC_HANDLE} "
                     f"bpf da obj {obj} sec {sec}")
    _batch(netns, lines)
    ids: dict[str, int] = {}
    for ifname in ports:
        prog = _prog_id(netns, ifname)
        if prog is None:
            raise BpfError(f"{netns}: {ifname}: no SRv6 BPF program after tc filter add")
        _configure(prog, loc, f"{netns}: {ifname}")
        ids[ifname] = prog
    return ids


def _batch(netns: str, lines: list[str]) -> None:
    p = subprocess.run(["tc", "-n", netns, "-batch", "-"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise BpfError(f"tc -n {netns} -batch: {(p.stderr or p.stdout).strip()[-400:]}")


def _prog_id(netns: str, ifname: str) -> int | None:
    out = bpfobj.tc(["-j", "filter", "show", "dev", ifname, "ingress"], netns=netns)
    for f in json.loads(out or "[]"):
        opts = f.get("options") or {}
        if str(f.get("pref")) == TC_PRIO and opts.get("handle") == TC_HANDLE:
            pid = (opts.get("prog") or {}).get("id")
            if pid is not None:
                return int(pid)
    return None


def _configure(prog: int, loc: bytes, where: str) -> None:
    maps = bpfobj.maps_of_prog(prog)
    try:
        for name, size in ((CFG_MAP, _CFG.size), (STATS_MAP, _STATS.size)):
            m = maps.get(name)
            if m is None or m.value_size != size:
                raise BpfError(f"{where}: map {name}: {m.value_size if m else 'missing'} "
                               f"bytes, expected {size} (object and loader disagree)")
        maps[CFG_MAP].write(_CFG.pack(loc, 1))
    finally:
        for m in maps.values():
            m.close()


def counters(prog: int) -> dict[str, int] | None:
    """One port's counters (:data:`STATS`) by its program's id; None when the program is
    gone (its namespace removed) or the id is now another program's."""
    try:
        maps = bpfobj.maps_of_prog(prog)
    except (OSError, BpfError):
        return None
    try:
        m = maps.get(STATS_MAP)
        if m is None or m.value_size != _STATS.size or CFG_MAP not in maps:
            return None
        return dict(zip(STATS, _STATS.unpack(m.read()), strict=True))
    finally:
        for m in maps.values():
            m.close()


def node_counters(progs: dict[str, int]) -> dict[str, int] | None:
    """The sum of :func:`counters` over a node's ports ({ifname: program id}); None when
    none could be read."""
    total: dict[str, int] | None = None
    for prog in progs.values():
        c = counters(prog)
        if c is None:
            continue
        total = c if total is None else {k: total[k] + c[k] for k in STATS}
    return total

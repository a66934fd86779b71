# SPDX-License-Identifier: GPL-2.0-only
"""Link control: rate, loss, ECN-CE marking, duplication, delay, link up/down — on one
interface's egress.

A :class:`~emu.topology.model.Direction` describes what one direction of a cable
does; it is applied to the *egress* of the sending end's interface inside that
end's namespace (``a_to_b`` on ``link.a.ifname`` in ``<cluster>-<a.node>``).

Mechanisms (all on this kernel; see ``/work/shared/DESIGN.md`` "Kernel facts")
--------------------------------------------------------------------------
* **Rate** — a ``tbf`` root qdisc with handle ``e3e0:`` (the emu marker: only a
  root qdisc with that major is ever replaced or deleted). Built with pyroute2,
  but with our own netlink message (:class:`_TbfMsg`) because pyroute2 0.9.7's tbf
  plug-in sends no ``TCA_TBF_RATE64``/``TCA_TBF_BURST`` and so cannot express
  rates ≥ 2³² B/s (34.4 Gbit/s) — emulated 100–800G links. Sizes (``frame`` =
  MTU + 14, the Ethernet header; veth has no FCS)::

      burst = max(2 × frame, ceil(rate_bytes_per_s × 1 ms))
      limit = burst + max(4 × frame, ceil(rate_bytes_per_s × 20 ms), 2 MiB)

  ``burst`` holds at least two whole frames (a smaller bucket never passes a
  full-size frame, and with exactly one every late firing of tbf's timer is link
  time lost: a 9 KB-frame port measured 0.87-0.92 of its rate — the second frame
  lets the next one catch up; GSO super-packets are segmented by tbf itself) and
  ~1 ms of line rate so the qdisc watchdog's timer granularity does not pull the
  achieved rate below the setting. ``limit`` (bytes queued before tail drop) adds a
  ~20 ms queue, at least four frames: it holds a NIC daemon's transmit lead (up to
  16 ms: ``emu.plan.build.tx_lead``), and a shallow switch-like buffer. Both can be
  overridden per call (tests use fixed values so drops can be counted).
* **Loss and ECN-CE** — nftables, one table per interface called
  ``emu_lc_<ifname>`` (family ``netdev``, chain ``egress`` on the **netdev
  egress hook**, Linux ≥ 5.16 with ``CONFIG_NETFILTER_EGRESS``; present here on
  6.18). That hook runs in ``__dev_queue_xmit`` for every packet leaving the
  device — locally generated and forwarded alike, IPv4, IPv6 and anything else —
  before the qdisc, so a dropped packet never consumes rate. Where the kernel
  lacks it (feature-detected) the table is ``inet`` with a ``postrouting``
  chain matching ``oifname``; postrouting also sees both forwarded and local
  packets (not non-IP frames). Rules:
  ``numgen random mod 1000000 < round(p × 10⁶) counter drop comment "emu:loss"``
  and ``ip ecn {ect0, ect1} numgen random mod 1000000 < K counter ip ecn set ce``
  (same for ``ip6``, comments ``emu:ce4``/``emu:ce6``) where the direction's seed is
  ``"random"``; with a seed (the default) a UDP packet meets
  ``meta l4proto udp numgen inc mod PERIOD { ordinals }`` instead: the transports'
  packets picked by their order through the rule, the same in every run
  (:mod:`emu.fabric.nftrules`; other packets keep the random draw). Probabilities
  have a resolution of 10⁻⁶ (probability 1 writes no ``numgen``: ``< 1000000``
  is out of nft's range for ``mod 1000000``). **CE is set only on ECN-capable packets** (ECT(0)
  or ECT(1)); Not-ECT packets are left alone (RFC 3168 §5: a router must not
  set CE on a Not-ECT packet — it would drop instead; RoCEv2 sends ECT) and CE
  packets are already marked. Loss is applied before marking.
* **Duplication** — same table, between the loss and the marking rules::

      meta mark & 0x40000000 == 0 numgen random mod 1000000 < K
        meta mark set meta mark | 0x40000000 counter dup to "<ifname>"
        meta mark set meta mark & 0xbfffffff comment "emu:dup"

  (one rule; each rule on its own line of the ruleset, as for the others).
  ``dup to`` the same device sends a clone through ``dev_queue_xmit`` *at
  once* — through the egress hook again and then the qdisc, so a duplicate
  costs rate like any packet, and it leaves just before its original.
  Without the mark the clone would be duplicated again with the same
  probability, down to nf_dup_netdev's recursion limit (measured at 50 %:
  0.86 extra copies per packet instead of 0.5); with it, the clone carries
  :data:`DUP_MARK` and is never duplicated, the original clears that bit
  again (only that bit: other marks are kept), and veth scrubs the mark when
  the packet leaves the namespace. So each packet goes out once or twice,
  never more (measured at 99.9999 %: exactly 2 ×). The clone meets the loss and
  marking rules on its own (independent drop and CE decisions, like a copy
  made inside the link).
* Loss, marking and duplication act per skb: a GSO super-packet is dropped,
  marked or duplicated as a whole (the fabric turns GSO off on veths when
  per-segment accuracy matters).
  nftables is driven with the ``nft`` binary (ruleset on stdin, ``nft -f -``,
  run inside the namespace by a ``setns`` pre-exec hook): pyroute2 0.9.7's
  ``nftables`` module has message classes but no expression builders for
  ``numgen``, ECN payload matches or checksum-updating payload mangling, and a
  ruleset file is applied atomically (the add/delete/add idiom replaces our
  table in one transaction). Rulesets are generated from numbers and interface
  names we validate, never from user strings.
* **Delay/jitter** — ``netem`` where the kernel has it: feature-detected once per
  process by adding a netem qdisc to a veth in a scratch namespace
  (:func:`features`). This kernel has no netem, so a ``Direction`` with
  ``delay_s``/``jitter_s`` raises :class:`FeatureMissing` naming
  ``CONFIG_NET_SCH_NETEM``. With netem, netem is the root (``e3e0:``) and tbf
  its child (``e3e1:``).
* **Link down/up** — admin state of the interface (pyroute2). A cable cut is both
  ends down (:func:`set_link`): both kernels see the nexthop die at once and
  route around it. The kernel deletes what hangs off a downed interface
  (IPv4 single-path routes, IPv6 addresses and routes); :func:`set_link_state`
  snapshots the interface's addresses and routes into ``state_dir`` before
  taking it down and puts them back after bringing it up (routes with
  lightweight tunnel encapsulation — SRv6 — are reported, not restored).

Every change appends one JSON line to the caller's event log:
``{"t": epoch, "cluster": …, "link": …, "direction": …, "action": …, "settings": …}``.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import json
import math
import os
import re
import secrets
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink import (
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_REPLACE,
    NLM_F_REQUEST,
    nla,
    nlmsg,
)
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_NEWQDISC, TC_H_ROOT

from emu.fabric import netns as emu_netns
from emu.fabric.naming import LINK_QDISC_MAJOR, SWITCH_QDISC_MAJOR
from emu.fabric.nftrules import (
    NFT_PREFIX,
    PROB_SCALE,
    nft_ruleset,
    nft_table,
    stream_key,
)
from emu.fabricclock import FabricClock
from emu.topology.model import Direction, Link

#: ioctl: an fd of the network namespace a socket belongs to (linux/sockios.h)
_SIOCGSKNS = 0x894C
QDISC_HANDLE = LINK_QDISC_MAJOR << 16
CHILD_HANDLE = (LINK_QDISC_MAJOR + 1) << 16
ETH_HLEN = 14
DEFAULT_STATE_DIR = Path("/run/emu/linkctl")
NETNS_DIR = Path("/run/netns")

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class LinkCtlError(RuntimeError):
    """A link-control operation that could not be done; the message says why."""


class FeatureMissing(LinkCtlError):
    """The kernel lacks what a setting needs (e.g. netem for delay)."""


def ns_name(cluster: str, node: str) -> str:
    """The namespace of ``node`` in ``cluster``."""
    return f"{cluster}-{node}"


# --------------------------------------------------------------------------- helpers


def _ns_path(ns: str) -> Path:
    p = NETNS_DIR / ns
    if "/" in ns or not p.exists():
        raise LinkCtlError(f"network namespace {ns!r} does not exist")
    return p


def _check_ifname(ifname: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_.:@#+=-]{1,15}", ifname):
        raise LinkCtlError(f"bad interface name {ifname!r}")


def run_in_ns(ns: str, argv: Sequence[str], input: str | None = None,
              check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` inside namespace ``ns`` (setns in the child before exec)."""
    fd = os.open(_ns_path(ns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        def enter() -> None:
            if _libc.setns(fd, _CLONE_NEWNET) != 0:
                os._exit(126)

        proc = subprocess.run(list(argv), input=input, capture_output=True, text=True,
                              preexec_fn=enter, pass_fds=(fd,))
    finally:
        os.close(fd)
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise LinkCtlError(f"{ns}: {argv[0]} failed ({proc.returncode}): "
                           + " | ".join(msg[-3:]))
    return proc


def _nft(ns: str, script: str) -> None:
    run_in_ns(ns, ["nft", "-f", "-"], input=script)


def _ipr(ns: str) -> IPRoute:
    _ns_path(ns)
    # the socket is opened by this thread inside the namespace (setns and back), not by
    # pyroute2's netns=, which forks a child per socket to enter it by name (and would
    # create a namespace of that name if it were missing)
    with emu_netns.entered(ns):
        ipr = IPRoute()
    # pyroute2 0.9.7: the sync nlm_request() reads this key without setting it
    ipr.status.setdefault("nlm_generator", False)
    return ipr


def _ifindex(ipr: IPRoute, ns: str, ifname: str) -> int:
    idx = ipr.link_lookup(ifname=ifname)
    if not idx:
        raise LinkCtlError(f"{ns}: no interface {ifname!r}{_where(ipr, ns)}")
    return idx[0]


def _where(ipr: IPRoute, ns: str) -> str:
    """What the netlink socket sees and which namespace it is in, for a lookup that
    failed: a socket in another namespace than the name's reads as a missing device."""
    try:
        names = sorted(str(l.get_attr("IFLA_IFNAME")) for l in ipr.get_links())
    except Exception as e:  # noqa: BLE001 - a diagnostic never hides the error
        names = [f"(links unreadable: {e})"]
    try:
        fd = fcntl.ioctl(ipr.asyncore.socket.fileno(), _SIOCGSKNS)
        try:
            sock_ino: object = os.fstat(fd).st_ino
        finally:
            os.close(fd)
    except Exception as e:  # noqa: BLE001
        sock_ino = f"? ({e})"
    return (f" (its netlink socket sees {', '.join(names) or 'no links'}; socket in "
            f"netns inode {sock_ino}, {ns} is inode {_ns_inode(ns)})")


def _ns_inode(ns: str) -> object:
    try:
        return _ns_path(ns).stat().st_ino
    except (OSError, LinkCtlError) as e:
        return f"? ({e})"


def log_event(path: str | os.PathLike[str] | None, *, cluster: str = "", link: str = "",
              direction: str = "", action: str, settings: object = None,
              clock: FabricClock | None = None) -> dict:
    """Append one JSON-lines event to ``path`` (if given) and return it.

    ``t`` is the wall clock (``CLOCK_REALTIME``); with the cluster's ``clock`` the line
    also has ``fabric_t`` (fabric seconds since the cluster's epoch, what its ``[[event]]``
    times, captures and NIC traces are in) and ``scale`` beside it. ``settings`` are
    what the kernel was given: wall units at a scale ≠ 1."""
    ev: dict[str, object] = {"t": time.time()}
    if clock is not None:
        ev.update(fabric_t=round(clock.now(), 9), scale=clock.scale)
    ev.update(cluster=cluster, link=link, direction=direction, action=action,
              settings=settings if settings is not None else {})
    if path is not None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(ev, sort_keys=False) + "\n")
    return ev


# --------------------------------------------------------------------------- features


@dataclass(frozen=True)
class Features:
    """What this kernel offers link control (probed once per process)."""

    netem: bool
    nft_egress: bool
    #: the kernel's SRv6 local SIDs (seg6local routes, CONFIG_IPV6_SEG6_LWTUNNEL), which
    #: ``routing.mode = "srv6"`` installs on switches (``routing.srv6 = "kernel"``, or
    #: ``"auto"`` where present); some of our kernels lack them: tc BPF serves there
    seg6local: bool = True

    def describe(self) -> str:
        return ("netem: " + ("present" if self.netem else "absent (delay/jitter unavailable)")
                + "; loss/CE hook: " + ("netdev egress" if self.nft_egress
                                        else "inet postrouting")
                + "; SRv6: " + ("kernel seg6local" if self.seg6local
                                else "no kernel seg6local (routing.mode=srv6 uses tc BPF)"))


_features: Features | None = None
#: scratch namespaces of :func:`features`: ``emuprobe-<pid>-<hex>``
PROBE_PREFIX = "emuprobe-"
_PROBE_RE = re.compile(rf"^{PROBE_PREFIX}(\d+)-[0-9a-f]+$")


def remove_dead_probes() -> list[str]:
    """Remove the scratch namespaces of feature probes whose process is gone (an ``emu
    up`` SIGKILLed mid-probe left them: no state file names them). Returns them."""
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return []
    gone = []
    for n in names:
        m = _PROBE_RE.match(n)
        if m is None:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # its prober still runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        emu_netns.remove(n)
        gone.append(n)
    return gone


def _probe_seg6local(ns: str, ifindex: int) -> bool:
    """Whether this kernel takes an SRv6 local SID (``seg6local End``) — what
    ``routing.mode = "srv6"`` installs — tried on a veth of the scratch namespace."""
    from emu.fabric import nl

    with emu_netns.entered(ns), nl.Batch() as b:
        try:
            b.run([nl.seg6local(ipaddress.IPv6Network("fc00:ffff::/48"), ifindex, "End")])
        except OSError:
            return False
    return True


def features(refresh: bool = False) -> Features:
    """Probe netem and the nftables netdev egress hook on a veth in a scratch namespace."""
    global _features
    if _features is not None and not refresh:
        return _features
    # the prober's pid in the name: a probe cut short by SIGKILL is found and removed by
    # remove_dead_probes (emu down / emu clean), never one a live process is using
    scratch = f"{PROBE_PREFIX}{os.getpid()}-{secrets.token_hex(2)}"
    emu_netns.create(scratch)
    try:
        with _ipr(scratch) as ipr:
            ipr.link("add", ifname="p0", kind="veth", peer="p1")
            idx = _ifindex(ipr, scratch, "p0")
            ipr.link("set", index=idx, state="up")
            try:
                ipr.tc("add", "netem", index=idx, handle=QDISC_HANDLE, delay=1000)
                has_netem = True
            except NetlinkError:
                has_netem = False
        proc = run_in_ns(scratch, ["nft", "-f", "-"], check=False, input=(
            f"table netdev {NFT_PREFIX}probe {{\n chain egress {{\n"
            '  type filter hook egress device "p0" priority 0; policy accept;\n }\n}\n'))
        has_egress = proc.returncode == 0
        has_seg6 = _probe_seg6local(scratch, idx)
    finally:
        emu_netns.remove(scratch)
    _features = Features(netem=has_netem, nft_egress=has_egress, seg6local=has_seg6)
    return _features


# --------------------------------------------------------------------------- qdiscs


class _TbfMsg(nlmsg):
    """RTM_NEWQDISC for tbf with the 64-bit rate and byte-burst attributes.

    Derived from ``nlmsg``, not pyroute2's ``tcmsg``: pyroute2 caches the compiled
    attribute table on the class, and a subclass would inherit tcmsg's.
    """

    prefix = "TCA_"
    fields = (("family", "B"), ("pad1", "B"), ("pad2", "H"), ("index", "i"),
              ("handle", "I"), ("parent", "I"), ("info", "I"))
    nla_map = (
        ("TCA_UNSPEC", "none"),
        ("TCA_KIND", "asciiz"),
        ("TCA_OPTIONS", "tbf_options"),
    )

    class tbf_options(nla):
        nla_map = (
            ("TCA_TBF_UNSPEC", "none"),
            ("TCA_TBF_PARMS", "tbf_parms"),
            ("TCA_TBF_RTAB", "hex"),
            ("TCA_TBF_PTAB", "hex"),
            ("TCA_TBF_RATE64", "uint64"),
            ("TCA_TBF_PRATE64", "uint64"),
            ("TCA_TBF_BURST", "uint32"),
            ("TCA_TBF_PBURST", "uint32"),
            ("TCA_TBF_PAD", "hex"),
        )

        class tbf_parms(nla):
            # struct tc_tbf_qopt: two tc_ratespec, limit, buffer, mtu
            fields = (
                ("rate_cell_log", "B"), ("rate_linklayer", "B"), ("rate_overhead", "H"),
                ("rate_cell_align", "h"), ("rate_mpu", "H"), ("rate", "I"),
                ("peak_cell_log", "B"), ("peak_linklayer", "B"), ("peak_overhead", "H"),
                ("peak_cell_align", "h"), ("peak_mpu", "H"), ("peak", "I"),
                ("limit", "I"), ("buffer", "I"), ("mtu", "I"),
            )


#: the least a port queues before tail drop: a shallow-buffer switch's share per port (a
#: 51.2T switch's ~165 MB over 64 ports is ~2.5 MB). In bytes, so the same at every time
#: scale — 20 ms of a dilated wall rate is a few hundred KB of fabric queue at a scale of
#: thousands, and two ECMP-collided 400 Gb/s flows tail-dropped on it
PORT_BUFFER = 2 << 20


def tbf_sizes(rate_bps: int, mtu: int) -> tuple[int, int]:
    """(burst, limit) in bytes for a tbf at ``rate_bps`` on a link of ``mtu`` (see module doc)."""
    frame = mtu + ETH_HLEN
    rate_Bps = rate_bps / 8
    burst = max(2 * frame, math.ceil(rate_Bps * 1e-3))
    limit = burst + max(4 * frame, math.ceil(rate_Bps * 20e-3), PORT_BUFFER)
    return burst, limit


def _add_tbf(ipr: IPRoute, index: int, handle: int, parent: int, rate_bps: int,
             burst: int, limit: int) -> None:
    rate_Bps = max(1, rate_bps // 8)
    msg = _TbfMsg()
    msg["family"] = socket.AF_UNSPEC
    msg["index"] = index
    msg["handle"] = handle
    msg["parent"] = parent
    parms = {name: 0 for name, _ in _TbfMsg.tbf_options.tbf_parms.fields}
    # linklayer ethernet: the kernel computes from the rate itself, no rate table
    parms.update(rate_linklayer=1, rate=min(rate_Bps, 0xFFFFFFFF), limit=limit)
    attrs: list[list[object]] = [["TCA_TBF_PARMS", parms], ["TCA_TBF_BURST", burst]]
    if rate_Bps >= 1 << 32:
        attrs.append(["TCA_TBF_RATE64", rate_Bps])
    msg["attrs"] = [["TCA_KIND", "tbf"], ["TCA_OPTIONS", {"attrs": attrs}]]
    ipr.nlm_request(msg, msg_type=RTM_NEWQDISC,
                    msg_flags=NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE)


def _root_qdisc(ipr: IPRoute, index: int):
    for q in ipr.get_qdiscs(index=index):
        if q["parent"] == TC_H_ROOT:
            return q
    return None


def _del_our_qdisc(ipr: IPRoute, index: int) -> bool:
    q = _root_qdisc(ipr, index)
    if q is None or q["handle"] >> 16 != LINK_QDISC_MAJOR:
        return False
    ipr.tc("del", index=index, handle=q["handle"], parent=TC_H_ROOT)
    return True


# --------------------------------------------------------------------------- nftables


def _prob(p: float, what: str) -> int:
    if not 0.0 <= p <= 1.0:
        raise LinkCtlError(f"{what} must be a probability in [0, 1], not {p}")
    return round(p * PROB_SCALE)


def _nft_tables(ns: str) -> list[tuple[str, str]]:
    proc = run_in_ns(ns, ["nft", "-j", "list", "tables"])
    out = json.loads(proc.stdout or '{"nftables": []}')
    return [(o["table"]["family"], o["table"]["name"]) for o in out["nftables"] if "table" in o]


def _del_our_table(ns: str, ifname: str) -> bool:
    table = nft_table(ifname)
    found = [(fam, name) for fam, name in _nft_tables(ns) if name == table]
    if found:
        _nft(ns, "".join(f"delete table {fam} {name}\n" for fam, name in found))
    return bool(found)


# --------------------------------------------------------------------------- apply / clear


def apply_direction(ns: str, ifname: str, d: Direction, *, mtu: int | None = None,
                    burst: int | None = None, limit: int | None = None,
                    event_log: str | os.PathLike[str] | None = None, cluster: str = "",
                    link: str = "", direction: str = "",
                    clock: FabricClock | None = None, fresh: bool = False,
                    ipr: IPRoute | None = None, index: int | None = None) -> dict:
    """Make ``ifname``'s egress in ``ns`` do what ``d`` says (replacing our previous settings).

    Returns the settings applied (the event's ``settings``). ``mtu`` defaults to
    the interface's; ``burst``/``limit`` (bytes) override :func:`tbf_sizes`.
    ``fresh``: the interface was just made (``emu up``): nothing of ours or anyone's is
    on it, so no qdisc dump and no nftables listing (an ``nft`` process per direction
    was a third of a 256-host leaf-spine's build). ``ipr``, ``index``: a netlink socket
    in ``ns`` to use (and leave open) and the interface's index, as :func:`apply_links`
    passes them.
    """
    _check_ifname(ifname)
    loss = _prob(d.loss, "loss")
    ce = _prob(d.ecn_ce, "ecn_ce")
    dup = _prob(d.duplicate, "duplicate")
    if d.delay_s < 0 or d.jitter_s < 0:
        raise LinkCtlError("delay and jitter must not be negative")
    if d.rate_bps is not None and d.rate_bps <= 0:
        raise LinkCtlError(f"rate must be positive, not {d.rate_bps}")
    feats = features()
    if dup and not feats.nft_egress:
        raise FeatureMissing(f"{ns}/{ifname}: duplicate needs nftables' netdev egress hook "
                             "(dup to a device), which this kernel lacks "
                             "(CONFIG_NETFILTER_EGRESS)")
    wants_netem = d.delay_s > 0 or d.jitter_s > 0
    if wants_netem and not feats.netem:
        raise FeatureMissing(
            f"{ns}/{ifname}: delay {d.delay_s}s / jitter {d.jitter_s}s need the netem qdisc, "
            "which this kernel lacks (CONFIG_NET_SCH_NETEM); netem: absent")
    settings: dict[str, object] = {k: v for k, v in asdict(d).items()}
    with (_ipr(ns) if ipr is None else contextlib.nullcontext(ipr)) as ipr:
        idx = index if index is not None else _ifindex(ipr, ns, ifname)
        if mtu is None:
            mtu = ipr.get_links(idx)[0].get_attr("IFLA_MTU")
        q = None if fresh else _root_qdisc(ipr, idx)
        major = None if q is None else q["handle"] >> 16
        if q is not None and major != LINK_QDISC_MAJOR and q.get_attr("TCA_KIND") not in (
                "noqueue", "pfifo_fast", "mq", "pfifo", "bfifo") and (d.rate_bps or wants_netem):
            if major == SWITCH_QDISC_MAJOR:
                raise LinkCtlError(
                    f"{ns}/{ifname}: the switch pipeline serializes this port (its kernel "
                    "datapath's tbf); change its rate with `emu switch NODE PORT set "
                    "rate=…` — loss, marking and duplication still apply here")
            raise LinkCtlError(f"{ns}/{ifname}: root qdisc {q.get_attr('TCA_KIND')} is not emu's;"
                               " refusing to replace it")
        if q is not None:
            _del_our_qdisc(ipr, idx)
        if d.rate_bps:
            b_def, l_def = tbf_sizes(d.rate_bps, mtu)
            b = burst if burst is not None else b_def
            lim = limit if limit is not None else l_def
            settings.update(burst=b, limit=lim)
        if wants_netem:
            ipr.tc("add", "netem", index=idx, handle=QDISC_HANDLE, parent=TC_H_ROOT,
                   delay=int(d.delay_s * 1e6), jitter=int(d.jitter_s * 1e6), limit=10000)
            if d.rate_bps:
                _add_tbf(ipr, idx, CHILD_HANDLE, QDISC_HANDLE | 1, d.rate_bps, b, lim)
        elif d.rate_bps:
            _add_tbf(ipr, idx, QDISC_HANDLE, TC_H_ROOT, d.rate_bps, b, lim)
    if loss or ce or dup:
        key = stream_key(d.seed, link or ifname, direction)
        _nft(ns, nft_ruleset(ifname, loss, ce, feats.nft_egress, dup, key))
        settings["hook"] = "netdev egress" if feats.nft_egress else "inet postrouting"
    elif not fresh:
        _del_our_table(ns, ifname)
    log_event(event_log, cluster=cluster, link=link, direction=direction or f"{ns}/{ifname}",
              action="impair", settings=settings, clock=clock)
    return settings


def clear_direction(ns: str, ifname: str, *, event_log: str | os.PathLike[str] | None = None,
                    cluster: str = "", link: str = "", direction: str = "",
                    clock: FabricClock | None = None) -> dict:
    """Remove our qdisc and our nftables table from ``ifname`` (nothing else)."""
    _check_ifname(ifname)
    with _ipr(ns) as ipr:
        idx = _ifindex(ipr, ns, ifname)
        q = _del_our_qdisc(ipr, idx)
    t = _del_our_table(ns, ifname)
    settings = {"qdisc_removed": q, "nft_table_removed": t}
    log_event(event_log, cluster=cluster, link=link, direction=direction or f"{ns}/{ifname}",
              action="clear", settings=settings, clock=clock)
    return settings


def apply_link(cluster: str, link: Link, *, event_log: str | os.PathLike[str] | None = None,
               **kw: object) -> None:
    """Apply both directions of a model link (``a_to_b`` on a's egress, ``b_to_a`` on b's)."""
    for label in ("a_to_b", "b_to_a"):
        apply_link_direction(cluster, link, label, event_log=event_log, **kw)


def apply_links(cluster: str, links: Sequence[Link], *,
                event_log: str | os.PathLike[str] | None = None,
                clock: FabricClock | None = None, fresh: bool = False) -> None:
    """:func:`apply_link` for many links: one netlink socket and one link dump per
    namespace, not per direction (192 of each for a 64-host leaf-spine, a fifth of its
    ``emu up``). ``fresh``: the links were just made (:func:`apply_direction`)."""
    by_ns: dict[str, list[tuple[Link, str]]] = {}
    for lk in links:
        for label in ("a_to_b", "b_to_a"):
            d = getattr(lk, label)
            if d.is_default():
                if not fresh:
                    apply_link_direction(cluster, lk, label, event_log=event_log, clock=clock)
                continue
            src = lk.a if label == "a_to_b" else lk.b
            by_ns.setdefault(ns_name(cluster, src.node), []).append((lk, label))
    for ns, items in by_ns.items():
        with _ipr(ns) as ipr:
            index = {str(m.get_attr("IFLA_IFNAME")): int(m["index"]) for m in ipr.get_links()}
            for lk, label in items:
                src = lk.a if label == "a_to_b" else lk.b
                apply_direction(ns, src.ifname, getattr(lk, label), mtu=lk.mtu,
                                event_log=event_log, cluster=cluster, link=lk.name,
                                direction=label, clock=clock, fresh=fresh, ipr=ipr,
                                index=index.get(src.ifname))


def apply_link_direction(cluster: str, link: Link, label: str, *,
                         event_log: str | os.PathLike[str] | None = None,
                         **kw: object) -> None:
    """Make one direction of a model link (``a_to_b``: a's egress) what the model says:
    our settings removed where it is the default, applied otherwise."""
    src = link.a if label == "a_to_b" else link.b
    d = getattr(link, label)
    ns = ns_name(cluster, src.node)
    if d.is_default():
        if kw.get("fresh"):  # a link just made has nothing to clear
            return
        clock = kw.get("clock")
        clear_direction(ns, src.ifname, event_log=event_log, cluster=cluster,
                        link=link.name, direction=label,
                        clock=clock if isinstance(clock, FabricClock) else None)
    else:
        apply_direction(ns, src.ifname, d, mtu=link.mtu, event_log=event_log,
                        cluster=cluster, link=link.name, direction=label, **kw)


# --------------------------------------------------------------------------- counters


def counters(ns: str, ifname: str) -> dict[str, object]:
    """nft rule counters (dropped, marked, duplicated) and root qdisc stats of ``ifname``
    (LinkCtlError when it cannot be read)."""
    out = counters_many([(ns, ifname)])[(ns, ifname)]
    if "error" in out:
        raise LinkCtlError(str(out["error"]))
    return out


def counters_many(ports: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict[str, object]]:
    """:func:`counters` of many ``(namespace, ifname)``: one ``nft`` listing and one
    netlink socket (one link and one qdisc dump) per namespace, not two of each per port
    (``emu status`` of a 256-host leaf-spine took 4.8 s, 640 ports). A namespace without
    nft reads as no table; a port (or namespace) that vanished reads as ``{"error": …}``,
    never an error for the others."""
    by_ns: dict[str, list[str]] = {}
    for ns, ifname in ports:
        _check_ifname(ifname)
        by_ns.setdefault(ns, []).append(ifname)
    out: dict[tuple[str, str], dict[str, object]] = {}
    for ns, names in by_ns.items():
        try:
            out.update(_ns_counters(ns, names))
        except (OSError, LinkCtlError) as e:
            out.update({(ns, n): {"error": str(e)} for n in names})
    return out


def _ns_counters(ns: str, names: list[str]) -> dict[tuple[str, str], dict[str, object]]:
    """:func:`counters_many` of one namespace's ports."""
    out: dict[tuple[str, str], dict[str, object]] = {}
    rules: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    proc = run_in_ns(ns, ["nft", "-j", "list", "ruleset"], check=False)
    listed = json.loads(proc.stdout or "{}") if proc.returncode == 0 else {}
    for obj in listed.get("nftables", []):
        if "table" in obj:
            t = obj["table"]
            rules.setdefault(t["name"], []).append((t["family"], {"table": t["name"]}))
        elif "rule" in obj:
            rules.setdefault(obj["rule"]["table"], []).append(
                (obj["rule"]["family"], obj["rule"]))
    with _ipr(ns) as ipr:
        index = {str(m.get_attr("IFLA_IFNAME")): int(m["index"]) for m in ipr.get_links()}
        roots = {int(q["index"]): q for q in ipr.get_qdiscs() if q["parent"] == TC_H_ROOT}
        for ifname in names:
            if ifname in index:
                out[(ns, ifname)] = _port_counters(rules.get(nft_table(ifname), []),
                                                   roots.get(index[ifname]))
            else:
                out[(ns, ifname)] = {"error": f"{ns}: no interface {ifname!r}"
                                              f"{_where(ipr, ns)}"}
    return out


def _port_counters(table: list[tuple[str, dict[str, Any]]], q: Any) -> dict[str, object]:
    """One port's counters from its nft table's entries (``(family, rule)``; the table's
    own entry has no ``expr``) and its root qdisc (None: none)."""
    out: dict[str, object] = {"dropped": 0, "marked": 0, "duplicated": 0, "nft_table": None,
                              "qdisc": None, "sent_bytes": 0, "sent_packets": 0,
                              "qdisc_dropped": 0, "overlimits": 0, "backlog": 0}
    for fam, rule in table:
        out["nft_table"] = f"{fam} {rule['table']}"
        if "expr" not in rule:  # the table itself
            continue
        pkts = sum(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
        if rule.get("comment") == "emu:loss":
            out["dropped"] = int(out["dropped"]) + pkts
        elif rule.get("comment") in ("emu:ce4", "emu:ce6"):
            out["marked"] = int(out["marked"]) + pkts
        elif rule.get("comment") == "emu:dup":
            out["duplicated"] = int(out["duplicated"]) + pkts
    if q is not None:
        out["qdisc"] = f"{q.get_attr('TCA_KIND')} {q['handle'] >> 16:x}:"
        st = q.get_attr("TCA_STATS2")
        basic = st.get_attr("TCA_STATS_BASIC") if st else None
        queue = st.get_attr("TCA_STATS_QUEUE") if st else None
        if basic:
            out["sent_bytes"] = basic["bytes"]
            out["sent_packets"] = basic["packets"]
        if queue:
            out["qdisc_dropped"] = queue["drops"]
            out["overlimits"] = queue["overlimits"]
            out["backlog"] = queue["backlog"]
    return out


# --------------------------------------------------------------------------- link state


def _state_file(state_dir: Path, ns: str, ifname: str) -> Path:
    return state_dir / ns / f"{ifname}.json"


_ROUTE_KEYS = ("dst", "dst_len", "table", "priority", "proto", "scope", "type", "gateway",
               "prefsrc", "tos")


def _snapshot(ipr: IPRoute, idx: int) -> dict[str, list[dict]]:
    """Addresses on ``idx`` and routes through it, in a form ``route("replace")`` takes."""
    addrs = []
    for fam in (socket.AF_INET, socket.AF_INET6):
        for a in ipr.get_addr(family=fam, index=idx):
            if a["scope"] != 0:  # link-local comes back by itself
                continue
            addrs.append({"family": fam, "address": a.get_attr("IFA_ADDRESS"),
                          "prefixlen": a["prefixlen"]})
    routes, skipped = [], []
    for fam in (socket.AF_INET, socket.AF_INET6):
        for r in ipr.get_routes(family=fam):
            table = r.get_attr("RTA_TABLE") or r["table"]
            if table == 255 or r["proto"] == 2:  # local table / proto kernel: automatic
                continue
            oif = r.get_attr("RTA_OIF")
            mp = r.get_attr("RTA_MULTIPATH")
            hops = [{"gateway": h.get_attr("RTA_GATEWAY"), "oif": h["oif"],
                     "hops": h["hops"]} for h in (mp or [])]
            if oif != idx and all(h["oif"] != idx for h in hops):
                continue
            spec = {"family": fam, "dst": r.get_attr("RTA_DST"), "dst_len": r["dst_len"],
                    "table": table, "priority": r.get_attr("RTA_PRIORITY"),
                    "proto": r["proto"], "scope": r["scope"], "type": r["type"],
                    "gateway": r.get_attr("RTA_GATEWAY"), "prefsrc": r.get_attr("RTA_PREFSRC"),
                    "oif": oif, "multipath": hops or None}
            if r.get_attr("RTA_ENCAP") is not None:
                skipped.append(spec)
                continue
            routes.append({k: v for k, v in spec.items() if v is not None})
    return {"addresses": addrs, "routes": routes, "skipped_encap": skipped}


def _restore(ipr: IPRoute, idx: int, snap: dict) -> dict[str, int]:
    restored = failed = 0
    for a in snap.get("addresses", []):
        with contextlib.suppress(NetlinkError):  # EEXIST: kept by the kernel
            ipr.addr("add", index=idx, address=a["address"], prefixlen=a["prefixlen"],
                     family=a["family"])
    up = {lk["index"] for lk in ipr.get_links() if lk["flags"] & 1}
    for spec in snap.get("routes", []):
        spec = dict(spec)
        fam = spec["family"]
        if spec.get("multipath"):
            hops = [{k: v for k, v in h.items() if v is not None}
                    for h in spec["multipath"] if h["oif"] in up]
            if not hops:
                failed += 1
                continue
            spec["multipath"] = hops
        if fam == socket.AF_INET6 and not spec.get("dst"):
            spec["dst"] = "::"
        try:
            ipr.route("replace", **spec)
            restored += 1
        except NetlinkError:
            failed += 1
    return {"routes_restored": restored, "routes_failed": failed,
            "routes_not_restored_encap": len(snap.get("skipped_encap", []))}


def set_link_state(ns: str, ifname: str, up: bool, *,
                   event_log: str | os.PathLike[str] | None = None, cluster: str = "",
                   link: str = "", state_dir: str | os.PathLike[str] | None = DEFAULT_STATE_DIR,
                   clock: FabricClock | None = None) -> dict:
    """Bring ``ifname`` in ``ns`` administratively up or down.

    Going down, the interface's addresses and the routes through it are saved to
    ``state_dir/<ns>/<ifname>.json`` (``None``: not saved); coming up, they are put
    back (the kernel deletes them on down) and the file removed.
    """
    _check_ifname(ifname)
    sdir = Path(state_dir) if state_dir is not None else None
    info: dict[str, object] = {"ns": ns, "ifname": ifname, "up": up}
    with _ipr(ns) as ipr:
        idx = _ifindex(ipr, ns, ifname)
        if not up:
            if sdir is not None:
                f = _state_file(sdir, ns, ifname)
                if not f.exists():  # a second "down" must not overwrite the good snapshot
                    snap = _snapshot(ipr, idx)
                    f.parent.mkdir(parents=True, exist_ok=True)
                    f.write_text(json.dumps(snap))
                    info["saved_routes"] = len(snap["routes"])
            ipr.link("set", index=idx, state="down")
        else:
            ipr.link("set", index=idx, state="up")
            if sdir is not None:
                f = _state_file(sdir, ns, ifname)
                if f.exists():
                    info.update(_restore(ipr, idx, json.loads(f.read_text())))
                    f.unlink()
                    with contextlib.suppress(OSError):
                        f.parent.rmdir()
    log_event(event_log, cluster=cluster, link=link, direction=f"{ns}/{ifname}",
              action="up" if up else "down", settings=info, clock=clock)
    return info


def set_link(cluster: str, link: Link, up: bool, **kw: object) -> None:
    """Cut (both ends down) or mend a model link.

    Going up, both ends come up before either restores routes, so a route via
    the peer finds its nexthop reachable.
    """
    ends = [(ns_name(cluster, e.node), e.ifname) for e in (link.a, link.b)]
    if up:
        # both ends administratively up first (no restore), then restore
        for ns, ifn in ends:
            with _ipr(ns) as ipr:
                ipr.link("set", index=_ifindex(ipr, ns, ifn), state="up")
    for ns, ifn in ends:
        set_link_state(ns, ifn, up, cluster=cluster, link=link.name, **kw)  # type: ignore[arg-type]


def fail_switch(cluster: str, links: Iterable[Link], node: str, up: bool = False,
                **kw: object) -> list[str]:
    """Whole-switch failure (or repair): every link touching ``node`` down (up)."""
    done = []
    for lk in links:
        if node in (lk.a.node, lk.b.node):
            set_link(cluster, lk, up, **kw)
            done.append(lk.name)
    return done


def fail_plane(cluster: str, links: Iterable[Link], plane: int, up: bool = False,
               **kw: object) -> list[str]:
    """Whole-plane failure (or repair): every link of ``plane`` down (up)."""
    done = []
    for lk in links:
        if lk.plane == plane:
            set_link(cluster, lk, up, **kw)
            done.append(lk.name)
    return done

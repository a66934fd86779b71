# SPDX-License-Identifier: GPL-2.0-only
"""Small topologies built as model objects (no loader) and helpers that act inside namespaces."""

from __future__ import annotations

import contextlib
import ipaddress as ip
import os
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from emu.fabric import Fabric, netns
from emu.fabric.status import interfaces
from emu.topology.model import Endpoint, Link, Node, Topology


def pair(name: str = "pair") -> Topology:
    """Two hosts back to back."""
    t = Topology(name=name, source="<tests/support/fabric_util.py:pair>")
    t.nodes = {n: Node(n, "host") for n in ("h1", "h2")}
    t.links = [Link("h1-h2",
                    Endpoint("h1", "eth0", ip.ip_interface("10.0.0.1/24"),
                             ip.ip_interface("fd00::1/64")),
                    Endpoint("h2", "eth0", ip.ip_interface("10.0.0.2/24"),
                             ip.ip_interface("fd00::2/64")))]
    return t


def leaf_spine(spines: int = 2, leaves: int = 2, hosts_per_leaf: int = 2, *,
               routing: str = "ecmp", hash_seed: int | None = 12345,
               name: str = "leaf-spine") -> Topology:
    """Hosts h1..hN (eth0) under leaf1..leafL, every leaf to every spine.

    Host subnets 10.(64+h/256).(h%256).0/24 / fd00:1:<h>::/64 (switch .1, host .2);
    fabric links 10.(128+n/256).(n%256).0/24 / fd00:2:<n>::/64 (leaf .1, spine .2); ids for
    uSID locators fc00:0:<id>:: — leaves 0x1L, spines 0x2S, hosts 0x3H (hex).
    """
    t = Topology(name=name, source="<tests/support/fabric_util.py:leaf_spine>", routing=routing,
                 hash_seed=hash_seed,
                 params={"spines": spines, "leaves": leaves, "hosts_per_leaf": hosts_per_leaf})

    def node(n: str, kind: str, role: str, nid: int) -> None:
        t.nodes[n] = Node(n, kind, role, loopback4=ip.ip_address(f"10.255.{nid >> 8}.{nid & 255}"),
                          loopback6=ip.ip_address(f"fc00:0:{nid:x}::"))

    for s in range(1, spines + 1):
        node(f"spine{s}", "switch", "spine", 0x20 + s)
    h = 0
    n = 0
    for lf in range(1, leaves + 1):
        leaf = f"leaf{lf}"
        node(leaf, "switch", "leaf", 0x10 + lf)
        for _ in range(hosts_per_leaf):
            h += 1
            host = f"h{h}"
            node(host, "host", "host", 0x30 + h)
            v4 = f"10.{64 + (h >> 8)}.{h & 255}"
            t.links.append(Link(f"{host}-{leaf}",
                                Endpoint(host, "eth0", ip.ip_interface(f"{v4}.2/24"),
                                         ip.ip_interface(f"fd00:1:{h:x}::2/64")),
                                Endpoint(leaf, host, ip.ip_interface(f"{v4}.1/24"),
                                         ip.ip_interface(f"fd00:1:{h:x}::1/64"))))
        for s in range(1, spines + 1):
            n += 1
            spine = f"spine{s}"
            v4 = f"10.{128 + (n >> 8)}.{n & 255}"
            t.links.append(Link(f"{leaf}-{spine}",
                                Endpoint(leaf, spine, ip.ip_interface(f"{v4}.1/24"),
                                         ip.ip_interface(f"fd00:2:{n:x}::1/64")),
                                Endpoint(spine, leaf, ip.ip_interface(f"{v4}.2/24"),
                                         ip.ip_interface(f"fd00:2:{n:x}::2/64"))))
    return t


def host_addr(t: Topology, host: str, version: int) -> str:
    ep = t.links_of(host)[0].end(host)
    return str((ep.ipv4 if version == 4 else ep.ipv6).ip)


@contextlib.contextmanager
def inside(f: Fabric, node: str) -> Iterator[None]:
    with netns.entered(f.ns(node)):
        yield


def rx_packets(f: Fabric, node: str, ifname: str) -> int:
    return interfaces(f.ns(node))[ifname]["rx_packets"]


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(f: Fabric, src: str, dst: str, version: int, timeout: float = 2.0) -> bool:
    """One ICMP echo from ``src``'s namespace to address ``dst`` (raw socket, retried)."""
    with inside(f, src):
        if version == 4:
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        else:
            s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    ident = os.getpid() & 0xFFFF
    req_type, rep_type = (8, 0) if version == 4 else (128, 129)
    with s:
        deadline = time.monotonic() + timeout
        seq = 0
        while time.monotonic() < deadline:
            seq += 1
            hdr = struct.pack("!BBHHH", req_type, 0, 0, ident, seq) + b"emu-ping"
            if version == 4:
                hdr = hdr[:2] + struct.pack("!H", _csum(hdr)) + hdr[4:]
            s.sendto(hdr, (dst, 0))
            resend = time.monotonic() + 0.3
            while time.monotonic() < min(resend, deadline):
                r, _, _ = select.select([s], [], [], 0.05)
                if not r:
                    continue
                data, addr = s.recvfrom(2048)
                icmp = data[(data[0] & 0xF) * 4:] if version == 4 else data
                typ, _, _, rid, _ = struct.unpack_from("!BBHHH", icmp)
                if typ == rep_type and rid == ident and addr[0] == dst:
                    return True
    return False


def ns_of_cluster(cluster: str) -> list[str]:
    """Namespaces that look like ``cluster``'s (for asserting that none remain)."""
    try:
        return [n for n in os.listdir(netns.NETNS_RUN_DIR) if n.startswith(cluster + "-")]
    except FileNotFoundError:
        return []


ROOT = Path(__file__).resolve().parents[2]


def emu_cli(*args: str, check: bool = True, timeout: float = 180,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """``emu ARGS`` as a user runs it (this tree's emu); AssertionError with its output when
    ``check`` and it fails."""
    p = subprocess.run([sys.executable, "-m", "emu", *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    if check and p.returncode != 0:
        raise AssertionError(f"emu {' '.join(args)} → {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


#: ``--set``s that run a shipped fabric in real time at a rate this machine keeps (1 Gb/s):
#: for tests of what does not depend on the clock (tools, errors, counters), which would
#: otherwise wait out the default fabric's time scale (thousands: ``emu.plan.scale``) on
#: every fabric second they ask for. Tests of fabric time give their own scale after these.
REAL_TIME = ("--set", "time.scale=1", "--set", "link.rate=1gbit")


@contextlib.contextmanager
def pair_cluster(prefix: str, *up_args: str, real_time: bool = True) -> Iterator[str]:
    """``emu up namespaces/pair.toml [up_args]`` under a fresh name starting with ``prefix``
    (after :data:`REAL_TIME` unless ``real_time`` is False); down and checked gone
    afterwards, also when the test fails."""
    from emu.fabric import naming, state

    name = naming.random_cluster(prefix)
    try:
        emu_cli("up", "namespaces/pair.toml", "--name", name,
                *(REAL_TIME if real_time else ()), *up_args)
        yield name
    finally:
        if state.load(name) is not None:
            emu_cli("down", name, check=False)
        assert state.load(name) is None
        assert not os.path.exists(f"/run/emu/nic/{name}")


@contextlib.contextmanager
def fabric_up(t: Topology, prefix: str) -> Iterator[Fabric]:
    """``Fabric(t)`` up under a fresh cluster name starting with ``prefix`` (no daemons);
    down and checked gone afterwards, also when the test fails."""
    from emu.fabric import down, state
    from emu.fabric.naming import random_cluster

    name = random_cluster(prefix)
    f = Fabric(t, cluster=name).up()
    try:
        yield f
    finally:
        down(name)
        assert ns_of_cluster(name) == [] and state.load(name) is None


def control_request(sock: str | Path, req: dict) -> dict:
    """One JSON-lines request to a daemon's Unix control socket (a switch daemon's
    ``control.sock``), its one-line JSON reply."""
    import json

    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock))
        s.sendall((json.dumps(req) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError(f"{sock}: closed before a full reply")
            data += chunk
    return json.loads(data)


def shipped_real_time(name: str) -> str:
    """A shipped topology file (``namespaces/NAME``) as it was before fabric time: its
    ``[topology]``, ``[params]`` and ``[routing]``, jumbo links, no rates, delays or
    ``[latency]``, real time — for tests of what emu derives from an *unstated* rate (the
    rate this machine sustains), which the shipped files no longer leave unstated."""
    import tomllib

    data = tomllib.loads((Path(__file__).resolve().parents[2] / "namespaces" / name)
                         .read_text())
    lines: list[str] = []
    for section in ("topology", "params", "routing"):
        lines.append(f"[{section}]")
        for k, v in data.get(section, {}).items():
            lines.append(f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"')
    lines += ["[defaults.link]", "mtu = 9000", "[time]", "scale = 1"]
    return "\n".join(lines) + "\n"

# SPDX-License-Identifier: GPL-2.0-only
"""Three namespaces a – r – b joined by two veths and routed through r (IPv4 and IPv6).

For tests of link control and capture that must not depend on the fabric
builder. Names carry a random prefix; :meth:`RoutedTriple.close` removes
exactly the namespaces made.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Iterator

PORT = 5555


def sysctl(ns: str, key: str, value: str) -> None:
    from emu.fabric.capture import in_netns

    def w() -> None:
        with open("/proc/sys/" + key.replace(".", "/"), "w") as f:
            f.write(value)

    in_netns(ns, w)


class RoutedTriple:
    """Three namespaces, two veth links, routed; removed in the finalizer."""

    def __init__(self, prefix: str = "lc", octet: int = 77, port: int = PORT) -> None:
        from pyroute2 import IPRoute, netns

        self.port = port
        self.cluster = prefix + secrets.token_hex(3)
        self.a, self.r, self.b = (f"{self.cluster}-{n}" for n in "arb")
        self.made: list[str] = []
        for ns in (self.a, self.r, self.b):
            netns.create(ns)
            self.made.append(ns)
        with IPRoute(netns=self.a) as ipr:
            ipr.link("add", ifname="a0", kind="veth", peer={"ifname": "r0", "net_ns_fd": self.r})
        with IPRoute(netns=self.r) as ipr:
            ipr.link("add", ifname="r1", kind="veth", peer={"ifname": "b0", "net_ns_fd": self.b})
        plan = {self.a: [("a0", f"10.{octet}.1.2", f"fd{octet}:1::2")],
                self.r: [("r0", f"10.{octet}.1.1", f"fd{octet}:1::1"),
                         ("r1", f"10.{octet}.2.1", f"fd{octet}:2::1")],
                self.b: [("b0", f"10.{octet}.2.2", f"fd{octet}:2::2")]}
        for ns, ifs in plan.items():
            for ifn, _, _ in ifs:
                sysctl(ns, f"net.ipv6.conf.{ifn}.accept_dad", "0")
            with IPRoute(netns=ns) as ipr:
                for ifn, v4, v6 in ifs:
                    idx = ipr.link_lookup(ifname=ifn)[0]
                    ipr.addr("add", index=idx, address=v4, prefixlen=24)
                    ipr.addr("add", index=idx, address=v6, prefixlen=64)
                    ipr.link("set", index=idx, state="up")
                lo = ipr.link_lookup(ifname="lo")[0]
                ipr.link("set", index=lo, state="up")
        sysctl(self.r, "net.ipv4.ip_forward", "1")
        sysctl(self.r, "net.ipv6.conf.all.forwarding", "1")
        for ns, gw4, gw6 in ((self.a, f"10.{octet}.1.1", f"fd{octet}:1::1"),
                             (self.b, f"10.{octet}.2.1", f"fd{octet}:2::1")):
            with IPRoute(netns=ns) as ipr:
                ipr.route("add", dst="0.0.0.0/0", gateway=gw4)
                ipr.route("add", dst="::/0", gateway=gw6, family=socket.AF_INET6)

    def sock(self, ns: str, family: int = socket.AF_INET, bind: bool = False) -> socket.socket:
        from emu.fabric.capture import in_netns

        def make() -> socket.socket:
            s = socket.socket(family, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if bind:
                s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", self.port))
            return s

        return in_netns(ns, make)

    def close(self) -> None:
        from pyroute2 import netns

        for ns in self.made:
            try:
                netns.remove(ns)
            except OSError:
                pass




def made_and_removed(make: Callable[[], RoutedTriple]) -> Iterator[RoutedTriple]:
    """The body of a test fixture: skip without root, yield ``make()``, then remove it and
    check that none of its namespaces is left (``yield from`` it)."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    n = make()
    try:
        yield n
    finally:
        n.close()
        left = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        assert not left & set(n.made), f"namespaces left behind: {left & set(n.made)}"

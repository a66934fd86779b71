# SPDX-License-Identifier: GPL-2.0-only
"""The floor of emu's latency path: its four hand-offs with nothing else in them.

``write-lat`` crosses, per one-way trip, a spinning application → a Unix
socket → the NIC daemon → UDP over the cable → the peer's daemon → shared
memory → the peer's spinning application. This runs exactly those hand-offs
in a running pair cluster's host namespaces, with relays that only forward a
byte (plain ``select.epoll``, or trio's ``wait_readable`` as the daemon
waits), and prints t_min and t_typical (half round trips, as perftest and
``emu perf`` report them). Whatever emu measures above this is work done in
its daemons and client library, not waiting (``docs/measurements.md``,
"Latency of the emulated path").

    .venv/bin/python benchmarks/lat_floor.py CLUSTER [--trio] [-n 5000]

Root (namespaces). The cluster must be a pair (``namespaces/pair.toml``) whose
hosts have 10.0.1.11 and 10.0.1.12; UDP port 5999 must be free there.
"""

from __future__ import annotations

import argparse
import mmap
import os
import select
import socket
import subprocess
import sys
import tempfile
import time

PORT = 5999


def _region(path: str) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, 4096)
    finally:
        os.close(fd)


def _listen(path: str) -> socket.socket:
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.bind(path)
    lst.listen(1)
    c, _ = lst.accept()
    lst.close()
    c.setblocking(False)
    return c


def relay_epoll(me: str, peer: str, path: str, region: str) -> None:
    """Unix socket → UDP to the peer; UDP → the byte into the region."""
    m = _region(region)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((me, PORT))
    u.setblocking(False)
    c = _listen(path)
    ep = select.epoll()
    ep.register(u, select.EPOLLIN)
    ep.register(c, select.EPOLLIN)
    while True:
        for fd, _ in ep.poll():
            if fd == c.fileno():
                d = c.recv(100)
                if not d:
                    return
                u.sendto(d, (peer, PORT))
            else:
                d = u.recv(100)
                m[0:len(d)] = d


def relay_trio(me: str, peer: str, path: str, region: str) -> None:
    """:func:`relay_epoll` with two trio tasks waiting as the NIC daemon's do."""
    import trio

    async def main() -> None:
        m = _region(region)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind((me, PORT))
        u.setblocking(False)
        c = _listen(path)

        async def control(scope: trio.CancelScope) -> None:
            while True:
                try:
                    d = c.recv(100)
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(c)
                    continue
                if not d:
                    scope.cancel()  # the application is done
                    return
                u.sendto(d, (peer, PORT))

        async def receive() -> None:
            while True:
                try:
                    d = u.recv(100)
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(u)
                    continue
                m[0:len(d)] = d

        async with trio.open_nursery() as n:
            n.start_soon(control, n.cancel_scope)
            n.start_soon(receive)

    trio.run(main)


def app(path: str, region: str, role: str, n: int) -> None:
    """Ping-pong as write-lat does: post a byte, spin (``sched_yield``) on memory."""
    m = _region(region)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(200):
        try:
            c.connect(path)
            break
        except OSError:
            time.sleep(0.01)
    samples = []
    for i in range(n):
        want = i % 250 + 1
        if role == "client":
            t = time.perf_counter()
            c.send(bytes([want]))
            while m[0] != want:
                os.sched_yield()
            samples.append((time.perf_counter() - t) * 1e6 / 2)
        else:
            while m[0] != want:
                os.sched_yield()
            c.send(bytes([want]))
    c.close()
    if samples:
        samples.sort()
        print(f"t_min {samples[0]:.1f} us  t_typical {samples[len(samples) // 2]:.1f} us "
              f"({n} iterations)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cluster")
    ap.add_argument("--trio", action="store_true", help="relays wait as trio tasks")
    ap.add_argument("-n", type=int, default=5000)
    a = ap.parse_args(argv)
    me = os.path.abspath(__file__)
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="latfloor") as tmp:
        regions, socks = [], []
        for h in (1, 2):
            r = f"/dev/shm/latfloor-{os.getpid()}-{h}"
            with open(r, "wb") as f:
                f.truncate(4096)
            regions.append(r)
            socks.append(os.path.join(tmp, f"h{h}.sock"))
        addrs = ("10.0.1.11", "10.0.1.12")
        kind = "relay-trio" if a.trio else "relay"
        procs = []
        try:
            for h in (0, 1):
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", f"{a.cluster}-h{h + 1}", py, me, "--role", kind,
                     addrs[h], addrs[1 - h], socks[h], regions[h]]))
            server = subprocess.Popen([py, me, "--role", "server", socks[1], regions[1],
                                       str(a.n)])
            client = subprocess.run([py, me, "--role", "client", socks[0], regions[0],
                                     str(a.n)], check=False)
            server.wait(30)
            return client.returncode
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
            for r in regions:
                os.unlink(r)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--role":
        role, args = sys.argv[2], sys.argv[3:]
        if role == "relay":
            relay_epoll(*args)
        elif role == "relay-trio":
            relay_trio(*args)
        else:
            app(args[0], args[1], role, int(args[2]))
        sys.exit(0)
    sys.exit(main())

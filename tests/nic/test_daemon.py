# SPDX-License-Identifier: GPL-2.0-only
"""NIC daemons in a namespace pair (root), with the stub engine.

In-process daemons (``emu.nic.daemon.running``) where the test needs to control
scheduling (the backlog-overflow test fills the socket before the daemon runs);
a subprocess daemon for SIGTERM, ``emu nicd stats`` and the uid check. Every
cluster is torn down in a finalizer; waits have deadlines only to fail fast.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from fabric_util import host_addr, inside, ns_of_cluster, pair
from rdma_util import write_and_verify_devices

from emu.api import Device, NicError
from emu.fabric import Fabric, down, state
from emu.fabric.naming import random_cluster
from emu.nic.config import NicConfig
from emu.nic.daemon import running
from emu.nic.protocol import sock_path

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


@pytest.fixture
def fab():
    name = random_cluster("n")
    f = Fabric(pair(), cluster=name).up()
    try:
        yield f
    finally:
        down(name)
        assert ns_of_cluster(name) == [] and state.load(name) is None


def _cfg(f: Fabric, host: str, tmp: Path, **kw) -> NicConfig:
    return NicConfig(sock_path=str(tmp / f"{host}.sock"), cluster=f.cluster, host=host,
                     transports=["loopback"], seed=hash(host) & 0xFFFF, **kw)


async def _until(pred, what: str, timeout: float = 15.0) -> None:  # noqa: ANN001
    with trio.move_on_after(timeout):
        while not pred():
            await trio.sleep(0.005)
        return
    raise AssertionError(f"timed out waiting for {what}")


def _connect_pair(d1, d2):  # noqa: ANN001, ANN202
    """A QP on each host, connected through their daemons; returns devices, buffers, MRs."""
    dev1, dev2 = Device.open(sock_path=d1.cfg.sock_path), Device.open(sock_path=d2.cfg.sock_path)
    b1, b2 = dev1.alloc_buffer(1 << 16), dev2.alloc_buffer(1 << 16)
    m1, m2 = dev1.reg_mr(b1), dev2.reg_mr(b2)
    c1, c2 = dev1.create_cq(), dev2.create_cq()
    q1, q2 = dev1.create_qp(c1), dev2.create_qp(c2)
    q1.connect(q2.local_info())
    q2.connect(q1.local_info())
    return (dev1, b1, m1, c1, q1), (dev2, b2, m2, c2, q2)


def _transfer(a, b, tag: bytes) -> None:  # noqa: ANN001
    """SEND + WRITE from a to b; checks bytes in b's registered memory and completions."""
    dev1, b1, m1, c1, q1 = a
    dev2, b2, m2, c2, q2 = b
    b1.view[:len(tag)] = tag
    q2.post_recv(m2.sge(0, 256), wr_id=100)
    q1.post_send(m1.sge(0, len(tag)), wr_id=1)
    q1.post_write(m1.sge(0, len(tag)), m2.va + 1024, m2.rkey, wr_id=2)
    sends = c1.wait(2, timeout=15)
    (recv,) = c2.wait(1, timeout=15)
    assert [w.wr_id for w in sends] == [1, 2] and all(w.ok for w in sends)
    assert recv.wr_id == 100 and recv.byte_len == len(tag)
    assert bytes(b2.view[:len(tag)]) == tag and bytes(b2.view[1024:1024 + len(tag)]) == tag


def _close(*sides) -> None:  # noqa: ANN002
    for dev, buf, *_ in sides:
        dev.close()
        buf.close()


@pytest.mark.trio
async def test_two_daemons_exchange_datagrams(fab, tmp_path):
    async with running(_cfg(fab, "h1", tmp_path), fab.ns("h1")) as d1, \
            running(_cfg(fab, "h2", tmp_path), fab.ns("h2")) as d2:
        addrs = d1.device_info()["ports"][0]["addresses"]
        assert host_addr(pair(), "h1", 4) in addrs and host_addr(pair(), "h1", 6) in addrs
        # two sockets per daemon (IPv4 + IPv6) on the transport's port
        assert {s["address"] for s in d2.device_info()["transports"]["loopback"]["sockets"]} \
            == {host_addr(pair(), "h2", 4), host_addr(pair(), "h2", 6)}

        def work() -> None:
            a, b = _connect_pair(d1, d2)
            try:
                _transfer(a, b, b"across the veth")
            finally:
                _close(a, b)

        await trio.to_thread.run_sync(work)
        s1, s2 = d1.stats(), d2.stats()
        assert s1["totals"]["tx_packets"] >= 2 and s2["totals"]["rx_packets"] >= 2
        assert s2["transports"]["loopback"]["engine"]["rx"] >= 2
        assert s1["totals"]["tx_errors"] == 0 and s2["totals"]["rx_backlog_drops"] == 0


@pytest.mark.trio
async def test_a_socket_in_someone_elses_directory_leaves_that_directory_alone(fab, tmp_path):
    """``emu nicd run --sock /tmp/x.sock`` made /tmp itself 0700 (and would remove an empty
    directory it found): only a directory the daemon made, or emu's own run tree, is made
    private and removed; the socket is private wherever it is."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    mine = tmp_path / "made-here"
    cfg1 = _cfg(fab, "h1", shared)
    cfg2 = NicConfig(sock_path=str(mine / "h2.sock"), cluster=fab.cluster, host="h2",
                     transports=["loopback"])
    async with running(cfg1, fab.ns("h1")), running(cfg2, fab.ns("h2")):
        assert shared.stat().st_mode & 0o777 == 0o755
        assert os.stat(cfg1.sock_path).st_mode & 0o777 == 0o600
        assert mine.stat().st_mode & 0o777 == 0o700
    assert shared.is_dir() and shared.stat().st_mode & 0o777 == 0o755  # empty, still there
    assert not mine.exists()  # the daemon's own directory goes with its last socket


@pytest.mark.trio
async def test_receive_backlog_overflow_drops_and_counts(fab, tmp_path):
    async with running(_cfg(fab, "h2", tmp_path, rx_backlog=8, rx_batch=64), fab.ns("h2")) as d:
        with inside(fab, "h1"):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with s:
            # sent without yielding to trio: all 200 wait in the socket, and the daemon's
            # first drain reads 64 of them into a backlog of 8
            for _ in range(200):
                s.sendto(b"not a loopback packet", (host_addr(pair(), "h2", 4), 4791))
        c = d.slots["loopback"].c
        await _until(lambda: c["rx_packets"] + c["rx_kernel_drops"] >= 200, "200 datagrams")
        eng = d.slots["loopback"].engine.counters()
        assert c["rx_packets"] == 200
        assert c["rx_backlog_drops"] >= 64 - 8
        assert eng["malformed"] == 200 - c["rx_backlog_drops"]  # every survivor reached it


@pytest.mark.trio
async def test_random_datagrams_are_counted_and_the_daemon_keeps_serving(fab, tmp_path):
    async with running(_cfg(fab, "h1", tmp_path), fab.ns("h1")) as d1, \
            running(_cfg(fab, "h2", tmp_path), fab.ns("h2")) as d2:
        with inside(fab, "h1"):
            s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rng = random.Random(5)
        dst = (host_addr(pair(), "h2", 4), 4791)

        def flood() -> None:
            with s4:
                for _ in range(10_000):
                    s4.sendto(rng.randbytes(rng.randrange(0, 1400)), dst)

        await trio.to_thread.run_sync(flood)

        def work() -> None:
            a, b = _connect_pair(d1, d2)
            try:
                _transfer(a, b, b"still serving")
            finally:
                _close(a, b)

        await trio.to_thread.run_sync(work)  # also makes the kernel report its drops
        slot = d2.slots["loopback"]
        c, eng = slot.c, slot.engine.counters()
        assert c["rx_packets"] + c["rx_kernel_drops"] >= 10_000
        processed = c["rx_packets"] - c["rx_backlog_drops"]
        assert eng["malformed"] + eng["unknown_qp"] + eng["rx"] == processed
        assert eng["malformed"] + eng["unknown_qp"] >= processed - 10  # the rest: the transfer
        assert c["engine_errors"] == 0


# -- the daemon as a process ------------------------------------------------------------


@pytest.fixture
def daemon_proc(fab):
    """``python -m emu.nic.daemon`` in h1 (stub engine); yields (fabric, Popen, socket path)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "emu.nic.daemon", "--cluster", fab.cluster,
                          "--host", "h1", "--transport", "loopback"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        line = p.stdout.readline()
        assert line.startswith("ready "), p.stderr.read()
        assert json.loads(line[6:])["transports"] == ["loopback"]
        yield fab, p, sock_path(fab.cluster, "h1")
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)  # lets it remove its socket and directory
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        p.wait()
        p.stdout.close()
        p.stderr.close()


def _emu(*args: str, ns: str | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "emu", *args]
    if ns:
        argv = ["nsenter", f"--net=/run/netns/{ns}", "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_stats_json_then_sigterm_drains_and_exits_0(daemon_proc):
    fab, p, path = daemon_proc
    assert (os.stat(os.path.dirname(path)).st_mode & 0o777) == 0o700
    assert (os.stat(path).st_mode & 0o777) == 0o600
    r = _emu("nicd", "stats", "--cluster", fab.cluster, "--host", "h1", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["host"] == "h1" and s["pid"] == p.pid
    assert {"rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_backlog_drops",
            "tx_backlog_drops", "rx_kernel_drops"} <= set(s["totals"])
    assert {"clients", "qps", "refused", "events_dropped"} <= set(s["control"])
    assert "malformed" in s["transports"]["loopback"]["engine"]
    # the interpreter's own pauses, timed from the daemon's start (emu.nic.gcwatch)
    assert len(s["gc"]["collections"]) == 3 and s["gc"]["threshold"]
    # inside the host namespace the daemon is found without naming it
    r = _emu("nicd", "stats", ns=fab.ns("h1"))
    assert r.returncode == 0 and "nicd " in r.stdout and "h1" in r.stdout, r.stderr

    dev = Device.open(cluster=fab.cluster, host="h1")
    buf = dev.alloc_buffer(4096)
    try:
        dev.reg_mr(buf)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while dev.conn.closed_reason is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert any(e.get("event") == "shutdown" for e in dev.events)
        with pytest.raises(NicError):
            dev.create_cq()
    finally:
        dev.close()
        buf.close()
    assert not os.path.exists(path)


_CHILD = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("EACCES"); sys.exit(0)
s.sendall(b'{"id":1,"op":"stats"}\\n')
s.settimeout(10)
data = b""
while not data.endswith(b"\\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print(json.loads(data).get("event") if data else "closed")
"""


def _world_executable(path: str) -> bool:
    """uid 65534 can run ``path``: it and every directory above it are o+x."""
    p = os.path.realpath(path)
    while True:
        if not os.stat(p).st_mode & 0o001:
            return False
        if p == "/":
            return True
        p = os.path.dirname(p)


def test_non_root_cannot_use_the_control_socket(daemon_proc):
    fab, p, path = daemon_proc

    # the child needs only the standard library: any interpreter uid 65534 may execute
    py = next((c for c in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable)
               if os.access(c, os.X_OK) and _world_executable(c)), None)
    if py is None:
        pytest.skip("no Python interpreter that uid 65534 may run")

    def as_nobody() -> str:
        r = subprocess.run([py, "-c", _CHILD, path], capture_output=True, text=True,
                           timeout=30, cwd="/", preexec_fn=lambda: os.setuid(65534))  # noqa: PLW1509
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert as_nobody() == "EACCES"  # 0700 directory, 0600 socket
    os.chmod(os.path.dirname(path), 0o755)  # open the filesystem door: SO_PEERCRED still says no
    os.chmod(path, 0o666)
    assert as_nobody() == "refused"
    r = _emu("nicd", "stats", "--sock", path, "--json")
    s = json.loads(r.stdout)
    assert s["control"]["refused"] == 1 and s["control"]["clients_total"] == 1
    assert p.poll() is None


@pytest.mark.trio
async def test_roce_engine_through_the_daemons_write_exact_icrc_valid(fab, tmp_path):
    """The real RoCE engine (if present) behind the same plumbing: a 1 MiB WRITE arrives
    byte-exact, and every RoCE packet captured on h2's link carries a valid ICRC (IPv4:
    unconnected socket with DF, ICRC sealed over the headers the kernel writes)."""
    pytest.importorskip("emu.transports.roce.engine")
    from emu.wire.icrc import verify_icrc

    with inside(fab, "h2"):
        cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    cap.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    cap.bind(("eth0", 0))
    cap.setblocking(False)
    cfg = {h: NicConfig(sock_path=str(tmp_path / f"{h}.sock"), transports=["roce"], seed=i)
           for i, h in enumerate(("h1", "h2"))}
    n = 1 << 20
    with cap:
        async with running(cfg["h1"], fab.ns("h1")) as d1, \
                running(cfg["h2"], fab.ns("h2")) as d2:
            def work() -> None:
                write_and_verify_devices(Device.open(sock_path=d1.cfg.sock_path),
                                         Device.open(sock_path=d2.cfg.sock_path), n, 1,
                                         wr_id=1, timeout=30)

            await trio.to_thread.run_sync(work)
            assert d2.stats()["totals"]["rx_bad_icrc"] == 0
        frames = []
        while True:
            try:
                frames.append(cap.recv(70000))
            except BlockingIOError:
                break
    roce = [fr[14:] for fr in frames
            if fr[12:14] == b"\x08\x00" and fr[23] == 17 and fr[36:38] == b"\x12\xb7"]
    assert roce and all(verify_icrc(p) for p in roce)
    assert all(p[4:6] == b"\0\0" and p[6] & 0x40 for p in roce)  # IP ID 0, DF

# SPDX-License-Identifier: GPL-2.0-only
"""The switch daemon on a real cluster (root): 4 senders → 1 receiver over a slow leaf port;
and its control requests alone (no namespace, no root).

Traffic is plain UDP built with emu's RoCE codec (no transport daemon). The
receiver's link is captured; the capture is compared with the daemon's
counters. No wall-clock thresholds: waits have deadlines only to fail fast.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fabric_util import control_request, fabric_up, host_addr, inside, leaf_spine

from emu.fabric import Fabric
from emu.fabric.capture import Target, capture
from emu.fabric.linkctl import run_in_ns
from emu.switch import trim as T
from emu.switch.config import SwitchConfig
from emu.switch.daemon import SwitchDaemon
from emu.switch.pfc import PauseListener
from emu.wire import icrc
from emu.wire.codec import roce as RC
from emu.wire.pcapio import read_frames

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")

KMIN, KMAX = 20_000, 80_000
PAYLOAD = 1000
DATA_DSCP, LOSSLESS_DSCP, TRIMMED_LASTHOP = 0, 24, 31
N_PER_SENDER = 150
OTHER_PORT = 5000


@pytest.fixture
def cluster():  # used by root tests only
    with fabric_up(leaf_spine(spines=1, leaves=2, hosts_per_leaf=3), "t") as f:
        yield f


class Daemon:
    def __init__(self, f: Fabric, node: str, cfg: dict, tmp: Path) -> None:
        self.ns = f.ns(node)
        self.dir = tmp / "state"
        (tmp / "cfg.json").write_text(json.dumps(cfg))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "emu.switch.daemon", "--netns", self.ns, "--state-dir",
             str(self.dir), "--config", str(tmp / "cfg.json")],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
        self.ready = self.proc.stdout.readline().strip()
        assert self.ready.startswith("ready datapath="), self.ready

    def request(self, req: dict) -> dict:
        return control_request(self.dir / "control.sock", req)

    def wait_idle(self, port: str, timeout: float = 20) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            c = self.request({"cmd": "counters"})["ports"].get(port)
            if c and c["depth"] == 0 and c["released"] + c["dropped_tail"] + c[
                    "dropped_random"] + c["dropped_trim"] >= c["enqueued"]:
                time.sleep(0.2)
                return self.request({"cmd": "counters"})
            time.sleep(0.05)
        raise AssertionError("switch queue did not drain")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(30)


def roce_write(psn: int) -> bytes:
    return bytes(RC.encode_packet(RC.BTH(opcode=0x0A, dqpn=0x42, psn=psn),
                                  [RC.RETH(va=0x1000 * psn, rkey=7, dmalen=PAYLOAD)],
                                  bytes(PAYLOAD)))


def udp_socket(f: Fabric, host: str, tos: int, sport: int) -> socket.socket:
    with inside(f, host):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    s.setsockopt(socket.IPPROTO_IP, 10, 2)             # IP_MTU_DISCOVER = DO (DF, RoCE)
    s.bind(("", sport))
    return s


@needs_root
@pytest.mark.parametrize("datapath", ["user", "kernel"])
def test_switch_daemon(cluster: Fabric, tmp_path: Path, datapath: str) -> None:
    f, t = cluster, cluster.topology
    rx_host, senders = "h3", ["h1", "h2", "h4", "h5"]
    dst = host_addr(t, rx_host, 4)
    cfg = {"ports": {rx_host: {
        "rate": "20mbit", "depth": "400KB", "host_facing": True,
        "default_class": {"kmin": KMIN, "kmax": KMAX, "pmax": 0.2, "trim": True,
                          "trim_threshold": "150KB"},
        "classes": {"3": {"ecn": False, "lossless": True, "xoff": "30KB", "xon": "10KB"}}}},
        "trimmed_lasthop": TRIMMED_LASTHOP, "seed": 5, "datapath": datapath}
    d = Daemon(f, "leaf1", cfg, tmp_path)
    # both datapaths mark, trim and pause (the kernel one's PFC by its agent's polls)
    assert d.ready == f"ready datapath={datapath}"
    from emu.cpu import rt_throttled

    c0 = d.request({"cmd": "counters"})
    if rt_throttled():  # released at departure times: real-time, as the NIC daemons
        assert c0["sched"] == "fifo 1"
    assert c0["counter_files"]["written"] >= 1 and c0["counter_files"]["errors"] == 0
    stop = threading.Event()
    ready = threading.Event()
    pcap = tmp_path / "rx.pcapng"
    cap = threading.Thread(target=capture, args=([Target(f.ns(rx_host), "eth0", "rx")], str(pcap)),
                           kwargs={"stop": stop, "on_ready": ready.set, "handle_signals": False})
    cap.start()
    try:
        assert ready.wait(10)
        rep = d.request({"cmd": "set", "port": rx_host, "settings": {"kmin": "20KB"}})
        assert rep["ok"] and rep["config"]["default_class"]["kmin"] == KMIN
        assert not d.request({"cmd": "set", "port": rx_host, "settings": {"kmin": "x"}})["ok"]

        # ---- phase 1: congestion on class 0 (ECN, trimming), plus non-transport UDP
        socks = [udp_socket(f, h, (DATA_DSCP << 2) | 2, 20000 + i) for i, h in enumerate(senders)]
        for psn in range(N_PER_SENDER):
            for s in socks:
                s.sendto(roce_write(psn), (dst, 4791))
            if psn % 10 == 0:
                socks[0].sendto(b"not transport" * 50, (dst, OTHER_PORT))
        counters = d.wait_idle(rx_host)
        # ---- phase 2: lossless class 3 from h1 pauses h1 (PFC out of leaf1's port "h1")
        listener = PauseListener("eth0", ns=f.ns("h1"))
        ls = udp_socket(f, "h1", (LOSSLESS_DSCP << 2) | 2, 21000)
        waited = sent = 0

        def send_honouring_pause(n: int) -> None:
            nonlocal waited, sent
            for _ in range(n):
                listener.poll()
                if listener.paused(3):          # hold until XON (or the pause expires)
                    waited += 1
                    assert listener.wait_until_resumed(3, timeout=10)
                ls.sendto(roce_write(sent), (dst, 4791))
                sent += 1

        # 128 KB at once: the class-3 queue passes XOFF (30 KB) and stays above it for
        # ~40 ms of its 20 Mbit/s port, longer than the kernel PFC agent's slowest poll
        # (20 ms: emu.switch.kernel_pfc.POLL_MAX); 64 KB stayed above it ~14 ms, and
        # one run in three polled before and after
        send_honouring_pause(120)
        deadline = time.monotonic() + 10
        while not waited and time.monotonic() < deadline:
            listener.poll()
            if listener.paused(3):              # the XOFF may arrive after the burst
                waited += 1
                assert listener.wait_until_resumed(3, timeout=10)
            time.sleep(0.001)
        send_honouring_pause(20)
        deadline = time.monotonic() + 10
        while listener.xon == 0 and time.monotonic() < deadline:
            listener.poll()
            time.sleep(0.01)
        counters = d.wait_idle(rx_host)
    finally:
        time.sleep(0.3)
        stop.set()
        cap.join(20)
        rc = d.stop()
    assert rc == 0
    rules = run_in_ns(f.ns("leaf1"), ["iptables", "-S"]).stdout
    assert "EMU_SW" not in rules and "NFQUEUE" not in rules
    for s in socks:
        s.close()

    port = counters["ports"][rx_host]
    assert counters["switch"]["malformed"] == 0

    # ---- what the capture shows
    data, trimmed, lossless, other = [], [], [], []
    for fr in read_frames(str(pcap)):
        raw = bytes(fr.data)
        if len(raw) < 34 or raw[12:14] != b"\x08\x00":
            continue
        ip = raw[14:14 + int.from_bytes(raw[16:18], "big")]
        if ip[9] != 17:
            continue
        dport = int.from_bytes(ip[22:24], "big")
        dscp, ecn = ip[1] >> 2, ip[1] & 3
        if dport == OTHER_PORT:
            other.append((dscp, ecn, len(ip)))
        elif dport == 4791:
            (trimmed if dscp == TRIMMED_LASTHOP else
             lossless if dscp == LOSSLESS_DSCP else data).append((dscp, ecn, ip))
    # non-transport traffic: never queued, marked or trimmed
    assert len(other) == N_PER_SENDER // 10
    assert all(o == (DATA_DSCP, 2, 20 + 8 + 13 * 50) for o in other)
    # every transport packet the switch took in came out (no drops configured to happen)
    assert port["dropped_tail"] == port["dropped_random"] == port["dropped_trim"] == 0
    assert len(data) + len(trimmed) + len(lossless) == port["enqueued"] == \
        len(senders) * N_PER_SENDER + sent
    # counters equal the capture
    ce = [e for _, e, _ in data + trimmed + lossless if e == 3]
    assert len(ce) == port["marked"] > 0
    assert len(trimmed) == port["trimmed"] > 0
    # CE only once the class-0 queue passed Kmin: data leaves in arrival order, so the
    # first KMIN // size data packets arrived to a queue below Kmin
    size = len(data[0][2])
    assert all(e != 3 for _, e, _ in data[:KMIN // size])
    assert not any(e == 3 for _, e, _ in lossless)           # ecn off for class 3
    # trimmed packets: configured DSCP, headers intact, lengths and ICRC valid
    hdr = 20 + 8 + 12 + 16 + 4
    for _dscp, ecn, ip in trimmed:
        assert len(ip) == hdr and ecn == 2
        rp = RC.decode_packet(ip[28:])
        assert rp.bth.opcode == 0x0A and rp.header(RC.RETH).dmalen == PAYLOAD
        assert len(rp.payload) == 0 and icrc.verify_icrc(ip)
        assert T.parse(ip).end == len(ip)
    # pause: XOFF then XON for priority 3 reached h1, and h1 waited
    assert listener.xoff >= 1 and listener.xon >= 1
    prios = [(p, q > 0) for _, p, q in listener.log]
    assert prios[0] == (3, True) and (3, False) in prios
    assert waited >= 1
    assert port["xoff"] >= 1 and port["xon"] >= 1 and port["paused_time"] > 0
    assert counters["switch"]["pfc_frames"] >= 2
    # the time series a plot reads
    series = [json.loads(line) for line in (d.dir / "series.jsonl").read_text().splitlines()]
    assert series and {"t", "port", "depth", "marked", "trimmed"} <= set(series[-1])
    listener.close()
    ls.close()


# ---- control requests, without a namespace: `set` names real ports only

PORTS = ("h1", "h2", "spine1", "spine2")


def _daemon(tmp_path: Path) -> SwitchDaemon:
    """A daemon as `emu up` configures one (a port per link, from the topology), not run."""
    cfg = SwitchConfig.from_dict({"ports": {p: {"rate": "10gbit"} for p in PORTS}})
    d = SwitchDaemon(cfg, tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    return d


@pytest.mark.parametrize("port,error", [
    ("h9", "no port 'h9' on this switch (its ports: h1, h2, spine1, spine2)"),
    ("zz*", "'zz*' matches no port on this switch (its ports: h1, h2, spine1, spine2)"),
])
def test_set_refuses_a_port_the_switch_does_not_have(tmp_path: Path, port: str,
                                                    error: str) -> None:
    d = _daemon(tmp_path)
    before = (tmp_path / "config.json").read_text()
    rep = d.handle({"cmd": "set", "port": port, "settings": {"rate": "1gbit"}}, 0.0)
    assert rep == {"ok": False, "error": error}
    # nothing stored under the name, in memory or in the live config file
    assert list(d.handle({"cmd": "config"}, 0.0)["config"]["ports"]) == list(PORTS)
    assert (tmp_path / "config.json").read_text() == before


def test_set_with_a_wildcard_changes_the_matching_ports_and_stores_no_wildcard(
        tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    rep = d.handle({"cmd": "set", "port": "spine*", "settings": {"rate": "1gbit"}}, 0.0)
    assert rep["ok"] and list(rep["ports"]) == ["spine1", "spine2"]
    rep = d.handle({"cmd": "set", "port": "*", "settings": {"kmin": "10KB"}}, 0.0)
    assert rep["ok"] and list(rep["ports"]) == list(PORTS)
    ports = d.handle({"cmd": "config"}, 0.0)["config"]["ports"]
    assert list(ports) == list(PORTS)  # no port named '*' or 'spine*'
    assert [ports[p]["rate"] for p in PORTS] == [10**10, 10**10, 10**9, 10**9]
    assert all(ports[p]["default_class"]["kmin"] == 10_000 for p in PORTS)
    on_file = json.loads((tmp_path / "config.json").read_text())["ports"]
    assert list(on_file) == list(PORTS)


def test_set_of_one_port_replies_with_its_config(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    rep = d.handle({"cmd": "set", "port": "h1", "settings": {"rate": "1gbit"}}, 0.0)
    assert rep["ok"] and rep["config"]["rate"] == 10**9 and list(rep["ports"]) == ["h1"]

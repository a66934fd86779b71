# SPDX-License-Identifier: GPL-2.0-only
"""NIC daemons by worker process (``[nic] workers``, ``emu nicd serve``): one process
serves several hosts, and per host nothing visible changes — its control socket, its
counters, its memory regions and QPs — while ``emu down`` still removes everything.
(root: namespaces)"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import pytest
from fabric_util import REAL_TIME, ROOT, emu_cli, ns_of_cluster
from rdma_util import write_and_verify

from emu.api import Device
from emu.fabric import naming, state
from emu.nic.protocol import call_once, sock_path

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


ADDR = {"h1": "10.0.1.11", "h2": "10.0.1.12", "h3": "10.0.2.11", "h4": "10.0.2.12"}


def _nicd_pids(name: str) -> dict[str, int]:
    st = state.load(name)
    assert st is not None
    return {p["what"].split()[1]: p["pid"] for p in st["pids"]
            if p.get("what", "").startswith("nicd ")}


def test_one_worker_serves_every_host_each_as_its_own_nic():
    name = naming.random_cluster("wk")
    try:
        up = emu_cli("up", "namespaces/leaf-spine.toml", "--name", name, *REAL_TIME,
                     "--set", "nic.workers=1")
        assert "started 4 NIC daemon(s) in 1 process(es)" in up.stderr, up.stderr
        pids = _nicd_pids(name)
        assert set(pids) == {"h1", "h2", "h3", "h4"} and len(set(pids.values())) == 1
        # each host answers on its own socket, as itself, and says whose process it is
        for h in pids:
            s = call_once(sock_path(name, h), "stats")
            assert s["host"] == h and s["pid"] == pids[h]
            assert s["worker"] == {"pid": pids[h], "hosts": ["h1", "h2", "h3", "h4"]}
            # its own ports and addresses (the sockets were made in its namespace)
            dev = call_once(sock_path(name, h), "query_device")
            assert [p["ifname"] for p in dev["ports"]] == ["eth0"]
            assert dev["ports"][0]["addresses"][0] == ADDR[h], dev
        # data between hosts of the one process, in one leaf and across the spines
        write_and_verify(name, "h1", "h2", 256 << 10, 1, timeout=60)
        write_and_verify(name, "h4", "h1", 256 << 10, 2, timeout=60)

        # memory regions stay the host's: h2 does not know a key h1 handed out
        a, b = Device.open(cluster=name, host="h1"), Device.open(cluster=name, host="h2")
        try:
            buf = a.alloc_buffer(4096)
            mr = a.reg_mr(buf)
            ca, cb = a.create_cq(), b.create_cq()
            qa, qb = a.create_qp(ca), b.create_qp(cb)
            qa.connect(qb.local_info())
            qb.connect(qa.local_info())
            buf.view[:] = random.Random(3).randbytes(4096)
            qa.post_write(mr.sge(0, 4096), mr.va, mr.rkey, wr_id=9)  # h1's key, sent to h2
            wc = ca.wait(1, timeout=60)[0]
            assert not wc.ok and wc.wr_id == 9, wc
            assert call_once(sock_path(name, "h2"), "stats")["memory"]["regions"] == 0
            assert call_once(sock_path(name, "h1"), "stats")["memory"]["regions"] >= 1
            buf.close()
        finally:
            a.close()
            b.close()
    finally:
        if state.load(name) is not None:
            emu_cli("down", name, check=False)
    assert state.load(name) is None and ns_of_cluster(name) == []
    assert not os.path.exists(f"/run/emu/nic/{name}")
    for pid in set(pids.values()):
        assert not os.path.exists(f"/proc/{pid}") or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_the_default_is_a_worker_per_core_and_a_dead_worker_is_each_hosts_death():
    """leaf-spine, 4 hosts: one worker per core (2 here, round robin); ``kill -9`` of one
    worker: ``emu status`` names both of its hosts dead, the others alive."""
    cores = len(os.sched_getaffinity(0))
    name = naming.random_cluster("wk")
    try:
        emu_cli("up", "namespaces/leaf-spine.toml", "--name", name, *REAL_TIME)
        pids = _nicd_pids(name)
        n = min(cores, 4)
        assert len(set(pids.values())) == n
        if n == 4:
            pytest.skip("a process per host on this machine (4+ cores)")
        by_pid: dict[int, list[str]] = {}
        for h, pid in sorted(pids.items()):
            by_pid.setdefault(pid, []).append(h)
        if n == 2:  # round robin in host order
            assert sorted(by_pid.values()) == [["h1", "h3"], ["h2", "h4"]]
        victim, hosts = next(iter(by_pid.items()))
        os.kill(victim, 9)
        for _ in range(200):  # until it is gone (its parent, emu up, has exited: init reaps)
            if not os.path.exists(f"/proc/{victim}"):
                break
            time.sleep(0.01)
        st = json.loads(emu_cli("status", name, "--json", check=False).stdout)
        dead = {d["what"] for d in st["pids"] if not d["alive"]}
        assert dead == {f"nicd {h}" for h in hosts}, st["pids"]
    finally:
        if state.load(name) is not None:
            emu_cli("down", name, check=False)
    assert state.load(name) is None and ns_of_cluster(name) == []


def test_a_worker_that_cannot_open_a_host_names_it_and_exits_1(tmp_path):
    """A host whose namespace does not exist: the worker opens none, says which host, and
    exits 1 (``emu up`` then shows its log's tail)."""
    import subprocess

    f = tmp_path / "hosts.json"
    f.write_text(json.dumps({"cluster": "", "hosts": {
        "hx": ["--sock", str(tmp_path / "hx.sock"), "--netns", "emu-no-such-ns-3f1c"]}}))
    p = subprocess.run([sys.executable, "-m", "emu.nic.worker", str(f)], capture_output=True,
                       text=True, cwd=ROOT, timeout=60, env={**os.environ,
                                                            "PYTHONPATH": str(ROOT)})
    assert p.returncode == 1 and p.stdout == ""
    assert "host hx" in p.stderr and "emu-no-such-ns-3f1c" in p.stderr, p.stderr
    assert not (tmp_path / "hx.sock").exists()

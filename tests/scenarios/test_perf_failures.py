# SPDX-License-Identifier: GPL-2.0-only
"""``emu perf`` when it cannot run, end to end on pair clusters (root): what a user sees.

A server address that is no address or has no route fails at once (it was retried for
the whole --timeout); a NIC daemon killed with ``kill -9`` is named as not running, with
its pid, by ``emu perf`` and ``emu nicd stats`` (they quoted "[Errno 111] Connection
refused"); with ``--json`` every such error is a JSON document on stdout. The only clock
here is the subprocess timeout, far below the 60 s the retries took.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from fabric_util import ROOT, emu_cli, pair_cluster

from emu import proc
from emu.fabric import state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")
PY = [sys.executable, "-m", "emu"]


@pytest.fixture(scope="module")
def cluster():
    with pair_cluster("fc") as name:
        yield name


def _in(cluster: str, host: str, *argv: str, timeout: float = 30
        ) -> subprocess.CompletedProcess:
    """``emu exec CLUSTER:HOST -- emu ARGV``; TimeoutExpired if it keeps retrying."""
    return emu_cli("exec", f"{cluster}:{host}", "--", *PY, *argv, check=False,
                   timeout=timeout)


@pytest.mark.parametrize("addr, why", [
    ("10.0.9.9", "this host has no route to 10.0.9.9 (Network is unreachable)"),
    ("10.0.1.300", "'10.0.1.300' is not an IPv4 or IPv6 address"),
])
def test_a_server_address_waiting_cannot_mend_fails_at_once(cluster, addr, why):
    """The default --timeout is 60 s; the run must be over long before (30 s here)."""
    p = _in(cluster, "h1", "perf", "write-bw", addr, "-n", "5")
    assert p.returncode == 2
    said = f"cannot reach the server {addr} port 18515: {why}"
    assert p.stderr == f"emu perf write-bw (client): {said}\n"
    p = _in(cluster, "h1", "perf", "write-bw", addr, "-n", "5", "--json")
    assert p.returncode == 2 and json.loads(p.stdout)["errors"] == [said]


def test_a_server_that_fails_is_the_json_answer(cluster):
    """The server fails after the checks (its side-channel port is taken): the client we
    stop would have answered "interrupted"; ``--json`` answers with the server's error."""
    holder = subprocess.Popen(
        ["ip", "netns", "exec", f"{cluster}-h2", sys.executable, "-c",
         "import socket, time\ns = socket.socket(socket.AF_INET6)\n"
         "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
         "s.bind(('::', 18613)); s.listen(); print('ok', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ok\n"
        p = emu_cli("perf", "write-bw", "--from", "h1", "--to", "h2", "-c", cluster, "-n", "5",
                    "-p", "18613", "--json", check=False, timeout=60)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    said = ("the server on h2 failed (exit status 2): cannot listen on port 18613: Address "
            "already in use (another server on this host holds it? -p chooses another)")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert json.loads(p.stdout) == {"test": "write-bw", "role": None, "error": said,
                                    "errors": [said], "passed": False, "exit_status": 2}
    assert p.stderr.endswith(f"emu perf: {said}\n")


def test_a_killed_nic_daemon_is_named_as_not_running():
    """``kill -9`` of nicd h2 (``emu status``: degraded, "nicd h2 (pid …) dead"). Its own
    cluster: the daemon stays dead."""
    with pair_cluster("fc") as name:
        [rec] = [p for p in state.load(name)["pids"] if p["what"] == "nicd h2"]
        os.kill(rec["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while proc.alive(rec["pid"], rec["start"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        said = (f"nicd h2 of cluster {name} is not running (pid {rec['pid']} exited); "
                f"see `emu status {name}`")
        p = emu_cli("perf", "write-bw", "--from", "h1", "--to", "h2", "-c", name, "-n", "5",
                    check=False, timeout=60)
        assert (p.returncode, p.stdout, p.stderr) == (2, "", f"emu perf: {said}\n")
        p = emu_cli("perf", "write-bw", "--from", "h1", "--to", "h2", "-c", name, "-n", "5",
                    "--json", check=False, timeout=60)
        assert p.returncode == 2 and json.loads(p.stdout)["error"] == said
        p = emu_cli("nicd", "stats", f"{name}:h2", check=False)
        assert (p.returncode, p.stdout) == (1, f"{said}\n")
        # the two-command mode: the server on h2 says the same, at once
        p = _in(name, "h2", "perf", "write-bw")
        assert (p.returncode, p.stderr) == (2, f"emu perf write-bw (server): {said}\n")


def test_a_nic_daemon_killed_mid_run_is_named():
    """``kill -9`` of nicd h2 while a write-bw runs: the server's connection to it ends,
    and what the run says names the dead daemon and its pid (it said "NIC daemon
    connection lost: daemon closed the connection", as if the daemon had hung up)."""
    from emu.api import Device
    from emu.fabric.status import interfaces

    with pair_cluster("fc") as name:
        [rec] = [p for p in state.load(name)["pids"] if p["what"] == "nicd h2"]
        app = Device.open(cluster=name, host="h2")  # an application of h2's, idle meanwhile
        run = subprocess.Popen([*PY, "perf", "write-bw", "--from", "h1", "--to", "h2", "-c",
                                name, "-D", "30", "-s", "65536"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            deadline = time.monotonic() + 60
            while interfaces(f"{name}-h2")["eth0"]["rx_bytes"] < 1 << 20:
                assert run.poll() is None and time.monotonic() < deadline, run.communicate()
                time.sleep(0.05)
            os.kill(rec["pid"], signal.SIGKILL)
            out, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
        assert run.returncode != 0 and "Traceback" not in err, err
        said = (f"nicd h2 of cluster {name} is not running (pid {rec['pid']} exited); "
                f"see `emu status {name}`")
        assert said in err, err
        # the API says it too, to any application whose daemon died under it
        deadline = time.monotonic() + 10
        while app.conn.closed_reason is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert app.conn.closed_reason == f"daemon closed the connection: {said}"
        app.close()

# SPDX-License-Identifier: GPL-2.0-only
"""A trimmed RoCEv2 packet is a loss, end to end (root): switch pipeline → DSCP → discard.

Issue #12, item 4 and its acceptance: one trimmed RoCEv2 packet used to kill
the QP (``REM_INV_REQ_ERR``: the responder took the cut WRITE_MIDDLE for a
malformed request). ``emu.cluster.up`` — what ``emu up`` runs — builds one
leaf with three hosts: the senders' ports run at 1 Gbit/s (so their NICs'
line rate is 1 Gbit/s), the receiver's at 100 Mbit/s with ECN marking (the
pipeline's default Kmin/Kmax) and trimming above 100 KB, as a deployment
that trims would configure it: DCQCN slows the senders on the marks, the
trims catch the burst that comes before the first CNP can act. Two senders
each WRITE 1 MiB to the receiver at once: 20:1 at the start, so trims are
certain whatever the machine's speed. Both WRITEs must complete byte-exact,
the receiver's engine must have counted ``trimmed_discarded`` (visible in
``emu nicd stats``), and no QP may fail.

(Trimming *below* the marking threshold, with no congestion control acting
first, keeps go-back-N in a trim–NAK–rewind loop until its retries run out
— RoCEv2 does that on a real lossy fabric too; that is not what a trimming
deployment runs.)

No wall-clock thresholds: timeouts only make failures fast.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from fabric_util import ns_of_cluster
from rdma_util import write_and_verify

from emu.cluster import cluster as C
from emu.fabric import state
from emu.fabric.naming import random_cluster
from emu.nic.protocol import call_once, sock_path
from emu.topology import loader

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")

MiB = 1 << 20
RX, SENDERS = "h3", ("h1", "h2")

TOPOLOGY = """
[topology]
kind = "leaf-spine"
name = "{name}"
[params]
spines = 1
leaves = 1
hosts_per_leaf = 3
[defaults.link]
mtu = 9000
[switch]
seed = 3
[[switch.override]]
node = "leaf1"
port = "h*"
rate = "1gbit"
[[switch.override]]
node = "leaf1"
port = "{rx}"
rate = "100mbit"
depth = "2MB"
trim = true
trim_threshold = "100KB"
"""


@pytest.fixture
def cluster(tmp_path: Path):
    name = random_cluster("gb")
    path = tmp_path / "trim.toml"
    path.write_text(TOPOLOGY.format(name=name, rx=RX))
    topo = loader.load(path)
    f = None
    try:
        f = C.up(topo, name, schedule=False, progress=lambda m: None)
        yield f
    finally:
        if state.load(name) is not None:
            C.down(name)
        for h in (*SENDERS, RX):
            Path(C.trace_path(name, h)).with_name(f"{name}.nicd-{h}.log").unlink(
                missing_ok=True)
        Path(C.event_log(name)).unlink(missing_ok=True)
        assert ns_of_cluster(name) == [] and state.load(name) is None


def roce(name: str, host: str) -> dict:
    return call_once(sock_path(name, host), "stats")["transports"]["roce"]


def test_trimmed_roce_packets_are_losses_and_writes_complete_exact(cluster):
    name = cluster.cluster
    errors: list[BaseException] = []

    def write(src: str, seed: int) -> None:
        try:
            write_and_verify(name, src, RX, MiB, seed, timeout=240)  # byte-exact or raises
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)

    threads = [threading.Thread(target=write, args=(s, i)) for i, s in enumerate(SENDERS, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a WRITE did not finish"
    assert not errors, errors[0]

    port = C.switch_request(name, "leaf1", {"cmd": "counters"})["ports"][RX]
    assert port["trimmed"] > 0, port
    rx = roce(name, RX)
    assert rx["counters"]["rx_trimmed"] > 0  # the daemon saw the trimmed DSCP
    eng = rx["engine"]
    assert eng["trimmed_discarded"] > 0, eng
    assert eng.get("tx_error_naks", 0) == 0 and eng.get("tx_seq_naks", 0) > 0
    for h in (*SENDERS, RX):
        e = roce(name, h)["engine"]
        assert e.get("qp_errors", 0) == 0 and e.get("rx_drop_internal_error", 0) == 0, (h, e)
    assert sum(roce(name, s)["engine"].get("tx_retransmits", 0) for s in SENDERS) > 0

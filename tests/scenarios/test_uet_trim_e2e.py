# SPDX-License-Identifier: GPL-2.0-only
"""UET trimming end to end (root): switch pipeline → DSCP → NACK TRIMMED → fast retransmit.

Issue 6's acceptance, "with the switch pipeline trimming at a congested port,
NACK TRIMMED arrives and the retransmission goes out well before the RTO
(from the event trace)". ``emu.cluster.up(..., trace=True)`` — what ``emu up
--trace`` runs — builds one leaf with three hosts from a topology file whose
``[switch]`` section makes the receiver's port slow with a small trim
threshold; two senders each WRITE 8 packets (8.5 KiB each) to the receiver at
once. A UET sender puts its whole message on the wire back to back (it fits
the MP_RANGE window) at its 1 Gb/s line rate (set in the file: the default
would follow this machine's ``emu doctor`` figures), far faster than 100
Mbit/s, so the port's queue passes its 10 KB trim threshold (about one
packet) within each burst: trims are certain whatever the machine's speed.
The small threshold also bounds the queueing delay (< 1 ms) and the small
transfer the CPU load.

Whether every NACK beats the 5 ms RTO depends on this machine, not the protocol:
the NIC daemons wait for a CPU, and the user-space pipeline (which trimmed until
the kernel datapath learnt to) ran past its credible rate here (``emu doctor``:
~50 Mb/s), releasing frames 1-5 ms behind its schedule — the NACK loop then took
6-12 ms in about 3 runs of 10. So every run asserts what holds whatever the
timing: each NACK's resend is its own effect in the first send after it (no new
data and no timer's resend in between), no packet goes twice in one step, and
NACKs drove more resends than the timer. Only a run in which the emulator
counted no overload during the incast must also show every NACK beating the RTO
(the emulated round trip is under 2 ms): a timeout that beat a NACK otherwise is
emu's lateness, shown as overload, never judged as protocol behaviour.

No wall-clock thresholds: the retransmission delay is compared with the
engine's own RTO, both from the same trace; timeouts only make failures fast.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fabric_util import ns_of_cluster
from uet_cluster import UetCluster

from emu.cluster import cluster as C
from emu.core.trace import read_trace, select
from emu.fabric import state
from emu.fabric.naming import random_cluster
from emu.topology import loader
from emu.transports.uet.factory import DEFAULT_DAEMON_RTO
from emu.transports.uet.pdc import TRIM_CODES

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")

MiB = 1 << 20
SIZE = 64 << 10
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
[nic]
line_rate = "1gbit"       # senders faster than the receiver's port, whatever this machine's
#                           emu doctor figures (they set the default rate: 50 Mb/s here with a
#                           user-space switch pipeline, which left the port barely queued)
[switch]
trim_dscps = [0]          # UET data (CS0) only: ACKs, NACKs and CPs (EF) are never cut
seed = 3
[[switch.override]]
node = "leaf1"
port = "{rx}"
rate = "100mbit"
depth = "2MB"
trim = true
trim_threshold = "10KB"
"""


@pytest.fixture
def traced(tmp_path: Path):
    name = random_cluster("tt")
    path = tmp_path / "trim.toml"
    path.write_text(TOPOLOGY.format(name=name, rx=RX))
    topo = loader.load(path)
    traces = {h: Path(C.trace_path(name, h)) for h in (*SENDERS, RX)}
    f = None
    try:
        f = C.up(topo, name, schedule=False, trace=True, progress=lambda m: None)
        yield f, traces
    finally:
        if state.load(name) is not None:
            C.down(name)
        for p in traces.values():
            p.unlink(missing_ok=True)
        for h in (*SENDERS, RX):
            Path(C.trace_path(name, h)).with_name(f"{name}.nicd-{h}.log").unlink(
                missing_ok=True)
        Path(C.event_log(name)).unlink(missing_ok=True)
        assert ns_of_cluster(name) == [] and state.load(name) is None


def _overload(uc: UetCluster, cluster: str) -> int:
    """Overload events counted so far by the leaf's pipeline and the hosts' daemons."""
    n = C.switch_request(cluster, "leaf1", {"cmd": "counters"})["overload"]["total"]
    return int(n) + sum(int(uc.stats(h)["overload"]["total"]) for h in (*SENDERS, RX))


def _between(ev: list[dict], ep: str, t_n: float, t_resend: float) -> list[dict]:
    """What ``ep``'s engine did between a NACK's receive batch (``t_n``) and the resend
    that it should not have: new data sent (a NACKed packet goes ahead of new data) or a
    timer's retransmission. Empty when the resend is the NACK's own effect in the first
    send after it, however long the wall clock between the two steps.

    Receptions in between are allowed: while the sender's port is still serializing
    what it was given (its FIFO full, :mod:`emu.nic.pacer`), the daemon does not ask
    the engine for more, so a NACK that comes back mid-burst waits for the port like
    any frame on a real NIC, and more ACKs and NACKs arrive meanwhile (a CI run: the
    next packet's NACK 37 fabric µs later, the resend 3 µs after that)."""
    return [e for e in ev if e["ep"] == ep and t_n < e["time"] < t_resend
            and ((e["name"] == "packet_sent" and not e["data"].get("retx"))
                 or (e["name"] == "packet_retransmitted" and e["data"]["reason"] != "nack"))]


def test_trimmed_requests_nacked_and_resent_before_the_rto(traced):
    f, traces = traced
    uc = UetCluster(f, [*SENDERS, RX])  # daemons are the cluster's (emu up started them)
    # warm-up, one sender at a time and too small to trim: PDCs established (no SYN in
    # the burst), every daemon and the switch past their first-packet costs — a cold
    # start could delay the first NACK past the RTO on a busy 2-core machine
    for i, s in enumerate(SENDERS, 1):
        uc.write(s, RX, 1000, i, timeout=60)
    late0 = _overload(uc, f.cluster)
    # both WRITEs posted back to back once every endpoint is connected (asserts
    # byte-exact delivery)
    uc.incast(list(SENDERS), RX, SIZE, [11, 12], timeout=120)
    # what the emulator counted of its own lateness during the incast (the switch behind
    # its schedule, a NIC daemon's late sends or held timers): the run is credible only
    # without it
    late = _overload(uc, f.cluster) - late0

    # the switch trimmed at the receiver's port
    port = C.switch_request(f.cluster, "leaf1", {"cmd": "counters"})["ports"][RX]
    assert port["trimmed"] > 0, port
    # the receiver's daemon saw the trimmed DSCP and its engine NACKed those requests
    rx_stats = uc.stats(RX)["transports"]["uet"]
    assert rx_stats["counters"]["rx_trimmed"] > 0  # DSCP 31 (TRIMMED_LASTHOP) seen
    assert rx_stats["engine"]["rx_trimmed"] > 0 and rx_stats["engine"]["tx_nacks"] > 0
    assert rx_stats["engine"].get("rx_drop_internal_error", 0) == 0
    nacks = sum(uc.engine(s).get("rx_nack_0x01", 0) for s in SENDERS)
    assert nacks > 0
    # timeouts that fired only because a daemon held the ACK back (emulator overload,
    # counted per sender as rto_held): the emulator's, not the protocol's
    held = sum(uc.engine(s).get("rto_held", 0) for s in SENDERS)

    C.down(f.cluster)  # SIGTERM: daemons drain and close (flush) their traces
    rto = DEFAULT_DAEMON_RTO
    delays: list[float] = []
    raced = rto_retx = nack_retx = 0
    for s in SENDERS:
        ev = read_trace(traces[s].read_text().splitlines())
        assert select(ev, "daemon_started"), "no daemon record"
        sent = select(ev, "packet_sent", retx=False)
        assert sent and all("ent" in e["data"] and "psn" in e["data"] for e in sent)
        rto_retx += len(select(ev, "packet_retransmitted", reason="rto"))
        resends = select(ev, "packet_retransmitted")
        nack_retx += sum(1 for e in resends if e["data"]["reason"] == "nack")
        # two NACKs for one packet in a batch owe one resend, not two back to back
        once = {(e["ep"], e["data"]["pdc"], e["data"]["psn"], e["time"]) for e in resends}
        assert len(once) == len(resends), "a packet resent twice in one engine step"
        for nk in select(ev, "nack_received"):
            if nk["data"]["code"] not in TRIM_CODES:
                continue
            t_n, psn, pdc, ep = nk["time"], nk["data"]["psn"], nk["data"]["pdc"], nk["ep"]
            mine = {"ep": ep, "pdc": pdc, "psn": psn}
            resent = [e for e in select(ev, "packet_retransmitted", **mine) if e["time"] >= t_n]
            if not resent:
                continue  # already SACKed when the NACK came: the engine asks ACK_REQ instead
            first = resent[0]
            # the NACK itself triggered it, in the first send after it (not a timer)
            assert first["data"]["reason"] == "nack", (nk, first)
            between = _between(ev, ep, t_n, first["time"])
            assert not between, (nk, first, between[:6])
            assert any(e["time"] == first["time"]
                       for e in select(ev, "packet_sent", retx=True, **mine))
            delays.append(first["time"] - t_n)
            t_sent = max(e["time"] for e in select(ev, "packet_sent", retx=False, **mine)
                         if e["time"] <= t_n)
            if [e for e in select(ev, "packet_retransmitted", reason="rto", **mine)
                    if t_sent <= e["time"] <= first["time"]]:
                raced += 1  # the timer fired before this NACK came back
    assert len(delays) >= 2, "no NACK TRIMMED was followed by a retransmission"
    delays.sort()
    # trimming, not the timer, recovered the losses (the timeouts the daemons' holding
    # caused left out: a busy 2-core machine once gave 39 NACK against 44 timer resends)
    assert nack_retx > rto_retx - held, (nack_retx, rto_retx, held, raced, late)
    if late == 0:
        # a credible run (the emulator kept its schedule): every NACK beat the RTO (sent,
        # trimmed, NACKed, resent, no timeout in between), and the resend went out well
        # before it — typically ~0.1-0.4 ms, the engine's turn
        assert raced == 0, (raced, len(delays), rto_retx)
        assert delays[len(delays) // 2] < rto / 4 and delays[-1] < rto, delays
    # else: a timeout that beat a NACK back (the emulated round trip is < 2 ms, the RTO
    # 5 ms) or a slow engine turn is the emulator's lateness, and it was counted as
    # overload — shown apart, not passed off as protocol behaviour

# SPDX-License-Identifier: GPL-2.0-only
"""MRC through the NIC daemons of a pair cluster (root), as a user runs it (issue #35):
``emu perf write-bw|write-lat --transport mrc`` move and verify their bytes at the
fabric's rate; through 1 % loss on the cable the transfer still completes, resending
holes only; and a capture of it is MRC to Wireshark (emu's Lua dissectors), every ICRC
good, one QP's packets on many EVs (source ports).

No wall-clock thresholds: only what the runs and the capture say about themselves."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from fabric_util import emu_cli, pair_cluster

from emu.wire import wireshark

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")
TSHARK = shutil.which("tshark")
EMU = [sys.executable, "-m", "emu"]  # this tree's emu, for commands run in the background


@pytest.fixture(scope="module")
def cluster():
    with pair_cluster("m") as name:
        yield name


def perf(cluster: str, test: str, *args: str) -> dict:
    p = emu_cli("perf", test, "--from", "h1", "--to", "h2", "--cluster", cluster, "--json",
                "--transport", "mrc", *args)
    return json.loads(p.stdout)


def test_write_bw_moves_and_verifies_its_bytes(cluster):
    doc = perf(cluster, "write-bw", "-s", "65536", "-n", "100", "--report_gbits")
    assert doc["passed"] is True and doc["errors"] == [], doc["errors"]
    [r] = doc["results"]
    assert r["bytes_total"] == 65536 * 100 and r["bw_average"] > 0
    o = doc["overload"]
    assert o["tx_packets"] >= 100 * 16 and o["retransmits"] == 0  # a clean cable


def test_write_lat_one_packet_messages(cluster):
    doc = perf(cluster, "write-lat", "-s", "64", "-n", "50")
    assert doc["passed"] is True, doc["errors"]
    [r] = doc["results"]
    assert r["iterations"] == 50 and r["t_typical"] > 0


def test_loss_on_the_cable_is_recovered_by_resending_holes(cluster):
    emu_cli("impair", "-c", cluster, "h1:h2", "--loss", "1%")
    try:
        doc = perf(cluster, "write-bw", "-s", "1048576", "-n", "20")
    finally:
        emu_cli("impair", "-c", cluster, "h1:h2", "--clear")
    assert doc["passed"] is True, doc["errors"]
    o = doc["overload"]
    sent = 20 * 256  # 4 KiB packets of 20 x 1 MiB
    # seeded 1 % loss of ~5,000 data packets: some resent, holes only (go-back-N would
    # resend everything after each loss: thousands)
    assert 0 < o["retransmits"] < 0.1 * sent, o


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_a_capture_is_mrc_to_wireshark_with_good_icrcs_and_many_evs(cluster, tmp_path: Path):
    pcap = tmp_path / "mrc.pcapng"
    cap = subprocess.Popen([*EMU, "capture", "--cluster", cluster, "h1-h2", "-w",
                            str(pcap), "--count", "400"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)  # the capture is listening (it prints nothing before)
        perf(cluster, "write-bw", "-s", "65536", "-n", "20")
        assert cap.wait(timeout=120) == 0, cap.stderr.read()
    finally:
        if cap.poll() is None:
            cap.kill()
            cap.wait()
    out = subprocess.run([TSHARK, "-r", str(pcap), *wireshark.tshark_args(), "-Y", "mrc",
                          "-T", "fields", "-e", "mrc.bth.opcode", "-e", "udp.srcport",
                          "-e", "udp.dstport", "-e", "roce.icrc_ok"],
                         capture_output=True, text=True, check=True).stdout
    rows = [ln.split("\t") for ln in out.splitlines() if ln.strip()]
    assert len(rows) > 100, out[-2000:]
    assert all(r[3] == "1" or r[3].lower() == "true" for r in rows), rows[:5]  # ICRC good
    data = [r for r in rows if r[2] == "4971" and int(r[0], 0) in range(0xC6, 0xCC)]
    sacks = [r for r in rows if int(r[0], 0) == 0xDC]
    assert data and sacks
    evs = Counter(r[1] for r in data)
    assert len(evs) >= min(len(data), 64), evs  # sprayed: a new EV per packet


def test_emu_mrc_shows_a_live_qps_ev_table_events_and_denies_an_ev(cluster):
    """Two MRC QPs opened through the client API (h1 → h2), one 64 KiB WRITE, then the
    controller: ``emu mrc qp`` shows h1's QP with its 128 EVs and what each carried,
    ``emu mrc ev … deny`` takes one out of use, ``emu mrc events`` reports the change."""
    import random

    from emu.api import Device

    a, b = Device.open(cluster, "h1"), Device.open(cluster, "h2")
    bufs = []
    try:
        qps, mrs, cqs = [], [], []
        for d in (a, b):
            cq = d.create_cq()
            cqs.append(cq)
            buf = d.alloc_buffer(1 << 16)
            bufs.append(buf)
            mrs.append(d.reg_mr(buf))
            qps.append(d.create_qp(cq, transport="mrc"))
        qa, qb = qps
        qa.connect(qb.info)
        qb.connect(qa.info)
        data = random.Random(5).randbytes(1 << 16)
        mrs[0].view[:] = data
        qa.post_write([mrs[0].va, 1 << 16, mrs[0].lkey], mrs[1].va, mrs[1].rkey, wr_id=9)
        (wc,) = cqs[0].wait(1, timeout=60)
        assert wc.wr_id == 9 and wc.ok, wc
        assert bytes(mrs[1].view) == data

        # the completion comes from the transport ACK; the last SACKs may still be on
        # their way into h1's engine (each is a datagram of its own): read until they are
        for _ in range(50):
            doc = json.loads(emu_cli("mrc", "qp", f"{cluster}:h1", hex(qa.qpn),
                                     "--json").stdout)
            (q,) = doc["qps"]
            if sum(r["sacked"] for r in q["evs"]) == 16:
                break
            time.sleep(0.2)
        assert q["state"] == "RTS" and q["peer"] == qb.qpn
        assert q["summary"]["size"] == 128 and q["summary"]["states"]["good"] == 128
        assert sum(r["sent"] for r in q["evs"]) == 16 and sum(r["sacked"] for r in q["evs"]) == 16
        text = emu_cli("mrc", "qp", f"{cluster}:h1").stdout
        assert f"QP {qa.qpn:#08x} RTS" in text and "good" in text

        ev = q["evs"][0]["ev"]
        out = json.loads(emu_cli("mrc", "ev", f"{cluster}:h1", hex(qa.qpn), hex(ev), "deny",
                                 "--json").stdout)
        assert next(r for r in out["qp"]["evs"] if r["ev"] == ev)["state"] == "denied"
        evs = json.loads(emu_cli("mrc", "events", f"{cluster}:h1", "--json").stdout)
        assert [(e["ev"], e["from"], e["to"], e["cause"]) for e in evs["events"]] == [
            (ev, "good", "denied", "controller")] and evs["drop_count"] == 0
        # what is not there is one line and exit 1
        bad = emu_cli("mrc", "qp", f"{cluster}:h1", "0xabcdef", check=False)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "0xabcdef" in bad.stderr
    finally:
        for d in (a, b):
            d.close()
        for buf in bufs:
            buf.close()


def test_profiles_from_the_controller_shape_the_next_qps(cluster):
    """``emu mrc ev-profile`` / ``cc-profile``: an EXP profile of four EVs and a CC
    profile go INIT → OFFLINE → ONLINE and become h1's defaults; the next QP opened
    through the API sprays over exactly those EVs (``emu mrc qp``), and a write through
    it arrives; put back, the built-in defaults serve again."""
    import random

    from emu.api import Device

    def mrc(*args: str, check: bool = True):
        return emu_cli("mrc", *args, check=check)

    where = f"{cluster}:h1"
    mrc("ev-profile", where, "create", "four", "--mode", "exp", "--evs",
        "0xe000,0xe001,0xe002,0xe003")
    mrc("cc-profile", where, "create", "rtt20", "--base-rtt", "20us", "--gamma", "0.5")
    early = mrc("ev-profile", where, "online", "four", check=False)
    assert early.returncode == 1 and "INIT -> OFFLINE -> ONLINE" in early.stderr
    a = b = None
    bufs = []
    try:
        for kind, name in (("ev-profile", "four"), ("cc-profile", "rtt20")):
            for step in ("offline", "online", "default"):
                mrc(kind, where, step, name)
        listing = json.loads(mrc("cc-profile", where, "list", "--json").stdout)
        assert listing["default"] == {"ev": "four", "cc": "rtt20"}
        a, b = Device.open(cluster, "h1"), Device.open(cluster, "h2")
        qps, mrs, cqs = [], [], []
        for d in (a, b):
            cqs.append(d.create_cq())
            bufs.append(d.alloc_buffer(1 << 16))
            mrs.append(d.reg_mr(bufs[-1]))
            qps.append(d.create_qp(cqs[-1], transport="mrc"))
        qps[0].connect(qps[1].info)
        qps[1].connect(qps[0].info)
        data = random.Random(7).randbytes(1 << 16)
        mrs[0].view[:] = data
        qps[0].post_write([mrs[0].va, 1 << 16, mrs[0].lkey], mrs[1].va, mrs[1].rkey, wr_id=3)
        (wc,) = cqs[0].wait(1, timeout=60)
        assert wc.ok and bytes(mrs[1].view) == data
        (q,) = json.loads(mrc("qp", where, hex(qps[0].qpn), "--json").stdout)["qps"]
        assert sorted(r["ev"] for r in q["evs"]) == [0xE000, 0xE001, 0xE002, 0xE003]
        assert sum(r["sent"] for r in q["evs"]) == 16
    finally:
        for d in (a, b):
            if d is not None:
                d.close()
        for buf in bufs:
            buf.close()
        for kind, name in (("ev-profile", "four"), ("cc-profile", "rtt20")):
            mrc(kind, where, "default", "default", check=False)
            mrc(kind, where, "offline", name, check=False)
            mrc(kind, where, "delete", name, check=False)
    assert json.loads(mrc("ev-profile", where, "list", "--json").stdout)["default"] == {
        "ev": "default", "cc": "default"}


def _writes_per_link(pcap: Path) -> Counter:
    """MRC WRITEs per link (pcapng interface) of a capture."""
    from emu.wire.codec.roce import decode_packet
    from emu.wire.pcapio import read_frames

    out: Counter = Counter()
    for fr in read_frames(pcap):
        raw = bytes(fr.data)
        if raw[12:14] != b"\x08\x00":
            continue
        off = 14 + (raw[14] & 15) * 4
        if int.from_bytes(raw[off + 2:off + 4], "big") != 4971:
            continue
        if 0xC6 <= decode_packet(raw[off + 8:]).bth.opcode <= 0xCB:
            out[fr.interface] += 1
    return out


def _captured_run(cluster: str, pcap: Path) -> Counter:
    cap = subprocess.Popen([*EMU, "capture", "--cluster", cluster, "h1", "-w", str(pcap),
                            "--filter", "udp port 4971"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        doc = json.loads(emu_cli("perf", "write-bw", "--from", "h1", "--to", "h3", "--cluster",
                                 cluster, "--json", "--transport", "mrc", "-s", "131072",
                                 "-n", "8").stdout)
        assert doc["passed"] is True, doc["errors"]
        time.sleep(1)
    finally:
        cap.send_signal(2)
        cap.wait(timeout=60)
    return _writes_per_link(pcap)


def test_one_qp_is_sprayed_over_both_planes_and_a_port_down_moves_it(tmp_path: Path):
    """The multi-plane topology (real time): one MRC QP h1 → h3 splits its packets over
    both of h1's plane links; with ``emu mrc port … 1 down`` the next QP uses plane 0
    alone; ``up`` brings plane 1 back."""
    from emu.fabric import naming, state

    name = naming.random_cluster("mp")
    try:
        emu_cli("up", "namespaces/multi-plane.toml", "--name", name, "--set", "time.scale=1",
                "--set", "link.rate=1gbit")
        both = _captured_run(name, tmp_path / "both.pcapng")
        assert set(both) == {"h1-p0-leaf1", "h1-p1-leaf1"}, both
        # 8 x 128 KiB in 4 KiB packets, all captured (and any resent: a first packet may
        # wait for the neighbour's address)
        assert sum(both.values()) >= 8 * 32
        assert all(n >= 0.4 * sum(both.values()) for n in both.values()), both
        out = json.loads(emu_cli("mrc", "port", f"{name}:h1", "1", "down", "--json").stdout)
        assert out["ports_down"] == [1]
        one = _captured_run(name, tmp_path / "one.pcapng")
        assert set(one) == {"h1-p0-leaf1"} and sum(one.values()) >= 8 * 32, one
        emu_cli("mrc", "port", f"{name}:h1", "1", "up")
        again = _captured_run(name, tmp_path / "again.pcapng")
        assert set(again) == {"h1-p0-leaf1", "h1-p1-leaf1"}, again
    finally:
        if state.load(name) is not None:
            emu_cli("down", name, check=False)
        assert state.load(name) is None


def _tx_packets(cluster: str, host: str, ifname: str) -> int:
    from emu.fabric.linkctl import ns_name

    out = subprocess.run(["ip", "-j", "-s", "-n", ns_name(cluster, host), "link", "show",
                          ifname], check=True, capture_output=True, text=True).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["packets"])


def _mrc_engine(name: str, host: str) -> dict:
    return json.loads(emu_cli("nicd", "stats", f"{name}:{host}", "--json").stdout)


def _wait_sent(name: str, packets: int, timeout: float = 120) -> None:
    """Until h1's MRC engine has sent ``packets`` (counting every QP it had)."""
    deadline = time.monotonic() + timeout
    while _mrc_engine(name, "h1")["transports"]["mrc"]["engine"]["tx_packets"] < packets:
        assert time.monotonic() < deadline, "the write did not get that far"
        time.sleep(0.1)


def _srv6_writes_per_link(pcap: Path) -> tuple[Counter, set[str]]:
    """MRC WRITEs per link of a capture of an SRv6 fabric — Ethernet / IPv6 to a uSID
    container (next header 41) / IPv6 / UDP 4971 — and the containers h1 sent them to
    (each switch on the way shifts its own uSID out)."""
    from emu.wire.codec.roce import decode_packet
    from emu.wire.pcapio import read_frames

    out: Counter = Counter()
    outers: set[str] = set()
    for fr in read_frames(pcap):
        raw = bytes(fr.data)
        if raw[12:14] != b"\x86\xdd" or raw[14 + 6] != 41:
            continue
        inner = 14 + 40
        if raw[inner + 6] != 17 or int.from_bytes(raw[inner + 42:inner + 44], "big") != 4971:
            continue
        if 0xC6 <= decode_packet(raw[inner + 48:]).bth.opcode <= 0xCB:
            out[fr.interface] += 1
            if fr.interface.startswith("h1-"):
                outers.add(str(ipaddress.IPv6Address(raw[14 + 24:14 + 40])))
    return out, outers


def test_srv6_one_qp_takes_every_plane_and_spine_and_a_plane_fails_over_at_the_defaults(
        tmp_path: Path):
    """The multi-plane topology as shipped (400 Gb/s planes, fabric time) in SRv6 mode
    (``--set routing.mode=srv6``; on this kernel the tc BPF datapath). One MRC QP h1 → h3:
    a capture of every link shows its WRITEs — each in an outer IPv6 header to a uSID
    container — on both planes and on every leaf-spine link, and Wireshark decodes them as
    MRC with good ICRCs. Then ``emu link plane:1 down`` in the middle of a write: every
    NIC's link watch sees its plane-1 port go down, its QPs resend what was in flight on
    plane 1 over plane 0 at once (no timeout), the plane's EVs turn ASSUMED_BAD, and the
    write completes byte-exact. ``plane:1 up``: probes bring the EVs back and the next
    write sprays over both planes again."""
    from emu.fabric import naming, state

    name = naming.random_cluster("mf")
    perf_cmd = [*EMU, "perf", "write-bw", "--from", "h1", "--to", "h3", "--cluster", name,
                "--json", "--transport", "mrc", "-s", "262144", "-n", "512"]
    try:
        emu_cli("up", "namespaces/multi-plane.toml", "--name", name,
                "--set", "routing.mode=srv6")
        st = json.loads(emu_cli("status", name, "--json").stdout)
        assert st["srv6"]["datapath"] in ("bpf", "kernel"), st["srv6"]
        pcap = tmp_path / "srv6.pcapng"
        cap = subprocess.Popen([*EMU, "capture", "--cluster", name, "all", "-w", str(pcap),
                                "--filter", "ip6 proto 41"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(2)
            doc = json.loads(emu_cli(*perf_cmd[3:-4], "-s", "131072", "-n", "8").stdout)
            assert doc["passed"] is True, doc["errors"]
            time.sleep(1)
        finally:
            cap.send_signal(2)
            cap.wait(timeout=60)
        per_link, outers = _srv6_writes_per_link(pcap)
        links = {f"h1-p{p}-leaf1" for p in (0, 1)} | {
            f"p{p}-leaf1-p{p}-spine{s}" for p in (0, 1) for s in (1, 2)}
        assert links <= set(per_link), per_link
        total = sum(per_link[lk] for lk in links if lk.startswith("h1-"))
        assert total >= 8 * 32  # 1 MiB in ≤ 4 KiB packets, all seen leaving h1
        # every spine link carries its share: one container per (plane, spine)
        assert all(per_link[lk] >= 0.1 * total for lk in links), per_link
        assert len(outers) == 4 and all(o.startswith("fc00:0:") for o in outers), outers
        if TSHARK is not None:
            out = subprocess.run([TSHARK, "-r", str(pcap), *wireshark.tshark_args(), "-Y",
                                  "mrc", "-T", "fields", "-e", "roce.icrc_ok"],
                                 capture_output=True, text=True, check=True).stdout.split()
            assert len(out) >= total and set(out) <= {"1", "True", "true"}, out[:5]
        # EV_PROBE endpoint operations: every probed path of plane 1 answers, with a round
        # trip of fabric microseconds
        probe = json.loads(emu_cli("mrc", "probe", f"{name}:h1", "h3", "--plane", "1",
                                   "--json").stdout)
        assert probe["to"].startswith("fd00:1:") and len(probe["results"]) == 4
        assert all(r["status"] == "OK" and 0 < r["rtt_ns"] < 1e6 for r in probe["results"])
        # a write that lasts 2 fabric ms (~24 s of wall time at the auto scale, 12000): the
        # plane fails early in it (after 4096 packets, ~0.2 fabric ms) and comes back after
        # the checks below (a few s of wall, under 1 fabric ms) while the same QP still has
        # most to write
        p = subprocess.Popen([*perf_cmd[:-2], "-D", "0.002"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            base = _mrc_engine(name, "h1")["transports"]["mrc"]["engine"]["tx_packets"]
            _wait_sent(name, base + 4096)
            emu_cli("link", "plane:1", "down", "--cluster", name)
            h1 = _mrc_engine(name, "h1")
            assert h1["links"]["up"] == {"eth0": True, "eth1": False}
            gone = emu_cli("mrc", "probe", f"{name}:h1", "h3", "--plane", "1", "-c", "1",
                           "--wait", "2", check=False)
            # h1's own plane-1 port lost its link: the probe cannot leave (PORT_DOWN at once)
            assert gone.returncode == 1 and "PORT_DOWN" in gone.stdout, gone.stdout
            eng = _mrc_engine(name, "h1")["transports"]["mrc"]["engine"]
            # in flight on plane 1 when it failed: resent over plane 0 at once, no timeout;
            # the QP's plane-1 half of its 128 EVs assumed bad
            assert eng["retx_plane"] > 0 and eng["rto"] == 0, eng
            assert eng["evs_port_down"] == 64 and eng["link_downs"] == 1, eng
            assert eng["tx_port_updates"] == 1
            emu_cli("link", "plane:1", "up", "--cluster", name)
            before = _tx_packets(name, "h1", "eth1")
            out, err = p.communicate(timeout=600)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        doc = json.loads(out)
        assert doc["passed"] is True, (doc["errors"], err)  # byte-exact (perf verifies)
        h1 = _mrc_engine(name, "h1")
        eng = h1["transports"]["mrc"]["engine"]
        assert h1["links"]["up"] == {"eth0": True, "eth1": True}
        assert eng["link_ups"] == 1 and eng["rto"] == 0
        # the same QP: probes on its plane-1 EVs were answered and plane 1 carried its
        # packets again before the write ended
        assert eng["probe_ok"] > 0 and eng["tx_port_updates"] >= 2, eng
        assert _tx_packets(name, "h1", "eth1") - before > 1000
        assert _mrc_engine(name, "h3")["transports"]["mrc"]["engine"]["link_downs"] == 1
    finally:
        if state.load(name) is not None:
            emu_cli("down", name, check=False)
        assert state.load(name) is None

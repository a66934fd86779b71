# SPDX-License-Identifier: GPL-2.0-only
"""Fuzz during transfers (issue #14's acceptance): while ``emu perf write-bw`` h1 → h2
runs (RoCEv2, then UET), an unprivileged user in h1 (``setpriv --reuid=nobody``, the
system Python) sends h2's ports 4791 and 4793 a seeded corpus of random, mutated,
ICRC-valid random-header and forged-SYN packets (:mod:`emu.chaos.fuzz`) at
``RATE`` packets/s for ``CHAOS_BUDGET`` seconds. The transfer must complete with
its data verified, and h2's counters must account for every packet that reached it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from fabric_util import emu_cli, pair_cluster

from emu.chaos.fuzz import Fuzzer, corpus, rejected
from emu.nic.protocol import call_once, sock_path

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")
H1, H2 = "10.0.1.11", "10.0.1.12"  # namespaces/pair.toml
RATE = 5000
SPORT = 40001



@pytest.fixture(scope="module")
def cluster():
    with pair_cluster("hw") as name:
        yield name


@pytest.fixture
def corpus_dir():
    """A directory the unprivileged sender can read (pytest's own is root-only)."""
    d = Path(tempfile.mkdtemp(prefix="hw-chaos-"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def h2_counts(cluster: str) -> dict[str, int]:
    """h2's refusals and receptions: the sum over both transports' engines and sockets."""
    s = call_once(sock_path(cluster, "h2"), "stats")
    out = {"rejected": 0, "kernel_drops": 0, "pdcs_created": 0}
    for name, t in s["transports"].items():
        eng, c = t["engine"], t["counters"]
        out["rejected"] += rejected(eng, name) + c.get("rx_bad_icrc", 0) + c.get(
            "rx_truncated", 0)
        out["kernel_drops"] += c.get("rx_kernel_drops", 0)
        out["pdcs_created"] += eng.get("pdc_target_created", 0)
        for k, v in eng.items():
            if k.startswith("rx_drop_") or k in ("rx_duplicates", "rx_duplicate"):
                out[f"{name}.{k}"] = v
        out[f"{name}.rx_bad_icrc"] = c.get("rx_bad_icrc", 0)
    return out


@pytest.mark.parametrize("transport", ["roce", "uet"])
def test_write_bw_survives_fuzz_from_an_unprivileged_user(cluster, transport, chaos_seed,
                                                          chaos_budget, corpus_dir):
    cpath = corpus_dir / f"{transport}.bin"
    classes = corpus(cpath, Fuzzer(chaos_seed, src=H1, sport=SPORT, dst=H2),
                     int(RATE * chaos_budget))
    os.chmod(cpath, 0o644)
    before = h2_counts(cluster)
    perf = subprocess.Popen(
        [sys.executable, "-m", "emu", "perf", "write-bw", "--from", "h1", "--to", "h2",
         "--cluster", cluster, "--json", "-D", str(chaos_budget + 2), "--transport", transport],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # the transfer is under way
        fz = emu_cli("exec", f"{cluster}:h1", "--", "setpriv", "--reuid=nobody", "--regid=nogroup",
                 "--clear-groups", "/usr/bin/python3", str(ROOT / "emu/chaos/send.py"),
                 str(cpath), H2, str(SPORT), str(RATE), str(chaos_budget))
        out, err = perf.communicate(timeout=300)
    finally:
        if perf.poll() is None:
            perf.kill()
            perf.wait()
    sent = json.loads(fz.stdout.strip().splitlines()[-1])
    doc = json.loads(out)
    assert perf.returncode == 0 and doc["passed"] is True and doc["errors"] == [], err
    (r,) = doc["results"]
    assert r["bytes_total"] > 0
    after = h2_counts(cluster)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    arrived = sent["total"] - delta["kernel_drops"]
    # every packet that reached h2 is counted as refused — except forged SYNs that opened
    # a PDC for an SPDCID no initiator used (indistinguishable from a real first packet)
    # and the transfer's own PDC
    accepted = max(delta["pdcs_created"] - (1 if transport == "uet" else 0), 0)
    report = {"transport": transport, "classes": classes, "sender": sent,
              "bw_average": r.get("bw_average"), "unit": r.get("unit"),
              "h2": {k: v for k, v in delta.items() if v}}
    print(json.dumps(report))
    assert sent["errors"] == 0 and sent["total"] == int(RATE * chaos_budget), report
    # the pace held: the whole budget's packets within 1 % of the budget's time. A claim
    # about this machine's load generator, not about emu, so only the acceptance run
    # (scripts/chaos, which sets CHAOS_BUDGET) holds it; the normal suite has no
    # wall-clock threshold and prints the rate achieved in its report
    if os.environ.get("CHAOS_BUDGET"):
        assert sent["seconds"] <= chaos_budget * 1.01, report
    assert delta["rejected"] + accepted >= arrived, report

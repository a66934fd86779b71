# SPDX-License-Identifier: GPL-2.0-only
"""``emu dissect`` on the sample capture: every packet named right, JSON that parses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scapy.layers.inet import UDP

from emu.cli import main
from emu.wire import sample
from emu.wire.pcapio import PcapngWriter


def _emu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emu", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("dissect") / "sample.pcapng"
    n = sample.write(str(path))
    return path, n


def test_json_lines_name_every_sample(capture):
    path, n = capture
    out = _emu("dissect", str(path), "--json")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    samples = sample.all_samples()
    assert len(records) == n == len(samples)
    protocol_names = {"roce": "RoCEv2", "mrc": "MRC", "uet": "UET"}
    for rec, s in zip(records, samples, strict=True):
        assert rec["error"] is None, (s.name, rec["error"])
        assert rec["protocol"] == protocol_names[s.protocol], s.name
        assert rec["interface"] == f"sample-{s.protocol}"
        if s.protocol in ("roce", "mrc"):
            assert rec["icrc"] == "ok", s.name
            assert s.name.startswith(rec["type"]), (s.name, rec["type"])
            bth = s.frame["BTH"]
            assert (rec["fields"]["psn"], rec["fields"]["qp"]) == (bth.psn, bth.dqpn)
        if s.protocol == "mrc" and s.frame.haslayer(UDP):
            from emu.wire.ev import packet_ev
            assert rec["fields"]["ev"] == packet_ev(s.frame)


def test_text_lines_and_summary(capture):
    path, n = capture
    out = _emu("dissect", str(path))
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert len(lines) == n
    assert any("RC_WRITE_ONLY" in line and "ICRC ok" in line for line in lines)
    assert any("MRC_RELIABILITY_NACK" in line and "nack=TRIMMED" in line for line in lines)
    assert f"{n} packets" in out.stderr and "0 malformed" in out.stderr


def test_flipped_payload_byte_shows_bad_icrc(tmp_path):
    s = next(s for s in sample.all_samples() if s.name == "RC_WRITE_ONLY")
    frame = bytearray(bytes(s.frame))
    frame[-6] ^= 0xFF  # last payload byte, before the ICRC
    path = tmp_path / "bad.pcapng"
    with path.open("wb") as f:
        PcapngWriter(f).write(bytes(frame), interface="x")
    out = _emu("dissect", str(path), "--json")
    rec = json.loads(out.stdout)
    assert rec["icrc"] == "BAD" and rec["type"] == "RC_WRITE_ONLY"


def test_truncated_packet_is_reported_not_fatal(tmp_path):
    s = next(s for s in sample.all_samples() if s.name == "RC_WRITE_ONLY")
    frame = bytes(s.frame)
    cut = frame[:14 + 20 + 8 + 12 + 5]  # into the RETH
    import struct
    cut = bytearray(cut)
    struct.pack_into("!H", cut, 14 + 2, len(cut) - 14)   # IP total length
    struct.pack_into("!H", cut, 14 + 20 + 4, len(cut) - 34)  # UDP length
    path = tmp_path / "cut.pcapng"
    with path.open("wb") as f:
        w = PcapngWriter(f)
        w.write(bytes(cut), interface="x")
        w.write(frame, interface="x")
    out = _emu("dissect", str(path), "--json")
    assert out.returncode == 0
    first, second = (json.loads(line) for line in out.stdout.splitlines())
    assert "RETH at offset 12: truncated" in first["error"]
    assert second["error"] is None and second["icrc"] == "ok"


def test_not_a_capture_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    assert main(["dissect", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a pcap or pcapng capture" in err
    assert main(["dissect", str(tmp_path / "missing.pcap")]) == 2

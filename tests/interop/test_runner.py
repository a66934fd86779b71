# SPDX-License-Identifier: GPL-2.0-only
"""Interop runner (issue 13): the implementations file, the matrix, and end to end
(root) emu × emu, a shell endpoint that supports nothing, and broken endpoints.

The broken endpoints are what the runner exists to catch: a client that
corrupts one byte, and a pair that "passes" without moving data (the server
copies the client's file instead of receiving it). Each must show ✕ with a
reason naming the case and what was wrong. No wall-clock thresholds.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections import Counter

import pytest

from emu.fabric.naming import random_cluster
from emu.interop import contract as C
from emu.interop import impls as I
from emu.interop import runner, wirecheck
from emu.interop.result import CaseResult, RunResult
from emu.interop.testcases import BY_NAME, select
from emu.wire.dissect import Record
from emu.wire.sample import write as write_sample

root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")


def _toml(tmp_path, text: str) -> str:
    p = tmp_path / "impls.toml"
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_implementations_file_errors_are_one_line(tmp_path):
    with pytest.raises(I.ImplError, match=r"\[x\] has no 'command'"):
        I.load(_toml(tmp_path, "[x]\ntransports = ['roce']\n"))
    with pytest.raises(I.ImplError, match=r"daemon must be"):
        I.load(_toml(tmp_path, "[x]\ncommand='a'\ntransports=['roce']\ndaemon='maybe'\n"))
    with pytest.raises(I.ImplError, match="unknown implementation 'nope'"):
        I.resolve(["nope"], I.load())
    with pytest.raises(ValueError, match="unknown test case 'bogus'"):
        select("handshake,bogus")


def test_shipped_file_lists_emu_and_variants():
    known = I.load()
    assert known["emu"].daemon == "emu" and {"roce", "uet"} <= set(known["emu"].transports)
    variants = [i for i in known.values() if "--uet-setting" in i.command]
    assert variants and all(i.daemon == "own" for i in variants)
    assert known["emu-mrc4791"].transports == ["mrc"] and known["emu-mrc4791"].daemon == "own"
    assert "mrc" in known["emu"].transports and "mrc" in known["emu-ref"].transports
    # the MRC settings where the reconstructions disagree (specs/mrc.md): SETH's M field
    # as the ECN echo, in emu (its own daemon) and in emu-ref (its environment) …
    mecn, ref_mecn = known["emu-mrc-mecn"], known["emu-ref-mrc-mecn"]
    assert "--mrc-setting m_field=ecn" in mecn.command and mecn.daemon == "own"
    assert ref_mecn.env["EMUREF_MRC_M_FIELD"] == "ecn" and ref_mecn.daemon == "own"
    assert mecn.transports == ref_mecn.transports == ["mrc"]
    # … and trimmed packets marked DSCP 9: the daemon takes it, the runner's switch writes it
    dscp9 = known["emu-mrc-dscp9"]
    assert "--trimmed-dscp 9" in dscp9.command and dscp9.trimmed_dscp == 9
    assert known["emu"].trimmed_dscp is None
    # … and the STEV split: emu and emu-ref each cut 16+16 and 12+20 (IPv6 only)
    for name, split in (("emu-mrc-stev", "16+16"), ("emu-mrc-stev20", "12+20@0xd000"),
                        ("emu-ref-stev", "16+16"), ("emu-ref-stev20", "12+20@0xd000")):
        assert known[name].mrc_ev == f"stev:{split}" and known[name].transports == ["mrc"]
    assert "mrc.ev_split=12+20@0xd000" in known["emu-mrc-stev20"].command
    assert known["emu-ref-stev20"].env["EMUREF_MRC_STEV_SPLIT"] == "12+20@0xd000"
    assert known["emu"].mrc_ev == "udp"


def _mrc(no: int, src: str, dst: str, sport: int, label: int | None, kind: str,
         **fields: int) -> Record:
    return Record(no, float(no), "h1-h2", src, dst, sport, 4971, "MRC", kind, dict(fields),
                  [], "ok", flow_label=label, raw=no.to_bytes(4, "big"))


def test_wirecheck_holds_each_ev_echo_against_the_ev_its_packet_was_sent_on(tmp_path):
    """A SACK or NACK must echo the EV the answered write carried as its sender placed it
    (udp: the source port; stev: port and flow label, the sender's split): a receiver
    cutting the EV another way fails the case, naming the packet."""
    c, s = "fd00::11", "fd00::12"
    ev = 0xD0000005  # 16+16: port 0xd000, label 5
    data = _mrc(1, c, s, 0xD000, 5, "MRC_WRITE_ONLY", psn=7, len=4096)
    good = _mrc(2, s, c, 0xD001, 0, "MRC_RELIABILITY_SACK", ack_psn=7, ev_echo=ev)
    # a 12+20 receiver rebuilds 0x5 from the same fields
    bad = _mrc(3, s, c, 0xD001, 0, "MRC_RELIABILITY_NACK", nack_psn=7, ev_echo=0x5)
    stray = _mrc(4, s, c, 0xD001, 0, "MRC_RELIABILITY_SACK", ack_psn=99, ev_echo=1)
    stev = {c: wirecheck.EvSpec.parse("stev:16+16")}
    for recs, wrong in (((data, good), 0), ((data, good, bad, stray), 1)):
        w, flows = wirecheck.Wire(ev_formats=stev), wirecheck._Flows()
        for r in recs:
            wirecheck.add(w, r, flows)
        assert (w.ev_echoes, w.ev_echo_wrong) == (len(recs) - 1 - (stray in recs), wrong)
    assert "psn=0x7 echoes EV 0x5, the packet was sent on 0xd0000005 (stev 16+16" in \
        w.ev_echo_first[0]
    assert "EV placement disagrees" in _why(w)
    # the UDP format (no mrc_ev): the EV is the source port, the flow label is not read
    w, flows = wirecheck.Wire(), wirecheck._Flows()
    for r in (data, _mrc(2, s, c, 1, 0, "MRC_RELIABILITY_SACK", ack_psn=7, ev_echo=0xD000)):
        wirecheck.add(w, r, flows)
    assert (w.ev_echoes, w.ev_echo_wrong) == (1, 0)
    with pytest.raises(I.ImplError, match="mrc_ev"):
        I.load(_toml(tmp_path, "[x]\ncommand='a'\ntransports=['mrc']\nmrc_ev='stev:9+9@1'\n"))


def _why(w: wirecheck.Wire) -> str:
    """What a case's whole check says of a capture that moved its bytes."""
    case = BY_NAME["handshake"]("s", "c")
    case.check_outputs = lambda: None  # type: ignore[method-assign]
    w.payload_bytes = 1 << 30
    return case.check(w) or ""


def test_an_implementations_trimmed_dscp_is_checked_and_reaches_the_trimming_switch(tmp_path):
    import emu.switch.topology  # noqa: F401  (the [switch] section's checker)
    from emu.interop import networks
    from emu.topology import load

    with pytest.raises(I.ImplError, match="trimmed_dscp must be a DSCP"):
        I.load(_toml(tmp_path, "[x]\ncommand='a'\ntransports=['mrc']\ntrimmed_dscp=64\n"))
    assert I.load(_toml(tmp_path, "[x]\ncommand='a'\ntransports=['mrc']\n"
                        "trimmed_dscp=9\n"))["x"].trimmed_dscp == 9
    path = networks.TRIMMING.topology_file(str(tmp_path), "xt", None, 9)
    sw = load(path, name="xt").switch
    assert (sw["trimmed_dscp"], sw["trimmed_lasthop"]) == (9, 9), sw
    # the other networks do not trim: the DSCP is left alone there
    assert "trimmed_dscp" not in open(networks.REORDERING.topology_file(
        str(tmp_path), "xr", None, 9)).read()
    assert "trimmed_dscp" not in open(networks.TRIMMING.topology_file(str(tmp_path), "xu")).read()


def test_wirecheck_counts_the_trimmed_dscp_it_is_told():
    from emu.interop.testcases import Trimming

    w = wirecheck.Wire()
    for no, dscp in enumerate((9, 30, 9)):
        wirecheck.add(w, _rec(no, no, dscp=dscp), wirecheck._Flows())
    assert w.trimmed == 1
    w9 = wirecheck.Wire(trimmed_dscps=(9,))
    for no, dscp in enumerate((9, 30, 9)):
        wirecheck.add(w9, _rec(no, no, dscp=dscp), wirecheck._Flows())
    assert w9.trimmed == 2
    assert "DSCP 9" in Trimming("s", "c").check_wire(wirecheck.Wire(trimmed_dscps=(9,)))


def test_own_nicd_passes_mrc_settings_and_trimmed_dscps_to_its_daemon(monkeypatch, tmp_path):
    """``--mrc-setting m_field=ecn`` configures emu.wire.mrc_defs in the daemon's process
    (MRC's engine then added beside RoCEv2 and UET), ``--trimmed-dscp`` reaches its
    command line; without either the daemon is what an ``emu@REF`` tree can run."""
    import subprocess

    from emu.interop import own_nicd

    seen: list[list[str]] = []

    class Fake:
        def __init__(self, argv, **kw):
            seen.append(argv)
            self.stdout = __import__("io").BytesIO(b"ready\n")
            self.returncode = 0

        def poll(self):
            return 0

        def wait(self, *a):
            return 0

    monkeypatch.setattr(subprocess, "Popen", Fake)
    monkeypatch.setattr(subprocess, "call", lambda cmd: 0)
    monkeypatch.setenv("EMU_CLUSTER", "c")
    monkeypatch.setenv("EMU_HOST", "h")
    monkeypatch.setenv("LOGDIR", str(tmp_path))
    assert own_nicd.main(["--mrc-setting", "m_field=ecn", "--trimmed-dscp", "9",
                          "--uet-setting", "use_rsv_pdc_bit=12", "--", "true"]) == 0
    argv = seen[-1]
    assert json.loads(argv[3]) == {"uet": {"use_rsv_pdc_bit": 12}, "mrc": {"m_field": "ecn"}}
    assert argv[argv.index("--trimmed-dscp") + 1] == "9"
    assert ["-t", "mrc"] == argv[argv.index("mrc") - 1:argv.index("mrc") + 1]
    assert own_nicd.main(["--uet-setting", "use_rsv_pdc_bit=12", "--", "true"]) == 0
    assert "mrc" not in seen[-1] and "--trimmed-dscp" not in seen[-1]
    # the daemon's prelude applies them (this process: restored after)
    from emu.wire import mrc_defs, uet_defs

    saved, saved_u = mrc_defs.settings(), {"use_rsv_pdc_bit": uet_defs.USE_RSV_PDC_BIT}
    prelude = own_nicd._DAEMON.split("from emu.nic import udp")[0]
    try:
        monkeypatch.setattr("sys.argv", ["-c", argv[3]])
        exec(prelude, {"__name__": "d"})
        assert mrc_defs.M_FIELD == "ecn" and uet_defs.USE_RSV_PDC_BIT == 12
    finally:
        mrc_defs.configure(**saved)
        uet_defs.configure(**saved_u)


def test_files_copied_into_an_emu_at_ref_tree_import_only_what_that_commit_has():
    """``emu@REF`` runs these files against REF's emu: an import of an emu module that
    REF lacks makes that side exit 1 for everything ("not compliant" on every case).
    Checked against the REF ``scripts/interop`` runs by default."""
    import ast
    import re
    import subprocess

    ref = re.search(r"emu@([0-9a-f]+)", open(os.path.join(I.REPO, "scripts/interop")).read())[1]
    copied = {f[:-3].replace("/", ".") for f in I.ENDPOINT_FILES}
    missing = []
    for rel in I.ENDPOINT_FILES:
        tree = ast.parse(open(os.path.join(I.REPO, rel)).read())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        for m in sorted(x for x in mods if x == "emu" or x.startswith("emu.")):
            if m in copied or f"{m}.__init__" in copied:
                continue
            path = m.replace(".", "/")
            if not any(subprocess.run(["git", "cat-file", "-e", f"{ref}:{p}"], cwd=I.REPO,
                                      capture_output=True).returncode == 0
                       for p in (f"{path}.py", f"{path}/__init__.py")):
                missing.append(f"{rel} imports {m}, which {ref} does not have")
    assert missing == []


def test_own_nicd_takes_udp_gro_from_a_daemon_older_than_the_cable_rule(monkeypatch):
    """emu@REF's daemon predates the rule "no UDP_GRO where the cable splits GSO": the
    wrapper withholds it (else the capture holds GRO super-frames with a bad ICRC)."""
    import types

    import emu.nic
    from emu.interop import own_nicd
    from emu.nic import udp

    prefix = own_nicd._DAEMON.split("from emu.nic.daemon")[0]
    run = {"__name__": "d"}
    monkeypatch.setattr("sys.argv", ["-c", "{}"])
    exec(prefix, run)
    assert udp.UDP_GRO == 104  # this tree's daemon: left to its own rule
    old = types.SimpleNamespace(UDP_GRO=104)  # a REF emu.nic.udp: no ``feature``
    monkeypatch.setattr(emu.nic, "udp", old)
    monkeypatch.setitem(__import__("sys").modules, "emu.nic.udp", old)
    exec(prefix, {"__name__": "d"})
    assert old.UDP_GRO != 104


def test_matrix_and_json_carry_every_result(tmp_path):
    res = RunResult(["a", "b"], ["a"], ["roce"], ["handshake", "read"])
    res.add(CaseResult("a", "a", "roce", "handshake", "succeeded"))
    res.add(CaseResult("b", "a", "roce", "handshake", "failed", "handshake: boom"))
    res.add(CaseResult("a", "a", "roce", "read", "unsupported"))
    text = res.compact()
    assert "✓" in text and "✕" in text and "?" in text
    md = res.markdown()
    assert "| handshake | ✓ | ✕ |" in md and "handshake: boom" in md
    res.write_json(str(tmp_path / "r.json"))
    d = json.loads((tmp_path / "r.json").read_text())
    assert [r["result"] for r in d["results"]] == ["succeeded", "failed", "unsupported"]
    assert d["pairs"] == ["a_a", "b_a"]


def test_wirecheck_counts_malformed_and_retransmissions(tmp_path):
    path = str(tmp_path / "s.pcapng")
    write_sample(path)
    w = wirecheck.summarise(path)
    assert w.transport_packets > 50 and not w.malformed and not w.bad_icrc
    # a garbage file is reported, not raised
    (tmp_path / "bad.pcapng").write_bytes(b"\x0a\x0d\x0d\x0a garbage")
    assert wirecheck.summarise(str(tmp_path / "bad.pcapng")).error


def _rec(no: int, psn: int, *, iface: str = "h1-h2", dscp: int = 0, raw: bytes | None = None,
         kind: str = "RC_WRITE_MIDDLE", retx: bool = False) -> Record:
    return Record(no, float(no), iface, "10.0.1.11", "10.0.1.12", 50000, 4791, "RoCEv2", kind,
                  {"qp": 0x11, "psn": psn, "len": 4096}, ["RETX"] if retx else [], "ok",
                  dscp=dscp, raw=raw if raw is not None else psn.to_bytes(4, "big"))


def _wire(*recs: Record) -> wirecheck.Wire:
    w, flows = wirecheck.Wire(), wirecheck._Flows()
    for r in recs:
        wirecheck.add(w, r, flows)
    return w


def test_wirecheck_tells_copies_reordering_retransmissions_and_trims_apart():
    # a link's copy: byte-equal to the packet just before it; not a retransmission
    w = _wire(_rec(1, 5), _rec(2, 5), _rec(3, 6), _rec(4, 6))
    assert (w.duplicates, w.retransmissions, w.reordered, w.payload_bytes) == (2, 0, 0, 8192)
    # the same PSN again after something else: a retransmission, not a copy
    w = _wire(_rec(1, 5), _rec(2, 6), _rec(3, 5))
    assert (w.duplicates, w.retransmissions, w.reordered) == (0, 1, 0)
    # below the highest but new: overtaken on the way (reordered); then resent
    w = _wire(_rec(1, 5), _rec(2, 7), _rec(3, 6), _rec(4, 6, raw=b"later"))
    assert (w.reordered, w.retransmissions - w.reordered, w.duplicates) == (1, 1, 0)
    # equal bytes on another interface are not a copy; PSNs wrap at 2^24
    w = _wire(_rec(1, 0xFFFFFF), _rec(2, 0xFFFFFF, iface="other"), _rec(3, 0))
    assert w.duplicates == 0 and w.reordered == 0
    # the network's reordering: requests matched by bytes across two links
    a, b, c, d = b"a", b"b", b"c", b"d"
    assert wirecheck.overtaking([a, b, c, d], [a, b, c, d]) == 0
    assert wirecheck.overtaking([a, b, c, d], [b, a, d, c]) == 2
    assert wirecheck.overtaking([a, b, c, d], [d, a, b, c]) == 3  # one held behind three
    assert wirecheck.overtaking([a, b, a], [a, a, b]) == 1  # the k-th copy is the k-th sent
    assert wirecheck.overtaking([a, b], [b, c]) == 0  # c never entered: not compared
    # the trimmed DSCPs (30 / 31) and nothing else
    w = _wire(_rec(1, 1, dscp=30), _rec(2, 2, dscp=31), _rec(3, 3, dscp=26))
    assert w.trimmed == 2


def test_network_case_checks_name_the_missing_reaction(tmp_path):
    """Each of the three network cases fails when its network did nothing visible."""
    args = (str(tmp_path / "s"), str(tmp_path / "c"))
    assert "no duplicated packet" in BY_NAME["duplication"](*args).check_wire(wirecheck.Wire())
    w = wirecheck.Wire(duplicates=3, server_duplicates=0)
    assert "counted no duplicate" in BY_NAME["duplication"](*args).check_wire(w)
    assert BY_NAME["duplication"](*args).check_wire(wirecheck.Wire(duplicates=3)) is None
    assert "out of order" in BY_NAME["reordering"](*args).check_wire(wirecheck.Wire())
    # compared across the links, only the network's reordering counts (not resent PSNs)
    assert "out of order" in BY_NAME["reordering"](*args).check_wire(
        wirecheck.Wire(overtook=0, reordered=5))
    assert BY_NAME["reordering"](*args).check_wire(wirecheck.Wire(overtook=2)) is None
    trim = BY_NAME["trimming"](*args)
    assert "no trimmed packet" in trim.check_wire(wirecheck.Wire(retransmissions=4))
    assert "none retransmitted" in trim.check_wire(wirecheck.Wire(trimmed=2))
    uet = wirecheck.Wire(trimmed=2, retransmissions=2, pdcs={1})
    assert "no NACK TRIMMED" in trim.check_wire(uet)
    uet.nack_reasons["TRIMMED_LASTHOP"] += 1
    assert trim.check_wire(uet) is None
    assert trim.check_wire(wirecheck.Wire(trimmed=2, retransmissions=2)) is None  # RoCE
    assert [c.network for c in (BY_NAME["reordering"], BY_NAME["trimming"])] == \
        ["reordering", "trimming"]
    # loss: a retransmission is owed only when the link dropped a transport packet
    loss = BY_NAME["loss"](*args)
    assert "dropped 3 transport packets" in loss.check_wire(wirecheck.Wire(link_dropped=3))
    assert "no retransmission" in loss.check_wire(wirecheck.Wire())  # not counted: owed
    assert loss.check_wire(wirecheck.Wire(link_dropped=0)) is None
    assert loss.check_wire(wirecheck.Wire(link_dropped=3, retransmissions=3)) is None


def test_case_check_fails_a_client_that_moved_nothing(tmp_path):
    """Outputs equal (the file was copied), but the capture holds no payload: ✕."""
    s, c = tmp_path / "s", tmp_path / "c"
    (s / "received").mkdir(parents=True)
    c.mkdir()
    case = BY_NAME["transfer-4k"](str(s), str(c))
    case.prepare()
    (s / "received" / "payload.bin").write_bytes((c / "payload.bin").read_bytes())
    why = case.check(wirecheck.Wire())
    assert why and "payload bytes on the wire" in why


# ---------------------------------------------------------------------------------------
# end to end (root)
# ---------------------------------------------------------------------------------------
SHELL_127 = "#!/bin/sh\nexit 127\n"
# exits 0 without moving data: the server copies the client's file (same machine)
CHEAT = """#!/bin/sh
case "$TESTCASE" in transfer-4k) ;; *) exit 127 ;; esac
if [ "$ROLE" = server ]; then cp "$DATA_DIR/../../client/data/payload.bin" "$DATA_DIR/received/"; fi
exit 0
"""
# emu's endpoint, but the client flips one byte of what it sends
CORRUPT = """#!/bin/sh
if [ "$ROLE" = client ] && [ -f "$DATA_DIR/payload.bin" ]; then
  mkdir -p "$LOGDIR/d" && cp "$DATA_DIR/payload.bin" "$LOGDIR/d/"
  # flip byte 100 (writing a fixed byte left the payload, random, unchanged 1 time in 256)
  python3 - "$LOGDIR/d/payload.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[100] ^= 0xFF
open(sys.argv[1], "wb").write(b)
PY
  DATA_DIR="$LOGDIR/d"; export DATA_DIR
fi
exec python3 -m emu.interop.endpoint
"""


@pytest.fixture
def impl_file(tmp_path):
    for name, text in (("none.sh", SHELL_127), ("cheat.sh", CHEAT), ("corrupt.sh", CORRUPT)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    return _toml(tmp_path, """
        [emu]
        command = "python3 -m emu.interop.endpoint"
        transports = ["roce", "uet", "mrc"]
        [none]
        command = "./none.sh"
        transports = ["roce"]
        [cheat]
        command = "./cheat.sh"
        transports = ["roce"]
        [corrupt]
        command = "./corrupt.sh"
        transports = ["roce", "mrc"]
        """)


def _clusters_left(prefix: str) -> list[str]:
    return [f for f in os.listdir("/run/emu") if f.startswith(prefix) and f.endswith(".json")] \
        if os.path.isdir("/run/emu") else []


@root
def test_emu_pairs_shell_and_broken_endpoints(impl_file, tmp_path):
    known = I.load(impl_file)
    log = str(tmp_path / "logs")
    prefix = random_cluster("io")  # its clusters' names start with it (conftest: logs)
    before = set(_clusters_left(prefix))
    res = runner.run([known["emu"]], [known["emu"], known["none"], known["corrupt"]], ["roce"],
                     select("handshake,transfer-4k,atomics"), log, timeout=30, prefix=prefix,
                     progress=lambda s: None)
    by = {(r.client, r.case): r for r in res.results}
    for case in ("handshake", "transfer-4k", "atomics"):
        assert by[("emu", case)].result == "succeeded", by[("emu", case)].reason
        assert by[("none", case)].symbol == "?", by[("none", case)]
    bad = by[("corrupt", "transfer-4k")]
    assert bad.symbol == "✕" and bad.reason.startswith("transfer-4k:") and "differs" in bad.reason
    assert by[("corrupt", "atomics")].symbol == "✓"  # nothing to corrupt there
    # and over MRC (its own transport entry): the corrupting client is ✕ too
    res = runner.run([known["emu"]], [known["emu"], known["corrupt"]], ["mrc"],
                     select("transfer-4k"), log, timeout=30, prefix=prefix,
                     progress=lambda s: None)
    by = {r.client: r for r in res.results}
    assert by["emu"].symbol == "✓", by["emu"].reason
    assert by["corrupt"].symbol == "✕" and "differs" in by["corrupt"].reason
    # what a run leaves: outputs, a capture that decodes, the daemons' traces
    d = os.path.join(log, "emu_emu", "roce", "transfer-4k")
    for f in ("capture.pcapng", "dissect.txt", "result.json", "server/output.txt",
              "client/output.txt", "nicd-h1.trace.jsonl", "nicd-h2.trace.jsonl"):
        assert os.path.exists(os.path.join(d, f)), f
    assert "RC_WRITE_ONLY" in open(os.path.join(d, "dissect.txt")).read()
    assert set(_clusters_left(prefix)) == before  # every cluster taken down


@root
def test_an_implementations_file_adds_to_the_shipped_ones(tmp_path):
    """README: ``scripts/interop -i mine.toml -s mine -c emu`` with only ``[mine]`` in the
    file. Stopped before any cluster by a bad transport, after the names resolved."""
    import subprocess
    import sys

    f = _toml(tmp_path, "[mine]\ncommand = './mine.sh'\ntransports = ['roce']\n")
    p = subprocess.run([sys.executable, "-m", "emu", "interop", "run", "-i", f, "-s", "mine",
                        "-c", "emu", "-T", "bogus"], capture_output=True, text=True,
                       cwd=I.REPO)
    assert p.returncode == 2 and "unknown transport(s) ['bogus']" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "emu", "interop", "run", "-i", f, "-s", "mine",
                        "-c", "nope", "-T", "roce"], capture_output=True, text=True,
                       cwd=I.REPO)
    assert p.returncode == 2 and "unknown implementation 'nope'" in p.stderr, p.stderr


@root
def test_exit_0_without_moving_data_fails(impl_file, tmp_path):
    known = I.load(impl_file)
    res = runner.run([known["cheat"]], [known["cheat"]], ["roce"], select("transfer-4k"),
                     str(tmp_path / "logs"), timeout=30, prefix=random_cluster("io"),
                     progress=lambda s: None)
    [r] = res.results
    assert r.symbol == "✕"
    assert r.reason.startswith("transfer-4k:") and "payload bytes on the wire" in r.reason


@root
def test_compliance_failure_marks_every_case(tmp_path):
    (tmp_path / "zero.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "zero.sh").chmod(0o755)
    known = I.load(_toml(tmp_path, "[zero]\ncommand='./zero.sh'\ntransports=['uet']\n"))
    res = runner.run([known["zero"]], [known["zero"]], ["uet"], select("handshake"),
                     str(tmp_path / "logs"), timeout=20, prefix=random_cluster("io"),
                     progress=lambda s: None)
    [r] = res.results
    assert r.symbol == "✕" and "not compliant" in r.reason and "must be 127" in r.reason
    assert C.EXIT_UNSUPPORTED == 127


@root
def test_duplication_reordering_trimming_emu_x_emu(tmp_path):
    """The three network cases, emu × emu, RoCEv2, UET and MRC: ✓, and the capture shows what
    the network did and how the transports reacted (copies; packets out of order at the
    server; trimmed packets, retransmissions and, for UET and MRC, NACK TRIMMED); the server's
    NIC daemon counted the duplicates; every cluster is taken down."""
    known = I.load()
    log = str(tmp_path / "logs")
    prefix = random_cluster("i2t")
    res = runner.run([known["emu"]], [known["emu"]], ["roce", "uet", "mrc"],
                     select("duplication,reordering,trimming,loss"), log, timeout=120,
                     prefix=prefix,
                     progress=lambda s: None)
    by = {(r.transport, r.case): r for r in res.results}
    for key, r in by.items():
        assert r.result == "succeeded", (key, r.reason, r.wire)
    for tr in ("roce", "uet", "mrc"):
        d = os.path.join(log, "emu_emu", tr)
        w = wirecheck.summarise(os.path.join(d, "duplication", "capture.pcapng"))
        assert w.duplicates > 0 and not w.malformed and not w.bad_icrc, w.describe()
        stats = json.load(open(os.path.join(d, "duplication", "nicd-h2.stats.json")))
        assert runner._dup_counters(stats, tr) > 0
        w = wirecheck.summarise(os.path.join(d, "reordering", "capture.pcapng"))
        assert w.overtook is None and w.trimmed == 0  # without the ingress: not compared
        w = wirecheck.summarise(os.path.join(d, "reordering", "capture.pcapng"),
                                judge="h2-leaf1", ingress="h1-leaf1")
        assert w.overtook > 0 and w.trimmed == 0, w.describe()
        assert "overtook an earlier packet" in by[(tr, "reordering")].wire
        w = wirecheck.summarise(os.path.join(d, "trimming", "capture.pcapng"))
        assert w.trimmed > 0 and w.retransmissions > 0 and not w.bad_icrc, w.describe()
        if tr in ("uet", "mrc"):
            assert any("TRIMMED" in k for k in w.nack_reasons), w.nack_reasons
        assert w.mrc == (tr == "mrc")
        if tr == "mrc":  # the client's NIC traced each packet's EV and the trims' NACKs
            recs = [json.loads(x) for x in open(os.path.join(d, "trimming",
                                                              "nicd-h1.trace.jsonl"))]
            sent = [r["data"] for r in recs if r.get("name") == "packet_sent"]
            assert sent and all("ev" in x for x in sent)
            assert any(r.get("name") == "nack_received" and r["data"]["reason"] == "TRIMMED"
                       for r in recs)
        assert "trimmed" in by[(tr, "trimming")].wire  # the switch's own count
        # the runner counted what the impaired cable dropped (and removed its counters)
        assert "dropped by the link client → server" in by[(tr, "loss")].wire
        assert "0 dropped by the link" in by[(tr, "duplication")].wire
    assert _clusters_left(prefix) == []


@root
def test_a_relative_log_dir_reaches_implementations_as_absolute_paths(tmp_path):
    """``--log-dir logs`` from any working directory: the implementations run elsewhere
    (their own directory; a linux-rxe guest sees them through 9p at the same paths), so
    ``$DATA_DIR`` and ``$LOGDIR`` must be absolute and exist — a relative one named
    nothing in the guest and every case of CI's rxe matrix failed."""
    import subprocess
    import sys

    f = _toml(tmp_path, "[envecho]\ncommand = 'echo \"$DATA_DIR $LOGDIR\" >> "
              f"{tmp_path}/seen.txt; exit 127'\ntransports = ['roce']\n")
    p = subprocess.run([sys.executable, "-m", "emu", "interop", "run", "-i", f, "-s",
                        "envecho", "-c", "envecho", "-T", "roce", "-t", "handshake",
                        "--log-dir", "rel-logs", "--prefix", random_cluster("io")],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": I.REPO})
    assert p.returncode == 0, p.stderr[-2000:]
    seen = [line.split() for line in (tmp_path / "seen.txt").read_text().splitlines()]
    assert seen and all(os.path.isabs(d) and os.path.isabs(lg) for d, lg in seen), seen
    assert all(d.startswith(str(tmp_path / "rel-logs")) for d, _ in seen), seen


def test_mrc_cases_ask_for_writes_with_immediate_where_the_others_ask_for_sends():
    """MRC has no SEND (docs/interop.md §5): its handshake and sendrecv are WRITEs with
    immediate, and a capture of MRC WRITEs without one fails them; RoCEv2's still needs
    a SEND."""
    from emu.interop.testcases import Handshake, SendRecv

    for case in (Handshake, SendRecv):
        t = case("s", "c")
        assert t.check_wire(wirecheck.Wire(mrc=True, types=Counter(
            {"MRC_WRITE_ONLY_IMM": 1}))) is None
        assert "WRITE_ONLY_IMM" in t.check_wire(wirecheck.Wire(mrc=True, types=Counter(
            {"MRC_WRITE_ONLY": 1, "MRC_RELIABILITY_SACK": 1})))
    assert Handshake("s", "c").check_wire(wirecheck.Wire(types=Counter(
        {"RDMA_WRITE_ONLY_WITH_IMMEDIATE": 1}))) == "no SEND request on the wire"


@root
def test_mrcs_port_is_a_setting_emu_on_4791_against_emu_ref_on_4971(tmp_path):
    """The spec page's MRC port (4791) against the reconstructions' (4971): emu serving
    MRC alone on 4791 (``emu-mrc4791``, its own daemon) and emu-ref on 4971 pass a
    transfer both ways, each sending to the port the other's connection object names."""
    from emu.wire.dissect import dissect_file

    known = I.load()
    log = str(tmp_path / "logs")
    prefix = random_cluster("i4")
    res = runner.run([known["emu-mrc4791"], known["emu-ref"]],
                     [known["emu-ref"], known["emu-mrc4791"]], ["mrc"], select("transfer-1m"),
                     log, timeout=60, prefix=prefix, progress=lambda s: None)
    by = {(r.server, r.client): r for r in res.results}
    for pair in (("emu-mrc4791", "emu-ref"), ("emu-ref", "emu-mrc4791")):
        assert by[pair].result == "succeeded", (pair, by[pair].reason)
    pcap = os.path.join(log, "emu-mrc4791_emu-ref", "mrc", "transfer-1m", "capture.pcapng")
    ports = Counter((r.dst, r.dport) for r in dissect_file(pcap) if r.protocol == "MRC")
    # WRITEs to the emu server on 4791, its SACKs and ACKs to emu-ref's 4971
    assert ports[("10.0.1.12", 4791)] >= 256 and ports[("10.0.1.11", 4971)] >= 256, ports
    assert _clusters_left(prefix) == []


@root
def test_mrcs_m_field_as_ecn_echo_emu_against_emu_ref_and_dscp9_trimming(tmp_path):
    """specs/mrc.md's other readings as variants: SETH M = the ECN echo in emu
    (``emu-mrc-mecn``, its own daemon) and in emu-ref (``emu-ref-mrc-mecn``) pass the
    trimming case both ways (a switch that trims and CE-marks; emu's data is ECT), and
    ``emu-mrc-dscp9``, receiving from emu-ref, gets its trimmed packets marked DSCP 9 by
    the runner's switch and NACKs them."""
    from emu.wire.dissect import dissect_file

    known = I.load()
    log = str(tmp_path / "logs")
    prefix = random_cluster("i9")
    mecn = [known["emu-mrc-mecn"], known["emu-ref-mrc-mecn"]]
    res = runner.run(mecn, mecn[::-1], ["mrc"], select("trimming"), log, timeout=90,
                     prefix=prefix, progress=lambda s: None)
    res9 = runner.run([known["emu-mrc-dscp9"]], [known["emu-ref"]], ["mrc"],
                      select("trimming"), log, timeout=90, prefix=prefix + "d",
                      progress=lambda s: None)
    by = {(r.server, r.client): r for r in res.results + res9.results}
    for pair in (("emu-mrc-mecn", "emu-ref-mrc-mecn"), ("emu-ref-mrc-mecn", "emu-mrc-mecn"),
                 ("emu-mrc-dscp9", "emu-ref")):
        assert by[pair].result == "succeeded", (pair, by[pair].reason)
    pcap = os.path.join(log, "emu-mrc-dscp9_emu-ref", "mrc", "trimming", "capture.pcapng")
    dscps = Counter(r.dscp for r in dissect_file(pcap) if r.protocol == "MRC"
                    and "WRITE" in r.type)
    assert dscps[9] > 0 and dscps[30] == dscps[31] == 0, dscps
    assert _clusters_left(prefix) == [] and _clusters_left(prefix + "d") == []


@root
def test_the_stev_split_is_a_setting_pairs_that_cut_alike_pass_and_others_fail(tmp_path):
    """specs/mrc.md's two STEV splits, over IPv6: emu and emu-ref both cutting 12+20 agree
    on the wire (every EV echo names the EV its packet was sent on), emu at 16+16 against
    emu-ref at 12+20 moves the data but fails on its echoes; over IPv4 STEV is "?"."""
    known = I.load()
    log = str(tmp_path / "logs")
    prefix = random_cluster("i6")
    res = runner.run([known["emu-mrc-stev20"], known["emu-ref-stev20"]],
                     [known["emu-ref-stev20"], known["emu-mrc-stev"]], ["mrc"],
                     select("transfer-1m"), log, timeout=90, prefix=prefix, family=6,
                     progress=lambda s: None)
    by = {(r.server, r.client): r for r in res.results}
    assert by[("emu-mrc-stev20", "emu-ref-stev20")].result == "succeeded", \
        by[("emu-mrc-stev20", "emu-ref-stev20")].reason
    assert by[("emu-ref-stev20", "emu-mrc-stev")].result == "failed"
    assert "EV placement disagrees" in by[("emu-ref-stev20", "emu-mrc-stev")].reason
    assert "(stev 16+16 at " in by[("emu-ref-stev20", "emu-mrc-stev")].reason
    res4 = runner.run([known["emu-ref-stev20"]], [known["emu-mrc-stev20"]], ["mrc"],
                      select("handshake"), log, timeout=60, prefix=prefix + "v",
                      progress=lambda s: None)
    assert res4.results[0].result == "unsupported", res4.results[0].reason
    assert _clusters_left(prefix) == [] and _clusters_left(prefix + "v") == []

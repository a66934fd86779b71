# SPDX-License-Identifier: GPL-2.0-only
"""emu perf --from/--to across a running cluster (emu.apps.perf.cluster), without one."""

from __future__ import annotations


def test_a_cluster_without_nic_daemons_is_named_as_the_cause(monkeypatch):
    """`emu up --no-daemons` then `emu perf --from h1 --to h2`: the error says the cluster
    runs no daemons (it said "no NIC daemon serves this namespace", from inside h1)."""
    import pytest

    from emu.apps.perf import cluster as PC
    from emu.apps.perf.options import UsageError
    from emu.nic import protocol

    hosts: list[str] = []
    monkeypatch.setattr(protocol, "daemon_hosts", lambda c: hosts)
    with pytest.raises(UsageError, match="runs no NIC daemons.*--no-daemons"):
        PC.require_daemons("c1", "h1", "h2")
    hosts.append("h1")
    with pytest.raises(UsageError, match="no NIC daemon was started on h2"):
        PC.require_daemons("c1", "h1", "h2")
    hosts.append("h2")
    PC.require_daemons("c1", "h1", "h2")


def test_the_daemon_hosts_are_the_sockets_that_listen(tmp_path):
    from emu.nic.protocol import daemon_hosts

    assert daemon_hosts("c1", str(tmp_path)) == []  # no directory: none
    (tmp_path / "c1").mkdir()
    for f in ("h2.sock", "h1.sock", "h1.log"):
        (tmp_path / "c1" / f).touch()
    assert daemon_hosts("c1", str(tmp_path)) == ["h1", "h2"]


def test_a_daemon_the_state_file_records_as_dead_is_named_before_any_server_starts(
        monkeypatch):
    """``kill -9`` of nicd h2 leaves its socket, so it still looked started; the server then
    failed on it ("cannot open the NIC daemon: [Errno 111] Connection refused", "the
    server on h2 failed"). The state file says the daemon is gone: that is the error."""
    import pytest

    from emu.apps.perf import cluster as PC
    from emu.apps.perf.options import UsageError
    from emu.fabric import state
    from emu.nic import protocol

    monkeypatch.setattr(protocol, "daemon_hosts", lambda c: ["h1", "h2"])
    st = {"cluster": "c1", "phase": "up",
          "pids": [{"pid": 1, "start": 1, "what": "nicd h1"},
                   {"pid": 4242, "start": 7, "what": "nicd h2"}]}
    monkeypatch.setattr(state, "load", lambda c: st if c == "c1" else None)
    monkeypatch.setattr(state, "alive", lambda pid, start: pid != 4242)
    with pytest.raises(UsageError) as e:
        PC.require_daemons("c1", "h1", "h2")
    assert str(e.value) == ("nicd h2 of cluster c1 is not running (pid 4242 exited); see "
                            "`emu status c1`")
    PC.require_daemons("c1", "h1")  # h1's is alive


def test_setup_errors_with_json_are_a_json_document(capsys):
    """``--from/--to`` errors before anything starts (no such cluster; not root) were
    plain text with --json; now stdout is the error document, stderr the line, exit 2."""
    import json

    from emu.cli import main

    assert main(["perf", "write-bw", "--from", "fcnone:h1", "--to", "fcnone:h2",
                 "--json"]) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["passed"] is False and doc["exit_status"] == 2 and doc["test"] == "write-bw"
    assert err == f"emu perf: {doc['error']}\n"
    assert "fcnone" in doc["error"] or "root" in doc["error"]

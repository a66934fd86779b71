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

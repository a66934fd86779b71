# SPDX-License-Identifier: GPL-2.0-only
"""emu perf --from/--to across a running cluster (emu.apps.perf.cluster), without one."""

from __future__ import annotations


def test_a_cluster_without_nic_daemons_is_named_as_the_cause(monkeypatch):
    """`emu up --no-daemons` then `emu perf --from h1 --to h2`: the error says the cluster
    runs no daemons (it said "no NIC daemon serves this namespace", from inside h1)."""
    import pytest

    from emu.apps.perf import cluster as PC
    from emu.apps.perf.options import UsageError
    from emu.fabric import state

    pids = [{"pid": 7, "what": "switchd leaf1"}]
    monkeypatch.setattr(state, "load", lambda c: {"pids": pids})
    with pytest.raises(UsageError, match="runs no NIC daemons.*--no-daemons"):
        PC.require_daemons("c1", "h1", "h2")
    pids.append({"pid": 8, "what": "nicd h1"})
    with pytest.raises(UsageError, match="no NIC daemon was started on h2"):
        PC.require_daemons("c1", "h1", "h2")
    pids.append({"pid": 9, "what": "nicd h2"})
    PC.require_daemons("c1", "h1", "h2")

# SPDX-License-Identifier: GPL-2.0-only
"""A cluster is started from its plan: the state file keeps it, the NIC daemons run with
its arguments, ``emu status`` shows its time scale, and ``emu up --dry-run`` printed the
very same plan beforehand. The cluster is removed also when a check fails
(:func:`fabric_util.pair_cluster`)."""

from __future__ import annotations

import json

from fabric_util import REAL_TIME, emu_cli, pair_cluster

from emu.fabric import state
from emu.plan import Plan


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def test_up_starts_every_daemon_from_the_plan_it_keeps_and_dry_run_printed():
    with pair_cluster("pl", "--set", "link.rate=300mbit") as name:
        st = state.load(name)
        assert st is not None
        plan = Plan.from_dict(st["plan"])
        assert set(plan.nics) == {"h1", "h2"}
        assert st["serializers"] == plan.serializers
        assert st["credible"] == plan.credible
        nicd = {p["what"].split()[1]: p["pid"] for p in st["pids"]
                if p.get("what", "").startswith("nicd ")}
        assert set(nicd) == set(plan.nics)
        for host, pid in nicd.items():
            argv = _cmdline(pid)
            i = argv.index("--host")
            assert argv[i + 1] == host
            assert tuple(argv[i + 2:]) == plan.nics[host].args
        assert "--line-rate" in plan.nics["h1"].args
        assert "eth0=300000000" in plan.nics["h1"].args

        dry = emu_cli("up", "namespaces/pair.toml", "--dry-run", "--json", "--name", name,
                      *REAL_TIME, "--set", "link.rate=300mbit")
        assert json.loads(dry.stdout) == st["plan"]

        s = json.loads(emu_cli("status", name, "--json").stdout)
        assert s["time"]["scale"] == 1
        text = emu_cli("status", name).stdout
        assert "time scale 1: manual: time scale 1 (real time)" in text


#: every function that derives a setting from the topology (credible/, switch/, nic/):
#: once the plan is made, ``emu up`` calls none of them
DERIVATIONS = {
    "emu.credible.capacity": ("fit", "propose", "switches_on_path", "datapaths", "mtu_of",
                              "hosts_per_daemon"),
    "emu.credible.rates": ("host_ports", "base_rtt", "serializers", "serialized",
                           "longest_path", "switching"),
    "emu.switch.topology": ("configs", "enabled", "user_space"),
    "emu.switch.kernel": ("predict", "reasons"),
    "emu.nic.topology": ("daemon_args", "coalesce_arg", "sched_arg", "workers", "worker_of"),
}


def test_up_from_a_plan_derives_nothing_from_the_topology(monkeypatch):
    """With the switch pipeline (its daemons start, from the plan's configurations)."""
    import importlib
    from pathlib import Path

    from fabric_util import ROOT, ns_of_cluster

    from emu.cluster import cluster as C
    from emu.fabric.naming import random_cluster
    from emu.plan import build
    from emu.topology import load

    topo = load(ROOT / "namespaces" / "leaf-spine.toml", ["switch.pipeline=true",
                                                          "switch.port.rate=100mbit"])
    plan = build(topo)
    called: list[str] = []
    for mod, names in DERIVATIONS.items():
        m = importlib.import_module(mod)
        for fn in names:
            def refuse(*a, _what=f"{mod}.{fn}", **k):
                called.append(_what)
                raise AssertionError(f"emu up derived {_what} again")
            monkeypatch.setattr(m, fn, refuse)
    name = random_cluster("pd")
    try:
        C.up(topo, name, schedule=False, daemons=False, progress=lambda m: None, plan=plan)
        st = state.load(name)
        assert st is not None and st["plan"] == plan.to_dict()
        assert {p["what"] for p in st["pids"]} == {f"switchd {s}" for s in plan.switches}
    finally:
        monkeypatch.undo()
        if state.load(name) is not None:
            C.down(name)
        Path(C.event_log(name)).unlink(missing_ok=True)
        assert ns_of_cluster(name) == [] and state.load(name) is None
    assert called == []

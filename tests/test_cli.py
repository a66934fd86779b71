# SPDX-License-Identifier: GPL-2.0-only
"""The ``emu`` command's table of contents: each command comes from the module the table
names (``emu CMD`` imports only that one), and ``emu status`` stays light."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path

from emu import cli

ROOT = Path(__file__).resolve().parent.parent


def test_each_module_registers_exactly_the_commands_the_table_gives_it():
    for module, commands in cli.OWNERS.items():
        p = argparse.ArgumentParser()
        sub = p.add_subparsers(dest="command")
        importlib.import_module(module).add_cli(sub)
        assert tuple(sub.choices) == commands, module
    full = cli.build_parser()
    names = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert list(names) == [c for cs in cli.OWNERS.values() for c in cs]


def test_a_cluster_command_does_not_import_scapy_or_the_transports():
    code = ("import sys; from emu import cli; cli.build_parser('status'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scapy' "
            "or m.startswith('emu.transports')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]", out


def test_commands_that_load_a_topology_check_its_switch_and_nic_sections(tmp_path):
    """``emu CMD`` imports only CMD's module; the [switch]/[nic] checkers must still be there
    (regression: ``emu doctor FILE`` refused every file with a [switch] table)."""
    for args in (["doctor", "namespaces/leaf-spine.toml", "--set", "switch.port.rate=50mbit"],
                 ["graph", "namespaces/leaf-spine.toml", "--set", "switch.port.rate=1gbit",
                  "--set", "nic.line_rate=1gbit", "-o", str(tmp_path / "g.dot")]):
        p = subprocess.run([sys.executable, "-m", "emu", *args], capture_output=True,
                           text=True, cwd=ROOT)
        assert "checker is not loaded" not in p.stderr + p.stdout, (args, p.stderr)
        assert p.returncode == 0, (args, p.stderr)
    bad = subprocess.run([sys.executable, "-m", "emu", "doctor", "namespaces/leaf-spine.toml",
                          "--set", "switch.port.bogus=1"], capture_output=True, text=True,
                         cwd=ROOT)
    assert bad.returncode == 2 and "bogus" in bad.stderr, bad.stderr


def test_nicd_stats_names_a_missing_cluster_or_host_in_one_line(tmp_path):
    """Like every cluster command: one line and exit 2, never a traceback or a raw errno."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EMU_NIC_SOCK": ""}
    for args, says in ((["--cluster", "nosuch-zz", "--host", "h1"], "no cluster 'nosuch-zz'"),
                       (["nosuch-zz"], "no cluster 'nosuch-zz'"),  # as `emu status C` takes it
                       (["nosuch-zz:h1"], "no cluster 'nosuch-zz'"),
                       (["nosuch-zz", "--cluster", "other"], "disagree"),
                       (["--sock", str(tmp_path / "none.sock")], "No such file")):
        p = subprocess.run([sys.executable, "-m", "emu", "nicd", "stats", *args],
                           capture_output=True, text=True, cwd=ROOT, env=env)
        assert p.returncode in (1, 2), p
        assert says in p.stdout + p.stderr, p
        assert "Traceback" not in p.stderr, p.stderr

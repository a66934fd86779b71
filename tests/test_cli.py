# SPDX-License-Identifier: GPL-2.0-only
"""The ``emu`` command's table of contents: each command comes from the module the table
names (``emu CMD`` imports only that one), and ``emu status`` stays light."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from emu import cli


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

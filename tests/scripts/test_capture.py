# SPDX-License-Identifier: GPL-2.0-only
"""``scripts/capture.sh``'s arguments, as the ``emu capture`` it runs receives them (a fake
``emu`` through ``$EMU`` that prints its argv: no root, no cluster)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "capture.sh"


def capture_sh(fake_emu: Path, *args: str) -> list[str]:
    p = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "EMU": str(fake_emu)})
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


@pytest.mark.parametrize("args, argv", [
    # the target left out, options right after OUT: the target is all (it took --cluster)
    (["c.pcapng", "--cluster", "X", "--duration", "2"],
     ["capture", "all", "-w", "c.pcapng", "--cluster", "X", "--duration", "2"]),
    (["c.pcapng", "-c", "X"], ["capture", "all", "-w", "c.pcapng", "-c", "X"]),
    (["c.pcapng"], ["capture", "all", "-w", "c.pcapng"]),
    (["c.pcapng", ""], ["capture", "all", "-w", "c.pcapng"]),
    (["c.pcapng", "leaf1-spine1", "--cluster", "X"],
     ["capture", "leaf1-spine1", "-w", "c.pcapng", "--cluster", "X"]),
    (["c.pcapng", "h1", "--duration", "1"], ["capture", "h1", "-w", "c.pcapng", "--duration", "1"]),
])
def test_the_target_is_optional_and_options_pass_through(fake_emu, args, argv):
    assert capture_sh(fake_emu, *args) == argv


def test_without_out_it_says_its_usage(fake_emu):
    p = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "EMU": str(fake_emu)})
    assert p.returncode != 0 and "usage: capture.sh OUT.pcapng" in p.stderr and p.stdout == ""

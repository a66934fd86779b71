# SPDX-License-Identifier: GPL-2.0-only
"""``scripts/cluster-down.sh``: which ``emu`` command it runs, seen through a fake ``emu``
(``$EMU``) that prints its argv — the real one with ``--all`` would tear down every
cluster on the machine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster-down.sh"


@pytest.mark.parametrize("args, argv", [
    # "all of them with --all": `emu clean` without --all leaves healthy clusters up
    (["--all"], ["clean", "--all"]),
    (["c1"], ["down", "c1"]),
    ([], ["down"]),
])
def test_runs_the_emu_command_it_says(fake_emu, args, argv):
    p = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "EMU": str(fake_emu)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == argv

# SPDX-License-Identifier: GPL-2.0-only
"""The tree passes ``ruff check`` with the project's own settings (``[tool.ruff]`` in
``pyproject.toml``): ruff is a test dependency, so CI fails on what it finds instead of
leaving it to whoever runs it next."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_tree_passes_ruff() -> None:
    r = ruff(".")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-1000:]


def test_ruff_reports_a_long_line(tmp_path: Path) -> None:
    """The check runs with the project's settings and fails on what they forbid."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text(f'X = "{"x" * 120}"\n')
    r = ruff(".", cwd=tmp_path)
    assert r.returncode != 0 and "E501" in r.stdout, r.stdout

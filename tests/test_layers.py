# SPDX-License-Identifier: GPL-2.0-only
"""emu's layer contract holds, and it would catch the mistakes it exists for.

The contract is ``[tool.importlinter]`` in ``pyproject.toml`` (import-linter:
packages import only downward, the transports are independent, ``emu.core``
and the transports, CC and path plug-ins are sans-IO, the wire codecs never
reach scapy). This file runs it with the suite, so CI fails on a violation,
and checks what a static contract cannot say: no import cycle between
packages at any depth, no dynamic import in the sans-IO packages, and no
scapy *loaded* by importing the daemons' hot path (lazy imports inside
scapy-facing helpers are fine there).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Mapping, Set
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the tree at ``root`` (its pyproject.toml, its ``emu``)."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin"})


def test_layer_contract_is_kept() -> None:
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "BROKEN" not in r.stdout and r.stdout.count("KEPT") == 4, r.stdout[-4000:]


# (module file to edit, line appended to it, the contract that must break)
VIOLATIONS = {
    "upward": ("emu/topology/units.py", "import emu.fabric.state", "import only downward"),
    "sideways": ("emu/nic/protocol.py", "import emu.switch.client", "import only downward"),
    "transport on transport": ("emu/transports/uet/verbs.py",
                               "import emu.transports.roce.qp", "independent of each other"),
    "clock in core": ("emu/core/psn.py", "def f():\n    import time", "sans-IO"),
    "socket in a CC plug-in": ("emu/cc/nscc.py", "import socket", "sans-IO"),
    "scapy in the capture reader": ("emu/wire/pcapio.py",
                                    "def f():\n    from scapy.packet import Raw",
                                    "never reach scapy"),
}


@pytest.mark.parametrize("case", VIOLATIONS)
def test_contract_catches_a_violation(tmp_path: Path, case: str) -> None:
    """The same contract on a copy of emu with one bad import added breaks, naming it."""
    path, line, contract = VIOLATIONS[case]
    shutil.copytree(ROOT / "emu", tmp_path / "emu", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / path, "a") as f:
        f.write(f"\n\n{line}\n")
    r = lint_imports(tmp_path)
    assert r.returncode != 0, r.stdout[-3000:]
    broken = r.stdout[r.stdout.index("Broken contracts"):]
    assert contract in broken, broken[:3000]
    assert r.stdout.count("BROKEN") == 1, r.stdout[-3000:]


# -- no cycle between packages (import-linter's acyclic_siblings also counts module cycles) --


def package_cycles(children: Mapping[str, Set[str]], packages: Set[str],
                   imports: Mapping[str, Set[str]]) -> list[list[str]]:
    """Import cycles among the children of each package that pass through a subpackage.

    ``children``: package → its direct children; ``imports``: module → modules it imports
    (a package's own ``__init__`` is the package). A child stands for itself and all its
    descendants. Cycles made only of plain modules of one package are that package's own
    business; a cycle through a subpackage couples two packages."""
    def child_of(parent: str, module: str) -> str | None:
        if not module.startswith(parent + "."):
            return None
        return parent + "." + module[len(parent) + 1:].split(".")[0]

    found = []
    for parent, kids in sorted(children.items()):
        edges: dict[str, set[str]] = {k: set() for k in kids}
        for m, targets in imports.items():
            a = child_of(parent, m)
            if a is None:
                continue
            for t in targets:
                b = child_of(parent, t)
                if b is not None and b != a:
                    edges[a].add(b)
        for comp in _strongly_connected(edges):
            if len(comp) > 1 and any(c in packages for c in comp):
                found.append(sorted(comp))
    return found


def _strongly_connected(edges: Mapping[str, Set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_packages() -> None:
    g = grimp.build_graph("emu")
    packages = {m for m in g.modules if g.find_children(m)}
    children = {p: set(g.find_children(p)) for p in packages}
    imports = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert len(packages) >= 15, sorted(packages)
    assert package_cycles(children, packages, imports) == []


def test_cycle_check_catches_package_cycles_only() -> None:
    children = {"e": {"e.a", "e.b", "e.m", "e.n"}, "e.a": {"e.a.x"}, "e.b": {"e.b.y"}}
    packages = {"e", "e.a", "e.b"}
    modules_only = {"e.m": {"e.n"}, "e.n": {"e.m"}, "e.a.x": {"e.b.y"}}
    assert package_cycles(children, packages, modules_only) == []
    through_packages = {**modules_only, "e.b.y": {"e.m"}, "e.m": {"e.a.x"}}
    assert package_cycles(children, packages, through_packages) == [["e.a", "e.b", "e.m"]]


# -- what the contract cannot see --------------------------------------------------------


SANS_IO = ("core", "transports", "cc", "paths")


def dynamic_imports(directory: Path) -> list[str]:
    """``__import__``/``import_module`` calls in the modules under ``directory``:
    import-linter sees only import statements, so a dynamic import would slip past the
    sans-IO rule."""
    bad = []
    for f in sorted(directory.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Call) and (
                    getattr(node.func, "id", None) == "__import__"
                    or getattr(node.func, "attr", None) == "import_module"):
                bad.append(f"{f.relative_to(directory)}:{node.lineno}")
    return bad


@pytest.mark.parametrize("package", SANS_IO)
def test_sans_io_packages_import_nothing_dynamically(package: str) -> None:
    d = ROOT / "emu" / package
    assert len(list(d.rglob("*.py"))) >= 4, d
    assert dynamic_imports(d) == []


def test_dynamic_import_check_catches_both_forms(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("m = __import__('trio')\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("import importlib\nr = importlib.import_module('x')\n")
    (tmp_path / "ok.py").write_text("import os\n")
    assert dynamic_imports(tmp_path) == ["a.py:1", "sub/b.py:2"]


def test_hot_path_and_dissect_load_no_scapy() -> None:
    """Importing the codecs, ICRC, EV placement and ``emu dissect`` loads no scapy (the
    contract forbids the codecs any path to scapy; ``ev`` and ``dissect`` may reach it
    lazily, from helpers for scapy packets, but must not load it on import)."""
    code = (
        "import sys\n"
        "import emu.wire, emu.wire.codec.roce, emu.wire.codec.mrc, emu.wire.codec.uet\n"
        "import emu.wire.icrc, emu.wire.ev, emu.wire.dissect, emu.wire.summary\n"
        "loaded = sorted(m for m in sys.modules if m == 'scapy' or m.startswith('scapy.'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

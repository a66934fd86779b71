# SPDX-License-Identifier: GPL-2.0-only
"""The sans-IO rule for emu.core: no trio, socket, scapy, time or random imports."""

import ast
import pathlib

FORBIDDEN = {"trio", "socket", "scapy", "time", "random", "asyncio", "selectors"}

CORE = pathlib.Path(__file__).resolve().parent.parent / "emu" / "core"


def forbidden_imports(directory: pathlib.Path) -> list[str]:
    """Every import of a FORBIDDEN top-level module in ``directory``'s .py files,
    including imports inside functions and ``__import__``/``import_module`` calls."""
    bad = []
    for f in sorted(directory.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            elif isinstance(node, ast.Call) and (
                    getattr(node.func, "id", None) == "__import__"
                    or getattr(node.func, "attr", None) == "import_module"):
                bad.append(f"{f.name}:{node.lineno} dynamic import")
                continue
            else:
                continue
            bad += [f"{f.name}:{node.lineno} {n}" for n in names
                    if n.split(".")[0] in FORBIDDEN]
    return bad


def test_core_imports_no_io_or_clock_or_randomness():
    """DESIGN.md's sans-IO rule, checked on the source rather than sys.modules
    (which any other import pollutes): no module in emu.core imports these."""
    names = {f.name for f in CORE.glob("*.py")}
    assert names >= {"psn.py", "sack.py", "reorder.py", "memory.py", "cq.py", "trace.py",
                     "timers.py"}
    bad = forbidden_imports(CORE)
    assert not bad, bad


def test_the_checker_catches_each_form(tmp_path):
    (tmp_path / "a.py").write_text("import time\n")
    (tmp_path / "b.py").write_text("def f():\n    from random import Random\n")
    (tmp_path / "c.py").write_text("import os.path, socket as s\n")
    (tmp_path / "d.py").write_text("m = __import__('trio')\n")
    (tmp_path / "e.py").write_text("from scapy.all import IP\nfrom . import time\n")
    (tmp_path / "ok.py").write_text("import timeit_like_name\nimport os\n")
    bad = forbidden_imports(tmp_path)
    assert [b.split(":")[0] for b in bad] == ["a.py", "b.py", "c.py", "d.py", "e.py"]

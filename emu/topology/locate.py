# SPDX-License-Identifier: GPL-2.0-only
"""Where a key lives: TOML key paths → line numbers, and one-line error locations.

tomllib reports positions only for syntax errors. For semantic errors (an
unknown node in ``link[3].b``) users still want a line number, so this module
scans the text once and maps each key path to the line that defines it. It is
a heuristic (multi-line strings can fool it); when it finds nothing the
message still names the key path, which is always exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from emu.topology.model import TopologyError

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")


def _split_key(key: str) -> list[str]:
    return [part.strip().strip("\"'") for part in key.split(".")]


def toml_syntax(source: str, err: Exception) -> tuple[str, str]:
    """Where a ``tomllib.TOMLDecodeError`` points (``source:line:column``, or ``source``
    when it names no position) and its message on one line, for ``TopologyError`` and
    ``ScenarioError`` alike: tomllib puts the position at the end of the message."""
    m = re.search(r"\(at line (\d+), column (\d+)\)", str(err))
    msg = re.sub(r"\s*\(at line.*\)", "", str(err)).replace("\n", " ")
    return (f"{source}:{m.group(1)}:{m.group(2)}" if m else source), f"TOML syntax: {msg}"


def line_index(text: str) -> dict[str, int]:
    """Map key paths (``link[2].a_to_b.rate``, 0-based arrays) to 1-based line numbers."""
    index: dict[str, int] = {}
    arrays: dict[str, int] = {}
    prefix = ""
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _HEADER.match(line)
        if m:
            parts = _split_key(m.group(2))
            path = ""
            for i, part in enumerate(parts):
                path = f"{path}.{part}" if path else part
                last = i == len(parts) - 1
                if last and m.group(1) == "[[":
                    arrays[path] = arrays.get(path, -1) + 1
                if path in arrays:
                    path = f"{path}[{arrays[path]}]"
            prefix = path
            index.setdefault(prefix, lineno)
            continue
        m = _KEY.match(line)
        if m:
            key = ".".join(_split_key(m.group(1)))
            index.setdefault(f"{prefix}.{key}" if prefix else key, lineno)
    return index


@dataclass
class Locator:
    """Builds ``"file:line: key.path"`` locations; ``--set`` keys are named as such."""

    source: str
    lines: dict[str, int] = field(default_factory=dict)
    #: key path → the ``--set`` argument that set it
    from_set: dict[str, str] = field(default_factory=dict)

    def where(self, path: str) -> str:
        for p, arg in self.from_set.items():
            if path == p or path.startswith(p + "."):
                return f"{self.source}: --set {arg}"
        probe = path
        while probe:
            if probe in self.lines:
                return f"{self.source}:{self.lines[probe]}: {path}" if path else self.source
            probe = probe.rsplit(".", 1)[0] if "." in probe else ""
        return f"{self.source}: {path}" if path else self.source

    def error(self, path: str, reason: str) -> TopologyError:
        return TopologyError(self.where(path), reason)

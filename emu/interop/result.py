# SPDX-License-Identifier: GPL-2.0-only
"""Results of an interop run: per case, the ✓ ✕ ? matrix, JSON and Markdown.

Why separate from the runner: the matrix is what users read and what CI and
release notes keep; it must be producible from the JSON alone (no cluster),
and its layout (one table per transport, servers as rows, clients as columns,
a cell listing the cases by symbol) is a presentation choice that should not
touch how cases run.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

SYMBOL = {"succeeded": "✓", "failed": "✕", "unsupported": "?"}


@dataclass
class CaseResult:
    server: str
    client: str
    transport: str
    case: str
    result: str = "failed"            # succeeded | failed | unsupported
    reason: str = ""
    duration: float = 0.0
    goodput_mbps: float | None = None
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    wire: str = ""

    @property
    def symbol(self) -> str:
        return SYMBOL[self.result]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["duration"] = round(self.duration, 3)
        return d


@dataclass
class RunResult:
    servers: list[str]
    clients: list[str]
    transports: list[str]
    cases: list[str]
    log_dir: str = ""
    start: float = field(default_factory=time.time)
    end: float = 0.0
    results: list[CaseResult] = field(default_factory=list)

    def add(self, r: CaseResult) -> None:
        self.results.append(r)

    def get(self, server: str, client: str, transport: str, case: str) -> CaseResult | None:
        for r in self.results:
            if (r.server, r.client, r.transport, r.case) == (server, client, transport, case):
                return r
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "duration": round(self.end - self.start, 1),
                "servers": self.servers, "clients": self.clients,
                "transports": self.transports, "cases": self.cases, "log_dir": self.log_dir,
                "pairs": [f"{s}_{c}" for s in self.servers for c in self.clients],
                "results": [r.to_dict() for r in self.results]}

    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.result == "failed"]

    # -- presentation -----------------------------------------------------------------
    def _cell(self, s: str, c: str, tr: str) -> str:
        parts = []
        for sym in ("✓", "✕", "?"):
            names = [r.case for r in self.results
                     if (r.server, r.client, r.transport) == (s, c, tr) and r.symbol == sym]
            if names:
                parts.append(sym + " " + ",".join(names))
        return " ".join(parts) or "-"

    def matrix(self) -> str:
        """One table per transport and case: rows server, columns client."""
        out = []
        for tr in self.transports:
            width = max([len("server \\ client")] + [len(s) for s in self.servers]) + 2
            cols = [max(len(c), 2) + 2 for c in self.clients]
            out.append(f"{tr}:")
            for case in self.cases:
                out.append(f"  {case}")
                out.append("    " + "server \\ client".ljust(width) +
                           "".join(c.ljust(w) for c, w in zip(self.clients, cols, strict=False)))
                for s in self.servers:
                    row = []
                    for c, w in zip(self.clients, cols, strict=False):
                        r = self.get(s, c, tr, case)
                        row.append((r.symbol if r else "-").ljust(w))
                    out.append("    " + s.ljust(width) + "".join(row))
        return "\n".join(out)

    def compact(self) -> str:
        """One line per transport × case, one symbol per server×client pair."""
        pairs = [(s, c) for s in self.servers for c in self.clients]
        head = "  ".join(f"{c}→{s}" for s, c in pairs)
        lines = [f"{'transport':9s} {'case':14s} {head}"]
        for tr in self.transports:
            for case in self.cases:
                cells = []
                for s, c in pairs:
                    r = self.get(s, c, tr, case)
                    cells.append((r.symbol if r else "-").center(len(f"{c}→{s}")))
                lines.append(f"{tr:9s} {case:14s} " + "  ".join(cells))
        return "\n".join(lines)

    def markdown(self) -> str:
        pairs = [(s, c) for s in self.servers for c in self.clients]
        out = []
        for tr in self.transports:
            out.append(f"**{tr}** (columns: client → server)\n")
            out.append("| case | " + " | ".join(f"{c} → {s}" for s, c in pairs) + " |")
            out.append("|---|" + "---|" * len(pairs))
            for case in self.cases:
                cells = []
                for s, c in pairs:
                    r = self.get(s, c, tr, case)
                    cells.append(r.symbol if r else "-")
                out.append(f"| {case} | " + " | ".join(cells) + " |")
            out.append("")
        fails = self.failures()
        if fails:
            out.append("Failures:\n")
            out += [f"- {r.transport} {r.client} → {r.server}: {r.reason}" for r in fails]
        return "\n".join(out) + "\n"

    def write_json(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

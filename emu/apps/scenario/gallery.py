# SPDX-License-Identifier: GPL-2.0-only
"""The scenario gallery (``docs/scenarios.md``): every scenario's question, verdict, checks
with the figures they compared, and plots, from the ``results.json`` that ``emu run``
wrote — so the page shows what was measured, never what was hoped for.
"""

from __future__ import annotations

import json
import os
from typing import Any

HEAD = """# Scenarios

What engineers run emu for is a question. Each scenario below asks one, on a fabric
written as it is (400 Gb/s ports, microsecond links, on fabric time), and answers it
with the shape a published result predicts, checked. Rebuilt by `scripts/scenarios`
({when}; {machine}), which runs `emu run NAME` for each shipped scenario
(`scenarios/*.toml`; the file format: `docs/scenario-files.md`). A FAIL is a finding: it
says which transport or setting does not reproduce the shape here, with the figures.

| scenario | question | verdict | wall |
|---|---|---|---|
"""


def _rel(path: str, base: str) -> str:
    return os.path.relpath(path, base)


def section(doc: dict[str, Any], out_dir: str, base: str) -> str:
    lines = [f"## {doc['scenario']}: {doc['title']}", ""]
    if doc.get("anchor"):
        lines.append(f"*Anchor:* {doc['anchor']}. *Question:* {doc.get('question', '')}")
        lines.append("")
    scales = ", ".join(f"{x:g}" for x in sorted({c["time_scale"]
                                                  for c in doc.get("clusters", [])}))
    credible = ("every result credible" if doc["credible"] else
                f"{sum(bool(r.get('credible')) for r in doc['rows'])} of them credible "
                "and the others NOT credible (emulator overload)")
    lines.append(f"`emu run {doc['scenario']}` — **{doc['verdict']}** in {doc['wall_s']} s "
                 f"of wall time at time scale {scales or '-'}; "
                 f"{len(doc['rows'])} points, {credible}, every flow "
                 f"{'verified' if doc['complete'] else 'NOT completed'}.")
    lines.append("")
    lines.append("| check | result | figures |")
    lines.append("|---|---|---|")
    for c in doc["checks"]:
        lines.append(f"| {c['name']} | {'PASS' if c['passed'] else 'FAIL'} | "
                     f"{c['detail'].replace('|', '/')} |")
    lines.append("")
    for name in sorted(os.listdir(out_dir)):
        if name.endswith(".png"):
            lines.append(f"![{name[:-4]}]({_rel(os.path.join(out_dir, name), base)})")
    lines.append("")
    bad = [r for r in doc["rows"] if not r["credible"] or r.get("errors")]
    for r in bad:
        point = ", ".join(f"{k}={r[k]}" for k in r["_vars"])
        why = r["errors"][0] if r.get("errors") else f"overload {r['overload_causes']}"
        lines.append(f"- {point}: {why}")
    if bad:
        lines.append("")
    return "\n".join(lines)


def build(results: list[tuple[str, str]], path: str, when: str, machine: str) -> str:
    """``docs/scenarios.md`` from ``(name, out_dir)`` pairs; returns the text written."""
    base = os.path.dirname(os.path.abspath(path))
    rows, sections = [], []
    for name, out_dir in results:
        try:
            with open(os.path.join(out_dir, "results.json")) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            rows.append(f"| {name} | | did not run: {e} | |")
            continue
        rows.append(f"| [{name}](#{_anchor(doc)}) | {doc.get('question', '')} | "
                    f"**{doc['verdict']}** | {doc['wall_s']} s |")
        sections.append(section(doc, os.path.abspath(out_dir), base))
    text = HEAD.format(when=when, machine=machine) + "\n".join(rows) + "\n\n" + \
        "\n\n".join(sections) + "\n"
    with open(path, "w") as f:
        f.write(text)
    return text


def _anchor(doc: dict[str, Any]) -> str:
    head = f"{doc['scenario']}: {doc['title']}".lower()
    keep = "".join(ch for ch in head if ch.isalnum() or ch in " -_")
    return keep.replace(" ", "-")

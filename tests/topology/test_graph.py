# SPDX-License-Identifier: GPL-2.0-only
"""Topology pictures: SVG always (parses as XML), PNG only with Graphviz, clear errors otherwise."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from emu.topology import TopologyError, load
from emu.topology.graph import layers, render, to_dot

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("stem", ["pair", "leaf-spine", "rail-optimized", "multi-plane"])
def test_svg_renders_and_parses(tmp_path: Path, stem: str) -> None:
    topo = load(ROOT / "namespaces" / f"{stem}.toml")
    out = render(topo, tmp_path / "t.svg")
    root = ET.parse(out).getroot()
    assert root.tag == f"{SVG}svg"
    labels = {t.text for t in root.iter(f"{SVG}text")}
    assert set(topo.nodes) <= labels
    lines = root.find(f"{SVG}g[@id='links']")
    assert lines is not None and len(list(lines)) == len(topo.links)


def test_down_links_dashed_and_planes_coloured(tmp_path: Path) -> None:
    topo = load(ROOT / "namespaces/multi-plane.toml", ["uplinks=2"])
    topo.link("p1-leaf1-p1-spine1#2").up = False
    root = ET.parse(render(topo, tmp_path / "t.svg", down=["h1-p0-leaf1"])).getroot()
    links = list(root.find(f"{SVG}g[@id='links']"))
    dashed = [el for el in links if el.get("stroke-dasharray")]
    assert len(dashed) == 2
    assert len({el.get("stroke") for el in links}) == 2  # one colour per plane


def test_layers_put_spines_on_top() -> None:
    topo = load(ROOT / "namespaces/leaf-spine.toml")
    lay = layers(topo)
    assert lay["h1"] == 0 and lay["leaf1"] == 1 and lay["spine2"] == 2


def test_dot_source() -> None:
    text = to_dot(load(ROOT / "namespaces/leaf-spine.toml"))
    assert text.startswith('graph "ls"') and '"h1" -- "leaf1"' in text and "rank=same" in text


def test_png_without_graphviz_is_a_clear_error(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(TopologyError, match=r"graphviz.*\.svg"):
        render(load(ROOT / "namespaces/pair.toml"), tmp_path / "t.png")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' not installed")
def test_png_with_graphviz(tmp_path: Path) -> None:
    out = render(load(ROOT / "namespaces/leaf-spine.toml"), tmp_path / "t.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_picture_format(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="use .svg"):
        render(load(ROOT / "namespaces/pair.toml"), tmp_path / "t.jpg")

# SPDX-License-Identifier: GPL-2.0-only
"""SVG line charts: valid XML, one polyline per series, points inside the plot area."""

import xml.etree.ElementTree as ET

from emu.plot import line_chart

NS = "{http://www.w3.org/2000/svg}"


def test_chart_is_valid_svg_with_a_line_per_series():
    svg = line_chart({"h1": [(0, 0), (1, 5000), (2, 12000)], "h2": [(0, 1), (2, 3)]},
                     title="queue <depth>", xlabel="s", ylabel="bytes", step=True)
    root = ET.fromstring(svg)
    lines = root.findall(f"{NS}polyline")
    assert len(lines) == 2
    for pl in lines:
        for pair in pl.get("points").split():
            x, y = map(float, pair.split(","))
            assert 70 <= x <= 760 - 150 and 40 <= y <= 360 - 50
    assert "queue &lt;depth&gt;" in svg


def test_empty_chart_says_so():
    root = ET.fromstring(line_chart({}, title="nothing"))
    assert any(t.text == "no data" for t in root.iter(f"{NS}text"))

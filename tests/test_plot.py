# SPDX-License-Identifier: GPL-2.0-only
"""Line charts (matplotlib) as a person opens them: a valid SVG with one line per
series named in the legend, axes with units, a PNG beside it, "no data" when there is
none, the format the suffix names, the same bytes for the same data."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from emu.plot import line_chart

NS = "{http://www.w3.org/2000/svg}"
QUEUES = {"h1": [(0.0, 0.0), (1.0, 5000.0), (2.0, 12000.0)],
          "h2": [(0.0, 1.0), (2.0, 3.0)],
          "h3": []}


def chart(path, series=QUEUES, **kw):
    kw = {"title": "leaf2 depth", "xlabel": "fabric seconds", "ylabel": "depth (bytes)",
          "legend_title": "port"} | kw
    return line_chart(str(path), series, **kw)


def texts(root: ET.Element) -> list[str]:
    return [t.text for t in root.iter(f"{NS}text") if t.text]


def lines(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("id"): g for g in root.iter(f"{NS}g")
            if (g.get("id") or "").startswith("series-")}


def vertices(g: ET.Element) -> list[tuple[float, float]]:
    """The points of the series' line (its first path: the markers come after it)."""
    d = next(g.iter(f"{NS}path")).get("d").replace("M", " ").replace("L", " ").split()
    return [(float(x), float(y)) for x, y in zip(d[::2], d[1::2], strict=True)]


def test_svg_has_a_line_per_series_named_in_the_legend_with_units_and_a_png(tmp_path):
    files = chart(tmp_path / "q.svg")
    assert files == [str(tmp_path / "q.svg"), str(tmp_path / "q.png")]
    root = ET.parse(tmp_path / "q.svg").getroot()  # valid XML, an SVG document
    assert root.tag == f"{NS}svg"
    # the series with points each have a line; the empty one is left out
    assert sorted(lines(root)) == ["series-0", "series-1"]
    assert [len(vertices(g)) for g in lines(root).values()] == [3, 2]
    words = texts(root)
    assert {"h1", "h2", "port"} <= set(words) and "h3" not in words
    assert {"leaf2 depth", "fabric seconds", "depth (bytes)"} <= set(words)
    assert "12k" in words or "10k" in words  # thousands read as such on the axis
    png = (tmp_path / "q.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_a_step_chart_holds_each_value_over_the_interval_ending_at_its_time(tmp_path):
    chart(tmp_path / "s.svg", {"h1": QUEUES["h1"]}, step=True)
    [g] = lines(ET.parse(tmp_path / "s.svg").getroot()).values()
    v = vertices(g)
    assert len(v) == 5  # 3 points: up, across, up, across
    assert v[0][0] == v[1][0] and v[1][1] == v[2][1] and v[3][1] == v[4][1]


@pytest.mark.parametrize("series", [{}, {"h1": [], "h2": []}])
def test_no_points_is_a_chart_saying_no_data(tmp_path, series):
    chart(tmp_path / "e.svg", series)
    root = ET.parse(tmp_path / "e.svg").getroot()
    assert "no data" in texts(root) and lines(root) == {}
    assert {"leaf2 depth", "fabric seconds", "depth (bytes)"} <= set(texts(root))
    assert (tmp_path / "e.png").stat().st_size > 1000


def test_the_suffix_names_the_format(tmp_path):
    assert chart(tmp_path / "c.png") == [str(tmp_path / "c.png")]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert chart(tmp_path / "c.PDF") == [str(tmp_path / "c.PDF")]
    assert (tmp_path / "c.PDF").read_bytes()[:5] == b"%PDF-"
    # a name matplotlib has no format for (a device, a pipe): SVG alone
    assert chart(tmp_path / "chart") == [str(tmp_path / "chart")]
    assert ET.parse(tmp_path / "chart").getroot().tag == f"{NS}svg"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.PDF", "c.png", "chart"]


def test_the_same_data_gives_the_same_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        chart(tmp_path / d / "q.svg", step=True)
    for name in ("q.svg", "q.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_text_is_drawn_as_given(tmp_path):
    """Markup and mathtext characters in a title or a name are text, not syntax."""
    chart(tmp_path / "t.svg", {"$5 & <up>": [(0, 1), (1, 2)]}, title="queue <depth> $x$")
    words = texts(ET.parse(tmp_path / "t.svg").getroot())
    assert "queue <depth> $x$" in words and "$5 & <up>" in words


def test_a_file_that_cannot_be_written_is_the_error_s_filename(tmp_path):
    """The PNG beside is written too: when it is what fails, the error names it (the
    callers say "cannot write" with that name, not the SVG's)."""
    (tmp_path / "q.png").mkdir()
    with pytest.raises(OSError) as e:
        chart(tmp_path / "q.svg")
    assert e.value.filename == str(tmp_path / "q.png")
    with pytest.raises(OSError) as e:
        chart("/dev/full")
    assert (e.value.filename, e.value.strerror) == ("/dev/full", "No space left on device")


def test_importing_the_module_does_not_load_matplotlib():
    code = "import sys, emu.plot; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    assert out == "False\n"

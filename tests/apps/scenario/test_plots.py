# SPDX-License-Identifier: GPL-2.0-only
"""Plots are drawn from rows, PNG and SVG, with units on the axes and suspect points
marked."""

from __future__ import annotations

from emu.apps.scenario import plots, spec

ROWS = [{"transport": t, "loss": loss, "goodput_gbps": g, "credible": cr}
        for t, loss, g, cr in [("roce", 0.0, 380, True), ("roce", 0.01, 40, True),
                               ("uet", 0.0, 375, True), ("uet", 0.01, 300, False)]]


def test_a_line_plot_writes_png_and_svg_with_units_and_marks_the_suspect_point(tmp_path):
    sc = spec.load("incast")
    p = spec.Plot("loss", "goodput_gbps", "transport", "goodput vs loss", "g")
    files = plots.draw(sc, p, ROWS, str(tmp_path))
    assert [f.rsplit(".", 1)[1] for f in files] == ["png", "svg"]
    svg = (tmp_path / "g.svg").read_text()
    assert "Gb/s, fabric" in svg and "random loss on the link" in svg
    assert "RoCEv2" in svg and "UET" in svg
    assert "not credible" in svg and "UET at loss=0.01" in svg
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_a_bar_plot_of_a_string_axis(tmp_path):
    sc = spec.load("incast")
    p = spec.Plot("transport", "goodput_gbps", None, "t", "b", kind="bar",
                  where={"loss": 0.0})
    plots.draw(sc, p, ROWS, str(tmp_path))
    assert "not credible" not in (tmp_path / "b.svg").read_text()

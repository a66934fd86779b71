# SPDX-License-Identifier: GPL-2.0-only
"""Scenarios: a question engineers bring ("does spraying beat ECMP here?"), answered in
one command (``emu run``) with results, plots and a verdict.

* :mod:`.spec` — the scenario file, read and checked (one-line errors naming the key);
* :mod:`.run` — the fabric up, the sweep run, overload bracketed per point;
* :mod:`.checks` — the expected shape judged on the results;
* :mod:`.plots` — matplotlib figures, PNG and SVG;
* :mod:`.cli` — ``emu run``.
"""

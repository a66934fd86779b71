# SPDX-License-Identifier: GPL-2.0-only
"""Credibility: line rates and round trips from the fabric, what this machine sustains,
and the overload that makes a result not credible (``emu doctor`` itself is
:mod:`emu.apps.doctor`: it runs ``emu perf`` on clusters, so it sits above them)."""

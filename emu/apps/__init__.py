# SPDX-License-Identifier: GPL-2.0-only
"""Applications built on the client API (:mod:`emu.api`) and on clusters: ``emu perf``
(perftest-style tools) and ``emu doctor`` (what this machine sustains, measured with them)."""

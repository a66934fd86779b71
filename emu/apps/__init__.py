# SPDX-License-Identifier: GPL-2.0-only
"""Applications built on the client API (:mod:`emu.api`): ``emu perf`` (perftest-style tools)."""

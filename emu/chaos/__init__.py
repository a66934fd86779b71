# SPDX-License-Identifier: GPL-2.0-only
"""Chaos tooling: seeded hostile traffic for ``scripts/chaos`` (``tests/chaos``).

:mod:`.fuzz` builds the packets (seeded, repeatable); :mod:`.send` sends a
corpus of them at a fixed rate with nothing but the standard library, so an
unprivileged user can run it with the system Python inside a namespace.
"""

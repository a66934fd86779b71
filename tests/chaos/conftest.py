# SPDX-License-Identifier: GPL-2.0-only
"""Settings of the chaos suite (``scripts/chaos``): ``CHAOS_SEED`` (default 1) and
``CHAOS_BUDGET`` — seconds of chaos per scenario (``scripts/chaos`` sets it, 10 by
default; unset — the normal suite, ``scripts/test`` and CI — 3, so the whole suite stays
short)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def chaos_seed() -> int:
    return int(os.environ.get("CHAOS_SEED", "1"))


@pytest.fixture(scope="session")
def chaos_budget() -> float:
    b = os.environ.get("CHAOS_BUDGET")
    return float(b) if b else 3.0

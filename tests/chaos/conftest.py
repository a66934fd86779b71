# SPDX-License-Identifier: GPL-2.0-only
"""Settings of the chaos suite (``scripts/chaos``): ``CHAOS_SEED`` (default 1) and
``CHAOS_BUDGET`` — seconds of chaos per scenario (default 10; 3 when ``CI`` is set and
the budget is not, so the normal suite runs these scenarios briefly)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def chaos_seed() -> int:
    return int(os.environ.get("CHAOS_SEED", "1"))


@pytest.fixture(scope="session")
def chaos_budget() -> float:
    b = os.environ.get("CHAOS_BUDGET")
    return float(b) if b else (3.0 if os.environ.get("CI") else 10.0)

# SPDX-License-Identifier: GPL-2.0-only
"""A daemon's garbage-collection pauses are timed and shown (``emu nicd stats``)."""

from __future__ import annotations

import gc

from emu.nic import gcwatch


def test_collections_are_counted_and_timed_per_generation():
    gcwatch.install()
    gcwatch.install()  # idempotent: one callback
    assert gc.callbacks.count(gcwatch._callback) == 1
    before = gcwatch.counters()
    gc.collect()
    after = gcwatch.counters()
    assert after["collections"][2] == before["collections"][2] + 1
    assert after["max_s"][2] >= before["max_s"][2] and after["total_s"][2] > 0
    assert after["threshold"] == list(gc.get_threshold())

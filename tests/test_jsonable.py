# SPDX-License-Identifier: GPL-2.0-only
"""emu.jsonable: a reply never fails on one odd value."""

from __future__ import annotations

import ipaddress
import json

from emu.jsonable import jsonable


def test_values_json_lacks_become_strings_and_the_rest_stays():
    v = {1: (1.5, None, True), "a": [ipaddress.ip_address("fd00::1")], "f": print}
    out = jsonable(v)
    assert out == {"1": [1.5, None, True], "a": ["fd00::1"], "f": repr(print)}
    assert json.loads(json.dumps(out)) == out

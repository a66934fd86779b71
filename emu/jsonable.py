# SPDX-License-Identifier: GPL-2.0-only
"""Values as JSON can say them: what status and stats replies carry."""

from __future__ import annotations

import ipaddress
from typing import Any


def jsonable(v: Any) -> Any:
    """``v`` with dict keys as strings, tuples as lists, addresses as strings and any
    other value JSON lacks as its ``repr`` — a reply never fails on one odd value."""
    if v is None or isinstance(v, str | int | float | bool):
        return v
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(v)
    return repr(v)

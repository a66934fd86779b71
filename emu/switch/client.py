# SPDX-License-Identifier: GPL-2.0-only
"""One JSON-lines request to a switch daemon's control socket (``emu.switch.daemon``).

Kept apart from :mod:`emu.cluster` so that tools running inside a host namespace
(``emu perf`` reading every daemon's overload) can ask a switch without importing
the fabric layer; the socket is a file, reachable from any network namespace.
"""

from __future__ import annotations

import json
import socket
from typing import Any


def request(path: str, req: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send ``req`` to the control socket at ``path``; the daemon's reply (OSError,
    ValueError on a dead socket or a garbled reply)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf or b"{}")

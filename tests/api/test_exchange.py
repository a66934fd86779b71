# SPDX-License-Identifier: GPL-2.0-only
"""The perftest-style TCP rendezvous for connection data (no root, loopback TCP)."""

from __future__ import annotations

import socket
import threading

from emu.api import exchange


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_and_client_swap_connection_data():
    port = _free_port()
    server_info = {"qpn": 0x1234, "psn": 7, "gid": "::ffff:10.0.0.2", "address": "10.0.0.2",
                   "rkey": 99, "va": 0x7F0000000000, "len": 4096}
    client_info = {"qpn": 0x42, "psn": 1, "gid": "fd00::1", "address": "fd00::1"}
    got: dict = {}
    listening = threading.Event()
    t = threading.Thread(target=lambda: got.update(
        exchange.serve(server_info, port, timeout=10, ready=listening.set)))
    t.start()
    listening.wait(10)
    remote = exchange.connect("127.0.0.1", client_info, port, timeout=10)
    t.join(10)
    assert {k: remote[k] for k in server_info} == server_info
    assert {k: got[k] for k in client_info} == client_info


def test_client_started_first_retries_until_the_server_listens():
    port = _free_port()
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(
        exchange.exchange({"qpn": 1}, server="127.0.0.1", port=port, timeout=10)))
    t.start()  # nobody listens yet: the client keeps retrying
    remote = exchange.exchange({"qpn": 2}, server=None, port=port, timeout=10)
    t.join(10)
    assert remote["qpn"] == 1 and out["qpn"] == 2

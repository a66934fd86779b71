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


# -- what waiting cannot mend fails at once --------------------------------------------


def test_an_address_that_is_not_one_fails_at_once_without_asking_a_resolver(monkeypatch):
    """``10.0.1.300`` was handed to the resolver as a host name and retried for the whole
    timeout ("Temporary failure in name resolution")."""
    import time

    import pytest

    def no_resolver(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("asked a resolver")

    monkeypatch.setattr(socket, "getaddrinfo", no_resolver)
    t0 = time.monotonic()
    for bad in ("10.0.1.300", "10.0.1", "fd00::zz"):
        with pytest.raises(exchange.Unreachable) as e:
            exchange.connect_retrying(bad, 18515, timeout=30)
        assert str(e.value) == f"{bad!r} is not an IPv4 or IPv6 address"
    assert time.monotonic() - t0 < 1


def test_a_name_that_does_not_resolve_fails_at_once(monkeypatch):
    import pytest

    calls = []

    def unresolved(*a, **k):  # noqa: ANN002, ANN003, ANN202
        calls.append(a)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "create_connection", unresolved)
    with pytest.raises(exchange.Unreachable, match="'h9' is not an IP address, and no host "
                       "name resolves to it here .Temporary failure in name resolution."):
        exchange.connect_retrying("h9", 18515, timeout=30)
    assert len(calls) == 1  # not retried


def test_no_route_fails_at_once_refused_is_retried(monkeypatch):
    """In a network namespace of its own (only ``lo``) nothing outside it has a route:
    ``connect`` says ENETUNREACH at once, and so must we. A refused connection (a server
    not listening yet) is still retried until the timeout."""
    import os
    import subprocess
    import sys
    import time

    import pytest

    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace)")
    code = ("import time\nfrom emu.api import exchange\nt0 = time.monotonic()\n"
            "try:\n    exchange.connect_retrying('10.0.9.9', 18515, timeout=30)\n"
            "except exchange.Unreachable as e:\n"
            "    print(f'{time.monotonic() - t0:.1f}', e)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(["unshare", "--net", sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60, check=True,
                         env={**os.environ, "PYTHONPATH": root}).stdout
    took, said = out.split(" ", 1)
    assert float(took) < 5 and said.strip() == \
        "this host has no route to 10.0.9.9 (Network is unreachable)"
    t0 = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        exchange.connect_retrying("127.0.0.1", _free_port(), timeout=0.5)
    assert time.monotonic() - t0 >= 0.5  # retried for the whole timeout

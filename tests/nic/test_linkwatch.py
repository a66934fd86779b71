# SPDX-License-Identifier: GPL-2.0-only
"""The NIC's port link watch (emu.nic.linkwatch): rtnetlink link messages parsed without
a socket, changes reported once per port, and — as root, in a namespace of its own — a
veth whose peer goes down reported down and back up, as ``emu link … down`` does to a
host's plane port."""

from __future__ import annotations

import os
import struct
import subprocess
import uuid

import pytest
import trio

from emu.fabric.netns import entered
from emu.nic import linkwatch as L


def _msg(kind: int, index: int, flags: int) -> bytes:
    body = struct.pack("=BxHiII", 0, 1, index, flags, 0xFFFFFFFF) + b"\0" * 4  # + an attr
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def test_parse_link_messages_reads_every_message_of_a_datagram():
    up = L.IFF_UP | L.IFF_LOWER_UP
    data = (_msg(L.RTM_NEWLINK, 3, up) + _msg(L.RTM_NEWLINK, 4, L.IFF_UP)
            + _msg(24, 9, up) + _msg(L.RTM_DELLINK, 5, up))
    assert list(L.parse_link_messages(data)) == [(3, True), (4, False), (5, False)]
    # admin up without carrier is down; a truncated or garbage tail ends the parse quietly
    assert list(L.parse_link_messages(data[:-3])) == [(3, True), (4, False)]
    assert list(L.parse_link_messages(b"\xff" * 7)) == []
    assert list(L.parse_link_messages(struct.pack("=IHHII", 8, 16, 0, 0, 0))) == []


def test_a_watch_reports_each_change_of_its_own_ports_once():
    seen: list[tuple[int, bool]] = []
    w = L.LinkWatch([], lambda p, up: seen.append((p, up)))
    w.ports, w.up, w.ifnames = {7: 0, 9: 1}, [True, True], ["eth0", "eth1"]
    up = L.IFF_UP | L.IFF_LOWER_UP
    w.feed(_msg(L.RTM_NEWLINK, 9, L.IFF_UP))      # eth1 lost its carrier
    w.feed(_msg(L.RTM_NEWLINK, 9, 0))              # still down: no second report
    w.feed(_msg(L.RTM_NEWLINK, 12, 0))             # not a port of this NIC
    w.feed(_msg(L.RTM_NEWLINK, 9, up))
    assert seen == [(1, False), (1, True)] and w.changes == 2 and w.up == [True, True]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a namespace and a veth)")
def test_a_veth_whose_peer_goes_down_is_reported_down_then_up():
    ns = f"emutlw{uuid.uuid4().hex[:8]}"
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    run("ip", "netns", "add", ns)
    try:
        run("ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        run("ip", "-n", ns, "link", "set", "p0", "up")
        run("ip", "-n", ns, "link", "set", "p1", "up")
        got: list[tuple[int, bool]] = []

        async def main() -> None:
            with entered(ns):  # the watch's socket and its names live in the host's netns
                w = L.LinkWatch(["p0"], lambda p, up: got.append((p, up)))
                w.open()
            assert w.up == [True]
            async with trio.open_nursery() as n:
                await n.start(w.run)
                for state in ("down", "up"):
                    run("ip", "-n", ns, "link", "set", "p1", state)
                    with trio.fail_after(10):
                        while len(got) < (1 if state == "down" else 2):
                            await trio.sleep(0.01)
                n.cancel_scope.cancel()

        trio.run(main)
        assert got == [(0, False), (0, True)]
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)

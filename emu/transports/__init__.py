# SPDX-License-Identifier: GPL-2.0-only
"""Sans-IO transports: RoCEv2 RC (:mod:`.roce`), UET RUD (:mod:`.uet`) and MRC (:mod:`.mrc`)
(``DESIGN.md``).

Every transport is an :class:`emu.transports.base.Engine`: a pure state
machine the NIC daemon feeds with datagrams and clock ticks and drains of
datagrams and events. Nothing under this package imports trio, socket,
scapy, time or random — time and randomness are passed in — so the same code
runs under a hand-stepped clock in tests and behind real sockets in
``emu/nic``.
"""

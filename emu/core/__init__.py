# SPDX-License-Identifier: GPL-2.0-only
"""Shared, protocol-agnostic transport parts (no I/O).

Every transport (RoCEv2 RC, UET, MRC) builds on these modules:

* :mod:`emu.core.psn` — serial-number arithmetic for 24- and 32-bit PSNs
* :mod:`emu.core.sack` — 64-bit SACK bitmaps and a wrap-aware :class:`RangeSet`
* :mod:`emu.core.reorder` — in-order delivery buffer and out-of-order placement
* :mod:`emu.core.memory` — shared-memory regions with key, bounds and access checks
* :mod:`emu.core.cq` — completion queues with verbs status codes
* :mod:`emu.core.trace` — qlog-like JSON-lines event trace
* :mod:`emu.core.timers` — named deadlines for one-timer sans-IO endpoints
* :mod:`emu.core.portsched` — a port's line-rate wire: how far output may run ahead
* :mod:`emu.core.verbs` — work requests (``SendWR``, ``RecvWR``, ``Sge``) every engine takes

Rule (``DESIGN.md``): nothing here imports trio, socket, scapy, time or random;
time and randomness are passed in, so the transports built on top stay
deterministic under a hand-stepped clock and a seeded RNG. This package's
``__init__`` imports nothing so that the per-packet modules load alone.
"""

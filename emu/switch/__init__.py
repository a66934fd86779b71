# SPDX-License-Identifier: GPL-2.0-only
"""The switch pipeline: what ASICs do and the Linux kernel here does not.

ECN marking at a queue threshold (RED on the instantaneous queue), packet
trimming, tail drop, random loss, delay/jitter and PFC-like pause, per egress
port and traffic class, for transport traffic only — while the kernel keeps
routing and choosing paths. See ``docs/switch.md``.

* :mod:`.config` — dataclasses, defaults, unit parsing, live settings;
* :mod:`.queue` — the sans-IO queue model (tests drive it with a fake clock);
* :mod:`.trim` — protocol-aware trimming and header fix-ups (pure bytes);
* :mod:`.nfqueue` — a pure-Python nfnetlink_queue client;
* :mod:`.pfc` — 802.1Qbb frames and a pause listener for senders;
* :mod:`.daemon` — the per-switch process (``python -m emu.switch.daemon``);
* :mod:`.bench` — packets/s with the pipeline on vs kernel-only forwarding.
"""

# SPDX-License-Identifier: GPL-2.0-only
"""The user-space NIC: ``emu nicd``, one daemon per host, driving sans-IO transports.

* :mod:`emu.nic.daemon` — the trio I/O driver (sockets, batching, one timer per engine)
* :mod:`emu.nic.control` — the root-only control server (``docs/nic-protocol.md``);
  :mod:`emu.nic.session` — its per-client records and JSON → work requests
* :mod:`emu.nic.udp` — ports: sockets, interface discovery, GRO receive
* :mod:`emu.nic.txpath` — the way out: one FIFO through sockets (GSO), entropy source
  ports and frame rings (:mod:`emu.nic.frames`), paced by :mod:`emu.nic.pacer`
* :mod:`emu.nic.engines` — the engine registry (``{"roce": factory, …}``) and verbs contract
* :mod:`emu.nic.loopback` — a stub transport that exercises the plumbing
* :mod:`emu.nic.protocol` — framing and paths shared with :mod:`emu.api`

Nothing is imported here, so ``python -m emu.nic.daemon`` and the client API
load only what they use.
"""

# SPDX-License-Identifier: GPL-2.0-only
"""emu-ref: an independent reference peer for emu's interop matrix.

Written from the project's spec pages (``/work/shared/specs/rocev2.md``,
``uet.md`` and ``mrc.md``) alone, with the standard library only: it imports nothing from
``emu``. Its point is to be a *second codebase*, so that a ✓ between ``emu`` and
``emu-ref`` in the interop matrix means two independent readings of the spec
agreed on the wire. It is deliberately simple and slow: plain ``struct``
codecs, plain dicts for state, one thread, one UDP socket.

Modules (each imports only the ones above it in this list):

* :mod:`emuref.memory`   — registered regions (key, base address, bytes, bounds check)
* :mod:`emuref.roce_wire` — RoCEv2 BTH/RETH/AETH codecs and the ICRC
* :mod:`emuref.roce_rc`   — a sans-IO RC queue pair: requester and responder, go-back-N
* :mod:`emuref.uet_wire`  — UET PDS and SES codecs
* :mod:`emuref.uet_rud`   — a sans-IO UET RUD engine: PDCs, SACK/NACK retransmission, SES
* :mod:`emuref.mrc_wire`  — MRC codecs (BTH with RTX/TS, METH, RETH, SETH+CC_STATE, NETH, PETH, …)
* :mod:`emuref.mrc_qp`    — a sans-IO MRC QP: sprayed WRITEs, SACK/NACK/timeout holes, AETH
* :mod:`emuref.mrc_nic`   — the MRC QPs behind one port: ICRC, trimmed packets, endpoint ops
* :mod:`emuref.endpoint`  — the interop endpoint (``docs/interop.md``): sockets, TCP exchange, cases
* :mod:`emuref.mrc_endpoint` — its ``TRANSPORT=mrc`` half (imported by ``endpoint`` at run time)
"""

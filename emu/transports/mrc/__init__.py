# SPDX-License-Identifier: GPL-2.0-only
"""MRC (OCP Multipath Reliable Connection), sans-IO — being built (issue #35).

* :mod:`.engine` — :class:`MrcEngine`, every MRC QP of a NIC (the daemon's contract)
* :mod:`.factory` — ``create_engine(ctx)``, the daemon's constructor hook
* :mod:`.initiator` / :mod:`.target` — the two halves of a QP: spraying and loss
  recovery; placement, SACKs, NACKs and the transport ACK
* :mod:`.evset` / :mod:`.evprofile` — a QP's EVs over its planes, their states and
  counters; which values an EV profile gives

Not yet: endpoint operations (ERTH/EETH) on the wire, the STEV and SRv6 EV formats
in the daemon, multi-plane ports, ``emu mrc`` profiles and ports (its QP table,
events and EV deny/allow are there: :mod:`emu.apps.mrc`).
"""

from emu.transports.mrc.engine import MrcEngine
from emu.transports.mrc.factory import create_engine

__all__ = ["MrcEngine", "create_engine"]

# SPDX-License-Identifier: GPL-2.0-only
"""MRC (OCP Multipath Reliable Connection), sans-IO (issue #35).

* :mod:`.engine` — :class:`MrcEngine`, every MRC QP of a NIC (the daemon's contract)
* :mod:`.factory` — ``create_engine(ctx)``, the daemon's constructor hook
* :mod:`.initiator` / :mod:`.target` — the two halves of a QP: spraying and loss
  recovery; placement, SACKs, NACKs and the transport ACK
* :mod:`.evset` / :mod:`.evprofile` — a QP's EVs over its planes, their states and
  counters; which values an EV profile gives
* :mod:`.evwire` — where an EV rides (UDP, STEV, SRv6) and which SRv6 path it takes
* :mod:`.profiles` — the controller's EV and CC profiles
"""

from emu.transports.mrc.engine import MrcEngine
from emu.transports.mrc.factory import create_engine

__all__ = ["MrcEngine", "create_engine"]

# SPDX-License-Identifier: GPL-2.0-only
"""Sans-IO Ultra Ethernet Transport (UET), RUD delivery (``/work/shared/specs/uet.md``).

* :mod:`.engine` — :class:`UetEngine`, the daemon-facing engine (all PDCs of a NIC)
* :mod:`.factory` — ``create_engine(ctx)``, the daemon's constructor hook
* :mod:`.pdc` — PDC records, states, constants, the NACK reaction table
* :mod:`.pds` — the initiator half of the PDS (and shared packet builders)
* :mod:`.target` — the target half of the PDS
* :mod:`.ses` — SES WRITE/SEND: request headers, placement, responses
"""

from emu.transports.uet.engine import UetEngine
from emu.transports.uet.factory import create_engine, payload_for
from emu.transports.uet.pdc import NACK_REACTIONS, PdcState, Reaction

__all__ = ["UetEngine", "create_engine", "payload_for", "PdcState", "Reaction", "NACK_REACTIONS"]

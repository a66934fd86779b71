# SPDX-License-Identifier: GPL-2.0-only
"""Sans-IO RoCEv2 Reliable Connection (RC) transport.

* :mod:`.engine` — :class:`RoceEngine`, the daemon-facing engine (all QPs of a NIC)
* :mod:`.factory` — ``create_engine(ctx)``, the daemon's constructor hook
* :mod:`.qp` — QP states, attributes, timer codes, shared per-QP state
* :mod:`.requester` / :mod:`.responder` — the two halves of RC reliability
* work requests (``SendWR``, ``RecvWR``, ``Sge``) are transport-neutral: :mod:`emu.core.verbs`
* :mod:`.packets` — hot-path packet build/parse and the test ICRC
"""

from emu.core.verbs import RecvWR, SendWR, Sge, WrOpcode
from emu.transports.roce.engine import RoceEngine
from emu.transports.roce.factory import create_engine, pmtu_for
from emu.transports.roce.qp import QpAttr, QpState

__all__ = ["RoceEngine", "create_engine", "pmtu_for", "QpAttr", "QpState", "RecvWR", "SendWR",
           "Sge", "WrOpcode"]

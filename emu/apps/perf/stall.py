# SPDX-License-Identifier: GPL-2.0-only
"""How long a perf test waits, in wall seconds, with nothing completing before it gives up.

One rule for the bandwidth client, the bandwidth server and both ends of a latency test
(they all read the wall clock against :func:`stall_limit`). Why it is not simply
``--timeout``: a healthy transfer may legitimately go quiet for one of its transport's
retransmission waits — a RoCEv2 QP's local ACK timeout (4.096 µs × 2^``-u``: 67 fabric
ms at perftest's 14), a UET PDC's RTO (up to its ceiling) — and at time scale N that
wait is N times as long in wall time: one 67-ms wait is 8 wall minutes at 7100. A
fixed 60 wall s would call that a failure; a limit on the fabric clock (60 fabric s)
would wait days. So the limit is ``--timeout`` of wall time plus
:data:`STALL_WAITS` of the transport's waits, dilated: long enough for a run that
recovers by timeout (a lost resend waits again), short of the transport's own give-up
(RoCEv2 retries 7 times, UET 200), so a dead peer or a lost completion is reported in
minutes rather than hours.
"""

from __future__ import annotations

from emu.transports.mrc.initiator import timeout_of
from emu.transports.roce.qp import ack_timeout
from emu.transports.uet.factory import DEFAULT_DAEMON_RTO_MAX

#: the transport's own retransmission waits a test sits through with nothing completing
STALL_WAITS = 3


def transport_wait(transport: str, qp_timeout: int) -> float:
    """The longest single retransmission wait of a working connection, fabric seconds:
    RoCEv2's local ACK timeout; UET's RTO ceiling (a daemon's RTO follows the measured
    round trip up to it; ``--set nic.uet.rto_max`` above it is not known here)."""
    if transport == "roce":
        return ack_timeout(qp_timeout) or 0.0  # code 0 (forever) is refused by the options
    if transport == "mrc":  # its local ACK timeout (mrc.h: 1.024 us x 2^t), the same code
        return timeout_of(qp_timeout)
    return DEFAULT_DAEMON_RTO_MAX


def stall_limit(timeout: float, transport: str, qp_timeout: int, scale: float) -> float:
    """Wall seconds with no completion after which a test gives up (module docstring)."""
    return timeout + STALL_WAITS * transport_wait(transport, qp_timeout) * scale

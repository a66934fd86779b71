# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's configuration: one dataclass, filled from the command line or by tests.

Every queue the daemon has is bounded here, because an unbounded queue in
a NIC emulator hides overload: a real NIC drops at its rings and counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emu.nic.protocol import DEFAULT_PORTS
from emu.wire.uet_defs import DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP


@dataclass
class NicConfig:
    """How one ``emu nicd`` runs.

    ``addresses`` None means "every global address of every non-loopback
    interface in the namespace" (one socket per address: a NIC port and
    family). ``gso`` None means auto: on for IPv6 when the kernel has it, off
    for IPv4 (see :mod:`emu.nic.udp` — IP IDs break the RoCE ICRC).
    """

    sock_path: str = ""
    cluster: str = ""
    host: str = ""
    transports: list[str] = field(default_factory=lambda: ["roce"])
    #: transports that may be missing (their module not written yet): skipped with a warning
    optional_transports: bool = False
    ports: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    addresses: list[str] | None = None
    rx_backlog: int = 4096  # datagrams read from sockets, not yet given to the engine
    tx_backlog: int = 8192  # datagrams from the engine waiting for socket space (per socket)
    event_queue: int = 4096  # async events (QP state …) per client
    rx_batch: int = 64  # socket reads per turn before a checkpoint (perf-notes: ~64)
    engine_batch: int = 256  # datagrams given to the engine per turn before pumping
    max_clients: int = 256
    gso: bool | None = None
    gro: bool = True
    #: sprayed datagrams (UET) leave as frames through a packet TX ring, many per
    #: syscall (``emu.nic.frames``), instead of a ``sendmsg`` each on a socket per source port
    frame_ring: bool = True
    tos: int | None = 2  # ECT(0): switches mark CE only on ECN-capable packets (DCQCN)
    rcvbuf: int = 4 << 20
    sndbuf: int = 4 << 20
    seed: int | None = None
    allowed_uids: tuple[int, ...] = (0,)
    engine_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: honour PFC pause frames arriving on the ports (``emu.nic.pause``), quantum in seconds
    pfc: bool = True
    pfc_quantum: float = 512e-9
    drain_timeout: float = 1.0  # SIGTERM: how long to flush queued datagrams and replies
    #: DSCPs meaning "a switch trimmed this packet" (the switch's trimmed_dscp and
    #: trimmed_lasthop): such datagrams reach engines that take it with ``trimmed=True``
    trimmed_dscps: tuple[int, ...] = (DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP)
    #: each port's line rate in bits/s (ifname → rate; key ``"*"``: every other port):
    #: the daemon paces all it sends on a port to it, all transports together
    #: (``emu.nic.pacer``). No entry: the port is unpaced (the engines' own pacing only).
    line_rates: dict[str, float] = field(default_factory=dict)
    #: how far ahead of the wire (seconds) the daemon may hand a paced port's frames to
    #: the kernel: the port's transmit FIFO (``emu.nic.pacer``). Small by default, as
    #: nothing downstream paces them; ``emu up`` puts each host port's line rate in a
    #: kernel ``tbf`` too and then gives 2 ms, so a daemon's stall shorter than that
    #: leaves the emulated port busy (the kernel serializes; the daemon only keeps it fed)
    tx_lead: float = 1e-3
    #: receive coalescing (``emu.nic.coalesce``): None = adaptive (streams at a quarter of
    #: the line rate or more, and while the port's transmit queue covers the wait), 0 =
    #: read at every wake-up, > 0 = wait this many seconds after every read that found data
    rx_coalesce: float | None = None
    #: 6: the engines' own address (QP GIDs, UET endpoint addresses) is the port's IPv6
    #: one, so transfers run over IPv6; None/4: IPv4 first (the kernel's order)
    family: int | None = None
    #: JSON-lines event trace of every engine (``emu.core.trace``), None = off
    trace: str | None = None
    trace_flush: float = 0.5  # seconds between flushes of the trace file
    #: fabric time (``emu.fabricclock``): wall seconds per fabric second, and the cluster's
    #: epoch (a ``CLOCK_MONOTONIC`` time). ``line_rates`` and ``tx_lead`` are wall units
    #: (the plan's: the port serializer stands for the dilated wire); engines are given
    #: them in fabric units. 1 = real time, today's behaviour
    time_scale: float = 1.0
    time_epoch: float = 0.0
    #: propagation delay held by this NIC (``emu.nic.delayline``): peer address → fabric
    #: seconds, ``"*"`` for every other peer; empty = none
    path_delays: dict[str, float] = field(default_factory=dict)
    #: the controller's SRv6 path table for this host (``emu up`` of a cluster with
    #: ``routing.mode = "srv6"``): destination address → the outer destinations (uSID
    #: containers) of its paths; MRC's SRv6 EV format sends on them. Empty: none
    srv6_paths: dict[str, list[str]] = field(default_factory=dict)

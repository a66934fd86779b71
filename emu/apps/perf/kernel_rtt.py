# SPDX-License-Identifier: GPL-2.0-only
"""The kernel's round trip over the same path, to set emu's latency beside it.

Why: a latency test through emu measures the wire *and* the daemons; a
comparison between transports is only about the network if the daemons'
part is small. The kernel's ICMP echo over the same path (no user process
on the far side: the peer's kernel answers) is the path's floor, so the
latency tools print it with their result and the difference (what emu
adds per round trip). ``emu doctor`` and ``scripts/bench-credible`` can call
:func:`kernel_rtt` (cluster, host names) or :func:`ping_rtt` (an address,
optionally inside a namespace) the same way.

Measured with iputils ``ping`` rather than a raw socket of our own: it needs
no privileges beyond what ``ping`` has, and its summary is the number people
compare with. The interval (10 ms by default) leaves the CPUs idle between
echoes, as a ping-pong's wait does; back-to-back echoes on hot CPUs are ~3×
faster and would flatter nobody but the kernel.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass

DEFAULT_COUNT = 50
DEFAULT_INTERVAL = 0.01  # seconds between echoes (root may go below ping's 2 ms floor)

_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_RTT = re.compile(r"(?:rtt|round-trip) min/avg/max(?:/(?:mdev|stddev))? = "
                  r"([\d.]+)/([\d.]+)/([\d.]+)(?:/([\d.]+))? ms")


class RttError(Exception):
    """The path's round trip could not be measured (no ping, no answer, bad output)."""


@dataclass(frozen=True)
class PathRtt:
    """One ping run: the echo round trips in microseconds."""

    address: str
    sent: int
    received: int
    min_us: float
    avg_us: float
    max_us: float
    mdev_us: float
    interval_s: float

    def to_json(self) -> dict:
        return asdict(self)


def parse_ping(text: str, address: str, interval: float = DEFAULT_INTERVAL) -> PathRtt:
    """iputils' (or busybox's) summary lines as a :class:`PathRtt`; :class:`RttError` if
    nothing came back."""
    counts = _SUMMARY.search(text)
    rtt = _RTT.search(text)
    if counts is None:
        raise RttError(f"ping {address}: no summary in its output: {text.strip()[-200:]!r}")
    sent, received = int(counts.group(1)), int(counts.group(2))
    if received == 0 or rtt is None:
        raise RttError(f"ping {address}: no echo came back ({sent} sent)")
    mn, avg, mx, mdev = (float(g or 0) * 1000.0 for g in rtt.groups())  # busybox: no mdev
    return PathRtt(address, sent, received, mn, avg, mx, mdev, interval)


def ping_argv(address: str, count: int = DEFAULT_COUNT, interval: float = DEFAULT_INTERVAL
              ) -> list[str]:
    """``ping`` quiet, numeric, ``count`` echoes ``interval`` seconds apart, 1 s per reply."""
    ping = shutil.which("ping") or "ping"
    return [ping, "-n", "-q", "-c", str(count), "-i", f"{interval:g}", "-W", "1", address]


def ping_rtt(address: str, *, count: int = DEFAULT_COUNT, interval: float = DEFAULT_INTERVAL,
             prefix: Sequence[str] = (), timeout: float | None = None) -> PathRtt:
    """The kernel's ICMP echo round trip to ``address`` from where this runs — or, with
    ``prefix`` (e.g. ``netns.exec_argv(ns, [])``), from inside a namespace."""
    if count < 1:
        raise ValueError("count must be at least 1")
    argv = [*prefix, *ping_argv(address, count, interval)]
    limit = timeout if timeout is not None else count * interval + 5.0
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False)
    except FileNotFoundError as e:
        raise RttError(f"cannot run ping: {e}") from None
    except subprocess.TimeoutExpired:
        raise RttError(f"ping {address}: no summary within {limit:g} s") from None
    return parse_ping(r.stdout + r.stderr, address, interval)


def kernel_rtt(cluster: str, src: str, dst: str, *, count: int = DEFAULT_COUNT,
               interval: float = DEFAULT_INTERVAL) -> PathRtt:
    """Host ``src`` → host ``dst`` of a running cluster: the path ``emu perf --from src
    --to dst`` measures (``dst``'s first address, as the perf client is given)."""
    from emu.apps.perf.cluster import server_address
    from emu.cluster import cluster as C
    from emu.fabric.status import exec_argv

    name = C.resolve(cluster)
    addr = server_address(name, dst)
    return ping_rtt(addr, count=count, interval=interval, prefix=exec_argv(name, src, []))


def emu_rtt_us(test: str, t_typical_us: float) -> float:
    """emu's round trip from a latency row: ping-pong rows are half a round trip
    (perftest's convention), read-lat's are a whole one."""
    return t_typical_us if test.startswith("read") else 2.0 * t_typical_us


def added_rtt_us(test: str, t_typical_us: float, ping: PathRtt) -> float:
    """What emu adds to the kernel's round trip over the same path."""
    return emu_rtt_us(test, t_typical_us) - ping.avg_us

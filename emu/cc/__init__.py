# SPDX-License-Identifier: GPL-2.0-only
"""Congestion-control plug-ins behind one small ABC, found by name.

Why an ABC with a registry: a transport engine holds one controller per
flow (a RoCE QP, a UET PDC) and asks it two things only — *how fast* may I
send (:attr:`CongestionControl.rate`, bits/s, the pacer's input) and, for
window-based schemes, *how much* may be in flight (:attr:`CongestionControl.cwnd`).
Everything else is feedback the engine reports (bytes sent, ACKs, CNPs,
losses). Which algorithm runs is configuration (``"dcqcn"``, ``"nscc"``,
``"rccc"``), so engines call :func:`create` with a name and never import a class.

The sans-IO rule holds here as in ``emu.transports``: no clocks, sockets or
randomness; ``now`` (seconds, the caller's clock) is passed to every call and
controllers keep their own deadlines, exposed through :meth:`get_timer` /
:meth:`handle_timer` exactly like an endpoint, so the engine folds them into
its single timer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from emu.core.registry import Registry


class CongestionControl(ABC):
    """One flow's controller. Subclasses set :attr:`name` and register themselves.

    ``line_rate`` is the emulated link rate in bits/s: the ceiling of
    :attr:`rate` and the unit parameters scale with, so a 10 Gb/s emulated
    link and a 400 Gb/s one behave alike in relative terms.
    """

    name: ClassVar[str] = ""

    def __init__(self, line_rate: float, now: float = 0.0) -> None:
        if line_rate <= 0:
            raise ValueError("line_rate must be > 0 bits/s")
        self.line_rate = float(line_rate)

    @property
    @abstractmethod
    def rate(self) -> float:
        """Current allowed sending rate in bits/s (the pacer follows it)."""

    @property
    def cwnd(self) -> int | None:
        """Bytes allowed in flight, or None for purely rate-based schemes."""
        return None

    def on_sent(self, nbytes: int, now: float) -> None:  # noqa: B027 (optional hook)
        """``nbytes`` of data left the flow (byte counters, pacing credit)."""

    def on_ack(self, nbytes: int, now: float, *, ecn_echo: bool = False,  # noqa: B027
               rtt: float | None = None) -> None:
        """``nbytes`` newly acknowledged (window schemes grow here)."""

    def on_loss(self, now: float) -> None:  # noqa: B027 (optional hook)
        """The transport inferred a loss (NAK, timeout)."""

    def on_cnp(self, now: float) -> None:  # noqa: B027 (optional hook)
        """A congestion notification arrived (RoCE CNP, UET ECN-echo)."""

    def on_trim(self, nbytes: int, now: float) -> None:
        """A packet of ``nbytes`` was trimmed by a switch (UET NACK TRIMMED*): by default
        a loss; trimming-aware schemes (NSCC) react to it faster and more precisely."""
        self.on_loss(now)

    def on_credit(self, nbytes: int, now: float) -> None:  # noqa: B027 (optional hook)
        """The receiver granted ``nbytes`` more credit (UET CREDIT; RCCC only)."""

    def send_allowance(self, in_flight: int) -> int | None:
        """Bytes the flow may put on the wire now, given ``in_flight`` unACKed bytes, or
        None for no limit. Why a method rather than engines reading :attr:`cwnd`: a
        window scheme allows ``cwnd − in_flight``, a credit scheme (RCCC) allows the
        unspent credit whatever is in flight, and the engine need not know which."""
        w = self.cwnd
        return None if w is None else max(0, w - in_flight)

    def get_timer(self) -> float | None:
        """The controller's next deadline, or None when it has nothing scheduled."""
        return None

    def handle_timer(self, now: float) -> None:  # noqa: B027 (optional hook)
        """Run whatever was due at or before ``now``."""

    def state(self) -> dict[str, Any]:
        """Numbers for counters, traces and tests (rate, α, stage …)."""
        return {"rate": self.rate}


_PLUGINS: Registry[CongestionControl] = Registry("congestion control", lambda: _load_builtins())
register = _PLUGINS.register
available = _PLUGINS.available


def create(name: str, line_rate: float, now: float = 0.0, **params: Any) -> CongestionControl:
    """A new controller by name; unknown names and parameters raise ValueError."""
    return _PLUGINS.build(name, line_rate, now, **params)


def _load_builtins() -> None:
    from emu.cc import dcqcn, nscc, rccc  # noqa: F401  (register themselves)

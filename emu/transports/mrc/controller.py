# SPDX-License-Identifier: GPL-2.0-only
"""The MRC engine's calls for the controller (``emu mrc``): EV tables and events, EV and
CC profiles, a QP's window, EVs denied or allowed, EV_PROBE results.

Why a module of its own: they read and set a NIC's state on request and never run per
packet; apart, :mod:`emu.transports.mrc.engine` stays the datapath (the wire, timers,
verbs, ports), within the size its readers can hold. :class:`MrcEngine` takes them as a
base class.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from emu.core.psn import RandomBits
from emu.transports.base import VerbsError
from emu.transports.mrc.profiles import ProfileError, Profiles


class ControllerCalls:
    """What ``emu mrc`` asks of an engine; the engine holds the state named below."""

    _qps: dict[int, Any]
    profiles: Profiles
    rng: RandomBits
    probe_results: deque[dict[str, Any]]

    def _qp(self, qpn: int) -> Any:  # the engine's: the QP, or VerbsError
        raise NotImplementedError

    def qpns(self) -> list[int]:
        return sorted(self._qps)

    def ev_table(self, qpn: int) -> dict[str, Any]:
        """The QP's EV set (``emu mrc qp``): state, peer, summary and one row per EV."""
        qp = self._qp(qpn)
        base = {"qpn": qpn, "state": qp.state, "peer": None if qp.ini is None else qp.ini.peer,
                "dest": list(qp.dest) if qp.dest else None}
        if qp.ini is None:
            return {**base, "summary": None, "evs": []}
        return {**base, "summary": qp.ini.evs.summary(), "evs": qp.ini.evs.table()}

    def ev_events(self, qpn: int) -> tuple[list[dict[str, Any]], int]:
        """The QP's EV state changes since the last poll, and how many were dropped."""
        qp = self._qp(qpn)
        if qp.ini is None:
            return [], 0
        events, dropped = qp.ini.evs.events()
        return [e.to_dict() for e in events], dropped

    def probe_evs(self, n: int) -> list[int]:
        """The EVs an EV_PROBE batch takes when the controller names none: the default EV
        profile's first ``n`` (drawn, for an AUTO profile)."""
        evp = self.profiles.for_qp("ev", None).ev
        assert evp is not None
        try:
            return evp.draw(max(1, min(n, 256)), self.rng)
        except ValueError as e:
            raise VerbsError(str(e)) from None

    def take_probe_results(self) -> list[dict[str, Any]]:
        out = list(self.probe_results)
        self.probe_results.clear()
        return out

    def profile_op(self, kind: str, action: str, name: str | None = None,
                   spec: dict[str, Any] | None = None) -> dict[str, Any]:
        """The controller's profile calls (``emu mrc ev-profile|cc-profile``): ``list``,
        ``create`` (with ``spec``), ``offline``, ``online``, ``delete``, ``default``."""
        pr = self.profiles
        try:
            if action == "list":
                return pr.listing()
            if name is None:
                raise ProfileError(f"{action} needs a profile name")
            if action == "create":
                return pr.create(kind, name, spec or {}).to_dict()
            if action in ("offline", "online"):
                return pr.move(kind, name, action).to_dict()
            if action == "delete":
                pr.delete(kind, name)
                return pr.listing()
            if action == "default":
                pr.set_default(kind, name)
                return pr.listing()
            raise ProfileError(f"profile action {action!r}: list, create, offline, online, "
                               "delete or default")
        except ProfileError as e:
            raise VerbsError(str(e)) from None

    def resize_window(self, qpn: int, mpr: int) -> dict[str, Any]:
        """The QP's receive window (MPR, packets) changed by the NIC: advertised in its
        SACKs; a peer with DYNAMIC_MPR follows it, one without keeps its RTR value."""
        qp = self._qp(qpn)
        if qp.tgt is None:
            raise VerbsError(f"MRC QP {qpn:#x} is not connected")
        try:
            qp.tgt.resize(int(mpr))
        except ValueError as e:
            raise VerbsError(str(e)) from None
        return {"qpn": qpn, "mpr": qp.tgt.mpr}

    def ev_control(self, qpn: int, ev: int, action: str, now: float) -> None:
        """The controller denies an EV or allows it again (``emu mrc ev … deny|allow``)."""
        qp = self._qp(qpn)
        if qp.ini is None:
            raise VerbsError(f"MRC QP {qpn:#x} is not connected")
        try:
            if action == "deny":
                qp.ini.evs.deny(ev, now)
            elif action == "allow":
                qp.ini.evs.allow(ev, now)
            else:
                raise VerbsError(f"EV action is deny or allow, not {action!r}")
        except KeyError as e:
            raise VerbsError(str(e.args[0])) from None

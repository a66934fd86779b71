# SPDX-License-Identifier: GPL-2.0-only
"""A NIC's MRC EV and CC profiles, managed as ``mrc_ctl.h`` manages them.

A QP is created against an EV profile (which entropy values it may spray over,
:mod:`emu.transports.mrc.evprofile`) and a CC profile (its congestion control and
that algorithm's parameters). The controller creates a profile (state INIT), takes
it OFFLINE, then ONLINE; only an ONLINE profile can be given to a QP, and taking a
profile offline leaves the QPs already built on it alone (they copied it). Each kind
has a built-in ``default`` profile, ONLINE, made from the daemon's options; the
controller may name another ONLINE profile as the default for the QPs that do not
name one.

Specs come as plain data (the control protocol's JSON), are checked here once, and
turn into :class:`EVProfile` objects or NSCC keyword arguments. Sans-IO: no clock,
no sockets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emu.transports.mrc.evprofile import EVGenMode, EVProfile, GenField
from emu.wire.codec.ev import DEFAULT_SPLIT, EVMode, parse_split

KINDS = ("ev", "cc")
STATES = ("INIT", "OFFLINE", "ONLINE")
#: the state changes mrc_ctl.h allows: INIT -> OFFLINE -> ONLINE, and back offline
MOVES = {("INIT", "OFFLINE"), ("OFFLINE", "ONLINE"), ("ONLINE", "OFFLINE")}
#: CC algorithms: mrc_ctl.h's NSCC, or none (the MPR window alone)
CC_ALGORITHMS = ("uet-1.0-nscc", "none")
#: NSCC parameters a CC profile may set (emu.cc.nscc.Nscc's keyword arguments)
CC_PARAMS = {"base_rtt": float, "gamma": float, "delay_alpha": float, "qa_gate": int,
             "init_cwnd": int}


class ProfileError(ValueError):
    """A profile spec, name or state change the controller may not make."""


@dataclass
class Profile:
    """One profile: its kind, name, state, the spec as given and what it builds."""

    kind: str
    name: str
    spec: dict[str, Any]
    state: str = "INIT"
    ev: EVProfile | None = None            # kind "ev"
    cc: dict[str, Any] = field(default_factory=dict)  # kind "cc": {"algorithm", params}

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "state": self.state, "spec": self.spec}


def ev_profile(spec: dict[str, Any]) -> EVProfile:
    """An :class:`EVProfile` from a spec: ``format`` (udp, stev, srv6), ``mode`` (auto,
    exp, gen), ``split`` (stev, srv6: ``S+F[@BASE]``, :func:`emu.wire.codec.ev.parse_split`),
    ``evs`` (exp) and ``fields`` (gen: each ``width``, ``init``, ``min``, ``max``,
    ``mask``)."""
    try:
        fmt = EVMode(str(spec.get("format", "udp")).lower())
        mode = EVGenMode(str(spec.get("mode", "gen")).lower())
        evs = tuple(int(v) for v in spec.get("evs") or ())
        fields = tuple(GenField(int(f["width"]), init=int(f.get("init", 0)),
                                lo=int(f.get("min", 0)),
                                hi=None if f.get("max") is None else int(f["max"]),
                                mask=None if f.get("mask") is None else int(f["mask"]))
                       for f in spec.get("fields") or ())
        if evs and mode is not EVGenMode.EXP:
            raise ValueError(f"EVs are listed for mode exp, not {mode.value}")
        if fields and mode is not EVGenMode.GEN:
            raise ValueError(f"fields are for mode gen, not {mode.value}")
        split = parse_split(str(spec.get("split") or DEFAULT_SPLIT))
        if fmt is EVMode.UDP and split != DEFAULT_SPLIT:
            raise ValueError("a split is for the stev and srv6 formats (udp: the source "
                             "port alone)")
        return EVProfile(fmt=fmt, mode=mode, split=split, explicit=evs, fields=fields)
    except (KeyError, TypeError, ValueError) as e:
        raise ProfileError(f"bad EV profile: {e}") from None


def cc_profile(spec: dict[str, Any]) -> dict[str, Any]:
    """``{"algorithm": …, <NSCC parameter>: value}`` from a spec, checked."""
    algo = str(spec.get("algorithm", CC_ALGORITHMS[0]))
    if algo not in CC_ALGORITHMS:
        raise ProfileError(f"CC algorithm is one of {', '.join(CC_ALGORITHMS)}, not {algo!r}")
    unknown = set(spec) - set(CC_PARAMS) - {"algorithm"}
    if unknown:
        raise ProfileError(f"unknown CC parameter(s) {', '.join(sorted(unknown))} (known: "
                           f"{', '.join(CC_PARAMS)})")
    out: dict[str, Any] = {"algorithm": algo}
    for k, cast in CC_PARAMS.items():
        if spec.get(k) is not None:
            try:
                out[k] = cast(spec[k])
            except (TypeError, ValueError):
                raise ProfileError(f"CC parameter {k}: {spec[k]!r} is not a number") from None
    if out.get("base_rtt", 1.0) <= 0:
        raise ProfileError("base_rtt must be > 0 s")
    if out.get("init_cwnd", 1) <= 0:
        raise ProfileError("init_cwnd must be > 0 bytes")
    if out.get("gamma") is not None and not 0 < out["gamma"] < 1:
        raise ProfileError("gamma must be between 0 and 1")
    return out


class Profiles:
    """The NIC's profiles of both kinds, with a default for each."""

    def __init__(self, ev_default: EVProfile, cc_default: dict[str, Any]) -> None:
        ev_spec = {"builtin": True, "format": ev_default.fmt.value,
                   "mode": ev_default.mode.value, "evs": list(ev_default.explicit),
                   "fields": [{"width": f.width, "init": f.init, "min": f.lo, "max": f.hi,
                               "mask": f.mask} for f in ev_default.fields]}
        self.table: dict[tuple[str, str], Profile] = {
            ("ev", "default"): Profile("ev", "default", ev_spec, "ONLINE", ev=ev_default),
            ("cc", "default"): Profile("cc", "default", {"builtin": True, **cc_default},
                                       "ONLINE", cc=dict(cc_default))}
        self.default = {"ev": "default", "cc": "default"}

    def _get(self, kind: str, name: str) -> Profile:
        if kind not in KINDS:
            raise ProfileError(f"profile kind is ev or cc, not {kind!r}")
        p = self.table.get((kind, name))
        if p is None:
            raise ProfileError(f"no {kind.upper()} profile {name!r}")
        return p

    def create(self, kind: str, name: str, spec: dict[str, Any]) -> Profile:
        if kind not in KINDS:
            raise ProfileError(f"profile kind is ev or cc, not {kind!r}")
        if not name or (kind, name) in self.table:
            raise ProfileError(f"{kind.upper()} profile {name!r} exists already" if name
                               else "a profile needs a name")
        p = Profile(kind, name, dict(spec))
        if kind == "ev":
            p.ev = ev_profile(spec)
        else:
            p.cc = cc_profile(spec)
        self.table[(kind, name)] = p
        return p

    def move(self, kind: str, name: str, state: str) -> Profile:
        """INIT → OFFLINE → ONLINE (and ONLINE → OFFLINE); the default stays ONLINE."""
        p = self._get(kind, name)
        state = state.upper()
        if (p.state, state) not in MOVES:
            raise ProfileError(f"{kind.upper()} profile {name!r} is {p.state}: it cannot go "
                               f"{state} (INIT -> OFFLINE -> ONLINE)")
        if state == "OFFLINE" and self.default[kind] == name:
            raise ProfileError(f"{name!r} is the default {kind.upper()} profile: name another "
                               "default first")
        p.state = state
        return p

    def delete(self, kind: str, name: str) -> None:
        p = self._get(kind, name)
        if name == "default":
            raise ProfileError(f"{kind.upper()} profile 'default' is built in")
        if self.default[kind] == name:
            raise ProfileError(f"{name!r} is the default {kind.upper()} profile: name another "
                               "default first")
        if p.state == "ONLINE":
            raise ProfileError(f"{kind.upper()} profile {name!r} is ONLINE: take it offline")
        del self.table[(kind, name)]

    def set_default(self, kind: str, name: str) -> None:
        p = self._get(kind, name)
        if p.state != "ONLINE":
            raise ProfileError(f"{kind.upper()} profile {name!r} is {p.state}, not ONLINE")
        self.default[kind] = name

    def for_qp(self, kind: str, name: str | None) -> Profile:
        """The profile a new QP is built on (``None``: the default): ONLINE only. Whether
        its format reaches the peer (STEV and SRv6 need IPv6; SRv6 a path table) is the
        QP's connect to say."""
        p = self._get(kind, self.default[kind] if name is None else str(name))
        if p.state != "ONLINE":
            raise ProfileError(f"{kind.upper()} profile {p.name!r} is {p.state}, not ONLINE")
        return p

    def listing(self) -> dict[str, Any]:
        return {"profiles": [p.to_dict() for p in self.table.values()],
                "default": dict(self.default)}

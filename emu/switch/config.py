# SPDX-License-Identifier: GPL-2.0-only
"""Switch pipeline configuration: per switch, per egress port, per traffic class.

Three dataclasses, pure data, JSON-round-trippable (``to_dict``/``from_dict``)
so the same values come from a topology file, the daemon's ``--config`` file
and the live control socket (:func:`apply_settings`, what ``emu switch NODE
PORT set k=v …`` calls).

Defaults (why these): queues are deliberately shallow and thresholds low so
that congestion shows at emulation speeds (Mbit/s to a few Gbit/s in Python),
not at 400G ASIC speeds.

=================  ==========  ===========================================
key                default     meaning
=================  ==========  ===========================================
**ClassConfig**
ecn                true        RED-style CE marking of ECT packets
kmin               20000 B     no marks while the class's queue is below
kmax               200000 B    every ECT packet marked at or above
pmax               0.2         marking probability just below kmax
trim               false       trim this class's transport packets
trim_threshold     null        queue bytes above which to trim (null = trim
                               only what would be tail-dropped)
lossless           false       PFC-like pause of the upstream ports
xoff               65536 B     pause upstream when the class's queue passes
xon                32768 B     resume when it falls to or below
**PortConfig**
rate               null        bits/s of serialization (null = line rate:
                               the kernel's own speed, no user-space queue)
depth              1000000 B   data queue size (tail drop beyond)
trim_depth         65536 B     strict-priority queue of trimmed packets
host_facing        false       trimmed DSCP is TRIMMED_LASTHOP here
loss               0.0         random loss probability of transport packets
delay, jitter      0.0 s       extra hold after serialization (uniform ±)
classes            {}          class number -> ClassConfig (others: default)
default_class      (above)     ClassConfig for classes not listed
**SwitchConfig**
ports              {}          ifname -> PortConfig ("*" = every other port)
dscp_map           null        DSCP -> class; null = DSCP >> 3 (8 classes)
trimmed_dscp       30          DSCP of trimmed packets
trimmed_lasthop    31          DSCP of packets trimmed on a host-facing port
trim_size          null        fixed trimmed IP size in bytes; null = cut
                               after the transport headers (protocol-aware)
trim_dscps         null        if a list: only these DSCPs are trimmable
match              udp:4791, udp:4793, udp:4971,   what is queued at all (RoCEv2, UET,
                   proto:253                       MRC; UET native)
queue_num          0           NFQUEUE number
copy_range         256         bytes of each packet copied to user space
queue_maxlen       16384       kernel queue length (then fail-open)
fail_open          true        queue/socket full: kernel forwards (false: drops)
ce_mark            0x20000000  skb mark bit that the nft rule turns into CE
pfc_quantum        5.12e-07 s  one pause quantum (512 bit times at 1 Gb/s)
pfc_refresh        0.01 s      XOFF re-sent this often while paused
series_interval    0.1 s       counters.json / series.jsonl period
seed               null        RNG seed (marking, loss, jitter; user-space path)
datapath           auto        kernel (tc BPF + tbf), user (NFQUEUE + Python,
                               the reference), auto = kernel where it serves
                               the configuration and can load, else user
=================  ==========  ===========================================
"""

from __future__ import annotations

import copy
import fnmatch
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from emu.topology.units import UnitError, parse_prob, parse_rate, parse_time
from emu.wire.uet_defs import DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP

#: where the per-packet work runs (emu.switch.kernel, emu.switch.daemon)
DATAPATHS = ("auto", "kernel", "user")

__all__ = ["ClassConfig", "ConfigError", "PortConfig", "SwitchConfig", "apply_settings",
           "is_pattern", "parse_size", "select_ports"]

NUM_DSCP = 64


class ConfigError(ValueError):
    """A setting that does not parse or is out of range; the message names the key."""


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "k": 1000, "mb": 1000**2, "m": 1000**2,
               "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_size(value: object) -> int:
    """Bytes from ``20000``, ``"20KB"`` (10³), ``"64KiB"`` (2¹⁰), ``"1MB"``, ``"1.5MiB"``."""
    if isinstance(value, bool):
        raise UnitError(f"bad size {value!r}: expected e.g. '20KB' or a number of bytes")
    if isinstance(value, int | float):
        n = float(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m is None or m.group(2).lower() not in _SIZE_UNITS:
            raise UnitError(f"bad size {value!r}: expected e.g. '20KB', '64KiB', '1MB' or bytes")
        n = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    else:
        raise UnitError(f"bad size {value!r}: expected e.g. '20KB' or a number of bytes")
    if n < 0 or n > 2**40:
        raise UnitError(f"size {value!r} is out of range 0..1TiB")
    return round(n)


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise UnitError(f"expected true/false, got {value!r}")


def _opt(parser: Any) -> Any:
    def p(value: object) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
            return None
        return parser(value)
    return p


def _rate(value: object) -> int | None:
    return None if value is None else parse_rate(value)


@dataclass
class ClassConfig:
    """Marking, trimming and pause thresholds of one traffic class on one port."""

    ecn: bool = True
    kmin: int = 20_000
    kmax: int = 200_000
    pmax: float = 0.2
    trim: bool = False
    trim_threshold: int | None = None
    lossless: bool = False
    xoff: int = 65_536
    xon: int = 32_768

    def check(self, where: str) -> None:
        if self.kmax < self.kmin:
            raise ConfigError(f"{where}: kmax ({self.kmax}) < kmin ({self.kmin})")
        if self.xon > self.xoff:
            raise ConfigError(f"{where}: xon ({self.xon}) > xoff ({self.xoff})")


_CLASS_PARSERS: dict[str, Any] = {
    "ecn": _bool, "kmin": parse_size, "kmax": parse_size, "pmax": parse_prob, "trim": _bool,
    "trim_threshold": _opt(parse_size), "lossless": _bool, "xoff": parse_size,
    "xon": parse_size,
}


@dataclass
class PortConfig:
    """One egress port: serialization rate, buffer, impairments and its classes."""

    rate: int | None = None
    depth: int = 1_000_000
    trim_depth: int = 65_536
    host_facing: bool = False
    loss: float = 0.0
    delay: float = 0.0
    jitter: float = 0.0
    classes: dict[int, ClassConfig] = field(default_factory=dict)
    default_class: ClassConfig = field(default_factory=ClassConfig)

    def klass(self, c: int) -> ClassConfig:
        """The configuration of class ``c`` (the port's default unless listed)."""
        return self.classes.get(c, self.default_class)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("classes", "default_class")}
        d["default_class"] = asdict(self.default_class)
        d["classes"] = {str(k): asdict(v) for k, v in sorted(self.classes.items())}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "port") -> PortConfig:
        d = dict(d)
        classes = d.pop("classes", {}) or {}
        default = d.pop("default_class", None)
        port = apply_settings(cls(), d, where=where)
        if default is not None:
            port.default_class = _class_from_dict(default, f"{where}.default_class")
        for k, v in classes.items():
            try:
                c = int(k)
            except (TypeError, ValueError):
                raise ConfigError(f"{where}.classes: class {k!r} is not a number") from None
            if not 0 <= c < NUM_DSCP:
                raise ConfigError(f"{where}.classes: class {c} is out of range 0..63")
            port.classes[c] = _class_from_dict(v, f"{where}.classes.{c}",
                                               base=port.default_class)
        return port


_PORT_PARSERS: dict[str, Any] = {
    "rate": _rate, "depth": parse_size, "trim_depth": parse_size, "host_facing": _bool,
    "loss": parse_prob, "delay": parse_time, "jitter": parse_time,
}


def _class_from_dict(d: dict[str, Any], where: str,
                     base: ClassConfig | None = None) -> ClassConfig:
    c = replace(base) if base is not None else ClassConfig()
    for k, v in d.items():
        _set_class(c, k, v, where)
    c.check(where)
    return c


def _set_class(c: ClassConfig, key: str, value: object, where: str) -> None:
    parser = _CLASS_PARSERS.get(key)
    if parser is None:
        raise ConfigError(f"{where}: unknown class setting {key!r} "
                          f"(known: {', '.join(sorted(_CLASS_PARSERS))})")
    try:
        setattr(c, key, parser(value))
    except UnitError as e:
        raise ConfigError(f"{where}.{key}: {e}") from None


_CLASS_KEY = re.compile(r"^c(?:lass)?(\d+)\.(\w+)$")


def apply_settings(port: PortConfig, settings: dict[str, Any], where: str = "port") -> PortConfig:
    """Change ``port`` in place from user strings; returns it. Raises ConfigError.

    Keys: any PortConfig field (``rate="10mbit"``, ``depth="1MB"``, ``loss="1%"``,
    ``delay="2ms"``); a ClassConfig field (``kmin="20KB"``) sets it on the default
    class *and* every listed class; ``c3.kmin`` / ``class3.kmin`` only on class 3
    (created from the default class if not listed). Checked as a whole: on an
    error nothing is changed.
    """
    trial = copy.deepcopy(port) if settings else port
    for key, value in settings.items():
        m = _CLASS_KEY.match(key)
        if m:
            c = int(m.group(1))
            if not 0 <= c < NUM_DSCP:
                raise ConfigError(f"{where}: class {c} is out of range 0..63")
            kc = trial.classes.setdefault(c, replace(trial.default_class))
            _set_class(kc, m.group(2), value, f"{where}.classes.{c}")
        elif key in _CLASS_PARSERS:
            for kc in (trial.default_class, *trial.classes.values()):
                _set_class(kc, key, value, where)
        elif key in _PORT_PARSERS:
            try:
                setattr(trial, key, _PORT_PARSERS[key](value))
            except UnitError as e:
                raise ConfigError(f"{where}.{key}: {e}") from None
        else:
            raise ConfigError(
                f"{where}: unknown setting {key!r} (port: {', '.join(sorted(_PORT_PARSERS))}; "
                f"class: {', '.join(sorted(_CLASS_PARSERS))}, or cN.<class setting>)")
    if trial.depth <= 0:
        raise ConfigError(f"{where}.depth: must be > 0")
    for n, kc in [("default_class", trial.default_class),
                  *((f"classes.{k}", v) for k, v in trial.classes.items())]:
        kc.check(f"{where}.{n}")
    if trial is not port:
        for f in fields(PortConfig):
            setattr(port, f.name, getattr(trial, f.name))
    return port


def is_pattern(spec: str) -> bool:
    """Whether a port name given by a user is a shell wildcard (``*``, ``h?``, ``spine[12]``)."""
    return any(c in spec for c in "*?[")


def select_ports(spec: str, ports: Iterable[str]) -> list[str]:
    """The ports of a switch that ``spec`` names: the one port of that name, or every port a
    wildcard matches, in the order of ``ports``. Raises ConfigError, listing the switch's
    ports, when it names none.

    The one check of a port a user names (``emu switch NODE PORT …``): the daemon applies
    ``set`` only through it, so a typo is refused instead of being stored as a port of its
    own, and a wildcard is applied to real ports, never kept as a port named ``*``."""
    names = list(ports)
    if is_pattern(spec):
        hit = [p for p in names if fnmatch.fnmatchcase(p, spec)]
    else:
        hit = [spec] if spec in names else []
    if not hit:
        what = f"{spec!r} matches no port" if is_pattern(spec) else f"no port {spec!r}"
        raise ConfigError(f"{what} on this switch (its ports: {', '.join(names) or 'none'})")
    return hit


_MATCH_RE = re.compile(r"^(udp:\d{1,5}|proto:\d{1,3})$")


@dataclass
class SwitchConfig:
    """Everything one switch daemon needs besides its namespace."""

    ports: dict[str, PortConfig] = field(default_factory=dict)
    dscp_map: dict[int, int] | None = None
    trimmed_dscp: int = DSCP_TRIMMED
    trimmed_lasthop: int = DSCP_TRIMMED_LASTHOP
    trim_size: int | None = None
    trim_dscps: list[int] | None = None
    match: list[str] = field(default_factory=lambda: ["udp:4791", "udp:4793", "udp:4971",
                                                      "proto:253"])
    queue_num: int = 0
    copy_range: int = 256
    queue_maxlen: int = 16384
    fail_open: bool = True
    ce_mark: int = 0x20000000
    pfc_quantum: float = 512 / 1e9
    pfc_refresh: float = 0.01
    series_interval: float = 0.1
    seed: int | None = None
    datapath: str = "auto"

    def port(self, ifname: str) -> PortConfig:
        """The port's config: its own entry, else ``"*"``, else a default (unshaped) port."""
        p = self.ports.get(ifname)
        if p is None:
            p = self.ports.get("*")
            p = copy.deepcopy(p) if p is not None else PortConfig()
            self.ports[ifname] = p
        return p

    def klass_of(self, dscp: int) -> int:
        if self.dscp_map is None:
            return dscp >> 3
        return self.dscp_map.get(dscp, 0)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["ports"] = {k: v.to_dict() for k, v in self.ports.items()}
        if self.dscp_map is not None:
            d["dscp_map"] = {str(k): v for k, v in self.dscp_map.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SwitchConfig:
        d = dict(d)
        known = {f.name for f in fields(cls)}
        for k in d:
            if k not in known:
                raise ConfigError(f"switch: unknown setting {k!r} "
                                  f"(known: {', '.join(sorted(known))})")
        ports = d.pop("ports", {}) or {}
        dmap = d.pop("dscp_map", None)
        cfg = cls(**{k: v for k, v in d.items()})
        cfg.ports = {str(k): PortConfig.from_dict(v, f"ports.{k}") for k, v in ports.items()}
        if dmap is not None:
            cfg.dscp_map = {}
            for k, v in dmap.items():
                try:
                    dk, dv = int(k), int(v)
                except (TypeError, ValueError):
                    raise ConfigError(f"dscp_map: {k!r}: {v!r} are not numbers") from None
                if not (0 <= dk < NUM_DSCP and 0 <= dv < NUM_DSCP):
                    raise ConfigError(f"dscp_map: {dk} -> {dv} out of range 0..63")
                cfg.dscp_map[dk] = dv
        cfg.check()
        return cfg

    def check(self) -> None:
        for name in ("trimmed_dscp", "trimmed_lasthop"):
            v = getattr(self, name)
            if not (isinstance(v, int) and 0 <= v < NUM_DSCP):
                raise ConfigError(f"{name}: {v!r} is not a DSCP (0..63)")
        for m in self.match:
            if not _MATCH_RE.match(str(m)):
                raise ConfigError(f"match: {m!r} is not 'udp:PORT' or 'proto:N'")
        if self.trim_size is not None and not 28 <= self.trim_size <= 65535:
            raise ConfigError(f"trim_size: {self.trim_size} out of range 28..65535")
        if self.trim_size is not None and self.trim_size > self.copy_range:
            raise ConfigError(f"trim_size {self.trim_size} > copy_range {self.copy_range}")
        if not 64 <= self.copy_range <= 65535:
            raise ConfigError(f"copy_range: {self.copy_range} out of range 64..65535")
        if self.datapath not in DATAPATHS:
            raise ConfigError(f"datapath: {self.datapath!r} is not one of {', '.join(DATAPATHS)}")
        if not 0 <= self.queue_num <= 65535:
            raise ConfigError(f"queue_num: {self.queue_num} out of range 0..65535")
        if not (0 < self.ce_mark < 2**32 and self.ce_mark & (self.ce_mark - 1) == 0):
            raise ConfigError(f"ce_mark: {self.ce_mark:#x} must be one bit")

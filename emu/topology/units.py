# SPDX-License-Identifier: GPL-2.0-only
"""Parsing of the values users write in topology files and on ``--set``.

Rates follow tc's spelling so a value can be pasted from ``tc`` output:
``10gbit``, ``100mbit``, ``1.5gbit``, ``500kbit``, ``1000bit`` (bits/s) and
the ``bps`` family (``125mbps`` = 125 megaBYTES/s, as tc means it); IEC forms
``kibit``/``mibit``/``gibit`` are powers of 1024. A plain integer is bits/s.
``"unlimited"`` means no rate limit (useful to undo a default with ``--set``).

Probabilities are ``"1%"``, ``"0.5%"`` or a number in [0, 1]. Times are
``"2s"``, ``"500ms"``, ``"100us"``, ``"10ns"``, ``"1.5m"`` or a plain number of
seconds.

Every parser raises :class:`UnitError` with a short reason; the loader adds the
file and key, so messages stay one line.
"""

from __future__ import annotations

import re

__all__ = ["UnitError", "parse_rate", "parse_prob", "parse_time", "parse_int", "parse_seed",
           "format_rate"]


class UnitError(ValueError):
    """A value that does not parse; the message is the reason only (no location)."""


_NUM = r"(\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_RATE_RE = re.compile(rf"^\s*({_NUM})\s*([a-z]*)\s*$", re.IGNORECASE)

_RATE_UNITS: dict[str, float] = {
    "": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
    "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40,
    "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,
    "kibps": 8 * 2**10, "mibps": 8 * 2**20, "gibps": 8 * 2**30, "tibps": 8 * 2**40,
}

_TIME_UNITS: dict[str, float] = {
    "": 1, "s": 1, "sec": 1, "ms": 1e-3, "msec": 1e-3, "us": 1e-6, "usec": 1e-6,
    "ns": 1e-9, "nsec": 1e-9, "m": 60, "min": 60,
}


def _is_number(value: object) -> bool:
    """bool is an int in Python but never a number in a topology file."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_rate(value: object) -> int | None:
    """A link rate in bits/s (> 0), or None for ``"unlimited"``."""
    if isinstance(value, str) and value.strip().lower() in ("unlimited", "none"):
        return None
    if _is_number(value):
        bps = float(value)  # type: ignore[arg-type]
    elif isinstance(value, str):
        m = _RATE_RE.match(value)
        unit = m.group(3).lower() if m else None
        if m is None or unit not in _RATE_UNITS:
            raise UnitError(
                f"bad rate {value!r}: expected e.g. '10gbit', '100mbit', '1.5gbit' "
                "or an integer in bits/s")
        bps = float(m.group(1)) * _RATE_UNITS[unit]
    else:
        raise UnitError(f"bad rate {value!r}: expected a string like '10gbit' or an integer")
    if not bps > 0:
        raise UnitError(f"rate must be > 0, got {value!r}")
    if bps > 2**64:
        raise UnitError(f"rate {value!r} is too large")
    return max(1, round(bps))


def format_rate(bps: int | None) -> str:
    """The shortest exact tc spelling of a rate (for labels and status output)."""
    if bps is None:
        return "unlimited"
    for unit, mult in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= mult and (bps * 10) % mult == 0:
            num = bps / mult
            return f"{num:g}{unit}"
    return f"{bps}bit"


def parse_prob(value: object) -> float:
    """A probability in [0, 1], from ``"1%"`` or a number."""
    if _is_number(value):
        p = float(value)  # type: ignore[arg-type]
    elif isinstance(value, str):
        text = value.strip()
        try:
            p = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise UnitError(f"bad probability {value!r}: expected e.g. '1%' or 0.01") from None
    else:
        raise UnitError(f"bad probability {value!r}: expected e.g. '1%' or 0.01")
    if not 0.0 <= p <= 1.0:
        raise UnitError(f"probability {value!r} is outside 0..1 (0%..100%)")
    return p


def parse_time(value: object) -> float:
    """A duration in seconds (≥ 0), from ``"500ms"`` or a number of seconds."""
    if _is_number(value):
        t = float(value)  # type: ignore[arg-type]
    elif isinstance(value, str):
        m = _RATE_RE.match(value)
        unit = m.group(3).lower() if m else None
        if m is None or unit not in _TIME_UNITS:
            raise UnitError(f"bad time {value!r}: expected e.g. '2s', '500ms', '100us'")
        t = float(m.group(1)) * _TIME_UNITS[unit]
    else:
        raise UnitError(f"bad time {value!r}: expected e.g. '2s', '500ms', '100us'")
    if not t >= 0:
        raise UnitError(f"time must be >= 0, got {value!r}")
    return t


def parse_int(value: object, lo: int | None = None, hi: int | None = None) -> int:
    """An integer in [lo, hi]; strings (from ``--set``) are accepted if they are integers."""
    if isinstance(value, bool):
        raise UnitError(f"expected an integer, got {value!r}")
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            value = int(text, 16 if text.lower().startswith("0x") else 10)
        except ValueError:
            raise UnitError(f"expected an integer, got {value!r}") from None
    if not isinstance(value, int):
        raise UnitError(f"expected an integer, got {type(value).__name__} {value!r}")
    if lo is not None and value < lo or hi is not None and value > hi:
        lo_s = "" if lo is None else str(lo)
        hi_s = "" if hi is None else str(hi)
        raise UnitError(f"{value} is out of range {lo_s}..{hi_s}")
    return value


def parse_seed(value: object) -> int | None:
    """A link's impairment seed: an integer in 0..2**32-1, or ``"random"`` (None: the
    kernel's draw, different every run)."""
    if isinstance(value, str) and value.strip().lower() == "random":
        return None
    try:
        return parse_int(value, 0, 2**32 - 1)
    except UnitError as e:
        raise UnitError(f"bad seed {value!r}: expected an integer 0..4294967295 or "
                        f"'random' ({e})") from None

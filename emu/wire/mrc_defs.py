# SPDX-License-Identifier: GPL-2.0-only
"""MRC wire settings where the public reconstructions disagree (``specs/mrc.md``,
"Where the reconstructions disagree"), as :mod:`emu.wire.uet_defs` does for UET.

Why a module of its own: the choice is made by the receiver that writes a SACK
(:mod:`emu.transports.mrc.target`) and read by the sender that takes it
(:mod:`emu.transports.mrc.initiator`), and the dissector names the field by it; all
of them must follow one setting, read at call time. Change it with :func:`configure`
(``emu nicd`` through ``python -m emu.interop.own_nicd --mrc-setting m_field=ecn``).

``m_field`` — what SETH's 2-bit M field (bits 6:5 of its first word) carries:

* ``"skip"`` (emu's default, reading A): the EV skip hint, 0 NONE / 1 SKIP_ONCE /
  2 ALWAYS_SKIP, for the EV the SACK echoes; the per-EV ECN echo is a bit of
  ``cc_flags`` (:data:`CC_FLAG_CE`).
* ``"ecn"`` (reading B): the ECN echo feeding NSCC — M = 1 when the packet the SACK
  answers arrived CE-marked, else 0 (2 and 3 are read as no mark); no skip hints
  exist and ``cc_flags`` carries no CE bit.

The other disagreements are settings elsewhere: the UDP port (``emu nicd --port
mrc=N``), the trimmed DSCPs (``emu nicd --trimmed-dscp``, the switch's
``trimmed_dscp``/``trimmed_lasthop``) and the STEV split (``EVSplit``).
"""

from __future__ import annotations

#: SETH/NETH ``cc_flags`` bit that echoes a CE mark on the answered packet's EV (reading A)
CC_FLAG_CE = 0x1
#: SETH.m under ``m_field = "ecn"``: the answered packet arrived CE-marked
M_ECN_CE = 1

M_FIELD = "skip"

_SETTINGS: dict[str, tuple[str, ...]] = {"m_field": ("skip", "ecn")}

#: SETH.m value names per reading (the dissector's)
M_NAMES: dict[str, dict[int, str]] = {
    "skip": {0: "NONE", 1: "SKIP_ONCE", 2: "ALWAYS_SKIP"},
    "ecn": {0: "NONE", 1: "ECN_CE"},
}


def configure(**settings: str) -> dict[str, str]:
    """Set MRC wire options by lower-case name; returns the previous values (to restore).

    ``configure(m_field="ecn")`` makes SETH.m the ECN echo (reading B)."""
    for name, value in settings.items():  # all checked before any is set
        if name not in _SETTINGS:
            raise KeyError(f"unknown MRC setting {name!r}; known: {sorted(_SETTINGS)}")
        if value not in _SETTINGS[name]:
            raise ValueError(f"MRC setting {name} = {value!r}; allowed: {_SETTINGS[name]}")
    old: dict[str, str] = {}
    for name, value in settings.items():
        old[name] = globals()[name.upper()]
        globals()[name.upper()] = value
    return old


def settings() -> dict[str, str]:
    """The current values, by name."""
    return {name: globals()[name.upper()] for name in _SETTINGS}


def seth_feedback(ce: bool, hint: int = 0) -> tuple[int, int]:
    """``(m, cc_flags)`` of a SACK answering a packet that arrived CE-marked or not, with
    skip hint ``hint`` (dropped under ``m_field = "ecn"``: that reading has none)."""
    if M_FIELD == "ecn":
        return (M_ECN_CE if ce else 0), 0
    return hint & 3, (CC_FLAG_CE if ce else 0)


def seth_read(m: int, cc_flags: int) -> tuple[bool, int]:
    """``(ce, hint)`` a sender takes from a SACK's M field and ``cc_flags``: the CE echo
    and the skip hint (0 NONE, 1 SKIP_ONCE, 2 ALWAYS_SKIP; always 0 under ``"ecn"``)."""
    if M_FIELD == "ecn":
        return m == M_ECN_CE, 0
    return bool(cc_flags & CC_FLAG_CE), (m if m in (0, 1, 2) else 0)


def m_name(m: int) -> str | int:
    """SETH.m's name under the current reading (the number if it has none)."""
    return M_NAMES[M_FIELD].get(m, m)

# SPDX-License-Identifier: GPL-2.0-only
"""Where MRC's 32-bit entropy value (EV) sits in a packet, and how to get it back.

The EV picks the packet's path (switches hash the UDP source port and, with
IPv6, the flow label) and is echoed in SACK/NACK so the sender learns which
paths are healthy (``specs/mrc.md``). Sender and receiver must agree exactly
on the placement, or the echo names a different EV than the one sent, so both
sides call the two pure functions here:

* :func:`ev_to_fields` ``(ev, mode, split) -> (sport, flow_label)``
* :func:`ev_from_fields` ``(sport, flow_label, mode, split) -> ev``

Modes (``mrc_ctl.h``):

``UDP``
    The EV lives in the UDP source port only (IPv4 or IPv6). A port has 16
    bits, so **in UDP mode an EV must be < 2^16**: :func:`ev_to_fields`
    raises ValueError for a larger one rather than dropping the upper bits.
    Why strict: silently truncating would make two EVs share a path while the
    echoed EV (rebuilt from the port) differs from the one the sender filed it
    under, so its scoreboard would blame or credit the wrong entry. The flow
    label is not part of the EV: ``ev_to_fields`` returns ``None`` for it
    (leave it as it is) and ``ev_from_fields`` ignores it.
``STEV``
    Split between the UDP source port and the IPv6 flow label, per
    :class:`EVSplit`. Default: sport = EV[31:16], flow label = EV[15:0].
``SRV6``
    The EV also selects the outer uSID path (that mapping lives in
    ``emu.paths``); in the inner packet it rides exactly as in STEV.

No scapy here, not even lazily: the daemons' codecs and the sans-IO
transports (MRC's EV profiles) import this. The scapy helpers that write and
read an EV in a built packet, :func:`emu.wire.ev.apply_ev` and
:func:`emu.wire.ev.packet_ev`, live in :mod:`emu.wire.ev`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

EV_BITS = 32
SPORT_BITS = 16
FLOW_LABEL_BITS = 20


class EVMode(enum.Enum):
    """EV format mode (``mrc_ctl.h``)."""

    UDP = "udp"
    STEV = "stev"
    SRV6 = "srv6"


@dataclass(frozen=True, slots=True)
class EVSplit:
    """How STEV/SRv6 split the EV between UDP source port and flow label.

    The low ``flow_label_bits`` of the EV go to the low bits of the flow label
    (its upper bits are zero); the next ``sport_bits`` go to the low bits of
    the source port. When ``sport_bits < 16`` the port's upper bits are the
    fixed ``sport_base`` (whose low ``sport_bits`` must be zero), e.g. to keep
    ports out of the well-known range. The EV must fit in
    ``sport_bits + flow_label_bits`` bits (at most 32).
    """

    sport_bits: int = 16
    flow_label_bits: int = 16
    sport_base: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.sport_bits <= SPORT_BITS:
            raise ValueError(f"EVSplit.sport_bits must be 1..{SPORT_BITS}, got {self.sport_bits}")
        if not 0 <= self.flow_label_bits <= FLOW_LABEL_BITS:
            raise ValueError(f"EVSplit.flow_label_bits must be 0..{FLOW_LABEL_BITS}, "
                             f"got {self.flow_label_bits}")
        if self.sport_bits + self.flow_label_bits > EV_BITS:
            raise ValueError(f"EVSplit: sport_bits + flow_label_bits = "
                             f"{self.sport_bits + self.flow_label_bits} exceeds {EV_BITS}")
        if not 0 <= self.sport_base < (1 << SPORT_BITS):
            raise ValueError(f"EVSplit.sport_base {self.sport_base} is not a UDP port")
        if self.sport_base & ((1 << self.sport_bits) - 1):
            raise ValueError(f"EVSplit.sport_base {self.sport_base:#06x} overlaps the "
                             f"{self.sport_bits} EV bits of the source port")

    @property
    def ev_bits(self) -> int:
        """How many EV bits this split carries."""
        return self.sport_bits + self.flow_label_bits

    def __str__(self) -> str:
        """``S+F`` or ``S+F@BASE``: the form :func:`parse_split` reads."""
        base = f"@{self.sport_base:#06x}" if self.sport_base else ""
        return f"{self.sport_bits}+{self.flow_label_bits}{base}"


DEFAULT_SPLIT = EVSplit()
#: the other reading (``specs/mrc.md``, "STEV split"): a 20-bit flow label, the EV's 12
#: bits above it in the source port above a fixed 0xD000 (emu's EV ports, 53248-57343)
SPLIT_FL20 = EVSplit(sport_bits=12, flow_label_bits=20, sport_base=0xD000)


def parse_split(text: str) -> EVSplit:
    """An :class:`EVSplit` from ``S+F`` or ``S+F@BASE`` (``16+16``, ``12+20@0xd000``):
    S EV bits in the source port (above BASE), F in the flow label. ValueError, with the
    form, for anything else."""
    try:
        bits, _, base = str(text).strip().partition("@")
        s, _, f = bits.partition("+")
        return EVSplit(sport_bits=int(s), flow_label_bits=int(f),
                       sport_base=int(base, 0) if base else 0)
    except ValueError as e:
        raise ValueError(f"STEV split {text!r}: expected S+F or S+F@BASE (source-port and "
                         f"flow-label bits, e.g. 16+16 or 12+20@0xd000): {e}") from None


def _mode(mode: EVMode | str) -> EVMode:
    if isinstance(mode, EVMode):
        return mode
    try:
        return EVMode(str(mode).lower())
    except ValueError:
        raise ValueError(f"unknown EV mode {mode!r}: use one of "
                         f"{', '.join(m.value for m in EVMode)}") from None


def ev_to_fields(ev: int, mode: EVMode | str = EVMode.STEV,
                 split: EVSplit = DEFAULT_SPLIT) -> tuple[int, int | None]:
    """``(sport, flow_label)`` that carry ``ev``; flow_label is None in UDP mode.

    Raises ValueError when ``ev`` does not fit the mode (UDP: 16 bits; STEV and
    SRv6: ``split.ev_bits``).
    """
    m = _mode(mode)
    if not isinstance(ev, int) or ev < 0 or ev >= (1 << EV_BITS):
        raise ValueError(f"EV {ev!r} is not a 32-bit unsigned value")
    if m is EVMode.UDP:
        if ev >= (1 << SPORT_BITS):
            raise ValueError(f"EV {ev:#x} does not fit UDP mode: only the 16-bit source "
                             f"port carries the EV (use EVs < 0x10000 or STEV)")
        return ev, None
    if ev >= (1 << split.ev_bits):
        raise ValueError(f"EV {ev:#x} does not fit a {split.sport_bits}+"
                         f"{split.flow_label_bits}-bit STEV split")
    fl_bits = split.flow_label_bits
    return split.sport_base | (ev >> fl_bits), ev & ((1 << fl_bits) - 1)


def ev_from_fields(sport: int, flow_label: int | None = None,
                   mode: EVMode | str = EVMode.STEV, split: EVSplit = DEFAULT_SPLIT) -> int:
    """The EV carried by a packet's UDP source port and IPv6 flow label.

    Inverse of :func:`ev_to_fields`. Bits outside the split (the port's
    ``sport_base`` bits, flow-label bits above ``flow_label_bits``) are
    ignored, as a receiver must accept whatever the wire holds there. Raises
    ValueError for a value that is not a port / flow label, or a missing flow
    label in STEV/SRv6 mode (e.g. an IPv4 packet).
    """
    m = _mode(mode)
    if not isinstance(sport, int) or not 0 <= sport < (1 << SPORT_BITS):
        raise ValueError(f"UDP source port {sport!r} is not a 16-bit value")
    if m is EVMode.UDP:
        return sport
    if flow_label is None:
        raise ValueError(f"{m.name} mode needs the IPv6 flow label (IPv4 allows UDP mode only)")
    if not isinstance(flow_label, int) or not 0 <= flow_label < (1 << FLOW_LABEL_BITS):
        raise ValueError(f"flow label {flow_label!r} is not a 20-bit value")
    fl_bits = split.flow_label_bits
    hi = sport & ((1 << split.sport_bits) - 1)
    return (hi << fl_bits) | (flow_label & ((1 << fl_bits) - 1))

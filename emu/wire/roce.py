# SPDX-License-Identifier: GPL-2.0-only
"""scapy layers for RoCEv2: BTH and every extension header, bound per opcode.

This module is the reference for the RoCEv2 layouts (``specs/rocev2.md``): the
struct codecs in :mod:`emu.wire.codec.roce` are checked against it field by
field. It also carries the BTH that MRC shares (MRC's opcodes and headers are
registered by :mod:`emu.wire.mrc`).

Why our own BTH rather than ``scapy.contrib.roce.BTH``: contrib binds only the
AETH, knows no MRC bits in byte 8 and stores the ICRC byte-swapped. We keep its
field names where they exist and use contrib's BTH in the tests as an
independent reference for the ICRC.

Which headers follow the BTH is a function of the opcode (and, for MRC writes,
of the BTH's TS bit). That function lives in one table, :data:`OPCODE_CHAINS`;
every extension header asks it what comes after itself, so a layout mistake is
fixed in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scapy.fields import (
    BitField,
    ByteEnumField,
    ByteField,
    FCSField,
    IntField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Packet, Raw, bind_layers

from emu.wire import icrc as _icrc
from emu.wire.codec import roce as _codec_roce
from emu.wire.codec.roce import (  # noqa: F401  (re-exported: the tables live with the codec)
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    CNP_OPCODE,
    NAK_CODES,
    OPERATIONS,
    TRANSPORT_OPERATIONS,
    TRANSPORT_PREFIX,
    aeth_kind,
    aeth_syndrome,
)

ROCE_UDP_PORT = 4791

# Opcodes: generated from the transport prefix and the operation table.
OPCODE_NAMES: dict[int, str] = {
    TRANSPORT_PREFIX[t] | op: f"{t}_{OPERATIONS[op]}"
    for t, ops in TRANSPORT_OPERATIONS.items()
    for op in ops
}
OPCODE_NAMES[CNP_OPCODE] = "CNP"
#: name -> opcode, e.g. ``OPCODES["RC_WRITE_ONLY"] == 0x0A``
OPCODES: dict[str, int] = {v: k for k, v in OPCODE_NAMES.items()}

# --------------------------------------------------------------------------
# BTH
# --------------------------------------------------------------------------

#: opcode -> function(bth) returning the header classes that follow the BTH, in order.
OPCODE_CHAINS: dict[int, Callable[[Packet], Sequence[type[Packet]]]] = {}


def register_opcode(opcode: int, name: str,
                    chain: Sequence[type[Packet]] | Callable[[Packet], Sequence[type[Packet]]]
                    ) -> None:
    """Declare ``opcode``'s name and the headers that follow its BTH.

    ``chain`` is a fixed sequence of header classes, or a function of the BTH
    when a flag decides (MRC's TS bit adds a TSETH).
    """
    OPCODE_NAMES[opcode] = name
    OPCODES[name] = opcode
    if "BTH" in globals():  # the enum field copied the table when BTH was defined
        field = next(f for f in BTH.fields_desc if f.name == "opcode")
        field.i2s[opcode] = name
        field.s2i[name] = opcode
    OPCODE_CHAINS[opcode] = chain if callable(chain) else (lambda _bth, c=tuple(chain): c)


def header_chain(bth: Packet) -> Sequence[type[Packet]]:
    """The extension headers that follow this BTH (empty for an unknown opcode)."""
    fn = OPCODE_CHAINS.get(bth.opcode)
    return fn(bth) if fn else ()


class BTH(Packet):
    """Base Transport Header (12 B) plus the packet's ICRC trailer.

    Byte 8 holds AckReq (b7) and, for MRC only, RTX (b5) and TS (b4); IBTA
    reserves those bits, so RoCE packets leave them zero. ``icrc=None``
    computes the ICRC in ``post_build`` over the enclosing IP/UDP packet (0
    when the BTH is built without one). The field holds the CRC value; it sits
    little-endian on the wire.
    """

    name = "BTH"
    fields_desc = [
        ByteEnumField("opcode", 0, OPCODE_NAMES),
        BitField("solicited", 0, 1),
        BitField("migreq", 0, 1),
        BitField("padcount", 0, 2),
        BitField("version", 0, 4),
        XShortField("pkey", 0xFFFF),
        BitField("fecn", 0, 1),
        BitField("becn", 0, 1),
        BitField("resv6", 0, 6),
        XBitField("dqpn", 0, 24),
        BitField("ackreq", 0, 1),
        BitField("resv1", 0, 1),
        BitField("rtx", 0, 1),
        BitField("ts", 0, 1),
        BitField("resv4", 0, 4),
        XBitField("psn", 0, 24),
        FCSField("icrc", None, fmt="<I"),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        chain = header_chain(self)
        return chain[0] if chain else Raw

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        p += pay
        if self.icrc is None:
            p = p[:-4] + _icrc.pack_icrc(self._compute_icrc(p))
        return p

    def _compute_icrc(self, built: bytes) -> int:
        """ICRC over the IP/UDP headers above this BTH plus ``built`` (BTH … ICRC slot)."""
        udp = self.underlayer
        ip = udp.underlayer if isinstance(udp, UDP) else None
        if not isinstance(ip, (IP, IPv6)):
            return 0
        whole = bytes(_detached(ip) / _detached(udp) / Raw(built))
        return _icrc.compute_icrc(whole)

    def mysummary(self) -> str:
        return self.sprintf("BTH %opcode% QP=%dqpn% PSN=%psn%")


def _detached(layer: Packet) -> Packet:
    """A copy of ``layer`` alone, keeping the values its payload overloads (UDP dport, IP proto)."""
    alone = layer.copy()
    alone.remove_payload()
    for f in layer.fields_desc:
        value = layer.getfieldval(f.name)
        if value is not None:
            alone.setfieldval(f.name, value)
    return alone


class _AfterBTH(Packet):
    """Base of every header that follows a BTH: the opcode's chain says what is next."""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        layer: Packet | None = self.underlayer
        while layer is not None and not isinstance(layer, BTH):
            layer = layer.underlayer
        if layer is None:
            return Raw
        chain = list(header_chain(layer))
        try:
            i = chain.index(type(self))
        except ValueError:
            return Raw
        return chain[i + 1] if i + 1 < len(chain) else Raw


class RETH(_AfterBTH):
    """RDMA Extended Transport Header (16 B)."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dmalen", 0)]


class AETH(_AfterBTH):
    """ACK Extended Transport Header (4 B): syndrome and MSN."""

    name = "AETH"
    fields_desc = [XByteField("syndrome", 0), BitField("msn", 0, 24)]


class ImmDt(_AfterBTH):
    """Immediate data (4 B)."""

    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class IETH(_AfterBTH):
    """Invalidate Extended Transport Header (4 B): the R_Key to invalidate."""

    name = "IETH"
    fields_desc = [XIntField("rkey", 0)]


class AtomicETH(_AfterBTH):
    """Atomic Extended Transport Header (28 B)."""

    name = "AtomicETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("rkey", 0),
        XLongField("swap_add", 0),
        XLongField("compare", 0),
    ]


class AtomicAckETH(_AfterBTH):
    """Atomic ACK Extended Transport Header (8 B): the original remote data."""

    name = "AtomicAckETH"
    fields_desc = [XLongField("orig_data", 0)]


class DETH(_AfterBTH):
    """Datagram Extended Transport Header (8 B), UD only."""

    name = "DETH"
    fields_desc = [XIntField("qkey", 0), ByteField("resv8", 0), XBitField("src_qp", 0, 24)]


class CNPPadding(_AfterBTH):
    """The 16 reserved bytes of a RoCEv2 Congestion Notification Packet."""

    name = "CNPPadding"
    fields_desc = [XLongField("reserved1", 0), XLongField("reserved2", 0)]


#: operation -> headers after the BTH (RC/UC), derived from the codec's table by name so
#: scapy and the codecs cannot disagree on which header follows which opcode.
_LAYERS = {c.__name__: c for c in (RETH, AETH, ImmDt, IETH, AtomicETH, AtomicAckETH, DETH,
                                   CNPPadding)}
OPERATION_CHAINS: dict[int, tuple[type[Packet], ...]] = {
    op: tuple(_LAYERS[h.NAME] for h in chain)
    for op, chain in _codec_roce.OPERATION_CHAINS.items()
}

for _t, _ops in TRANSPORT_OPERATIONS.items():
    for _op in _ops:
        _chain = OPERATION_CHAINS[_op]
        if _t == "UD":
            _chain = (DETH, *_chain)
        register_opcode(TRANSPORT_PREFIX[_t] | _op, f"{_t}_{OPERATIONS[_op]}", _chain)
register_opcode(CNP_OPCODE, "CNP", (CNPPadding,))

bind_layers(UDP, BTH, dport=ROCE_UDP_PORT)


def cnp(dqpn: int) -> Packet:
    """A RoCEv2 CNP for destination QP ``dqpn`` (BECN set, 16 zero bytes)."""
    return BTH(opcode=CNP_OPCODE, becn=1, dqpn=dqpn) / CNPPadding()


# MRC shares UDP 4791 and the BTH: make its opcodes known wherever RoCE is.
from emu.wire import mrc as _mrc  # noqa: E402,F401  (registers MRC opcodes)

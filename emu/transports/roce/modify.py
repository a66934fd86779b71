# SPDX-License-Identifier: GPL-2.0-only
"""``ibv_modify_qp`` for RC as verbs applications call it: attribute masks, the IB
spec's required and optional attributes per transition, and the address vector.

Why a table of masks and not just a target state: verbs applications
(``ibv_rc_pingpong``, perftest, MPI, NCCL) drive a QP through RESET → INIT →
RTR → RTS themselves, each step with the attributes that step takes, and
post their receives in INIT. A QP that accepted only "connect" could not
run them unchanged. The legality rules are the kernel's
``ib_modify_qp_is_ok`` table for ``IB_QPT_RC`` (IBTA vol. 1, 11.2.4 and
table 91); a mask that lacks a required attribute, or carries one the
transition does not take, is refused with the transition and the
attribute named, as a driver's EINVAL would be but readable.

The bit values are libibverbs' ``enum ibv_qp_attr_mask`` and ``enum
ibv_qp_state``/``enum ibv_mtu`` numbers (:class:`emu.core.verbs.QpAttrMask`), so
masks and states can be passed as verbs programs compute them. Attribute names
are ``struct ibv_qp_attr``'s (``ah_attr`` as ``struct ibv_ah_attr`` with its ``grh``
fields flattened).

Sans-IO: the engine calls :func:`check` and :func:`changes`; nothing here
touches a socket or a clock.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from emu.core.verbs import MTU_CODES, QP_STATES, QpAttrMask
from emu.transports.base import VerbsError
from emu.transports.roce.qp import PMTU_VALUES, QpState


class Unsupported(VerbsError):
    """A legal request emu cannot carry out (the control socket answers EOPNOTSUPP)."""

    code = "EOPNOTSUPP"


#: ``enum ibv_qp_state`` numbers (IBV_QPS_RESET = 0 … IBV_QPS_ERR = 6)
STATE_NUMBERS: dict[int, QpState] = {i: QpState(n) for i, n in enumerate(QP_STATES)}
#: RoCEv2's UDP source ports (IB_ROCE_UDP_ENCAP_VALID_PORT_MIN..MAX)
UDP_SPORT_MIN = 0xC000

_M = QpAttrMask
_S = QpState


def mask_name(bit: int) -> str:
    """``IBV_QP_DEST_QPN`` for ``1 << 20`` (the name an error message uses)."""
    try:
        return f"IBV_QP_{QpAttrMask(bit).name}"
    except ValueError:
        return f"mask bit {bit:#x}"


def mask_names(mask: int) -> str:
    return ", ".join(mask_name(1 << i) for i in range(32) if mask & (1 << i))


_NONE = _M(0)
#: (current, next) → (required, optional) for RC, from the kernel's ``qp_state_table``;
#: IBV_QP_STATE itself is always allowed. A pair absent here is not a legal transition.
RC_TRANSITIONS: dict[tuple[QpState, QpState], tuple[QpAttrMask, QpAttrMask]] = {
    (_S.RESET, _S.RESET): (_NONE, _NONE),
    (_S.RESET, _S.INIT): (_M.PKEY_INDEX | _M.PORT | _M.ACCESS_FLAGS, _NONE),
    (_S.INIT, _S.RESET): (_NONE, _NONE),
    (_S.INIT, _S.ERR): (_NONE, _NONE),
    (_S.INIT, _S.INIT): (_NONE, _M.PKEY_INDEX | _M.PORT | _M.ACCESS_FLAGS),
    (_S.INIT, _S.RTR): (_M.AV | _M.PATH_MTU | _M.DEST_QPN | _M.RQ_PSN | _M.MAX_DEST_RD_ATOMIC
                        | _M.MIN_RNR_TIMER,
                        _M.ALT_PATH | _M.ACCESS_FLAGS | _M.PKEY_INDEX),
    (_S.RTR, _S.RESET): (_NONE, _NONE),
    (_S.RTR, _S.ERR): (_NONE, _NONE),
    (_S.RTR, _S.RTS): (_M.TIMEOUT | _M.RETRY_CNT | _M.RNR_RETRY | _M.SQ_PSN
                       | _M.MAX_QP_RD_ATOMIC,
                       _M.CUR_STATE | _M.ALT_PATH | _M.ACCESS_FLAGS | _M.MIN_RNR_TIMER
                       | _M.PATH_MIG_STATE),
    (_S.RTS, _S.RESET): (_NONE, _NONE),
    (_S.RTS, _S.ERR): (_NONE, _NONE),
    (_S.RTS, _S.RTS): (_NONE, _M.CUR_STATE | _M.ACCESS_FLAGS | _M.ALT_PATH
                       | _M.PATH_MIG_STATE | _M.MIN_RNR_TIMER),
    (_S.RTS, _S.SQD): (_NONE, _M.EN_SQD_ASYNC_NOTIFY),
    (_S.SQD, _S.RESET): (_NONE, _NONE),
    (_S.SQD, _S.ERR): (_NONE, _NONE),
    (_S.SQD, _S.RTS): (_NONE, _M.CUR_STATE | _M.ALT_PATH | _M.ACCESS_FLAGS
                       | _M.MIN_RNR_TIMER | _M.PATH_MIG_STATE),
    (_S.SQD, _S.SQD): (_NONE, _M.PORT | _M.AV | _M.TIMEOUT | _M.RETRY_CNT | _M.RNR_RETRY
                       | _M.MAX_QP_RD_ATOMIC | _M.MAX_DEST_RD_ATOMIC | _M.ALT_PATH
                       | _M.ACCESS_FLAGS | _M.PKEY_INDEX | _M.MIN_RNR_TIMER
                       | _M.PATH_MIG_STATE),
    (_S.SQE, _S.RESET): (_NONE, _NONE),
    (_S.SQE, _S.ERR): (_NONE, _NONE),
    (_S.SQE, _S.RTS): (_NONE, _NONE),
    (_S.ERR, _S.RESET): (_NONE, _NONE),
    (_S.ERR, _S.ERR): (_NONE, _NONE),
}
#: what a mask may carry but emu cannot do (alternate paths: no path migration here)
UNSUPPORTED = _M.ALT_PATH


def state_of(v: Any) -> QpState:
    """A state given as ``ibv_qp_state`` number, name (``"RTR"``, ``"IBV_QPS_RTR"``) or
    :class:`QpState`."""
    if isinstance(v, QpState):
        return v
    if isinstance(v, int) and not isinstance(v, bool) and v in STATE_NUMBERS:
        return STATE_NUMBERS[v]
    if isinstance(v, str):
        name = v.upper().removeprefix("IBV_QPS_")
        if name in QpState.__members__:
            return QpState[name]
    raise VerbsError(f"{v!r} is not a QP state (RESET, INIT, RTR, RTS, SQD, SQE, ERR "
                     f"or their ibv_qp_state numbers 0..6)")


def arrow(cur: QpState, new: QpState) -> str:
    return f"{cur.value}\u2192{new.value}"


def check(qpn: int, cur: QpState, attr: Mapping[str, Any], mask: int) -> QpState:
    """The state ``modify_qp(attr, mask)`` moves a QP in ``cur`` to, if the IB rules for RC
    allow it; else :class:`VerbsError` naming the transition and the attribute."""
    where = f"modify_qp QP {qpn:#x}"
    if isinstance(mask, bool) or not isinstance(mask, int) or mask < 0:
        raise VerbsError(f"{where}: the attribute mask must be a non-negative integer, "
                         f"got {mask!r}")
    unknown = mask & ~sum(int(b) for b in QpAttrMask)
    if unknown:
        raise VerbsError(f"{where}: unknown attribute mask bits {unknown:#x}")
    if mask & _M.STATE:
        if "qp_state" not in attr:
            raise VerbsError(f"{where}: IBV_QP_STATE is set but attr has no qp_state")
        new = state_of(attr["qp_state"])
    else:
        new = cur
    if mask & _M.CUR_STATE:
        if cur not in (_S.RTR, _S.RTS, _S.SQD, _S.SQE):
            raise VerbsError(f"{where}: IBV_QP_CUR_STATE is only taken in RTR, RTS, SQD or "
                             f"SQE (the QP is in {cur.value})")
        if "cur_qp_state" not in attr:
            raise VerbsError(f"{where}: IBV_QP_CUR_STATE is set but attr has no cur_qp_state")
        said = state_of(attr["cur_qp_state"])
        if said is not cur:
            raise VerbsError(f"{where}: IBV_QP_CUR_STATE says {said.value} but the QP is "
                             f"in {cur.value}")
    rule = RC_TRANSITIONS.get((cur, new))
    if rule is None:
        legal = ", ".join(n.value for c, n in RC_TRANSITIONS if c is cur)
        raise VerbsError(f"{where}: {arrow(cur, new)} is not a legal transition "
                         f"(from {cur.value}: {legal})")
    req, opt = rule
    missing = req & ~mask
    if missing:
        raise VerbsError(f"{where}: {arrow(cur, new)} needs {mask_names(missing)}")
    extra = mask & ~(req | opt | _M.STATE)
    if extra:
        raise VerbsError(f"{where}: {arrow(cur, new)} does not take {mask_names(extra)}")
    if mask & UNSUPPORTED:
        raise Unsupported(f"{where}: {mask_names(mask & UNSUPPORTED)} is not supported "
                         f"(emu has no alternate path migration)")
    return new


def gid_address(gid: str) -> str:
    """The IP address a RoCEv2 GID stands for: ``::ffff:a.b.c.d`` → ``a.b.c.d``; an
    IPv6 GID is its address (a bare IPv4 address is taken as its mapped GID)."""
    try:
        a = ipaddress.ip_address(str(gid))
    except ValueError:
        raise VerbsError(f"{gid!r} is not a GID (IPv4-mapped ::ffff:a.b.c.d or IPv6)"
                         ) from None
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        return str(a.ipv4_mapped)
    return str(a)


def flow_label_to_udp_sport(fl: int) -> int:
    """RoCEv2's UDP source port for a GRH flow label (the kernel's
    ``rdma_flow_label_to_udp_sport``): the 20 bits folded to 14, in 0xC000..0xFFFF."""
    low, high = fl & 0x3FFF, fl & 0xFC000
    return (low ^ (high >> 14)) | UDP_SPORT_MIN


def _int(where: str, bit: int, name: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise VerbsError(f"{where}: {mask_name(bit)}: {name} must be an integer in "
                         f"{lo}..{hi}, got {v!r}")
    return v


#: plain attributes: ibv_qp_attr name → (mask bit, QpAttr field, range)
_PLAIN: dict[str, tuple[QpAttrMask, str, int, int]] = {
    "timeout": (_M.TIMEOUT, "timeout", 0, 31),
    "retry_cnt": (_M.RETRY_CNT, "retry_cnt", 0, 7),
    "rnr_retry": (_M.RNR_RETRY, "rnr_retry", 0, 7),
    "rq_psn": (_M.RQ_PSN, "rq_psn", 0, 0xFFFFFF),
    "sq_psn": (_M.SQ_PSN, "sq_psn", 0, 0xFFFFFF),
    "dest_qp_num": (_M.DEST_QPN, "dest_qp_num", 0, 0xFFFFFF),
    "min_rnr_timer": (_M.MIN_RNR_TIMER, "min_rnr_timer", 0, 31),
    "max_rd_atomic": (_M.MAX_QP_RD_ATOMIC, "max_rd_atomic", 0, 255),
    "max_dest_rd_atomic": (_M.MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic", 0, 255),
    "qp_access_flags": (_M.ACCESS_FLAGS, "access", 0, 0xFF),
    "en_sqd_async_notify": (_M.EN_SQD_ASYNC_NOTIFY, "sqd_notify", 0, 1),
}


def changes(qpn: int, attr: Mapping[str, Any], mask: int, *, active_mtu: int = 4096,
            ports: int = 1, gids: Sequence[str] = (), udp_port: int = 4791,
            ) -> dict[str, Any]:
    """The :class:`~emu.transports.roce.qp.QpAttr` fields ``attr`` sets under ``mask``
    (only the attributes whose bits are set are read, as verbs does).

    ``active_mtu`` is the port's (a larger ``path_mtu`` would not fit the link),
    ``ports`` how many the device has, ``gids`` its GID table (``sgid_index`` must
    name one, of the destination's address family; empty: not checked), ``udp_port``
    the RoCEv2 port datagrams go to (an ``ah_attr.udp_dport`` replaces it: emu's
    extension for daemons on other ports)."""
    where = f"modify_qp QP {qpn:#x}"
    out: dict[str, Any] = {}
    for name, (bit, field, lo, hi) in _PLAIN.items():
        if mask & bit:
            if name not in attr:
                raise VerbsError(f"{where}: {mask_name(bit)} is set but attr has no {name}")
            v = attr[name]
            if name == "en_sqd_async_notify" and isinstance(v, bool):
                v = int(v)
            out[field] = _int(where, bit, name, v, lo, hi)
    if mask & _M.PKEY_INDEX:
        _int(where, _M.PKEY_INDEX, "pkey_index", attr.get("pkey_index"), 0, 0)
        out["pkey_index"] = 0  # one P_Key (0xFFFF, the default partition), as RoCE NICs
    if mask & _M.PORT:
        out["port_num"] = _int(where, _M.PORT, "port_num", attr.get("port_num"), 1, ports)
    if mask & _M.PATH_MTU:
        code = attr.get("path_mtu")
        mtu = MTU_CODES.get(code) if isinstance(code, int) else None  # type: ignore[arg-type]
        if mtu is None and code in PMTU_VALUES:
            mtu = code  # bytes, for callers that think in bytes
        if mtu is None:
            raise VerbsError(f"{where}: IBV_QP_PATH_MTU: path_mtu {code!r} is not an ibv_mtu "
                             f"(1..5 = 256..4096 bytes)")
        if mtu > active_mtu:
            raise VerbsError(f"{where}: IBV_QP_PATH_MTU: path_mtu {mtu} is larger than the "
                             f"port's active MTU {active_mtu}")
        out["pmtu"] = mtu
    if mask & _M.PATH_MIG_STATE and attr.get("path_mig_state", 0) != 0:
        raise Unsupported(f"{where}: IBV_QP_PATH_MIG_STATE: only IBV_MIG_MIGRATED (0) is "
                          f"supported (no alternate path)")
    if mask & _M.AV:
        out.update(_av(where, attr.get("ah_attr"), gids, udp_port))
    return out


def _av(where: str, ah: Any, gids: Sequence[str], udp_port: int) -> dict[str, Any]:
    """``ah_attr`` (``struct ibv_ah_attr`` with ``grh`` flattened or nested) → the
    destination address, DSCP, entropy and the fields query_qp reports back."""
    if not isinstance(ah, Mapping):
        raise VerbsError(f"{where}: IBV_QP_AV is set but attr has no ah_attr")
    grh = dict(ah.get("grh") or {})
    g = {**grh, **{k: v for k, v in ah.items() if k != "grh"}}
    if not g.get("is_global", 1):
        raise VerbsError(f"{where}: IBV_QP_AV: RoCEv2 needs a GRH (ah_attr.is_global 1 and "
                         f"a dgid)")
    if "dgid" not in g:
        raise VerbsError(f"{where}: IBV_QP_AV: ah_attr has no dgid")
    try:
        address = gid_address(g["dgid"])
    except VerbsError as e:
        raise VerbsError(f"{where}: IBV_QP_AV: {e}") from None
    sgid = _int(where, _M.AV, "ah_attr.sgid_index", g.get("sgid_index", 0), 0, 255)
    if gids:
        if sgid >= len(gids):
            raise VerbsError(f"{where}: IBV_QP_AV: sgid_index {sgid} is not in the GID table "
                             f"(0..{len(gids) - 1})")
        v4 = ipaddress.ip_address(address).version == 4
        if (ipaddress.ip_address(gid_address(gids[sgid])).version == 4) != v4:
            raise VerbsError(f"{where}: IBV_QP_AV: sgid_index {sgid} ({gids[sgid]}) and dgid "
                             f"{g['dgid']} are of different address families")
    tc = _int(where, _M.AV, "ah_attr.traffic_class", g.get("traffic_class", 26 << 2), 0, 255)
    fl = _int(where, _M.AV, "ah_attr.flow_label", g.get("flow_label", 0), 0, 0xFFFFF)
    out: dict[str, Any] = {
        "dest_addr": (address, _int(where, _M.AV, "ah_attr.udp_dport",
                                    g.get("udp_dport", udp_port), 1, 0xFFFF)),
        "dest_gid": str(g["dgid"]), "sgid_index": sgid, "dscp": tc >> 2,
        "hop_limit": _int(where, _M.AV, "ah_attr.hop_limit", g.get("hop_limit", 64), 0, 255),
        "flow_label": fl, "sl": _int(where, _M.AV, "ah_attr.sl", g.get("sl", 0), 0, 15)}
    if fl:
        out["udp_sport"] = flow_label_to_udp_sport(fl)
    return out

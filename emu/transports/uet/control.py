# SPDX-License-Identifier: GPL-2.0-only
"""PDS control packets beyond the data path: PROBE, CREDIT / CREDIT_REQ, CLOSE_REQ,
CLEAR_REQ, and the target's idle-PDC reaper (uet.md: Control types, Close).

ACK_REQ, CLEAR and CLOSE ride the data path and live with it (:mod:`.pds`,
:mod:`.target`). The CPs here are the ones an application, a congestion
controller or the target itself starts:

* **PROBE** (initiator → target): answered by an ACK with P set whose
  ack_psn_offset echoes the probe_opaque. It consumes no PSN. Unanswered, it
  is resent at the RTO and after ``max_retries`` the PDC closes in error — a
  peer/path liveness check that also works on an idle PDC.
* **CREDIT_REQ** → **CREDIT**: the target answers with a credit value from
  :attr:`Control.credit_source` (a hook a receiver-credit CC such as RCCC
  replaces); the initiator hands each CREDIT to :attr:`Control.on_credit`
  (default: remember it in ``pdc.credit``). The target may also grant credit
  unsolicited (:meth:`Control.grant_credit`). Credit is a CC signal, not a
  reliability one: a lost CREDIT_REQ is simply asked again by the CC.
* **CLOSE_REQ** (target → initiator): the initiator closes gracefully — it
  finishes what is queued, waits for every ACK and sends CLOSE — exactly as
  if its application had called ``close_pdc``. The target repeats CLOSE_REQ
  at the RTO until the CLOSE arrives; after ``CLOSE_REQ_RETRIES`` unanswered
  by anything from the initiator it forgets the PDC on its own (the initiator
  is gone). An initiator still sending on the PDC — finishing a long message
  before its CLOSE — is alive: the count starts again. The target also asks
  when a SYN names a silent PDC with another Start_PSN (``Target._syn_conflict``).
* **Idle reaping**: with :attr:`Control.idle_timeout` set, a target PDC not
  heard from for that long is asked to close (CLOSE_REQ). This is what empties
  the target's table when an initiator closed in error (its CLOSE never came).
  Off by default: a NIC holding PDCs is normal, and the choice of timeout
  belongs to the deployment (the daemon).

Target-originated CPs carry SPDCID = the target's PDCID and DPDCID = the
initiator's; PDCIDs of both halves come from one allocator per engine, so a
CP's DPDCID alone says which half it is for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emu.core.cq import WcStatus
from emu.core.psn import PSN32
from emu.transports.base import ECN_CE, VerbsError
from emu.transports.uet import pdc as D
from emu.transports.uet.pdc import InitiatorPdc, PdcState, TargetPdc
from emu.transports.uet.pds import control_packet
from emu.wire.codec.uet import PdsAckCcNscc, PdsControl, encode_packet

_M = PSN32.mask
_TX_STAT = {D.CP_CLOSE_REQ: "tx_close_req", D.CP_CREDIT: "tx_credit",
            D.CP_CLEAR_REQ: "tx_clear_req"}


def _keep_credit(pdc: InitiatorPdc, credit: int, now: float) -> None:
    pdc.credit = credit

#: CLOSE_REQs before a target gives up on a silent initiator and drops the PDC: the
#: engine's retry limit, but at most this — a target-side close is housekeeping, and a
#: daemon's 200 retries would have sent a vanished (or never real) peer a packet every
#: RTO for a second per PDC
CLOSE_REQ_RETRIES = 5


class Control:
    """The control-packet logic of one engine (``host`` is the :class:`UetEngine`)."""

    def __init__(self, host: Any) -> None:
        self.h = host
        #: target side: credit to grant a PDC when asked (bytes; RCCC replaces this)
        self.credit_source: Callable[[TargetPdc, float], int] = (
            lambda t, now: t.window * host.mtu)
        #: initiator side: called with every CREDIT received
        self.on_credit: Callable[[InitiatorPdc, int, float], None] = _keep_credit
        #: initiator side: called with each answered PROBE's round-trip time
        self.on_probe: Callable[[InitiatorPdc, float, float], None] | None = None
        #: target side: ask a PDC silent for this long (s) to close; None = never
        self.idle_timeout: float | None = None
        self.probes: dict[int, list[Any]] = {}  # ini PDCID → [opaque, sent_at, retries]
        self.rtt: dict[int, float] = {}  # ini PDCID → last PROBE round trip
        self.close_reqs: dict[int, list[Any]] = {}  # target PDCID → [pdc, sent_at, retries]
        self._opaque = 0
        self._reap_at: float | None = None

    # -- initiator: verbs -------------------------------------------------------------

    def probe(self, pdc: InitiatorPdc, now: float) -> int:
        """Send a PROBE on ``pdc`` (no PSN consumed); returns its probe_opaque."""
        self._opaque = (self._opaque + 1) & 0xFFFF
        self.probes[pdc.pdcid] = [self._opaque, now, 0]
        self._send_probe(pdc, self._opaque, False)
        return self._opaque

    def _send_probe(self, pdc: InitiatorPdc, opaque: int, retx: bool) -> None:
        self.h.emit(control_packet(pdc, D.CP_PROBE, pdc.next_psn, retx=retx, opaque=opaque),
                    pdc.addr, None, True)
        self.h.stats["tx_probe"] += 1

    def request_credit(self, pdc: InitiatorPdc, now: float) -> None:
        """CREDIT_REQ: ask the target for credit (the answer goes to :attr:`on_credit`)."""
        self.h.emit(control_packet(pdc, D.CP_CREDIT_REQ, pdc.next_psn, ar=False), pdc.addr,
                    None, True)
        self.h.stats["tx_credit_req"] += 1

    # -- initiator: receiving ------------------------------------------------------------

    def probe_reply(self, pdc: InitiatorPdc, ack: Any, now: float) -> None:
        """An ACK with P set: match its echoed opaque to our outstanding PROBE."""
        pr = self.probes.get(pdc.pdcid)
        if pr is None or (ack.ack_psn_offset & 0xFFFF) != pr[0]:
            self.h.stats["rx_probe_reply_stale"] += 1
            return
        del self.probes[pdc.pdcid]
        rtt = now - pr[1]
        self.rtt[pdc.pdcid] = rtt
        self.h.stats["rx_probe_reply"] += 1
        if self.on_probe is not None:
            self.on_probe(pdc, rtt, now)

    def from_target(self, pds: Any, host: str, now: float) -> bool:
        """A CP that names one of our initiator PDCs (CLOSE_REQ, CREDIT, CLEAR_REQ);
        False when it is not for the initiator half."""
        pdc = self.h.ini.get(pds.dpdcid)
        if pdc is None or pdc.peer != host or pdc.dpdcid != pds.spdcid:
            return False
        st = self.h.stats
        ctl = pds.ctl_type
        if ctl == D.CP_CLOSE_REQ:
            st["rx_close_req"] += 1
            if pdc.state in (PdcState.SYN_SENT, PdcState.ESTABLISHED):
                self.h.close_pdc(pdc.pdcid, now)
        elif ctl == D.CP_CREDIT:
            st["rx_credit"] += 1
            self.on_credit(pdc, pds.ctl_payload, now)
        elif ctl == D.CP_CLEAR_REQ:
            st["rx_clear_req"] += 1
            pdc.ctl_pending.append((D.CP_CLEAR, pdc.oldest))
            self.h._active[pdc.pdcid] = None
        else:
            st["rx_cp_unsupported"] += 1
        return True

    # -- target ------------------------------------------------------------------------------

    def nack_at_target(self, nack: Any, host: str) -> bool:
        """A NACK naming one of our *target* PDCs: the initiator refused our CLOSE_REQ
        because it no longer knows the PDC (INV_DPDCID) — forget it now instead of
        retrying. True when the NACK was for us."""
        c = self.close_reqs.get(nack.dpdcid)
        if c is None or c[0].peer != host or nack.nack_code != D.NACK_INV_DPDCID:
            return False
        del self.close_reqs[nack.dpdcid]
        self.h.stats["pdc_target_closed_by_nack"] += 1
        self.h.target.drop(nack.dpdcid)
        return True

    def at_target(self, t: TargetPdc, pds: Any, ent: int | None, ecn: int, now: float) -> None:
        """CPs for the target half other than ACK_REQ/CLEAR/CLOSE (called by :mod:`.target`)."""
        st = self.h.stats
        ctl = pds.ctl_type
        if ctl == D.CP_PROBE:
            st["rx_probe"] += 1
            self._probe_ack(t, pds, ent, ecn == ECN_CE)
        elif ctl == D.CP_CREDIT_REQ:
            st["rx_credit_req"] += 1
            self._send_cp(t, D.CP_CREDIT, self.credit_source(t, now), ent)
        elif ctl == D.CP_NOOP:
            st["rx_cp_noop"] += 1
        else:
            st["rx_cp_unsupported"] += 1

    def _probe_ack(self, t: TargetPdc, pds: Any, ent: int | None, m: bool) -> None:
        """ACK with P: ack_psn_offset carries the probe_opaque (uet.md: PDS headers, ACK)."""
        op = pds.probe_opaque
        hdr = PdsAckCcNscc(m=int(m), retx=pds.retx, p=1,
                           ack_psn_offset=op - 0x10000 if op & 0x8000 else op,
                           cack_psn=(t.first_missing - 1) & _M, spdcid=t.pdcid,
                           dpdcid=t.ini_pdcid, mpr=self.h.mpr,
                           rcvd_bytes=t.rcvd_bytes & 0xFFFFFF)
        self.h.emit(encode_packet(hdr), t.addr, ent, True)
        self.h.stats["tx_acks"] += 1

    def _send_cp(self, t: TargetPdc, ctl: int, payload: int, ent: int | None,
                 retx: bool = False) -> None:
        hdr = PdsControl(ctl_type=ctl, isrod=int(t.mode is D.Mode.ROD), retx=int(retx),
                         psn=(t.first_missing - 1) & _M, spdcid=t.pdcid, dpdcid=t.ini_pdcid,
                         ctl_payload=max(0, min(payload, _M)))
        self.h.emit(encode_packet(hdr), t.addr, ent, True)
        self.h.stats[_TX_STAT.get(ctl, "tx_cp")] += 1

    def grant_credit(self, pdcid: int, credit: int, now: float) -> None:
        """Unsolicited CREDIT to the initiator of target PDC ``pdcid``."""
        self._send_cp(self._target(pdcid), D.CP_CREDIT, credit, None)

    def request_close(self, pdcid: int, now: float) -> bool:
        """CLOSE_REQ: ask the initiator of target PDC ``pdcid`` to close it; repeated at
        the RTO until its CLOSE arrives (see the module docstring). False when it was
        asked already (nothing changes)."""
        t = self._target(pdcid)
        if pdcid in self.close_reqs:
            return False
        self.close_reqs[pdcid] = [t, now, 0]
        self._send_cp(t, D.CP_CLOSE_REQ, 0, None)
        return True

    def _target(self, pdcid: int) -> TargetPdc:
        t = self.h.target.pdcs.get(pdcid)
        if t is None:
            raise VerbsError(f"no target PDC {pdcid}")
        return t

    # -- timers ---------------------------------------------------------------------------

    def earliest(self) -> float | None:
        """The next deadline of a PROBE, a CLOSE_REQ or the idle reaper."""
        rto = self.h.rto
        ts = [pr[1] + rto for pr in self.probes.values()]
        ts += [c[1] + rto for c in self.close_reqs.values()]
        if self.idle_timeout is not None and self.h.target.pdcs:
            if self._reap_at is None:
                self._reap_at = self.h.now + self.idle_timeout
            ts.append(self._reap_at)
        return min(ts) if ts else None

    def on_timer(self, now: float) -> None:
        h = self.h
        rto = h.rto
        for pid, pr in list(self.probes.items()):
            pdc = h.ini.get(pid)
            if pdc is None or pdc.state in (PdcState.CLOSED, PdcState.ERROR):
                del self.probes[pid]
            elif pr[1] + rto <= now:
                if pr[2] >= h.max_retries:
                    del self.probes[pid]
                    h.stats["probe_timeouts"] += 1
                    h.initiator.fail(pdc, WcStatus.RETRY_EXC_ERR, "probe unanswered")
                    continue
                pr[1], pr[2] = now, pr[2] + 1
                self._send_probe(pdc, pr[0], True)
        for pid, c in list(self.close_reqs.items()):
            t = c[0]
            if h.target.pdcs.get(pid) is not t:  # its CLOSE came: done
                del self.close_reqs[pid]
            elif c[1] + rto <= now:
                if t.last_rx > c[1]:
                    c[2] = 0  # heard since the last CLOSE_REQ: alive, finishing its queue
                if c[2] >= min(h.max_retries, CLOSE_REQ_RETRIES):
                    del self.close_reqs[pid]
                    h.stats["pdc_target_abandoned"] += 1
                    h.target.drop(pid)
                    continue
                c[1], c[2] = now, c[2] + 1
                self._send_cp(t, D.CP_CLOSE_REQ, 0, None, retx=True)
        if self._reap_at is not None and self._reap_at <= now:
            self._reap(now)

    def _reap(self, now: float) -> None:
        idle = self.idle_timeout
        self._reap_at = None
        if idle is None:
            return
        for pid, t in list(self.h.target.pdcs.items()):
            if now - t.last_rx >= idle and self.request_close(pid, now):
                self.h.stats["pdc_target_idle"] += 1
        if self.h.target.pdcs:
            self._reap_at = now + idle / 2

# SPDX-License-Identifier: GPL-2.0-only
"""PDS for RUD, target side: PDC creation on SYN, window, duplicates, ACK/NACK generation.

Every reply echoes the entropy (UDP source port) of the packet it answers,
so the initiator learns per path (uet.md: Spraying). ACKs are always ACK_CC
with cc_type NSCC: CACK_PSN, the PSN being answered (ACK_PSN), a 64-bit SACK
bitmap and the receiver's cc_state (uet.md: PDS headers, ACK_CC).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from emu.core.memory import Access, MemoryAccessError
from emu.core.psn import PSN32
from emu.core.reliable.window import Rx
from emu.core.reorder import PlaceStatus
from emu.transports.base import ECN_CE
from emu.transports.uet import fastpath as FP
from emu.transports.uet import pdc as D
from emu.transports.uet import rod
from emu.transports.uet import ses as S
from emu.transports.uet.pdc import PdcIds, TargetPdc, cleared
from emu.transports.uet.pds import nack_packet, s16
from emu.wire.codec.uet import PdsAckCcNscc, encode_packet

_M = PSN32.mask
#: what :meth:`Target._ack_due` says a request is owed
_ACK_NOW, _ACK_COALESCED = 1, 2
_NH_RSP = 4
#: SES request opcodes the target serves: a SYN carrying another creates no PDC
_SERVED_OPS = frozenset({S.OP_WRITE, S.OP_READ, *S.SH.ATOMIC_OPS, *S.SEND_OPS})
#: CPs that may open a PDC with SYN (a CLOSE never does; unknown types never do)
_SYN_CTL = frozenset({D.CP_NOOP, D.CP_ACK_REQ, D.CP_CLEAR, D.CP_CLEAR_REQ, D.CP_PROBE,
                      D.CP_CREDIT, D.CP_CREDIT_REQ})


class Target:
    """All target PDCs of one engine (``host`` is the engine: emit, stats, trace, config)."""

    def __init__(self, host: Any, ids: PdcIds, ses: S.SesTarget) -> None:
        self.h = host
        self.ids = ids
        self.ses = ses
        self.pdcs: dict[int, TargetPdc] = {}
        self.by_key: dict[tuple[str, int], int] = {}  # (initiator host, its PDCID) → ours
        #: PDCs ended by CLOSE: (host, ini PDCID) → (our old PDCID, CLOSE PSN), to re-ACK a
        #: retransmitted CLOSE whose ACK was lost (uet.md: Close)
        self.closed: OrderedDict[tuple[str, int], tuple[int, int]] = OrderedDict()
        #: PDCID → (PSN, entropy, retx) of the newest packet owed a coalesced ACK
        self.due: dict[int, tuple[int, int | None, int]] = {}
        #: a PDC silent this long, named by a SYN with another Start_PSN, is asked to
        #: close (_syn_conflict); a live initiator resends within its RTO
        self.conflict_quiet = 2 * max(getattr(host, "rto_max", 0.0), 5e-3)

    # -- PDC management ------------------------------------------------------------

    def _create(self, host: str, addr: Any, ini: int, start: int,
                mode: D.Mode = D.Mode.RUD) -> TargetPdc | None:
        """A target PDC on SYN, at the initiator's Start_PSN (uet.md: Behaviour, PDC);
        None (counted) when every PDCID is taken. Only for a {host, SPDCID} that has
        none: a SYN never replaces a PDC (:meth:`_syn_pdc`)."""
        try:
            pid = self.ids.alloc()
        except RuntimeError:
            self.h.stats["rx_drop_no_pdcid"] += 1
            return None
        t = TargetPdc(pid, host, addr, ini, start, self.h.mpr * D.MPR_UNIT, mode=mode)
        t.last_rx = self.h.now
        self.pdcs[t.pdcid] = t
        self.by_key[(host, ini)] = t.pdcid
        self.closed.pop((host, ini), None)
        self.h.stats["pdc_target_created"] += 1
        return t

    def _match(self, dpdcid: int, spdcid: int, host: str, typ: int
               ) -> tuple[TargetPdc | None, int]:
        """The PDC a request without SYN names, and 0 — or the NACK code that refuses
        it: no such PDC, another initiator's (source or SPDCID differ), or another
        delivery mode (then the PDC comes too: the NACK is sent from it)."""
        t = self.pdcs.get(dpdcid)
        if t is None:
            return None, D.NACK_INV_DPDCID
        if t.peer != host or t.ini_pdcid != spdcid:
            return None, D.NACK_PDC_HDR_MISMATCH
        if t.mode != typ:
            return t, D.NACK_PDC_MODE_MISMATCH
        return t, 0

    def drop(self, pdcid: int) -> None:
        """Forget a target PDC (CLOSE, or the local application's ``destroy_pdc``)."""
        t = self.pdcs.pop(pdcid, None)
        if t is None:
            return
        self.by_key.pop((t.peer, t.ini_pdcid), None)
        self.ids.free(pdcid)

    # -- requests ---------------------------------------------------------------------

    def on_request(self, pkt: Any, addr: Any, host: str, now: float, ecn: int,
                   trimmed: bool) -> None:
        """One RUD request: find/create the PDC, check window and duplicates, place via
        SES, then ACK per the ACK-generation rules (uet.md: Behaviour)."""
        h = self.h
        st = h.stats
        pds = pkt.pds
        ent = addr[1] if len(addr) > 1 else None
        if pds.syn:
            t = self._syn_pdc(pkt, host, addr, now)
            if t is None:
                return
        else:
            t, bad = self._match(pds.dpdcid, pds.spdcid, host, pds.type)
            if bad:
                if bad == D.NACK_PDC_MODE_MISMATCH:  # RUD request on a ROD PDC or vice versa
                    assert t is not None
                    st["rx_mode_mismatch"] += 1
                    self._nack(addr, ent, bad, pds.psn, t.pdcid, t.ini_pdcid, pds.retx, ecn)
                else:
                    st["rx_drop_unknown_dpdcid" if bad == D.NACK_INV_DPDCID
                       else "rx_drop_pdc_mismatch"] += 1
                    self._nack(addr, ent, bad, pds.psn, 0, pds.spdcid, pds.retx, ecn)
                return
            assert t is not None
        psn = t.ext(pds.psn)
        v = t.win.classify(psn)
        if v is Rx.STALE:
            # far from the window: a stray or a forgery (a SYN's PDC was matched by its
            # Start_PSN, so only a request without SYN gets here); it moves nothing
            st["rx_drop_psn_stale"] += 1
            return
        if v is Rx.OUT_OF_WINDOW:
            st["rx_psn_oor_window"] += 1
            self._nack(addr, ent, D.NACK_PSN_OOR_WINDOW, pds.psn, t.pdcid, t.ini_pdcid,
                       pds.retx, ecn, payload=t.first_missing)
            return
        t.last_rx = now
        if v is Rx.DUPLICATE:
            # duplicate in window → re-send the ACK, with the message's response if
            # it has one (uet.md: Window)
            st["rx_duplicate"] += 1
            rsp = t.response_for_psn(psn)
            self.ack(t, psn, ent, ecn == ECN_CE, pds.retx, rsp)
            return
        if v is Rx.AHEAD:  # ROD: only the in-order prefix (see .rod)
            rod.target_out_of_order(self, t, pds, addr, ent, ecn)
            return
        ses = S.SH.request_view(pkt, psn)  # small, medium or standard alike (.ses_shape)
        if ses is None:
            st["rx_drop_unsupported_ses"] += 1
            return
        if trimmed or S.looks_trimmed(ses, len(pkt.payload)):
            st["rx_trimmed"] += 1
            self._nack(addr, ent, D.NACK_TRIMMED, pds.psn, t.pdcid, t.ini_pdcid, pds.retx, ecn)
            return
        t.clear_to(psn + pds.clear_psn_offset)
        rsp, nack = self.ses.on_request(t, ses, pkt.payload)
        if nack is not None:
            st[D.nack_counter("tx_nack", nack)] += 1
            self._nack(addr, ent, nack, pds.psn, t.pdcid, t.ini_pdcid, pds.retx, ecn)
            return
        self._accepted(t, psn, len(pkt.payload), ses.message_id, ent, ecn == ECN_CE,
                       pds.ar or pds.syn, pds.retx, rsp)

    def _accepted(self, t: TargetPdc, psn: int, n: int, mid: int, ent: int | None,
                  ce: bool, ack_now: bool, retx: int, rsp: tuple[int, int] | None,
                  count: int = 1) -> None:
        """A request at extended ``psn`` (``n`` payload bytes, message ``mid``) was placed —
        or ``count`` of them, ``psn - count + 1 .. psn`` in order at the first missing
        PSN, each of ``n`` bytes (:meth:`write_run`): mark them received, then ACK per
        the ACK-generation rules (uet.md: Behaviour, :meth:`_ack_due`) for the newest."""
        h = self.h
        t.win.accept(psn - count + 1, count)
        t.rcvd_bytes += n * count
        t.bytes_since_ack += D.ack_count(n) * count
        t.psn_msg.add(psn - count + 1, mid, count)
        h.stats["rx_data_packets"] += count
        clear_needed = t.clear_lags(t.win.rcvd.floor_ext)
        if clear_needed:
            t.clear_asked = t.win.rcvd.floor_ext
        due = self._ack_due(t.bytes_since_ack, ack_now or ce or rsp is not None or clear_needed)
        if due == _ACK_NOW:
            full = None if rsp is None else (mid, *rsp)
            self.due.pop(t.pdcid, None)  # this ACK covers what a coalesced one would
            self.ack(t, psn, ent, ce, retx, full,
                     req=D.ACK_REQ_CLEAR if clear_needed else D.ACK_REQ_NONE)
        elif due == _ACK_COALESCED:  # one ACK per PDC per receive batch (flush_due)
            self.due[t.pdcid] = (psn, ent, retx)

    def _ack_due(self, since: int, at_once: bool) -> int | None:
        """The ACK a request just accepted is owed, with ``since`` bytes (as the ACK
        rule counts them) unanswered: :data:`_ACK_NOW` (AR, SYN, CE, a response or a
        CLEAR request — ``at_once`` — or every ``ack_bytes`` without coalescing),
        :data:`_ACK_COALESCED` (every ``ack_bytes``, one per PDC per receive batch) or
        None."""
        if at_once:
            return _ACK_NOW
        if since >= self.h.ack_bytes:
            return _ACK_COALESCED if self.h.ack_coalesce else _ACK_NOW
        return None

    def write_run(self, items: Sequence[tuple[Any, Any, int]], i: int, host: str,
                  now: float, trim: Sequence[int] | None = None,
                  arrived: Sequence[float | None] | None = None) -> int:
        """The bulk of a WRITE placed without building packets: ``items[i]`` — a RUD/ROD
        request with a standard header, neither its message's first nor last packet, at
        the next expected PSN of an established PDC whose message is under way — and
        every following item that continues it exactly. Returns how many items it
        took: 0 (nothing changed) sends ``items[i]`` to :meth:`on_request`.

        ``items`` are ``(datagram, address, TOS)`` as a daemon reads them (a sans-IO
        caller's one datagram: its ECN as the TOS); ``trim[tos]`` is nonzero for a TOS
        that marks a trimmed packet, ``arrived`` when each reached the port (the engine's
        ``rx_at``; both ``None`` when not known).

        Why: such packets are almost all of a transfer, and the general path
        (decode into header objects, SES view, placement, range set) cost ~10 µs
        of Python per 8 KiB packet at the target. The checks here are the ones
        ``on_request`` would make for the run's first packet, in the same order of
        effect; a following packet continues the run only if it is the same
        message's next packet, by the next PSN, from the same host, and no ACK is due
        at once before it (AR, a CLEAR request, the ACK spacing without coalescing):
        then per packet only its header is unpacked and its payload copied, and the
        window, the placement, the counters and the ACK rules act once for the run
        (:meth:`_accepted`) — what the same packets one by one would have done.
        ``tests/transports/uet/test_fastpath.py`` runs both through loss, reordering
        and duplication and compares the targets' state, the ACKs and the bytes."""
        data, addr, tos = items[i]
        if not FP.unmarked(tos, trim):
            return 0
        f = FP.write_middle(data)
        if f is None:
            return 0
        typ, retx, ar, cpo, wpsn, spdcid, dpdcid, mid, bo, mk, pl, off, total = f
        t, bad = self._match(dpdcid, spdcid, host, typ)
        if bad or t is None or len(data) - FP.REQ_SIZE != pl or off + pl >= total:
            return 0  # (a short payload: trimmed, which on_request NACKs)
        psn = t.first_missing
        # only the next PSN in order with nothing held above (the wire PSN equals the
        # floor's: t.ext(wpsn) without the call), which classify() calls NEW
        win = t.win
        if wpsn != psn & _M or not win.rcvd.contiguous or win.classify(psn) is not Rx.NEW:
            return 0
        # the message and region of the previous packet of this PDC, if this one continues
        # them: one check per message, not per packet (a deregistered region is invalid)
        s = t.stream
        if (s is not None and s[0] == mid and s[1] == total and s[2] == mk and s[3] == bo
                and s[4].valid and t.placement.get(mid) is s[5]):
            mr, msg = s[4], s[5]
        else:
            msg = t.placement.get(mid)
            if msg is None or msg.total != total:
                return 0
            try:
                mr = self.h.memory.check_remote(mk, bo, total, Access.REMOTE_WRITE)
            except MemoryAccessError:
                return 0  # on_request fails the message properly
            t.stream = (mid, total, mk, bo, mr, msg)
        h = self.h
        t.last_rx = now
        h.stats["rx_write_fast"] += 1
        t.clear_to(psn + cpo)
        if not msg.append(off, pl):  # not in order within the message: this packet alone
            res = t.placement.place(mid, off, pl, total=total)
            rsp = None
            if res.status is PlaceStatus.COMPLETED:  # cannot happen in order; kept exact
                t.remember_response(mid, S.RC_OK, total)
                rsp = (S.RC_OK, total)
            if res.new_bytes:
                a = bo + off - mr.va
                mr.view[a:a + pl] = memoryview(data)[FP.REQ_SIZE:]
            self._accepted(t, psn, pl, mid, addr[1] if len(addr) > 1 else None, False,
                           bool(ar), retx, rsp)
            return 1
        # the run: place this packet, then take the next while it continues the message
        view, base, size, src = mr.view, bo - mr.va, FP.REQ_SIZE + pl, addr[0]
        step = D.ack_count(pl)
        since = t.bytes_since_ack
        j, n, p, o = i, len(items), psn, off
        while True:
            view[base + o:base + o + pl] = memoryview(data)[FP.REQ_SIZE:]
            since += step
            # answered at once (AR, a CLEAR request, the spacing without coalescing)?
            # then the run ends with this packet, which _accepted answers
            if ar or t.clear_lags(p + 1) or self._ack_due(since, False) == _ACK_NOW:
                break
            if j + 1 >= n:
                break
            data, a2, tos = items[j + 1]
            if len(data) != size or not FP.unmarked(tos, trim) or a2[0] != src:
                break
            g = FP.write_middle(data)
            o2 = o + pl
            if (g is None or g[4] != (p + 1) & _M or g[11] != o2 or g[7] != mid
                    or g[6] != dpdcid or g[5] != spdcid or g[0] != typ or g[8] != bo
                    or g[9] != mk or g[12] != total or g[10] != pl or o2 + pl >= total):
                break
            j, p, o, addr = j + 1, p + 1, o2, a2
            retx, ar = g[1], g[2]
            # CLEAR_PSN as this packet moves it, the window's floor being its PSN (the
            # window itself is updated once, by _accepted)
            t.clear_psn = cleared(t.clear_psn, p + g[3], p)
        k = j - i + 1
        if k > 1:
            msg.append(off + pl, (k - 1) * pl)
            h.stats["rx_write_fast"] += k - 1
        if arrived is not None and k > 1:
            h.arrival(now, arrived[j])  # the ACK's service time starts at the newest
        self._accepted(t, p, pl, mid, addr[1] if len(addr) > 1 else None, False, bool(ar),
                       retx, None, k)
        return k

    def flush_due(self) -> None:
        """Send the ACKs the 16 KiB rule asked for during the last receive batch, one per
        PDC, for its newest packet (CACK and the SACK bitmap cover the rest).

        Why coalesce: the daemon hands the engine what one wake-up read (its
        "interrupt"), and a NIC's ACK coalescing does the same — with 8 KiB
        packets the rule alone meant an ACK for every second packet, each a
        syscall at the target and a wake-up at the initiator. ACKs with AR, SYN,
        ECN, a response or a CLEAR request still leave at once."""
        due, self.due = self.due, {}
        for pid, (psn, ent, retx) in due.items():
            t = self.pdcs.get(pid)
            if t is not None and t.bytes_since_ack > 0:
                self.ack(t, psn, ent, False, retx, None)

    def _syn_pdc(self, pkt: Any, host: str, addr: Any, now: float) -> TargetPdc | None:
        """The PDC a request with SYN belongs to: the one with its {source, SPDCID},
        Start_PSN and mode, or a new one — or None (counted, nothing changed).

        Why so strict (issue #14, and a fuzz test's rare failure later): SYN is the
        only field that creates state, and a SYN is easy to forge from the
        initiator's host (any unprivileged user there can send one). The spec
        (uet.md: Behaviour, PDC) says a PDC is found by {src, dst, SPDCID} and that
        requests carry SYN until the first ACK; it does not say a SYN replaces a
        PDC. The target ACKs every SYN at once, so from then on the initiator may
        hold our PDCID and send without SYN — replacing the PDC then ends its
        transfer with INV_DPDCID (one forged SYN did that to a WRITE whose packets
        had all carried SYN). So here:

        * a SYN without a request the SES layer can take (no SES header, an
          opcode we do not serve, SPDCID 0 — reserved) changes nothing
          (``rx_drop_syn_invalid``);
        * a SYN with another Start_PSN or mode than the PDC with its source and
          SPDCID never replaces it: it is dropped (``rx_drop_syn_conflict``), see
          :meth:`_syn_conflict` for how a real new incarnation gets through.
        """
        pds = pkt.pds
        st = self.h.stats
        v = S.SH.request_view(pkt, 0)
        if pds.spdcid == 0 or v is None or v.opcode not in _SERVED_OPS:
            st["rx_drop_syn_invalid"] += 1
            return None
        start = pds.start_psn()
        pid = self.by_key.get((host, pds.spdcid))
        t = self.pdcs.get(pid) if pid is not None else None
        if t is not None:
            if t.start_psn == start and t.mode == pds.type:
                return t
            self._syn_conflict(t, now)
            return None
        return self._create(host, addr, pds.spdcid, start, D.Mode(pds.type))

    def _syn_conflict(self, t: TargetPdc, now: float) -> None:
        """A SYN from ``t``'s initiator host and SPDCID with another Start_PSN or mode:
        dropped. It is a stray, a forgery — or a new incarnation of the initiator's
        PDC (its daemon restarted and reuses the PDCID). Only the initiator can tell,
        so once ``t`` has been silent for ``conflict_quiet`` (a live initiator
        resends within its RTO) we ask it: CLOSE_REQ. If it still holds the PDC it
        closes it gracefully — everything queued completes, later posts open a new
        PDC — so a forger costs a reconnect, never data. If it does not know the PDC
        it answers INV_DPDCID and the PDC goes (``Control.nack_at_target``); the new
        incarnation's next SYN then creates its PDC."""
        self.h.stats["rx_drop_syn_conflict"] += 1
        if now - t.last_rx >= self.conflict_quiet and self.h.control.request_close(t.pdcid,
                                                                                   now):
            self.h.stats["pdc_target_syn_conflict_close_req"] += 1

    # -- control packets ------------------------------------------------------------

    def on_control(self, pkt: Any, addr: Any, host: str, now: float, ecn: int) -> None:
        """CP from an initiator: ACK_REQ → ACK (with any stored response), CLEAR →
        advance CLEAR_PSN, CLOSE → clear state and ACK (uet.md: Close, Control types)."""
        h = self.h
        pds = pkt.pds
        ent = addr[1] if len(addr) > 1 else None
        ctl = pds.ctl_type
        if pds.syn:
            pid = self.by_key.get((host, pds.spdcid))
            t = self.pdcs.get(pid) if pid is not None else None
            if t is not None and t.start_psn != pds.start_psn():
                self._syn_conflict(t, now)  # not this PDC's SYN (_syn_pdc)
                return
            if t is None and ctl != D.CP_CLOSE:
                if pds.spdcid == 0 or ctl not in _SYN_CTL:
                    h.stats["rx_drop_syn_invalid"] += 1
                    return
                t = self._create(host, addr, pds.spdcid, pds.start_psn(),
                                 D.Mode.ROD if pds.isrod else D.Mode.RUD)
                if t is None:
                    return
        else:
            t = self.pdcs.get(pds.dpdcid)
            if t is not None and (t.peer != host or t.ini_pdcid != pds.spdcid):
                t = None
        if t is None:
            old = self.closed.get((host, pds.spdcid))
            if ctl == D.CP_CLOSE and old is not None and old[1] == pds.psn:
                h.stats["rx_close_duplicate"] += 1
                self._close_ack(addr, ent, old[0], pds.spdcid, pds.psn, pds.retx)
                return
            h.stats["rx_drop_unknown_dpdcid"] += 1
            self._nack(addr, ent, D.NACK_INV_DPDCID, pds.psn, 0, pds.spdcid, pds.retx, ecn)
            return
        t.last_rx = now
        psn = t.ext(pds.psn)
        if ctl == D.CP_ACK_REQ:
            # the answer shows the PSN asked about: named if it arrived, else its SACK
            # bit clear (ACK_PSN stays CACK) — a loss probe learns from it which of its
            # outstanding packets are lost (pds.Initiator.probe)
            h.stats["rx_ack_req"] += 1
            got = t.win.received(psn)
            self.ack(t, psn if got else t.first_missing - 1, ent, ecn == ECN_CE, pds.retx,
                     t.response_for_psn(psn) if got else None, sack_at=psn)
        elif ctl == D.CP_CLEAR:
            t.clear_to(psn)
        elif ctl == D.CP_CLOSE:
            if psn != t.first_missing:
                h.stats["rx_close_early"] += 1  # the initiator closes only when all is ACKed
                return
            h.stats["rx_close"] += 1
            self.drop(t.pdcid)
            self.closed[(host, t.ini_pdcid)] = (t.pdcid, pds.psn)
            while len(self.closed) > 256:
                self.closed.popitem(last=False)
            self._close_ack(addr, ent, t.pdcid, t.ini_pdcid, pds.psn, pds.retx)
        else:  # PROBE, CREDIT_REQ, … (emu.transports.uet.control)
            h.control.at_target(t, pds, ent, ecn, now)

    # -- replies -------------------------------------------------------------------------

    def ack(self, t: TargetPdc, psn: int, entropy: int | None, m: bool, retx: int,
            rsp: tuple[int, int, int] | None, req: int = D.ACK_REQ_NONE,
            sack_at: int | None = None) -> None:
        """ACK_CC for extended ``psn``: SACK base = CACK + 1 (or later, so the bitmap
        still holds ``psn`` — or ``sack_at`` when given), bit i = base + i, LSB first
        (uet.md: ACK generation)."""
        h = self.h
        cack, base, bm = t.win.sack(psn if sack_at is None else sack_at)
        # NSCC's service_time: how long this NIC held what it answers — from when the
        # newest datagram reached the port to now. A daemon's late read then adds
        # nothing to the initiator's round-trip samples, as a NIC answering at once
        # would not (docs/credibility.md); sans-IO callers give no arrival: 0
        st = D.service_field(h.now - h.rx_at)
        if rsp is None:  # the common case, in one struct call (.fastpath)
            h.emit(FP.ack_cc_nscc(0, int(m), int(retx), req, s16(psn - cack), cack & _M,
                                  t.pdcid, t.ini_pdcid, h.mpr, s16(base - cack), bm,
                                  t.rcvd_bytes & 0xFFFFFF, min(len(t.win.rcvd), 0xFFFF), st),
                   t.addr, entropy, True)
        else:
            hdr = PdsAckCcNscc(next_hdr=_NH_RSP, m=int(m), retx=int(retx), req=req,
                               ack_psn_offset=s16(psn - cack), cack_psn=cack & _M,
                               spdcid=t.pdcid, dpdcid=t.ini_pdcid, cc_type=0, mpr=h.mpr,
                               sack_psn_offset=s16(base - cack), sack_bitmap=bm,
                               service_time=st, rcvd_bytes=t.rcvd_bytes & 0xFFFFFF,
                               ooo_count=min(len(t.win.rcvd), 0xFFFF))
            # a READ / fetching atomic answers with data, in as many packets as it needs
            for nh, ses, data in self.ses.response_parts(t, rsp, h.job_id):
                hdr.next_hdr = nh
                h.emit(encode_packet(hdr, ses, None, data), t.addr, entropy, True)
        t.bytes_since_ack = 0
        h.stats["tx_acks"] += 1
        if h.trace.enabled:
            h.trace.ack_sent(h.now, pdc=t.pdcid, cack=cack & _M, psn=psn & _M, sack=bm,
                             rsp=None if rsp is None else rsp[1])

    def _close_ack(self, addr: Any, ent: int | None, pdcid: int, ini: int, psn: int,
                   retx: int) -> None:
        hdr = PdsAckCcNscc(retx=int(retx), cack_psn=psn & _M, spdcid=pdcid, dpdcid=ini,
                           mpr=self.h.mpr)
        self.h.emit(encode_packet(hdr), addr, ent, True)
        self.h.stats["tx_acks"] += 1

    def _nack(self, addr: Any, ent: int | None, code: int, psn: int, spdcid: int, dpdcid: int,
              retx: int, ecn: int, payload: int = 0) -> None:
        h = self.h
        h.emit(nack_packet(code, psn, spdcid, dpdcid, payload, retx=bool(retx),
                           m=ecn == ECN_CE), addr, ent, True)
        h.stats["tx_nacks"] += 1
        if h.trace.enabled:
            h.trace.nack_sent(h.now, pdc=spdcid, code=code, psn=psn)

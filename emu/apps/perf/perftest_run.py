# SPDX-License-Identifier: GPL-2.0-only
"""``emu perf … --oob perftest``: the BW tests over perftest's own side channel.

Why a second runner: perftest's side channel carries no test parameters and
no results beyond one BW report, so both sides run with the parameters they
were given (as with ``ib_write_bw``), and each step is perftest's, in its
order (:mod:`.perftest_oob`). The measurement loops are emu's own (:mod:`.bw`);
what differs on the wire is the remote address: perftest's peer expects its
cycle buffer (``increase_rem_addr``: ``va + (k % slots) * INC(size)``), so a
WRITE or READ targets exactly that.

What is verified (perftest itself checks no data):

- emu × emu (each side sees the other's mark in the version field): WRITE —
  the server checks every slot holds the pattern of the last iteration that
  targeted it; READ — the client checks every message it read; SEND — the
  server checks every message (as with emu's own side channel).
- a perftest client (``ib_write_bw`` → ``emu perf write-bw``): its bytes are
  random (perftest fills its buffers with ``rand()``), so the server checks
  placement: every slot perftest's address rule says was written differs
  from what the server put there before, and nothing outside those slots
  changed; SEND: every receive completed with exactly ``size`` bytes, and
  ``iters`` of them per QP.
- a perftest server: what RC itself guarantees — every WRITE/READ/SEND
  completed successfully (the responder checked R_Key, bounds and PSNs).
"""

from __future__ import annotations

import math
import time
from typing import Any

from emu.apps.perf import EXIT_FAILED, bw, report
from emu.apps.perf import perftest_lat as PL
from emu.apps.perf import perftest_wire as W
from emu.apps.perf.endpoint import Endpoint, SetupError, TransportError, buffer_size, open_device
from emu.apps.perf.options import Options
from emu.apps.perf.pattern import DataError, Pattern, client_stream, server_stream
from emu.apps.perf.perftest_oob import OobError, Session
from emu.apps.perf.run import WAITING, _cqe, _Side
from emu.apps.perf.stats import BwResult, bw_result, latency_stats

MB = 1 << 20


class _PerftestSide(_Side):
    """Setup shared by both roles: the exchange up to connected QPs."""

    sess: Session | None = None

    def __init__(self, opts: Options, out: Any = None, err: Any = None) -> None:
        super().__init__(opts, out, err)
        self.params = {**opts.params(), "oob": "perftest"}
        self.mine: list[W.KeyMsg] = []
        self.cycle, self.line = W.CYCLE_BUFFER, W.CACHE_LINE

    def _run(self) -> None:
        try:
            self._perftest()
        except OobError as e:
            # before any result the peer never got going (exit 2); after it, the run broke
            raise (TransportError if self.results else SetupError)(str(e)) from None
        finally:
            if self.sess is not None:
                self.sess.close()

    def _setup(self, dev: Any) -> None:
        """Versions, system data, QPs, MTU, key messages, connect, hand shakes."""
        o, sess = self.opts, self.sess
        assert sess is not None
        sess.versions()
        self.cycle, self.line = sess.sys_data()
        region = W.region_size(max(o.sizes), self.cycle, self.line)
        # latency tests publish their receive area one region in (perftest: the second
        # half of its buffer); BW tests their region's start
        self.recv_off = 0 if self.test.is_bw else region
        # the sender's slots (tx depth), a SEND server's receive slots (rx depth), and
        # the region perftest's address rule may touch from our VA
        depth = max(o.tx_depth, o.rx_depth if self.test.verb == "send" else 0)
        self.ep = ep = Endpoint(dev, o.qps, max(self.recv_off + region,
                                                buffer_size(o.sizes, depth, False)),
                                mtu=o.mtu, outs=o.outs, cqe=_cqe(self.params), transport="roce",
                                qp_timeout=o.qp_timeout)
        self._prepare(ep)  # before the peer learns our keys: it may start at once after
        mtu = sess.mtu(ep.mtu)
        infos = [qp.local_info() for qp in ep.qps]
        gid = W.gid_of(str(infos[0]["address"]))
        self.mine = [W.KeyMsg(0, o.outs, qp.qpn, int(info["psn"]), mr.rkey,
                              mr.va + self.recv_off, gid)
                     for qp, mr, info in zip(ep.qps, ep.mrs, infos, strict=True)]
        opens = self.test.name in ("write-lat", "read-lat")
        if opens:  # write_lat/read_lat: a hand shake opens the exchange
            first = sess.keys(self.mine[:1], "first QP exchange")
        theirs = sess.keys(self.mine, "QP exchange")
        if opens and first[0] != theirs[0]:
            raise OobError("the peer's QP exchange differs from its opening hand shake: it "
                           "runs another test (a latency test opens with a hand shake)")
        if W.is_v4_mapped(gid) != W.is_v4_mapped(theirs[0].gid or b""):
            raise SetupError(
                f"GID types differ (perftest: \"Found Incompatibility issue with GID types\"): "
                f"ours {W.address_of(gid)}, the peer's {W.address_of(theirs[0].gid or gid)} — "
                "use the same IP version on both sides (perftest: -x; emu: [nic] family)")
        ep.connect([{"qpn": k.qpn, "psn": k.psn, "address": W.address_of(k.gid or b""),
                     "pmtu": mtu} for k in theirs])
        if self.test.verb == "send":  # send_bw: the hand shake after RTR comes first
            sess.hand_shake(self.mine[0], "hand shake after connecting the QPs")
            again = sess.keys(self.mine, "second QP exchange")
        else:
            again = sess.keys(self.mine, "second QP exchange")
            sess.hand_shake(self.mine[0], "hand shake after connecting the QPs")
        if again != theirs:
            raise OobError("the peer's second QP exchange differs from its first: it runs "
                           "another test or number of QPs (-q)")
        ep.local = [_info(k) for k in self.mine]
        ep.remote = [{**_info(k), "len": region} for k in theirs]

    def _prepare(self, ep: Endpoint) -> None:
        """Fill buffers before the exchange (the server's READ source, its sentinel;
        write-lat's send area: both sides' pattern, its last byte the stamp later)."""
        if self.test.name in ("write-lat", "send-lat") and self.opts.verify:
            size = max(self.opts.sizes)
            mine = server_stream(0) if self.role == "server" else client_stream(0)
            Pattern(size).fill(ep.mrs[0].view[:size], mine, 0)

    def _latency(self, server: bool) -> None:
        """Every size of write-lat (both sides) or read-lat (the client): perftest's loops
        (:mod:`.perftest_lat`), one row each."""
        o, ep, sess = self.opts, self.ep, self.sess
        assert ep is not None and sess is not None
        peer_stream = client_stream(0) if server else server_stream(0)
        check = (Pattern(W.region_size(max(o.sizes), self.cycle, self.line)), peer_stream) \
            if o.verify and sess.peer_is_emu else None
        for size in o.sizes:
            if self.test.verb == "send":  # receives first, then the hand shake
                n = min(o.iters, o.rx_depth)
                PL.post_receives(ep, self.recv_off, size, n)
                sess.hand_shake(self.mine[0], "hand shake before the run")
                tp = PL.send_lat(ep, self.recv_off, size, o.iters, n, server, o.timeout, check)
            elif self.test.verb == "write":
                tp = PL.write_lat(ep, ep.remote[0], self.recv_off, size, o.iters, server,
                                  o.timeout, check)
                if o.verify:  # the stamp overwrote a pattern byte the next size sends
                    self._prepare(ep)
            else:
                tp = PL.read_lat(ep, ep.remote[0], size, o.iters, o.timeout, check)
            res = latency_stats(PL.samples(tp, 1 if self.test.verb == "read" else 2), size,
                                o.iters)
            self.results.append(res)
            self.say(report.row(res, o.report_gbits))
        self.say(report.RESULT_LINE)
        if check is None and o.verify:
            got = {"write": "every message's stamp (its last byte) arrived in turn",
                   "send": "every message arrived, with its length",
                   "read": "every READ completed successfully"}[self.test.verb]
            print(f"emu perf {self.test.name}: the peer is perftest {sess.peer_version}: it "
                  f"sends no pattern emu knows; {got}", file=self.err, flush=True)

    def _check_gid_index(self, dev: Any) -> None:
        """``-x``, before the peer is contacted: the NIC daemon's engines send from its
        first address, GID index 0 (``emu nicd``: "engines take the first address as
        their own"), so any other index is a setup error that says which GID that is."""
        want = self.opts.gid_index
        gids = list(dev.gids)
        if want is not None and want != 0:
            named = gids[want] if want < len(gids) else "no GID"
            raise SetupError(f"-x {want}: that is {named}, but this NIC's RoCE engine sends "
                             f"from GID index 0 ({gids[0] if gids else '?'}); emu has one "
                             "source GID per host (an IPv6 one: the cluster's [nic] family "
                             "= 6)")

    def _banner_and_addresses(self) -> None:
        ep = self.ep
        assert ep is not None
        self._banner(ep)

    def _at(self, size: int) -> tuple[int, int]:
        """perftest's (slots, stride) for ``size``-byte messages: where they land."""
        return W.cycle_slots(size, self.cycle, self.line), W.slot_stride(size, self.line)


def _info(k: W.KeyMsg) -> dict[str, Any]:
    gid = k.gid or b""
    return {"qpn": k.qpn, "psn": k.psn, "rkey": k.rkey, "va": k.vaddr,
            "gid": W.address_of(gid) if gid else None,
            "address": W.address_of(gid) if gid else None}


class PerftestClient(_PerftestSide):
    role = "client"

    def _perftest(self) -> None:
        o = self.opts
        assert o.server is not None
        dev = open_device(o.timeout)
        try:
            self._check_gid_index(dev)
            self.sess = Session.connect(o.server, o.port, o.timeout)
            self._setup(dev)
        finally:
            if self.ep is None:
                dev.close()
        sess, ep = self.sess, self.ep
        assert sess is not None and ep is not None
        self._banner_and_addresses()
        emu_peer = sess.peer_is_emu
        if not self.test.is_bw:
            self._latency(server=False)
            if self.test.verb != "write":  # read_lat's, send_lat's close with a hand shake
                sess.hand_shake(self.mine[0], "closing hand shake")
            return
        pattern = Pattern(W.region_size(max(o.sizes), self.cycle, self.line)) \
            if o.verify else None
        verb = self.test.verb
        for size in o.sizes:
            if verb == "send":  # the server has posted its receives
                sess.hand_shake(self.mine[0], "hand shake before the run")
            run = bw.run_client(ep, ep.remote, verb, size, iters=o.iters, duration=o.duration,
                                tx_depth=o.tx_depth, cq_mod=o.cq_mod,
                                pattern=pattern if (emu_peer or verb != "read") else None,
                                chan=None, timeout=o.timeout, remote_at=self._at(size))
            res = bw_result(size, run.tposted, run.tcompleted, o.report_gbits,
                            peak=not o.no_peak, timeline=run.timeline)
            self.results.append(res)
            self.say(report.row(res, o.report_gbits))
            if verb == "send" and o.all_sizes:
                sess.hand_shake(self.mine[0], "hand shake after a size")
        self.say(report.RESULT_LINE)
        if verb != "send":
            sess.hand_shake(self.mine[0], "hand shake at the end of the run")
            last = self.results[-1]
            sess.reports(W.BwReport(last.size, last.iterations, last.bw_peak,
                                    last.bw_average, last.msg_rate))
        sess.hand_shake(self.mine[0], "closing hand shake")
        if not emu_peer:
            print(f"emu perf {self.test.name}: the server is perftest {sess.peer_version}: it "
                  f"checks no data; every {verb.upper()} completed successfully",
                  file=self.err, flush=True)
        self._check_min_bw()

    def _check_min_bw(self) -> None:
        o = self.opts
        for r in self.results:
            if o.min_bw is not None and isinstance(r, BwResult) and r.gbps_average < o.min_bw:
                self.fail(EXIT_FAILED, f"BW average {r.gbps_average:.3f} Gb/s at {r.size} bytes"
                          f" is below --min-bw {o.min_bw:g} Gb/s", tell_peer=False)


class PerftestServer(_PerftestSide):
    role = "server"
    before: list[bytes] = []  # the region per QP before the run (verification)

    def _perftest(self) -> None:
        o = self.opts
        dev = open_device(o.timeout)
        try:
            self._check_gid_index(dev)
            if not o.json:
                for line in WAITING:
                    self.say(line)
            self.sess = Session.listen(o.port, o.timeout)
            self._setup(dev)
        finally:
            if self.ep is None:
                dev.close()
        self._banner_and_addresses()
        assert self.sess is not None
        if self.test.name == "write-lat":  # the server pongs; no closing hand shake
            self._latency(server=True)
            return
        if self.test.name == "send-lat":
            self._latency(server=True)
            self.sess.hand_shake(self.mine[0], "closing hand shake")
            return
        if self.test.name == "read-lat":  # the server only waits for the client's end
            self.sess.hand_shake(self.mine[0], "waiting for the client to finish",
                                 timeout=math.inf)
            self._read_source_unchanged()
            self._note("its READs completed on its side; the READ source is unchanged")
            return
        if self.test.verb == "send":
            self._send()
        else:
            self._write_read()
        self.sess.hand_shake(self.mine[0], "closing hand shake")
        self.say(report.RESULT_LINE)

    def _prepare(self, ep: Endpoint) -> None:
        """READ: the source, in perftest's layout; WRITE: a sentinel in the whole region,
        which perftest's writes must replace (where they should, and nowhere else)."""
        o = self.opts
        if not o.verify or self.test.name == "send-bw":
            return
        size = max(o.sizes)
        region = W.region_size(size, self.cycle, self.line)
        if not self.test.is_bw:
            super()._prepare(ep)  # write-lat's, send-lat's send area
            if self.test.verb == "read":  # read-lat's source: the published receive area
                Pattern(region).fill(ep.mrs[0].view[region:2 * region], server_stream(0), 0)
                self.before = [bytes(ep.mrs[0].view[region:2 * region])]
            return
        if self.test.verb == "read":
            bw.fill_region(ep, region, Pattern(region))
        else:
            sentinel = Pattern(region)
            for q, mr in enumerate(ep.mrs):
                sentinel.fill(mr.view[:region], server_stream(q), 0)
        self.before = [bytes(mr.view[:region]) for mr in ep.mrs]

    def _write_read(self) -> None:
        """WRITE/READ: wait for the client's end, take its report, check the region."""
        o, ep, sess = self.opts, self.ep, self.sess
        assert ep is not None and sess is not None
        size = max(o.sizes)  # with -a the last size is the one left in the buffer
        emu_peer = sess.peer_is_emu
        pattern = Pattern(size) if o.verify else None
        region = W.region_size(size, self.cycle, self.line)
        before = self.before
        sess.hand_shake(self.mine[0], "waiting for the client to finish", timeout=math.inf)
        rep = sess.reports(W.BwReport(0, 0, 0.0, 0.0, 0.0))
        row = _report_row(rep, o.report_gbits)
        self.results.append(row)
        self.say(report.row(row, o.report_gbits))
        if pattern is None:
            return
        at = self._at(size)
        if self.test.verb == "write" and emu_peer and o.duration is None and not o.all_sizes:
            bw.verify_writes(ep, size, o.tx_depth, [o.iters] * len(ep.qps), pattern, at=at)
            self._note("checked every slot's data (emu's pattern)")
        elif self.test.verb == "write":
            n = None if o.duration or o.all_sizes else o.iters
            _check_placement(ep, before, size, at, region, n)
            self._note("checked placement: every slot perftest's address rule names was "
                       "written, nothing else changed")
        else:
            self._read_source_unchanged()
            self._note("its READs completed on its side (perftest reports no data); the "
                       "READ source is unchanged" if not emu_peer else
                       "it checked every READ against this side's pattern")

    def _read_source_unchanged(self) -> None:
        ep = self.ep
        assert ep is not None
        for q, mr in enumerate(ep.mrs):
            lo = self.recv_off
            if self.before and bytes(mr.view[lo:lo + len(self.before[q])]) != self.before[q]:
                raise DataError(f"QP {q}: the READ source changed during a READ test")

    def _send(self) -> None:
        """SEND: per size, post receives, hand shake, receive ``iters`` per QP."""
        o, ep, sess = self.opts, self.ep, self.sess
        assert ep is not None and sess is not None
        pattern = Pattern(max(o.sizes)) if o.verify and sess.peer_is_emu else None
        for size in o.sizes:
            rx = bw.SendReceiver(ep, size, o.rx_depth, o.iters, pattern)
            rx.prepost()
            sess.hand_shake(self.mine[0], "hand shake before the run")
            t0 = time.perf_counter()
            rx.serve(_Counts([o.iters] * len(ep.qps)), o.timeout)  # type: ignore[arg-type]
            t1 = time.perf_counter()
            n = o.iters * len(ep.qps)
            row = bw_result(size, [t0] * n, [t1] * n, o.report_gbits, peak=False)
            self.results.append(row)
            self.say(report.row(row, o.report_gbits))
            if o.all_sizes:
                sess.hand_shake(self.mine[0], "hand shake after a size")
        self._note("checked every message's data (emu's pattern)" if pattern is not None else
                   "checked every receive: its length and the count per QP")

    def _note(self, what: str) -> None:
        assert self.sess is not None
        peer = "emu perf" if self.sess.peer_is_emu else f"perftest {self.sess.peer_version}"
        print(f"emu perf {self.test.name}: the client is {peer}: {what}", file=self.err,
              flush=True)


class _Counts:
    """What :meth:`bw.SendReceiver.serve` waits for: the number of messages per QP —
    known in advance here (both sides were given ``-n``), so "done" comes at once."""

    def __init__(self, counts: list[int]) -> None:
        self.msg: dict[str, Any] | None = {"op": "done", "counts": counts}

    def poll(self) -> dict[str, Any] | None:
        msg, self.msg = self.msg, None
        return msg


def _report_row(rep: W.BwReport, gbits: bool) -> BwResult:
    """The client's BW report as a row (perftest's server prints exactly that)."""
    to_gbps = (lambda v: v) if gbits else (lambda v: v * MB * 8 / 1e9)
    unit = report.bw_unit(gbits)[0]
    return BwResult(rep.size, rep.iters, 0.0, rep.bw_peak, rep.bw_avg, rep.msg_rate, unit,
                    rep.size * rep.iters, to_gbps(rep.bw_avg), to_gbps(rep.bw_peak))


def _check_placement(ep: Endpoint, before: list[bytes], size: int, at: tuple[int, int],
                     region: int, iters: int | None) -> None:
    """perftest's WRITEs landed where its address rule puts them: each slot it wrote is
    no longer the sentinel, and every byte outside the written slots is unchanged.
    ``iters`` None (a run for a duration): at least the first slot was written."""
    slots, stride = at
    written = slots if iters is None else min(slots, iters)
    for q, mr in enumerate(ep.mrs):
        now, was = bytes(mr.view[:region]), before[q]
        for s in range(slots):
            lo, hi = s * stride, s * stride + size
            if s < written and now[lo:hi] == was[lo:hi]:
                if iters is not None or s == 0:
                    raise DataError(f"QP {q}: slot {s} (offset {lo}, {size} bytes) was not "
                                    f"written")
            elif s >= written and now[lo:hi] != was[lo:hi]:
                raise DataError(f"QP {q}: slot {s} (offset {lo}) changed, beyond the "
                                f"{written} slots written")
            gap_end = min((s + 1) * stride, region)
            if now[hi:gap_end] != was[hi:gap_end]:
                raise DataError(f"QP {q}: bytes {hi}..{gap_end} between slots changed")
        tail = slots * stride
        if now[tail:] != was[tail:]:
            raise DataError(f"QP {q}: bytes from {tail} on changed (beyond the cycle buffer)")

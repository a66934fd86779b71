# SPDX-License-Identifier: GPL-2.0-only
"""The client and the server of one test: handshake, one round per size, report.

Side-channel conversation (JSON lines, :mod:`.channel`)::

    client → hello {params}          server → hello {qps: [QP data]}
    client → connect {qps}           server → connected
    per size:  client → round {size}  server → go          (receives posted, data ready)
               … the measurement …
               client → done {counts, row, result}
               server → result {ok}                        (after checking WRITE data)
    client → bye

Either side may send ``abort {error, code}`` instead; the other stops with
that exit status. The server runs with the client's parameters.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from typing import Any

from emu.api import NicError
from emu.apps.perf import EXIT_FAILED, EXIT_OK, EXIT_USAGE, bw, lat, report, stall
from emu.apps.perf.channel import Channel, ChannelError, PeerAbort
from emu.apps.perf.endpoint import Endpoint, SetupError, TransportError, buffer_size, open_device
from emu.apps.perf.kernel_rtt import PathRtt, RttError, ping_rtt
from emu.apps.perf.options import PERFTEST_QP_TIMEOUT, TESTS, Options, Test
from emu.apps.perf.pattern import DataError, Pattern
from emu.apps.perf.stats import BwResult, LatResult, bw_result, latency_stats, series_interval
from emu.credible import overload
from emu.fabricclock import FabricClock
from emu.outpath import cannot_write

WAITING = ("*" * 36, "* Waiting for client to connect... *", "*" * 36)


class _Side:
    """What client and server share: output routing, failure bookkeeping, the JSON doc."""

    role = ""

    def __init__(self, opts: Options, out: Any = None, err: Any = None) -> None:
        self.opts = opts
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.errors: list[str] = []
        self.code = EXIT_OK
        self.results: list[Any] = []
        self.ep: Endpoint | None = None
        self.chan: Channel | None = None
        self.params: dict[str, Any] = opts.params()
        self.test: Test = opts.test
        #: the cluster's emulator overload during the run (:mod:`emu.credible.overload`)
        self.overload: dict[str, Any] | None = None
        self.ping: PathRtt | None = None  # the kernel's RTT to the server (latency client)
        self.peer_host: str | None = None  # the server's host, as its hello names it
        self.ping_error: str | None = None
        #: the fabric clock the run is measured on: the NIC daemon's (its device info),
        #: so Gb/s, µs and -D are fabric time; real time without a daemon's word
        self.clock = FabricClock()
        self.late_start: float | None = None  # fabric s a --start-at was missed by

    def _stall_limit(self) -> float:
        """Wall seconds with nothing completing before this side gives up: ``--timeout``
        plus the transport's own waits at the clock's scale (:mod:`emu.apps.perf.stall`;
        the run's transport and ``-u`` are the client's: a server takes them from it)."""
        p = self.params
        return stall.stall_limit(self.opts.timeout, str(p.get("transport") or "roce"),
                                 int(p.get("qp_timeout") or PERFTEST_QP_TIMEOUT),
                                 self.clock.scale)

    def say(self, line: str = "") -> None:
        """Human output: stdout, or stderr when stdout carries the JSON document."""
        print(line, file=self.err if self.opts.json else self.out, flush=True)

    def fail(self, code: int, message: str, tell_peer: bool = True) -> None:
        self.errors.append(message)
        self.code = max(self.code, code)
        print(f"emu perf {self.test.name} ({self.role}): {message}", file=self.err, flush=True)
        if tell_peer and self.chan is not None:
            try:
                self.chan.send("abort", error=message, code=code)
            except ChannelError:
                pass

    def run(self) -> int:
        try:
            self._run()
        except SetupError as e:
            self.fail(EXIT_USAGE, str(e))
        except DataError as e:
            self.fail(EXIT_FAILED, str(e))
        except TransportError as e:
            self.fail(EXIT_FAILED, str(e))
        except NicError as e:
            # a post or a request the daemon's socket refused mid-run (it died: kill -9 in
            # tests/chaos): the same one line as a lost connection found between posts
            self.fail(EXIT_FAILED, f"NIC daemon connection lost: {e}")
        except PeerAbort as e:
            peer = "server" if self.role == "client" else "client"
            self.fail(e.code, f"the {peer} stopped: {e}", tell_peer=False)
        except ChannelError as e:
            self.fail(EXIT_FAILED if self.results else EXIT_USAGE, str(e), tell_peer=False)
        except KeyboardInterrupt:
            self.fail(130, "interrupted")
        finally:
            self._close()
        self._finish()
        return self.code

    def _close(self) -> None:
        if self.ep is not None:
            self.ep.close()
        if self.chan is not None:
            self.chan.close()

    def _finish(self) -> None:
        if self.opts.json:
            ep = self.ep
            doc = report.document(
                self.test, role=self.role, params=self.params,
                device=ep.device if ep else "", mtu=ep.mtu if ep else 0,
                local=ep.local if ep else [], remote=ep.remote if ep else [],
                results=self.results, errors=self.errors, min_bw=self.opts.min_bw,
                kernel_rtt=self.ping, kernel_rtt_error=self.ping_error,
                time={"scale": self.clock.scale, "epoch": self.clock.epoch})
            if self.opts.start_at is not None:
                doc["start_at"] = {"fabric_s": self.opts.start_at, "missed_by_s": self.late_start}
            if self.overload is not None:  # the cluster's daemons during the run
                doc["overload"] = self.overload
                doc["credible"] = self.overload["credible"]
            print(json.dumps(doc, indent=1), file=self.out, flush=True)

    def _banner(self, ep: Endpoint) -> None:
        p = self.params
        for line in report.banner(self.test, role=self.role, device=ep.device, qps=p["qps"],
                                  mtu=ep.mtu, tx_depth=p["tx_depth"], rx_depth=p["rx_depth"],
                                  cq_mod=p["cq_mod"], outs=p["outs"], gid_index=ep.gid_index(),
                                  transport=ep.transport):
            self.say(line)
        for line in report.addresses(self.test, ep.local, ep.remote, p["outs"]):
            self.say(line)
        self.say(report.header(self.test, bool(p["report_gbits"])))


def device_clock(attrs: dict[str, Any]) -> FabricClock:
    """The fabric clock a NIC daemon runs on (``time`` in its device info); real time for
    a daemon that does not say (an emu before fabric time)."""
    t = attrs.get("time") or {}
    return FabricClock(float(t.get("scale", 1.0)), float(t.get("epoch", 0.0)))


def _check_transport(test: Test, sizes: list[int], ep: Endpoint) -> None:
    """write-lat learns of a WRITE's arrival from its last byte, which holds only where
    packets are placed in order (RoCE RC). UET RUD and MRC spray and place packets in
    any order, so there a message must fit one packet."""
    if ep.transport in ("uet", "mrc") and test.name == "write-lat" and max(sizes) > ep.mtu:
        raise SetupError(f"write-lat over {ep.transport.upper()} needs messages of at most "
                         f"one packet ({ep.mtu} B here): it places packets in any order, so "
                         f"the last byte landing says nothing about the others")


def _cqe(p: dict[str, Any]) -> int:
    return max(4096, p["qps"] * max(p["tx_depth"], p["rx_depth"]) + 64)


class Client(_Side):
    role = "client"

    def _run(self) -> None:
        o = self.opts
        assert o.server is not None
        dev = open_device(o.timeout)
        self.clock = device_clock(dev.attrs)
        try:
            self.chan = chan = Channel.connect(o.server, o.port, o.timeout)
            chan.send("hello", params=self.params)
            hello = chan.recv("hello")
            self.peer_host = str(hello["host"]) if hello.get("host") else None
            self.ep = ep = Endpoint(dev, o.qps, buffer_size(o.sizes, o.tx_depth,
                                                            not o.test.is_bw),
                                    mtu=o.mtu, outs=o.outs, cqe=_cqe(self.params),
                                    transport=o.transport, qp_timeout=o.qp_timeout)
            chan_info = ep.infos()
            ep.connect(hello["qps"])
            _check_transport(o.test, o.sizes, ep)
            chan.send("connect", qps=chan_info)
            chan.recv("connected")
        except ChannelError as e:
            raise SetupError(str(e)) from None
        finally:
            if self.ep is None:
                dev.close()
        if not o.test.is_bw and o.ping_count:
            self._measure_ping()
        self._banner(ep)
        pattern = Pattern(max(o.sizes)) if o.verify else None
        cluster = str(dev.attrs.get("cluster") or "")
        before = overload.snapshot(cluster) if cluster else None
        for size in o.sizes:
            r = self._round(ep, chan, size, pattern)
            self.results.append(r)
            self.say(report.row(r, o.report_gbits))
        self.say(report.RESULT_LINE)
        if not o.test.is_bw and o.ping_count:
            lat_rows = [r for r in self.results if isinstance(r, LatResult)]
            for line in report.rtt_lines(o.test, lat_rows, self.ping, self.ping_error,
                                         self.clock.scale):
                self.say(line)
            self.say(report.RESULT_LINE)
        if self.clock.scale != 1:
            self.say(report.time_line(self.clock.scale))
        if before is not None:
            # the verdict is the whole cluster's; the packets counted, this run's two NICs
            own = [h for h in (str(dev.attrs.get("host") or ""), self.peer_host) if h]
            self.overload = overload.delta(before, overload.snapshot(cluster), own=own or None)
            self._judge_scale(cluster)
            print(f"emu perf: {overload.retransmitted(self.overload)}", file=self.err,
                  flush=True)
            line = overload.warning(self.overload)
            if line:
                print(f"emu perf: {line}", file=self.err, flush=True)
        chan.send("bye")
        self._check_min_bw()
        if o.plot:
            self._plot(o.plot)

    def _judge_scale(self, cluster: str) -> None:
        """Below the plan's floors the result is emu's too (:func:`overload.judge_scale`):
        a bandwidth test needs the scale at which the machine keeps up; a latency test
        also the one at which emu's own round trip is a small share of the fabric's."""
        from emu.cluster.cluster import ClusterError, plan_of

        assert self.overload is not None
        try:
            t = plan_of(cluster).time
        except (ClusterError, OSError, ValueError, KeyError, TypeError):
            return  # no plan to judge by (an older cluster): the counters decide alone
        if self.test.is_bw:
            overload.judge_scale(self.overload, t.keep_up_floor, "keeping up with the traffic")
        else:
            overload.judge_scale(self.overload, max(t.keep_up_floor, t.latency_floor),
                                 "latency (emu's own round trip within its share of the "
                                 "fabric's)")

    def _plot(self, path: str) -> None:
        """The chart, after the run. Its path was checked before the run (``from_args``);
        a write that fails anyway (a full disk) is one line and exit status 2, and the
        results printed stand."""
        try:
            files, n = report.plot(path, self.test,
                                   [r for r in self.results if isinstance(r, BwResult)])
        except OSError as e:
            self.fail(EXIT_USAGE, cannot_write(e.filename or path, e), tell_peer=False)
            return
        print(f"wrote {' and '.join(files)} ({n} points)", file=self.err)

    def _measure_ping(self) -> None:
        """The kernel's round trip to the server, from this host, before the test (the
        server waits for our ``round``, so nothing else is on the path). A failed ping
        is reported, not fatal: the test itself does not depend on it."""
        o = self.opts
        assert o.server is not None
        try:
            self.ping = ping_rtt(o.server, count=o.ping_count)
        except RttError as e:
            self.ping_error = str(e)
            print(f"emu perf {self.test.name}: kernel RTT not measured: {e}", file=self.err,
                  flush=True)

    def _wait_start(self) -> None:
        """``--start-at``: sleep (wall) until the fabric clock reads it, so that flows
        started by separate commands begin together in fabric time at any scale. Missed
        (the command came up after it): said, and the run starts at once."""
        at = getattr(self.opts, "start_at", None)
        if at is None:
            return
        late = self.clock.now() - at
        if late > 0:
            self.late_start = late
            print(f"emu perf {self.test.name}: --start-at {at:g} passed {late * 1e6:.1f} "
                  "fabric us before the connection was ready: started at once",
                  file=self.err, flush=True)
            return
        time.sleep(self.clock.to_wall(-late))

    def _round(self, ep: Endpoint, chan: Channel, size: int, pattern: Pattern | None
               ) -> BwResult | LatResult:
        o = self.opts
        if not o.test.is_bw:
            lat.prepare_client(ep, size)
        chan.send("round", size=size)
        chan.recv("go")
        self._wait_start()
        res: BwResult | LatResult
        if o.test.is_bw:
            run = bw.run_client(ep, ep.remote, o.test.verb, size, iters=o.iters,
                                duration=o.duration, tx_depth=o.tx_depth, cq_mod=o.cq_mod,
                                pattern=pattern, chan=chan, timeout=self._stall_limit(),
                                clock=self.clock.now)
            elapsed = run.end - run.tposted[0] if run.tposted else 0.0
            res = bw_result(size, run.tposted, run.tcompleted, o.report_gbits,
                            peak=not o.no_peak, timeline=run.timeline,
                            interval=series_interval(elapsed))
            counts = run.counts
        else:
            lrun = lat.client(ep, ep.remote, o.test.verb, size, iters=o.iters,
                              duration=o.duration, pattern=pattern, chan=chan,
                              timeout=self._stall_limit(), clock=self.clock.now)
            res = latency_stats(lrun.samples, size, lrun.iterations)
            counts = [lrun.iterations]
        chan.send("done", counts=counts, row=report.row(res, o.report_gbits),
                  result=res.to_json())
        chan.recv("result")
        return res

    def _check_min_bw(self) -> None:
        o = self.opts
        if o.min_bw is None:
            return
        for r in self.results:
            if isinstance(r, BwResult) and r.gbps_average < o.min_bw:
                self.fail(EXIT_FAILED, f"BW average {r.gbps_average:.3f} Gb/s at {r.size} bytes"
                          f" is below --min-bw {o.min_bw:g} Gb/s", tell_peer=False)


class Server(_Side):
    role = "server"

    def _run(self) -> None:
        o = self.opts
        dev = open_device(o.timeout)  # before waiting: no daemon here is a setup error now
        try:
            self._serve(dev)
        finally:
            if self.ep is None:
                dev.close()

    def _serve(self, dev: Any) -> None:
        o = self.opts
        if not o.json:
            for line in WAITING:
                self.say(line)
        self.chan = chan = Channel.listen(o.port, o.timeout)
        p = chan.recv("hello")["params"]
        if p.get("test") != self.test.name:
            raise SetupError(f"the client runs {p.get('test')}, this server "
                             f"{self.test.name}")
        self.params = p
        self.test = TESTS[p["test"]]
        sizes = list(p["sizes"])
        depth = p["rx_depth"] if self.test.verb == "send" else p["tx_depth"]
        self.ep = ep = Endpoint(dev, p["qps"], buffer_size(sizes, depth, not self.test.is_bw),
                                mtu=p["mtu"], outs=p["outs"], cqe=_cqe(p),
                                transport=str(p.get("transport", "roce")),
                                qp_timeout=p.get("qp_timeout"))
        # our host, so the client counts this NIC's packets with its own (and no other's)
        chan.send("hello", qps=ep.infos(), host=dev.attrs.get("host"))
        ep.connect(chan.recv("connect")["qps"])
        chan.send("connected")
        self._banner(ep)
        pattern = Pattern(max(sizes)) if p["verify"] else None
        while True:
            msg = chan.recv(("round", "bye"), timeout=math.inf)
            if msg["op"] == "bye":
                break
            done = self._round(ep, chan, int(msg["size"]), pattern)
            self.results.append(done["result"])
            self.say(done["row"])
        self.say(report.RESULT_LINE)

    def _round(self, ep: Endpoint, chan: Channel, size: int, pattern: Pattern | None
               ) -> dict[str, Any]:
        p, verb = self.params, self.test.verb
        iters = None if p["duration"] else int(p["iters"])
        timeout = self._stall_limit()
        rx = None
        if self.test.is_bw:
            if verb == "read":
                bw.prepare_read_source(ep, size, p["tx_depth"], pattern)
            elif verb == "send":
                rx = bw.SendReceiver(ep, size, p["rx_depth"], iters, pattern)
                rx.prepost()
        else:
            lat.prepare_server(ep, verb, size, pattern)
        chan.send("go")
        done: dict[str, Any] | None
        if rx is not None:
            rx.serve(chan, timeout)
            done = rx.done
        elif self.test.is_bw:
            done = None
        else:
            _, done = lat.server(ep, verb, size, iters=iters, pattern=pattern, chan=chan,
                                 timeout=timeout)
        if done is None:
            done = chan.recv("done", timeout=math.inf)
        if self.test.is_bw and verb == "write" and pattern is not None:
            bw.verify_writes(ep, size, p["tx_depth"], list(done["counts"]), pattern)
        chan.send("result", ok=True)
        return done


def main(opts: Options) -> int:
    """Run one side (or, with ``--from/--to``, both); the exit status."""
    if opts.orchestrated:
        from emu.apps.perf import cluster

        return cluster.run(opts)
    side: _Side
    if opts.oob == "perftest":
        from emu.apps.perf.perftest_run import PerftestClient, PerftestServer

        side = PerftestClient(opts) if opts.is_client else PerftestServer(opts)
    else:
        side = Client(opts) if opts.is_client else Server(opts)
    old = signal.signal(signal.SIGTERM, _interrupt)  # buffers are unlinked on SIGTERM too
    try:
        return side.run()
    finally:
        signal.signal(signal.SIGTERM, old)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt

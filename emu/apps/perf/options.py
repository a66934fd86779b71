# SPDX-License-Identifier: GPL-2.0-only
"""The tests ``emu perf`` knows and its flags (perftest's names where they make sense).

:func:`add_arguments` fills an argparse parser; :func:`from_args` turns the
parsed namespace into a validated :class:`Options` (raising
:class:`UsageError`, exit status 2); :func:`client_argv` renders options back
into a command line (``--from/--to`` starts the client that way).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

DEFAULT_PORT = 18515  # perftest's; = emu.api.exchange.DEFAULT_PORT (not imported: fast CLI)
MAX_SIZE = 1 << 23  # perftest's MAX_SIZE: -a runs 2 .. 8 MiB
MIN_ITER = 5  # perftest's MIN_ITER
MAX_TX_DEPTH = 4096  # the daemon's send queue (max_send_wr)
MAX_QPS = 64
PMTUS = (256, 512, 1024, 2048, 4096)
OOBS = ("emu", "perftest")
#: what ``--oob perftest`` runs: all six
PERFTEST_TESTS = ("write-bw", "read-bw", "send-bw", "write-lat", "read-lat", "send-lat")
TRANSPORTS = ("roce", "uet", "mrc")  # what ``emu up`` daemons serve (emu.cluster.NIC_TRANSPORTS)
BW_PEAK_MAX_ITERS = 20000  # perftest skips the peak above this many iterations


class UsageError(Exception):
    """A bad flag or combination: one line on stderr, exit status 2."""


@dataclass(frozen=True)
class Test:
    """One of the six tests: ``verb`` is write/read/send, ``kind`` bw or lat."""

    name: str
    verb: str
    kind: str
    title: str  # perftest's testsStr

    @property
    def banner(self) -> str:
        """The line perftest centres over its banner, e.g. ``RDMA_Write BW Test``."""
        return f"{self.title} {'BW' if self.kind == 'bw' else 'Latency'} Test"

    @property
    def is_bw(self) -> bool:
        return self.kind == "bw"


#: perftest's -u: the RoCEv2 QPs' local ACK timeout code, 4.096 µs × 2^14 = 67 ms
PERFTEST_QP_TIMEOUT = 14

TITLES = {"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send"}
TESTS = {f"{v}-{k}": Test(f"{v}-{k}", v, k, TITLES[v])
         for v in ("write", "read", "send") for k in ("bw", "lat")}


@dataclass
class Options:
    """Everything one side needs; the server takes the test parameters from the client."""

    test: Test
    server: str | None = None  # the client's peer; None = be the server
    size: int = 65536
    all_sizes: bool = False
    iters: int = 1000
    duration: float | None = None
    start_at: float | None = None  # fabric seconds (--start-at)
    qps: int = 1
    tx_depth: int = 128
    rx_depth: int = 512
    cq_mod: int = 100
    outs: int = 16
    qp_timeout: int = PERFTEST_QP_TIMEOUT  # -u (4.096 µs × 2^code)
    mtu: int | None = None
    port: int = DEFAULT_PORT
    report_gbits: bool = False
    json: bool = False
    min_bw: float | None = None
    verify: bool = True
    no_peak: bool = False
    timeout: float = 60.0
    plot: str | None = None
    transport: str = "roce"
    ping_count: int = 50  # latency tests: ICMP echoes for the kernel RTT beside the result
    #: the side channel: "emu" (JSON lines; the server takes the client's parameters) or
    #: "perftest" (perftest's own bytes: runs against ib_write_bw & co.; both sides are
    #: given the same parameters, as with perftest)
    oob: str = "emu"
    gid_index: int | None = None  # -x: the GID the QPs must use (perftest mode checks it)
    # --from/--to mode
    src: str | None = None
    dst: str | None = None
    cluster: str | None = None
    verbose: bool = False
    explicit: set[str] = field(default_factory=set)

    @property
    def sizes(self) -> list[int]:
        """The message sizes to run: one, or 2 .. 2^23 with ``-a`` (perftest's RUN_ALL)."""
        return [1 << k for k in range(1, 24)] if self.all_sizes else [self.size]

    @property
    def is_client(self) -> bool:
        return self.server is not None

    @property
    def orchestrated(self) -> bool:
        return self.src is not None or self.dst is not None

    def params(self) -> dict:
        """What the client tells the server (it runs with these, whatever its own flags)."""
        return {"test": self.test.name, "sizes": self.sizes, "iters": self.iters,
                "duration": self.duration, "qps": self.qps, "tx_depth": self.tx_depth,
                "rx_depth": self.rx_depth, "cq_mod": self.cq_mod, "outs": self.outs,
                "mtu": self.mtu, "verify": self.verify, "report_gbits": self.report_gbits,
                "transport": self.transport, "qp_timeout": self.qp_timeout}


def _size(text: str) -> int:
    """``65536``, ``64K``, ``1M`` (binary multiples), ``0x1000``."""
    t = text.strip().upper().removesuffix("B")
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    try:
        return int(t, 0) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """perftest's flags (``ib_write_bw -h``) that make sense here, plus emu's own."""
    p.add_argument("test", choices=list(TESTS), help="which test (perftest's ib_<test>)")
    p.add_argument("server", nargs="?", metavar="ADDR",
                   help="the server's address: be the client (without: be the server)")
    g = p.add_argument_group("perftest options")
    g.add_argument("-s", "--size", type=_size, help="message size in bytes (default 65536 for "
                   "BW tests, 2 for latency tests; 64K and 1M work too)")
    g.add_argument("-n", "--iters", type=int, help="iterations per size (default 5000 for "
                   "write-bw, else 1000)")
    g.add_argument("-D", "--duration", type=float, metavar="SECONDS",
                   help="run for this long instead of a number of iterations (fabric "
                        "seconds: at time scale N the run takes N times as long on the wall "
                        "clock)")
    g.add_argument("--start-at", type=float, metavar="FABRIC_S",
                   help="client: begin posting when the cluster's fabric clock reads this "
                        "(fabric seconds since the cluster's epoch; emu status --json "
                        "'time'): flows started by separate commands then start together "
                        "at every time scale")
    g.add_argument("-a", "--all", dest="all_sizes", action="store_true",
                   help="run sizes 2 .. 2^23 bytes")
    g.add_argument("-q", "--qp", dest="qps", type=int, help="number of QPs (BW tests; default 1)")
    g.add_argument("-t", "--tx-depth", dest="tx_depth", type=int,
                   help="send queue depth: posts in flight per QP (default 128 BW, 1 latency)")
    g.add_argument("-r", "--rx-depth", dest="rx_depth", type=int,
                   help="receive buffers posted per QP (send-bw server; default 512)")
    g.add_argument("-Q", "--cq-mod", dest="cq_mod", type=int,
                   help="signal a completion every N posts (BW tests; default 100)")
    g.add_argument("-o", "--outs", type=int, help="outstanding reads (read tests; default 16)")
    g.add_argument("-u", "--qp-timeout", dest="qp_timeout", type=int, metavar="CODE",
                   help="RoCEv2 QPs' local ACK timeout, 4.096 us x 2^CODE of fabric time "
                        "(default 14: 67 ms, as perftest): what a lost last packet waits")
    g.add_argument("-m", "--mtu", type=int, choices=PMTUS,
                   help="RoCE path MTU (default: the largest the link MTU allows)")
    g.add_argument("-p", "--port", type=int, help=f"side-channel TCP port (default "
                   f"{DEFAULT_PORT})")
    g.add_argument("--report_gbits", "--report-gbits", dest="report_gbits", action="store_true",
                   help="report bandwidth in Gb/s (default MB/s, 1 MB = 2^20 bytes)")
    g.add_argument("-N", "--noPeak", dest="no_peak", action="store_true",
                   help="do not compute the BW peak")
    g.add_argument("-x", "--gid-index", dest="gid_index", type=int,
                   help="the GID index the QPs use (emu: checked against the NIC's one "
                        "source GID; IPv6 GIDs need the cluster's [nic] family = 6)")
    e = p.add_argument_group("emu options")
    e.add_argument("--oob", choices=OOBS,
                   help="side channel: emu (default; JSON, the server takes the client's "
                        "parameters) or perftest (perftest's own bytes, to run against "
                        "ib_write_bw & co.; give both sides the same parameters)")
    e.add_argument("--json", action="store_true",
                   help="results as one JSON document on stdout (banner to stderr)")
    e.add_argument("--min-bw", dest="min_bw", type=float, metavar="GBITS",
                   help="exit 1 when the average bandwidth is below this (Gb/s)")
    e.add_argument("--no-verify", dest="verify", action="store_false", default=None,
                   help="do not fill and check data patterns")
    e.add_argument("--timeout", type=float, help="wall seconds to wait for the peer, and "
                   "for progress on top of three of the transport's own retransmission "
                   "waits at the cluster's time scale (a RoCEv2 QP's -u timeout, UET's RTO "
                   "ceiling: 3 x 67 fabric ms is 24 wall minutes at scale 7100); default 60")
    e.add_argument("--plot", metavar="OUT.svg", help="chart of bandwidth over time (BW tests; "
                   "an .svg gets a .png beside it; .png, .pdf: that format alone)")
    e.add_argument("--transport", choices=TRANSPORTS,
                   help="RDMA transport (default roce; uet = UET endpoints, RUD, sprayed)")
    e.add_argument("--ping-count", dest="ping_count", type=int, metavar="N",
                   help="latency tests: ICMP echoes to the server before the test, whose "
                        "average round trip is printed beside the result with what emu adds "
                        "to it (default 50; 0 = none)")
    c = p.add_argument_group("one command across a running cluster")
    c.add_argument("--from", dest="src", metavar="NODE",
                   help="the client's host (h1, or CLUSTER:h1 as emu exec takes it)")
    c.add_argument("--to", dest="dst", metavar="NODE", help="the server's host (e.g. h2)")
    c.add_argument("--cluster", "-c", metavar="C",
                   help="cluster (default: the only one up; or name it as --from C:h1)")
    c.add_argument("-v", "--verbose", action="store_true",
                   help="also show the server's report (on stderr)")


def _split_cluster(o: Options) -> None:
    """``--from C:h1 --to C:h2`` as ``emu exec C:h1`` takes a node: the cluster moves
    to ``o.cluster``; both ends and ``--cluster`` must name the same one."""
    named = {o.cluster} if o.cluster else set()
    ends = []
    for spec in (o.src, o.dst):
        assert spec is not None
        c, sep, node = spec.rpartition(":")
        if sep:
            if not (c and node):
                raise UsageError(f"{spec!r}: give NODE or CLUSTER:NODE")
            named.add(c)
        ends.append(node)
    if len(named) > 1:
        raise UsageError(f"--from/--to/--cluster name different clusters: "
                         f"{', '.join(sorted(named))}")
    o.src, o.dst = ends
    o.cluster = named.pop() if named else None


def from_args(a: argparse.Namespace) -> Options:
    """Validate and fill defaults (perftest's), or raise :class:`UsageError`."""
    test = TESTS[a.test]
    explicit = {k for k, v in vars(a).items() if v not in (None, False)}
    o = Options(test=test, server=a.server)
    o.explicit = explicit
    o.size = a.size if a.size is not None else (65536 if test.is_bw else 2)
    o.all_sizes = bool(a.all_sizes)
    o.iters = a.iters if a.iters is not None else (5000 if test.name == "write-bw" else 1000)
    o.duration = a.duration
    o.start_at = a.start_at
    o.qps = a.qps if a.qps is not None else 1
    o.tx_depth = a.tx_depth if a.tx_depth is not None else (128 if test.is_bw else 1)
    o.rx_depth = a.rx_depth if a.rx_depth is not None else 512
    o.cq_mod = a.cq_mod if a.cq_mod is not None else 100
    o.outs = a.outs if a.outs is not None else 16
    o.qp_timeout = a.qp_timeout if a.qp_timeout is not None else PERFTEST_QP_TIMEOUT
    o.mtu = a.mtu
    o.port = a.port if a.port is not None else DEFAULT_PORT
    o.report_gbits = bool(a.report_gbits)
    o.json = bool(a.json)
    o.min_bw = a.min_bw
    o.verify = a.verify is not False
    o.no_peak = bool(a.no_peak)
    o.timeout = a.timeout if a.timeout is not None else 60.0
    o.plot = a.plot
    o.transport = a.transport or "roce"
    o.ping_count = a.ping_count if a.ping_count is not None else 50
    o.src, o.dst, o.cluster, o.verbose = a.src, a.dst, a.cluster, bool(a.verbose)
    o.oob = a.oob or "emu"
    o.gid_index = a.gid_index
    validate(o)
    _check_plot(o)
    return o


def _check_plot(o: Options) -> None:
    """``--plot``'s file can be written: found out before the test, not after it ran."""
    from emu.errors import UserError
    from emu.outpath import check_file

    if o.plot is not None:
        try:
            check_file(o.plot)
        except UserError as e:
            raise UsageError(f"--plot: {e}") from None


def validate(o: Options) -> None:
    def need(ok: bool, msg: str) -> None:
        if not ok:
            raise UsageError(msg)

    need(1 <= o.size <= MAX_SIZE, f"--size must be 1 .. {MAX_SIZE}, got {o.size}")
    need(o.iters >= MIN_ITER, f"--iters must be at least {MIN_ITER}, got {o.iters}")
    need(o.duration is None or o.duration > 0, "--duration must be positive")
    need(not (o.duration and o.all_sizes), "--duration does not combine with --all "
         "(as in perftest)")
    need(1 <= o.qps <= MAX_QPS, f"--qp must be 1 .. {MAX_QPS}, got {o.qps}")
    need(o.test.is_bw or o.qps == 1, "latency tests use one QP (as in perftest)")
    need(1 <= o.tx_depth <= MAX_TX_DEPTH, f"--tx-depth must be 1 .. {MAX_TX_DEPTH}")
    need(1 <= o.rx_depth <= 16384, "--rx-depth must be 1 .. 16384")
    need(1 <= o.cq_mod <= 1024, "--cq-mod must be 1 .. 1024")
    need(1 <= o.outs <= 255, "--outs must be 1 .. 255")
    need(1 <= o.qp_timeout <= 31, "--qp-timeout must be 1 .. 31 (0, wait forever, would "
         "hang a run on its first lost last packet)")
    need(o.transport == "roce" or "qp_timeout" not in o.explicit,
         "--qp-timeout is a RoCEv2 QP attribute (UET's timer is its RTO)")
    need(0 < o.port < 65536, f"--port must be 1 .. 65535, got {o.port}")
    need(o.timeout > 0, "--timeout must be positive")
    need(o.min_bw is None or o.min_bw >= 0, "--min-bw must be >= 0")
    need(o.min_bw is None or o.test.is_bw, "--min-bw checks bandwidth: BW tests only")
    need(o.plot is None or o.test.is_bw, "--plot draws bandwidth: BW tests only")
    need(0 <= o.ping_count <= 10000, "--ping-count must be 0 .. 10000")
    need(o.transport in TRANSPORTS, f"--transport must be one of {', '.join(TRANSPORTS)}")
    need(o.transport != "uet" or o.mtu is None,
         "--mtu sets a RoCE path MTU; UET's payload per packet is the NIC's (from the link MTU)")
    need(o.gid_index is None or o.gid_index >= 0, "--gid-index must be >= 0")
    if o.oob == "perftest":
        need(o.test.name in PERFTEST_TESTS, f"--oob perftest runs {', '.join(PERFTEST_TESTS)} "
             f"(got {o.test.name})")
        need(o.transport == "roce", "--oob perftest is RoCEv2 (perftest has no UET)")
        need(o.start_at is None, "--oob perftest: --start-at is emu's own (perftest has no "
             "fabric clock)")
        need(o.duration is None or (o.test.is_bw and o.test.verb != "send"),
             f"--oob perftest: {o.test.name} with --duration is not done yet (use -n)")
    if o.orchestrated:
        need(o.src is not None and o.dst is not None, "give both --from and --to")
        _split_cluster(o)
        need(o.server is None, "--from/--to find the server's address themselves: drop ADDR")
        need(o.src != o.dst, "--from and --to must be different hosts")
    else:
        need(o.cluster is None, "--cluster goes with --from/--to")
    if o.server is None and not o.orchestrated:
        client_only = sorted({"min_bw", "plot"} & o.explicit)
        if client_only:
            raise UsageError(f"--{client_only[0].replace('_', '-')} is a client option "
                             "(give the server's ADDR)")


def client_argv(o: Options, server: str) -> list[str]:
    """The client's command line (after ``emu perf``) for ``o``, talking to ``server``."""
    argv = [o.test.name, server, "-s", str(o.size), "-n", str(o.iters), "-q", str(o.qps),
            "-t", str(o.tx_depth), "-r", str(o.rx_depth), "-Q", str(o.cq_mod),
            "-o", str(o.outs), "-p", str(o.port), "--timeout", f"{o.timeout:g}"]
    if o.qp_timeout != PERFTEST_QP_TIMEOUT:
        argv += ["-u", str(o.qp_timeout)]
    if o.all_sizes:
        argv.append("-a")
    if o.duration is not None:
        argv += ["-D", f"{o.duration:g}"]
    if o.start_at is not None:
        argv += ["--start-at", repr(o.start_at)]
    if o.mtu is not None:
        argv += ["-m", str(o.mtu)]
    for flag, on in (("--report_gbits", o.report_gbits), ("--json", o.json),
                     ("--no-verify", not o.verify), ("--noPeak", o.no_peak)):
        if on:
            argv.append(flag)
    if o.min_bw is not None:
        argv += ["--min-bw", f"{o.min_bw:g}"]
    if o.plot is not None:
        argv += ["--plot", o.plot]
    if o.transport != "roce":
        argv += ["--transport", o.transport]
    if o.ping_count != 50:
        argv += ["--ping-count", str(o.ping_count)]
    return argv + _perftest_argv(o)


def _perftest_argv(o: Options) -> list[str]:
    argv = ["--oob", "perftest"] if o.oob == "perftest" else []
    if o.gid_index is not None:
        argv += ["-x", str(o.gid_index)]
    return argv


def server_argv(o: Options) -> list[str]:
    """The server's command line: it learns the test parameters from the client — but
    perftest's side channel carries none, so there the server gets them too."""
    if o.oob == "perftest":
        argv = [a for a in client_argv(o, "") if a not in ("", "--json")]
        for client_only in ("--min-bw", "--plot"):
            if client_only in argv:
                i = argv.index(client_only)
                del argv[i:i + 2]
        return argv
    return [o.test.name, "-p", str(o.port), "--timeout", f"{o.timeout:g}"]

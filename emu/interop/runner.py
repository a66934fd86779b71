# SPDX-License-Identifier: GPL-2.0-only
"""The interop runner: every server × client pair, every transport and test case.

Why it is built this way: bring-up is what costs on a small machine, so each
pair gets **one** cluster per network it needs (:mod:`emu.interop.networks`:
the ``pair`` topology — client ``h1``, server ``h2``, one cable — for most
cases, a one-switch topology each for ``reordering`` and ``trimming``),
brought up when its first case comes and reused for all its transports and
cases until the pair is done; the runner starts
``emu nicd`` only on hosts whose implementation uses emu's daemon
(``daemon = "emu"``) and with ``--trace``, so each case's slice of the trace
can be kept. Per case it lays out the files, applies the case's impairment
with ``emu impair`` (nftables), captures the network's links with
:func:`emu.fabric.capture.capture`, starts both commands in their hosts,
waits, and judges with the case's ``check()``. Everything it leaves is under
``<log-dir>/<server>_<client>/<transport>/<case>/`` (``docs/interop.md`` §6).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from emu.interop import contract as C
from emu.interop import networks, wirecheck
from emu.interop.impls import Impl
from emu.interop.result import CaseResult, RunResult
from emu.interop.testcases import TestCase

SERVER_HOST, CLIENT_HOST = "h2", "h1"
SERVER_ADDR, CLIENT_ADDR = "10.0.1.12", "10.0.1.11"
#: the same ports' IPv6 addresses (``--ip 6``: LOCAL/PEER and the daemons' ``--family 6``)
ADDRS = {4: (SERVER_ADDR, CLIENT_ADDR), 6: ("fd00:0:1::12", "fd00:0:1::11")}
LINK = "h1-h2"
#: the runner's own nft table on the client's egress while a case impairs the cable
COUNT_TABLE = "emu_interop_count"


def _emu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emu", *args], capture_output=True, text=True)


class Cluster:
    """One network's cluster for one server × client pair, with emu nicd where wanted."""

    def __init__(self, name: str, emu_hosts: list[str], progress: Callable[[str], None],
                 network: networks.Network = networks.PAIR, directory: str = ".",
                 family: int = 4, pmtu: int = 4096, rate: str | None = None,
                 trimmed_dscp: int | None = None) -> None:
        from emu.cluster import cluster
        from emu.topology import load

        self.name = name
        self.network = network
        self.topology = load(network.topology_file(directory, name, rate, trimmed_dscp),
                             name=name)
        #: the DSCPs this network's switch writes on trimmed packets (the checks count them)
        self.trimmed_dscps = (wirecheck.TRIMMED_DSCPS if trimmed_dscp is None
                              or network is not networks.TRIMMING else (trimmed_dscp,))
        self.emu_hosts = emu_hosts
        self.family, self.pmtu = family, pmtu
        self.server_addr, self.client_addr = ADDRS[family]
        self.fabric = cluster.up(self.topology, name, daemons=False, progress=lambda s: None)
        try:
            self.traces = {h: cluster.trace_path(name, h) for h in emu_hosts}
            self.logs = {h: os.path.join(os.path.dirname(self.traces[h]),
                                         f"{name}.nicd-{h}.log") for h in emu_hosts}
            # the NIC daemons' arguments from the plan ``up`` kept (as emu up's own), with
            # the runner's address family and path MTU for the matrix
            plan = cluster.plan_of(name)
            extra = (*(("--family", "6") if family == 6 else ()),
                     *(("--engine-opt", f"roce.default_pmtu={pmtu}") if pmtu != 4096
                       else ()))
            self.args = {h: (*plan.nics[h].args, *extra) for h in emu_hosts}
            self.start_daemons()
        except BaseException:
            self.down()
            raise
        progress(f"cluster {name} ({network.name}) up (emu nicd on "
                 f"{', '.join(emu_hosts) or 'no host'}; time scale 1: real time, as "
                 "implementations with their own clocks need)")

    def start_daemons(self) -> None:
        from emu.cluster import cluster

        if self.emu_hosts:
            cluster.start_nic_daemons(self.name, self.args, trace=True)

    def restart_daemons(self) -> None:
        """Fresh ``emu nicd``s for the next case: a daemon that outlives the case keeps
        its PDCs and QPs, and a peer whose own daemon restarted would meet stale ones
        (every case starts from power-on, as a container per test would)."""
        from emu.fabric import state

        if not self.emu_hosts:
            return
        with state.locked():
            st = state.load(self.name)
            assert st is not None
            mine = [p for p in st["pids"] if str(p.get("what", "")).startswith("nicd ")]
            st["pids"] = [p for p in st["pids"] if p not in mine]
            state.save(st)
        for p in mine:
            if state.alive(p["pid"], p["start"]):
                os.kill(p["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in mine:  # our children: reap them, or they linger as zombies
            while time.monotonic() < deadline:
                try:
                    if os.waitpid(p["pid"], os.WNOHANG)[0]:
                        break
                except ChildProcessError:  # not ours (another runner process): poll
                    if not state.alive(p["pid"], p["start"]):
                        break
                time.sleep(0.01)
            else:
                os.kill(p["pid"], signal.SIGKILL)
                try:
                    os.waitpid(p["pid"], 0)
                except ChildProcessError:
                    pass
        self.start_daemons()

    def offsets(self) -> dict[str, tuple[int, int]]:
        """Where each daemon's trace and log end now (a case keeps what follows)."""
        def size(p: str) -> int:
            try:
                return os.path.getsize(p)
            except OSError:
                return 0
        return {h: (size(self.traces[h]), size(self.logs[h])) for h in self.traces}

    def keep(self, since: dict[str, tuple[int, int]], out_dir: str) -> None:
        for h, (t0, l0) in since.items():
            for src, off, dst in ((self.traces[h], t0, f"nicd-{h}.trace.jsonl"),
                                  (self.logs[h], l0, f"nicd-{h}.log")):
                try:
                    with open(src, "rb") as f, open(os.path.join(out_dir, dst), "wb") as g:
                        f.seek(off)
                        shutil.copyfileobj(f, g)
                except OSError:
                    pass

    def impair(self, args: tuple[str, ...]) -> None:
        """``emu impair`` the cable, and count transport packets on the client's egress
        before and after the impairment's rules (:data:`COUNT_TABLE`): the difference is
        what the link dropped client → server — a 2 % loss of ~120 requests drops none
        one time in eleven, and then no retransmission is owed."""
        from emu.fabric import linkctl

        self._count_ns = linkctl.ns_name(self.name, CLIENT_HOST)
        self._count_if = self.topology.link(LINK).end(CLIENT_HOST).ifname
        rules = "".join(
            f"  chain {chain} {{\n    type filter hook egress device \"{self._count_if}\" "
            f"priority {prio}; policy accept;\n    udp dport {{ 4791, 4793, 4971 }} counter\n  }}\n"
            for chain, prio in (("before", -10), ("after", 10)))
        linkctl.run_in_ns(self._count_ns, ["nft", "-f", "-"],
                          input=f"table netdev {COUNT_TABLE} {{\n{rules}}}\n")
        r = _emu("impair", LINK, *args, "--cluster", self.name)
        if r.returncode:
            raise RuntimeError(f"emu impair: {r.stderr.strip()}")

    def clear(self) -> int | None:
        """Remove the impairment and the counters; transport packets the link dropped
        client → server (None if the counters could not be read)."""
        from emu.fabric import linkctl

        _emu("impair", LINK, "--clear", "--cluster", self.name)
        counts: dict[str, int] = {}
        try:
            out = linkctl.run_in_ns(self._count_ns, ["nft", "-j", "list", "table", "netdev",
                                                     COUNT_TABLE]).stdout
            for obj in json.loads(out)["nftables"]:
                rule = obj.get("rule")
                if rule:
                    counts[rule["chain"]] = sum(e["counter"]["packets"] for e in rule["expr"]
                                                if "counter" in e)
        except (linkctl.LinkCtlError, ValueError, KeyError):
            pass
        finally:
            linkctl.run_in_ns(self._count_ns, ["nft", "delete", "table", "netdev", COUNT_TABLE],
                              check=False)
        if "before" in counts and "after" in counts:
            return counts["before"] - counts["after"]
        return None

    def nic_stats(self, out_dir: str) -> dict[str, dict]:
        """Each runner-started ``emu nicd``'s stats now, also kept as ``nicd-<host>.stats.json``."""
        from emu.nic.protocol import call_once, sock_path

        got = {}
        for h in self.emu_hosts:
            try:
                got[h] = call_once(sock_path(self.name, h), "stats")
            except Exception:  # noqa: BLE001 - counters are extra information, never a verdict
                continue
            with open(os.path.join(out_dir, f"nicd-{h}.stats.json"), "w") as f:
                json.dump(got[h], f, indent=1, default=str)
        return got

    def switch_port(self) -> dict[str, Any]:
        """Counters of the switch's port toward the server ({} without a switch)."""
        from emu.cluster import cluster

        if not self.network.switch:
            return {}
        try:
            reply = cluster.switch_request(self.name, self.network.switch, {"cmd": "counters"})
        except Exception:  # noqa: BLE001 - counters are extra information, never a verdict
            return {}
        return dict(reply.get("ports", {}).get(SERVER_HOST, {}))

    def down(self) -> None:
        from emu.cluster import cluster

        cluster.down(self.name)


class PairClusters:
    """One server × client pair's clusters, one per network, each brought up on first use."""

    def __init__(self, base: str, emu_hosts: list[str], progress: Callable[[str], None],
                 directory: str, family: int = 4, pmtu: int = 4096,
                 rate: str | None = None, trimmed_dscp: int | None = None) -> None:
        self.base, self.emu_hosts, self.progress = base, emu_hosts, progress
        self.directory, self.family, self.pmtu, self.rate = directory, family, pmtu, rate
        self.trimmed_dscp = trimmed_dscp
        self.up: dict[str, Cluster] = {}

    def get(self, net: str) -> Cluster:
        if net not in self.up:  # cluster name: base + the network's initial (p, r, t)
            self.up[net] = Cluster(f"{self.base}{net[0]}", self.emu_hosts, self.progress,
                                   networks.BY_NAME[net], self.directory,
                                   self.family, self.pmtu, self.rate, self.trimmed_dscp)
        return self.up[net]

    def down(self) -> None:
        """Every cluster down, also when one of them fails to go."""
        errors = []
        for cl in self.up.values():
            try:
                cl.down()
            except Exception as e:  # noqa: BLE001 - re-raised once the others are down
                errors.append(e)
        self.up.clear()
        if errors:
            raise errors[0]


class Capture:
    """Every link of the cluster into one pcapng, in a thread, while a case runs."""

    def __init__(self, cl: Cluster, path: str) -> None:
        from emu.fabric.capture import capture, targets_for

        self.stop = threading.Event()
        ready = threading.Event()
        self.error: str | None = None
        targets = [t for link in cl.network.capture
                   for t in targets_for(cl.topology, link, cl.name)]

        def run() -> None:
            try:
                capture(targets, path, stop=self.stop, on_ready=ready.set, handle_signals=False)
            except Exception as e:  # reported with the case, never raised into the runner
                self.error = f"capture failed: {e}"
                ready.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait(10)

    def close(self) -> None:
        time.sleep(0.05)  # the last frames of the case are already queued on the sockets
        self.stop.set()
        self.thread.join(30)


#: switch port counters worth a word in a case's ``wire`` summary
SWITCH_KEYS = ("enqueued", "marked", "trimmed", "dropped_tail", "dropped_trim",
               "dropped_random")


def _dup_counters(stats: dict, transport: str) -> int:
    """What a NIC daemon's engine counted as duplicates for ``transport`` (rx_duplicate…)."""
    t = stats.get("transports", {}).get(transport, {})
    return sum(int(v) for part in ("engine", "counters") for k, v in t.get(part, {}).items()
               if "dup" in k and isinstance(v, int | float) and not isinstance(v, bool))


def _spawn(impl: Impl, cluster: str, host: str, env: dict[str, str], log: str
           ) -> subprocess.Popen:
    # this interpreter's bin first: "python3" in a command is the one emu runs in
    path = os.pathsep.join((os.path.dirname(sys.executable), os.environ.get("PATH", "")))
    full = {**os.environ, "PATH": path, **impl.env, **env, "EMU_CLUSTER": cluster,
            "EMU_HOST": host}
    with open(log, "ab") as out:
        return subprocess.Popen(["ip", "netns", "exec", f"{cluster}-{host}", "/bin/sh", "-c",
                                 impl.command], cwd=impl.dir, env=full, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _tail(path: str, n: int = 300) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()[-n:]
    except OSError:
        return ""
    lines = [ln for ln in data.decode(errors="replace").strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def run_pair(cl: Cluster, server: Impl, client: Impl, transport: str, case_name: str,
             out_dir: str, timeout: float, port: int = C.EXCHANGE_PORT,
             case: TestCase | None = None) -> tuple[int | None, int | None, dict[str, str]]:
    """Start both sides of one case; their exit codes (None: killed at the timeout)."""
    dirs = {}
    for side in ("server", "client"):
        d = os.path.join(out_dir, side)
        os.makedirs(os.path.join(d, "data", "received"), exist_ok=True)
        os.makedirs(os.path.join(d, "log"), exist_ok=True)
        dirs[side] = d
    base = {"TRANSPORT": transport, "TESTCASE": case_name, "EXCHANGE_PORT": str(port),
            "TIMEOUT": f"{timeout:g}", "SERVER_PARAMS": server.server_params,
            "CLIENT_PARAMS": client.client_params, "PMTU": str(cl.pmtu)}
    procs = {
        "server": _spawn(server, cl.name, SERVER_HOST, {
            **base, "ROLE": "server", "LOCAL": cl.server_addr, "PEER": cl.client_addr,
            "DATA_DIR": os.path.join(dirs["server"], "data"),
            "LOGDIR": os.path.join(dirs["server"], "log")},
            os.path.join(dirs["server"], "output.txt")),
        "client": _spawn(client, cl.name, CLIENT_HOST, {
            **base, "ROLE": "client", "LOCAL": cl.client_addr, "PEER": cl.server_addr,
            "DATA_DIR": os.path.join(dirs["client"], "data"),
            "LOGDIR": os.path.join(dirs["client"], "log")},
            os.path.join(dirs["client"], "output.txt"))}
    codes: dict[str, int | None] = {"server": None, "client": None}
    deadline = time.monotonic() + timeout + 5
    while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
        # one side's 127 ends the case: the other would wait for a peer that never comes
        if any(p.poll() == C.EXIT_UNSUPPORTED for p in procs.values()):
            break
        time.sleep(0.05)
    for side, p in procs.items():
        if p.poll() is None:
            _stop(p)
            codes[side] = None
        else:
            codes[side] = p.returncode
    tails = {s: _tail(os.path.join(dirs[s], "output.txt")) for s in procs}
    return codes["server"], codes["client"], tails


def compliance(cl: Cluster, impl: Impl, host: str, out_dir: str, timeout: float
               ) -> str | None:
    """None if ``impl`` exits 127 for a random case name in both roles, else why not.

    Both roles run in ``host``, the host ``impl`` has in this pair: an implementation
    with its own daemon must not meet the runner's ``emu nicd`` in the other one."""
    name = f"compliance-{uuid.uuid4().hex[:6]}"
    problems = []
    me, other = ((cl.server_addr, cl.client_addr) if host == SERVER_HOST
                 else (cl.client_addr, cl.server_addr))
    for role, local, peer in (("server", me, other), ("client", me, other)):
        d = os.path.join(out_dir, f"compliance-{impl.name}", role)
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
        p = _spawn(impl, cl.name, host, {
            "ROLE": role, "TRANSPORT": impl.transports[0], "TESTCASE": name, "LOCAL": local,
            "PEER": peer, "DATA_DIR": os.path.join(d, "data"), "LOGDIR": d,
            "EXCHANGE_PORT": str(C.EXCHANGE_PORT), "TIMEOUT": f"{timeout:g}",
            "SERVER_PARAMS": "", "CLIENT_PARAMS": ""}, os.path.join(d, "output.txt"))
        try:
            code: int | None = p.wait(timeout)
        except subprocess.TimeoutExpired:
            _stop(p)
            code = None
        if code != C.EXIT_UNSUPPORTED:
            problems.append(f"{role} exited {code if code is not None else 'never'} for "
                            f"unknown test case {name!r} (must be 127)")
    return "; ".join(problems) or None


def judge(case: TestCase, s: int | None, c: int | None, tails: dict[str, str],
          wire: wirecheck.Wire) -> tuple[str, str]:
    """(result, reason) from the exit codes, the outputs and the capture."""
    if C.EXIT_UNSUPPORTED in (s, c):
        who = [n for n, x in (("server", s), ("client", c)) if x == C.EXIT_UNSUPPORTED]
        return "unsupported", f"{' and '.join(who)} do(es) not support it (127)"
    for side, code in (("server", s), ("client", c)):
        if code is None:
            return "failed", f"{side} still running at the timeout"
        if code != 0:
            return "failed", f"{side} exited {code}" + (f": {tails[side]}" if tails[side] else "")
    why = case.check(wire)
    return ("failed", why) if why else ("succeeded", "")


def run(servers: list[Impl], clients: list[Impl], transports: list[str],
        cases: list[type[TestCase]], log_dir: str, *, timeout: float = 120.0,
        prefix: str = "io", progress: Callable[[str], None] = print, family: int = 4,
        pmtu: int = 4096, rate: str | None = None, trimmed_dscp: int | None = None
        ) -> RunResult:
    """The whole matrix; clusters are always taken down, also on errors.

    ``trimmed_dscp``: what the ``trimming`` switch writes on trimmed packets in every
    pair; None: the server's :attr:`Impl.trimmed_dscp` (None there too: 30/31)."""
    res = RunResult(servers=[i.name for i in servers], clients=[i.name for i in clients],
                    transports=transports, cases=[c.name for c in cases], log_dir=log_dir)
    os.makedirs(log_dir, exist_ok=True)
    pairs = [(s, c) for s in servers for c in clients]
    compliant: dict[str, str | None] = {}
    total = len(pairs) * len(transports) * len(cases)
    done = 0
    for k, (srv, cli) in enumerate(pairs, 1):
        emu_hosts = [h for h, i in ((CLIENT_HOST, cli), (SERVER_HOST, srv)) if i.daemon == "emu"]
        pair_dir = os.path.join(log_dir, f"{srv.name}_{cli.name}")
        os.makedirs(pair_dir, exist_ok=True)
        dscp = trimmed_dscp if trimmed_dscp is not None else srv.trimmed_dscp
        clusters = PairClusters(f"{prefix}{os.getpid() % 1000}{k}", emu_hosts, progress,
                                pair_dir, family, pmtu, rate, dscp)
        try:
            for impl, host in ((srv, SERVER_HOST), (cli, CLIENT_HOST)):
                if impl.name not in compliant:
                    compliant[impl.name] = compliance(clusters.get(networks.PAIR.name), impl,
                                                      host, log_dir, min(timeout, 30))
                    if compliant[impl.name]:
                        progress(f"{impl.name}: not compliant: {compliant[impl.name]}")
            for tr in transports:
                for case_cls in cases:
                    done += 1
                    out = os.path.join(pair_dir, tr, case_cls.name)
                    r = _one(functools.partial(clusters.get, case_cls.network), srv, cli, tr,
                             case_cls, out, timeout, compliant)
                    res.add(r)
                    progress(f"[{done}/{total}] {srv.name} ← {cli.name} {tr} {case_cls.name}: "
                             f"{r.symbol} {r.reason} ({r.duration:.1f} s)")
        finally:
            clusters.down()
    res.end = time.time()
    return res


def _one(get_cluster: Callable[[], Cluster], srv: Impl, cli: Impl, tr: str,
         case_cls: type[TestCase], out: str, timeout: float, compliant: dict[str, str | None]
         ) -> CaseResult:
    r = CaseResult(srv.name, cli.name, tr, case_cls.name)
    t0 = time.monotonic()
    for impl in (srv, cli):
        if tr not in impl.transports:
            r.result, r.reason = "unsupported", f"{impl.name} does not offer {tr}"
            return r
        if compliant.get(impl.name):
            r.result, r.reason = "failed", f"{impl.name} not compliant: {compliant[impl.name]}"
            return r
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    case = case_cls(os.path.join(out, "server", "data"), os.path.join(out, "client", "data"))
    for side in ("server", "client"):
        os.makedirs(os.path.join(out, side, "data", "received"), exist_ok=True)
    case.prepare()
    cl = get_cluster()
    cl.restart_daemons()
    since = cl.offsets()
    port0 = cl.switch_port()
    pcap = os.path.join(out, "capture.pcapng")
    try:
        if case.impair:
            cl.impair(case.impair)
        cap = Capture(cl, pcap)
        try:
            start = time.monotonic()
            s, c, tails = run_pair(cl, srv, cli, tr, case.name, out, timeout, case=case)
            elapsed = time.monotonic() - start
        finally:
            cap.close()
        stats = cl.nic_stats(out)
    finally:
        dropped = cl.clear() if case.impair else None
    cl.keep(since, out)
    port = {k: v - port0.get(k, 0) for k, v in cl.switch_port().items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v != port0.get(k, 0)}
    wire = wirecheck.summarise(pcap, judge=cl.network.judge, ingress=cl.network.ingress,
                               trimmed_dscps=cl.trimmed_dscps,
                               ev_formats={cl.server_addr: wirecheck.EvSpec.parse(srv.mrc_ev),
                                           cl.client_addr: wirecheck.EvSpec.parse(cli.mrc_ev)})
    if cap.error:
        wire.error = cap.error
    if SERVER_HOST in stats:
        wire.server_duplicates = _dup_counters(stats[SERVER_HOST], tr)
    wire.link_dropped = dropped
    wirecheck.write_text(pcap, os.path.join(out, "dissect.txt"))
    r.result, r.reason = judge(case, s, c, tails, wire)
    if r.result == "failed":
        r.reason = f"{case.name}: {r.reason}"
    r.exit_codes = {"server": s, "client": c}
    r.wire = wire.describe()
    if port:  # what the switch did to this case's packets toward the server
        r.wire += "; switch port to server: " + ", ".join(
            f"{k} {v:g}" for k, v in sorted(port.items()) if k in SWITCH_KEYS)
    if r.result == "succeeded" and case.goodput_bytes and elapsed > 0:
        r.goodput_mbps = round(case.goodput_bytes * 8 / elapsed / 1e6, 2)
    r.duration = time.monotonic() - t0
    if r.result == "succeeded":  # what was checked equal need not stay (64 MiB cases)
        for side in ("server", "client"):
            shutil.rmtree(os.path.join(out, side, "data"), ignore_errors=True)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(r.to_dict(), f, indent=1)
    return r


def env_summary() -> dict[str, Any]:
    return {"python": sys.version.split()[0], "pid": os.getpid()}

# SPDX-License-Identifier: GPL-2.0-only
"""``emu doctor``: what this machine sustains, and whether a topology's rates fit it.

``emu doctor [TOPOLOGY] [--set K=V …] [--json]`` shows the per-packet costs in
force (measured here, or the reference VM's) and, for a topology file, each
host port's line rate, the highest rate one flow over its longest path can
run at without overloading the emulator, and the ``--set`` that fits.

``emu doctor --measure`` measures the costs on this machine, with the
README's own commands on throw-away clusters (names ``dr<pid>…``, removed
afterwards, also on failure):

1. a pair, ports at 10 Gb/s so the daemons are the limit: ``emu perf
   write-bw`` over RoCEv2 and UET for ``--seconds`` each; each daemon's CPU
   time (user + kernel, ``/proc/<pid>/stat``) per data packet is the NIC
   cost, sending and receiving;
2. the pair again: ``write-lat`` (2 B) against the kernel's ping round trip
   of the same cable — the round trip the two NIC daemons add;
3. a leaf-spine with the switch pipeline at a rate it surely sustains
   (50 Mb/s per port): write-bw h1 → h4, each switch daemon's CPU per packet
   it handled, and write-lat again: the extra round trip over the pair's,
   per switch pass, is a switch daemon's turnaround;
4. a kernel-datapath hop, where it costs most — ports paced by their tbf, as at
   any rate this machine proposes (:data:`KERNEL_PROBE_RATE`): write-bw over
   the pair and over the leaf-spine with the kernel datapath, both at that rate;
   the whole machine's busy CPU (``/proc/stat``: every process and the
   softirq work wherever it ran, not the hypervisor's steal) per packet,
   leaf-spine over pair, divided by the switches on the path — both clusters
   up at once, windows alternating for :data:`KERNEL_PROBE_ROUNDS` rounds, the
   median of the rounds' differences (:func:`_kernel_hop`). Why not the end
   daemons' CPU at 10 Gb/s (as before): a port that never waits dequeues
   inline in the sender's call, for ~2.5 µs a hop; a paced port dequeues on
   its qdisc's timer, in softirq on whichever CPU it fires, for ~4 times that
   — and the proposals made from the cheap figure (500 Mb/s on the
   leaf-spine) left the sending daemon at 0.9 of a core and UET at 0.82 of
   the line rate;
5. the idle machine's own stalls, :data:`STALL_PROBE_S` seconds of
   :mod:`emu.credible.stallwatch`: how often every CPU stopped at once (a
   hypervisor's doing), which no rate avoids — shown, not used in the proposal.

The result goes to :data:`emu.credible.capacity.COSTS_FILE`; ``emu up`` and
``emu doctor`` use it from then on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import emu.nic.topology  # noqa: F401 - registers the [nic] checker the loader asks for
import emu.switch.topology  # noqa: F401 - registers the [switch] checker
from emu.credible import capacity

NAMESPACES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "namespaces")


#: the port rate at which a kernel-datapath hop is measured (step 4): paced on every hop
KERNEL_PROBE_RATE = "200mbit"
#: rounds of the kernel-hop probe (step 4): each a pair window then a leaf-spine window
#: per transport, back to back; the hop is the median of the rounds' differences
KERNEL_PROBE_ROUNDS = 3
#: how long --measure watches the idle machine for stalls of every CPU at once
STALL_PROBE_S = 5.0


def _busy_window(cluster: str, transport: str, dst: str, seconds: float
                 ) -> tuple[float, int]:
    """``(machine busy CPU s, packets h1 sent)`` over ``seconds`` in the middle of a
    write-bw h1 → ``dst``: the window opens once data flows and closes before the
    transfer ends, so the perf processes' start-up and set-up are not in it."""
    from emu.credible import stallwatch
    from emu.credible.overload import snapshot

    def sent() -> int:
        return int(snapshot(cluster)["nic"]["h1"]["engines"][transport].get("tx_packets", 0))

    cmd = _perf_cmd(cluster, "write-bw", "h1", dst, "-s", "1M", "-D", f"{seconds + 3:g}",
                    "--transport", transport)
    pr = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        n0, deadline = sent(), time.monotonic() + 30
        while sent() - n0 < 100:  # data flows
            if pr.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(cmd[2:])}: no data flowed")
            time.sleep(0.05)
        time.sleep(0.5)
        n0, b0 = sent(), stallwatch.busy_seconds()
        time.sleep(seconds)
        n1, b1 = sent(), stallwatch.busy_seconds()
    finally:
        _, err = pr.communicate(timeout=120)
    if pr.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed: {err.strip()[-300:]}")
    return b1 - b0, n1 - n0


def _kernel_hop(pair: _Cluster, leaf_spine: _Cluster, seconds: float,
                say: Callable[[str], None]) -> float:
    """The machine's CPU per packet the leaf-spine's kernel-datapath switches add over the
    pair's cable, all its switch hops together (step 4), seconds.

    Both clusters stay up, and each round measures a window on the pair and then one
    on the leaf-spine for each transport, back to back; the figure is the larger
    transport's median over the rounds of those paired differences. Why: it is a
    difference of two figures of ~100 µs that move by tens of µs between minutes with
    the host's load; measured one cluster after the other, once each, it came out at
    0.5, 21, 26 and 27 µs in four runs, and the proposed rate flipped with it."""
    from statistics import median

    diffs: dict[str, list[float]] = {"roce": [], "uet": []}
    with pair as cq, leaf_spine as ck:
        for r in range(KERNEL_PROBE_ROUNDS):
            for transport, d in diffs.items():
                per = {}
                for what, cl, dst in (("pair", cq, "h2"), ("leaf-spine", ck, "h4")):
                    cpu, sent = _busy_window(cl, transport, dst, seconds)
                    per[what] = cpu / max(1, sent)
                d.append(per["leaf-spine"] - per["pair"])
                say(f"  round {r + 1} {transport}: the machine busy {per['pair'] * 1e6:.1f} us "
                    f"per packet on the pair, {per['leaf-spine'] * 1e6:.1f} on the leaf-spine")
    return max(0.0, max(median(d) for d in diffs.values()))


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def _perf_cmd(cluster: str, test: str, src: str, dst: str, *args: str) -> list[str]:
    """``emu perf TEST`` across a cluster as a user runs it, with ``--json``."""
    return [sys.executable, "-m", "emu", "perf", test, "--cluster", cluster, "--from", src,
            "--to", dst, "--json", *args]


def _perf(cluster: str, test: str, src: str, dst: str, *args: str) -> dict[str, Any]:
    cmd = _perf_cmd(cluster, test, src, dst, *args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


def _switch_pids(cluster: str) -> dict[str, int]:
    from emu.fabric import state

    st = state.load(cluster) or {}
    out = {}
    for rec in st.get("pids", []):
        what = str(rec.get("what", "")) if isinstance(rec, dict) else ""
        m = re.match(r"switchd? (\S+)", what)
        if m:
            out[m.group(1)] = int(rec["pid"])
    return out


class _Cluster:
    """A throw-away cluster, always torn down."""

    def __init__(self, path: str, name: str, sets: list[str], say: Callable[[str], None]):
        self.path, self.name, self.sets, self.say = path, name, sets, say

    def __enter__(self) -> str:
        from emu.cluster import cluster as C
        from emu.topology.loader import load

        C.up(load(self.path, self.sets), cluster=self.name, progress=lambda _m: None)
        return self.name

    def __exit__(self, *exc: object) -> None:
        from emu.cluster import cluster as C

        C.down(self.name)
        C.remove_logs(self.name)


def _lat_rtt_us(cluster: str, dst: str, n: int) -> tuple[float, float]:
    """(emu's write-lat round trip, the kernel's ping round trip) over h1 → ``dst``, µs:
    the latency tool measures both in one run (:mod:`emu.apps.perf.kernel_rtt`)."""
    from emu.apps.perf.kernel_rtt import emu_rtt_us

    doc = _perf(cluster, "write-lat", "h1", dst, "-n", str(n))
    row = doc["results"][0]
    if not doc.get("kernel_rtt"):
        raise RuntimeError(f"write-lat h1 → {dst}: no ping round trip "
                           f"({doc.get('kernel_rtt_error')})")
    return emu_rtt_us("write-lat", row["t_typical"]), doc["kernel_rtt"]["avg_us"]


def measure(seconds: float = 2.0, say: Callable[[str], None] = print) -> capacity.Costs:
    """Run the three measurements of the module docstring; returns the costs."""
    from emu.credible.overload import snapshot

    pid = os.getpid()
    tx_costs, rx_costs = [], []
    pair = os.path.join(NAMESPACES, "pair.toml")
    say(f"doctor: NIC daemons, pair at 10 Gb/s, write-bw {seconds:g} s per transport …")
    # real time: what is measured is the machine, at rates of the wall clock
    with _Cluster(pair, f"dr{pid}p", ["time.scale=1", "link.rate=10gbit"], say) as cl:
        for transport in ("roce", "uet"):
            before = snapshot(cl)["nic"]
            cpu0 = {h: _cpu_s(s["pid"]) for h, s in before.items()}
            _perf(cl, "write-bw", "h1", "h2", "-s", "1M", "-D", f"{seconds:g}",
                  "--transport", transport)
            after = snapshot(cl)["nic"]
            sent, got = (after[h]["engines"][transport].get(k, 0)
                         - before[h]["engines"][transport].get(k, 0)
                         for h, k in (("h1", "tx_packets"), ("h2", "rx_packets")))
            tx = (_cpu_s(after["h1"]["pid"]) - cpu0["h1"]) / max(1, sent)
            rx = (_cpu_s(after["h2"]["pid"]) - cpu0["h2"]) / max(1, got)
            say(f"  {transport}: {sent} packets; sender {tx * 1e6:.1f} us, receiver "
                f"{rx * 1e6:.1f} us of CPU per packet")
            tx_costs.append(tx)
            rx_costs.append(rx)
        say("doctor: the round trip NIC daemons add (write-lat vs ping) …")
        lat, ping = _lat_rtt_us(cl, "h2", 500)
        nic_turn = max(0.0, lat - ping) * 1e-6
        say(f"  ping {ping:.0f} us, write-lat round trip {lat:.0f} us: emu adds "
            f"{nic_turn * 1e6:.0f} us")
    ls = os.path.join(NAMESPACES, "leaf-spine.toml")
    say(f"doctor: switch daemons, leaf-spine with the pipeline at 50mbit, {seconds:g} s …")
    # the user-space datapath's cost (the kernel datapath's is kernel forwarding's)
    with _Cluster(ls, f"dr{pid}s", ["time.scale=1", "link.rate=50mbit",
                                    "switch.port.rate=50mbit", "switch.datapath=user"],
                  say) as cl:
        pids = _switch_pids(cl)

        def handled() -> dict[str, int]:
            sw = snapshot(cl)["switch"]
            return {n: int(sw.get(n, {}).get("switch", {}).get("received", 0)) for n in pids}

        n0, c0 = handled(), {n: _cpu_s(p) for n, p in pids.items()}
        _perf(cl, "write-bw", "h1", "h4", "-s", "1M", "-D", f"{seconds:g}")
        n1, c1 = handled(), {n: _cpu_s(p) for n, p in pids.items()}
        per = [(c1[n] - c0[n]) / (n1[n] - n0[n]) for n in pids if n1[n] - n0[n] > 100]
        sw = max(per) if per else capacity.REFERENCE.switch
        say(f"  {len(per)} switch daemon(s) on the path: up to {sw * 1e6:.1f} us of CPU per "
            "packet")
        lat_ls, ping_ls = _lat_rtt_us(cl, "h4", 300)
        # three switch passes each way; the kernel's own forwarding is in ping's figure
        sw_turn = max(0.0, (lat_ls - ping_ls) * 1e-6 - nic_turn) / 6
        say(f"  write-lat round trip {lat_ls:.0f} us (ping {ping_ls:.0f} us): "
            f"{sw_turn * 1e6:.0f} us per switch pass")
    say(f"doctor: a kernel-datapath switch hop, pair and leaf-spine at "
        f"{KERNEL_PROBE_RATE} (paced), {KERNEL_PROBE_ROUNDS} rounds of {seconds:g} s "
        "windows on each, alternating …")
    from emu.topology.loader import load

    hops = capacity.switches_on_path(load(ls, ["switch.datapath=kernel"]), "kernel")
    khop = _kernel_hop(
        _Cluster(pair, f"dr{pid}q", ["time.scale=1", f"link.rate={KERNEL_PROBE_RATE}"], say),
        _Cluster(ls, f"dr{pid}k", ["time.scale=1", f"link.rate={KERNEL_PROBE_RATE}",
                                   f"switch.port.rate={KERNEL_PROBE_RATE}",
                                   "switch.datapath=kernel"], say),
        seconds, say) / max(1, hops)
    say(f"  {hops} kernel switch hop(s): {khop * 1e6:.1f} us of CPU per packet per hop")
    from emu.credible import stallwatch

    say(f"doctor: this machine's own stalls (every CPU at once), {STALL_PROBE_S:g} s idle …")
    st = stallwatch.measure(STALL_PROBE_S)
    say(f"  {st['stalls_over_1ms']} stall(s) over 1 ms, longest {st['longest_s'] * 1e3:.1f} ms, "
        f"{st['stalled_s'] * 1e3:.1f} ms in all; the hypervisor's steal "
        f"{st['steal_s'] * 1e3:.0f} ms"
        f"{'' if st['real_time'] else ' (not real-time: the probe may have waited for a CPU)'}")
    cores = len(os.sched_getaffinity(0))
    return capacity.Costs(nic_tx=max(tx_costs), nic_rx=max(rx_costs), switch=sw,
                          nic_turnaround=nic_turn, switch_turnaround=sw_turn, cores=cores,
                          kernel_hop=khop, source="measured",
                          stalls_per_min=round(60 * st["stalls_over_1ms"] / st["seconds"], 1),
                          stall_longest=st["longest_s"])


def report(res: dict[str, Any], time: Any = None) -> list[str]:
    from emu.topology.units import format_rate

    lines = [] if time is None else [f"time scale {time.scale:g}: {time.why}"]
    lines.append(capacity.describe(res))
    for p in res["ports"]:
        lines.append(f"  {p['host']}:{p['ifname']:6} {format_rate(int(p['rate'])):>10}  "
                     f"({p['source']})")
    return lines


def costs_lines(c: capacity.Costs) -> list[str]:
    return [f"costs ({c.source}, {c.cores} cores): NIC daemon {c.nic_tx * 1e6:.1f} us per packet "
            f"sent, {c.nic_rx * 1e6:.1f} us received; switch daemon {c.switch * 1e6:.1f} us per "
            f"packet, a kernel-datapath switch {c.kernel_hop * 1e6:.1f} us; emu's own round "
            f"trip {c.nic_turnaround * 1e6:.0f} us + "
            f"{c.switch_turnaround * 1e6:.0f} us per switch pass"] + (
        [f"machine stalls (every CPU stopped at once; not emu's load): "
         f"{c.stalls_per_min:g} per minute over 1 ms, longest {c.stall_longest * 1e3:.1f} ms — "
         "a run they hit is marked NOT CREDIBLE (machine_stall) whatever its rates"]
        if c.source == "measured" and (c.stalls_per_min or c.stall_longest) else [])


#: the shipped topologies (every file in namespaces/, as shipped and with the switch
#: pipeline where that changes the answer) doctor answers for when given none: (label,
#: file, --set, the setting that carries a rate to every host port in real time). The
#: shipped files state their fabric (400 Gb/s links): the link's rate is every host port's
#: (emu.credible.rates.host_ports). tests/apps/test_doctor.py holds every file in
#: namespaces/ to a row here, and each knob to carrying its rate.
SHIPPED = (("pair", "pair.toml", (), "link.rate"),
           ("leaf-spine (switch pipeline, kernel datapath)", "leaf-spine.toml", (),
            "link.rate"),
           ("leaf-spine, kernel forwarding only", "leaf-spine.toml",
            ("switch.pipeline=false",), "link.rate"),
           ("leaf-spine, switch pipeline (user-space datapath)", "leaf-spine.toml",
            ("switch.datapath=user",), "link.rate"),
           ("rail-optimized", "rail-optimized.toml", (), "link.rate"),
           ("multi-plane", "multi-plane.toml", (), "link.rate"),
           ("two sites over 100 km", "two-sites.toml", (), "link.rate"))


def busy_with() -> list[str]:
    """The clusters up besides doctor's own (``dr<pid>…``): their daemons' load is in
    whatever --measure measures."""
    from emu.fabric import state

    return [c for c in state.clusters() if not c.startswith(f"dr{os.getpid()}")]


def _verdict(topo: Any, costs: capacity.Costs) -> dict[str, Any]:
    """The capacity verdict of ``topo`` as ``emu up`` would plan it (:func:`emu.plan.build`:
    the same derivation, so doctor and up never disagree; with the base round trip)."""
    from emu.plan import build

    res = build(topo, costs).credible
    return res or capacity.fit(topo, costs)  # no host, no NIC to plan for: the bare fit


def proposals(costs: capacity.Costs) -> list[dict[str, Any]]:
    """For each :data:`SHIPPED` topology: the time scale ``emu up`` will choose for it as
    written (``scale``, ``why``: :mod:`emu.plan.scale`) and, for a run in real time, what
    :func:`capacity.fit` proposes — the rate to give every port, the ceiling it was
    rounded down from, the ``--set`` to use it."""
    from emu.plan import build
    from emu.topology.loader import load
    from emu.topology.units import format_rate

    out = []
    for label, name, sets, knob in SHIPPED:
        path = os.path.join(NAMESPACES, name)
        if not os.path.exists(path):
            continue
        time = build(load(path, list(sets)), costs).time
        res = _verdict(load(path, [*sets, "time.scale=1"]), costs)
        rate = format_rate(int(res["proposed"]))
        out.append({"topology": f"namespaces/{name}", "label": label, "sets": list(sets),
                    "scale": time.scale, "why": time.why,
                    "proposed": res["proposed"], "max_rate": res["max_rate"],
                    "use": " ".join([f"--set {x}" for x in sets]),
                    "real_time": " ".join([f"--set {x}" for x in sets]
                                          + ["--set time.scale=1", f"--set {knob}={rate}"])})
    return out


def main(a: argparse.Namespace) -> int:
    from emu.topology.model import TopologyError

    out: dict[str, Any] = {}
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if a.json else print
    if a.measure:
        if os.geteuid() != 0:
            print("emu doctor --measure: needs root (it brings up clusters)", file=sys.stderr)
            return 2
        others = busy_with()
        if others:
            say(f"doctor: warning: {len(others)} other cluster(s) up ({', '.join(others)}): "
                "their daemons share this machine's CPUs, so the costs come out higher and "
                "noisier than on an idle machine — emu down them for a clean measurement")
        c = measure(a.seconds, say)
        capacity.save(c, {"measured_with": "emu doctor --measure", "other_clusters": others})
        say(f"saved to {capacity.COSTS_FILE}")
    costs = capacity.load()
    out["costs"] = costs.to_dict()
    for line in costs_lines(costs):
        say(line)
    if not a.topology:
        out["proposals"] = proposals(costs)
        say("time scale per shipped fabric as written (scale = \"auto\", the default: the "
            "smallest at which this machine keeps up and emu's own round trip is <= 5 % of "
            "the fabric's; emu up --dry-run says why):")
        for p in out["proposals"]:
            say(f"  {p['label']:50} {p['scale']:>8g}  (one fabric ms = "
                f"{p['scale'] / 1000:.3g} s of wall time): emu up {p['topology']}"
                + (f" {p['use']}" if p["use"] else ""))
        say("or in real time, at per-port rates this machine keeps up with (keep to rates "
            "whose runs show 0 overload):")
        for p in out["proposals"]:
            say(f"  {p['label']:50} {capacity.show_rate(p['proposed']):>10}  (ceiling "
                f"{capacity.show_rate(p['max_rate'])}): emu up {p['topology']} "
                f"{p['real_time']}")
    if a.topology:
        from emu.topology.loader import load

        try:
            topo = load(a.topology, a.set)
        except (TopologyError, OSError) as e:
            print(f"emu doctor: {e}", file=sys.stderr)
            return 2
        from emu.plan import build

        plan = build(topo, costs)
        res = plan.credible or capacity.fit(topo, costs)
        out["topology"] = res
        out["time"] = {"scale": plan.time.scale, "why": plan.time.why}
        for line in report(res, plan.time):
            say(line)
    if a.json:
        print(json.dumps(out, indent=1))
    return 0 if not a.topology or out["topology"]["fits"] else 1


def add_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="what time scale (or, in real time, what rates) this "
                                      "machine emulates credibly (--measure to measure it)")
    p.add_argument("topology", nargs="?", help="a topology file: do its rates fit?")
    p.add_argument("--set", "-s", action="append", default=[], metavar="K=V",
                   help="override a topology setting, as emu up does")
    p.add_argument("--measure", action="store_true",
                   help="measure this machine (~2 minutes; brings up throw-away clusters)")
    p.add_argument("--seconds", type=float, default=2.0, help="per measured transfer")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=main)

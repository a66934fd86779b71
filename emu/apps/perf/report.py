# SPDX-License-Identifier: GPL-2.0-only
"""perftest's output: the banner, the address lines, the result tables, and ``--json``.

The strings are perftest's (``perftest_parameters.h``: ``RESULT_LINE``,
``RESULT_FMT_G``, ``REPORT_FMT``, ``RESULT_FMT_LAT``, ``REPORT_FMT_LAT``;
``perftest_communication.h``: ``BASIC_ADDR_FMT``, ``RDMA_FMT``,
``PERF_GID_FMT``), so scripts that parse perftest's output parse ours. The
lines that describe hardware emu does not have (PCIe relaxed ordering,
``ibv_wr*`` API) are left out.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from collections.abc import Sequence
from typing import Any

from emu.apps.perf.kernel_rtt import PathRtt, added_rtt_us, emu_rtt_us
from emu.apps.perf.options import Test
from emu.apps.perf.stats import BwResult, LatResult, bw_unit

RESULT_LINE = "-" * 87
RESULT_FMT = " #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]"
RESULT_FMT_LAT = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
                  "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
REPORT_FMT = " %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f"
REPORT_FMT_EXT = " %-7d    %d           %-7.6f            %-7.6f            %-7.6f"
REPORT_FMT_LAT = (" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f"
                  "\t\t%-7.2f \t\t%-7.2f")


def c_hex(value: int, width: int) -> str:
    """C's ``%#0<width>x``: ``0x`` counts in the width, and zero gets no ``0x``."""
    if value == 0:
        return "0" * width
    return "0x" + format(value, "x").zfill(width - 2)


def gid_line(gid: str, label: str = "GID") -> str:
    """perftest's ``PERF_GID_FMT``: the 16 GID bytes in *decimal*, two digits each."""
    try:
        raw = ipaddress.IPv6Address(gid).packed
    except ValueError:
        raw = ipaddress.IPv6Address("::ffff:" + gid).packed
    return f" {label}: " + ":".join(f"{b:02d}" for b in raw)


def address_line(side: str, info: dict[str, Any], verb: str, outs: int) -> str:
    """``BASIC_ADDR_FMT`` plus ``READ_FMT`` (reads) and ``RDMA_FMT`` (reads, writes)."""
    line = (f" {side} address: LID {c_hex(0, 4)} QPN {c_hex(int(info['qpn']), 6)} "
            f"PSN {c_hex(int(info['psn']), 6)}")
    if verb == "read":
        line += f" OUT {c_hex(outs, 4)}"
    if verb in ("read", "write"):
        line += f" RKey {c_hex(int(info['rkey']), 8)} VAddr {c_hex(int(info['va']), 16)}"
    return line


#: per transport, what the banner and ``--json`` call it: (transport type, connection
#: type). RoCEv2 as perftest prints an RC QP; UET as the PDC its endpoints use (RUD)
KINDS = {"roce": ("IB", "RC"), "uet": ("UET", "RUD")}


def kind(transport: str) -> tuple[str, str]:
    """(transport type, connection type) of ``transport``; an unknown one as itself."""
    return KINDS.get(transport, (transport.upper(), "?"))


def banner(test: Test, *, role: str, device: str, qps: int, mtu: int, tx_depth: int,
           rx_depth: int, cq_mod: int, outs: int, gid_index: int | None,
           transport: str = "roce") -> list[str]:
    """``ctx_print_test_info``: the box perftest prints before it connects."""
    ttype, conn = kind(transport)
    lines = [RESULT_LINE, " " * 20 + test.banner,
             f" Dual-port       : OFF\t\tDevice         : {device}",
             f" Number of qps   : {qps}\t\tTransport type : {ttype}",
             f" Connection type : {conn}\t\tUsing SRQ      : OFF"]
    if role == "client":
        lines.append(f" TX depth        : {tx_depth}")
    if test.verb == "send" and role == "server":
        lines.append(f" RX depth        : {rx_depth}")
    if test.is_bw:
        lines.append(f" CQ Moderation   : {cq_mod}")
    lines += [f" Mtu             : {mtu}[B]", " Link type       : Ethernet"]
    if gid_index is not None:
        lines.append(f" GID index       : {gid_index}")
    if test.verb == "read":
        lines.append(f" Outstand reads  : {outs}")
    else:
        lines.append(" Max inline data : 0[B]")
    lines += [" rdma_cm QPs\t : OFF", " Data ex. method : Ethernet", RESULT_LINE]
    return lines


def addresses(test: Test, local: Sequence[dict[str, Any]], remote: Sequence[dict[str, Any]],
              outs: int) -> list[str]:
    """Every local QP's line and GID, then every remote one's, then a rule."""
    lines = []
    for side, infos in (("local", local), ("remote", remote)):
        for info in infos:
            lines.append(address_line(side, info, test.verb, outs))
            if info.get("gid"):
                lines.append(gid_line(str(info["gid"])))
    return lines + [RESULT_LINE]


def header(test: Test, gbits: bool) -> str:
    return RESULT_FMT.format(u=bw_unit(gbits)[0]) if test.is_bw else RESULT_FMT_LAT


def bw_row(r: BwResult, gbits: bool) -> str:
    """``REPORT_FMT``; ``REPORT_FMT_EXT`` (more digits) below 0.1 Gb/s, as perftest."""
    fmt = REPORT_FMT_EXT if gbits and r.bw_average < 0.1 else REPORT_FMT
    return fmt % (r.size, r.iterations, r.bw_peak, r.bw_average, r.msg_rate)


def lat_row(r: LatResult) -> str:
    return REPORT_FMT_LAT % (r.size, r.iterations, r.t_min, r.t_max, r.t_typical, r.t_avg,
                             r.t_stdev, r.p99, r.p99_9)


def row(r: BwResult | LatResult, gbits: bool) -> str:
    return bw_row(r, gbits) if isinstance(r, BwResult) else lat_row(r)


def time_line(scale: float) -> str:
    """Beside the result tables of a dilated run: their figures are fabric time."""
    return (f" time scale {scale:g}: Gb/s and usec above are fabric time (one fabric ms cost "
            f"{scale:g} ms of wall time; wall figures = fabric Gb/s / {scale:g}, usec x "
            f"{scale:g})")


def wall_figures(r: dict[str, Any], scale: float) -> dict[str, Any]:
    """A result's main figures in wall time, for ``--json`` beside the fabric ones (the
    kernel and a wall-clock reader saw these: fabric Gb/s / scale, fabric µs × scale)."""
    if "gbps_average" in r:
        return {k: r[k] / scale for k in ("bw_peak", "bw_average", "msg_rate", "gbps_average",
                                          "gbps_peak") if k in r} | {
            "seconds": r.get("seconds", 0.0) * scale}
    return {k: r[k] * scale for k in ("t_min", "t_max", "t_typical", "t_avg", "t_stdev",
                                      "p99", "p99_9") if k in r}


def rtt_lines(test: Test, results: Sequence[LatResult], ping: PathRtt | None,
              ping_error: str | None = None, scale: float = 1.0) -> list[str]:
    """Beside a latency table: the kernel's round trip over the same path and, per
    size, emu's round trip and what emu adds to the kernel's (emu's own time). The
    kernel's ping runs on the wall clock (emu cannot dilate it): dilated, emu's round
    trip is compared in wall time too (fabric × ``scale``)."""
    if ping is None:
        return [f" kernel RTT: not measured ({ping_error})"] if ping_error else []
    lines = [f" kernel RTT (ICMP echo, same path): avg {ping.avg_us:.2f} usec, min "
             f"{ping.min_us:.2f}, max {ping.max_us:.2f} ({ping.received}/{ping.sent} echoes "
             f"{ping.interval_s * 1e3:g} ms apart)"]
    for r in results:
        emu = emu_rtt_us(test.name, r.t_typical)
        if scale != 1:
            wall = emu * scale
            lines.append(f" {r.size} bytes: emu RTT {emu:.2f} usec fabric ({wall / 1e3:.3g} ms "
                         "of wall time); ping runs on the wall clock, with neither the "
                         "fabric's rates nor its delays: compare with the fabric's own round "
                         "trip (emu up --dry-run: base RTT)")
            continue
        lines.append(f" {r.size} bytes: emu RTT {emu:.2f} usec = {emu / ping.avg_us:.1f} x "
                     f"kernel RTT; added by emu {added_rtt_us(test.name, r.t_typical, ping):.2f}"
                     f" usec per round trip")
    return lines


def rtt_fields(test: Test, result: dict[str, Any], ping: PathRtt | None) -> dict[str, Any]:
    """A latency result's JSON with emu's round trip, the kernel's and their difference
    (None where the kernel's was not measured)."""
    emu = emu_rtt_us(test.name, float(result["t_typical"]))
    return {**result, "emu_rtt_us": emu,
            "kernel_rtt_us": ping.avg_us if ping else None,
            "added_rtt_us": emu - ping.avg_us if ping else None,
            "rtt_ratio": emu / ping.avg_us if ping else None}


def document(test: Test, *, role: str, params: dict[str, Any], device: str, mtu: int,
             local: Sequence[dict[str, Any]], remote: Sequence[dict[str, Any]],
             results: Sequence[BwResult | LatResult | dict[str, Any]], errors: Sequence[str],
             min_bw: float | None, kernel_rtt: PathRtt | None = None,
             kernel_rtt_error: str | None = None,
             time: dict[str, float] | None = None) -> dict[str, Any]:
    """The ``--json`` document (one per run, on stdout); a server's results are the
    client's (dicts, as they came over the side channel). Latency results carry
    ``emu_rtt_us``, ``kernel_rtt_us``, ``added_rtt_us`` and ``rtt_ratio``; the
    document the whole ping run as ``kernel_rtt`` (None when not measured, with
    ``kernel_rtt_error`` saying why if it failed). ``error`` is the first of ``errors``
    (None when the run passed), as in :func:`error_document`. ``time``: the fabric clock
    the figures were measured on (``scale``, ``epoch``): results are fabric time, each
    with ``wall`` beside it (:func:`wall_figures`)."""
    keys = ("qpn", "psn", "rkey", "va", "gid", "address")
    transport = str(params.get("transport", "roce"))
    rows = [r if isinstance(r, dict) else r.to_json() for r in results]
    if not test.is_bw:
        rows = [rtt_fields(test, r, kernel_rtt) for r in rows]
    scale = float((time or {}).get("scale", 1.0))
    rows = [{**r, "wall": wall_figures(r, scale)} for r in rows]
    return {
        "test": test.name, "title": test.banner, "role": role, "device": device,
        "transport": transport, "connection": kind(transport)[1], "mtu": mtu,
        "units": {"bw": bw_unit(bool(params.get("report_gbits")))[0], "latency": "usec",
                  "msg_rate": "Mpps", "time": "fabric"},
        "time": {"scale": scale, "epoch": float((time or {}).get("epoch", 0.0))},
        "params": params,
        "local": [{k: q.get(k) for k in keys if k in q} for q in local],
        "remote": [{k: q.get(k) for k in keys if k in q} for q in remote],
        "results": rows,
        "kernel_rtt": kernel_rtt.to_json() if kernel_rtt else None,
        "kernel_rtt_error": kernel_rtt_error,
        "min_bw_gbps": min_bw,
        "error": errors[0] if errors else None,
        "errors": list(errors),
        "passed": not errors,
    }


def error_document(test: str, message: str, code: int, role: str | None = None
                   ) -> dict[str, Any]:
    """``--json``'s document when no run took place (a bad flag, no such node, a NIC daemon
    not running, a server that failed before the client could report): the error itself,
    so whoever reads stdout gets one JSON document whatever went wrong — with the keys a
    run's document fails with (``error``, ``errors``, ``passed``) and the exit status."""
    return {"test": test, "role": role, "error": message, "errors": [message],
            "passed": False, "exit_status": code}


def print_error(test: str, message: str, code: int, *, json_out: bool, prefix: str = "emu perf",
                role: str | None = None) -> int:
    """A setup error as a person and a script each expect it: one line on stderr, and
    with ``--json`` also :func:`error_document` on stdout. Returns ``code``."""
    print(f"{prefix}: {message}", file=sys.stderr, flush=True)
    if json_out:
        print(json.dumps(error_document(test, message, code, role), indent=1), flush=True)
    return code


def plot(path: str, test: Test, results: Sequence[BwResult]) -> tuple[list[str], int]:
    """Bandwidth over time per message size (:mod:`emu.plot`: ``path``, and a PNG beside
    an SVG); returns the files written and the points drawn. An :class:`OSError`'s
    ``filename`` is the file that could not be written."""
    from emu.plot import line_chart

    series = {f"{r.size} B": r.series for r in results if r.series}
    files = line_chart(path, series, title=f"emu perf {test.name}: bandwidth over time",
                       xlabel="fabric seconds since the first message was posted",
                       ylabel="bandwidth (Gb/s)",
                       legend_title="message size")
    return files, sum(len(s) for s in series.values())

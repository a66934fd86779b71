# SPDX-License-Identifier: GPL-2.0-only
"""``emu interop run|list``: the runner's command line (``scripts/interop`` calls it)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from emu.errors import UserError
from emu.interop import contract as C
from emu.interop import impls as I
from emu.interop.result import RunResult
from emu.outpath import cannot_write, check_file, made_dir


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def add_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("interop", help="interop matrix of transport implementations",
                       description="Run test cases between transport implementations "
                                   "(docs/interop.md).")
    isub = p.add_subparsers(dest="interop_command", metavar="{run,list}", required=True)
    r = isub.add_parser("run", help="run the matrix")
    r.add_argument("--implementations", "-i", help="implementations TOML, added to the "
                   "ones emu ships (a name in both: the file's); without -s/-c the matrix "
                   "is the file's")
    r.add_argument("--transport", "-T", action="append",
                   help="roce, uet, mrc (repeatable or comma-separated; default: all three, "
                        "each pair running those both implementations declare)")
    r.add_argument("-t", "--test-cases", help="comma-separated test cases (default: all)")
    r.add_argument("-s", "--servers", help="comma-separated server implementations "
                   "(NAME or emu@REF; default: all in the file)")
    r.add_argument("-c", "--clients", help="comma-separated client implementations")
    r.add_argument("--json", help="write the results as JSON here")
    r.add_argument("--markdown", help="write the matrix as Markdown here")
    r.add_argument("--log-dir", default=None, help="logs, captures per pair and case "
                   "(default: ./logs/interop-<time>)")
    r.add_argument("--timeout", type=float, default=120.0, help="seconds per case and side")
    r.add_argument("--prefix", default="io", help="cluster name prefix (default io)")
    r.add_argument("--ip", type=int, choices=(4, 6), default=4,
                   help="the hosts' address family: LOCAL/PEER and the transports' "
                        "addresses (RoCEv2 GIDs) are IPv4 (default) or IPv6")
    r.add_argument("--pmtu", type=int, choices=(256, 512, 1024, 2048, 4096), default=4096,
                   help="RoCEv2 path MTU of every QP (PMTU in the environment; emu nicd's "
                        "roce.default_pmtu); default 4096")
    r.add_argument("--rate", help="every cable's rate (tc style, e.g. 100mbit) where the "
                   "network sets none; the NIC daemons pace to it (default: emu's line rate)")
    r.add_argument("--trimmed-dscp", type=int, metavar="DSCP",
                   help="the DSCP the trimming case's switch writes on trimmed packets, "
                        "for every pair (default: the server implementation's "
                        "trimmed_dscp, else the switch's 30/31)")
    r.set_defaults(func=_run)
    ls = isub.add_parser("list", help="registered implementations and what they support")
    ls.add_argument("--implementations", "-i")
    ls.set_defaults(func=_list)


def _split(values: list[str] | str | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [x.strip() for v in values for x in v.split(",") if x.strip()]


def _list(a: argparse.Namespace) -> int:
    from emu.interop import contract as C
    from emu.interop.testcases import ALL

    try:
        known = I.load(a.implementations)
    except I.ImplError as e:
        print(f"emu interop: {e}", file=sys.stderr)
        return 2
    print(f"{'name':16s} {'transports':12s} {'daemon':7s} command")
    for impl in known.values():
        print(f"{impl.name:16s} {','.join(impl.transports):12s} {impl.daemon:7s} {impl.command}"
              + ("" if impl.available else f"  (not available: no {impl.requires})"))
        if impl.description:
            print(f"{'':16s} {impl.description}")
    print(f"{'emu@REF':16s} {'as emu':12s} {'own':7s} emu at a git commit/tag/branch, built "
          f"in {I.CACHE}")
    print("\ntest cases the runner runs: " + ", ".join(c.name for c in ALL))
    print("contract cases (docs/interop.md): " + ", ".join(C.CASES))
    print("Which cases an implementation supports shows in a run (exit 127 = ?).")
    return 0


def _run(a: argparse.Namespace) -> int:
    from emu.interop import runner
    from emu.interop.testcases import select

    if os.geteuid() != 0:
        print("emu interop run: needs root (namespaces)", file=sys.stderr)
        return 2
    try:
        known = own = I.load(a.implementations)
        if a.implementations:
            # your file adds to the shipped ones (README: -i mine.toml -s mine -c emu);
            # the default matrix is still your file's
            known = {**I.load(), **own}
        cases = select(a.test_cases)
        present = [n for n, i in known.items() if i.available]
        named = set(_split(a.servers) + _split(a.clients))
        # what this matrix would have run, had it been there: the implementations named,
        # or the default matrix's; a diagnostic (stderr): stdout is the matrix
        for n in sorted((named or set(own)) & set(known) - set(present)):
            req = os.path.join(known[n].dir, known[n].requires or "")
            print(f"skipping {n}: {req} not found", file=sys.stderr)
        def usable(names: list[str]) -> list[str]:
            return [n for n in names if n in present or n not in known]
        default = [n for n in own if n in present]
        servers = I.resolve(usable(_split(a.servers)) or default, known)
        clients = I.resolve(usable(_split(a.clients)) or default, known)
    except (I.ImplError, ValueError) as e:
        print(f"emu interop: {e}", file=sys.stderr)
        return 2
    if a.trimmed_dscp is not None and not 0 <= a.trimmed_dscp < 64:
        print(f"emu interop: --trimmed-dscp {a.trimmed_dscp}: a DSCP is 0..63", file=sys.stderr)
        return 2
    transports = _split(a.transport) or list(C.TRANSPORTS)
    bad = [t for t in transports if t not in C.TRANSPORTS]
    if bad:
        print(f"emu interop: unknown transport(s) {bad}", file=sys.stderr)
        return 2
    # the outputs before the setup and the matrix (minutes): a path that cannot be
    # written is one line now, not a traceback once the matrix has run; a refusal
    # leaves no log directory behind
    with made_dir(a.log_dir or os.path.join("logs", time.strftime("interop-%Y%m%d-%H%M%S"))
                  ) as log_dir:
        for path in (a.json, a.markdown):  # after the log dir: they may be in it
            if path:
                check_file(path)
        for impl in {i.name: i for i in servers + clients}.values():
            if impl.setup:
                print(f"setup {impl.name}: {impl.setup}", flush=True)
                # this interpreter's bin first, as for the commands ("python3" is emu's)
                path = os.pathsep.join((os.path.dirname(sys.executable), os.environ["PATH"]))
                if subprocess.run(impl.setup, shell=True, cwd=impl.dir,
                                  env={**os.environ, "PATH": path}).returncode != 0:
                    raise UserError(f"setup of {impl.name} failed")
    # absolute: the implementations run in other working directories (a linux-rxe guest
    # gets $DATA_DIR and $LOGDIR through 9p at the same paths); a relative --log-dir
    # named nothing there
    log_dir = os.path.abspath(log_dir)
    # SIGTERM (a CI job's timeout, a user's kill) unwinds like ^C: the case's cluster,
    # daemons and guests are taken down by the runner's finally blocks, not left behind
    signal.signal(signal.SIGTERM, _terminate)
    res = runner.run(servers, clients, transports, cases, log_dir, timeout=a.timeout,
                     prefix=a.prefix, family=a.ip, pmtu=a.pmtu, rate=a.rate,
                     trimmed_dscp=a.trimmed_dscp,
                     progress=lambda s: print(s, flush=True))
    print()
    print(res.compact())
    fails = res.failures()
    if fails:
        print("\nfailures:")
        for r in fails:
            print(f"  {r.transport} {r.client} → {r.server}: {r.reason}")
    n = len(res.results)
    print(f"\n{n} result{'' if n == 1 else 's'} in {res.end - res.start:.0f} s; logs in {log_dir}")
    _write_results(res, a.json, a.markdown)
    return 1 if fails else 0


def _write_results(res: RunResult, json_path: str | None, markdown_path: str | None) -> None:
    """The result files; a write that fails although its path was checked before the run
    (a full disk) is one line (exit 2) — the matrix above is already printed."""
    def markdown(path: str) -> None:
        with open(path, "w") as f:
            f.write(res.markdown())

    for path, write in ((json_path, res.write_json), (markdown_path, markdown)):
        if path:
            try:
                write(path)
            except OSError as e:
                raise UserError(cannot_write(path, e)) from None

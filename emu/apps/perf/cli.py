# SPDX-License-Identifier: GPL-2.0-only
"""``emu perf``: registered by :func:`add_cli`; imports nothing heavy until it runs."""

from __future__ import annotations

import argparse

EPILOG = """\
examples:
  emu exec h2 -- emu perf write-bw                 # server (waits for one client)
  emu exec h1 -- emu perf write-bw 10.0.1.12       # client
  emu perf write-bw --from h1 --to h2 -s 1M -D 5 --report_gbits
  emu perf write-lat --from h1 --to h2 -n 1000 --json
  emu exec h1 -- emu perf write-bw 10.0.1.12 --oob perftest   # against ib_write_bw

exit status: 0 passed; 1 the test failed (data corruption, --min-bw missed, a
work completion error, the peer failed); 2 usage or setup error.
"""


def add_cli(sub: argparse._SubParsersAction) -> None:
    from emu.apps.perf.options import add_arguments

    p = sub.add_parser("perf", help="perftest-style bandwidth and latency tests: "
                                    "emu perf write-bw --from h1 --to h2",
                       description="perftest (ib_write_bw, ib_read_lat, …) over emu's NIC "
                                   "daemons: server without ADDR, client with it, or both "
                                   "across a running cluster with --from/--to.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=_main)


def _main(a: argparse.Namespace) -> int:
    from emu.apps.perf import EXIT_USAGE
    from emu.apps.perf.options import UsageError, from_args
    from emu.apps.perf.report import print_error
    from emu.apps.perf.run import main

    try:
        opts = from_args(a)
    except UsageError as e:  # with --json, a document too: stdout is always JSON then
        return print_error(a.test, str(e), EXIT_USAGE, json_out=bool(a.json))
    return main(opts)

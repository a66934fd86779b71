# SPDX-License-Identifier: GPL-2.0-only
"""The ``emu`` command line.

Subcommands register themselves from the module that owns them (``add_cli``),
so this file stays a table of contents. Errors users can cause (a missing
file, a file that is not a capture) print one line and exit 2; a traceback
means a bug in emu.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from emu import __version__
from emu.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="emu",
        description="Packet-level emulator of AI-fabric RDMA transports (RoCEv2, UET, MRC).",
    )
    parser.add_argument("--version", action="version", version=f"emu {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from emu.apps import doctor
    from emu.apps.perf import cli as perf_cli
    from emu.cluster import cli as cluster_cli
    from emu.cluster import switch_cli
    from emu.interop import cli as interop_cli
    from emu.nic import cli as nic_cli
    from emu.wire import dissect, sample, wireshark

    nic_cli.add_cli(sub)  # emu nicd (emu/nic)
    cluster_cli.add_cli(sub)  # emu up/down/status/exec/link/impair/clean/graph/capture
    switch_cli.add_cli(sub)  # emu switchd, emu switch
    perf_cli.add_cli(sub)  # emu perf (emu/apps/perf)
    dissect.add_cli(sub)
    sample.add_cli(sub)
    wireshark.add_cli(sub)
    doctor.add_cli(sub)
    interop_cli.add_cli(sub)  # emu interop (emu/interop)
    return parser


#: commands whose arguments belong to another module's own parser
PASS_THROUGH = {"switchd": "emu.switch.daemon"}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in PASS_THROUGH:
        import importlib

        return int(importlib.import_module(PASS_THROUGH[args_list[0]]).main(args_list[1:]) or 0)
    parser = build_parser()
    args = parser.parse_args(args_list)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"emu {args.command}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `emu dissect big.pcap | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

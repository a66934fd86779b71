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

#: which module registers each command (in ``emu -h`` order): a command's own module is
#: the only one ``emu CMD …`` imports, so ``emu status`` does not pay for scapy or trio
OWNERS: dict[str, tuple[str, ...]] = {
    "emu.nic.cli": ("nicd",),  # emu/nic
    "emu.cluster.cli": ("up", "down", "status", "exec", "link", "impair", "clean", "graph",
                        "capture"),
    "emu.cluster.switch_cli": ("switchd", "switch"),
    "emu.apps.perf.cli": ("perf",),
    "emu.wire.dissect": ("dissect",),
    "emu.wire.sample": ("sample",),
    "emu.wire.wireshark": ("wireshark",),
    "emu.apps.doctor": ("doctor",),
    "emu.apps.mrc": ("mrc",),
    "emu.apps.scenario.cli": ("run",),
    "emu.interop.cli": ("interop",),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with ``command``'s module only."""
    import importlib

    parser = argparse.ArgumentParser(
        prog="emu",
        description="Packet-level emulator of AI-fabric RDMA transports (RoCEv2, UET, MRC).",
    )
    parser.add_argument("--version", action="version", version=f"emu {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module, commands in OWNERS.items():
        if command is None or command in commands:
            importlib.import_module(module).add_cli(sub)
    return parser


#: commands whose arguments belong to another module's own parser
PASS_THROUGH = {"switchd": "emu.switch.daemon"}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in PASS_THROUGH:
        import importlib

        return int(importlib.import_module(PASS_THROUGH[args_list[0]]).main(args_list[1:]) or 0)
    first = args_list[0] if args_list else None
    known = first is not None and any(first in c for c in OWNERS.values())
    parser = build_parser(first if known else None)
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

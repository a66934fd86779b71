# SPDX-License-Identifier: GPL-2.0-only
"""Wireshark integration: the Lua dissectors emu ships, and where to put them.

emu ships three Lua scripts as package data in ``emu/wire/lua/``:

* ``uet.lua``  — Ultra Ethernet Transport (UDP 4793 and native IP), for
  Wireshark < 5.0; it steps aside when Wireshark has its own UET dissector.
* ``mrc.lua``  — OCP MRC on UDP 4791, handing RoCEv2 packets to Wireshark's
  InfiniBand (RRoCE) dissector.
* ``roce.lua`` — a post-dissector checking the ICRC of every RoCEv2/MRC packet
  and labelling CNPs.

Use them without installing (``tshark $(tshark_args) -r x.pcap``; what
``emu dissect`` and the tests do) or copy them into Wireshark's personal Lua
plugin folder with ``emu wireshark install``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

#: Load order matters only for readability: each script stands alone.
SCRIPTS = ("uet.lua", "mrc.lua", "roce.lua")


def lua_dir() -> Path:
    """The package folder holding the ``.lua`` files."""
    try:
        path = Path(str(resources.files("emu.wire").joinpath("lua")))
    except (ModuleNotFoundError, TypeError):
        path = Path(__file__).resolve().parent / "lua"
    return path


def lua_scripts() -> list[Path]:
    """The shipped Lua scripts, in load order (only those present)."""
    base = lua_dir()
    return [base / name for name in SCRIPTS if (base / name).is_file()]


def _tshark_folders(tshark: str | None = None) -> dict[str, str]:
    """``tshark -G folders`` as a dict, or {} when tshark is unavailable."""
    exe = tshark or shutil.which("tshark")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, "-G", "folders"], capture_output=True, text=True,
                             timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    folders = {}
    for line in out.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            folders[key.strip()] = value.strip()
    return folders


def personal_plugin_dir() -> Path:
    """Wireshark's personal Lua plugin folder.

    Asks tshark (``tshark -G folders``, "Personal Lua Plugins") when it is
    installed. Otherwise the default: Wireshark 2.6 and later (4.0 included)
    load personal Lua plugins from ``~/.local/lib/wireshark/plugins`` on Linux
    and macOS — not from ``$XDG_CONFIG_HOME/wireshark`` (that is the
    configuration folder) — and from ``%APPDATA%\\Wireshark\\plugins`` on Windows.
    """
    reported = _tshark_folders().get("Personal Lua Plugins")
    if reported:
        return Path(reported)
    if sys.platform == "win32" and os.environ.get("APPDATA"):
        return Path(os.environ["APPDATA"]) / "Wireshark" / "plugins"
    return Path.home() / ".local" / "lib" / "wireshark" / "plugins"


def install(dest: str | os.PathLike[str] | None = None) -> list[Path]:
    """Copy the Lua scripts into ``dest`` (default: the personal plugin folder).

    Returns the paths written. Existing copies are overwritten.
    """
    target = Path(dest) if dest is not None else personal_plugin_dir()
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for script in lua_scripts():
        out = target / script.name
        shutil.copyfile(script, out)
        written.append(out)
    return written


def tshark_args() -> list[str]:
    """``["-X", "lua_script:<file>", ...]`` loading every shipped script."""
    args: list[str] = []
    for script in lua_scripts():
        args += ["-X", f"lua_script:{script}"]
    return args


def tshark_version(tshark: str = "tshark") -> tuple[int, int, int] | None:
    """tshark's version as a tuple, or None when it cannot be run."""
    try:
        out = subprocess.run([tshark, "-v"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else None  # type: ignore[return-value]


# --------------------------------------------------------------------------- CLI


def _cmd_install(args: argparse.Namespace) -> int:
    written = install(args.dest)
    if not written:
        print(f"no Lua scripts found in {lua_dir()}", file=sys.stderr)
        return 1
    for path in written:
        print(f"installed {path}")
    return 0


def _cmd_path(args: argparse.Namespace) -> int:
    print(lua_dir())
    return 0


def add_cli(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``emu wireshark install [--dest DIR]``, ``emu wireshark path`` and ``… args``.

    Each leaf parser sets ``func`` (called with the parsed namespace, returns
    the exit status).
    """
    ws = subparsers.add_parser("wireshark", help="Wireshark Lua dissectors for UET, MRC, RoCEv2",
                               description="Wireshark Lua dissectors for UET, MRC and RoCEv2.")
    sub = ws.add_subparsers(dest="wireshark_command", required=True)
    inst = sub.add_parser("install", help="copy the Lua dissectors into Wireshark's plugin folder")
    inst.add_argument("--dest", metavar="DIR",
                      help="target folder (default: Wireshark's personal Lua plugin folder, "
                           "as `tshark -G folders` reports it)")
    inst.set_defaults(func=_cmd_install)
    path = sub.add_parser("path", help="print the folder holding the shipped Lua dissectors")
    path.set_defaults(func=_cmd_path)
    args = sub.add_parser("args", help="print tshark options that load the dissectors for one "
                                       "run: tshark $(emu wireshark args) -r FILE")
    args.set_defaults(func=_cmd_args)
    return ws


def _cmd_args(_args: argparse.Namespace) -> int:
    import shlex

    print(" ".join(shlex.quote(a) for a in tshark_args()))
    return 0

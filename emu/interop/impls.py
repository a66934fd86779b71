# SPDX-License-Identifier: GPL-2.0-only
"""Implementations: the TOML file that names them, and ``emu@REF`` builds.

An implementation is a command (contract §7). Why a build step for
``emu@REF``: version-against-version interop needs the *other commit's*
daemon and API, not today's API pointed at another daemon, so the runner
checks that commit out in its own git worktree with its own venv and runs its
``emu nicd`` as the implementation's own daemon. That commit predates the
endpoint, so the runner copies today's endpoint (which uses only the public
client API) into the worktree as untracked files.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from typing import Any

import emu

DEFAULT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "implementations.toml")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(emu.__file__)))
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "emu", "interop")
#: the files an ``emu@REF`` worktree gets from this tree (the endpoint and what it imports)
ENDPOINT_FILES = ("emu/interop/__init__.py", "emu/interop/contract.py",
                  "emu/interop/endpoint.py", "emu/interop/own_nicd.py")


class ImplError(Exception):
    """A bad implementations file or an ``emu@REF`` that cannot be built (one line)."""


@dataclass
class Impl:
    """One registered implementation."""

    name: str
    command: str
    transports: list[str]
    daemon: str = "emu"                 # "emu": the runner starts emu nicd; "own": it does
    setup: str | None = None
    dir: str = REPO
    env: dict[str, str] = field(default_factory=dict)
    server_params: str = ""
    client_params: str = ""
    description: str = ""
    requires: str | None = None         # a path (relative to dir) that must exist
    #: the DSCP this implementation takes as "a switch trimmed this packet" (None: emu's
    #: switch defaults, 30 and 31): the ``trimming`` network's switch writes it when this
    #: implementation is the server, the receiver of the trimmed packets
    trimmed_dscp: int | None = None
    #: where its MRC EVs ride: ``udp`` (the source port, the default), ``stev`` or
    #: ``stev:S+F[@BASE]`` (port and IPv6 flow label, that split): the wire check holds
    #: every EV echo its peer sends against it
    mrc_ev: str = "udp"

    @property
    def available(self) -> bool:
        return self.requires is None or os.path.exists(os.path.join(self.dir, self.requires))


def _impl(name: str, d: dict[str, Any], base: str, where: str) -> Impl:
    def need(key: str, typ: type) -> Any:
        if key not in d:
            raise ImplError(f"{where}: [{name}] has no {key!r}")
        if not isinstance(d[key], typ):
            raise ImplError(f"{where}: [{name}].{key} must be a {typ.__name__}")
        return d[key]

    command = need("command", str)
    transports = need("transports", list)
    if not transports or not all(isinstance(t, str) for t in transports):
        raise ImplError(f"{where}: [{name}].transports must list transport names")
    daemon = d.get("daemon", "emu")
    if daemon not in ("emu", "own"):
        raise ImplError(f"{where}: [{name}].daemon must be \"emu\" or \"own\", got {daemon!r}")
    unknown = set(d) - {"command", "transports", "daemon", "setup", "dir", "env",
                        "server_params", "client_params", "description", "requires",
                        "trimmed_dscp", "mrc_ev"}
    if unknown:
        raise ImplError(f"{where}: [{name}] has unknown key(s) {sorted(unknown)}")
    dscp = d.get("trimmed_dscp")
    if dscp is not None and (not isinstance(dscp, int) or isinstance(dscp, bool)
                             or not 0 <= dscp < 64):
        raise ImplError(f"{where}: [{name}].trimmed_dscp must be a DSCP (0..63)")
    from emu.interop.wirecheck import EvSpec

    mrc_ev = str(d.get("mrc_ev", "udp"))
    try:
        EvSpec.parse(mrc_ev)
    except ValueError as e:
        raise ImplError(f"{where}: [{name}].mrc_ev {mrc_ev!r}: udp, stev or stev:S+F[@BASE] "
                        f"({e})") from None
    env = {str(k): str(v) for k, v in dict(d.get("env", {})).items()}
    wd = os.path.normpath(os.path.join(base, str(d.get("dir", "."))))
    return Impl(name, command, list(transports), daemon, d.get("setup"), wd, env,
                str(d.get("server_params", "")), str(d.get("client_params", "")),
                str(d.get("description", "")), d.get("requires"), dscp, mrc_ev)


def load(path: str | None = None) -> dict[str, Impl]:
    """The implementations of a TOML file (default: the ones emu ships)."""
    path = path or DEFAULT_FILE
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ImplError(f"{path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ImplError(f"{path}: {e}") from None
    base = os.path.dirname(os.path.abspath(path))
    if path == DEFAULT_FILE:
        base = REPO
    out = {}
    for name, d in data.items():
        if not isinstance(d, dict):
            raise ImplError(f"{path}: {name} must be a table")
        out[name] = _impl(name, d, base, path)
    return out


def resolve(names: list[str], known: dict[str, Impl], progress: Any = print) -> list[Impl]:
    """The named implementations; ``emu@REF`` is built on demand."""
    out = []
    for n in names:
        if n in known:
            out.append(known[n])
        elif "@" in n and n.split("@", 1)[0] in known:
            out.append(build_ref(n, known[n.split("@", 1)[0]], progress))
        else:
            raise ImplError(f"unknown implementation {n!r}; known: {', '.join(known)} "
                            f"(or emu@REF)")
    return out


def _git(*args: str, cwd: str = REPO) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        raise ImplError(f"git {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout.strip()


def build_ref(name: str, base: Impl, progress: Any = print) -> Impl:
    """``emu@REF``: a worktree of REF with its own venv (reused when already built)."""
    ref = name.split("@", 1)[1]
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    tree = os.path.join(CACHE, commit[:12])
    py = os.path.join(tree, ".venv", "bin", "python")
    if not os.path.exists(os.path.join(tree, ".git")):
        os.makedirs(CACHE, exist_ok=True)
        progress(f"building {name} ({commit[:12]}) in {tree}")
        _git("worktree", "add", "--detach", tree, commit)
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                            os.path.join(tree, ".venv")], capture_output=True, text=True)
        if r.returncode:
            raise ImplError(f"{name}: venv: {r.stderr.strip()}")
        # the venv sees this interpreter's packages through a .pth file: the same
        # dependencies, but `emu` resolves to the worktree (first on sys.path)
        site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True).stdout.strip()
        deps = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig."
                               "get_paths()['purelib'])"], capture_output=True,
                              text=True).stdout.strip()
        with open(os.path.join(site, "emu_interop_ref.pth"), "w") as f:
            f.write(f"{tree}\n{deps}\n")
    for rel in ENDPOINT_FILES:
        src, dst = os.path.join(REPO, rel), os.path.join(tree, rel)
        if not os.path.exists(dst) or open(src, "rb").read() != open(dst, "rb").read():
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(src, "rb") as f, open(dst, "wb") as g:
                g.write(f.read())
    check = subprocess.run([py, "-c", "import emu, emu.interop.endpoint, emu.interop.own_nicd; "
                            "print(emu.__file__)"],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]},
                           cwd=tree)
    if check.returncode or not check.stdout.startswith(tree):
        raise ImplError(f"{name}: the built tree does not import: "
                        f"{(check.stderr or check.stdout).strip()[-300:]}")
    cmd = f"{shlex.quote(py)} -m emu.interop.own_nicd -- {shlex.quote(py)} -m emu.interop.endpoint"
    return Impl(name, cmd, list(base.transports), "own", None, tree, {},
                description=f"emu at {ref} ({commit[:12]}), its own nicd and API")

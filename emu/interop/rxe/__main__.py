# SPDX-License-Identifier: GPL-2.0-only
"""``python -m emu.interop.rxe``: build the linux-rxe guest, run commands in it, be an endpoint.

* ``build [--force]`` — build (or find) the cached image; prints where it is.
* ``accel`` — which QEMU accelerator the guest gets here (kvm or tcg) and why.
* ``run [--address A] [--mount DIR]… [--timeout S] [--counters FILE] -- COMMAND…`` — in
  the current network namespace: boot a guest on the port holding ``A`` (its MAC,
  addresses and routes; rxe0 on it), run COMMAND there with ``/bin/sh``, print its output
  and exit with its status. What ``ip netns exec NS python -m emu.interop.rxe run …`` is
  for: perftest or any verbs tool against a peer in another namespace.
* ``endpoint`` — the interop contract's command (``implementations.toml``: linux-rxe):
  unsupported cases exit 127 at once, without booting; supported ones boot a guest on
  ``$LOCAL`` and run ``guest_endpoint.py`` in it with the contract's environment.

Why one entry point for all three: they share the image, the accelerator choice and the
port take-over, and a user who points the runner at a real RDMA NIC runs the same
``guest_endpoint.py`` on the host instead (``docs/interop.md`` §9).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time

from emu.interop import contract as C
from emu.interop.rxe import image, vm

HERE = os.path.dirname(os.path.abspath(__file__))
#: what guest_endpoint.py runs per role (answered here, without booting a guest, for the
#: others): rxe as the receiver of trimmed packets NAKs them as invalid requests
SUPPORTED = {"server": set(C.CASES) - {"trimming"}, "client": set(C.CASES)}


def _term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)   # unwinds through Guest.stop: the port goes back


def _image() -> image.Image:
    img = image.find()
    if img is None:
        raise image.ImageError("no linux-rxe guest image for this recipe: run "
                               "`scripts/rxe-guest build` (about 2 minutes, needs the Debian "
                               "mirror)")
    return img


def run_in_guest(command: str, address: str | None, mounts: list[str], run_dir: str,
                 timeout: float, env: dict[str, str] | None = None,
                 files: dict[str, str] | None = None, counters: str | None = None,
                 quiet: bool = False) -> int:
    """Boot, run ``command``, print its output; its exit status (1 on a guest failure)."""
    img = _image()
    accel = vm.detect_accel(img, log=lambda s: print(s, flush=True))
    port = vm.Port.holding(address)
    g = vm.Guest(img, run_dir, port, command, env=env, mounts=mounts, accel=accel,
                 files=files, counters=counters)
    t0 = time.monotonic()
    status: int | None = None
    try:
        g.start()
        status = g.wait(timeout)
    except vm.GuestError as err:
        print(f"linux-rxe: {err}", file=sys.stderr)
    except SystemExit:
        print(f"linux-rxe: stopped by a signal after {time.monotonic() - t0:.1f} s (guest "
              f"up after {g.boot_seconds()} s); console {g.console}", file=sys.stderr,
              flush=True)
        raise
    finally:
        errors = g.stop()
    wall = time.monotonic() - t0
    try:
        with open(os.path.join(run_dir, "cmd.out"), errors="replace") as f:
            out = f.read()
    except OSError:
        out = ""
    if not quiet or status != 0:
        sys.stdout.write(out)
    boot = g.boot_seconds()
    print(f"linux-rxe: guest on {port.ifname} ({' '.join(port.addrs)}), {accel}, up after "
          f"{boot if boot is not None else '?'} s guest time, {wall:.1f} s in all; "
          f"console {g.console}", flush=True)
    for err in errors:
        print(f"linux-rxe: cleanup: {err}", file=sys.stderr)
    if status is None:
        print(f"linux-rxe: no exit status from the guest within {timeout:g} s", file=sys.stderr)
        return C.EXIT_FAILED
    if status != 0:  # the runner shows the last line: make it the endpoint's reason
        lines = [ln for ln in out.splitlines() if ln.strip()]
        print(lines[-1] if lines else f"linux-rxe: command exited {status}", file=sys.stderr)
    return status


def endpoint() -> int:
    try:
        env = C.Env.from_environ(dict(os.environ))
    except (KeyError, ValueError) as err:
        print(f"linux-rxe: {err}", file=sys.stderr)
        return C.EXIT_FAILED
    if env.transport != "roce" or env.testcase not in SUPPORTED[env.role]:
        print(f"linux-rxe: {env.transport}/{env.testcase} not supported", file=sys.stderr)
        return C.EXIT_UNSUPPORTED
    genv = {k: os.environ[k] for k in C.ENV_KEYS if k in os.environ}
    genv["PYTHONUNBUFFERED"] = "1"
    os.makedirs(env.log_dir, exist_ok=True)
    files = {"guest_endpoint.py": os.path.join(HERE, "guest_endpoint.py"),
             "contract.py": os.path.join(os.path.dirname(HERE), "contract.py")}
    mounts = sorted({os.path.abspath(env.data_dir), os.path.abspath(env.log_dir)})
    return run_in_guest("exec python3 /emu/guest_endpoint.py", env.local or None, mounts,
                        os.path.join(env.log_dir, "guest"), env.timeout + 30, env=genv,
                        files=files, counters=os.path.join(env.log_dir, "rxe-hw_counters.txt"))


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _term)
    p = argparse.ArgumentParser(prog="rxe-guest", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build or find the guest image")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    sub.add_parser("accel", help="which accelerator the guest gets here")
    r = sub.add_parser("run", help="boot a guest on this namespace's port and run a command")
    r.add_argument("--address", help="the port holding this address (default: the first "
                                     "with a global address)")
    r.add_argument("--mount", action="append", default=[],
                   help="a host directory shared at the same path in the guest")
    r.add_argument("--timeout", type=float, default=600)
    r.add_argument("--run-dir", help="the guest's /emu (default: a new directory in /tmp)")
    r.add_argument("--counters", help="write rxe0's hw_counters here (a shared path)")
    r.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("endpoint", help="the interop contract's command (environment as in "
                                    "docs/interop.md)")
    a = p.parse_args(argv)
    try:
        if a.cmd == "build":
            img = image.build(force=a.force)
            print(f"{img.dir}: kernel {img.info.get('kernel')}, "
                  f"{', '.join(img.info.get('packages', []))}")
            return 0
        if a.cmd == "accel":
            print(vm.detect_accel(_image()))
            return 0
        if a.cmd == "endpoint":
            return endpoint()
        cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not cmd:
            p.error("run: give a command after --")
        import tempfile

        run_dir = a.run_dir or tempfile.mkdtemp(prefix="rxe-guest-")
        return run_in_guest(" ".join(cmd) if len(cmd) == 1 else shlex.join(cmd), a.address,
                            [os.path.abspath(m) for m in a.mount], run_dir, a.timeout,
                            counters=a.counters)
    except (image.ImageError, vm.GuestError) as err:
        print(f"rxe-guest: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: GPL-2.0-only
"""Run an endpoint command with its own ``emu nicd`` (contract §2, ``daemon = "own"``).

``python -m emu.interop.own_nicd [--uet-setting K=V …] [--mrc-setting K=V …] [--mrc-port
N] [--trimmed-dscp N …] [--engine-opt T.K=V …] -- COMMAND …`` in a host: starts this
interpreter's ``emu nicd`` for ``$EMU_CLUSTER``/``$EMU_HOST`` on the standard ports,
waits until it is ready, runs COMMAND, stops the daemon and exits with COMMAND's status.
Why: ``emu@REF`` must run *that* commit's daemon, and the ``emu`` variants a daemon
whose wire settings differ — UET's (:func:`emu.wire.uet_defs.configure`), MRC's
(:func:`emu.wire.mrc_defs.configure`, e.g. ``m_field=ecn``), MRC's port, the DSCPs it
takes as "trimmed" (``emu nicd --trimmed-dscp``), an engine option (``--engine-opt
mrc.ev_format=stev``, the EV format and STEV split) — neither can share the runner's
daemon. A setting's value is JSON, or a bare word taken as a string. The daemon's log
and event trace go to ``$LOGDIR``.

Standard library only (besides the daemon it starts): the runner copies this file
into every ``emu@REF`` worktree (:data:`emu.interop.impls.ENDPOINT_FILES`), where
modules added to emu since REF do not exist.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

#: the daemon, with this tree's UDP_GRO rule applied to an ``emu@REF`` daemon older than it
#: (its ``emu.nic.udp`` has no ``feature``): such a daemon asks for UDP_GRO on every
#: cable, and the cables' receive ring (GRO on, :func:`emu.fabric.build.cable_offloads`)
#: then merges back-to-back datagrams into one skb for it — the capture records a
#: super-frame no wire carried and the runner counts its ICRC bad (``read`` with
#: ``emu@e75e242`` as client: ✕ in 6 of 6 runs). Without GRO it reads the same datagrams
#: one by one, as this tree's daemons do on cables without TX checksum offload (the
#: runner's clusters).
_DAEMON = ("import sys, json\n"
           "settings = json.loads(sys.argv[1])\n"
           "from emu.wire import uet_defs\n"
           "uet_defs.configure(**settings.get('uet', {}))\n"
           "if settings.get('mrc'):  # only then: an emu@REF tree may predate mrc_defs\n"
           "    from emu.wire import mrc_defs\n"
           "    mrc_defs.configure(**settings['mrc'])\n"
           "from emu.nic import udp\n"
           "if not hasattr(udp, 'feature'):\n"
           "    udp.UDP_GRO = 0xFFFF  # setsockopt fails (ENOPROTOOPT): the daemon goes without\n"
           "from emu.nic.daemon import main\n"
           "sys.exit(main(sys.argv[2:]))\n")


def main(argv: list[str] | None = None) -> int:
    import json

    args = list(sys.argv[1:] if argv is None else argv)
    settings: dict[str, dict[str, object]] = {"uet": {}, "mrc": {}}
    mrc_port: str | None = None
    dscps: list[str] = []
    opts: list[str] = []
    while args and args[0] in ("--uet-setting", "--mrc-setting", "--mrc-port",
                               "--trimmed-dscp", "--engine-opt") and len(args) > 1:
        if args[0] == "--mrc-port":
            mrc_port = str(int(args[1]))
        elif args[0] == "--trimmed-dscp":
            dscps.append(str(int(args[1])))
        elif args[0] == "--engine-opt":  # TRANSPORT.K=V, as emu nicd takes it
            opts.append(args[1])
        else:
            key, _, value = args[1].partition("=")
            try:
                val: object = json.loads(value)
            except ValueError:
                val = value  # a bare word: m_field=ecn
            settings[args[0][2:5]][key] = val
        args = args[2:]
    if not args or args[0] != "--":
        print("usage: own_nicd [--uet-setting K=V …] [--mrc-setting K=V …] [--mrc-port N] "
              "[--trimmed-dscp N …] [--engine-opt T.K=V …] -- COMMAND …", file=sys.stderr)
        return 2
    cmd = args[1:]
    mrc_opts = dict(o[4:].partition("=")[::2] for o in opts if o.startswith("mrc."))
    if mrc_opts.get("ev_format", "udp").lower() != "udp" and \
            os.environ.get("TRANSPORT", "mrc") == "mrc" and ":" not in os.environ.get("LOCAL", ":"):
        # STEV and SRv6 EVs ride partly in the IPv6 flow label: not a case for IPv4
        print(f"own_nicd: the MRC EV format {mrc_opts['ev_format']} needs IPv6 (LOCAL "
              f"{os.environ.get('LOCAL')}): unsupported", file=sys.stderr)
        return 127
    cluster, host = os.environ.get("EMU_CLUSTER"), os.environ.get("EMU_HOST")
    if not cluster or not host:
        print("own_nicd: EMU_CLUSTER and EMU_HOST must be set", file=sys.stderr)
        return 1
    logdir = os.environ.get("LOGDIR") or "."
    os.makedirs(logdir, exist_ok=True)
    # --mrc-port: a daemon serving MRC alone on that port (4791, RoCEv2's, is the spec
    # page's default; emu's daemons serve RoCEv2 there and MRC on 4971); MRC on 4971 beside
    # RoCEv2 and UET when an MRC setting or a trimmed DSCP is given (not otherwise: an
    # emu@REF daemon may predate MRC)
    engines = (["-t", "mrc", "--port", f"mrc={mrc_port}"] if mrc_port is not None
               else ["-t", "roce", "-t", "uet", *(("-t", "mrc") if settings["mrc"] or dscps
                                                  or mrc_opts else ())])
    argv_d = ["--cluster", cluster, "--host", host, *engines,
              *(a for d in dscps for a in ("--trimmed-dscp", d)),
              *(a for o in opts for a in ("--engine-opt", o)),
              "--optional-transports", "--trace", os.path.join(logdir, "nicd.trace.jsonl")]
    with open(os.path.join(logdir, "nicd.log"), "ab") as log:
        d = subprocess.Popen([sys.executable, "-c", _DAEMON, json.dumps(settings), *argv_d],
                             stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    try:
        assert d.stdout is not None
        line = d.stdout.readline()
        if not line.startswith(b"ready"):
            d.wait(10)
            print(f"own_nicd: the daemon did not start (exit {d.returncode}; "
                  f"{os.path.join(logdir, 'nicd.log')})", file=sys.stderr)
            return 1
        return subprocess.call(cmd)
    finally:
        _stop(d)


def _stop(p: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM (the daemon drains and exits 0), then SIGKILL after ``timeout`` s: what
    :func:`emu.proc.stop` does, which an ``emu@REF`` worktree may not have."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            p.kill()
    p.wait()


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: GPL-2.0-only
"""``emu perf TEST --from H1 --to H2``: both halves across a running cluster.

The server starts in ``--to``'s namespace, the client in ``--from``'s (each
``python -m emu perf …`` under ``nsenter``, as ``emu exec`` runs commands),
the client is given ``--to``'s first IPv4 address from the cluster's model.
The client's stdout and stderr pass through untouched (so ``--json`` stays
one document; with ``--json`` the document is held until the client ends, so
that a run cut short because the server failed answers with the server's error
as a document instead: :func:`emu.apps.perf.report.error_document`, as every
setup error here); the server's stderr is relayed with a ``[h2]`` prefix, its
stdout only with ``--verbose``. The exit status is the client's, or the
server's when only the server failed. Both children are always reaped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import IO

from emu.apps.perf import EXIT_USAGE
from emu.apps.perf.options import Options, UsageError, client_argv, server_argv
from emu.apps.perf.report import print_error

GRACE = 3.0  # seconds the client gets to notice a failed server by itself


def server_address(cluster: str, node: str) -> str:
    """The first IPv4 address of ``node``'s first port (IPv6 if it has no IPv4)."""
    from emu.cluster import cluster as C

    try:
        return C.model(cluster).host_address(node)
    except ValueError as e:
        raise UsageError(f"{e} (--from/--to take hosts)") from None


def _relay(stream: IO[bytes], prefix: str, out: IO[str], said: list[str] | None = None
           ) -> None:
    """Copy ``stream`` to ``out`` line by line behind ``prefix``; the lines also go to
    ``said`` (to name a failed server's reason in ``--json``'s error document)."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        out.write(prefix + line)
        out.flush()
        if said is not None:
            said.append(line.rstrip("\n"))
    stream.close()


def _collect(stream: IO[bytes], into: list[bytes]) -> None:
    into.append(stream.read())
    stream.close()


def _reason(lines: list[str]) -> str:
    """The server's own last error (``emu perf write-bw (server): why`` → ``why``)."""
    for line in reversed(lines):
        if line.startswith("emu perf") and "): " in line:
            return line.split("): ", 1)[1]
    return ""


def _env() -> dict[str, str]:
    """Our environment, with emu importable in the children whatever the cwd."""
    import emu

    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(emu.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def dead_daemons(cluster: str, *nodes: str) -> list[str]:
    """What to say of each of ``nodes`` whose NIC daemon the cluster's state file records
    and which is gone (``emu.nic.protocol.died``): asked before a run, and after
    one that failed — a daemon killed mid-run showed only as the peer's RETRY_EXC_ERR."""
    from emu.nic.protocol import died, sock_path

    return [m for n in dict.fromkeys(nodes) if (m := died(sock_path(cluster, n))) is not None]


def require_daemons(cluster: str, *nodes: str) -> None:
    """Each of ``nodes`` has a NIC daemon in ``cluster`` — else a usage error that names
    the cause (a cluster brought up with ``--no-daemons``, or a daemon that is gone)
    instead of the client's "no NIC daemon serves this namespace" from inside the host;
    and a daemon the state file records as gone (``kill -9``: its socket stays, and
    refuses) as not running, before a server is started that would only fail on it."""
    from emu.nic.protocol import daemon_hosts

    dead = dead_daemons(cluster, *nodes)
    if dead:
        raise UsageError(dead[0])
    have = daemon_hosts(cluster)  # what `emu nicd stats` asks, too
    missing = [n for n in nodes if n not in have]
    if not missing:
        return
    if not have:
        raise UsageError(f"cluster {cluster!r} runs no NIC daemons (brought up with "
                         f"--no-daemons?): emu perf needs them — `emu down {cluster}`, "
                         "then `emu up` without --no-daemons")
    raise UsageError(f"no NIC daemon was started on {', '.join(missing)} in cluster "
                     f"{cluster!r} (see `emu status {cluster}`)")


def run(o: Options) -> int:
    from emu.cluster import cluster as C
    from emu.fabric.status import exec_argv

    if os.geteuid() != 0:
        return print_error(o.test.name, "--from/--to enter the hosts' namespaces: run as root",
                           EXIT_USAGE, json_out=o.json)
    assert o.src is not None and o.dst is not None
    try:
        name = C.resolve(o.cluster)
        addr = server_address(name, o.dst)
        require_daemons(name, o.src, o.dst)
        if o.plot:
            o.plot = os.path.abspath(o.plot)
        py = [sys.executable, "-m", "emu", "perf"]
        srv_cmd = exec_argv(name, o.dst, py + server_argv(o))
        cli_cmd = exec_argv(name, o.src, py + client_argv(o, addr))
    except (C.ClusterError, KeyError, UsageError) as e:
        # a KeyError's str() is its message in quotes; its argument is the message itself
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        return print_error(o.test.name, str(msg), EXIT_USAGE, json_out=o.json)
    env = _env()
    print(f"emu perf {o.test.name}: server on {name}:{o.dst} ({addr}), client on "
          f"{name}:{o.src}", file=sys.stderr, flush=True)
    server = subprocess.Popen(srv_cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
    server_said: list[str] = []
    relays = [threading.Thread(target=_relay, args=(server.stderr, f"[{o.dst}] ", sys.stderr,
                                                    server_said), daemon=True)]
    if o.verbose:
        relays.append(threading.Thread(target=_relay, args=(server.stdout, f"[{o.dst}] ",
                                                            sys.stderr), daemon=True))
    else:
        relays.append(threading.Thread(target=lambda s: s.read() and None,
                                       args=(server.stdout,), daemon=True))
    for t in relays:
        t.start()
    client = None
    stopped_client = False  # True only if we terminated it (the server had failed)
    # --json: the client's document is held back, so that a run we cut short (the server
    # failed) answers with the server's error rather than the client's "interrupted"
    doc: list[bytes] = []
    try:
        client = subprocess.Popen(cli_cmd, stdin=subprocess.DEVNULL, env=env,
                                  stdout=subprocess.PIPE if o.json else None)
        if client.stdout is not None:
            relays.append(threading.Thread(target=_collect, args=(client.stdout, doc),
                                           name="client-doc", daemon=True))
            relays[-1].start()
        server_failed_at = None
        while client.poll() is None:
            if server_failed_at is None and server.poll() not in (None, 0):
                server_failed_at = time.monotonic()  # e.g. its port was taken
            if server_failed_at is not None and time.monotonic() - server_failed_at > GRACE:
                client.terminate()  # it would wait for a server that is gone
                stopped_client = True
                break
            time.sleep(0.05)
        rc = client.wait()
        try:
            src = server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.terminate()
            src = server.wait()
    finally:
        for p in (client, server):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        for t in relays:
            t.join(10 if t.name == "client-doc" else 2)  # the document whole, or not at all
    if rc != 0 or src != 0:  # a daemon that died during the run is the cause to name
        for line in dead_daemons(name, o.src, o.dst):
            print(f"emu perf: {line}", file=sys.stderr, flush=True)
    if stopped_client and src > 0:  # we stopped the client because the server had failed
        why = _reason(server_said)
        return print_error(o.test.name, f"the server on {o.dst} failed (exit status {src})"
                           + (f": {why}" if why else ""), src, json_out=o.json)
    if doc and doc[0]:  # the client's own document: passed on untouched
        sys.stdout.buffer.write(doc[0])
        sys.stdout.flush()
    if rc < 0:  # a signal we did not send: the server's failure (peer gone) follows from it
        msg = (f"the client on {o.src} was killed by signal {-rc}"
               + (f"; the server on {o.dst} then exited with status {src}" if src else ""))
        return print_error(o.test.name, msg, 128 - rc, json_out=o.json and not any(doc))
    return rc if rc != 0 else src

# SPDX-License-Identifier: GPL-2.0-only
"""emu-ref's interop endpoint (``docs/interop.md``, contract v1), with its own daemon.

``python3 -m emuref.endpoint`` inside a host namespace, with the contract's
environment. This process *is* the daemon: it binds the standard UDP port of
the transport (4791 RoCEv2, 4793 UET) on ``$LOCAL``, runs the sans-IO core
(:mod:`emuref.roce_rc` or :mod:`emuref.uet_rud`) in one select loop, does the
TCP connection-data exchange, and exits 0 (passed), 1 (failed, reason on
stderr) or 127 (case or transport not supported). ``TRANSPORT=mrc`` is handed
to :mod:`emuref.mrc_endpoint` (UDP 4971 and one socket per EV; it reuses the
exchange and the environment from here).

IPv4 RoCE goes out of an unconnected socket with DF set, so the kernel
writes IP ID 0 and the ICRC computed here holds (spec: kernel pitfall).
"""

from __future__ import annotations

import json
import os
import random
import selectors
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emuref import roce_rc, uet_rud
from emuref.memory import Memory

VERSION = 1
ROCE_PORT, UET_PORT = 4791, 4793
PMTU = 4096
TRANSFER = {"transfer-1b": 1, "transfer-4k": 4096, "transfer-1m": 1 << 20,
            "transfer-64m": 64 << 20, "loss": 1 << 20, "duplication": 1 << 20,
            "reordering": 1 << 20, "trimming": 1 << 20}
SUPPORTED = {*TRANSFER, "handshake", "read", "sendrecv", "badkey"}
MSG_MAX = 1 << 20  # a transfer is split into WRITEs of at most this many bytes
#: DSCPs a switch writes into trimmed packets (spec: "deployment-chosen"; emu's 30/31)
TRIMMED_DSCPS = {30, 31}
_IP_PMTUDISC_DO = 2
_IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)  # Linux value; Python lacks the name


class CaseError(Exception):
    """This side saw the case fail (exit 1 with this message)."""


def log(msg: str) -> None:
    print(f"emu-ref: {msg}", file=sys.stderr, flush=True)


# -- transport: one UDP socket and one sans-IO core ------------------------------------


class Transport:
    """The daemon part: the socket, the core, and a select loop that also watches TCP."""

    def __init__(self, kind: str, local: str, peer: str) -> None:
        self.kind, self.local, self.peer = kind, local, peer
        self.port = ROCE_PORT if kind == "roce" else UET_PORT
        fam = socket.AF_INET6 if ":" in local else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        if fam == socket.AF_INET:
            self.sock.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)
            self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        self.sock.bind((local, self.port))
        self.sock.setblocking(False)
        self.memory = Memory()
        self.rng = random.Random()
        self.qp: roce_rc.RcQp | None = None
        self.uet: uet_rud.UetEngine | None = None
        if kind == "roce":
            self.qp = roce_rc.RcQp(self.rng.randrange(1, 1 << 24), self.rng.getrandbits(24),
                                   self.memory, local, pmtu=PMTU)
        else:
            self.uet = uet_rud.UetEngine(local, self.memory, self.rng, mtu=PMTU)
            self.ep = self.rng.randrange(1, 1 << 12)
            self.uet.add_endpoint(self.ep)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ, "udp")
        self.next_key = 1

    # -- memory and connection data -------------------------------------------------

    def register(self, data: bytearray) -> tuple[int, int]:
        """Register ``data``; (key, va). Keys and addresses are random, as a NIC's are."""
        key = self.rng.getrandbits(32) | 1
        va = self.rng.getrandbits(40) << 12
        self.memory.register(key, va, data)
        return key, va

    def conn_object(self, key: int, va: int, n: int) -> dict[str, Any]:
        region = {"rkey": key, "va": va, "len": n}
        if self.qp is not None:
            gid = f"::ffff:{self.local}" if ":" not in self.local else self.local
            return {"qpn": self.qp.qpn, "psn": self.qp.next_psn, "gid": gid,
                    "address": self.local, "port": self.port, **region}
        return {"address": self.local, "ep": self.ep, "port": self.port, "job": 0, "ri": 0,
                **region}

    def connect(self, peer_obj: dict[str, Any]) -> None:
        self.remote = peer_obj
        if self.qp is not None:
            self.qp.connect(self.peer, int(peer_obj["qpn"]), int(peer_obj["psn"]))

    # -- verbs ---------------------------------------------------------------------

    def write(self, wr_id: int, data: bytes, va: int, rkey: int) -> None:
        if self.qp is not None:
            self.qp.post_write(wr_id, data, va, rkey)
        else:
            assert self.uet is not None
            self.uet.post_write(wr_id, self.peer, int(self.remote["ep"]), data, va, rkey, self.ep)

    def send(self, wr_id: int, data: bytes) -> None:
        if self.qp is not None:
            self.qp.post_send(wr_id, data)
        else:
            assert self.uet is not None
            self.uet.post_send(wr_id, self.peer, int(self.remote["ep"]), data, self.ep)

    def read(self, wr_id: int, dest: bytearray, va: int, rkey: int) -> None:
        if self.qp is not None:
            self.qp.post_read(wr_id, dest, va, rkey)
        else:
            assert self.uet is not None
            self.uet.post_read(wr_id, self.peer, int(self.remote["ep"]), dest, va, rkey, self.ep)

    def post_recv(self, wr_id: int, buf: bytearray) -> None:
        if self.qp is not None:
            self.qp.post_recv(wr_id, buf)
        else:
            assert self.uet is not None
            self.uet.post_recv(self.ep, wr_id, buf)

    @property
    def completions(self) -> Any:
        return self.qp.completions if self.qp is not None else self.uet.completions  # type: ignore[union-attr]

    def stats(self) -> dict[str, Any]:
        if self.qp is not None:
            return dict(vars(self.qp.c))
        assert self.uet is not None
        return dict(self.uet.stats)

    # -- the loop ------------------------------------------------------------------------

    def _flush(self, now: float) -> None:
        if self.qp is not None:
            out = [(d, self.peer) for d in self.qp.datagrams_to_send(now)]
        else:
            assert self.uet is not None
            out = self.uet.datagrams_to_send(now)
        for d, to in out:
            try:
                self.sock.sendto(d, (to, self.port))
            except BlockingIOError:
                # a full socket buffer drops like a NIC queue; retransmission recovers
                pass
            except OSError as e:
                log(f"sendto {to}: {e}")

    def _rx(self, now: float) -> None:
        for _ in range(256):
            try:
                data, anc, _flags, addr = self.sock.recvmsg(65536, 64)
            except BlockingIOError:
                return
            tos = 0
            for lvl, typ, val in anc:
                if lvl == socket.IPPROTO_IP and typ == socket.IP_TOS and val:
                    tos = val[0]
            if addr[0] != self.peer:
                continue
            if self.qp is not None:
                self.qp.receive_datagram(data, now, addr[1])
            else:
                assert self.uet is not None
                self.uet.receive_datagram(data, addr[0], now, (tos >> 2) in TRIMMED_DSCPS)

    def pump(self, until: Callable[[], bool], deadline: float, tcp: Any = None) -> None:
        """Run the transport until ``until()`` or ``deadline`` (CaseError); with ``tcp``
        (a :class:`Exchange`), also read its lines so ``until`` can look at them."""
        if tcp is not None:
            self.sel.register(tcp.sock, selectors.EVENT_READ, "tcp")
        try:
            while True:
                now = time.monotonic()
                self._flush(now)
                if until():
                    return
                if now > deadline:
                    raise CaseError("timed out waiting for the transport")
                t = self.qp.get_timer() if self.qp is not None else self.uet.get_timer()  # type: ignore[union-attr]
                wait = 0.05 if t is None else max(0.0, min(0.05, t - now))
                for k, _ in self.sel.select(wait):
                    if k.data == "udp":
                        self._rx(time.monotonic())
                    else:
                        tcp.fill()
                now = time.monotonic()
                t = self.qp.get_timer() if self.qp is not None else self.uet.get_timer()  # type: ignore[union-attr]
                if t is not None and t <= now:
                    (self.qp or self.uet).handle_timer(now)  # type: ignore[union-attr]
        finally:
            if tcp is not None:
                self.sel.unregister(tcp.sock)


# -- TCP exchange (contract §3) -----------------------------------------------------------


class Exchange:
    """One JSON object per line over TCP."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.lines: list[dict[str, Any]] = []
        self.eof = False

    def send(self, obj: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def fill(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
            return
        self.buf += chunk
        if len(self.buf) > 1 << 20 and b"\n" not in self.buf:
            raise CaseError("exchange line longer than 1 MiB")
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                obj = json.loads(line)
            except ValueError:
                raise CaseError(f"exchange: not JSON: {line[:80]!r}") from None
            if not isinstance(obj, dict) or "type" not in obj:
                raise CaseError(f"exchange: not an object with a type: {line[:80]!r}")
            self.lines.append(obj)

    def recv(self, deadline: float, want: str | tuple[str, ...]) -> dict[str, Any]:
        """Block for the next line; it must have type ``want``."""
        want = (want,) if isinstance(want, str) else want
        self.sock.setblocking(True)
        while not self.lines:
            if self.eof:
                raise CaseError(f"exchange closed while waiting for {'/'.join(want)}")
            self.sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                self.fill()
            except TimeoutError:
                raise CaseError(f"timed out waiting for {'/'.join(want)}") from None
        obj = self.lines.pop(0)
        if obj["type"] not in want:
            raise CaseError(f"exchange: expected {'/'.join(want)}, got {obj['type']!r}")
        return obj


# -- the cases ---------------------------------------------------------------------------


class Env:
    def __init__(self) -> None:
        e = os.environ
        self.role = e.get("ROLE", "")
        self.transport = e.get("TRANSPORT", "")
        self.case = e.get("TESTCASE", "")
        self.local = e.get("LOCAL", "")
        self.peer = e.get("PEER", "")
        self.port = int(e.get("EXCHANGE_PORT") or 18515)
        self.data = Path(e.get("DATA_DIR") or ".")
        self.logdir = Path(e.get("LOGDIR") or ".")
        self.timeout = float(e.get("TIMEOUT") or 120)
        self.deadline = time.monotonic() + self.timeout * 0.95


def _wait(tr: Transport, n: int, deadline: float) -> list[Any]:
    """The next ``n`` completions of this side's initiator."""
    got: list[Any] = []

    def ready() -> bool:
        while tr.completions and len(got) < n:
            got.append(tr.completions.popleft())
        return len(got) >= n

    tr.pump(ready, deadline)
    return got


def connect_exchange(env: Env) -> Exchange:
    """The client's TCP session to the server, retried while it is refused (§3)."""
    while True:
        try:
            return Exchange(socket.create_connection((env.peer, env.port), timeout=2))
        except OSError:
            if time.monotonic() > env.deadline:
                raise CaseError(f"cannot connect to {env.peer}:{env.port}") from None
            time.sleep(0.05)


def client(env: Env, tr: Transport) -> dict[str, Any]:
    deadline = env.deadline
    ex = connect_exchange(env)
    case = env.case
    payload = b""
    size = 0
    if case in TRANSFER or case in ("handshake", "sendrecv", "badkey"):
        payload = (env.data / "payload.bin").read_bytes()
        # emu's server sizes its receives from `size` for sendrecv too (README: notes)
        size = 4096 if case == "badkey" else len(payload)
    own = bytearray(8)
    key, va = tr.register(own)
    ex.send({"type": "hello", "version": VERSION, "transport": env.transport, "testcase": case,
             "conns": [tr.conn_object(key, va, 0)], "size": size})
    srv = ex.recv(deadline, "server")
    if srv.get("version") != VERSION or len(srv.get("conns") or []) != 1:
        raise CaseError(f"unexpected server reply {srv}")
    peer = srv["conns"][0]
    tr.connect(peer)
    result: dict[str, Any] = {"type": "done", "ok": True, "error": None}
    try:
        if case in TRANSFER:
            n = 0
            for off in range(0, len(payload), MSG_MAX):
                tr.write(n, payload[off:off + MSG_MAX], int(peer["va"]) + off, int(peer["rkey"]))
                n += 1
            bad = [c for c in _wait(tr, n, deadline) if c.status != "SUCCESS"]
            if bad:
                raise CaseError(f"WRITE completed with {bad[0].status}")
        elif case == "handshake":
            tr.send(1, payload)
            (c,) = _wait(tr, 1, deadline)
            if c.status != "SUCCESS":
                raise CaseError(f"SEND completed with {c.status}")
        elif case == "sendrecv":
            k = 16 * 1024
            for i in range(16):
                tr.send(i, payload[i * k:(i + 1) * k])
            bad = [c for c in _wait(tr, 16, deadline) if c.status != "SUCCESS"]
            if bad:
                raise CaseError(f"SEND completed with {bad[0].status}")
        elif case == "read":
            dest = bytearray(int(peer["len"]))
            tr.read(1, dest, int(peer["va"]), int(peer["rkey"]))
            (c,) = _wait(tr, 1, deadline)
            if c.status != "SUCCESS":
                raise CaseError(f"READ completed with {c.status}")
            (env.data / "received").mkdir(parents=True, exist_ok=True)
            (env.data / "received" / "payload.bin").write_bytes(dest)
        elif case == "badkey":
            tr.write(1, payload[:4096], int(peer["va"]), int(peer["rkey"]) ^ 0x5A5A)
            (c,) = _wait(tr, 1, deadline)
            result["status"] = c.status
            if c.status == "SUCCESS":
                raise CaseError("WRITE with a wrong key completed successfully")
    except CaseError as e:
        result.update(ok=False, error=str(e))
    ex.send(result)
    # keep answering the transport (a late ACK request, a lost last ACK) until bye
    tr.pump(lambda: bool(ex.lines) or ex.eof, deadline, tcp=ex)
    bye = ex.recv(deadline, "bye")
    if not result["ok"]:
        raise CaseError(result["error"])
    if not bye.get("ok"):
        raise CaseError(f"server says: {bye.get('error')}")
    return result


def server(env: Env, tr: Transport) -> None:
    deadline = env.deadline
    ls = socket.create_server(("", env.port), family=socket.AF_INET6, dualstack_ipv6=True) \
        if socket.has_dualstack_ipv6() else socket.create_server(("", env.port))
    ls.settimeout(max(1.0, deadline - time.monotonic()))
    try:
        s, _ = ls.accept()
    except TimeoutError:
        raise CaseError("no client connected") from None
    ls.close()
    ex = Exchange(s)
    hello = ex.recv(deadline, "hello")
    if (hello.get("version") != VERSION or hello.get("transport") != env.transport
            or hello.get("testcase") != env.case or len(hello.get("conns") or []) != 1):
        raise CaseError(f"hello does not match this side: {hello}")
    case = env.case
    size = int(hello.get("size") or 0)
    recvs: list[bytearray] = []
    if case == "read":
        region = bytearray((env.data / "payload.bin").read_bytes())
    elif case == "badkey":
        region = bytearray((env.data / "target.bin").read_bytes())
    else:
        region = bytearray(size)
    key, va = tr.register(region)
    if case == "handshake":
        recvs = [bytearray(64)]
    elif case == "sendrecv":
        recvs = [bytearray(16 * 1024) for _ in range(16)]
    for i, b in enumerate(recvs):
        tr.post_recv(i, b)
    tr.connect(hello["conns"][0])
    ex.send({"type": "server", "version": VERSION, "conns": [tr.conn_object(key, va, len(region))]})
    tr.pump(lambda: bool(ex.lines) or ex.eof, deadline, tcp=ex)
    done = ex.recv(deadline, "done")
    err = None if done.get("ok") else f"client failed: {done.get('error')}"
    out = env.data / "received"
    out.mkdir(parents=True, exist_ok=True)
    if recvs:
        got = [c for c in list(tr.completions) if c.op == "RECV"]
        if len(got) != len(recvs) or any(c.status != "SUCCESS" for c in got):
            err = err or f"{len(got)} of {len(recvs)} receives completed: {got}"
        else:
            by = {c.wr_id: c.length for c in got}
            data = b"".join(bytes(recvs[i][:by[i]]) for i in range(len(recvs)))
            (out / "payload.bin").write_bytes(data)
    elif case == "badkey":
        (out / "target.bin").write_bytes(region)
    elif case != "read":
        (out / "payload.bin").write_bytes(region)
    ex.send({"type": "bye", "ok": err is None, "error": err})
    # serve the transport until the client hangs up (its last ACKs may still be due)
    end = min(deadline, time.monotonic() + 2.0)
    try:
        tr.pump(lambda: ex.eof, end, tcp=ex)
    except CaseError:
        pass
    if err is not None:
        raise CaseError(err)


def main() -> int:
    env = Env()
    if env.transport == "mrc":
        # MRC has its own sockets (a receive port and one per EV) and cases: imported
        # only here, so the RoCEv2 and UET paths never load it
        from emuref import mrc_endpoint
        return mrc_endpoint.main(env)
    if env.transport not in ("roce", "uet") or env.case not in SUPPORTED:
        log(f"{env.transport}/{env.case}: not supported")
        return 127
    if (env.transport, env.case, env.role) == ("roce", "trimming", "server"):
        # RoCEv2 (IBTA) defines no trimmed packet: a cut WRITE_MIDDLE is a malformed
        # request (NAK invalid request, QP to error), as on an RNIC that knows no trimming;
        # treating the trimmed DSCP as a loss is emu's extension, not this reference's
        log("roce/trimming as server: not supported (RoCEv2 defines no trimmed packet)")
        return 127
    return run_case(env, lambda: Transport(env.transport, env.local, env.peer), client,
                    server)


def run_case(env: Env, transport: Callable[[], Any], client: Callable[[Env, Any], Any],
             server: Callable[[Env, Any], Any]) -> int:
    """Run this side of the case over a transport ``transport()`` opens; the exit code
    (contract §1) and the transport's counters in ``$LOGDIR/emuref-stats.json``."""
    if env.role not in ("server", "client"):
        log(f"ROLE must be server or client, not {env.role!r}")
        return 1
    tr = None
    try:
        tr = transport()
        (server if env.role == "server" else client)(env, tr)
        log(f"{env.role} {env.transport}/{env.case}: passed")
        return 0
    except (CaseError, OSError, ValueError, KeyError, TypeError) as e:
        log(f"{env.role} {env.transport}/{env.case}: FAILED: {e}")
        return 1
    finally:
        if tr is not None:
            try:
                env.logdir.mkdir(parents=True, exist_ok=True)
                (env.logdir / "emuref-stats.json").write_text(json.dumps(tr.stats(), indent=1))
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main())

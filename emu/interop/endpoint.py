# SPDX-License-Identifier: GPL-2.0-only
"""emu's interop endpoint: the ``emu`` implementation of ``docs/interop.md``.

``python -m emu.interop.endpoint`` inside a host, with the contract's
environment. It uses only the public client API (:mod:`emu.api`) and the
host's ``emu nicd``, so the same file also drives emu at another commit
(``emu@REF``: that commit's API and daemon) — which is why it needs nothing
newer than the API of ``main`` before the interop runner existed.

RoCEv2 and MRC connections are QPs; UET connections are endpoints (RUD). All are
wrapped in :class:`Conn` so each test case is written once; MRC, which has only
WRITE and WRITE with immediate, does ``handshake`` and ``sendrecv`` with
immediates (``docs/interop.md`` §5, "MRC").
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Any

from emu.api import Device
from emu.interop import contract as C

SUPPORTED = {"roce", "uet", "mrc"}
#: cases a transport cannot do (exit 127): MRC has no READ and no atomics
UNSUPPORTED = {("mrc", "read"), ("mrc", "atomics")}
_U64 = struct.Struct("=Q")


class CaseError(Exception):
    """This side saw the test case fail (exit 1, reason on stderr)."""


class Conn:
    """One connection (RC QP or UET endpoint) with one registered region."""

    def __init__(self, dev: Device, transport: str, size: int) -> None:
        self.dev, self.transport = dev, transport
        self.buf = dev.alloc_buffer(max(size, 8))
        self.mr = dev.reg_mr(self.buf)
        self.size = size
        if transport in ("roce", "mrc"):
            self.scq, self.rcq = dev.create_cq(1024), dev.create_cq(1024)
            self.qp = dev.create_qp(self.scq, self.rcq, transport=transport)
            self.ep = None
        else:
            self.ep = dev.endpoint("uet", cqe=1024)
            self.scq, self.rcq, self.qp = self.ep.tx_cq, self.ep.rx_cq, self.ep.qp

    def new_region(self, size: int) -> None:
        """Replace the region by one of ``size`` bytes (a READ's target, known only
        once the server's object says how long its region is)."""
        self.mr.dereg()
        self.buf.close()
        self.buf = self.dev.alloc_buffer(max(size, 8))
        self.mr = self.dev.reg_mr(self.buf)
        self.size = size

    def info(self) -> dict[str, Any]:
        """This side's connection object (contract §4)."""
        region = {"rkey": self.mr.rkey, "va": self.mr.va, "len": self.size}
        if self.transport == "mrc":
            i = self.qp.local_info()
            return {"qpn": i["qpn"], "psn": i["psn"], "address": i.get("address"),
                    "port": i.get("port", 4971), "mpr": i.get("mpr", 1024), **region}
        if self.ep is None:
            i = self.qp.local_info()
            return {"qpn": i["qpn"], "psn": i["psn"], "gid": i.get("gid"),
                    "address": i.get("address"), "port": i.get("port", 4791), **region}
        i = self.ep.getname()
        return {"address": i["address"], "ep": i["ep"], "port": i.get("port", 4793), "job": 0,
                "ri": 0, **region}

    def connect(self, peer: dict[str, Any]) -> None:
        if self.ep is None:
            self.qp.connect(peer)
        else:
            self.ep.connect({k: peer[k] for k in ("address", "ep", "port") if k in peer})

    def view(self, off: int = 0, n: int | None = None) -> memoryview:
        v = self.mr.view
        return v[off:self.size if n is None else off + n]

    # -- posts --------------------------------------------------------------------
    def write(self, off: int, n: int, va: int, rkey: int, wr_id: int) -> None:
        if self.ep is None:
            self.qp.post_write(self.mr.sge(off, n), va, rkey, wr_id)
        else:
            self.ep.write(self.mr.sge(off, n), va, rkey, context=wr_id)

    def write_imm(self, off: int, n: int, va: int, rkey: int, imm: int, wr_id: int) -> None:
        """WRITE with immediate (MRC's message with a receive-side completion)."""
        self.qp.post_write(self.mr.sge(off, n), va, rkey, wr_id, imm=imm)

    def read(self, off: int, n: int, va: int, rkey: int, wr_id: int) -> None:
        if self.ep is None:
            self.qp.post_read(self.mr.sge(off, n), va, rkey, wr_id)
        else:
            self.ep.read(self.mr.sge(off, n), va, rkey, context=wr_id)

    def send(self, off: int, n: int, wr_id: int) -> None:
        if self.ep is None:
            self.qp.post_send(self.mr.sge(off, n), wr_id)
        else:
            self.ep.send(self.mr.sge(off, n), context=wr_id)

    def recv(self, off: int, n: int, wr_id: int) -> None:
        if self.ep is None:
            self.qp.post_recv(self.mr.sge(off, n), wr_id)
        else:
            self.ep.recv(self.mr.sge(off, n), context=wr_id)

    def atomic(self, op: str, off: int, va: int, rkey: int, operand: int, compare: int,
               wr_id: int) -> None:
        if self.ep is None:
            if op == "add":
                self.qp.post_atomic("fetch_add", self.mr.sge(off, 8), va, rkey, operand, 0, wr_id)
            else:
                self.qp.post_atomic("cmp_swap", self.mr.sge(off, 8), va, rkey, compare, operand,
                                    wr_id)
        else:
            self.ep.atomic("sum" if op == "add" else "cswap", self.mr.sge(off, 8), va, rkey,
                           operand, compare, context=wr_id)

    def wait(self, cq: Any, n: int, timeout: float, what: str) -> list[Any]:
        """``n`` completions from ``cq``, all successful, or CaseError naming ``what``."""
        got: list[Any] = []
        while len(got) < n:
            wcs = cq.wait(n - len(got), timeout)
            if not wcs:
                raise CaseError(f"{what}: {len(got)} of {n} completions within {timeout:g} s")
            got += wcs
        bad = [w for w in got if w.status.name != "SUCCESS"]
        if bad:
            raise CaseError(f"{what}: completion {bad[0].status.name} "
                            f"(vendor_err {bad[0].vendor_err})")
        return got

    def close(self) -> None:
        try:
            if self.ep is not None:
                self.ep.close()
            else:
                self.qp.destroy()
                self.scq.destroy()
                self.rcq.destroy()
            self.mr.dereg()
        finally:
            self.buf.close()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


_write = C.write_received


def _write_chunks(conn: Conn, peer: dict[str, Any], n: int, timeout: float,
                  chunk: int = C.MiB, depth: int = 8, rkey: int | None = None) -> None:
    """WRITE the first ``n`` bytes of ``conn``'s region to the peer's region, in
    ``chunk``-byte messages, at most ``depth`` outstanding."""
    offs = list(range(0, n, chunk)) or [0]
    posted = done = 0
    while done < len(offs):
        while posted < len(offs) and posted - done < depth:
            o = offs[posted]
            conn.write(o, min(chunk, n - o), peer["va"] + o,
                       peer["rkey"] if rkey is None else rkey, posted + 1)
            posted += 1
        done += len(conn.wait(conn.scq, 1, timeout, f"WRITE at offset {offs[done]}"))


# --------------------------------------------------------------------------------------
# client
# --------------------------------------------------------------------------------------
def _client_hello(env: C.Env, s: C.Session, conns: list[Conn], **extra: Any) -> list[dict]:
    s.send({"type": "hello", "version": C.VERSION, "transport": env.transport,
            "testcase": env.testcase, "conns": [c.info() for c in conns], **extra})
    reply = s.recv("server")
    peers = reply.get("conns") or []
    if len(peers) != len(conns):
        raise C.ProtocolError(f"server gave {len(peers)} connection(s), expected {len(conns)}")
    for c, p in zip(conns, peers, strict=False):
        c.connect(p)
    return peers


def _finish(s: C.Session, **done: Any) -> None:
    s.send({"type": "done", "ok": True, "error": None, **done})
    bye = s.recv("bye")
    if not bye.get("ok", False):
        raise CaseError(f"server says: {bye.get('error')}")


def client(env: C.Env, dev: Device) -> None:
    case, t = env.testcase, env.timeout
    files = env.data_dir
    s = C.connect(env.peer, env.port, t)
    conns: list[Conn] = []
    try:
        if case == "handshake":
            data = _read(os.path.join(files, "payload.bin"))
            conns = [Conn(dev, env.transport, len(data))]
            conns[0].view()[:] = data
            [peer] = _client_hello(env, s, conns, size=len(data))
            if env.transport == "mrc":
                conns[0].write_imm(0, len(data), peer["va"], peer["rkey"], C.HANDSHAKE_IMM, 1)
            else:
                conns[0].send(0, len(data), 1)
            conns[0].wait(conns[0].scq, 1, t, "SEND")
            _finish(s)
        elif case in C.TRANSFER_SIZES or case == "badkey":
            data = _read(os.path.join(files, "payload.bin"))
            conns = [Conn(dev, env.transport, len(data))]
            conns[0].view()[:] = data
            [peer] = _client_hello(env, s, conns, size=len(data))
            if case == "badkey":
                try:
                    _write_chunks(conns[0], peer, len(data), t, rkey=peer["rkey"] ^ C.BADKEY_XOR)
                except CaseError as e:
                    s.send({"type": "done", "ok": True, "error": None, "status": str(e)})
                    s.recv("bye")
                    return
                s.send({"type": "done", "ok": False, "error": "WRITE with a wrong key succeeded"})
                raise CaseError("a WRITE with a wrong R_Key/memory key completed successfully")
            _write_chunks(conns[0], peer, len(data), t)
            _finish(s)
        elif case == "read":
            conns = [Conn(dev, env.transport, 0)]
            [peer] = _client_hello(env, s, conns, size=0)
            c = conns[0]
            c.new_region(int(peer["len"]))
            offs = list(range(0, c.size, C.MiB))
            for i, o in enumerate(offs):
                c.read(o, min(C.MiB, c.size - o), peer["va"] + o, peer["rkey"], i + 1)
            c.wait(c.scq, len(offs), t, "READ")
            _write(env, "payload.bin", c.view())
            _finish(s)
        elif case == "sendrecv":
            data = _read(os.path.join(files, "payload.bin"))
            conns = [Conn(dev, env.transport, len(data))]
            conns[0].view()[:] = data
            [peer] = _client_hello(env, s, conns, size=len(data))
            n = len(data) // C.SENDRECV_CHUNK
            for i in range(n):
                o = i * C.SENDRECV_CHUNK
                if env.transport == "mrc":  # message i to offset 16 KiB * i, immediate i
                    conns[0].write_imm(o, C.SENDRECV_CHUNK, peer["va"] + o, peer["rkey"], i,
                                       i + 1)
                else:
                    conns[0].send(o, C.SENDRECV_CHUNK, i + 1)
            conns[0].wait(conns[0].scq, n, t, "SEND")
            _finish(s)
        elif case == "atomics":
            conns = [Conn(dev, env.transport, 16)]
            [peer] = _client_hello(env, s, conns, size=8)
            c = conns[0]
            c.atomic("add", 0, peer["va"], peer["rkey"], C.ATOMIC_ADD, 0, 1)
            c.wait(c.scq, 1, t, "FETCH_AND_ADD")
            c.atomic("cswap", 8, peer["va"], peer["rkey"], C.ATOMIC_SWAP, C.ATOMIC_COMPARE, 2)
            c.wait(c.scq, 1, t, "COMPARE_AND_SWAP")
            fetched = [_U64.unpack_from(c.view(), 0)[0], _U64.unpack_from(c.view(), 8)[0]]
            _write(env, "atomics.json", json.dumps({"fetched": fetched}).encode())
            _finish(s, fetched=fetched)
        elif case == "multiconn":
            datas = [_read(os.path.join(files, f"payload-{i}.bin")) for i in range(C.MULTICONN_N)]
            conns = [Conn(dev, env.transport, len(d)) for d in datas]
            for c, d in zip(conns, datas, strict=False):
                c.view()[:] = d
            peers = _client_hello(env, s, conns, size=len(datas[0]))
            for i, (c, p) in enumerate(zip(conns, peers, strict=False)):
                c.write(0, c.size, p["va"], p["rkey"], i + 1)
            for i, c in enumerate(conns):
                c.wait(c.scq, 1, t, f"WRITE on connection {i}")
            _finish(s)
        elif case == "teardown":
            for k, name in enumerate(("payload.bin", "payload2.bin")):
                data = _read(os.path.join(files, name))
                conn = Conn(dev, env.transport, len(data))
                conn.view()[:] = data
                [peer] = _client_hello(env, s, [conn], size=len(data))
                _write_chunks(conn, peer, len(data), t)
                conn.close()
                if k == 0:
                    s.send({"type": "done", "ok": True, "error": None})
            _finish(s)
        else:
            raise AssertionError(case)
    finally:
        for c in conns:
            try:
                c.close()
            except Exception:  # the daemon frees what a closed connection leaves
                pass
        s.close()


# --------------------------------------------------------------------------------------
# server
# --------------------------------------------------------------------------------------
def _check_hello(env: C.Env, hello: dict[str, Any]) -> None:
    for key, want in (("version", C.VERSION), ("transport", env.transport),
                      ("testcase", env.testcase)):
        if hello.get(key) != want:
            raise C.ProtocolError(f"hello has {key}={hello.get(key)!r}, expected {want!r}")


def _serve_one(env: C.Env, dev: Device, s: C.Session, hello: dict[str, Any]) -> list[Conn]:
    """Set up for one hello, reply, serve until the client's ``done``; returns the conns
    (their regions hold what arrived)."""
    case, t = env.testcase, env.timeout
    _check_hello(env, hello)
    size = int(hello.get("size", 0))
    n = len(hello.get("conns") or [])
    if n < 1 or n > 64:
        raise C.ProtocolError(f"hello has {n} connection objects")
    if case == "handshake":  # MRC: the immediate's WRITE lands in a region of hello's size
        conns = [Conn(dev, env.transport,
                      size if env.transport == "mrc" else C.HANDSHAKE_RECV)]
    elif case == "read":
        data = _read(os.path.join(env.data_dir, "payload.bin"))
        conns = [Conn(dev, env.transport, len(data))]
        conns[0].view()[:] = data
    elif case == "atomics":
        conns = [Conn(dev, env.transport, 8)]
        _U64.pack_into(conns[0].view(), 0, C.ATOMIC_INITIAL)
    elif case == "badkey":
        data = _read(os.path.join(env.data_dir, "target.bin"))
        conns = [Conn(dev, env.transport, len(data))]
        conns[0].view()[:] = data
    elif case == "sendrecv":
        conns = [Conn(dev, env.transport, size)]
    else:
        conns = [Conn(dev, env.transport, size) for _ in range(n)]
    for c, p in zip(conns, hello["conns"], strict=False):
        c.connect(p)
    # receive buffers go on a connected QP (RC: RTR), before the client may send
    if case == "handshake":
        conns[0].recv(0, C.HANDSHAKE_RECV, 1)
    elif case == "sendrecv":
        for i in range(size // C.SENDRECV_CHUNK):
            conns[0].recv(i * C.SENDRECV_CHUNK, C.SENDRECV_CHUNK, i + 1)
    s.send({"type": "server", "version": C.VERSION, "conns": [c.info() for c in conns]})
    done = s.recv("done")
    if case == "handshake":
        [wc] = conns[0].wait(conns[0].rcq, 1, t, "receive")
        _write(env, "payload.bin", conns[0].view(0, wc.byte_len))
    elif case == "sendrecv":
        wcs = conns[0].wait(conns[0].rcq, size // C.SENDRECV_CHUNK, t, "receive")
        imms = [w.imm for w in wcs] if env.transport == "mrc" else []
        if imms and imms != list(range(len(wcs))):  # WRITE with immediate: MSN order
            raise CaseError(f"immediates completed out of order: {imms}")
    if not done.get("ok", False):
        raise CaseError(f"client says: {done.get('error')}")
    return conns


def server(env: C.Env, dev: Device) -> None:
    case = env.testcase
    s = C.listen(env.port, env.timeout)
    try:
        conns = _serve_one(env, dev, s, s.recv("hello"))
        try:
            for name, i, n in C.server_files(case, len(conns)):
                _write(env, name, conns[i].view() if n is None else conns[i].view(0, n))
        finally:
            for c in conns:
                c.close()
        if case == "teardown":
            conns = _serve_one(env, dev, s, s.recv("hello"))
            _write(env, "payload2.bin", conns[0].view())
            for c in conns:
                c.close()
        s.send({"type": "bye", "ok": True, "error": None})
    except (CaseError, C.ProtocolError) as e:
        try:
            s.send({"type": "bye", "ok": False, "error": str(e)})
        except OSError:
            pass
        raise
    finally:
        s.close()


def main(environ: dict[str, str] | None = None) -> int:
    try:
        env = C.Env.from_environ(dict(os.environ if environ is None else environ))
    except (KeyError, ValueError) as e:
        print(f"emu interop endpoint: {e}", file=sys.stderr)
        return C.EXIT_FAILED
    if (env.transport not in SUPPORTED or env.testcase not in C.CASES
            or (env.transport, env.testcase) in UNSUPPORTED):
        print(f"emu: {env.transport}/{env.testcase} not supported", file=sys.stderr)
        return C.EXIT_UNSUPPORTED
    try:
        with Device.open(timeout=env.timeout) as dev:
            (server if env.role == "server" else client)(env, dev)
    except (CaseError, C.ProtocolError) as e:
        print(f"emu {env.role} {env.testcase}: {e}", file=sys.stderr)
        return C.EXIT_FAILED
    except (OSError, ValueError, KeyError) as e:
        print(f"emu {env.role} {env.testcase}: {type(e).__name__}: {e}", file=sys.stderr)
        return C.EXIT_FAILED
    print(f"emu {env.role} {env.transport} {env.testcase}: ok")
    return C.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

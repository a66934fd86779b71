# SPDX-License-Identifier: GPL-2.0-only
"""The linux-rxe endpoint: emu's interop contract (``docs/interop.md``) on rdma-core verbs.

Runs **inside the guest** (``python3 guest_endpoint.py``, Debian's Python and
``python3-pyverbs``), next to a copy of :mod:`emu.interop.contract`, with the contract's
environment. Why pyverbs and not ibv_rc_pingpong/perftest: the contract's exchange is
JSON lines and its cases need WRITE, READ, SEND, atomics and a wrong R_Key on one QP;
pyverbs is rdma-core's own binding of libibverbs, so every packet on the wire is still
built by the kernel's rdma_rxe — which is the point of the implementation.

Settings a peer may want (``SERVER_PARAMS``/``CLIENT_PARAMS``, space-separated
``key=value``): ``mtu=1024|2048|4096`` (the RC path MTU; default ``$PMTU``, else 4096),
``dev=rxe0`` (the verbs device, for a host with a real RDMA NIC).
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import struct
import sys
import time
from typing import Any

try:
    from emu.interop import contract as C
except ImportError:  # in the guest: the copy next to this file
    import contract as C  # type: ignore[no-redef]

import pyverbs.enums as e
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

#: rxe has no packet trimming: a trimmed WRITE_MIDDLE (payload cut by the switch) is an
#: invalid request to it — it NAKs, the requester's QP goes to error (REM_INV_REQ_ERR) —
#: so as the **server** (the receiver of the trimmed packets) ``trimming`` is a case it
#: does not support, not one it fails; as the client it sends and reacts to the peer's NAKs
SERVER_CASES, CLIENT_CASES = set(C.CASES) - {"trimming"}, set(C.CASES)
_U64 = struct.Struct("<Q")
#: ibv_wc_status values (libibverbs ABI) by name, for the reasons we print
WC_STATUS = ("SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
             "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
             "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR",
             "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR",
             "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR")
MTUS = {256: e.IBV_MTU_256, 512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024, 2048: e.IBV_MTU_2048,
        4096: e.IBV_MTU_4096}
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
          | e.IBV_ACCESS_REMOTE_ATOMIC)


class CaseError(Exception):
    """This side saw the case fail (exit 1)."""


def _params(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split() if "=" in p)


class Dev:
    """The verbs device, its PD and the GID index of ``$LOCAL``."""

    def __init__(self, name: str, local: str, mtu: int) -> None:
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.name, self.mtu = name, mtu
        self.gid_index, self.gid = self._gid_of(local)

    def _gid_of(self, local: str) -> tuple[int, str]:
        want = ipaddress.ip_address(local)
        if want.version == 4:
            want = ipaddress.IPv6Address(f"::ffff:{local}")
        base = f"/sys/class/infiniband/{self.name}/ports/1"
        found = []
        for i in range(int(self.ctx.query_port(1).gid_tbl_len)):
            try:
                with open(f"{base}/gids/{i}") as f:
                    gid = ipaddress.IPv6Address(f.read().strip())
                with open(f"{base}/gid_attrs/types/{i}") as f:
                    kind = f.read().strip()
            except (OSError, ValueError):
                continue
            if int(gid):
                found.append(f"{i}:{gid}({kind})")
            if gid == want and kind.lower().replace(" ", "") == "rocev2":
                return i, str(gid)
        raise CaseError(f"no RoCEv2 GID for {local} on {self.name} (have {', '.join(found)})")


class Conn:
    """One RC QP with its CQs and one registered region."""

    def __init__(self, dev: Dev, size: int) -> None:
        self.dev, self.size = dev, size
        self.mr = MR(dev.pd, max(size, 8), ACCESS)
        self.scq, self.rcq = CQ(dev.ctx, 1024), CQ(dev.ctx, 1024)
        cap = QPCap(max_send_wr=512, max_recv_wr=64, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(dev.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.rcq,
                                        cap=cap, sq_sig_all=0))
        self.psn = random.getrandbits(24)

    def info(self) -> dict[str, Any]:
        return {"qpn": self.qp.qp_num, "psn": self.psn, "gid": self.dev.gid,
                "address": os.environ.get("LOCAL", ""), "port": 4791, "rkey": self.mr.rkey,
                "va": self.mr.buf, "len": self.size}

    def connect(self, peer: dict[str, Any]) -> None:
        """RESET → INIT → RTR → RTS with the peer's QPN and PSN (contract §4)."""
        gid = peer.get("gid") or f"::ffff:{peer['address']}"
        a = QPAttr(port_num=1)
        a.pkey_index = 0
        a.qp_access_flags = ACCESS
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                       | e.IBV_QP_ACCESS_FLAGS)
        a = QPAttr(qp_state=e.IBV_QPS_RTR, path_mtu=MTUS[self.dev.mtu])
        a.dest_qp_num = int(peer["qpn"])
        a.rq_psn = int(peer["psn"])
        a.max_dest_rd_atomic = 16
        a.min_rnr_timer = 12
        gr = GlobalRoute(dgid=GID(ipaddress.IPv6Address(gid).exploded),
                         sgid_index=self.dev.gid_index)
        gr.hop_limit = 64
        a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                       | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC
                       | e.IBV_QP_MIN_RNR_TIMER)
        a = QPAttr(qp_state=e.IBV_QPS_RTS)
        a.timeout, a.retry_cnt, a.rnr_retry = 14, 7, 7
        a.sq_psn = self.psn
        a.max_rd_atomic = 16
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
                       | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)

    def new_region(self, size: int) -> None:
        self.mr.close()
        self.mr = MR(self.dev.pd, max(size, 8), ACCESS)
        self.size = size

    def put(self, data: bytes, off: int = 0) -> None:
        if data:
            self.mr.write(data, len(data), off)

    def get(self, n: int | None = None, off: int = 0) -> bytes:
        n = self.size if n is None else n
        return bytes(self.mr.read(n, off)) if n else b""

    def _sge(self, off: int, n: int) -> SGE:
        return SGE(self.mr.buf + off, n, self.mr.lkey)

    def _post(self, opcode: int, off: int, n: int, wr_id: int) -> SendWR:
        return SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[self._sge(off, n)],
                      send_flags=e.IBV_SEND_SIGNALED)

    def write(self, off: int, n: int, va: int, rkey: int, wr_id: int) -> None:
        wr = self._post(e.IBV_WR_RDMA_WRITE, off, n, wr_id)
        wr.set_wr_rdma(rkey, va)
        self.qp.post_send(wr)

    def read(self, off: int, n: int, va: int, rkey: int, wr_id: int) -> None:
        wr = self._post(e.IBV_WR_RDMA_READ, off, n, wr_id)
        wr.set_wr_rdma(rkey, va)
        self.qp.post_send(wr)

    def send(self, off: int, n: int, wr_id: int) -> None:
        self.qp.post_send(self._post(e.IBV_WR_SEND, off, n, wr_id))

    def recv(self, off: int, n: int, wr_id: int) -> None:
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[self._sge(off, n)]))

    def atomic(self, add: bool, off: int, va: int, rkey: int, a: int, b: int, wr_id: int
               ) -> None:
        """FETCH_AND_ADD ``a``, or COMPARE_AND_SWAP compare ``a`` swap ``b``."""
        op = e.IBV_WR_ATOMIC_FETCH_AND_ADD if add else e.IBV_WR_ATOMIC_CMP_AND_SWP
        wr = self._post(op, off, 8, wr_id)
        wr.set_wr_atomic(rkey, va, a, b)
        self.qp.post_send(wr)

    def wait(self, cq: CQ, n: int, timeout: float, what: str) -> list[Any]:
        """``n`` successful completions, or CaseError naming ``what``. Polls with short
        sleeps: busy polling would starve rxe's own work on a one-CPU guest."""
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        nap = 0.0
        while len(got) < n:
            k, wcs = cq.poll(n - len(got))
            if k:
                got += wcs[:k]
                nap = 0.0
                continue
            if time.monotonic() > deadline:
                raise CaseError(f"{what}: {len(got)} of {n} completions within {timeout:g} s")
            time.sleep(nap)
            nap = min(0.002, nap + 0.0002)
        bad = [w for w in got if w.status != e.IBV_WC_SUCCESS]
        if bad:
            name = WC_STATUS[bad[0].status] if bad[0].status < len(WC_STATUS) else bad[0].status
            raise CaseError(f"{what}: completion {name} (vendor_err {bad[0].vendor_err})")
        return got

    def close(self) -> None:
        for o in (self.qp, self.scq, self.rcq, self.mr):
            try:
                o.close()
            except Exception:  # noqa: BLE001 - closing what a failed case left
                pass


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


_write = C.write_received


def _writes(c: Conn, peer: dict[str, Any], n: int, t: float, rkey: int | None = None,
            chunk: int = C.MiB, depth: int = 8) -> None:
    offs = list(range(0, n, chunk)) or [0]
    posted = done = 0
    while done < len(offs):
        while posted < len(offs) and posted - done < depth:
            o = offs[posted]
            c.write(o, min(chunk, n - o), int(peer["va"]) + o,
                    int(peer["rkey"]) if rkey is None else rkey, posted + 1)
            posted += 1
        done += len(c.wait(c.scq, 1, t, f"WRITE at offset {offs[done]}"))


# -- client ---------------------------------------------------------------------------
def _hello(env: C.Env, s: C.Session, conns: list[Conn], **extra: Any) -> list[dict]:
    s.send({"type": "hello", "version": C.VERSION, "transport": env.transport,
            "testcase": env.testcase, "conns": [c.info() for c in conns], **extra})
    peers = s.recv("server").get("conns") or []
    if len(peers) != len(conns):
        raise C.ProtocolError(f"server gave {len(peers)} connection(s), expected {len(conns)}")
    for c, p in zip(conns, peers, strict=True):
        c.connect(p)
    return peers


def _finish(s: C.Session, **done: Any) -> None:
    s.send({"type": "done", "ok": True, "error": None, **done})
    bye = s.recv("bye")
    if not bye.get("ok", False):
        raise CaseError(f"server says: {bye.get('error')}")


def client(env: C.Env, dev: Dev) -> None:
    case, t, files = env.testcase, env.timeout, env.data_dir
    s = C.connect(env.peer, env.port, t)
    conns: list[Conn] = []
    try:
        if case == "handshake" or case == "sendrecv":
            data = _read(os.path.join(files, "payload.bin"))
            conns = [Conn(dev, len(data))]
            conns[0].put(data)
            _hello(env, s, conns, size=len(data))
            chunk = len(data) if case == "handshake" else C.SENDRECV_CHUNK
            n = len(data) // chunk
            for i in range(n):
                conns[0].send(i * chunk, chunk, i + 1)
            conns[0].wait(conns[0].scq, n, t, "SEND")
            _finish(s)
        elif case in C.TRANSFER_SIZES or case == "badkey":
            data = _read(os.path.join(files, "payload.bin"))
            conns = [Conn(dev, len(data))]
            conns[0].put(data)
            [peer] = _hello(env, s, conns, size=len(data))
            if case == "badkey":
                try:
                    _writes(conns[0], peer, len(data), t, rkey=int(peer["rkey"]) ^ C.BADKEY_XOR)
                except CaseError as err:
                    s.send({"type": "done", "ok": True, "error": None, "status": str(err)})
                    s.recv("bye")
                    return
                s.send({"type": "done", "ok": False, "error": "WRITE with a wrong key succeeded"})
                raise CaseError("a WRITE with a wrong R_Key completed successfully")
            _writes(conns[0], peer, len(data), t)
            _finish(s)
        elif case == "read":
            conns = [Conn(dev, 0)]
            [peer] = _hello(env, s, conns, size=0)
            c = conns[0]
            c.new_region(int(peer["len"]))
            offs = list(range(0, c.size, C.MiB))
            for i, o in enumerate(offs):
                c.read(o, min(C.MiB, c.size - o), int(peer["va"]) + o, int(peer["rkey"]), i + 1)
            c.wait(c.scq, len(offs), t, "READ")
            _write(env, "payload.bin", c.get())
            _finish(s)
        elif case == "atomics":
            conns = [Conn(dev, 16)]
            [peer] = _hello(env, s, conns, size=8)
            c, va, rkey = conns[0], int(peer["va"]), int(peer["rkey"])
            c.atomic(True, 0, va, rkey, C.ATOMIC_ADD, 0, 1)
            c.wait(c.scq, 1, t, "FETCH_AND_ADD")
            c.atomic(False, 8, va, rkey, C.ATOMIC_COMPARE, C.ATOMIC_SWAP, 2)
            c.wait(c.scq, 1, t, "COMPARE_AND_SWAP")
            got = c.get(16)
            fetched = [_U64.unpack_from(got, 0)[0], _U64.unpack_from(got, 8)[0]]
            _write(env, "atomics.json", json.dumps({"fetched": fetched}).encode())
            _finish(s, fetched=fetched)
        elif case == "multiconn":
            datas = [_read(os.path.join(files, f"payload-{i}.bin")) for i in range(C.MULTICONN_N)]
            conns = [Conn(dev, len(d)) for d in datas]
            for c, d in zip(conns, datas, strict=True):
                c.put(d)
            peers = _hello(env, s, conns, size=len(datas[0]))
            for i, (c, p) in enumerate(zip(conns, peers, strict=True)):
                c.write(0, c.size, int(p["va"]), int(p["rkey"]), i + 1)
            for i, c in enumerate(conns):
                c.wait(c.scq, 1, t, f"WRITE on connection {i}")
            _finish(s)
        elif case == "teardown":
            for k, name in enumerate(("payload.bin", "payload2.bin")):
                data = _read(os.path.join(files, name))
                c = Conn(dev, len(data))
                c.put(data)
                [peer] = _hello(env, s, [c], size=len(data))
                _writes(c, peer, len(data), t)
                c.close()
                if k == 0:
                    s.send({"type": "done", "ok": True, "error": None})
            _finish(s)
        else:
            raise AssertionError(case)
    finally:
        for c in conns:
            c.close()
        s.close()


# -- server ---------------------------------------------------------------------------
def _serve_one(env: C.Env, dev: Dev, s: C.Session, hello: dict[str, Any]) -> list[Conn]:
    case, t = env.testcase, env.timeout
    for key, want in (("version", C.VERSION), ("transport", env.transport),
                      ("testcase", env.testcase)):
        if hello.get(key) != want:
            raise C.ProtocolError(f"hello has {key}={hello.get(key)!r}, expected {want!r}")
    size, n = int(hello.get("size", 0)), len(hello.get("conns") or [])
    if not 1 <= n <= 64:
        raise C.ProtocolError(f"hello has {n} connection objects")
    fill = {"read": "payload.bin", "badkey": "target.bin"}
    if case == "handshake":
        conns = [Conn(dev, C.HANDSHAKE_RECV)]
    elif case in fill:
        data = _read(os.path.join(env.data_dir, fill[case]))
        conns = [Conn(dev, len(data))]
        conns[0].put(data)
    elif case == "atomics":
        conns = [Conn(dev, 8)]
        conns[0].put(_U64.pack(C.ATOMIC_INITIAL))
    elif case == "sendrecv":
        conns = [Conn(dev, size)]
    else:
        conns = [Conn(dev, size) for _ in range(n)]
    for c, p in zip(conns, hello["conns"], strict=False):
        c.connect(p)
    if case == "handshake":
        conns[0].recv(0, C.HANDSHAKE_RECV, 1)
    elif case == "sendrecv":
        for i in range(size // C.SENDRECV_CHUNK):
            conns[0].recv(i * C.SENDRECV_CHUNK, C.SENDRECV_CHUNK, i + 1)
    s.send({"type": "server", "version": C.VERSION, "conns": [c.info() for c in conns]})
    done = s.recv("done")
    if case == "handshake":
        [wc] = conns[0].wait(conns[0].rcq, 1, t, "receive")
        _write(env, "payload.bin", conns[0].get(wc.byte_len))
    elif case == "sendrecv":
        conns[0].wait(conns[0].rcq, size // C.SENDRECV_CHUNK, t, "receive")
    if not done.get("ok", False):
        raise CaseError(f"client says: {done.get('error')}")
    return conns


def server(env: C.Env, dev: Dev) -> None:
    case = env.testcase
    s = C.listen(env.port, env.timeout)
    try:
        conns = _serve_one(env, dev, s, s.recv("hello"))
        try:
            for name, i, n in C.server_files(case, len(conns)):
                _write(env, name, conns[i].get() if n is None else conns[i].get(n))
        finally:
            for c in conns:
                c.close()
        if case == "teardown":
            conns = _serve_one(env, dev, s, s.recv("hello"))
            _write(env, "payload2.bin", conns[0].get())
            for c in conns:
                c.close()
        s.send({"type": "bye", "ok": True, "error": None})
    except (CaseError, C.ProtocolError) as err:
        try:
            s.send({"type": "bye", "ok": False, "error": str(err)})
        except OSError:
            pass
        raise
    finally:
        s.close()


def main() -> int:
    try:
        env = C.Env.from_environ(dict(os.environ))
    except (KeyError, ValueError) as err:
        print(f"linux-rxe endpoint: {err}", file=sys.stderr)
        return C.EXIT_FAILED
    if env.transport != "roce" or env.testcase not in (SERVER_CASES if env.role == "server"
                                                       else CLIENT_CASES):
        print(f"linux-rxe: {env.transport}/{env.testcase} not supported", file=sys.stderr)
        return C.EXIT_UNSUPPORTED
    p = _params(env.params)
    try:
        mtu = int(p.get("mtu") or os.environ.get("PMTU") or 4096)
        dev = Dev(p.get("dev", "rxe0"), env.local, mtu)
        (server if env.role == "server" else client)(env, dev)
    except (CaseError, C.ProtocolError) as err:
        print(f"linux-rxe {env.role} {env.testcase}: {err}", file=sys.stderr)
        return C.EXIT_FAILED
    except Exception as err:  # noqa: BLE001 - pyverbs raises its own errors; all are a failure
        print(f"linux-rxe {env.role} {env.testcase}: {type(err).__name__}: {err}",
              file=sys.stderr)
        return C.EXIT_FAILED
    print(f"linux-rxe {env.role} roce {env.testcase}: ok (path MTU {dev.mtu}, GID index "
          f"{dev.gid_index} {dev.gid})")
    return C.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

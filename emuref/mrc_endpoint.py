# SPDX-License-Identifier: GPL-2.0-only
"""emu-ref's interop endpoint for ``TRANSPORT=mrc`` (``docs/interop.md`` §4–§5, MRC).

:mod:`emuref.endpoint` hands ``TRANSPORT=mrc`` here (its ``main`` imports this module
only then, so RoCEv2 and UET runs never load it). Like the RoCEv2/UET endpoint this
process is its own daemon: it binds UDP 4971 on ``$LOCAL`` to receive MRC, and one
UDP socket per EV on ``$LOCAL`` to send from — in the UDP EV format a packet's EV *is*
its source port, so spraying means sending from several bound ports (unconnected
sockets with DF set over IPv4, so the kernel writes IP ID 0 and the ICRC computed
for that header holds, as on the RoCEv2 path). One select loop runs
:class:`emuref.mrc_qp.MrcNic`, the TCP exchange reuses :class:`emuref.endpoint.Exchange`.

Cases: ``handshake`` and ``sendrecv`` are WRITE with immediate, the others plain
WRITEs; ``read`` and ``atomics`` do not exist in MRC (exit 127).

Settings (the environment, as the implementations file's ``env`` gives them):
``EMUREF_MRC_M_FIELD`` = ``skip`` (default) or ``ecn`` — what SETH's M field carries
(:data:`emuref.mrc_qp.M_FIELDS`); ``EMUREF_MRC_EV_FORMAT`` = ``udp`` (default) or ``stev``
(IPv6 only: the EV in the source port and the flow label) and ``EMUREF_MRC_STEV_SPLIT`` =
``16+16`` (default) or e.g. ``12+20@0xd000`` (:mod:`emuref.mrc_stev`).
"""

from __future__ import annotations

import ipaddress
import os
import random
import selectors
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from emuref import mrc_wire as W
from emuref.endpoint import (
    MSG_MAX,
    TRANSFER,
    VERSION,
    CaseError,
    Env,
    Exchange,
    connect_exchange,
    log,
    run_case,
)
from emuref.memory import Memory
from emuref.mrc_nic import MrcNic
from emuref.mrc_qp import M_FIELDS, Completion, MrcQp
from emuref.mrc_stev import EvFormat, label_of, lease, want_labels
from emuref.mrc_stev import parse as parse_evfmt

#: the EVs (UDP source ports) emu-ref sprays over: 8 consecutive ports, clear of emu's
#: MRC EVs (53248–65535) and UET entropies (49152–49215), so a capture tells them apart
EV_BASE, EV_COUNT = 50176, 8
#: the receive window emu-ref offers (PSNs, 8 MPR units: 4 MiB at PMTU 4096, a quarter of
#: the 16 MiB receive buffer, so a peer filling it does not overrun a slow Python receiver)
MPR = 1024
SUPPORTED = {*TRANSFER, "handshake", "sendrecv", "badkey", "multiconn", "teardown"}
NOT_IN_MRC = {"read", "atomics"}
_IP_PMTUDISC_DO = 2
_IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
_IPV6_RECVTCLASS = getattr(socket, "IPV6_RECVTCLASS", 66)
_IPV6_TCLASS = getattr(socket, "IPV6_TCLASS", 67)


def _bufs(s: socket.socket, size: int) -> None:
    """Big socket buffers (forced past the sysctl limits when root, as the runner is):
    a burst of a whole window must not be dropped by our own kernel."""
    for force, plain in ((_SO_RCVBUFFORCE, socket.SO_RCVBUF),
                         (_SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            s.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, plain, size)


class MrcTransport:
    """The daemon part: the receive socket, the EV sockets, the NIC, the loop."""

    def __init__(self, local: str, peer: str, pmtu: int, m_field: str = "skip",
                 evfmt: EvFormat | None = None) -> None:
        self.local, self.peer = local, peer
        self.peer_ip = ipaddress.ip_address(peer)
        self.fam = socket.AF_INET6 if ":" in local else socket.AF_INET
        self.evfmt = evfmt = evfmt or EvFormat()
        self.rx = self._socket(W.UDP_PORT)
        if self.fam == socket.AF_INET:
            self.rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        else:
            self.rx.setsockopt(socket.IPPROTO_IPV6, _IPV6_RECVTCLASS, 1)
            if evfmt.stev:
                want_labels(self.rx)
        #: EV → the socket bound to its source port. STEV: EV k is (port k above the
        #: split's base, flow label k + 1), the label leased toward the peer
        self.tx: dict[int, socket.socket] = {}
        self.labels: dict[int, int] = {}
        mask = (1 << evfmt.sport_bits) - 1 if evfmt.stev else 0xFFFF
        k = 0
        while len(self.tx) < EV_COUNT and k < 64:
            port = evfmt.base | ((EV_BASE + k) & mask) if evfmt.stev else EV_BASE + k
            ev = (((port & mask) << evfmt.label_bits) | (k + 1)) if evfmt.stev else port
            k += 1
            try:
                s = self._socket(port)
            except OSError:
                continue  # taken: the next one
            if evfmt.stev:
                try:
                    lease(s, peer, evfmt.fields(ev)[1])
                except OSError as e:
                    s.close()
                    raise CaseError(f"flow label {evfmt.fields(ev)[1]:#x} toward {peer}: "
                                    f"the kernel refused the lease ({e})") from None
                self.labels[ev] = evfmt.fields(ev)[1]
            self.tx[ev] = s
        if not self.tx:
            raise CaseError(f"no free UDP port for an EV in {EV_BASE}..{EV_BASE + 63}")
        self.memory = Memory()
        self.rng = random.Random()
        self.nic = MrcNic(local, self.memory, self.rng, evs=sorted(self.tx), pmtu=pmtu,
                          mpr=MPR, m_field=m_field, evfmt=evfmt)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.rx, selectors.EVENT_READ, W.UDP_PORT)
        for p, s in self.tx.items():  # nothing should arrive there; read it if it does
            self.sel.register(s, selectors.EVENT_READ, p)
        self.send_drops = 0

    def _socket(self, port: int) -> socket.socket:
        s = socket.socket(self.fam, socket.SOCK_DGRAM)
        _bufs(s, 16 << 20)
        if self.fam == socket.AF_INET:
            s.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)
        try:
            s.bind((self.local, port))
        except OSError:
            s.close()
            raise
        s.setblocking(False)
        return s

    # -- memory and connection data -------------------------------------------------------

    def register(self, data: bytearray) -> tuple[int, int]:
        """Register ``data``; (key, va). Keys and addresses are random, as a NIC's are."""
        key = self.rng.getrandbits(32) | 1
        va = self.rng.getrandbits(40) << 12
        self.memory.register(key, va, data)
        return key, va

    def conn_object(self, qp: MrcQp, key: int, va: int, n: int) -> dict[str, Any]:
        return {"qpn": qp.qpn, "psn": qp.next_psn, "address": self.local,
                "port": W.UDP_PORT, "mpr": qp.mpr, "rkey": key, "va": va, "len": n}

    @staticmethod
    def connect(qp: MrcQp, obj: dict[str, Any]) -> None:
        mpr = int(obj.get("mpr") or W.MPR_UNIT)
        qp.connect(str(obj["address"]), int(obj.get("port") or W.UDP_PORT), int(obj["qpn"]),
                   int(obj["psn"]), mpr)

    @property
    def completions(self) -> Any:
        return self.nic.completions

    def stats(self) -> dict[str, Any]:
        return {**self.nic.counters(), "send_drops": self.send_drops,
                "evs": sorted(self.tx)}

    # -- the loop ---------------------------------------------------------------------------

    def _flush(self, now: float) -> None:
        for data, to, dport, ev in self.nic.datagrams_to_send(now):
            s = self.tx.get(ev) or next(iter(self.tx.values()))
            label = self.labels.get(ev)
            try:
                # STEV: the flow label rides in the address's flowinfo (leased)
                s.sendto(data, (to, dport) if label is None else (to, dport, label, 0))
            except BlockingIOError:
                self.send_drops += 1  # a full socket buffer drops like a NIC queue
            except OSError as e:
                log(f"sendto {to}:{dport}: {e}")

    def _rx(self, s: socket.socket, dport: int, now: float) -> None:
        for _ in range(256):
            try:
                data, anc, _flags, addr = s.recvmsg(65536, 64)
            except BlockingIOError:
                return
            tos, label = 0, None
            for lvl, typ, val in anc:
                if lvl == socket.IPPROTO_IP and typ == socket.IP_TOS and val:
                    tos = val[0]
                elif lvl == socket.IPPROTO_IPV6 and typ == _IPV6_TCLASS and len(val) >= 4:
                    tos = struct.unpack("i", val[:4])[0] & 0xFF
                else:
                    label = label_of(lvl, typ, val) if label is None else label
            try:
                src = ipaddress.ip_address(addr[0].split("%")[0])
            except ValueError:
                continue
            if src != self.peer_ip:
                continue
            self.nic.receive_datagram(data, str(src), addr[1], now, dport=dport, tos=tos,
                                      label=label)

    def pump(self, until: Callable[[], bool], deadline: float, tcp: Exchange | None = None
             ) -> None:
        """Run the transport until ``until()`` or ``deadline`` (CaseError); with ``tcp``,
        also read its lines so ``until`` can look at them."""
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
                t = self.nic.get_timer()
                wait = 0.05 if t is None else max(0.0, min(0.05, t - now))
                for k, _ in self.sel.select(wait):
                    if k.data == "tcp":
                        assert tcp is not None
                        tcp.fill()
                    else:
                        self._rx(k.fileobj, k.data, time.monotonic())  # type: ignore[arg-type]
                now = time.monotonic()
                t = self.nic.get_timer()
                if t is not None and t <= now:
                    self.nic.handle_timer(now)
        finally:
            if tcp is not None:
                self.sel.unregister(tcp.sock)

    def wait(self, want: Callable[[Completion], bool], n: int, deadline: float
             ) -> list[Completion]:
        """The next ``n`` completions ``want`` accepts (others stay queued)."""
        got: list[Completion] = []

        def ready() -> bool:
            for c in list(self.completions):
                if len(got) < n and want(c):
                    self.completions.remove(c)
                    got.append(c)
            return len(got) >= n

        self.pump(ready, deadline)
        return got


def _is_write(c: Completion) -> bool:
    return c.op == "WRITE"


def _is_recv(c: Completion) -> bool:
    return c.op == "RECV_RDMA_WITH_IMM"


# -- the cases ----------------------------------------------------------------------------


def _hello(ex: Exchange, env: Env, tr: MrcTransport, qps: list[MrcQp], size: int
           ) -> list[dict[str, Any]]:
    """Send a hello for ``qps``, read the server's objects, connect each QP to its peer."""
    ex.send({"type": "hello", "version": VERSION, "transport": env.transport,
             "testcase": env.case, "conns": [tr.conn_object(q, 0, 0, 0) for q in qps],
             "size": size})
    srv = ex.recv(env.deadline, "server")
    peers = srv.get("conns") or []
    if srv.get("version") != VERSION or len(peers) != len(qps):
        raise CaseError(f"unexpected server reply {srv}")
    for q, p in zip(qps, peers, strict=True):
        tr.connect(q, p)
    return peers


def _write_all(tr: MrcTransport, env: Env, jobs: list[tuple[MrcQp, bytes, int, int,
                                                             int | None]]) -> None:
    """Post (qp, data, va, rkey, imm) WRITEs, each cut into messages of at most MSG_MAX
    unless it has an immediate, and wait until every one completed successfully."""
    n = 0
    for qp, data, va, rkey, imm in jobs:
        view = memoryview(data)
        if imm is not None:
            qp.post_write(n, view, va, rkey, imm)
            n += 1
            continue
        for off in range(0, max(1, len(data)), MSG_MAX):
            qp.post_write(n, view[off:off + MSG_MAX], va + off, rkey)
            n += 1
    bad = [c for c in tr.wait(_is_write, n, env.deadline) if c.status != "SUCCESS"]
    if bad:
        raise CaseError(f"WRITE completed with {bad[0].status}")


def client(env: Env, tr: MrcTransport) -> None:
    ex = connect_exchange(env)
    case = env.case
    nconn = 4 if case == "multiconn" else 1
    if case == "multiconn":
        payloads = [(env.data / f"payload-{i}.bin").read_bytes() for i in range(nconn)]
        size = max(len(p) for p in payloads)
    else:
        payloads = [(env.data / "payload.bin").read_bytes()]
        size = 4096 if case == "badkey" else len(payloads[0])
    qps = [tr.nic.create_qp() for _ in range(nconn)]
    peers = _hello(ex, env, tr, qps, size)
    result: dict[str, Any] = {"type": "done", "ok": True, "error": None}
    last = False
    try:
        if case == "handshake":
            _write_all(tr, env, [(qps[0], payloads[0], int(peers[0]["va"]),
                                  int(peers[0]["rkey"]), 0x600D)])
        elif case == "sendrecv":
            k = 16 * 1024
            _write_all(tr, env, [(qps[0], payloads[0][i * k:(i + 1) * k],
                                  int(peers[0]["va"]) + i * k, int(peers[0]["rkey"]), i)
                                 for i in range(16)])
        elif case == "badkey":
            qps[0].post_write(1, payloads[0][:4096], int(peers[0]["va"]),
                              int(peers[0]["rkey"]) ^ 0x5A5A)
            (c,) = tr.wait(_is_write, 1, env.deadline)
            result["status"] = c.status
            if c.status == "SUCCESS":
                raise CaseError("WRITE with a wrong key completed successfully")
        else:  # transfer-*, loss, duplication, reordering, trimming, multiconn, teardown
            _write_all(tr, env, [(q, p, int(o["va"]), int(o["rkey"]), None)
                                 for q, p, o in zip(qps, payloads, peers, strict=True)])
        if case == "teardown":
            # connection A is done: destroy it, then the second hello for connection B
            tr.nic.destroy_qp(qps[0].qpn)
            ex.send(result)
            second = (env.data / "payload2.bin").read_bytes()
            qb = tr.nic.create_qp()
            (pb,) = _hello(ex, env, tr, [qb], len(second))
            _write_all(tr, env, [(qb, second, int(pb["va"]), int(pb["rkey"]), None)])
            last = True
    except CaseError as e:
        result.update(ok=False, error=str(e))
    if case != "teardown" or last or not result["ok"]:
        ex.send(result)
    # keep answering the transport (late SACKs, a repeated ACK) until bye
    tr.pump(lambda: bool(ex.lines) or ex.eof, env.deadline, tcp=ex)
    bye = ex.recv(env.deadline, "bye")
    if not result["ok"]:
        raise CaseError(result["error"])
    if not bye.get("ok"):
        raise CaseError(f"server says: {bye.get('error')}")


def _serve_round(env: Env, tr: MrcTransport, ex: Exchange, hello: dict[str, Any]
                 ) -> tuple[list[MrcQp], list[bytearray], dict[str, Any]]:
    """One hello: regions, QPs and receives, the reply, then serve until ``done``."""
    case = env.case
    nconn = 4 if case == "multiconn" else 1
    conns = hello.get("conns") or []
    if (hello.get("version") != VERSION or hello.get("transport") != env.transport
            or hello.get("testcase") != case or len(conns) != nconn):
        raise CaseError(f"hello does not match this side: {hello}")
    size = int(hello.get("size") or 0)
    qps, regions, objs = [], [], []
    for obj in conns:
        region = bytearray((env.data / "target.bin").read_bytes()) if case == "badkey" \
            else bytearray(size)
        key, va = tr.register(region)
        qp = tr.nic.create_qp()
        tr.connect(qp, obj)
        for i in range({"handshake": 1, "sendrecv": 16}.get(case, 0)):
            qp.post_recv(i)
        qps.append(qp)
        regions.append(region)
        objs.append(tr.conn_object(qp, key, va, len(region)))
    ex.send({"type": "server", "version": VERSION, "conns": objs})
    tr.pump(lambda: bool(ex.lines) or ex.eof, env.deadline, tcp=ex)
    return qps, regions, ex.recv(env.deadline, "done")


def server(env: Env, tr: MrcTransport) -> None:
    ls = socket.create_server(("", env.port), family=socket.AF_INET6, dualstack_ipv6=True) \
        if socket.has_dualstack_ipv6() else socket.create_server(("", env.port))
    ls.settimeout(max(1.0, env.deadline - time.monotonic()))
    try:
        s, _ = ls.accept()
    except TimeoutError:
        raise CaseError("no client connected") from None
    ls.close()
    ex = Exchange(s)
    case = env.case
    out = env.data / "received"
    out.mkdir(parents=True, exist_ok=True)
    qps, regions, done = _serve_round(env, tr, ex, ex.recv(env.deadline, "hello"))
    err = None if done.get("ok") else f"client failed: {done.get('error')}"
    if case in ("handshake", "sendrecv"):
        want = 1 if case == "handshake" else 16
        try:  # the client's WRITE completed from our ACK, sent after the receive: all here
            got = tr.wait(_is_recv, want, min(env.deadline, time.monotonic() + 2.0))
        except CaseError:
            got = [c for c in tr.completions if _is_recv(c)]
        imms = [c.imm for c in got]
        if len(got) != want or any(c.status != "SUCCESS" for c in got):
            err = err or f"{len(got)} of {want} immediates completed"
        elif case == "sendrecv" and imms != list(range(16)):
            err = err or f"immediates out of MSN order: {imms}"
    if case == "multiconn":
        for i, r in enumerate(regions):
            (out / f"payload-{i}.bin").write_bytes(r)
    elif case == "badkey":
        (out / "target.bin").write_bytes(regions[0])
    else:
        (out / "payload.bin").write_bytes(regions[0])
    if case == "teardown" and err is None:
        # the client destroyed connection A and sends a second hello for B
        for q in qps:
            tr.nic.destroy_qp(q.qpn)
        _, regions2, done2 = _serve_round(env, tr, ex, ex.recv(env.deadline, "hello"))
        err = None if done2.get("ok") else f"client failed: {done2.get('error')}"
        (out / "payload2.bin").write_bytes(regions2[0])
    ex.send({"type": "bye", "ok": err is None, "error": err})
    # serve the transport until the client hangs up (its last SACKs may still be due)
    try:
        tr.pump(lambda: ex.eof, min(env.deadline, time.monotonic() + 2.0), tcp=ex)
    except CaseError:
        pass
    if err is not None:
        raise CaseError(err)


def main(env: Env) -> int:
    """Run ``env``'s case over MRC; the exit code (contract §1)."""
    if env.case in NOT_IN_MRC or env.case not in SUPPORTED:
        log(f"mrc/{env.case}: not supported" + (" (MRC has WRITE and WRITE with immediate "
                                               "only)" if env.case in NOT_IN_MRC else ""))
        return 127
    # SETH's M field (specs/mrc.md: the reconstructions disagree): "skip" (the EV skip
    # hint, CE in cc_flags; the default) or "ecn" (M is the CE echo) — the emu-ref-mrc-mecn
    # variant sets it
    m_field = os.environ.get("EMUREF_MRC_M_FIELD") or "skip"
    if m_field not in M_FIELDS:
        log(f"EMUREF_MRC_M_FIELD={m_field!r}: not one of {', '.join(M_FIELDS)}")
        return 1
    # where EVs ride (specs/mrc.md: the STEV split is read two ways): EMUREF_MRC_EV_FORMAT
    # udp (default) or stev, EMUREF_MRC_STEV_SPLIT 16+16 (default) or e.g. 12+20@0xd000
    try:
        evfmt = parse_evfmt(os.environ.get("EMUREF_MRC_EV_FORMAT") or "udp",
                            os.environ.get("EMUREF_MRC_STEV_SPLIT") or "")
    except ValueError as e:
        log(f"EMUREF_MRC_EV_FORMAT / EMUREF_MRC_STEV_SPLIT: {e}")
        return 1
    if evfmt.stev and ":" not in env.local:
        log(f"mrc/{env.case}: the STEV EV format needs IPv6 (the flow label): not supported "
            f"over {env.local}")
        return 127
    return run_case(env, lambda: MrcTransport(env.local, env.peer,
                                              int(os.environ.get("PMTU") or 4096), m_field,
                                              evfmt),
                    client, server)

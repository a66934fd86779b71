# SPDX-License-Identifier: GPL-2.0-only
"""The verbs-like client library: talk to the host's NIC daemon over its control socket.

Why synchronous with a background reader thread: the perftest-style tools
and most scripts are plain loops ("post, poll"), and the daemon *pushes*
completions, so something must read the socket while the application is busy
— a daemon thread does, filling each CQ's local queue. ``cq.poll(n)`` is then
a local operation (no round trip, like ``ibv_poll_cq``); ``cq.wait(n)``
blocks on a condition; ``await cq.wait_async(n)`` does the same from trio
(in a worker thread, cancellable). Requests are synchronous by default;
``wait=False`` pipelines posts: the request is sent ``quiet`` (the daemon
replies only if it fails; the error is kept in :attr:`Connection.async_errors`
and raised at the next post, or by a ``cq.wait`` it cuts short) — what a
bandwidth test needs, and a latency test's post costs no reply.

Data never crosses the socket: buffers come from :meth:`Device.alloc_buffer`
(shared memory), the daemon maps them at ``reg_mr``, and a remote WRITE
lands in the application's pages without the application running.
"""

from __future__ import annotations

import contextlib
import itertools
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.core.memory import Access, SharedBuffer
from emu.core.verbs import WrOpcode
from emu.nic import compact
from emu.nic.protocol import (
    NicError,
    ProtocolError,
    connect,
    decode,
    died,
    encode,
    find_sock,
    sock_path,
)

DEFAULT_ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | \
    Access.REMOTE_ATOMIC
SgList = Sequence[Sequence[int]]

if TYPE_CHECKING:
    from emu.api.endpoint import Endpoint


class _Pending:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: dict[str, Any] | None = None


class Connection:
    """One control-socket connection: request/reply by id, events to a callback."""

    def __init__(self, path: str, on_event: Any = None, timeout: float = 30.0,
                 on_wcs: Callable[[int, list[WorkCompletion]], None] | None = None) -> None:
        self.path = path
        self.timeout = timeout
        self.sock = connect(path)  # a daemon not running: DaemonDown, naming it
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending | None] = {}
        self._lock = threading.Lock()
        self._on_event = on_event
        self._on_wcs = on_wcs  # compact completion records go here (cq handle, wcs)
        #: the daemon takes compact posts (its hello said so): :meth:`post` sends them
        self.compact = False
        self.closed_reason: str | None = None
        self._reason: str | None = None  # why, if the daemon said before closing
        self.async_errors: list[dict[str, Any]] = []
        self._raised = 0  # async_errors[:_raised] were raised to the application already
        #: raise a pipelined request's refusal at the next post or short ``cq.wait``
        #: (:meth:`raise_async`); off for a caller that reads :attr:`async_errors` itself
        self.raise_pipelined = True
        self._lb = compact.RecordBuffer()
        self._cork: list[bytes] | None = None  # pipelined requests held by corked()
        self._io_lock = threading.Lock()  # one reader of the socket at a time
        self._busy = False
        self.standing_aside = False  # the reader thread waits out a busy-poll (tests look)
        self._not_busy = threading.Event()
        self._not_busy.set()
        self._reader = threading.Thread(target=self._read_loop, name="emu-nic-reader",
                                        daemon=True)
        self._reader.start()

    def call(self, op: str, *, wait: bool = True, **args: Any) -> dict[str, Any]:
        """Send a request; with ``wait`` return its result or raise :class:`NicError`."""
        req = {"id": 0, "op": op, **args}
        if not wait:
            req["quiet"] = True  # no reply unless it fails: nobody waits for one

        def build(rid: int) -> bytes:
            req["id"] = rid
            return encode(req)

        r = self._request(op, wait, build)
        assert r is not None
        return r

    def post(self, op: str, qp: int, wr: dict[str, Any], wait: bool) -> None:
        """``post_send``/``post_recv`` of one work request (protocol shape): as a compact
        record (:mod:`emu.nic.compact`) when the daemon takes them and the request fits
        one (no tag, no atomic operands), else as JSON. Same replies, same errors."""
        if self.compact and "tag" not in wr and "compare_add" not in wr:
            recv = op == "post_recv"
            kind = compact.POST_RECV if recv else compact.POST_SEND
            try:
                opcode = 0 if recv else _WR_CODES[wr.get("opcode", "SEND")]
            except (KeyError, TypeError):
                opcode = None  # let the daemon say what is wrong with it, in JSON

            def build(rid: int) -> bytes | None:
                if opcode is None:
                    return None
                return compact.pack_post(
                    kind, rid, qp, wr["wr_id"], opcode, wr["sg_list"], wr.get("remote_addr", 0),
                    wr.get("rkey", 0), wr.get("imm"), quiet=not wait,
                    signaled=wr.get("signaled", True), solicited=wr.get("solicited", False))

            if self._request(op, wait, build) is not None:
                return
        self.call(op, qp=qp, wr=wr, wait=wait)

    def _request(self, op: str, wait: bool, build: Callable[[int], bytes | None]
                 ) -> dict[str, Any] | None:
        """Send ``build(request id)``; with ``wait`` return the result or raise
        :class:`NicError`. None (nothing sent) if ``build`` returns None."""
        if self.closed_reason is not None:
            raise NicError("ECONNRESET", self.closed_reason)
        p = _Pending() if wait else None
        with self._lock:
            rid = next(self._ids)
            data = build(rid)
            if data is None:
                return None
            if p is None and self._cork is not None:
                self._cork.append(data)
                return {}
            if p is not None:
                self._pending[rid] = p
            try:
                if self._cork:  # what was corked goes first, in one write with this
                    corked, self._cork = self._cork, []
                    self.sock.sendall(b"".join(corked) + data)
                else:
                    self.sock.sendall(data)
            except OSError as e:
                self._pending.pop(rid, None)
                raise NicError("ECONNRESET", self.closed_reason or str(e)) from None
        if p is None:
            return {}
        if self._busy:  # nobody else reads: poll for the reply ourselves
            deadline = time.monotonic() + self.timeout
            while not p.event.is_set() and self.closed_reason is None:
                if time.monotonic() > deadline:
                    break
                self.poll_socket()
                if not p.event.is_set():
                    p.event.wait(50e-6)
        if not p.event.wait(0 if self._busy else self.timeout):
            raise NicError("ETIMEDOUT", f"no reply to {op} in {self.timeout} s")
        r = p.reply
        if r is None:
            raise NicError("ECONNRESET", self.closed_reason or "daemon went away")
        if not r.get("ok"):
            raise NicError(str(r.get("code", "EIO")), str(r.get("error", "")))
        return r.get("result") or {}

    def raise_async(self) -> None:
        """Raise the first pipelined request's error not raised yet (once each).

        Why: a ``wait=False`` post is sent ``quiet``, so its refusal can only come
        later; kept in :attr:`async_errors` alone it went unnoticed — a receive posted
        to a QP that could not take it left the peer's SEND to meet RNR with nothing
        said. The next post, or a ``cq.wait`` that comes back short, raises it."""
        if self.pipelined_failed():
            e = self.async_errors[self._raised]
            self._raised += 1
            raise NicError(str(e.get("code", "EIO")),
                           f"an earlier pipelined request failed: {e.get('error', '')}")

    def pipelined_failed(self) -> bool:
        """A pipelined request failed and :meth:`raise_async` has not raised it yet."""
        return self.raise_pipelined and self._raised < len(self.async_errors)

    def _read_loop(self) -> None:
        """The reader thread: wait until the socket is readable, then read and dispatch
        under :attr:`_io_lock` — the lock keeps reads and the line buffer in order when
        the application thread reads too (:meth:`busy_poll`). While a busy-poll is on,
        the thread stays out of the way (a thread hand-off per completion, with the GIL
        to win from a spinning thread, is what busy-polling saves)."""
        reason = "daemon closed the connection"
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        try:
            while self.closed_reason is None:
                if self._busy:
                    self.standing_aside = True
                    self._not_busy.wait(0.1)
                    continue
                self.standing_aside = False
                if not poller.poll(100):
                    continue
                with self._io_lock:
                    if not self._read_some():
                        break
        except (OSError, ValueError, ProtocolError) as e:
            reason = f"{reason}: {e}"
        self._closed(reason)

    def _read_some(self) -> bool:
        """Read what the socket holds (without blocking) and dispatch it; False at EOF.
        Call with :attr:`_io_lock` held."""
        while True:
            try:
                data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return True
            if not data:
                return False
            for line in self._lb.feed(data):
                if line[0] == compact.MARK:
                    self._dispatch_compact(line)
                else:
                    self._dispatch(decode(line))
            if len(data) < 1 << 16:
                return True

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "event" in msg:
            if msg["event"] == "refused":
                self._reason = str(msg.get("error"))
            elif msg["event"] == "shutdown":
                self._reason = "daemon shut down"
            if self._on_event is not None:
                self._on_event(msg)
            return
        with self._lock:
            p = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
        if p is not None:
            p.reply = msg
            p.event.set()
        elif not msg.get("ok", True):
            self.async_errors.append(msg)
            if self._on_event is not None:  # wakes a cq.wait, which then raises it
                self._on_event({"event": "request_failed", "id": msg.get("id"),
                                "code": msg.get("code"), "error": msg.get("error")})

    def _dispatch_compact(self, rec: bytes) -> None:
        """A compact completion record (the only kind a daemon sends)."""
        if rec[1] != compact.WC:
            raise ProtocolError(f"compact record kind {rec[1]} from the daemon")
        cq, items = compact.unpack_wcs(rec)
        if self._on_wcs is not None:
            self._on_wcs(cq, [WorkCompletion(w, WcStatus(st), WcOpcode(op), qpn, n, imm, src,
                                             verr)
                              for w, st, op, qpn, n, imm, src, verr in items])

    def _closed(self, reason: str) -> None:
        if self.closed_reason is not None:
            return
        if self._reason is not None:
            reason = self._reason  # the daemon said why before it hung up
        else:
            gone = died(self.path)  # killed or crashed: say so, with its pid
            if gone is not None:
                reason = f"{reason}: {gone}"
        self.closed_reason = reason
        with self._lock:
            pending, self._pending = self._pending, {}
        for p in pending.values():
            if p is not None:
                p.event.set()
        if self._on_event is not None:
            self._on_event({"event": "closed", "reason": reason})

    def poll_socket(self) -> None:
        """Take in what the daemon has pushed, on the calling thread (completions land in
        their CQs before this returns). For busy-polling loops, as an application polls
        a CQ ring itself; returns at once if another thread is reading right now."""
        if self.closed_reason is not None or not self._io_lock.acquire(blocking=False):
            return
        try:
            if not self._read_some():
                self._closed("daemon closed the connection")
        except (OSError, ValueError, ProtocolError) as e:
            self._closed(f"daemon closed the connection: {e}")
        finally:
            self._io_lock.release()

    @contextlib.contextmanager
    def corked(self) -> Iterator[None]:
        """Pipelined requests (``wait=False``) made inside go to the daemon in one write
        when the block ends (or before a synchronous call made inside), in order:
        e.g. a receive and the send that answers a message cost the daemon one wake-up
        and one read instead of two. For one thread's use at a time."""
        with self._lock:
            if self._cork is not None:
                raise RuntimeError("already corked")
            self._cork = []
        try:
            yield
        finally:
            with self._lock:
                corked, self._cork = self._cork, None
                if corked and self.closed_reason is None:
                    try:
                        self.sock.sendall(b"".join(corked))
                    except OSError as e:
                        raise NicError("ECONNRESET", self.closed_reason or str(e)) from None

    @contextlib.contextmanager
    def busy_poll(self) -> Iterator[None]:
        """While inside, the reader thread stands aside and the caller reads the socket
        itself (:meth:`poll_socket`, e.g. in a spin loop): a completion reaches a spinning
        thread without a thread hand-off. Synchronous calls still work: their reply is read
        by whoever polls (``call`` polls while it waits)."""
        self._busy = True
        self._not_busy.clear()
        try:
            yield
        finally:
            self._busy = False
            self._not_busy.set()

    def close(self) -> None:
        self._busy = False
        self._not_busy.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self._reader is not threading.current_thread():
            self._reader.join(2.0)


_WR_CODES = {op.name: int(op) for op in WrOpcode}


def _wc(d: dict[str, Any]) -> WorkCompletion:
    return WorkCompletion(d["wr_id"], WcStatus[d["status"]], WcOpcode[d["opcode"]], d["qp_num"],
                          d.get("byte_len", 0), d.get("imm"), d.get("src_qp", 0),
                          d.get("vendor_err", 0))


class Device:
    """An opened NIC (``ibv_open_device`` + a protection domain)."""

    def __init__(self, path: str, timeout: float = 30.0) -> None:
        self._cqs: dict[int, CQ] = {}
        self._qps: dict[int, QP] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=1024)  # QP/CQ async events
        self.conn = Connection(path, self._on_event, timeout, self._on_wcs)
        try:
            hello = self.conn.call("hello", compact=True)
        except BaseException:
            self.conn.close()
            raise
        self.conn.compact = hello.get("compact") is True
        self.session = hello["session"]
        self.attrs: dict[str, Any] = hello["device"]
        self.ports: list[dict[str, Any]] = self.attrs["ports"]

    @classmethod
    def open(cls, cluster: str | None = None, host: str | None = None,
             sock_path: str | None = None, timeout: float = 30.0) -> Device:
        """The daemon of ``cluster``/``host``, or the one serving this namespace."""
        if sock_path is None:
            sock_path = _sock_path(cluster, host) if cluster and host else find_sock()
        return cls(sock_path, timeout)

    @property
    def gids(self) -> list[str]:
        return [g for p in self.ports for g in p["gids"]]

    def _on_wcs(self, cq: int, wcs: list[WorkCompletion]) -> None:
        rec = self._cqs.get(cq)
        if rec is not None:
            rec._deliver(wcs)

    def _on_event(self, msg: dict[str, Any]) -> None:
        ev = msg.get("event")
        if ev == "wc":
            cq = self._cqs.get(msg["cq"])
            if cq is not None:
                cq._deliver([_wc(d) for d in msg["wcs"]])
            return
        if ev == "qp" and msg.get("qp") in self._qps:
            self._qps[msg["qp"]].state = msg["new"]
        elif ev == "cq_error" and msg.get("cq") in self._cqs:
            self._cqs[msg["cq"]].error = True
        elif ev == "closed" or ev == "request_failed":
            for cq in self._cqs.values():
                cq._deliver([])
        self.events.append(msg)

    def alloc_buffer(self, size: int) -> SharedBuffer:
        """Shared memory the daemon can map (close it when done: that unlinks it)."""
        return SharedBuffer.create(size)

    def reg_mr(self, buf: SharedBuffer, access: int = DEFAULT_ACCESS, offset: int = 0,
               length: int | None = None) -> MR:
        r = self.conn.call("reg_mr", shm=buf.name, access=int(access), offset=offset,
                           length=length)
        return MR(self, buf, r["mr"], r["lkey"], r["rkey"], r["va"], r["length"], offset)

    def create_cq(self, cqe: int = 4096) -> CQ:
        cq = CQ(self, self.conn.call("create_cq", cqe=cqe)["cq"], cqe)
        self._cqs[cq.handle] = cq
        return cq

    def create_qp(self, send_cq: CQ, recv_cq: CQ | None = None, transport: str | None = None,
                  **attrs: Any) -> QP:
        r = self.conn.call("create_qp", transport=transport, send_cq=send_cq.handle,
                           recv_cq=(send_cq if recv_cq is None else recv_cq).handle,
                           attrs=attrs)
        qp = QP(self, r["qp"], r["qpn"], r["transport"], r["info"])
        self._qps[qp.handle] = qp
        return qp

    def modify_qp(self, qp: QP, attr: dict[str, Any], mask: int) -> dict[str, Any]:
        """``ibv_modify_qp(qp, attr, mask)`` (:meth:`QP.modify`)."""
        return qp.modify(attr, mask)

    def query_qp(self, qp: QP) -> dict[str, Any]:
        """``ibv_query_qp(qp)`` (:meth:`QP.query`)."""
        return qp.query()

    def endpoint(self, transport: str = "uet", tx_cq: CQ | None = None,
                 rx_cq: CQ | None = None, cqe: int = 4096) -> Endpoint:
        """A message endpoint with libfabric's names (:mod:`emu.api.endpoint`), on its own
        transmit and receive CQs unless given."""
        from emu.api.endpoint import Endpoint

        own = tx_cq is None and rx_cq is None
        tx = tx_cq or self.create_cq(cqe)
        rx = rx_cq or (tx if tx_cq is not None else self.create_cq(cqe))
        qp = self.create_qp(tx, rx, transport=transport)
        return Endpoint(self, qp, tx, rx, own)

    def query(self) -> dict[str, Any]:
        return self.conn.call("query_device")

    def stats(self) -> dict[str, Any]:
        return self.conn.call("stats")

    def close(self) -> None:
        """Disconnect; the daemon frees every QP, CQ and MR of this device."""
        self.conn.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sock_path(cluster: str, host: str) -> str:
    return sock_path(cluster, host)


class MR:
    """A registered region: ``lkey`` for local SGEs, ``rkey``/``va`` for the peer."""

    def __init__(self, dev: Device, buf: SharedBuffer, handle: int, lkey: int, rkey: int,
                 va: int, length: int, offset: int) -> None:
        self.dev, self.buf, self.handle = dev, buf, handle
        self.lkey, self.rkey, self.va, self.length, self.offset = lkey, rkey, va, length, offset

    @property
    def view(self) -> memoryview:
        """The region's bytes in this process (the same pages the daemon writes)."""
        return self.buf.view[self.offset:self.offset + self.length]

    def addr(self, off: int = 0) -> int:
        return self.va + off

    def sge(self, off: int = 0, length: int | None = None) -> list[int]:
        """``[addr, length, lkey]`` for a scatter/gather list."""
        return [self.va + off, self.length - off if length is None else length, self.lkey]

    def remote(self) -> dict[str, int]:
        """What a peer needs to WRITE/READ here: ``{"va", "rkey", "len"}``."""
        return {"va": self.va, "rkey": self.rkey, "len": self.length}

    def dereg(self) -> None:
        self.dev.conn.call("dereg_mr", mr=self.handle)


class CQ:
    """Completions the daemon pushed; ``poll`` is local, ``wait`` blocks."""

    def __init__(self, dev: Device, handle: int, cqe: int) -> None:
        self.dev, self.handle, self.cqe = dev, handle, cqe
        self._q: deque[WorkCompletion] = deque()
        self._cond = threading.Condition()
        self.error = False
        self.overflows = 0

    def _deliver(self, wcs: list[WorkCompletion]) -> None:
        with self._cond:
            room = self.cqe - len(self._q)
            if len(wcs) > room:
                self.overflows += len(wcs) - room
                self.error = True
                wcs = wcs[:max(room, 0)]
            self._q.extend(wcs)
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._q)

    def poll(self, n: int = 1) -> list[WorkCompletion]:
        """Up to ``n`` completions, oldest first (never blocks)."""
        with self._cond:
            q = self._q
            return [q.popleft() for _ in range(min(n, len(q)))]

    def wait(self, n: int = 1, timeout: float | None = None) -> list[WorkCompletion]:
        """Block until ``n`` completions are here (or ``timeout``), and take up to ``n``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            conn = self.dev.conn
            while len(self._q) < n and conn.closed_reason is None \
                    and not conn.pipelined_failed():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            q = self._q
            if len(q) < n:  # short: say why, if a pipelined post was refused meanwhile
                conn.raise_async()
            return [q.popleft() for _ in range(min(n, len(q)))]

    async def wait_async(self, n: int = 1, timeout: float | None = None
                         ) -> list[WorkCompletion]:
        """:meth:`wait` for trio code (a worker thread; cancelling abandons it)."""
        import trio

        return await trio.to_thread.run_sync(self.wait, n, timeout, abandon_on_cancel=True)

    def destroy(self) -> None:
        self.dev.conn.call("destroy_cq", cq=self.handle)
        self.dev._cqs.pop(self.handle, None)


def _sgl(sg: Any) -> list[list[int]]:
    """Accept one SGE ``[addr, len, lkey]`` or a list of them."""
    if not sg:
        return []
    if isinstance(sg[0], int):
        return [list(sg)]
    return [list(e) for e in sg]


#: RC states a work request may not be posted in, per queue (as verbs): the receive
#: queue works from INIT on, the send queue from RTS on (in ERR both flush)
_NO_POST = {"post_recv": frozenset({"RESET"}),
            "post_send": frozenset({"RESET", "INIT", "RTR"})}


class QP:
    """A queue pair: exchange :meth:`local_info`, then :meth:`connect` — or drive it
    through RESET → INIT → RTR → RTS with :meth:`modify` as verbs programs do — then post.

    :attr:`state` follows the daemon: every reply that carries the state sets it, and
    so do ``qp`` events (a QP entering ERR on its own)."""

    def __init__(self, dev: Device, handle: int, qpn: int, transport: str,
                 info: dict[str, Any]) -> None:
        self.dev, self.handle, self.qpn, self.transport = dev, handle, qpn, transport
        self.info = info
        self.state = str(info.get("state", "INIT"))

    def _took(self, info: dict[str, Any]) -> dict[str, Any]:
        self.info = info
        if "state" in info:
            self.state = str(info["state"])
        return info

    def local_info(self) -> dict[str, Any]:
        """This QP's connection data (QPN, PSN, GID/address, port) for the peer."""
        return self._took(self.dev.conn.call("query_qp", qp=self.handle))

    def connect(self, remote: dict[str, Any]) -> None:
        """Give the peer's connection data: RESET/INIT → INIT → RTR → RTS in one call (the
        shortcut for :meth:`modify`'s three steps)."""
        self._took(self.dev.conn.call("connect", qp=self.handle, remote=remote))

    def modify(self, attr: dict[str, Any], mask: int) -> dict[str, Any]:
        """``ibv_modify_qp``: set the attributes of ``attr`` (``struct ibv_qp_attr``
        names) that ``mask`` selects (:class:`emu.core.verbs.QpAttrMask` bits, libibverbs'
        values; ``emu.api.QpAttrMask``).

        The daemon applies the IB rules for RC: each transition needs some attributes
        and takes some others, and an error names the transition and the attribute
        (``modify_qp QP 0x12: INIT→RTR needs IBV_QP_DEST_QPN``). ``qp_state`` is a state
        name or ``ibv_qp_state`` number; ``path_mtu`` an ``ibv_mtu`` code (1..5) or bytes;
        ``ah_attr`` the address vector: ``dgid`` (``::ffff:a.b.c.d`` or IPv6),
        ``sgid_index``, ``hop_limit``, ``traffic_class``, ``flow_label`` (a non-zero
        label sets the UDP source port, as RoCEv2 NICs do), ``sl``. Returns
        :meth:`query`'s dict; :attr:`state` follows."""
        info = self._took(self.dev.conn.call("modify_qp", qp=self.handle, attr=_plain(attr),
                                             mask=int(mask)))
        return dict(info.get("attr") or {})

    def query(self) -> dict[str, Any]:
        """``ibv_query_qp``: the state (``qp_state``) and attributes by ``ibv_qp_attr``
        names; the connection data (:meth:`local_info`) stays in :attr:`info`."""
        return dict(self.local_info().get("attr") or {"qp_state": self.state})

    def _post(self, op: str, wr: dict[str, Any], wait: bool) -> None:
        conn = self.dev.conn
        if self.transport == "roce" and self.state in _NO_POST[op]:
            # refused here, at once, even when pipelined (wait=False): the daemon would
            # refuse it too, but only later, where the application no longer looks
            queue = "receives are posted from INIT on" if op == "post_recv" else \
                "sends are posted from RTS on"
            raise NicError("EINVAL", f"{op} QP {self.qpn:#x}: the QP is in {self.state}; "
                                     f"{queue} (modify it first)")
        conn.raise_async()
        conn.post(op, self.handle, wr, wait)

    def post_send(self, sg: Any, wr_id: int = 0, imm: int | None = None, *,
                  signaled: bool = True, solicited: bool = False, wait: bool = True) -> None:
        op = "SEND" if imm is None else "SEND_WITH_IMM"
        self._post("post_send", {"wr_id": wr_id, "opcode": op, "sg_list": _sgl(sg), "imm": imm,
                                 "signaled": signaled, "solicited": solicited}, wait)

    def post_write(self, sg: Any, remote_addr: int, rkey: int, wr_id: int = 0,
                   imm: int | None = None, *, signaled: bool = True, wait: bool = True) -> None:
        op = "RDMA_WRITE" if imm is None else "RDMA_WRITE_WITH_IMM"
        self._post("post_send", {"wr_id": wr_id, "opcode": op, "sg_list": _sgl(sg),
                                 "remote_addr": remote_addr, "rkey": rkey, "imm": imm,
                                 "signaled": signaled}, wait)

    def post_read(self, sg: Any, remote_addr: int, rkey: int, wr_id: int = 0, *,
                  signaled: bool = True, wait: bool = True) -> None:
        self._post("post_send", {"wr_id": wr_id, "opcode": "RDMA_READ", "sg_list": _sgl(sg),
                                 "remote_addr": remote_addr, "rkey": rkey,
                                 "signaled": signaled}, wait)

    def post_atomic(self, op: str, sge: Sequence[int], remote_addr: int, rkey: int,
                    compare_add: int, swap: int = 0, wr_id: int = 0, *, wait: bool = True
                    ) -> None:
        """``op`` is ``"cmp_swap"`` or ``"fetch_add"``; the original value lands in ``sge``."""
        code = {"cmp_swap": "ATOMIC_CMP_AND_SWP", "fetch_add": "ATOMIC_FETCH_AND_ADD"}[op]
        self._post("post_send", {"wr_id": wr_id, "opcode": code, "sg_list": _sgl(sge),
                                 "remote_addr": remote_addr, "rkey": rkey,
                                 "compare_add": compare_add, "swap": swap}, wait)

    def post_recv(self, sg: Any, wr_id: int = 0, *, wait: bool = True) -> None:
        self._post("post_recv", {"wr_id": wr_id, "sg_list": _sgl(sg)}, wait)

    def post_many(self, wrs: list[dict[str, Any]], recv: bool = False, wait: bool = True
                  ) -> None:
        """Several raw work requests (protocol shape) in one message."""
        self.dev.conn.call("post_recv" if recv else "post_send", qp=self.handle, wrs=wrs,
                           wait=wait)

    def destroy(self) -> None:
        self.dev.conn.call("destroy_qp", qp=self.handle)
        self.dev._qps.pop(self.handle, None)


def _plain(v: Any) -> Any:
    """``attr`` as JSON takes it: enums as their numbers (or a state as its name)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool):
        return int(v)
    return v

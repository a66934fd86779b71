# SPDX-License-Identifier: GPL-2.0-only
"""The daemon's control server: a root-only Unix socket speaking newline-delimited JSON.

Why these choices (``docs/nic-protocol.md`` is the reference):

* **Root only, twice.** The socket's directory is 0700 and the socket 0600,
  and every connection's ``SO_PEERCRED`` uid is checked (``allowed_uids``):
  a client can make the daemon map any file in ``/dev/shm`` and write into
  it, which is root's business.
* **Completions are pushed.** Each CQ lives here as a bounded
  :class:`~emu.core.cq.CompletionQueue`; a client's writer task sends what
  its CQs hold as ``wc`` events, so a client never pays a round trip per
  poll. A client that stops reading makes its CQs overflow — counted, the CQ
  enters error and an event says so — as a real CQ overrun does.
* **Bounded everything.** Requests are read only while the client's reply
  backlog is below ``OUT_MAX`` (back-pressure, replies are never dropped);
  other async events go to a per-client queue of ``event_queue`` entries
  that drops and counts.
* **A client's resources die with its connection**: QPs destroyed, MRs
  deregistered, shared-memory mappings closed, CQs freed — all counted.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import struct
from typing import TYPE_CHECKING, Any

import trio

from emu.core import shm
from emu.core.cq import CompletionQueue
from emu.core.memory import Access, MemoryRegion, SharedBuffer
from emu.nic import compact
from emu.nic.protocol import PROTOCOL_VERSION, RUN_DIR, ProtocolError, decode, encode
from emu.nic.session import CqRec, OpError, QpRec, Session, make_send_wr, recv_wr, send_wr
from emu.nic.udp import gid_of
from emu.transports.base import Completion, StateChanged, VerbsError

if TYPE_CHECKING:
    from emu.nic.daemon import NicDaemon
    from emu.nic.slot import EngineSlot

OUT_MAX = 1024  # replies waiting for the writer before we stop reading requests
READ_STREAK = 16  # request reads in a row before the reader lets other tasks run
_UCRED = struct.Struct("3i")
#: what a request may raise: each becomes an error reply, the session carries on
_REQUEST_ERRORS = (ProtocolError, OpError, VerbsError, KeyError, ValueError, TypeError,
                   OSError)


class ControlServer:
    """Accepts clients, runs their requests against the engines, pushes their events."""

    def __init__(self, daemon: NicDaemon) -> None:
        self.d = daemon
        self.sessions: dict[int, Session] = {}
        self.cqs: dict[int, CqRec] = {}
        self.qps: dict[int, QpRec] = {}
        self.by_qpn: dict[tuple[str, int], QpRec] = {}
        self._handles = itertools.count(1)
        self._listener: Any = None
        self._inode = 0
        self._own_dir = False  # listen: the socket's directory is emu's own
        self._scope: trio.CancelScope | None = None
        self._unsent: dict[Session, None] = {}  # clients with completions for flush()
        self.c = dict.fromkeys(("clients_total", "refused", "protocol_errors", "requests",
                                "request_errors", "events_dropped", "events_orphaned",
                                "cq_overflows", "freed_qps", "freed_mrs", "freed_cqs",
                                "orphaned_shm_removed"), 0)

    # -- socket ---------------------------------------------------------------------

    def listen(self) -> Any:
        """Bind the control socket (socket 0600; its directory 0700 when it is emu's own,
        under ``RUN_DIR``, or made here); refuse if a live daemon owns it.

        Why not any directory: ``--sock /tmp/x.sock`` made ``/tmp`` itself 0700, and
        every other user's files there unreachable. The socket alone is private (bound
        under ``umask 0177``, then 0600), wherever it is."""
        path = self.d.cfg.sock_path
        parent = os.path.dirname(os.path.abspath(path))
        made = not os.path.isdir(parent)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        # the directory is emu's (made here, or its run tree): private, removed when empty
        self._own_dir = made or _within(parent, RUN_DIR)
        if self._own_dir:
            os.chmod(parent, 0o700)
        if os.path.exists(path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # stale: its daemon died
            else:
                raise RuntimeError(f"{path}: another daemon is serving it")
            finally:
                probe.close()
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # no window in which the socket is connectable by others
        try:
            raw.bind(path)
        except BaseException:
            raw.close()
            raise
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self._inode = os.stat(path).st_ino
        raw.listen(64)
        self._listener = trio.socket.from_stdlib_socket(raw)
        return self._listener

    def close_listener(self) -> None:
        if self._listener is None:
            return
        lst, self._listener = self._listener, None
        trio.lowlevel.notify_closing(lst)
        lst.close()
        path = self.d.cfg.sock_path
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == self._inode:
                os.unlink(path)
        if self._own_dir:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(path))  # the last daemon of a cluster leaves none

    async def serve(self, listener: Any) -> None:
        async with trio.open_nursery() as n:
            self._scope = n.cancel_scope
            while True:
                try:
                    sock, _ = await listener.accept()
                except (OSError, trio.ClosedResourceError):
                    if self._listener is None:
                        break  # closed for shutdown; sessions keep running until drained
                    raise
                pid, uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET,
                                                               socket.SO_PEERCRED, _UCRED.size))
                why = None
                if uid not in self.d.cfg.allowed_uids:
                    why = f"permission denied: uid {uid} may not use this NIC (root only)"
                elif len(self.sessions) >= self.d.cfg.max_clients:
                    why = f"too many clients ({self.d.cfg.max_clients})"
                if why:
                    self.c["refused"] += 1
                    n.start_soon(self._refuse, sock, why)
                    continue
                raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=sock.detach())
                raw.setblocking(False)
                s = Session(next(self._handles), raw, uid, pid, self.d.memory.alloc_pd())
                self.sessions[s.id] = s
                self.c["clients_total"] += 1
                n.start_soon(self._session, s)

    @staticmethod
    async def _refuse(sock: Any, why: str) -> None:
        """Say why, then read (and discard) what the peer sent until it hangs up: closing
        with unread data would reset the connection and lose our explanation."""
        with sock, contextlib.suppress(OSError), trio.move_on_after(2.0):
            await sock.send(encode({"event": "refused", "error": why}))
            sock.shutdown(socket.SHUT_WR)
            for _ in range(64):
                if not await sock.recv(65536):
                    break

    async def _session(self, s: Session) -> None:
        try:
            async with trio.open_nursery() as n:
                n.start_soon(self._writer, s)
                await self._reader(s)
                n.cancel_scope.cancel()
        except* OSError:
            # A client that hangs up mid-reply (BrokenPipe/ConnectionReset from the
            # writer task, wrapped in an ExceptionGroup by the nursery) ends only its
            # own session; the daemon and every other client carry on.
            pass
        finally:
            self._cleanup(s)
            s.sock.close()

    async def _reader(self, s: Session) -> None:
        """Requests in, replies out in the same turn.

        Why raw non-blocking calls and an inline send: trio's socket wrappers
        yield once after every successful call, and a reply left to the writer
        task waits for another scheduler turn — each turn ~10 µs here, and a
        latency test pays a request and a completion per message (measured:
        ``docs/measurements.md``, "Latency"). The writer task only takes over
        what the socket cannot take at once (:meth:`_send_now`)."""
        lb = compact.RecordBuffer()
        mark = compact.MARK
        sock, streak = s.sock, 0
        while not s.closing:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                streak = 0
                await trio.lowlevel.wait_readable(sock)
                continue
            if not data:
                return
            try:
                lines = lb.feed(data)
            except ProtocolError as e:
                self.c["protocol_errors"] += 1
                s.out.append(encode({"id": None, "ok": False, "code": "EPROTO", "error": str(e)}))
                await self._flush_then_close(s)
                await self._linger(sock)
                return
            touched: dict[EngineSlot, None] = {}
            for line in lines:
                if line[0] != mark and b'"reg_mr"' in line:
                    await self._attach_off_loop(s, line)
                reply = self._handle_compact(s, line, touched) if line[0] == mark else \
                    self._handle(s, line, touched)
                if reply is not None:
                    s.out.append(reply)
            for slot in touched:
                self.d.pump(slot)
            self._send_now(s)
            while len(s.out) > OUT_MAX and not s.closing:
                await s.drained.park()
            if len(data) < 65536 and not s.closing:
                # a short read emptied the socket: wait for more rather than ask a recv
                # that would only say EAGAIN (a syscall per request, on a latency test's
                # every post)
                streak = 0
                await trio.lowlevel.wait_readable(sock)
                continue
            streak += 1
            if streak >= READ_STREAK:  # a client that never pauses must not starve the rest
                streak = 0
                await trio.lowlevel.checkpoint()
        await self._flush_then_close(s)

    @staticmethod
    async def _linger(sock: socket.socket) -> None:
        """Half-close, then read and discard what the peer still sends until it hangs up
        (bounded: 4 MiB, 2 s). Closing with unread input would make the kernel reset the
        connection, and a client still writing would lose the explanation we sent."""
        with contextlib.suppress(OSError), trio.move_on_after(2.0):
            sock.shutdown(socket.SHUT_WR)
            for _ in range(64):
                await trio.lowlevel.wait_readable(sock)
                try:
                    if not sock.recv(65536):
                        break
                except BlockingIOError:
                    continue

    async def _attach_off_loop(self, s: Session, line: bytes) -> None:
        """Map the buffer a ``reg_mr`` names in a worker thread, before the request runs.

        Why: the daemon maps a region populated at once (``MAP_POPULATE``, as
        ``ibv_reg_mr`` pins pages), ~13 ms for 8 MiB here, and done inline that
        stopped the whole daemon — every other client's transfer and every port's
        serializer; a NIC keeps sending while a host registers memory. Requests of
        this session wait for it, in order; other sessions go on. Any failure is
        left to :meth:`op_reg_mr`, which attaches again and reports it."""
        try:
            name = str(decode(line)["shm"])
        except _REQUEST_ERRORS:
            return
        if name in s.buffers:
            return
        try:
            buf = await trio.to_thread.run_sync(SharedBuffer.attach, name)
        except (OSError, ValueError):
            return
        if s.closing or name in s.buffers:
            buf.close()
            return
        s.buffers[name] = [buf, 0]

    async def _flush_then_close(self, s: Session) -> None:
        s.closing = True
        s.wake()
        with trio.move_on_after(1.0):
            while s.out or s.events or s.pending is not None:
                await s.drained.park()

    def _collect(self, s: Session) -> bytes:
        """Everything queued for ``s`` as one write: replies, events, then completions."""
        chunks = list(s.out)
        s.out.clear()
        if s.events:
            chunks.extend(encode(ev) for ev in s.events)
            s.events.clear()
        for h in s.dirty:
            rec = self.cqs.get(h)
            if rec is not None and len(rec.cq):
                wcs = rec.cq.poll(len(rec.cq))
                packed = compact.pack_wcs(h, wcs) if s.compact else None
                chunks.append(packed or encode({"event": "wc", "cq": h,
                                                "wcs": [wc.to_dict() for wc in wcs]}))
        s.dirty.clear()
        return b"".join(chunks)

    def _send_now(self, s: Session) -> None:
        """Write what is queued for ``s`` without waiting; leave any rest to the writer.

        Never reorders: while an earlier write waits for room (``pending``),
        new output queues behind it for the writer task. A failed send is
        left to the writer too, whose retry raises and ends the session."""
        if s.pending is not None or not (s.out or s.events or s.dirty):
            return
        data = self._collect(s)
        try:
            sent = s.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            sent = 0  # the writer's retry raises and ends the session
        if sent < len(data):
            s.pending = memoryview(data)[sent:]
            s.wake()

    def flush(self) -> None:
        """Send the completions the last engine turn made (``NicDaemon.pump`` calls this):
        one write per client per turn, without waiting for the writer task's turn."""
        waiting, self._unsent = self._unsent, {}
        for s in waiting:
            if s.id in self.sessions:
                self._send_now(s)

    async def _writer(self, s: Session) -> None:
        """What :meth:`_send_now` could not finish, and events queued outside a turn."""
        sock = s.sock
        while True:
            if s.pending is not None:
                await trio.lowlevel.wait_writable(sock)
                try:
                    sent = sock.send(s.pending)
                except (BlockingIOError, InterruptedError):
                    continue
                rest = s.pending[sent:]
                s.pending = rest if len(rest) else None
                continue
            if not (s.out or s.events or s.dirty):
                s.drained.unpark_all()
                await s.lot.park()
                continue
            self._send_now(s)

    def push_event(self, s: Session, ev: dict[str, Any]) -> None:
        if len(s.events) >= self.d.cfg.event_queue:
            s.events_dropped += 1
            self.c["events_dropped"] += 1
            return
        s.events.append(ev)
        s.wake()

    # -- engine events --------------------------------------------------------------

    def on_event(self, slot: EngineSlot, ev: Any) -> None:
        if isinstance(ev, Completion):
            rec = self.cqs.get(ev.cq)  # type: ignore[call-overload]
            if rec is None:
                self.c["events_orphaned"] += 1
                return
            if not rec.cq.push(ev.wc):
                self.c["cq_overflows"] += 1
                if not rec.reported:
                    rec.reported = True
                    self.push_event(rec.owner, {"event": "cq_error", "cq": rec.handle,
                                                "overflows": rec.cq.overflows})
                return
            rec.owner.dirty[rec.handle] = None
            self._unsent[rec.owner] = None
            rec.owner.wake()
        elif isinstance(ev, StateChanged):
            qrec = self.by_qpn.get((slot.name, ev.endpoint))
            if qrec is None:
                self.c["events_orphaned"] += 1
                return
            self.push_event(qrec.owner, {
                "event": "qp", "qp": qrec.handle, "qpn": ev.endpoint, "old": ev.old,
                "new": ev.new, "status": ev.status.name if ev.status is not None else None,
                "reason": ev.reason,
                # IBV_EVENT_SQ_DRAINED apart from state changes (SQD → SQD, drained)
                "type": "SQ_DRAINED" if ev.reason == "SQ_DRAINED" else "STATE"})
        else:
            self.c["events_orphaned"] += 1

    # -- requests -------------------------------------------------------------------

    def _handle(self, s: Session, line: bytes, touched: dict[EngineSlot, None]
                ) -> bytes | None:
        """The reply to one request line; None for a ``quiet`` request that succeeded
        (a pipelined post whose client would only throw the reply away: not writing it
        saves a write here and a wake-up of the client's reader thread)."""
        rid = None
        self.c["requests"] += 1
        try:
            msg = decode(line)
            rid = msg.get("id")
            op = msg.get("op")
            fn = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
            if fn is None:
                raise OpError("ENOSYS", f"unknown op {op!r}")
            result = fn(s, msg, touched)
            if msg.get("quiet") is True:
                return None
            return encode({"id": rid, "ok": True, "result": result})
        except _REQUEST_ERRORS as e:
            return self._error_reply(rid, e)

    def _error_reply(self, rid: Any, e: Exception) -> bytes:
        """The error reply to a request that raised ``e`` (JSON, for either framing)."""
        if isinstance(e, ProtocolError):
            err: tuple[str, str] = ("EPROTO", str(e))
        elif isinstance(e, OpError):
            err = (e.code, str(e))
        elif isinstance(e, VerbsError):
            err = (getattr(e, "code", "EINVAL"), str(e))
        elif isinstance(e, KeyError):
            err = ("EINVAL", f"missing or unknown {e}")
        elif isinstance(e, FileNotFoundError):
            err = ("ENOENT", str(e))
        else:
            err = ("EINVAL", str(e))
        self.c["request_errors"] += 1
        return encode({"id": rid, "ok": False, "code": err[0], "error": err[1]})

    def _handle_compact(self, s: Session, rec: bytes, touched: dict[EngineSlot, None]
                        ) -> bytes | None:
        """A compact post (:mod:`emu.nic.compact`): the same work request, checks and
        replies as its JSON form, without the JSON."""
        self.c["requests"] += 1
        if rec[1] == compact.WC:
            return self._error_reply(None, OpError(
                "ENOSYS", "a compact completion record is not a request"))
        kind, flags, opcode, rid, qp, wr_id, raddr, rkey, imm, sges = compact.unpack_post(rec)
        try:
            q = self._qp(s, {"qp": qp})
            if kind == compact.POST_SEND:
                result = self._post_wrs(q, touched, False, (None,), lambda _: make_send_wr(
                    wr_id, opcode, sges, raddr, rkey, imm, 0, 0,
                    bool(flags & compact.F_SIGNALED), bool(flags & compact.F_SOLICITED)))
            else:
                result = self._post_wrs(q, touched, True, (None,),
                                        lambda _: recv_wr({"wr_id": wr_id, "sg_list": sges}))
            if flags & compact.F_QUIET:
                return None
            return encode({"id": rid, "ok": True, "result": result})
        except _REQUEST_ERRORS as e:
            return self._error_reply(rid, e)

    def _slot(self, name: str | None) -> EngineSlot:
        slots = self.d.slots
        if name is None:
            if not slots:
                raise OpError("ENODEV", "this daemon runs no transport")
            return next(iter(slots.values()))
        if name not in slots:
            raise OpError("ENODEV", f"transport {name!r} not running here "
                                    f"(running: {', '.join(slots) or 'none'})")
        return slots[name]

    def _qp(self, s: Session, m: dict[str, Any]) -> QpRec:
        rec = self.qps.get(m["qp"])
        if rec is None or rec.owner is not s:
            raise OpError("ENOENT", f"no QP {m['qp']}")
        return rec

    def op_hello(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        """``compact: true`` asks for completions as compact records; the reply's
        ``compact: true`` says compact posts are understood (:mod:`emu.nic.compact`)."""
        s.compact = m.get("compact") is True
        return {"protocol": PROTOCOL_VERSION, "session": s.id, "pd": s.pd.handle,
                "device": self.d.device_info(), "compact": True}

    def op_query_device(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        return self.d.device_info()

    def op_stats(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        return self.d.stats()

    def op_ping(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        return {}

    def op_mrc(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        """``emu mrc``: the MRC engine's QPs with their EV sets (``qpn``: one), their EV
        state changes since the last poll (``events``), an EV denied or allowed again
        (``ev`` and ``action``), or a port (plane) taken down or brought up (``port``,
        ``up``), EV_PROBEs sent (``probe_to``, ``evs``) and their answers taken
        (``probe_results``), EV and CC profiles (``profile_kind``, ``profile_action``,
        ``name``, ``spec``). Any client may ask: this is the NIC's controller."""
        slot = self._slot("mrc")
        eng = slot.engine
        try:
            if m.get("probe_to") is not None:  # EV_PROBEs out, answers read later
                now = trio.current_time()
                plane = None if m.get("plane") is None else int(m["plane"])
                evs = [int(ev) for ev in m.get("evs") or ()] or eng.probe_evs(
                    int(m.get("count") or 4))
                rids = [eng.ev_probe(str(m["probe_to"]), ev, now, plane) for ev in evs]
                t[slot] = None
                return {"request_ids": rids, "evs": evs}
            if m.get("probe_results"):
                return {"results": eng.take_probe_results()}
            if m.get("profile_kind") is not None:
                return eng.profile_op(str(m["profile_kind"]), str(m.get("profile_action")),
                                      m.get("name"), m.get("spec"))
            if m.get("port") is not None:
                t[slot] = None
                return eng.port_admin(int(m["port"]), bool(m.get("up")), trio.current_time())
            qpns = [int(m["qpn"])] if m.get("qpn") is not None else eng.qpns()
            if m.get("action") is not None:
                if m.get("qpn") is None or m.get("ev") is None:
                    raise OpError("EINVAL", "an EV action needs qpn and ev")
                qpn = qpns[0]
                eng.ev_control(qpn, int(m["ev"]), str(m["action"]), trio.current_time())
                t[slot] = None
                return {"qp": eng.ev_table(qpn)}
            if m.get("events"):
                out, dropped = [], 0
                for q in qpns:
                    evs, n = eng.ev_events(q)
                    out += [{"qpn": q, **e} for e in evs]
                    dropped += n
                return {"events": out, "drop_count": dropped}
            return {"qps": [eng.ev_table(q) for q in qpns]}
        except (VerbsError, ValueError, TypeError) as e:
            raise OpError("EINVAL", str(e)) from None

    def op_reg_mr(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        name = str(m["shm"])
        ent = s.buffers.get(name)
        if ent is None:
            ent = s.buffers[name] = [SharedBuffer.attach(name), 0]
        try:
            mr = self.d.memory.register(s.pd, ent[0], Access(int(m.get("access", 1))),
                                        offset=int(m.get("offset", 0)), length=m.get("length"),
                                        va=m.get("va"))
        except BaseException:
            if ent[1] == 0:
                s.buffers.pop(name)[0].close()
            raise
        ent[1] += 1
        h = next(self._handles)
        s.mrs[h] = mr
        return {"mr": h, "lkey": mr.lkey, "rkey": mr.rkey, "va": mr.va, "length": mr.length}

    def op_dereg_mr(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        mr = s.mrs.pop(m["mr"], None)
        if mr is None:
            raise OpError("ENOENT", f"no MR {m['mr']}")
        self._dereg(s, mr)
        return {}

    def _dereg(self, s: Session, mr: MemoryRegion) -> None:
        self.d.memory.deregister(mr)
        ent = s.buffers.get(mr.buffer.name)
        if ent is not None:
            ent[1] -= 1
            if ent[1] <= 0:
                s.buffers.pop(mr.buffer.name)[0].close()

    def op_create_cq(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        h = next(self._handles)
        self.cqs[h] = CqRec(h, CompletionQueue(int(m.get("cqe", 4096))), s)
        s.cqs.add(h)
        return {"cq": h}

    def op_destroy_cq(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        rec = self.cqs.get(m["cq"])
        if rec is None or rec.owner is not s:
            raise OpError("ENOENT", f"no CQ {m['cq']}")
        if rec.qps:
            raise OpError("EBUSY", f"CQ {rec.handle} is used by {len(rec.qps)} QP(s)")
        del self.cqs[rec.handle]
        s.cqs.discard(rec.handle)
        return {}

    def op_create_qp(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        slot = self._slot(m.get("transport"))
        cqs = []
        for key in ("send_cq", "recv_cq"):
            h = m.get(key, m.get("send_cq"))
            rec = self.cqs.get(h)  # type: ignore[arg-type]
            if rec is None or rec.owner is not s:
                raise OpError("ENOENT", f"no CQ {h} ({key})")
            cqs.append(rec)
        qpn = slot.engine.create_qp(pd=s.pd, send_cq=cqs[0].handle, recv_cq=cqs[1].handle,
                                    attrs=dict(m.get("attrs") or {}))
        h = next(self._handles)
        rec = QpRec(h, slot, qpn, s, cqs[0].handle, cqs[1].handle)
        self.qps[h] = rec
        self.by_qpn[(slot.name, qpn)] = rec
        s.qps.add(h)
        for c in cqs:
            c.qps.add(h)
        t[slot] = None
        return {"qp": h, "qpn": qpn, "transport": slot.name, "info": self._info(rec)}

    def _info(self, rec: QpRec) -> dict[str, Any]:
        eng = rec.slot.engine
        info = dict(eng.query_qp(rec.qpn))
        if info.get("address") and "gid" not in info:
            info["gid"] = gid_of(str(info["address"]))
        info.setdefault("transport", rec.slot.name)
        attr = getattr(eng, "query_qp_attr", None)
        if attr is not None:  # ibv_query_qp's attributes, where the transport has them
            info["attr"] = attr(rec.qpn)
        return info

    def op_query_qp(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        return self._info(self._qp(s, m))

    def op_connect(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        rec = self._qp(s, m)
        rec.slot.engine.connect(rec.qpn, dict(m["remote"]), trio.current_time())
        t[rec.slot] = None
        return self._info(rec)

    def op_modify_qp(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        """``ibv_modify_qp``: ``attr`` (``struct ibv_qp_attr`` names) under ``mask``
        (``ibv_qp_attr_mask`` bits), checked by the transport against the IB rules.
        Without ``mask`` but with ``remote`` it is ``connect`` (the old alias)."""
        rec = self._qp(s, m)
        if "mask" not in m:
            if "remote" in m:
                return self.op_connect(s, m, t)
            raise OpError("EINVAL", "modify_qp needs mask (ibv_qp_attr_mask bits) and attr")
        fn = getattr(rec.slot.engine, "modify", None)
        if fn is None:
            raise OpError("EOPNOTSUPP", f"transport {rec.slot.name!r} has no verbs QP state "
                                        f"machine (use connect)")
        attr = m.get("attr") or {}
        if not isinstance(attr, dict):
            raise OpError("EINVAL", "modify_qp: attr must be an object")
        gids = [gid_of(a) for i in self.d.ifaces for a in i.ipv4 + i.ipv6]
        fn(rec.qpn, attr, m["mask"], trio.current_time(), ports=max(1, len(self.d.ifaces)),
           gids=gids)
        t[rec.slot] = None
        return self._info(rec)

    def _post(self, s: Session, m: dict[str, Any], t: Any, recv: bool) -> dict[str, Any]:
        rec = self._qp(s, m)
        wrs = m["wrs"] if "wrs" in m else [m["wr"]]
        return self._post_wrs(rec, t, recv, wrs, recv_wr if recv else send_wr)

    def _post_wrs(self, rec: QpRec, t: Any, recv: bool, wrs: Any, make: Any
                  ) -> dict[str, Any]:
        """Post ``make(w)`` for each ``w`` of ``wrs`` in order, JSON or compact alike: the
        one place a work request is built, checked and handed to the engine."""
        eng, now, done = rec.slot.engine, trio.current_time(), 0
        t[rec.slot] = None
        try:
            for d in wrs:
                wr = make(d)
                if getattr(wr, "tag", None) is not None and not getattr(eng, "tagged", False):
                    raise OpError("ENOTSUP", f"{rec.slot.name} has no tagged messages")
                if recv:
                    eng.post_recv(rec.qpn, wr, now)
                else:
                    eng.post_send(rec.qpn, wr, now)
                done += 1
        except (OpError, VerbsError, ValueError, KeyError, TypeError) as e:
            raise OpError(getattr(e, "code", "EINVAL"),
                          f"work request {done} ({done} posted): {e}") from None
        return {"posted": done}

    def op_post_send(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        return self._post(s, m, t, recv=False)

    def op_post_recv(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        return self._post(s, m, t, recv=True)

    def op_destroy_qp(self, s: Session, m: dict[str, Any], t: Any) -> dict[str, Any]:
        rec = self._qp(s, m)
        self._destroy_qp(rec)
        t[rec.slot] = None
        return {}

    def _destroy_qp(self, rec: QpRec) -> None:
        with contextlib.suppress(VerbsError, KeyError, ValueError):
            rec.slot.engine.destroy_qp(rec.qpn, trio.current_time())
        self.qps.pop(rec.handle, None)
        self.by_qpn.pop((rec.slot.name, rec.qpn), None)
        rec.owner.qps.discard(rec.handle)
        for h in (rec.send_cq, rec.recv_cq):
            if h in self.cqs:
                self.cqs[h].qps.discard(rec.handle)

    # -- teardown -------------------------------------------------------------------

    def _cleanup(self, s: Session) -> None:
        """Free everything the client owned (its connection is gone)."""
        self.sessions.pop(s.id, None)
        self._unsent.pop(s, None)
        slots = {}
        for h in list(s.qps):
            rec = self.qps[h]
            slots[rec.slot] = None
            self._destroy_qp(rec)
            self.c["freed_qps"] += 1
        for slot in slots:
            self.d.pump(slot)  # flushed completions of destroyed QPs are orphaned and counted
        for h in list(s.cqs):
            self.cqs.pop(h, None)
            self.c["freed_cqs"] += 1
        s.cqs.clear()
        names = list(s.buffers)
        for mr in list(s.mrs.values()):
            self._dereg(s, mr)
            self.c["freed_mrs"] += 1
        s.mrs.clear()
        for buf, _ in s.buffers.values():
            buf.close()
        s.buffers.clear()
        for name in names:
            # a client killed before it could remove its buffers (SIGKILL, os._exit): their
            # files are garbage now, and this daemon is the one that knows their names
            if shm.remove_if_orphaned(name):
                self.c["orphaned_shm_removed"] += 1

    async def shutdown(self) -> None:
        """Tell every client the daemon is going; give writers a moment to flush."""
        for s in list(self.sessions.values()):
            s.events.append({"event": "shutdown"})
            s.closing = True
            s.wake()
        for s in list(self.sessions.values()):
            while s.out or s.events or s.dirty or s.pending is not None:
                await s.drained.park()

    def close_all(self) -> None:
        self.close_listener()
        if self._scope is not None:
            self._scope.cancel()
        for s in list(self.sessions.values()):
            self._cleanup(s)
            s.sock.close()

    def counters(self) -> dict[str, int]:
        return {**self.c, "clients": len(self.sessions), "qps": len(self.qps),
                "cqs": len(self.cqs), "mrs": sum(len(s.mrs) for s in self.sessions.values())}


def _within(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies below it (symbolic links resolved)."""
    p, r = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([p, r]) == r

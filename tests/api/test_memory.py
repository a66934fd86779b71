# SPDX-License-Identifier: GPL-2.0-only
"""The client API against an in-process daemon (stub engine on 127.0.0.1; no namespaces).

Client calls block, so they run in worker threads while the daemon runs on the trio
thread. Waits have deadlines only to fail fast; nothing asserts on elapsed time.
"""

from __future__ import annotations

import socket
import time

import pytest
import trio

from emu.api import Access, Device, NicError
from emu.core.cq import WcOpcode, WcStatus
from emu.nic.config import NicConfig
from emu.nic.daemon import running

pytestmark = pytest.mark.trio


def _cfg(tmp_path, **kw) -> NicConfig:  # noqa: ANN001
    return NicConfig(sock_path=str(tmp_path / "nic" / "h.sock"), transports=["loopback"],
                     ports={"loopback": 0}, addresses=["127.0.0.1"], seed=5, **kw)


async def _until(pred, what: str, timeout: float = 10.0) -> None:  # noqa: ANN001
    with trio.move_on_after(timeout):
        while not pred():
            await trio.sleep(0.005)
        return
    raise AssertionError(f"timed out waiting for {what}")


def _looped_qps(dev, cq) -> tuple:  # noqa: ANN001
    """Two QPs of one device on ``cq``, connected to each other (the loopback transport)."""
    qa, qb = dev.create_qp(cq), dev.create_qp(cq)
    qa.connect(qb.local_info())
    qb.connect(qa.local_info())
    return qa, qb


async def test_reg_mr_maps_client_memory_into_the_daemon(tmp_path):
    async with running(_cfg(tmp_path)) as d:
        def client():
            dev = Device.open(sock_path=d.cfg.sock_path)
            buf = dev.alloc_buffer(1 << 16)
            mr = dev.reg_mr(buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ,
                            offset=4096, length=8192)
            return dev, buf, mr

        dev, buf, mr = await trio.to_thread.run_sync(client)
        try:
            # the daemon writes through its mapping (what a remote WRITE does) …
            d.memory.remote_write(mr.rkey, mr.va + 10, b"from the daemon")
            assert bytes(buf.view[4096 + 10:4096 + 25]) == b"from the daemon"
            assert bytes(mr.view[10:25]) == b"from the daemon"
            # … and reads what the application wrote
            buf.view[4096:4100] = b"app!"
            assert bytes(d.memory.remote_read(mr.rkey, mr.va, 4)) == b"app!"
            assert d.control.counters()["mrs"] == 1
        finally:
            await trio.to_thread.run_sync(dev.close)
            buf.close()


async def test_client_disconnect_frees_everything(tmp_path):
    async with running(_cfg(tmp_path)) as d:
        def client():
            dev = Device.open(sock_path=d.cfg.sock_path)
            buf = dev.alloc_buffer(4096)
            mr = dev.reg_mr(buf)
            dev.reg_mr(buf, offset=0, length=100)
            cq = dev.create_cq(16)
            qa, qb = _looped_qps(dev, cq)
            qb.post_recv(mr.sge(0, 64), wr_id=1)  # still posted when the client goes
            dev.close()  # no explicit destroy/dereg: the daemon must clean up
            return buf

        buf = await trio.to_thread.run_sync(client)
        await _until(lambda: d.control.counters()["clients"] == 0, "the session to end")
        c = d.control.counters()
        assert (c["freed_qps"], c["freed_mrs"], c["freed_cqs"]) == (2, 2, 1)
        assert (c["qps"], c["cqs"], c["mrs"]) == (0, 0, 0)
        assert len(d.memory) == 0
        assert d.slots["loopback"].engine.counters()["qps"] == 0
        buf.close()


async def test_loopback_transfers_completions_and_errors_through_the_api(tmp_path):
    async with running(_cfg(tmp_path, engine_options={"loopback": {"rto": 0.02}})) as d:
        def client():
            with Device.open(sock_path=d.cfg.sock_path) as dev:
                assert dev.attrs["transports"]["loopback"]["sockets"][0]["address"] == \
                    "127.0.0.1"
                buf = dev.alloc_buffer(1 << 16)
                mr = dev.reg_mr(buf)
                scq, rcq = dev.create_cq(), dev.create_cq()
                qa, qb = dev.create_qp(scq, rcq), dev.create_qp(scq, rcq)
                info_b = qb.local_info()
                assert {"qpn", "psn", "address", "gid", "port"} <= set(info_b)
                qa.connect(info_b)
                qb.connect(qa.local_info())
                buf.view[:11] = b"hello world"
                qb.post_recv(mr.sge(1000, 64), wr_id=10)
                qb.post_recv(mr.sge(2000, 64), wr_id=11)
                qa.post_send(mr.sge(0, 11), wr_id=1)
                qa.post_write(mr.sge(0, 5), mr.va + 3000, mr.rkey, wr_id=2)
                qa.post_write(mr.sge(6, 5), mr.va + 4000, mr.rkey, wr_id=3, imm=0xABCD)
                sends = scq.wait(3, timeout=10)
                recvs = rcq.wait(2, timeout=10)
                assert [(w.wr_id, w.status, w.opcode) for w in sends] == [
                    (1, WcStatus.SUCCESS, WcOpcode.SEND), (2, WcStatus.SUCCESS,
                                                           WcOpcode.RDMA_WRITE),
                    (3, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE)]
                assert recvs[0].wr_id == 10 and recvs[0].byte_len == 11
                assert recvs[1].opcode is WcOpcode.RECV_RDMA_WITH_IMM and recvs[1].imm == 0xABCD
                assert bytes(buf.view[1000:1011]) == b"hello world"
                assert bytes(buf.view[3000:3005]) == b"hello"
                assert bytes(buf.view[4000:4005]) == b"world"
                # a bad R_Key: nothing written, remote access error, QP to error
                qa.post_write(mr.sge(0, 5), mr.va + 5000, mr.rkey ^ 0x55, wr_id=4)
                (bad,) = scq.wait(1, timeout=10)
                assert bad.status is WcStatus.REM_ACCESS_ERR
                assert bytes(buf.view[5000:5005]) == b"\0" * 5
                with pytest.raises(NicError) as e:
                    qa.post_send(mr.sge(0, 1), wr_id=5)  # QP is in error now
                assert e.value.code == "EINVAL"
                assert qa.state == "ERR"
                # protocol errors come back as error replies
                with pytest.raises(NicError) as e:
                    dev.reg_mr(type(buf)("no-such-emu-buffer", 1, buf._mmap, False, "/x"))
                assert e.value.code == "ENOENT"
                with pytest.raises(NicError) as e:
                    dev.conn.call("frobnicate")
                assert e.value.code == "ENOSYS"
                st = dev.stats()
                assert st["totals"]["rx_packets"] >= 5 and st["control"]["clients"] == 1
                buf.close()

        await trio.to_thread.run_sync(client)


async def test_wait_async_from_trio(tmp_path):
    async with running(_cfg(tmp_path)) as d:
        dev = await trio.to_thread.run_sync(Device.open, None, None, d.cfg.sock_path)
        try:
            def setup():
                buf = dev.alloc_buffer(4096)
                mr = dev.reg_mr(buf)
                cq = dev.create_cq()
                qa, qb = _looped_qps(dev, cq)
                qa.post_write(mr.sge(0, 8), mr.va + 8, mr.rkey, wr_id=42)
                return buf, cq

            buf, cq = await trio.to_thread.run_sync(setup)
            (wc,) = await cq.wait_async(1, timeout=10)
            assert wc.wr_id == 42 and wc.ok
            buf.close()
        finally:
            await trio.to_thread.run_sync(dev.close)


async def test_overlong_message_is_a_protocol_error(tmp_path):
    async with running(_cfg(tmp_path)) as d:
        def client() -> bytes:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(d.cfg.sock_path)
                try:
                    s.sendall(b"x" * (2 << 20))
                except BrokenPipeError:
                    pass  # the daemon gave up on us mid-message: what we test
                s.settimeout(10)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
                return data

        reply = await trio.to_thread.run_sync(client)
        assert b'"EPROTO"' in reply
        await _until(lambda: d.control.counters()["clients"] == 0, "the session to end")
        assert d.control.counters()["protocol_errors"] == 1


async def test_client_hanging_up_mid_reply_does_not_kill_the_daemon(tmp_path):
    """A client that closes its socket while the daemon still pushes completions to it
    (BrokenPipe in the writer task) ends only its own session."""
    async with running(_cfg(tmp_path)) as d:
        bufs = []

        def rude_client():
            dev = Device.open(sock_path=d.cfg.sock_path)
            buf = dev.alloc_buffer(1 << 16)
            bufs.append(buf)
            mr = dev.reg_mr(buf)
            cq = dev.create_cq(4096)
            qa, qb = _looped_qps(dev, cq)
            for k in range(2000):
                qa.post_write(mr.sge(0, 64), mr.va + 4096, mr.rkey, wr_id=k, wait=False)
            dev.conn.sock.shutdown(socket.SHUT_RDWR)
            dev.conn.sock.close()

        try:
            for _ in range(3):
                await trio.to_thread.run_sync(rude_client)
                await _until(lambda: d.control.counters()["clients"] == 0, "the session to end")
        finally:
            for buf in bufs:
                buf.close()

        def polite_client():
            with Device.open(sock_path=d.cfg.sock_path) as dev:
                return dev.create_cq(8) is not None

        assert await trio.to_thread.run_sync(polite_client)


async def test_quiet_requests_reply_only_when_they_fail(tmp_path):
    """``quiet`` (what ``wait=False`` sends): no reply on success, the error reply (with
    the request's id, in order) on failure; replies to other requests are unaffected."""
    async with running(_cfg(tmp_path)) as d:
        def client() -> list[dict]:
            from emu.nic.protocol import LineBuffer, decode, encode

            with socket.socket(socket.AF_UNIX) as s:
                s.connect(d.cfg.sock_path)
                s.sendall(b"".join(encode(m) for m in (
                    {"id": 1, "op": "ping", "quiet": True},
                    {"id": 2, "op": "no_such_op", "quiet": True},
                    {"id": 3, "op": "create_cq", "cqe": 8, "quiet": True},
                    {"id": 4, "op": "ping"})))
                s.settimeout(10)
                lb, got = LineBuffer(), []
                while not any(m.get("id") == 4 for m in got):
                    got += [decode(line) for line in lb.feed(s.recv(65536))]
                return got

        got = await trio.to_thread.run_sync(client)
        assert [(m["id"], m["ok"]) for m in got] == [(2, False), (4, True)]
        assert got[0]["code"] == "ENOSYS"
        assert d.control.counters()["requests"] == 4


async def test_replies_larger_than_the_socket_buffer_arrive_whole_and_in_order(tmp_path):
    """A client that pipelines many requests before reading: what the socket cannot take
    at once waits (the writer task) and nothing is lost or reordered."""
    async with running(_cfg(tmp_path)) as d:
        def client() -> list[int]:
            from emu.nic.protocol import LineBuffer, decode, encode

            n = 3000
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(d.cfg.sock_path)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(b"".join(encode({"id": i, "op": "query_device"}) for i in range(n)))
                s.settimeout(10)
                lb, ids = LineBuffer(), []
                while len(ids) < n:
                    ids += [decode(line)["id"] for line in lb.feed(s.recv(65536))]
                return ids

        assert await trio.to_thread.run_sync(client) == list(range(3000))


async def test_busy_poll_the_caller_reads_completions_and_replies_itself(tmp_path):
    """In a busy-poll the reader thread stands aside: completions reach the CQ only when
    the caller polls the socket, synchronous calls still get their replies, and after
    it the reader thread delivers again."""
    async with running(_cfg(tmp_path, engine_options={"loopback": {"rto": 0.02}})) as d:
        def client():
            with Device.open(sock_path=d.cfg.sock_path) as dev:
                buf = dev.alloc_buffer(1 << 16)
                mr = dev.reg_mr(buf)
                cq = dev.create_cq()
                qa, qb = _looped_qps(dev, cq)
                conn = dev.conn
                with conn.busy_poll():
                    deadline = time.monotonic() + 10
                    while not conn.standing_aside:
                        assert time.monotonic() < deadline, "the reader thread kept reading"
                        time.sleep(0.01)
                    qb.post_recv(mr.sge(1000, 64), wr_id=10, wait=False)
                    qa.post_send(mr.sge(0, 8), wr_id=1, wait=False)
                    assert dev.conn.call("ping") == {}  # a reply, read by this thread
                    got: list = []
                    while len(got) < 2:
                        assert time.monotonic() < deadline, "no completions"
                        conn.poll_socket()
                        got += cq.poll(4)
                    assert sorted(w.wr_id for w in got) == [1, 10] and all(w.ok for w in got)
                    # left in the socket or the CQ when the busy-poll ends: not lost
                    qb.post_recv(mr.sge(2000, 64), wr_id=11, wait=False)
                    qa.post_send(mr.sge(0, 8), wr_id=2, wait=False)
                    dev.conn.call("ping")  # both posts handled (replies come in order)
                    assert conn.standing_aside
                assert sorted(w.wr_id for w in cq.wait(2, timeout=10)) == [2, 11]
                buf.close()

        await trio.to_thread.run_sync(client)


async def test_corked_requests_go_in_one_write_in_order(tmp_path):
    """``corked()``: pipelined posts are held and written together when the block ends
    (or before a synchronous call), in order — a receive posted before the send whose
    answer it takes is there first."""
    async with running(_cfg(tmp_path, engine_options={"loopback": {"rto": 0.02}})) as d:
        def client():
            with Device.open(sock_path=d.cfg.sock_path) as dev:
                buf = dev.alloc_buffer(1 << 16)
                mr = dev.reg_mr(buf)
                cq = dev.create_cq()
                qa, qb = _looped_qps(dev, cq)
                before = d.control.counters()["requests"]
                with dev.conn.corked():
                    qb.post_recv(mr.sge(1000, 64), wr_id=10, wait=False)
                    qa.post_send(mr.sge(0, 8), wr_id=1, wait=False)
                    assert d.control.counters()["requests"] == before  # held here
                got = cq.wait(2, timeout=10)
                assert sorted(w.wr_id for w in got) == [1, 10] and all(w.ok for w in got)
                with dev.conn.corked():
                    qb.post_recv(mr.sge(2000, 64), wr_id=11, wait=False)
                    assert dev.conn.call("ping") == {}  # takes the held post with it
                    assert d.control.counters()["requests"] == before + 4
                    qa.post_send(mr.sge(0, 8), wr_id=2, wait=False)
                assert sorted(w.wr_id for w in cq.wait(2, timeout=10)) == [2, 11]
                with pytest.raises(RuntimeError), dev.conn.corked(), dev.conn.corked():
                    pass
                buf.close()

        await trio.to_thread.run_sync(client)


async def test_a_slow_registration_does_not_stop_the_daemon_for_other_clients(tmp_path,
                                                                             monkeypatch):
    """Mapping a region is populated at once (as ibv_reg_mr pins pages) and takes
    milliseconds for a large one; it runs in a worker thread, so another client's requests
    (and every port) go on meanwhile. Here the mapping is made to take 1 s."""
    import threading

    from emu.core.memory import SharedBuffer

    gate, attached = threading.Event(), threading.Event()
    real_attach = SharedBuffer.attach.__func__

    def slow_attach(cls, name, **kw):  # noqa: ANN001
        gate.wait(5.0)  # held until the other client has been served (or 5 s)
        try:
            return real_attach(cls, name, **kw)
        finally:
            attached.set()

    monkeypatch.setattr(SharedBuffer, "attach", classmethod(slow_attach))
    async with running(_cfg(tmp_path)) as d:
        served_while_registering = []

        def registering_client() -> int:
            dev = Device.open(sock_path=d.cfg.sock_path)
            buf = dev.alloc_buffer(1 << 20)
            try:
                return dev.reg_mr(buf).length
            finally:
                buf.close()
                dev.close()

        def other_client() -> None:
            dev = Device.open(sock_path=d.cfg.sock_path)
            try:
                dev.query()  # a request to the same daemon
                served_while_registering.append(not attached.is_set())
            finally:
                gate.set()
                dev.close()

        async with trio.open_nursery() as n:
            reg = []

            async def reg_task() -> None:
                reg.append(await trio.to_thread.run_sync(registering_client))

            n.start_soon(reg_task)
            await _until(lambda: d.control.counters()["clients"] >= 1, "the first client")
            await trio.sleep(0.2)  # its reg_mr is in the worker thread now
            await trio.to_thread.run_sync(other_client)
        assert served_while_registering == [True]
        assert reg == [1 << 20]

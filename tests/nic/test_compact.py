# SPDX-License-Identifier: GPL-2.0-only
"""Compact control records (emu.nic.compact): framing, round trips, the daemon's answers.

The units run without a daemon; the rest against an in-process daemon (loopback
engine on 127.0.0.1, no namespaces), as tests/api/test_memory.py does. Waits have
deadlines only to fail fast.
"""

from __future__ import annotations

import socket
from collections import deque

import pytest
import trio

from emu.api import Device
from emu.core.cq import WcOpcode, WcStatus, WorkCompletion
from emu.nic import compact
from emu.nic.config import NicConfig
from emu.nic.daemon import running
from emu.nic.protocol import ProtocolError, decode, encode
from emu.nic.udp import TOS_ADOPT, PortSocket


def _post(rid: int, qp: int, wr_id: int, sges: list[list[int]], *, recv: bool = False,
          opcode: int = 2, quiet: bool = False, imm: int | None = None) -> bytes:
    rec = compact.pack_post(compact.POST_RECV if recv else compact.POST_SEND, rid, qp, wr_id,
                            0 if recv else opcode, sges, imm=imm, quiet=quiet)
    assert rec is not None
    return rec


def test_records_and_json_lines_come_out_in_order_however_the_stream_is_cut():
    # a record whose binary fields hold b"\n" (0x0A) and the mark byte itself
    rec = _post(0x0A0A, 0xFE, 0x0A, [[0x0AFE, 10, 0xFE0A]], imm=0x0A)
    wcs = compact.pack_wcs(7, [WorkCompletion(10, WcStatus.SUCCESS, WcOpcode.RECV, 3, 10)])
    assert wcs is not None
    stream = encode({"id": 1, "op": "ping"}) + rec + b"\n  \n" + wcs + encode({"id": 2})
    for cut in (1, 3, 7, len(stream)):
        rb, got = compact.RecordBuffer(), []
        for i in range(0, len(stream), cut):
            got += rb.feed(stream[i:i + cut])
        assert got == [encode({"id": 1, "op": "ping"})[:-1], rec, wcs,
                       encode({"id": 2})[:-1]], cut


def test_unknown_record_kinds_and_long_lines_are_protocol_errors():
    with pytest.raises(ProtocolError, match="kind 9"):
        compact.RecordBuffer().feed(bytes([compact.MARK, 9, 0, 0, 0]))
    with pytest.raises(ProtocolError, match="longer"):
        compact.RecordBuffer(max_line=10).feed(b"x" * 11)
    with pytest.raises(ProtocolError, match="longer"):
        compact.RecordBuffer(max_line=10).feed(b"x" * 11 + b"\n")
    assert compact.RecordBuffer(max_line=10).feed(b"x" * 10 + b"\n") == [b"x" * 10]


def test_posts_and_completions_round_trip_and_what_does_not_fit_is_refused():
    rec = compact.pack_post(compact.POST_SEND, 9, 4, (1 << 64) - 1, 1, [[1, 2, 3], [4, 5, 6]],
                            0x7F0000000000, 0xDEADBEEF, 0, quiet=True, signaled=False,
                            solicited=True)
    assert rec is not None and len(rec) == compact.POST.size + 2 * compact.SGE.size
    kind, flags, op, rid, qp, wr_id, raddr, rkey, imm, sges = compact.unpack_post(rec)
    assert (kind, op, rid, qp, wr_id, raddr, rkey, imm) == (
        compact.POST_SEND, 1, 9, 4, (1 << 64) - 1, 0x7F0000000000, 0xDEADBEEF, 0)
    assert flags == compact.F_QUIET | compact.F_SOLICITED | compact.F_IMM
    assert sges == [(1, 2, 3), (4, 5, 6)]
    assert compact.unpack_post(_post(1, 1, 1, []))[8] is None  # no immediate ≠ imm 0
    # nothing is truncated: the caller sends JSON instead
    assert compact.pack_post(compact.POST_SEND, 1, 1, 1 << 64, 2, [], quiet=True) is None
    assert compact.pack_post(compact.POST_SEND, 1, 1, -1, 2, [], quiet=True) is None
    assert compact.pack_post(compact.POST_SEND, 1, 1, 1, 2, [[0, 1, 1 << 32]], quiet=True) \
        is None
    assert compact.pack_post(compact.POST_SEND, 1, 1, 1, 2, [[0, 1, 1]] * 256, quiet=True) \
        is None
    wcs = [WorkCompletion(5, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM, 17, 64, 0, 3),
           WorkCompletion(6, WcStatus.REM_ACCESS_ERR, WcOpcode.RDMA_WRITE, 17, 0, None, 0, 9)]
    cq, items = compact.unpack_wcs(compact.pack_wcs(12, wcs) or b"")
    assert cq == 12
    assert items == [(5, 0, int(WcOpcode.RECV_RDMA_WITH_IMM), 17, 64, 0, 3, 0),
                     (6, int(WcStatus.REM_ACCESS_ERR), int(WcOpcode.RDMA_WRITE), 17, 0, None,
                      0, 9)]
    assert compact.pack_wcs(1, [WorkCompletion(1 << 64, WcStatus.SUCCESS, WcOpcode.SEND, 1, 0)]
                            ) is None


def test_a_tos_other_than_the_sockets_goes_as_a_control_message_until_it_is_adopted():
    """What the daemon's transmit path does per datagram (``TxPath._flush``): the TOS as a
    cmsg while it alternates (a ping-pong's data and ACKs), the socket's own once it
    has gone out TOS_ADOPT times — on the wire it is the same TOS either way."""
    for addr in ("127.0.0.1", "::1"):
        rx, tx = PortSocket(addr, 0, gro=False), PortSocket(addr, 0)
        try:
            port = rx.sock.getsockname()[1]
            sent = [0x1A, 0x02, 0x1A, 0x02] + [0x06] * TOS_ADOPT + [0x1A]
            socket_tos = []
            for tos in sent:
                anc = tx.tos_anc(tos) if tos != tx.tos else None
                if anc is None:
                    tx.sock.sendto(bytes([tos]), (addr, port))
                else:
                    tx.sock.sendmsg([bytes([tos])], anc, 0, (addr, port))
                socket_tos.append(tx.tos)
            out: deque = deque()
            c = dict.fromkeys(("rx_packets", "rx_bytes", "rx_backlog_drops", "rx_truncated",
                               "rx_errors"), 0)
            with pytest.raises(BlockingIOError):
                rx.recv_batch(out, 100, 100, c)
            assert [t for _, _, t in out] == sent
            assert [bytes(d)[0] for d, _, _ in out] == sent
            assert socket_tos[:4] == [0] * 4 and socket_tos[-2] == 0x06  # adopted, once
        finally:
            rx.close()
            tx.close()


def _cfg(tmp_path) -> NicConfig:  # noqa: ANN001
    return NicConfig(sock_path=str(tmp_path / "nic" / "h.sock"), transports=["loopback"],
                     ports={"loopback": 0}, addresses=["127.0.0.1"], seed=5,
                     engine_options={"loopback": {"rto": 0.02}})


class _Raw:
    """A client of our own over the bare socket: JSON requests, any records back."""

    def __init__(self, path: str) -> None:
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.s.settimeout(10)
        self.rb = compact.RecordBuffer()
        self.got: list[bytes] = []
        self.ids = iter(range(1, 1 << 20))

    def until(self, pred) -> list[bytes]:  # noqa: ANN001
        while not any(pred(x) for x in self.got):
            self.got += self.rb.feed(self.s.recv(65536))
        return self.got

    def rpc(self, op: str, **args) -> dict:  # noqa: ANN003
        rid = next(self.ids)
        self.s.sendall(encode({"id": rid, "op": op, **args}))
        self.until(lambda x: x[0] != compact.MARK and decode(x).get("id") == rid)
        msg = next(decode(x) for x in self.got if x[0] != compact.MARK
                   and decode(x).get("id") == rid)
        assert msg["ok"], msg
        return msg["result"]


@pytest.mark.trio
async def test_compact_posts_work_on_any_connection_and_err_like_json(tmp_path):
    """A client that never asked for compact completions: its compact posts move data,
    its completions come as JSON ``wc`` events, errors come as JSON replies with the
    post's id (the work request named as in JSON), and a record a client must not send
    is refused without ending the session."""
    async with running(_cfg(tmp_path)) as d:
        def client() -> None:
            from emu.core.memory import SharedBuffer

            buf = SharedBuffer.create(1 << 16)
            c = _Raw(d.cfg.sock_path)
            try:
                assert c.rpc("hello")["compact"] is True  # compact posts are understood
                mr = c.rpc("reg_mr", shm=buf.name, access=15)
                cq = c.rpc("create_cq", cqe=16)["cq"]
                qa = c.rpc("create_qp", send_cq=cq)["qp"]
                qb = c.rpc("create_qp", send_cq=cq)["qp"]
                c.rpc("connect", qp=qa, remote=c.rpc("query_qp", qp=qb))
                c.rpc("connect", qp=qb, remote=c.rpc("query_qp", qp=qa))
                buf.view[:5] = b"hello"
                sge = [mr["va"], 5, mr["lkey"]]
                bad_wc = compact.pack_wcs(1, [])
                assert bad_wc is not None
                c.s.sendall(_post(101, qb, 10, [[mr["va"] + 1000, 64, mr["lkey"]]], recv=True,
                                  quiet=True)
                            + _post(102, qa, 1, [sge], imm=7, opcode=3, quiet=True)
                            + _post(103, qa, 2, [sge], opcode=99, quiet=True)
                            + _post(104, qa + qb + 1000, 3, [sge])
                            + bad_wc + encode({"id": 105, "op": "ping"}))
                msgs = [decode(x) for x in c.until(lambda x: x[0] != compact.MARK
                                                    and decode(x).get("id") == 105)]
                wcs = [w for m in msgs if m.get("event") == "wc" for w in m["wcs"]]
                while len(wcs) < 2:
                    new = c.rb.feed(c.s.recv(65536))
                    assert all(x[0] != compact.MARK for x in new)  # JSON for this client
                    wcs += [w for m in map(decode, new) if m.get("event") == "wc"
                            for w in m["wcs"]]
                assert sorted((w["wr_id"], w["opcode"], w["imm"]) for w in wcs) == [
                    (1, "SEND", None), (10, "RECV", 7)]
                assert bytes(buf.view[1000:1005]) == b"hello"
                errs = [m for m in msgs if m.get("ok") is False]
                assert [(m["id"], m["code"]) for m in errs] == [
                    (103, "EINVAL"), (104, "ENOENT"), (None, "ENOSYS")]
                assert "work request 0 (0 posted)" in errs[0]["error"]
                assert {"id": 105, "ok": True, "result": {}} in msgs
            finally:
                c.s.close()
                buf.close()

        await trio.to_thread.run_sync(client)


@pytest.mark.trio
async def test_the_library_negotiates_compact_and_falls_back_to_json(tmp_path):
    """Device asks for compact completions and posts compactly; a wr_id past 64 bits goes
    as JSON both ways (its completion cannot be packed) and arrives intact."""
    async with running(_cfg(tmp_path)) as d:
        def client() -> None:
            with Device.open(sock_path=d.cfg.sock_path) as dev:
                assert dev.conn.compact
                assert [s.compact for s in d.control.sessions.values()] == [True]
                buf = dev.alloc_buffer(1 << 16)
                mr = dev.reg_mr(buf)
                scq, rcq = dev.create_cq(), dev.create_cq()
                qa, qb = dev.create_qp(scq, rcq), dev.create_qp(scq, rcq)
                qa.connect(qb.local_info())
                qb.connect(qa.local_info())
                big = (1 << 64) + 5
                qb.post_recv(mr.sge(1000, 64), wr_id=big, wait=False)
                qa.post_send(mr.sge(0, 11), wr_id=1, imm=0, wait=False)
                (r,) = rcq.wait(1, timeout=10)
                (w,) = scq.wait(1, timeout=10)
                assert (r.wr_id, r.byte_len, r.imm, r.opcode) == (big, 11, 0, WcOpcode.RECV)
                assert (w.wr_id, w.status, w.opcode) == (1, WcStatus.SUCCESS, WcOpcode.SEND)
                buf.close()

        await trio.to_thread.run_sync(client)

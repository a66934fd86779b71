# SPDX-License-Identifier: GPL-2.0-only
"""perftest's side-channel bytes (emu.apps.perf.perftest_wire) against literal byte
strings written from perftest's formats (perftest_communication.h: KEY_PRINT_FMT,
KEY_PRINT_FMT_GID, KEY_MSG_SIZE 59, KEY_MSG_SIZE_GID 108; MAX_VERSION 16; check_mtu's
"%d" into 2 bytes; hton_int / hton_long / hton_double), and a fake perftest peer
written from the same formats playing the other side of a session."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from emu.apps.perf import perftest_wire as W
from emu.apps.perf.perftest_oob import OobError, Session

# KEY_PRINT_FMT_GID: "%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:" + NUL
GID_MSG = (b"0000:0010:000011:abcdef:00001234:00007f0000001000:"
           b"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:01:0b:00000000:\0")
# KEY_PRINT_FMT: "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" + NUL
SHORT_MSG = b"0001:0010:000011:abcdef:00001234:00007f0000001000:00000000\0"
KEY = W.KeyMsg(0, 16, 0x11, 0xABCDEF, 0x1234, 0x7F0000001000, W.gid_of("10.0.1.11"))


def test_key_message_with_gid_is_perftests_108_bytes():
    assert len(GID_MSG) == 108 and len(SHORT_MSG) == 59
    assert W.encode_key(KEY) == GID_MSG
    assert W.decode_key(GID_MSG) == KEY


def test_key_message_without_gid_is_perftests_59_bytes():
    k = W.KeyMsg(1, 16, 0x11, 0xABCDEF, 0x1234, 0x7F0000001000, None)
    assert W.encode_key(k) == SHORT_MSG
    assert W.decode_key(SHORT_MSG, with_gid=False) == k


def test_ipv6_gid_and_mapped_ipv4():
    g6 = W.gid_of("fd00:0:1::12")
    assert g6 == bytes.fromhex("fd000000000100000000000000000012")
    assert not W.is_v4_mapped(g6) and W.address_of(g6) == "fd00:0:1::12"
    g4 = W.gid_of("10.0.1.11")
    assert g4 == bytes.fromhex("00000000000000000000ffff0a00010b")
    assert W.is_v4_mapped(g4) and W.address_of(g4) == "10.0.1.11"
    msg = W.encode_key(W.KeyMsg(0, 16, 1, 2, 3, 4, g6))
    assert b":fd:00:00:00:00:01:00:00:00:00:00:00:00:00:00:12:00000000:\0" in msg


@pytest.mark.parametrize("bad, why", [
    (GID_MSG[:-1], "108 bytes, got 107"),
    (GID_MSG[:-1] + b"x", "not NUL-terminated"),
    (GID_MSG.replace(b"abcdef", b"abcdeg"), "psn"),
    (GID_MSG.replace(b"0000:0010:", b"0000:0x10:", 1), "out_reads"),
    (b"6.25" + b"\0" * 104, "not a perftest QP message"),
    (GID_MSG.replace(b":ff:ff:", b":ff;ff:"), "not a perftest QP message"),
])
def test_malformed_key_messages_are_refused_with_a_reason(bad, why):
    with pytest.raises(W.WireError, match=why):
        W.decode_key(bad)


def test_fields_too_wide_for_perftest_are_refused():
    with pytest.raises(W.WireError, match="qpn"):
        W.encode_key(W.KeyMsg(0, 16, 1 << 24, 0, 0, 0, None))


def test_version_field():
    raw = W.encode_version()
    assert len(raw) == 16 and raw.startswith(b"6.27\0emu-perf")
    assert W.decode_version(raw) == ("6.27", 6.27, True)
    assert W.decode_version(b"6.25".ljust(16, b"\0")) == ("6.25", 6.25, False)
    assert W.decode_version(b"5.70".ljust(16, b"\0"))[1] == 5.70
    with pytest.raises(W.WireError, match="not a perftest version"):
        W.decode_version(b'{"v": 1, "op": "')  # emu's JSON channel talking
    with pytest.raises(W.WireError, match="16 bytes"):
        W.decode_version(b"6.25\0")


def test_sys_data_mtu_and_reports_are_network_order():
    assert W.encode_int(4096) == b"\x00\x00\x10\x00"
    assert W.decode_int(b"\x00\x00\x00\x40", "cache line") == 64
    assert W.encode_mtu(1024) == b"3\0" and W.encode_mtu(4096) == b"5\0"
    assert W.decode_mtu(b"4\0") == 2048 and W.decode_mtu(b"9\0") is None
    r = W.BwReport(65536, 5000, 1.5, 1.25, 0.02)
    f = W.encode_report(r)
    assert f[0] == bytes.fromhex("0000000000010000") and f[1] == bytes.fromhex("0000000000001388")
    assert f[2] == bytes.fromhex("3ff8000000000000") and f[3] == bytes.fromhex("3ff4000000000000")
    assert W.decode_report(f) == r
    with pytest.raises(W.WireError):
        W.decode_report(f[:4])


def test_perftests_cycle_buffer_layout():
    """increase_rem_addr: INC(size) = size rounded up to 64 (at least 64); messages up to
    half the 4096-byte cycle buffer cycle through it, larger ones reuse the VA."""
    assert (W.slot_stride(2), W.cycle_slots(2)) == (64, 64)
    assert (W.slot_stride(100), W.cycle_slots(100)) == (128, 32)
    assert (W.slot_stride(2048), W.cycle_slots(2048)) == (2048, 2)
    assert (W.slot_stride(2049), W.cycle_slots(2049)) == (2112, 1)
    assert W.cycle_slots(65536) == 1 and W.region_size(65536) == 65536
    assert W.region_size(2) == 4096


# -- a fake perftest peer, written from the formats above --------------------------------


def _fake_perftest_server(ls: socket.socket, out: dict, version: bytes, key: bytes) -> None:
    """The server side of ib_write_bw's steps: read then write, each exchange."""
    c, _ = ls.accept()
    with c:
        def xchg(n: int, mine: bytes) -> bytes:
            got = b""
            while len(got) < n:
                d = c.recv(n - len(got))
                if not d:
                    raise ConnectionError
                got += d
            c.sendall(mine)
            return got

        out["version"] = xchg(16, version)
        if version < b"5.70":
            return  # perftest exits here too (check_version_compatibility)
        out["page"] = xchg(4, struct.pack(">i", 4096))
        out["line"] = xchg(4, struct.pack(">i", 64))
        out["mtu"] = xchg(2, b"3\0")
        out["key1"] = xchg(108, key)
        out["key2"] = xchg(108, key)
        out["sync"] = xchg(108, key)


def _listen() -> socket.socket:
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    return ls


def test_a_session_speaks_ib_write_bws_steps_as_client():
    ls = _listen()
    out: dict = {}
    t = threading.Thread(target=_fake_perftest_server,
                         args=(ls, out, b"6.25".ljust(16, b"\0"), GID_MSG))
    t.start()
    s = Session.connect("127.0.0.1", ls.getsockname()[1], 5)
    try:
        s.versions()
        assert (s.peer_version, s.peer_is_emu) == ("6.25", False)
        assert s.sys_data() == (4096, 64)
        assert s.mtu(4096) == 1024  # the smaller: the peer's "3"
        mine = W.KeyMsg(0, 16, 0x22, 0x123456, 0x99, 0x1000, W.gid_of("10.0.1.12"))
        assert s.keys([mine], "QP exchange") == [KEY]
        assert s.keys([mine], "again") == [KEY]
        s.hand_shake(mine, "sync")
    finally:
        s.close()
        t.join(5)
        ls.close()
    assert out["version"].startswith(b"6.27\0") and out["page"] == b"\0\0\x10\0"
    assert out["mtu"] == b"5\0" and out["key1"] == out["key2"] == out["sync"] == W.encode_key(mine)


def test_an_old_perftest_is_refused_in_one_line():
    ls = _listen()
    t = threading.Thread(target=_fake_perftest_server,
                         args=(ls, {}, b"5.60".ljust(16, b"\0"), GID_MSG))
    t.start()
    s = Session.connect("127.0.0.1", ls.getsockname()[1], 5)
    try:
        with pytest.raises(OobError, match="version 5.60.*5.70 or later"):
            s.versions()
    finally:
        s.close()
        t.join(5)
        ls.close()


def test_a_peer_out_of_step_is_named():
    """A hand shake that does not carry the peer's QP 0 message again (here: a second
    QP's message, as when the sides run different -q) is an error, not a hang."""
    ls = _listen()
    other = W.encode_key(W.KeyMsg(0, 16, 0x12, 1, 2, 3, W.gid_of("10.0.1.11")))

    def peer() -> None:
        c, _ = ls.accept()
        with c:
            c.recv(108)
            c.sendall(GID_MSG)
            c.recv(108)
            c.sendall(other)

    t = threading.Thread(target=peer)
    t.start()
    s = Session.connect("127.0.0.1", ls.getsockname()[1], 5)
    mine = W.KeyMsg(0, 16, 0x22, 1, 2, 3, W.gid_of("10.0.1.12"))
    try:
        s.versions = lambda: None  # type: ignore[method-assign]
        s.keys([mine], "QP exchange")
        with pytest.raises(OobError, match=r"out of step \(QPN 0x12 where QP 0 is 0x11\)"):
            s.hand_shake(mine, "sync")
    finally:
        s.close()
        t.join(5)
        ls.close()


def test_a_short_message_and_a_closed_peer_say_so():
    ls = _listen()

    def peer() -> None:
        c, _ = ls.accept()
        with c:
            c.recv(16)
            c.sendall(b"6.25\0")  # 5 of 16 bytes, then gone

    t = threading.Thread(target=peer)
    t.start()
    s = Session.connect("127.0.0.1", ls.getsockname()[1], 5)
    try:
        with pytest.raises(OobError, match="closed the side channel after 5 of 16 bytes"):
            s.versions()
    finally:
        s.close()
        t.join(5)
        ls.close()


def test_no_server_is_one_line():
    ls = _listen()
    port = ls.getsockname()[1]
    ls.close()
    with pytest.raises(OobError, match=f"cannot reach the server 127.0.0.1 port {port}"):
        Session.connect("127.0.0.1", port, 0.3)


def test_latency_samples_are_consecutive_post_gaps():
    """print_report_lat: delta[i] = tposted[i+1] - tposted[i], halved for ping-pong."""
    from emu.apps.perf.perftest_lat import samples

    assert samples([0.0, 0.001, 0.003], 2) == pytest.approx([500.0, 1000.0])
    assert samples([0.0, 0.001], 1) == pytest.approx([1000.0])

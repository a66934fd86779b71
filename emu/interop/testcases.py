# SPDX-License-Identifier: GPL-2.0-only
"""The interop test cases: what the runner lays out, which network each needs, and
the ``check()`` over both sides' outputs and the capture (``docs/interop.md`` §5).

One class per case, after quic-interop-runner's ``testcases.py``: a case knows
its files (written with fresh pseudo-random bytes, so a zero-filled or stale
file cannot pass), the impairment the runner applies to the link, and what
must hold afterwards. ``check`` returns ``None`` or a reason naming what was
wrong; the runner prefixes the case name.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import ClassVar

from emu.interop import contract as C
from emu.interop import networks as N
from emu.interop.wirecheck import Wire


def _sha(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _same(sent: str, received: str, what: str) -> str | None:
    """None if ``received`` holds exactly ``sent``'s bytes, else why not."""
    a, b = _sha(sent), _sha(received)
    if b is None:
        return f"{what}: the receiver wrote no {os.path.basename(received)}"
    if a != b:
        got = os.path.getsize(received)
        want = os.path.getsize(sent)
        return (f"{what}: received data differs from what was sent (sha256 {b[:12]} vs "
                f"{a[:12]}, {got} vs {want} bytes)")
    return None


class TestCase:
    """A test case; subclasses set the class attributes and extend :meth:`check`."""

    name: ClassVar[str]
    description: ClassVar[str]
    #: the network it runs on (:mod:`emu.interop.networks`: pair, reordering, trimming)
    network: ClassVar[str] = N.PAIR.name
    #: ``emu impair`` arguments for the pair's cable during the case (none: clean)
    impair: ClassVar[tuple[str, ...]] = ()
    #: bytes that must appear as payload in the capture (a client that moves nothing fails)
    wire_bytes: ClassVar[int] = 0
    goodput_bytes: ClassVar[int] = 0      # bytes for the goodput figure (0: not measured)
    #: the files the case moves: (sending side, file name, size, what it is called in a
    #: verdict); :meth:`prepare` writes them, :meth:`check_outputs` compares each with
    #: what the other side received
    payloads: ClassVar[tuple[tuple[str, str, int, str], ...]] = ()
    #: operations (substrings of the capture's packet types) one of which must be on the
    #: wire, and the verdict when none is
    wire_ops: ClassVar[tuple[str, ...]] = ()
    wire_ops_missing: ClassVar[str] = ""
    #: the same for MRC, which has only WRITE and WRITE with immediate (``docs/interop.md``
    #: §5, "MRC"); empty: nothing asked
    mrc_ops: ClassVar[tuple[str, ...]] = ()

    def __init__(self, server_dir: str, client_dir: str) -> None:
        self.server_dir, self.client_dir = server_dir, client_dir

    # -- layout ---------------------------------------------------------------------
    def _put(self, side_dir: str, name: str, size: int) -> None:
        with open(os.path.join(side_dir, name), "wb") as f:
            f.write(os.urandom(size))

    def prepare(self) -> None:
        """Write the files the sending side needs into its DATA_DIR."""
        for side, name, size, _ in self.payloads:
            self._put(self.client_dir if side == "client" else self.server_dir, name, size)

    def recv(self, side: str, name: str) -> str:
        return os.path.join(self.server_dir if side == "server" else self.client_dir,
                            "received", name)

    def sent(self, side: str, name: str) -> str:
        return os.path.join(self.server_dir if side == "server" else self.client_dir, name)

    # -- verdict --------------------------------------------------------------------
    def check_outputs(self) -> str | None:
        for side, name, _, what in self.payloads:
            other = "server" if side == "client" else "client"
            why = _same(self.sent(side, name), self.recv(other, name), what)
            if why:
                return why
        return None

    def check_wire(self, w: Wire) -> str | None:
        ops = self.mrc_ops if w.mrc else self.wire_ops
        if ops and not any(op in t for t in w.types for op in ops):
            return f"no {' / '.join(ops)} on the wire" if w.mrc else self.wire_ops_missing
        return None

    def check(self, w: Wire) -> str | None:
        """Everything a ✓ needs: outputs, a clean capture, data on the wire, the case's own."""
        why = self.check_outputs()
        if why:
            return why
        if w.error:
            return w.error
        if w.malformed:
            return f"{len(w.malformed)} malformed packet(s) in the capture, first {w.malformed[0]}"
        if w.bad_icrc:
            return f"{len(w.bad_icrc)} packet(s) with a bad ICRC, first {w.bad_icrc[0]}"
        if w.ev_echo_wrong:
            return (f"{w.ev_echo_wrong} of {w.ev_echoes} SACK/NACK EV echoes name an EV the "
                    f"answered packet was not sent on (the EV placement disagrees), first "
                    f"{w.ev_echo_first[0]}")
        if w.payload_bytes < self.wire_bytes:
            return (f"only {w.payload_bytes} payload bytes on the wire, the case moves "
                    f"{self.wire_bytes}")
        return self.check_wire(w)


class Handshake(TestCase):
    name = "handshake"
    description = "connection established, one SEND of 32 B"
    wire_bytes = C.HANDSHAKE_SIZE
    payloads = (("client", "payload.bin", C.HANDSHAKE_SIZE, "SEND"),)
    wire_ops, wire_ops_missing = ("SEND",), "no SEND request on the wire"
    mrc_ops = ("WRITE_ONLY_IMM", "WRITE_LAST_IMM")


class Transfer(TestCase):
    """WRITE ``payload.bin`` into the server's region; hashes compared."""

    size: ClassVar[int]


def _write_of(size: int) -> tuple[tuple[str, str, int, str], ...]:
    return (("client", "payload.bin", size, f"WRITE of {size} B"),)


def _transfer(case: str, text: str) -> type[Transfer]:
    size = C.TRANSFER_SIZES[case]
    return type(f"Transfer_{case}", (Transfer,), {
        "name": case, "description": text, "size": size, "wire_bytes": size,
        "goodput_bytes": size, "payloads": _write_of(size), "__doc__": text})


Transfer1B = _transfer("transfer-1b", "WRITE of 1 B")
Transfer4K = _transfer("transfer-4k", "WRITE of 4 KiB")
Transfer1M = _transfer("transfer-1m", "WRITE of 1 MiB")
Transfer64M = _transfer("transfer-64m", "WRITE of 64 MiB")


class Read(TestCase):
    name = "read"
    description = "READ of the server's 1 MiB region"
    wire_bytes = C.READ_SIZE
    goodput_bytes = C.READ_SIZE
    payloads = (("server", "payload.bin", C.READ_SIZE, "READ"),)
    wire_ops, wire_ops_missing = ("READ",), "no READ request or response on the wire"


class SendRecv(TestCase):
    name = "sendrecv"
    description = "16 SENDs of 16 KiB into posted receives"
    wire_bytes = C.SENDRECV_SIZE
    payloads = (("client", "payload.bin", C.SENDRECV_SIZE, "SENDs"),)
    mrc_ops = ("WRITE_ONLY_IMM", "WRITE_LAST_IMM")


class Atomics(TestCase):
    name = "atomics"
    description = "FETCH_ADD then COMPARE_SWAP on the server's 8 bytes"
    wire_bytes = 0

    def check_outputs(self) -> str | None:
        try:
            with open(self.recv("client", "atomics.json")) as f:
                fetched = json.load(f).get("fetched")
        except (OSError, ValueError) as e:
            return f"client's atomics.json unreadable: {e}"
        want = [C.ATOMIC_INITIAL, C.ATOMIC_ADD + C.ATOMIC_INITIAL]
        if fetched != want:
            return f"fetched values {fetched}, expected {want}"
        try:
            with open(self.recv("server", "final.bin"), "rb") as f:
                (final,) = struct.unpack("=Q", f.read(8))
        except (OSError, struct.error) as e:
            return f"server's final.bin unreadable: {e}"
        if final != C.ATOMIC_SWAP:
            return f"target holds {final} after the atomics, expected {C.ATOMIC_SWAP}"
        return None

    wire_ops = ("ATOMIC", "FETCH_ADD", "CMP_SWAP")
    wire_ops_missing = "no atomic request on the wire"


class MultiConn(TestCase):
    name = "multiconn"
    description = f"{C.MULTICONN_N} QPs / endpoints, one WRITE each"
    wire_bytes = C.MULTICONN_N * C.MULTICONN_SIZE
    payloads = tuple(("client", f"payload-{i}.bin", C.MULTICONN_SIZE, f"connection {i}")
                     for i in range(C.MULTICONN_N))

    def check_wire(self, w: Wire) -> str | None:
        if w.qpns and len(w.qpns) < C.MULTICONN_N:
            return f"requests went to {len(w.qpns)} QP(s), expected {C.MULTICONN_N}"
        return None


class Loss(Transfer):
    name = "loss"
    description = "WRITE of 1 MiB with 2 % random drop: retransmissions on the wire"
    size = C.TRANSFER_SIZES["loss"]
    payloads = _write_of(size)
    wire_bytes = size
    impair = N.LOSS_ARGS

    def check_wire(self, w: Wire) -> str | None:
        # the capture is at the client's end, after the drop: a request the link dropped
        # shows only by being sent again; with none dropped (P ≈ 0.98^requests) none is owed
        if w.retransmissions == 0 and w.link_dropped != 0:
            n = "" if w.link_dropped is None else f" {w.link_dropped} transport"
            return f"no retransmission on the wire although the link dropped{n} packets"
        return None


class Duplication(Transfer):
    name = "duplication"
    description = "WRITE of 1 MiB, every packet client → server sent twice"
    size = C.TRANSFER_SIZES["duplication"]
    payloads = _write_of(size)
    wire_bytes = size
    impair = N.DUPLICATE_ARGS

    def check_wire(self, w: Wire) -> str | None:
        if w.duplicates == 0:
            return "no duplicated packet on the wire although the link duplicates every one"
        if w.server_duplicates == 0:
            return f"the server's emu nicd counted no duplicate ({w.duplicates} on the wire)"
        return None


class Reordering(Transfer):
    name = "reordering"
    description = "WRITE of 1 MiB through a switch that holds each packet 0–2 ms"
    size = C.TRANSFER_SIZES["reordering"]
    payloads = _write_of(size)
    wire_bytes = size
    network = N.REORDERING.name

    def check_wire(self, w: Wire) -> str | None:
        if w.overtook == 0 or (w.overtook is None and w.reordered == 0):
            return "no packet arrived out of order at the server (the switch did not reorder)"
        return None


class Trimming(Transfer):
    name = "trimming"
    description = "WRITE of 1 MiB into a 100 Mbit/s switch port that trims above 100 KB"
    size = C.TRANSFER_SIZES["trimming"]
    payloads = _write_of(size)
    wire_bytes = size
    network = N.TRIMMING.name

    def check_wire(self, w: Wire) -> str | None:
        if w.trimmed == 0:
            return (f"no trimmed packet (DSCP {'/'.join(map(str, w.trimmed_dscps))}) on the "
                    "wire: the switch did not trim")
        if w.retransmissions == 0:
            return f"{w.trimmed} packet(s) trimmed but none retransmitted"
        if w.pdcs or w.mrc:  # UET, MRC: the target says so with a NACK naming the trim
            if not any("TRIM" in k for k in w.nack_reasons):
                return (f"{w.trimmed} packet(s) trimmed but no NACK TRIMMED on the wire "
                        f"(NACKs: {dict(w.nack_reasons) or 'none'})")
        return None


class BadKey(TestCase):
    name = "badkey"
    description = "WRITE with a wrong key: error at the initiator, target unchanged"

    payloads = (("client", "payload.bin", C.BADKEY_SIZE, "WRITE"),
                ("server", "target.bin", C.BADKEY_SIZE, "target memory"))

    def check_outputs(self) -> str | None:
        why = _same(self.sent("server", "target.bin"), self.recv("server", "target.bin"),
                    "target memory")
        return f"target memory changed by a WRITE with a wrong key ({why})" if why and \
            os.path.exists(self.recv("server", "target.bin")) else why

    def check_wire(self, w: Wire) -> str | None:
        if not (w.naks or w.uet_error_rcs or w.nack_reasons):
            return "no NAK / error response on the wire for the WRITE with a wrong key"
        return None


class Teardown(TestCase):
    name = "teardown"
    description = "WRITE, destroy the connection, a second connection, WRITE"
    wire_bytes = 2 * C.TEARDOWN_SIZE
    payloads = (("client", "payload.bin", C.TEARDOWN_SIZE, "first connection"),
                ("client", "payload2.bin", C.TEARDOWN_SIZE, "second connection"))

    def check_wire(self, w: Wire) -> str | None:
        if w.qpns and len(w.qpns) < 2:
            return f"both connections' requests went to one QP ({sorted(w.qpns)})"
        return None


ALL: list[type[TestCase]] = [Handshake, Transfer1B, Transfer4K, Transfer1M, Read, SendRecv,
                             Atomics, MultiConn, Loss, Duplication, Reordering, Trimming, BadKey,
                             Teardown, Transfer64M]
BY_NAME = {c.name: c for c in ALL}


def select(names: str | None) -> list[type[TestCase]]:
    """``-t a,b`` → those cases (ValueError naming an unknown one); None → all."""
    if not names:
        return list(ALL)
    out = []
    for n in names.split(","):
        n = n.strip()
        if n not in BY_NAME:
            raise ValueError(f"unknown test case {n!r}; known: {', '.join(BY_NAME)}")
        out.append(BY_NAME[n])
    return out

# SPDX-License-Identifier: GPL-2.0-only
"""Garbage in, DecodeError out: 10,000 random and truncated inputs per protocol.

A daemon fed hostile bytes must be able to count a drop with one ``except
DecodeError``; anything else escaping a decoder is a crash in waiting.
"""

from __future__ import annotations

import random

import pytest

from emu.wire import sample
from emu.wire.codec import roce as roce_codec
from emu.wire.codec import uet as uet_codec
from emu.wire.errors import DecodeError

N = 10_000


def _decoders():
    return {
        "roce": roce_codec.decode_packet,
        "mrc": roce_codec.decode_packet,
        "uet": uet_codec.decode_packet,
        "uet-native": lambda data: uet_codec.decode_packet(data, native_ip=True),
    }


def _valid(protocol: str) -> list[bytes]:
    """UDP payloads of the sample capture's packets of one protocol."""
    return [p for proto, _name, p in sample.transport_payloads() if proto == protocol]


@pytest.mark.parametrize("protocol", ["roce", "mrc", "uet", "uet-native"])
def test_fuzz_random_truncated_and_mutated(protocol):
    decode = _decoders()[protocol]
    valid = _valid(protocol)
    assert valid, "the sample set has packets of every protocol"
    rng = random.Random(f"emu-fuzz-{protocol}")
    outcomes = {"ok": 0, "error": 0}

    def feed(data: bytes) -> None:
        try:
            decode(data)
            outcomes["ok"] += 1
        except DecodeError as e:
            assert e.header and str(e).startswith(e.header) and e.offset >= 0
            outcomes["error"] += 1

    for i in range(N):
        kind = i % 4
        if kind == 0:      # pure noise of any length, biased towards short
            feed(rng.randbytes(rng.choice((rng.randrange(0, 16), rng.randrange(0, 128)))))
        elif kind == 1:    # a valid packet cut anywhere
            p = rng.choice(valid)
            feed(p[:rng.randrange(0, len(p))])
        elif kind == 2:    # a valid packet with random bytes flipped
            p = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                p[rng.randrange(len(p))] = rng.randrange(256)
            feed(bytes(p))
        else:              # a valid header prefix followed by noise
            p = rng.choice(valid)
            cut = rng.randrange(0, min(len(p), 64))
            feed(p[:cut] + rng.randbytes(rng.randrange(0, 64)))
    assert outcomes["ok"] + outcomes["error"] == N
    # truncation must be noticed, not papered over
    assert outcomes["error"] > N // 10


@pytest.mark.parametrize("protocol", ["roce", "mrc", "uet", "uet-native"])
def test_every_truncation_into_the_headers_is_an_error(protocol):
    """Cut anywhere before the payload (headers, or RoCE's ICRC) and the decoder must say so."""
    decode = _decoders()[protocol]
    for p in _valid(protocol):
        headers_end = len(p) - len(decode(p).payload)
        assert headers_end >= 4
        for cut in range(headers_end):
            with pytest.raises(DecodeError):
                decode(p[:cut])

# SPDX-License-Identifier: GPL-2.0-only
"""Replay a fuzz corpus (:func:`emu.chaos.fuzz.corpus`) at a rate; standard library only.

``python3 send.py CORPUS DST SPORT RATE SECONDS`` sends ``RATE`` × ``SECONDS``
of the corpus's packets in order (from the start again when it ends) to ``DST``
from UDP port ``SPORT``, packet *k* due at *k* / ``RATE`` s (late ones go out at
once), then prints one JSON line: packets sent per destination port, send
errors, seconds from the first to the last and the rate achieved.

Why standard library only: it runs as an unprivileged user (``setpriv
--reuid=nobody``) with the system Python inside a host's namespace — what
any user on that host could do — without access to emu's virtualenv. It sets
DF (IPv4 ID 0), as emu's daemons do, so the corpus's RoCEv2 ICRCs hold.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time

_REC = struct.Struct("!HH")


def load(path: str) -> list[tuple[int, bytes]]:
    data = open(path, "rb").read()
    out, i = [], 0
    while i + 4 <= len(data):
        port, n = _REC.unpack_from(data, i)
        out.append((port, data[i + 4:i + 4 + n]))
        i += 4 + n
    return out


def main(argv: list[str]) -> int:
    path, dst, sport, rate, seconds = argv[0], argv[1], int(argv[2]), float(argv[3]), float(argv[4])
    pkts = load(path)
    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    if fam == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO
    s.bind(("", sport))
    sent: dict[int, int] = {}
    errors = 0
    n = int(rate * seconds)  # the whole budget's packets: packet k is due at t0 + k / rate
    t0 = time.monotonic()
    k = 0
    while k < n:
        due = min(n, int((time.monotonic() - t0) * rate) + 1)
        while k < due:
            port, data = pkts[k % len(pkts)]
            try:
                s.sendto(data, (dst, port))
                sent[port] = sent.get(port, 0) + 1
            except OSError:
                errors += 1
            k += 1
        if k < n:
            time.sleep(min(0.001, max(0.0, t0 + k / rate - time.monotonic())))
    el = time.monotonic() - t0
    total = sum(sent.values())
    print(json.dumps({"sent": {str(p): n for p, n in sent.items()}, "total": total,
                      "errors": errors, "seconds": round(el, 3),
                      "rate": round(total / el, 1) if el else 0.0}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

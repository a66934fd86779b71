# SPDX-License-Identifier: GPL-2.0-only
"""Installing a node's routes waits out a gateway the kernel cannot reach yet (no root).

Seen once in a CI run: ``emu up`` of the multi-plane fabric failed with ``h1: route ::/0:
No route to host`` — the route via a gateway went in before the kernel had passed on the
link's carrier. :meth:`Fabric._install_routes` tries again for a bounded time, replacing
what went in; any other error, or one that outlasts the wait, still fails the build."""

from __future__ import annotations

import errno

import pytest

from emu.fabric import build, nl


class FakeBatch:
    """Refuses the first ``fail`` runs with ``err``; records what it was sent."""

    def __init__(self, fail: int, err: int = errno.EHOSTUNREACH) -> None:
        self.fail, self.err, self.runs = fail, err, []

    def run(self, msgs, tolerate=()):
        self.runs.append((list(msgs), tolerate))
        if len(self.runs) <= self.fail:
            raise nl.NetlinkError(self.err, "h1: route")
        return len(msgs)


def _fabric(monkeypatch):
    f = object.__new__(build.Fabric)
    monkeypatch.setattr(f, "_route_msgs", lambda node, p, replace=False: [("msg", replace)],
                        raising=False)
    monkeypatch.setattr(build.time, "sleep", lambda s: None)
    return f


def test_an_unreachable_gateway_is_tried_again_replacing_what_went_in(monkeypatch):
    f = _fabric(monkeypatch)
    b = FakeBatch(fail=2)
    f._install_routes("h1", None, b)
    assert [r for r, _ in b.runs] == [[("msg", False)], [("msg", True)], [("msg", True)]]
    assert [t for _, t in b.runs] == [(), (errno.EEXIST,), (errno.EEXIST,)]


def test_other_errors_and_a_gateway_that_never_comes_still_fail(monkeypatch):
    f = _fabric(monkeypatch)
    with pytest.raises(nl.NetlinkError) as e:
        f._install_routes("h1", None, FakeBatch(fail=1, err=errno.EINVAL))
    assert e.value.errno == errno.EINVAL
    clock = iter(range(0, 100, 1))  # each look at the clock a second later
    monkeypatch.setattr(build.time, "monotonic", lambda: float(next(clock)))
    b = FakeBatch(fail=10**6)
    with pytest.raises(nl.NetlinkError):
        f._install_routes("h1", None, b)
    assert 1 < len(b.runs) <= build.ROUTE_SETTLE_S + 2

# SPDX-License-Identifier: GPL-2.0-only
"""What ``emu perf`` says after a run (emu.credible.overload): whose packets its
retransmission line counts (no root, no sockets: snapshots built from daemon-shaped
overload records)."""

from __future__ import annotations

from typing import Any

import pytest

from emu.credible.overload import delta, retransmitted, warning
from emu.nic.daemon import overload

RATE = 1e9  # every port's line rate here
T0, T1 = 10.0, 12.0  # a 2 s run


def _nic(tx: int = 0, retx: int = 0, *, causes: dict[str, int] | None = None,
         share: float = 0.0, cpu_s: float = 0.0, late: int = 0, cpu_wait_s: float = 0.0,
         t: float = T1) -> dict[str, Any]:
    """One NIC daemon's snapshot entry: ``share`` of its line rate carried since T0."""
    o = overload(dict(causes or {}), {"eth0": {"late": late, "late_s": 0.001 * late,
                                               "line_rate": RATE, "waits": 0,
                                               "bytes": int(share * RATE / 8 * (t - T0))}})
    o["cpu_s"], o["cpu_wait_s"], o["cpu_runs"] = cpu_s, cpu_wait_s, 0
    return {"overload": o, "tx_packets": tx, "retransmits": retx}


def _snap(t: float, **nics: dict[str, Any]) -> dict[str, Any]:
    return {"t": t, "nic": nics, "switch": {}, "unreachable": []}


def _run(own: list[str] | None = None, **after: dict[str, Any]) -> dict[str, Any]:
    """The delta of a run from idle daemons (same hosts) to ``after``."""
    before = _snap(T0, **{h: _nic(t=T0) for h in after})
    return delta(before, _snap(T1, **after), own=own)


# -- the retransmission line counts the run's own NICs ----------------------------------


def test_two_runs_at_once_each_count_their_own_nics_packets():
    """h1 → h4 and h2 → h4 at the same time both printed "224 of 14,257 packets the NICs
    sent were retransmissions" — every NIC's. Each now counts its two NICs and says so;
    the verdict stays the cluster's (h3's overload makes both runs not credible)."""
    after = {"h1": _nic(10_000, 100), "h2": _nic(4_000, 124), "h3": _nic(0, 0,
             causes={"rx_kernel_drops": 5}), "h4": _nic(257, 0)}
    a, b = _run(["h1", "h4"], **after), _run(["h2", "h4"], **after)
    assert retransmitted(a) == ("100 of 10,257 packets the NICs of h1 and h4 sent were "
                                "retransmissions (0.97 %)")
    assert retransmitted(b) == ("124 of 4,257 packets the NICs of h2 and h4 sent were "
                                "retransmissions (2.9 %)")
    assert (a["tx_packets"], a["retransmits"], a["counted_nics"]) == (10_257, 100, ["h1", "h4"])
    assert a["retransmitted_fraction"] == pytest.approx(100 / 10_257)
    assert a["nics"]["h2"] == {"tx_packets": 4_000, "retransmits": 124, "port_share": 0.0}
    for d in (a, b):  # the overload verdict is still the whole cluster's
        assert not d["credible"] and d["causes"] == {"rx_socket": 5}
        assert "nicd h3" in warning(d)
    every = _run(**after)  # no run named: every NIC, and the line says so
    assert retransmitted(every) == ("224 of 14,257 packets all NICs of the cluster sent were "
                                    "retransmissions (1.6 %)")
    one = _run(["h1"], **after)
    assert retransmitted(one).startswith("100 of 10,000 packets the NIC of h1 sent")
    assert retransmitted(_run(["h9"], **after)) == \
        "no packets counted: the run's NIC daemons could not be read"


def test_the_run_port_share_is_its_own_busiest_port():
    after = {"h1": _nic(share=0.02), "h2": _nic(share=0.9), "h4": _nic(share=0.01)}
    assert _run(["h1", "h4"], **after)["port_share"] == pytest.approx(0.02)
    assert _run(**after)["port_share"] == pytest.approx(0.9)


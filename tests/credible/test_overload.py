# SPDX-License-Identifier: GPL-2.0-only
"""What ``emu perf`` says after a run (emu.credible.overload): whose packets its
retransmission line counts, and the advice its NOT CREDIBLE warning gives per cause and
per run (no root, no sockets: snapshots built from daemon-shaped overload records)."""

from __future__ import annotations

from typing import Any

import pytest

from emu.credible.overload import SMALL_SHARE, delta, retransmitted, warning
from emu.nic.overloadstat import overload

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


# -- the advice fits the cause and the run ----------------------------------------------

TINY = 0.0002  # 0.02 MB/s-ish of a 1 Gb/s port: -s 2 -n 5000


SLOWER = "lower the rates, or run on fabric time (emu doctor proposes both)"


def _advice(w: str) -> str:
    return w.split("NOT CREDIBLE; ", 1)[1]


def test_a_cpu_bound_daemon_in_a_run_of_tiny_messages_is_not_told_to_lower_the_rates():
    d = _run(["h1", "h2"], h1=_nic(share=TINY, cpu_s=1.9), h2=_nic(share=TINY))
    assert d["causes"] == {"cpu_bound": 1}
    assert _advice(warning(d)) == (
        "the run carried 0.02 % of its line rate, so lower rates would not help: nicd h1 "
        "used 95 % of a CPU while its port carried 0.02 % of its line rate — the daemons' "
        "CPU per message was the limit; try fewer, larger messages (-s)")


def test_a_late_ack_in_a_small_run_is_told_as_such():
    """rto_held: a UET retransmission timeout only a daemon's late answer caused."""
    d = _run(["h1", "h2"], h1=_nic(share=TINY, causes={"rto_held": 2}), h2=_nic(share=TINY))
    assert d["causes"] == {"rto_held": 2}
    assert _advice(warning(d)) == (
        "the run carried 0.02 % of its line rate, so lower rates would not help: a daemon "
        "answered ACKs late (rto_held: its CPU per packet, or other work on this machine); "
        "try a quieter machine or a rerun")


def test_both_causes_at_once_name_both_limits():
    d = _run(["h1", "h2"], h1=_nic(share=TINY, cpu_s=1.9, causes={"rto_held": 1}),
             h2=_nic(share=TINY))
    a = _advice(warning(d))
    assert "lower the rates" not in a and "CPU per message was the limit" in a
    assert "answered ACKs late (rto_held" in a
    assert a.endswith("try fewer, larger messages (-s), a quieter machine or a rerun")


def test_a_starved_daemon_in_a_small_run_needs_a_quieter_machine_not_lower_rates():
    d = _run(["h1", "h2"], h1=_nic(share=TINY, cpu_wait_s=0.5), h2=_nic(share=TINY))
    assert d["causes"] == {"cpu_wait": 1}
    a = _advice(warning(d))
    assert "lower the rates" not in a and a.endswith("try a quieter machine")
    assert "daemons waited for a CPU" in a


def test_drops_in_a_small_run_are_the_daemons_falling_behind():
    d = _run(["h1", "h2"], h1=_nic(share=TINY), h2=_nic(share=TINY,
                                                        causes={"rx_kernel_drops": 3}))
    a = _advice(warning(d))
    assert a.startswith("the run carried 0.02 % of its line rate, so lower rates would not "
                        "help: the daemons fell behind their packets, not the link")


@pytest.mark.parametrize("causes, extra", [({"rto_held": 2}, {}), ({}, {"late": 3}),
                                           ({"rx_kernel_drops": 3}, {})])
def test_a_run_near_its_line_rate_is_still_told_to_lower_the_rates(causes, extra):
    d = _run(["h1", "h2"], h1=_nic(share=0.95, causes=causes, **extra), h2=_nic(share=0.95))
    assert not d["credible"]
    assert _advice(warning(d)) == SLOWER


def test_the_share_that_counts_as_small():
    assert 0 < SMALL_SHARE < 0.5
    below = _run(["h1"], h1=_nic(share=SMALL_SHARE * 0.9, causes={"rto_held": 1}))
    above = _run(["h1"], h1=_nic(share=SMALL_SHARE * 1.1, causes={"rto_held": 1}))
    assert "lower rates would not help" in warning(below)
    assert _advice(warning(above)) == SLOWER


def test_without_a_line_rate_the_advice_is_as_before():
    """Unpaced ports (no line rate): no share to judge by."""
    o = overload({"rto_held": 1}, {"eth0": {"late": 0}})
    z = overload({}, {"eth0": {"late": 0}})
    d = delta(_snap(T0, h1={"overload": z, "tx_packets": 0, "retransmits": 0}),
              _snap(T1, h1={"overload": o, "tx_packets": 0, "retransmits": 0}), own=["h1"])
    assert d["port_share"] is None
    assert _advice(warning(d)) == SLOWER


def test_a_run_that_could_not_read_a_daemon_is_not_told_to_lower_the_rates():
    """No cause counted, but a daemon's counters are missing (it died): the verdict is
    unknown, and rates have nothing to do with it."""
    d = _run(["h1"], h1=_nic(share=TINY))
    d = {**d, "unreachable": ["nicd h2 of cluster c is not running (pid 7 exited); see "
                              "`emu status c`"], "credible": False}
    assert warning(d) == ("warning: the emulator's overload during this run is unknown — NOT "
                          "CREDIBLE; could not read nicd h2 of cluster c is not running (pid 7 "
                          "exited); see `emu status c`")


def test_a_dilated_run_is_told_to_run_slower_not_to_lower_its_rates():
    """On fabric time the fabric stays as written: what gives the machine more time per
    packet is a larger time scale, and the advice names one."""
    from emu.credible.overload import _slower

    assert "time.scale=14200" in _slower({"time_scale": 7100.0})
    assert "lower the rates" in _slower({"time_scale": 1.0}) and "lower" in _slower({})

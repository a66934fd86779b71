# SPDX-License-Identifier: GPL-2.0-only
"""The kernel datapath's PFC agent (``emu.switch.kernel_pfc``), without root: fake ports
stand in for the tc BPF program's backlog and ingress table, and the frames it would send
are recorded. The rule is the reference's (``emu.switch.pausebook``, also under
``tests/switch/test_queue.py``); this checks the agent reads the program's state into it:
who holds packets, the priority, the hysteresis, a late joiner, the release."""

from __future__ import annotations

from emu.fabricclock import FabricClock
from emu.switch import kernel as K
from emu.switch.config import SwitchConfig
from emu.switch.kernel_pfc import KernelPfc

FAR = 1 << 62   # a departure far ahead: that ingress still has packets queued


class FakePort:
    """What KernelPort gives the agent: the data backlog, the ingress table."""

    def __init__(self) -> None:
        self.queued = 0
        self.dropped = 0
        self.table: dict[int, list[int]] = {}

    def state(self) -> dict[str, int]:
        return {"dropped_tail": self.dropped, "dropped_random": 0, "dropped_trim": 0}

    def backlog(self, p, s=None, now_ns=None) -> int:
        return self.queued

    def ingress(self) -> dict[int, list[int]]:
        return self.table

    def vnow(self, now_ns: int) -> int:
        return now_ns


def _agent():
    cfg = SwitchConfig.from_dict({"ports": {"h3": {"rate": "1gbit", "classes": {
        "3": {"lossless": True, "xoff": "30KB", "xon": "10KB"}}}, "h4": {"rate": "1gbit"}}})
    port, other = FakePort(), FakePort()
    sent: list[tuple[str, dict[int, int]]] = []
    names = {7: "h1", 8: "h2", 9: "spine1"}
    agent = KernelPfc(cfg, {"h3": port, "h4": other}, FabricClock(),  # type: ignore[dict-item]
                      lambda ifname, q: sent.append((ifname, q)), names.__getitem__)
    return agent, port, sent


def test_the_agent_pauses_who_holds_packets_and_releases_them_at_xon() -> None:
    agent, port, sent = _agent()
    assert agent.active and list(agent.ports) == ["h3"]   # h4 has no lossless class
    port.table = {7: [0, 0, 0, FAR, 0, 0, 0, 0], 8: [0] * 8, 9: [0, 0, 0, 5, 0, 0, 0, 0]}
    port.queued = 20_000
    agent.poll(1.0)
    assert sent == []                                   # below xoff: nothing
    port.queued = 40_000
    agent.poll(1.001)
    # h1 has priority-3 packets queued; h2 none; spine1's last one has left (t 5 ns)
    assert [(n, set(q)) for n, q in sent] == [("h1", {3})] and sent[0][1][3] > 0
    c = agent.counters("h3", 1.002)
    assert c["xoff"] == 1 and c["paused_time"] > 0
    sent.clear()
    port.table[8][3] = FAR                              # h2 sends more while paused
    port.queued = 25_000                      # between xon and xoff: held (no refresh due)
    agent.poll(1.002)
    assert sent == [("h2", {3: sent[0][1][3]})] and sent[0][1][3] > 0
    sent.clear()
    port.queued = 10_000                                # at xon: both released
    agent.poll(1.003)
    assert sorted(sent) == [("h1", {3: 0}), ("h2", {3: 0})]
    c = agent.counters("h3", 2.0)
    assert (c["xoff"], c["xon"]) == (1, 1) and abs(c["paused_time"] - 0.002) < 1e-9


def test_the_agent_refreshes_a_held_pause_and_counts_refused_frames() -> None:
    agent, port, sent = _agent()
    port.table = {7: [0, 0, 0, FAR, 0, 0, 0, 0]}
    port.queued = 40_000
    agent.poll(0.0)
    assert len(sent) == 1
    agent.poll(agent.cfg.pfc_refresh / 2)
    assert len(sent) == 1                               # not yet due
    agent.poll(agent.cfg.pfc_refresh + 1e-9)
    assert len(sent) == 2 and sent[1] == sent[0]        # XOFF again before it expires
    assert agent.frames == 2 and agent.send_errors == 0

    def refuse(ifname: str, q: dict[int, int]) -> None:
        raise OSError("down")

    agent.send = refuse
    port.queued = 0
    agent.poll(1.0)
    assert agent.send_errors == 1


def test_the_ingress_table_layout_matches_the_program() -> None:
    # ifindex[64] (u32) then t_last[64][8] (u64): one 4352-byte value
    assert K._INGRESS.size == 64 * 4 + 64 * 8 * 8


def test_a_late_poll_is_counted_as_overload_on_the_lossless_ports() -> None:
    """An agent that did not poll for a while (a stopped or starved daemon) may have
    paused too late: its lateness shows on the lossless ports (overload), not on others."""
    agent, port, _ = _agent()
    agent.poll(0.0)
    agent.poll(0.3)                                      # 300 ms behind, but idle: harmless
    assert agent.counters("h3", 0.3)["late"] == 0
    port.queued = 40_000                                 # above xoff
    agent.poll(0.3004)                                   # on schedule
    assert agent.counters("h3", 0.3)["late"] == 0
    agent.poll(0.6004)                                   # 300 ms behind, above xoff
    c = agent.counters("h3", 0.61)
    assert c["late"] == 1 and abs(c["late_s"] - 0.3) < 1e-9
    assert "late" not in agent.counters("h4", 0.61)


def test_a_late_poll_after_an_overflow_that_drained_is_overload() -> None:
    """The queue overflowed and emptied again while the agent was stopped: the late poll
    finds it idle, but the drops since the last poll mark the lateness; drops seen by an
    on-schedule poll are not the agent's lateness."""
    agent, port, _ = _agent()
    agent.poll(0.0)
    port.dropped = 5
    agent.poll(0.0004)                                   # on schedule: not late
    assert agent.counters("h3", 0.001)["late"] == 0
    port.dropped = 900                                   # 300 ms unpolled, drained again
    agent.poll(0.3004)
    c = agent.counters("h3", 0.31)
    assert port.queued == 0 and c["late"] == 1 and abs(c["late_s"] - 0.3) < 1e-9
    agent.poll(0.6004)                                   # late again, no new drops: idle
    assert agent.counters("h3", 0.61)["late"] == 1


def test_the_poll_interval_follows_the_headroom_and_the_scale() -> None:
    """Eight polls while the fastest lossless port's headroom fills at its rate, in wall
    time: 970 KB at 1 Gb/s is 7.8 ms at real time (a poll each ~1 ms), 2000 times slower
    at scale 2000 (capped at 20 ms)."""
    agent, _, _ = _agent()
    assert abs(agent.interval - (1_000_000 - 30_000) * 8 / 1e9 / 8) < 1e-9
    slow = KernelPfc(agent.cfg, {}, FabricClock(scale=2000), lambda *a: None)
    slow.reconfigure({"h3": FakePort()})  # type: ignore[dict-item]
    assert slow.interval == 0.02 and slow.late_after > slow.interval

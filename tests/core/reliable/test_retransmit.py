# SPDX-License-Identifier: GPL-2.0-only
"""emu.core.reliable.retransmit and .paths: resends owed, timeouts, per-path ledger."""

from __future__ import annotations

from dataclasses import dataclass

from emu.core.reliable.paths import PathLedger
from emu.core.reliable.retransmit import RetransmitQueue, expired


@dataclass
class Rec:
    psn: int
    sent_at: float
    length: int = 100


def test_release_due_moves_in_delay_order_and_reports_the_next():
    q: RetransmitQueue[int] = RetransmitQueue()
    assert not q and q.release_due(0.0) is None
    q.after(7, 2.0)
    q.after(3, 1.0)
    q.after(9, 3.0)
    q.at_once(1)
    assert q  # something owed at once
    assert q.release_due(2.0) == 3.0
    assert list(q.now) == [1, 7, 3] and list(q.later) == [9]
    q.forget(9)
    assert q.release_due(10.0) is None and list(q.now) == [1, 7, 3]
    q.clear()
    assert not q and not q.later


def test_a_key_owed_at_once_is_owed_once_until_it_is_taken():
    q: RetransmitQueue[int] = RetransmitQueue()
    assert q.at_once(5) and q.at_once(6)
    assert not q.at_once(5)  # a second NACK for 5 in the same batch: still one resend
    q.after(6, 1.0)
    q.release_due(2.0)  # 6's delayed resend comes due while 6 is owed at once
    assert list(q.now) == [5, 6]
    assert q.pop() == 5 and q.at_once(5)  # taken (resent): a later NACK owes it again
    assert [q.pop(), q.pop()] == [6, 5] and not q


def test_expired_splits_due_from_pending():
    recs = [Rec(0, 0.0), Rec(1, 0.5), Rec(2, 1.0)]
    due, nxt = expired(recs, 1.5, 1.0)
    assert [r.psn for r in due] == [0, 1] and nxt == 2.0  # exactly rto old is due
    due, nxt = expired(recs, 0.1, 1.0)
    assert due == [] and nxt == 1.0
    assert expired([], 5.0, 1.0) == ([], None)


def test_ledger_tracks_paths_bytes_and_ack_feedback():
    led = PathLedger()
    led.sent_many(10, [7, 8, 9], 100, now=1.0)
    assert led.in_flight == 300 and led.sent[11] == (8, 1.0)
    assert led.resent(11, 5, now=2.0) == 8 and led.sent[11] == (5, 2.0)
    assert led.resent(99, 5, now=2.0) is None  # (a control packet: no entropy before)
    led.released([Rec(10, 0.0), Rec(11, 0.0), Rec(50, 0.0)])  # 50: never in the ledger
    assert led.in_flight == 100
    assert led.feedback(3.0) == (200, 1.0)  # the newest released left at 2.0
    assert led.feedback(4.0) == (0, None)  # reported once
    led.reset()
    assert led.in_flight == 0 and not led.sent
    assert led.take_entropies() == []  # not kept unless asked


def test_ledger_keeps_the_entropies_released_for_a_policy_that_asks():
    """REPS recycles the path of every packet a clean ACK released (emu.paths.reps)."""
    led = PathLedger(keep_entropies=True)
    led.sent_many(10, [7, 8, 9], 100, now=1.0)
    led.released([Rec(10, 0.0), Rec(12, 0.0), Rec(50, 0.0)])
    assert led.take_entropies() == [7, 9] and led.take_entropies() == []
    led.released([Rec(11, 0.0)])
    led.reset()  # a restart: what was released and not reported is gone
    assert led.take_entropies() == []

# SPDX-License-Identifier: GPL-2.0-only
"""The shared multipath reliable core (issue #15): what a sprayed, selectively
acknowledged transport keeps per connection, whatever its headers say.

UET's PDCs run on it today and MRC's will. Each module holds one side of the
bookkeeping, written once:

* :mod:`.window` — the receiver's PSN window: which PSNs arrived, the verdict
  on a new one (new, duplicate, stale, out of window, ahead of an in-order
  stream) and the 64-bit SACK an ACK carries;
* :mod:`.scoreboard` — the sender's outstanding PSNs: allocation, the oldest
  unacknowledged PSN, release by cumulative ACK, by name and by SACK bitmap,
  RTT samples under Karn's rule, loss presumed from later deliveries or shown by
  a loss probe's answer;
* :mod:`.retransmit` — what is owed a resend (at once or after a delay) and
  which records a retransmission timeout has expired;
* :mod:`.paths` — per-PSN entropy and send time, bytes in flight and what an
  ACK released: what a path policy and a congestion controller learn from.

Nothing here knows a header, a NACK code or a message: those stay with the
transport (``emu/transports/<proto>/``). Sans-IO like the rest of ``emu.core``:
time is an argument.
"""

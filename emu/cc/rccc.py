# SPDX-License-Identifier: GPL-2.0-only
"""RCCC, UET's receiver-credit congestion control: the receiver hands out the right to send.

Why a receiver scheme at all: in an incast (many senders, one receiver) the
bottleneck is the receiver's own link, and only the receiver sees every flow
that converges on it. So it meters its line rate out as *credit*, shared
fairly among the senders that asked, and a sender puts bytes on the wire
only against credit it holds. The receiver's link cannot be overrun by more
than the credit bucket's burst, whatever the number of senders.

Two halves, because they live on different NICs:

* :class:`Rccc` — the **sender** half, a :class:`~emu.cc.CongestionControl`
  registered as ``"rccc"``: ``credit`` bytes, spent by :meth:`Rccc.on_sent`,
  topped up by :meth:`Rccc.on_credit`; :meth:`Rccc.send_allowance` is the
  unspent credit whatever is in flight. :meth:`Rccc.credit_target` says how
  much more to ask for.
* :class:`RcccReceiver` — the **receiver** half, one per NIC (not per flow):
  a token bucket filling at ``line_rate``, emptied in ``quantum``-sized grants
  to the requesting senders in round robin. Equal quanta in turn make the
  shares max-min fair: a sender that wants less than its share gets what it
  wants, the rest split the remainder.

How this maps onto UET packets (uet.md: PDS headers, Control types; the
packet plumbing is the PDS layer's job):

=============================== ===============================================
UET                             here
=============================== ===============================================
``*_CC_REQ.credit_target`` u24  sender: :meth:`Rccc.credit_target` (backlog not
                                yet covered by credit), on data packets
CP CREDIT_REQ (ctl_type 8),     sender, when blocked with no data to carry the
payload = credit_target         request → receiver :meth:`RcccReceiver.on_request`
CP CREDIT (ctl_type 7),         receiver: each ``(sender, bytes)`` of
payload = credit bytes          :meth:`RcccReceiver.grant` → sender
                                :meth:`Rccc.on_credit`
ACK_CC cc_type 1 ``credit`` u24 the same grant piggybacked on an ACK
=============================== ===============================================

Credit is in bytes (24 bits on the wire: up to 16 MiB per grant; the
receiver never grants more than ``quantum`` per sender per turn). The
receiver keys senders by whatever the transport uses (a PDC id), and calls
:meth:`RcccReceiver.forget` when a PDC closes. Credit granted to a sender
that never uses it is lost to the receiver's rate — the safe direction.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from emu.cc import CongestionControl, register

CREDIT_MAX = (1 << 24) - 1  # credit / credit_target fields are 24 bits
_EPS = 1e-6  # bytes


@register
class Rccc(CongestionControl):
    """The sender half: send only against credit the receiver granted.

    ``initial_credit`` (default 0) lets a new flow start without waiting a
    round trip for its first grant, at the price of that much possible
    overrun of the receiver per starting flow; 0 is the conservative choice.
    """

    name = "rccc"

    def __init__(self, line_rate: float, now: float = 0.0, *, initial_credit: int = 0) -> None:
        super().__init__(line_rate, now)
        if initial_credit < 0:
            raise ValueError("initial_credit must be >= 0 bytes")
        self.credit = int(initial_credit)
        self.counts = {"granted": 0, "grants": 0, "sent": 0, "blocked": 0, "bad_credit": 0}

    @property
    def rate(self) -> float:
        # credit arrives paced by the receiver: the sender itself may burst at line rate
        return self.line_rate

    def send_allowance(self, in_flight: int) -> int:
        a = max(0, self.credit)
        if a == 0:
            self.counts["blocked"] += 1
        return a

    def credit_target(self, backlog: int) -> int:
        """What to put in ``credit_target`` for ``backlog`` bytes still to send
        (retransmissions included): the part not covered by credit already held."""
        return min(CREDIT_MAX, max(0, int(backlog) - max(0, self.credit)))

    def on_sent(self, nbytes: int, now: float) -> None:
        self.credit -= max(0, int(nbytes))
        self.counts["sent"] += max(0, int(nbytes))

    def on_credit(self, nbytes: int, now: float) -> None:
        if not isinstance(nbytes, int) or not 0 <= nbytes <= CREDIT_MAX:
            self.counts["bad_credit"] += 1  # a malformed grant is dropped, never trusted
            return
        self.credit += nbytes
        self.counts["granted"] += nbytes
        self.counts["grants"] += 1

    def state(self) -> dict[str, Any]:
        return {"rate": self.rate, "credit": self.credit, **self.counts}


class RcccReceiver:
    """The receiver half for one NIC (see the module docstring).

    ``line_rate`` (bits/s) is what the bucket fills at; ``quantum`` the most
    one sender gets per turn (also the grant size the bucket waits for);
    ``burst`` the bucket's depth — credit an idle receiver saves up, by
    default one BDP of ``base_rtt`` (at least one quantum) so a new request
    is answered with a round trip's worth at once.
    """

    def __init__(self, line_rate: float, now: float = 0.0, *, quantum: int = 4096,
                 burst: int | None = None, base_rtt: float = 12e-6) -> None:
        if line_rate <= 0 or base_rtt <= 0:
            raise ValueError("need line_rate > 0 bits/s and base_rtt > 0 s")
        if not 1 <= quantum <= CREDIT_MAX:
            raise ValueError(f"quantum must be 1..{CREDIT_MAX} bytes")
        self.bytes_per_s = line_rate / 8
        self.quantum = int(quantum)
        bdp = int(self.bytes_per_s * base_rtt)
        self.burst = max(self.quantum, bdp if burst is None else int(burst))
        self.tokens = float(self.burst)
        self._last = now
        self.want: OrderedDict[Hashable, int] = OrderedDict()  # round-robin order
        self.granted_total = 0
        self.counts = {"requests": 0, "grants": 0, "bad_requests": 0}

    def _fill(self, now: float) -> None:
        if now > self._last:
            self.tokens = min(float(self.burst),
                              self.tokens + (now - self._last) * self.bytes_per_s)
            self._last = now

    def on_request(self, sender: Hashable, credit_target: int, now: float) -> None:
        """A sender asks for ``credit_target`` more bytes (CREDIT_REQ or a *_CC_REQ);
        the latest request replaces the earlier one, 0 withdraws it."""
        if not isinstance(credit_target, int) or not 0 <= credit_target <= CREDIT_MAX:
            self.counts["bad_requests"] += 1
            return
        self.counts["requests"] += 1
        self._fill(now)
        if credit_target == 0:
            self.want.pop(sender, None)
        else:
            self.want[sender] = credit_target  # a known sender keeps its place in the round

    def forget(self, sender: Hashable) -> None:
        """The sender's PDC is gone: no more grants for it."""
        self.want.pop(sender, None)

    def grant(self, now: float) -> list[tuple[Hashable, int]]:
        """Credit to send now: one ``(sender, bytes)`` per sender that got any, in turn
        order. Tokens are spent in whole quanta (or a sender's smaller remainder)."""
        self._fill(now)
        out: dict[Hashable, int] = {}
        want = self.want
        while want:
            sender, w = next(iter(want.items()))
            amt = min(self.quantum, w)
            if amt > self.tokens + _EPS:  # _EPS: float fill at get_timer()'s time suffices
                break
            self.tokens = max(0.0, self.tokens - amt)
            out[sender] = out.get(sender, 0) + amt
            del want[sender]
            if w > amt:
                want[sender] = w - amt  # to the back of the round
        n = sum(out.values())
        self.granted_total += n
        self.counts["grants"] += len(out)
        return list(out.items())

    def take(self, sender: Hashable, now: float, want: int | None = None) -> int:
        """Answer one request at once (a CREDIT_REQ that names no amount): up to
        ``quantum`` (or ``want``) bytes from the bucket, possibly 0 — the sender asks
        again later. Requests from many senders arrive in turn, so each gets about the
        same; the bucket still bounds the total by the line rate."""
        self._fill(now)
        amt = min(self.quantum, self.quantum if want is None else max(0, int(want)),
                  int(self.tokens + _EPS))
        self.tokens = max(0.0, self.tokens - amt)
        self.granted_total += amt
        self.counts["requests"] += 1
        self.counts["grants"] += amt > 0
        return amt

    def get_timer(self) -> float | None:
        """When :meth:`grant` will next have something to give, or None when nobody waits."""
        if not self.want:
            return None
        need = min(self.quantum, next(iter(self.want.values())))
        if self.tokens >= need:
            return self._last
        return self._last + (need - self.tokens) / self.bytes_per_s

    def state(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "waiting": len(self.want),
                "granted_total": self.granted_total, **self.counts}

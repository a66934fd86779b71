# SPDX-License-Identifier: GPL-2.0-only
"""SETH's M field, the wire setting ``emu.wire.mrc_defs.M_FIELD`` (specs/mrc.md: the
reconstructions disagree; issue #35 item 7). Reading A (``"skip"``, the default): M is the
EV skip hint and a CE mark is echoed in ``cc_flags``. Reading B (``"ecn"``): M is the
ECN echo (1 = the SACKed packet arrived CE), ``cc_flags`` carries no CE bit and there are
no skip hints. The receiver writes it, the sender reads it: a CE-marked packet's SACK
must reach NSCC and the EV set's ``ecn`` count under either reading."""

from __future__ import annotations

import random

import pytest
from lossy_link import mrc_pair, register

from emu.core.memory import MemoryTable
from emu.core.verbs import SendWR, Sge
from emu.transports.mrc.evset import SackHint
from emu.transports.mrc.target import TargetQP
from emu.wire import mrc_defs
from emu.wire.codec.mrc import METH, MRC_RELIABILITY_SACK, MRC_WRITE_ONLY, SETH
from emu.wire.codec.roce import BTH, RETH, decode_packet, encode_packet

PMTU = 1024


@pytest.fixture(params=["skip", "ecn"])
def m_field(request):
    old = mrc_defs.configure(m_field=request.param)
    yield request.param
    mrc_defs.configure(**old)


def test_the_setting_is_checked_and_restorable():
    assert mrc_defs.settings() == {"m_field": "skip"}
    with pytest.raises(KeyError):
        mrc_defs.configure(m_fields="ecn")
    with pytest.raises(ValueError):
        mrc_defs.configure(m_field="both")
    old = mrc_defs.configure(m_field="ecn")
    assert old == {"m_field": "skip"} and mrc_defs.M_FIELD == "ecn"
    assert mrc_defs.m_name(1) == "ECN_CE"
    mrc_defs.configure(**old)
    assert mrc_defs.m_name(1) == "SKIP_ONCE"


def test_seth_feedback_and_read_per_reading(m_field):
    if m_field == "skip":
        assert mrc_defs.seth_feedback(True) == (0, mrc_defs.CC_FLAG_CE)
        assert mrc_defs.seth_feedback(False, hint=2) == (2, 0)
        assert mrc_defs.seth_read(1, mrc_defs.CC_FLAG_CE) == (True, 1)
        assert mrc_defs.seth_read(3, 0) == (False, 0)
    else:
        assert mrc_defs.seth_feedback(True) == (1, 0)
        assert mrc_defs.seth_feedback(False, hint=2) == (0, 0)  # no skip hints
        assert mrc_defs.seth_read(1, 0) == (True, 0)
        # a reading-A peer's SACK: its CE bit and its hints are not read
        assert mrc_defs.seth_read(0, mrc_defs.CC_FLAG_CE) == (False, 0)
        assert mrc_defs.seth_read(2, 0) == (False, 0)


def test_the_target_writes_the_ce_echo_where_the_setting_says(m_field):
    mem = MemoryTable(random.Random(1))
    mr = register(mem, 4 * PMTU)
    t = TargetQP(0x17, 0x51, mem)
    for psn, ce in ((0, True), (1, False)):
        bth = BTH(opcode=MRC_WRITE_ONLY, dqpn=0x17, psn=psn)
        hdrs = [METH(msn=psn), RETH(va=mr.va + psn * PMTU, rkey=mr.rkey, dmalen=PMTU)]
        t.receive(decode_packet(encode_packet(bth, hdrs, bytes(PMTU))), 0x1234, 0.0, ce=ce)
    seths = [decode_packet(d).header(SETH) for d, _ in t.take()
             if d[0] == MRC_RELIABILITY_SACK]
    got = [(s.m, s.cc_flags) for s in seths]
    if m_field == "skip":
        assert got == [(0, 1), (0, 0)]
    else:
        assert got == [(1, 0), (0, 0)]


def _marked_write(seed: int = 3, size: int = 256 * PMTU):
    """emu → emu over a link that CE-marks a fifth of the ECT packets; what the sender's
    EV set and NSCC were told per SACK, and the SACKs on the wire."""
    link, ea, eb, qa, qb, src, dst, data = mrc_pair(seed, size, pmtu=PMTU, ce=0.2)
    link.tap = []
    ini = ea._qps[qa].ini
    told: list[tuple[SackHint, bool]] = []
    nscc: list[bool] = []
    on_sack, on_ack = ini.evs.on_sack, ini.cc.on_ack

    def spy_sack(ev, now, *, hint=SackHint.NONE, ecn=False):
        told.append((hint, ecn))
        on_sack(ev, now, hint=hint, ecn=ecn)

    def spy_ack(nbytes, now, *, ecn_echo=False, **kw):
        nscc.append(ecn_echo)
        on_ack(nbytes, now, ecn_echo=ecn_echo, **kw)

    ini.evs.on_sack, ini.cc.on_ack = spy_sack, spy_ack
    ea.post_send(qa, SendWR.write(1, [Sge(src.va, size, src.lkey)], dst.va, dst.rkey))
    link.run(until=5.0, stop=lambda: bool(link.completions("a")))
    assert bytes(dst.view[:size]) == data
    seths = [decode_packet(d).header(SETH) for _, side, d, _ in link.tap
             if side == "b" and d[0] == MRC_RELIABILITY_SACK]
    ecn_counted = sum(e.counts["ecn"] for e in ini.evs.slots)
    return link, told, nscc, seths, ecn_counted


def test_a_ce_marked_packets_sack_feeds_nscc_and_the_ev_set_under_either_reading(m_field):
    link, told, nscc, seths, ecn_counted = _marked_write()
    assert link.marked > 10
    ce_sacks = [s for s in seths if (s.m == 1 if m_field == "ecn" else s.cc_flags & 1)]
    assert len(ce_sacks) >= link.marked  # one SACK per marked packet (and duplicates')
    # the echo reached the EV set's ecn count and NSCC, once per CE SACK taken
    assert ecn_counted == sum(ecn for _, ecn in told) > 0
    assert sum(nscc) == sum(ecn for _, ecn in told)
    # emu's receiver sends no skip hints under either reading, and reading B has none
    assert all(h is SackHint.NONE for h, _ in told)
    if m_field == "ecn":
        assert {(s.m, s.cc_flags) for s in seths} <= {(0, 0), (1, 0)}
    else:
        assert {s.m for s in seths} == {0}

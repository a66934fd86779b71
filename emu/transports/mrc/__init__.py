# SPDX-License-Identifier: GPL-2.0-only
"""MRC (OCP Multipath Reliable Connection), sans-IO — being built (issue #35).

Here so far: EV profiles (:mod:`.evprofile`: which entropy values a QP may use)
and the per-QP EV set (:mod:`.evset`: the values split over planes, their
GOOD / SKIP / ASSUMED_BAD / DENIED states, rotation, probes, counters and
events). The QP engine (WRITE / WRITE-with-Immediate with per-packet RETH,
SACK and NACK handling, NSCC) is not here yet: ``emu nicd`` does not serve MRC.
"""

# SPDX-License-Identifier: GPL-2.0-only
"""Workloads: flows with start times and sizes, incast, permutation, all-to-all and
synchronized collectives (ring all-reduce, all-to-all in steps), run over RoCEv2, UET or
MRC through the client API and timed in fabric time from the applications' own
completions.

* :mod:`.model` — what a workload is, and its generators (pure);
* :mod:`.runner` — running one on a cluster: FCT per flow, JCT, goodput series;
* :mod:`.metrics` — Jain's fairness, percentiles, series (pure).
"""

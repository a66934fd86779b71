# SPDX-License-Identifier: GPL-2.0-only
"""Credibility: line rates and round trips from the fabric, what this machine sustains
(``emu doctor``), and the overload that makes a result not credible."""

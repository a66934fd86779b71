# SPDX-License-Identifier: GPL-2.0-only
"""A user's cluster: the fabric as built from a topology file, and the commands on it.

* :mod:`.cluster` — ``up``/``down``/``status`` helpers: the fabric, its link
  settings, the switch and NIC daemons, the state file's model
* :mod:`.cli` — ``emu up/down/status/exec/link/impair/clean/graph/capture``
* :mod:`.scheduler` — ``python -m emu.cluster.scheduler C``: the background
  process that carries out a topology's ``[[event]]`` schedule

This layer sits above the fabric, the daemons and the client API and below the
applications (``emu perf``, ``emu doctor``) and the ``emu`` command line.
"""

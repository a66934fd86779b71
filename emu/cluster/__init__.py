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

# Every command that loads a topology file comes through this package: register the
# checkers of [nic] and [switch] (emu.topology.sections) before any file is loaded.
from emu.nic import topology as _nic_topology  # noqa: E402, F401
from emu.switch import topology as _switch_topology  # noqa: E402, F401

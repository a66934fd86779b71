# SPDX-License-Identifier: GPL-2.0-only
"""``emu perf``: perftest-style bandwidth and latency tools over the NIC daemons.

``emu perf {write,read,send}-{bw,lat}`` behaves like ``ib_write_bw`` and
friends: started without an address it is the server, with one the client;
the two meet over a TCP side channel (port 18515, as perftest) and then move
data with RDMA operations through each host's ``emu nicd``. ``--from H1 --to
H2`` runs both halves across a running cluster in one command.

Modules: :mod:`.options` (flags), :mod:`.stats` (BW/MsgRate and latency
math), :mod:`.report` (perftest's banner and tables, JSON), :mod:`.pattern`
(data verification), :mod:`.channel` (the side channel), :mod:`.endpoint`
(device, buffers, QPs), :mod:`.bw` and :mod:`.lat` (the measurement loops),
:mod:`.run` (client and server), :mod:`.cluster` (``--from/--to``),
:mod:`.cli` (``emu perf``).

Exit status: 0 passed; 1 the test ran and failed (data corruption,
``--min-bw`` missed, a work completion error, the peer failed); 2 usage or
setup error (bad flags, no NIC daemon, peer not reachable).
"""

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

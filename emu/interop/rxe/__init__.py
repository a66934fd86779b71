# SPDX-License-Identifier: GPL-2.0-only
"""``linux-rxe``: the Linux kernel's own RoCEv2 (rdma_rxe) in a QEMU guest, as an interop
implementation (``docs/interop.md`` §9).

Why a guest: rxe is a kernel module and the machines emu runs on need not have
``CONFIG_INFINIBAND``; a Debian guest brings its own kernel. :mod:`.image` builds and
caches the guest from Debian's packages, :mod:`.vm` boots it bridged into a host
namespace on that host's fabric address, :mod:`.launch` is the contract's command and
``guest_endpoint.py`` (run inside the guest with rdma-core's ``pyverbs``) the endpoint.
"""

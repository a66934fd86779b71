# SPDX-License-Identifier: GPL-2.0-only
"""Names of the things a cluster makes.

Namespaces are ``<cluster>-<node>``; veths carry the model's ifnames (they
live only inside namespaces) and ifalias ``emu:<cluster>`` so ``status`` and
humans can tell ours apart. Teardown never relies on these names: it goes by
the state file (:mod:`emu.fabric.state`).
"""

from __future__ import annotations

import re
import secrets

#: root qdisc handle majors of emu's own qdiscs: a link's (``e3e0:``; a tbf under netem
#: is ``e3e1:``) and the switch pipeline's kernel datapath's (``e1:``), which serializes a
#: port in its link's place — only a qdisc with one of these is ever replaced or deleted
LINK_QDISC_MAJOR = 0xE3E0
SWITCH_QDISC_MAJOR = 0xE1

_CLUSTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


def check_cluster(name: str) -> str:
    """A cluster name usable in file and namespace names (no '/', no spaces, ≤ 32 chars)."""
    if not _CLUSTER.match(name):
        raise ValueError(f"bad cluster name {name!r}: use letters, digits, '_', '.', '-' "
                         f"(≤ 32 characters, not starting with punctuation)")
    return name


def ns_name(cluster: str, node: str) -> str:
    return f"{cluster}-{node}"


def marker(cluster: str) -> str:
    """The ifalias put on every veth of ``cluster``."""
    return f"emu:{cluster}"


def random_cluster(prefix: str = "t") -> str:
    """A fresh cluster name such as ``t3fa1`` (tests, benchmarks)."""
    return f"{prefix}{secrets.token_hex(2)}"

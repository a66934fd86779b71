# SPDX-License-Identifier: GPL-2.0-only
"""Who owns a memory-region file, and removing those whose owner is dead.

A buffer's file is ``/dev/shm/emu-mr-<pid>-<n>``: the creating process's pid
is in the name (:meth:`emu.core.memory.SharedBuffer.create`). Its owner
removes it on close and at exit; a SIGKILLed owner cannot, so two others do:
the NIC daemon when a client's connection drops and the owner is gone, and
``emu down`` / ``emu clean``, which call :func:`collect`. A file is garbage
only when its owner no longer runs — or when the pid in its name now belongs
to a process that started after the file was made (a reused pid) — so a live
process's buffer is never removed.
"""

from __future__ import annotations

import contextlib
import os
import re

from emu import proc

SHM_DIR = "/dev/shm"
SHM_PREFIX = "emu-mr-"
_NAME = re.compile(r"^emu-mr-(\d+)-\d+$")


def owner_pid(name: str) -> int | None:
    """The pid in a memory-region file name (None for names emu did not make)."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


def owner_gone(name: str, path: str | None = None) -> bool:
    """True if the process that made ``name`` no longer runs (never for foreign names)."""
    pid = owner_pid(name)
    if pid is None:
        return False
    if proc.gone(pid):
        return True
    if path is not None:  # the pid runs: is it the creator, or a process that reused it?
        started = proc.started_at(pid)
        try:
            made = os.stat(path).st_ctime
        except FileNotFoundError:
            return False
        return started is not None and made < started - 1.0
    return False


def remove_if_orphaned(name: str, shm_dir: str = SHM_DIR) -> bool:
    """Unlink ``name`` if its owner is gone; True if it was removed."""
    path = os.path.join(shm_dir, name)
    if not owner_gone(name, path):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def collect(shm_dir: str = SHM_DIR) -> list[str]:
    """Remove every memory-region file in ``shm_dir`` whose owner is dead; return their names."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(shm_dir):
            if name.startswith(SHM_PREFIX) and remove_if_orphaned(name, shm_dir):
                out.append(name)
    return out

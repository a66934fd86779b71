# SPDX-License-Identifier: GPL-2.0-only
"""Output paths a command was given: checked before the work that fills them.

A capture, a perf run or an interop matrix can take minutes; finding out only
at the end that its output file cannot be created throws that time away, and it
ended in a traceback. Commands therefore check their output paths first
(:func:`check_file`; a log directory is made at once, :func:`made_dir`), and a
write that fails anyway (a full disk, a directory removed meanwhile) is said in
the same words (:func:`cannot_write`). One place, so every command says it alike.

:func:`check_file` only looks: it creates nothing, so a command refused later
for another reason leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from emu.errors import UserError


def cannot_write(path: str | os.PathLike[str], why: OSError | str) -> str:
    """The one line saying that ``path`` cannot be written, and why."""
    reason = why if isinstance(why, str) else (why.strerror or str(why))
    return f"cannot write {os.fspath(path)}: {reason}"


def check_file(path: str | os.PathLike[str]) -> str:
    """``path`` as given, if a file can be created or overwritten there; else a
    :class:`UserError` naming the path and the reason (its directory is missing or is
    a file, it is a directory, no write permission, a read-only file system)."""
    p = os.fspath(path)
    if not p:
        raise UserError("an output path is empty")
    why = _file_obstacle(p)
    if why:
        raise UserError(cannot_write(p, why))
    return p


def make_dir(path: str | os.PathLike[str]) -> str:
    """Create directory ``path`` and its missing parents (like ``mkdir -p``: a log
    directory may be new) and return it; a :class:`UserError` naming the path and the
    reason when it cannot be made or written in."""
    p = os.fspath(path)
    if not p:
        raise UserError("an output directory is empty")
    why = _dir_obstacle(p, may_create=True)
    if why is None:
        try:
            os.makedirs(p, exist_ok=True)
        except OSError as e:
            why = e.strerror or str(e)
    if why:
        raise UserError(f"cannot create directory {p}: {why}")
    return p


@contextlib.contextmanager
def made_dir(path: str | os.PathLike[str]) -> Iterator[str]:
    """:func:`make_dir` for a command that has more to check before its work starts:
    if the block raises, the directories made here that are still empty go again, so a
    command refused after all leaves nothing behind."""
    p = os.path.abspath(os.fspath(path))
    new: list[str] = []  # deepest first
    while not os.path.exists(p) and os.path.dirname(p) != p:
        new.append(p)
        p = os.path.dirname(p)
    made = make_dir(path)
    try:
        yield made
    except BaseException:
        for d in new:
            try:
                os.rmdir(d)
            except OSError:
                break  # not empty (or gone): what is above it stays too
        raise


def _file_obstacle(p: str) -> str | None:
    """Why no file can be written at ``p`` (None: nothing in the way)."""
    if os.path.isdir(p):
        return "it is a directory"
    if os.path.exists(p):
        return None if os.access(p, os.W_OK) else _denied(p)
    return _dir_obstacle(os.path.dirname(os.path.abspath(p)))


def _dir_obstacle(d: str, *, may_create: bool = False) -> str | None:
    """Why no file can be created in directory ``d`` (None: it can): the first of its
    ancestors that exists is a file, ``d`` is missing (unless ``may_create``: then that
    ancestor is where it would be made), or that directory may not be written."""
    d = have = os.path.abspath(d)
    while not os.path.exists(have) and os.path.dirname(have) != have:
        have = os.path.dirname(have)
    if not os.path.isdir(have):
        return f"{have} is not a directory"
    if have != d and not may_create:
        return f"no directory {d}"
    return None if os.access(have, os.W_OK | os.X_OK) else _denied(have)


def _denied(p: str) -> str:
    """Why writing ``p`` is refused: a read-only file system, or permissions."""
    try:
        if os.statvfs(p).f_flag & os.ST_RDONLY:
            return f"read-only file system ({p})"
    except OSError:
        pass
    return f"permission denied ({p})"

# SPDX-License-Identifier: GPL-2.0-only
"""Network namespaces without subprocesses: create, enter, remove, sysctl.

Why not ``pyroute2.netns``: it forks a child for every namespace it creates and
for every socket it opens inside one (~ms each). A network namespace is a
*per-thread* attribute in Linux, so the calling thread can ``unshare`` /
``setns`` itself, do its work (open a netlink socket, write ``/proc/sys/net``)
and come back; sockets keep the namespace they were created in, and
``/proc/sys/net`` resolves to the namespace of the thread that opens the file.
Nothing here ever writes a sysctl of the namespace the process started in:
:func:`write_sysctls` refuses unless the thread is inside another namespace.

Namespaces are bind mounts at ``/run/netns/<name>`` exactly as iproute2 makes
them, so ``ip netns exec``, ``nsenter --net=`` and ``emu exec`` all work.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
from collections.abc import Iterator, Mapping, Sequence

NETNS_RUN_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_BIND = 0x1000
MS_SHARED = 1 << 20
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                        ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]

_rundir_ready = False


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def netns_path(name: str) -> str:
    """Where iproute2 (and we) keep the bind mount of namespace ``name``."""
    return os.path.join(NETNS_RUN_DIR, name)


def exists(name: str) -> bool:
    return os.path.exists(netns_path(name))


def inode(name: str) -> int | None:
    """The namespace's identity (st_ino of the bind mount), or None if it is gone."""
    try:
        return os.stat(netns_path(name)).st_ino
    except FileNotFoundError:
        return None


def _prepare_rundir() -> None:
    """Make /run/netns a shared mount, as iproute2 does, so other mount namespaces see ours."""
    global _rundir_ready
    if _rundir_ready:
        return
    os.makedirs(NETNS_RUN_DIR, exist_ok=True)
    d = NETNS_RUN_DIR.encode()
    if _libc.mount(b"", d, b"none", MS_SHARED | MS_REC, None) != 0:
        _check(_libc.mount(d, d, b"none", MS_BIND | MS_REC, None), "bind /run/netns")
        _check(_libc.mount(b"", d, b"none", MS_SHARED | MS_REC, None), "share /run/netns")
    _rundir_ready = True


def _self_ns_fd() -> int:
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def create(name: str) -> int:
    """Create namespace ``name`` (fails with EEXIST if the name is taken); return its inode.

    The mount point is created with O_EXCL so we never adopt somebody else's
    namespace of the same name.
    """
    _prepare_rundir()
    path = netns_path(name)
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444))
    home = _self_ns_fd()
    try:
        _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        try:
            _check(_libc.mount(b"/proc/thread-self/ns/net", path.encode(), b"none",
                               MS_BIND, None), f"bind-mount {path}")
        finally:
            _check(_libc.setns(home, CLONE_NEWNET), "setns back")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        os.close(home)
    return os.stat(path).st_ino


def remove(name: str, expect_inode: int | None = None) -> bool:
    """Remove namespace ``name``; True if it existed. Tolerates it being gone.

    With ``expect_inode`` a namespace that has been replaced by another of the
    same name (a different inode) is left alone: it is not ours. The kernel
    destroys the namespace (and the veths in it) once nothing holds it.
    """
    path = netns_path(name)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if expect_inode is not None and st.st_ino != expect_inode and os.path.ismount(path):
        return False  # a different namespace now has this name: not ours
    rc = _libc.umount2(path.encode(), MNT_DETACH)
    if rc != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        _check(rc, f"umount {path}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return True


def open_ns(name: str) -> int:
    """An O_CLOEXEC fd for the namespace (for setns / IFLA_NET_NS_FD)."""
    return os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)


@contextlib.contextmanager
def entered(ns: str | int) -> Iterator[None]:
    """Run the body with *this thread* inside namespace ``ns`` (name or fd), then return.

    Sockets created in the body stay in ``ns`` after the block ends.
    """
    home = _self_ns_fd()
    fd = open_ns(ns) if isinstance(ns, str) else ns
    try:
        _check(_libc.setns(fd, CLONE_NEWNET), f"setns {ns}")
        try:
            yield
        finally:
            _check(_libc.setns(home, CLONE_NEWNET), "setns back")
    finally:
        os.close(home)
        if isinstance(ns, str):
            os.close(fd)


#: the namespace this process started in (read at import, before any setns)
_HOME_INO = os.stat("/proc/self/ns/net").st_ino


def write_sysctls(values: Mapping[str, object]) -> list[str]:
    """Write ``net.*`` sysctls in the namespace this thread is in; return keys that don't exist.

    Refuses to run in the process's own namespace, so a bug cannot change
    the host's settings. Keys use dots (``net.ipv4.ip_forward``).
    """
    if os.stat("/proc/thread-self/ns/net").st_ino == _HOME_INO:
        raise RuntimeError("refusing to write sysctls in the root namespace")
    missing = []
    for key, value in values.items():
        path = "/proc/sys/" + key.replace(".", "/")
        try:
            with open(path, "w") as f:
                f.write(str(value))
        except FileNotFoundError:
            missing.append(key)
    return missing


def read_sysctl(key: str) -> str:
    with open("/proc/sys/" + key.replace(".", "/")) as f:
        return f.read().strip()


def exec_argv(namespace: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside ``namespace`` (util-linux nsenter, net ns only)."""
    return ["nsenter", f"--net={netns_path(namespace)}", "--", *argv]


def preexec_enter(namespace: str):  # noqa: ANN201 - a callable for subprocess
    """A ``preexec_fn`` for subprocess.Popen that enters ``namespace`` in the child."""
    path = netns_path(namespace)

    def _enter() -> None:
        fd = os.open(path, os.O_RDONLY)
        _check(_libc.setns(fd, CLONE_NEWNET), f"setns {path}")
        os.close(fd)

    return _enter

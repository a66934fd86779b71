# SPDX-License-Identifier: GPL-2.0-only
"""Build (once) and find the linux-rxe guest image: kernel, initrd and an ext4 root.

Why built here and not downloaded: the only network this project may count on is
the Debian mirror, and a recipe of Debian packages is reviewable — the guest is
``debootstrap --variant=minbase`` of bookworm plus the kernel and rdma-core's tools.
The image is cached under ``~/.cache/emu/rxe-guest/<recipe hash>/`` and reused while
the recipe is unchanged; a build goes to a temporary directory next to it and is
renamed into place only when complete, so an interrupted build is never used.

What is baked in is deliberately small: the packages and a 10-line ``/sbin/emu-init``
that mounts the run's 9p share and runs the ``boot.sh`` found there. Everything a case
does (addresses, rxe, the endpoint) comes from the share at boot, so changing it needs
no rebuild. ``mkfs.ext4 -d`` fills the file system from a directory without a loop
mount.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "emu", "rxe-guest")
SUITE = "bookworm"
MIRROR = os.environ.get("EMU_RXE_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ("linux-image-amd64", "kmod", "iproute2", "rdma-core", "ibverbs-utils",
            "ibverbs-providers", "perftest", "rdmacm-utils", "python3-pyverbs",
            "procps", "iputils-ping")
#: the guest's init: everything else comes from the run's share (``boot.sh``)
INIT = """#!/bin/sh
# emu linux-rxe guest init: mount the run's share and hand over to its boot.sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run
modprobe 9pnet_virtio; modprobe 9p
mkdir -p /emu && mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 emu /emu
[ -f /emu/boot.sh ] && exec /bin/sh /emu/boot.sh
echo "emu-init: no /emu/boot.sh"; echo o > /proc/sysrq-trigger; sleep 10
"""
#: host tools a build needs (Debian package in brackets)
BUILD_TOOLS = {"debootstrap": "debootstrap", "mkfs.ext4": "e2fsprogs"}


class ImageError(Exception):
    """The guest image cannot be built or found (one line, says what to do)."""


@dataclass(frozen=True)
class Image:
    """A built guest: the files QEMU boots."""

    dir: str
    kernel: str
    initrd: str
    root: str
    info: dict


def recipe() -> dict:
    """What the image is made of; its hash names the cache directory."""
    return {"suite": SUITE, "mirror": MIRROR, "variant": "minbase", "packages": list(PACKAGES),
            "init": INIT, "format": 1}


def recipe_hash() -> str:
    return hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:12]


def find() -> Image | None:
    """The cached image for today's recipe, or None."""
    d = os.path.join(CACHE, recipe_hash())
    try:
        with open(os.path.join(d, "image.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    img = Image(d, os.path.join(d, "vmlinuz"), os.path.join(d, "initrd.img"),
                os.path.join(d, "root.ext4"), info)
    return img if all(os.path.exists(p) for p in (img.kernel, img.initrd, img.root)) else None


def missing_tools() -> list[str]:
    """Debian packages a build needs that are not installed."""
    return sorted({pkg for tool, pkg in BUILD_TOOLS.items()
                   if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}")})


def _mounts_under(path: str) -> list[str]:
    with open("/proc/mounts") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    return sorted((p for p in points if p == path or p.startswith(path + "/")),
                  key=len, reverse=True)


def _discard(tmp: str) -> None:
    """Remove a failed build — but only after every mount inside it is gone (debootstrap
    mounts /proc and /sys in the target; rmtree through a live /sys would be a disaster)."""
    for m in _mounts_under(tmp):
        subprocess.run(["umount", "-l", m], check=False)
    if _mounts_under(tmp):
        raise ImageError(f"build failed and {tmp} still has mounts; remove it by hand")
    shutil.rmtree(tmp, ignore_errors=True)


def build(progress: Callable[[str], None] = print, force: bool = False) -> Image:
    """The image for today's recipe: the cached one, or a new build (needs root and the
    Debian mirror; about 5-10 minutes, most of it debootstrap)."""
    if not force and (img := find()) is not None:
        return img
    if os.geteuid() != 0:
        raise ImageError("building the linux-rxe guest needs root (debootstrap)")
    if missing_tools():
        raise ImageError(f"building the linux-rxe guest needs: apt-get install "
                         f"{' '.join(missing_tools())} (scripts/setup --rxe installs them)")
    h = recipe_hash()
    final = os.path.join(CACHE, h)
    os.makedirs(CACHE, exist_ok=True)
    tmp = os.path.join(CACHE, f".build-{h}-{os.getpid()}")
    t0 = time.monotonic()
    try:
        _build_into(tmp, progress)
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        _discard(tmp)
        raise
    progress(f"rxe-guest: built {final} in {time.monotonic() - t0:.0f} s")
    img = find()
    assert img is not None
    return img


def _run(cmd: list[str], what: str, log: str, progress: Callable[[str], None]) -> None:
    progress(f"rxe-guest: {what}")
    with open(log, "ab") as f:
        f.write(f"\n$ {' '.join(cmd)}\n".encode())
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if r.returncode:
        with open(log, "rb") as f:
            tail = f.read()[-1500:].decode(errors="replace")
        raise ImageError(f"{what} failed (exit {r.returncode}; log {log}):\n{tail}")


def _build_into(tmp: str, progress: Callable[[str], None]) -> None:
    t0 = time.monotonic()
    root = os.path.join(tmp, "root")
    os.makedirs(root)
    log = os.path.join(tmp, "build.log")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, root,
          MIRROR], f"debootstrap {SUITE} (minbase + {len(PACKAGES)} packages) from {MIRROR}",
         log, progress)
    t_boot = time.monotonic() - t0
    boot = os.path.join(root, "boot")
    kernels = sorted(n for n in os.listdir(boot) if n.startswith("vmlinuz-"))
    if not kernels:
        raise ImageError(f"no kernel in {boot} after debootstrap (log {log})")
    version = kernels[-1][len("vmlinuz-"):]
    initrd = os.path.join(boot, f"initrd.img-{version}")
    if not os.path.exists(initrd):
        raise ImageError(f"no initrd for {version} (initramfs-tools missing?; log {log})")
    shutil.copy(os.path.join(boot, kernels[-1]), os.path.join(tmp, "vmlinuz"))
    shutil.copy(initrd, os.path.join(tmp, "initrd.img"))
    with open(os.path.join(root, "sbin", "emu-init"), "w") as f:
        f.write(INIT)
    os.chmod(os.path.join(root, "sbin", "emu-init"), 0o755)
    with open(os.path.join(root, "etc", "hostname"), "w") as f:
        f.write("rxe-guest\n")
    # what the guest never reads: package caches, docs, the kernel (booted from outside)
    for rel in ("var/cache/apt/archives", "usr/share/doc", "usr/share/man", "usr/share/locale",
                "var/lib/apt/lists"):
        p = os.path.join(root, rel)
        shutil.rmtree(p, ignore_errors=True)
        os.makedirs(p, exist_ok=True)
    for n in os.listdir(boot):
        os.remove(os.path.join(boot, n))
    used = int(subprocess.run(["du", "-sm", root], capture_output=True, text=True,
                              check=True).stdout.split()[0])
    size = used + used // 3 + 64
    _run(["mkfs.ext4", "-q", "-F", "-L", "emu-rxe", "-d", root, os.path.join(tmp, "root.ext4"),
          f"{size}M"], f"mkfs.ext4 -d ({used} MiB of files in a {size} MiB image)", log, progress)
    versions = subprocess.run(["chroot", root, "dpkg-query", "-W", "-f", "${Package} ${Version}\\n",
                               "rdma-core", "perftest", "python3-pyverbs", "linux-image-amd64"],
                              capture_output=True, text=True).stdout.split("\n")
    info = {"recipe": recipe(), "hash": recipe_hash(), "kernel": version,
            "packages": [v for v in versions if v], "debootstrap_s": round(t_boot),
            "build_s": round(time.monotonic() - t0), "built": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                             time.gmtime())}
    shutil.rmtree(root)
    with open(os.path.join(tmp, "image.json"), "w") as f:
        json.dump(info, f, indent=1)

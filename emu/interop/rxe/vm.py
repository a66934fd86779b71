# SPDX-License-Identifier: GPL-2.0-only
"""Boot the linux-rxe guest in the current network namespace, on a host port's address.

Why the guest takes the port over instead of getting an address of its own: the peer
(another implementation, in another namespace) was told ``$PEER`` and may already
have the port's MAC in its neighbour table. So for the life of the guest the host port
is enslaved to a bridge with a tap, its addresses and routes move into the guest, and
the guest's NIC gets the port's **MAC** — the port itself gets a random one meanwhile,
or the bridge would take frames for that MAC as its own. Afterwards everything goes
back: the port's MAC, addresses and routes, and the bridge and tap are deleted. Only
what :class:`Guest` created is removed, also when the guest or the command fails.

Console, the command's output and its exit status come back through a 9p share (the
run directory); other host directories can be shared at the same paths in the guest,
so ``$DATA_DIR`` and ``$LOGDIR`` mean the same inside and out.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from emu.interop.rxe.image import CACHE, Image

HERE = os.path.dirname(os.path.abspath(__file__))
BOOT_SH = os.path.join(HERE, "boot.sh")


class GuestError(Exception):
    """The guest could not be started or its port not taken over (one line)."""


def _ip(*args: str, check: bool = True) -> str:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode:
        raise GuestError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def _random_mac() -> str:
    b = bytearray(os.urandom(6))
    b[0] = (b[0] & 0xFE) | 0x02       # unicast, locally administered
    return ":".join(f"{x:02x}" for x in b)


@dataclass
class Port:
    """A host port as found before the guest takes it: what to give back afterwards."""

    ifname: str
    mac: str
    mtu: int
    addrs: list[str]           # CIDR[,noprefixroute], IPv4 and global IPv6
    routes: list[tuple[str, str]] = field(default_factory=list)   # (dst, gateway or "")

    @classmethod
    def holding(cls, address: str | None) -> Port:
        """The port with ``address`` (any port with a global address if None)."""
        links = json.loads(_ip("-j", "addr", "show"))
        for link in links:
            ips = [a for a in link.get("addr_info", []) if a.get("scope") == "global"]
            if not ips or link["ifname"] == "lo":
                continue
            if address is None or any(a["local"] == address for a in ips):
                # the routes the fabric made (not the kernel's connected ones): host ports
                # of a switch have noprefixroute addresses and reach their subnet through
                # the gateway, so a guest with a connected route would ARP for its peer
                routes = []
                for fam in ("-4", "-6"):
                    for r in json.loads(_ip("-j", fam, "route", "show", "dev", link["ifname"])):
                        if r.get("protocol") in ("kernel", "ra") or r["dst"].startswith("fe80"):
                            continue
                        routes.append((r["dst"], r.get("gateway", "")))
                routes.sort(key=lambda r: bool(r[1]))     # on-link routes before gateways
                return cls(link["ifname"], link["address"], int(link["mtu"]),
                           [f"{a['local']}/{a['prefixlen']}"
                            + (",noprefixroute" if a.get("noprefixroute") else "")
                            for a in ips], routes)
        raise GuestError(f"no interface holds {address} in this namespace" if address
                         else "no interface with a global address in this namespace")


def detect_accel(image: Image, log: Callable[[str], object] = print) -> str:
    """``kvm`` if a stock kernel boots under ``-accel kvm`` here, else ``tcg``.

    Why try instead of checking ``/dev/kvm``: a host may offer /dev/kvm that cannot run
    an unmodified guest (a PVM host kernel runs only PVM guests). The answer is cached
    per host kernel and image; ``EMU_RXE_ACCEL=kvm|tcg`` overrides it."""
    forced = os.environ.get("EMU_RXE_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    key = os.path.join(CACHE, f"accel-{os.uname().release}-{image.info.get('hash', '')}.json")
    try:
        with open(key) as f:
            return str(json.load(f)["accel"])
    except (OSError, ValueError, KeyError):
        pass
    run = os.path.join(CACHE, f".accel-probe-{os.getpid()}")
    os.makedirs(run, exist_ok=True)
    try:
        g = Guest(image, run, port=None, accel="kvm", command="true")
        ok, why = False, ""
        try:
            g.start()
            status = g.wait(30)
            ok = status == 0
            why = f"exit {status}"
        except GuestError as e:
            why = str(e)
        finally:
            g.stop()
        accel = "kvm" if ok else "tcg"
        log(f"rxe-guest: -accel kvm {'works' if ok else f'does not boot the guest ({why})'}: "
            f"using {accel}")
        with open(key, "w") as f:
            json.dump({"accel": accel, "why": why}, f)
        return accel
    finally:
        shutil.rmtree(run, ignore_errors=True)


class Guest:
    """One guest run: take the port, boot, run ``command`` in the guest, give it back.

    ``run_dir`` becomes the guest's ``/emu`` (boot.sh, cmd.sh, the console log, the
    command's output and status); ``mounts`` are host directories shared at the same
    path. ``port`` None runs the guest without a network (the accelerator probe)."""

    def __init__(self, image: Image, run_dir: str, port: Port | None, command: str,
                 env: dict[str, str] | None = None, mounts: Sequence[str] = (),
                 accel: str = "tcg", memory_mb: int = 512, files: dict[str, str] | None = None,
                 counters: str | None = None) -> None:
        self.image, self.dir, self.port, self.accel = image, run_dir, port, accel
        self.command, self.env, self.mounts = command, dict(env or {}), list(mounts)
        self.memory_mb, self.files, self.counters = memory_mb, dict(files or {}), counters
        tag = os.urandom(3).hex()
        self.bridge, self.tap = f"rxb{tag}", f"rxt{tag}"
        self.proc: subprocess.Popen | None = None
        self._made: list[str] = []          # links this guest created (deleted at stop)
        self._taken = False
        self.started = 0.0
        self.console = os.path.join(run_dir, "console.log")

    # -- network ------------------------------------------------------------------
    def _take_port(self) -> None:
        p = self.port
        assert p is not None
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(self.bridge)
        _ip("link", "set", self.bridge, "address", _random_mac(), "mtu", str(p.mtu))
        _ip("tuntap", "add", "dev", self.tap, "mode", "tap")
        self._made.append(self.tap)
        _ip("link", "set", self.tap, "mtu", str(p.mtu), "master", self.bridge, "up")
        self._taken = True
        _ip("addr", "flush", "dev", p.ifname, "scope", "global")
        _ip("link", "set", p.ifname, "address", _random_mac(), "master", self.bridge, "up")
        _ip("link", "set", self.bridge, "up")

    def _give_back(self) -> list[str]:
        errors = []
        p = self.port
        if self._taken and p is not None:
            for args in (("link", "set", p.ifname, "nomaster"),
                         ("link", "set", p.ifname, "address", p.mac, "up")):
                try:
                    _ip(*args)
                except GuestError as e:
                    errors.append(str(e))
            for a in p.addrs:
                cidr, _, flag = a.partition(",")
                extra = (("nodad",) if ":" in cidr else ()) + ((flag,) if flag else ())
                r = subprocess.run(["ip", "addr", "replace", cidr, "dev", p.ifname, *extra],
                                   capture_output=True, text=True)
                if r.returncode:
                    errors.append(f"address {a}: {r.stderr.strip()}")
            for dst, gw in p.routes:
                via = ("via", gw) if gw else ()
                r = subprocess.run(["ip", "route", "replace", dst, *via, "dev", p.ifname],
                                   capture_output=True, text=True)
                if r.returncode:
                    errors.append(f"route {dst} via {gw}: {r.stderr.strip()}")
            self._taken = False
        for name in reversed(self._made):
            r = subprocess.run(["ip", "link", "del", name], capture_output=True, text=True)
            if r.returncode and "Cannot find" not in r.stderr:
                errors.append(f"delete {name}: {r.stderr.strip()}")
        self._made.clear()
        return errors

    # -- guest ----------------------------------------------------------------------
    def _write_share(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        shutil.copy(BOOT_SH, os.path.join(self.dir, "boot.sh"))
        for name, src in self.files.items():
            shutil.copy(src, os.path.join(self.dir, name))
        for stale in ("status", "cmd.out"):
            if os.path.exists(os.path.join(self.dir, stale)):
                os.remove(os.path.join(self.dir, stale))
        p = self.port
        mounts = " ".join(f"m{i}={d}" for i, d in enumerate(self.mounts))
        conf = {"EMU_MAC": p.mac if p else "none", "EMU_MTU": str(p.mtu if p else 1500),
                "EMU_ADDRS": " ".join(p.addrs) if p else "",
                "EMU_ROUTES": " ".join(f"{d},{g}" for d, g in p.routes) if p else "",
                "EMU_MOUNTS": mounts, "EMU_COUNTERS": self.counters or ""}
        with open(os.path.join(self.dir, "guest.env"), "w") as f:
            f.writelines(f"{k}={shlex.quote(v)}\n" for k, v in conf.items())
        with open(os.path.join(self.dir, "cmd.sh"), "w") as f:
            f.writelines(f"export {k}={shlex.quote(v)}\n" for k, v in self.env.items())
            f.write(self.command + "\n")

    def qemu_argv(self) -> list[str]:
        img = self.image
        argv = ["qemu-system-x86_64", "-accel", self.accel, "-m", str(self.memory_mb),
                "-smp", "1", "-nodefaults", "-no-reboot", "-display", "none",
                "-kernel", img.kernel, "-initrd", img.initrd,
                "-append", "console=ttyS0 root=/dev/vda rw init=/sbin/emu-init panic=-1 "
                           "quiet loglevel=4 net.ifnames=0 mitigations=off",
                "-drive", f"file={img.root},format=raw,if=virtio,snapshot=on",
                "-serial", f"file:{self.console}",
                "-fsdev", f"local,id=emu,path={self.dir},security_model=passthrough",
                "-device", "virtio-9p-pci,fsdev=emu,mount_tag=emu"]
        for i, d in enumerate(self.mounts):
            argv += ["-fsdev", f"local,id=m{i},path={d},security_model=passthrough",
                     "-device", f"virtio-9p-pci,fsdev=m{i},mount_tag=m{i}"]
        if self.port is not None:
            # no checksum offloads: what leaves the tap is what rxe computed, as on a wire
            argv += ["-netdev", f"tap,id=n0,ifname={self.tap},script=no,downscript=no",
                     "-device", f"virtio-net-pci,netdev=n0,mac={self.port.mac},csum=off,"
                                "guest_csum=off,gso=off,guest_tso4=off,guest_tso6=off,"
                                "host_tso4=off,host_tso6=off"]
        return argv

    def start(self) -> None:
        if not shutil.which("qemu-system-x86_64"):
            raise GuestError("qemu-system-x86_64 not found (apt-get install qemu-system-x86; "
                             "scripts/setup --rxe)")
        self._write_share()
        if self.port is not None:
            self._take_port()
        self.started = time.monotonic()
        with open(os.path.join(self.dir, "qemu.log"), "wb") as log:
            self.proc = subprocess.Popen(self.qemu_argv(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)

    def wait(self, timeout: float) -> int | None:
        """The command's exit status (None: the guest was still running at ``timeout``);
        GuestError if the guest ended without one."""
        assert self.proc is not None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        try:
            with open(os.path.join(self.dir, "status")) as f:
                status = int(f.read().strip())
        except (OSError, ValueError):
            raise GuestError(f"the guest stopped without a status (qemu exit "
                             f"{self.proc.returncode}; {self.console}: "
                             f"{_last_line(self.console)}; qemu: "
                             f"{_last_line(os.path.join(self.dir, 'qemu.log'))})") from None
        if status == 255:
            raise GuestError(f"guest boot failed: {_last_line(self.console)}")
        return status

    def boot_seconds(self) -> float | None:
        """The guest's own uptime when it was up (boot.sh's 'up in' line)."""
        try:
            with open(self.console, errors="replace") as f:
                for line in f:
                    if "emu-guest: up in " in line:
                        return float(line.split("up in ", 1)[1].split()[0])
        except (OSError, ValueError):
            pass
        return None

    def stop(self) -> list[str]:
        """Kill qemu if still running (by its pid) and give the port back; the errors."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self._give_back()

    def __enter__(self) -> Guest:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 2000))
            lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(none)"
    return lines[-1].strip() if lines else "(empty)"

# SPDX-License-Identifier: GPL-2.0-only
"""Memory-region files (/dev/shm/emu-mr-<pid>-<n>) never outlive their owner.

Owners that exit (normally, by an uncaught exception, without ever calling
close) remove their own; a SIGKILLed owner's files are removed by the NIC
daemon when its connection drops and by :func:`emu.core.shm.collect` (what
``emu down`` and ``emu clean`` run) — and a live process's file never is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from emu.core import shm
from emu.core.memory import SharedBuffer
from emu.nic.config import NicConfig
from emu.nic.daemon import running

ROOT = Path(__file__).resolve().parents[2]


def _child(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("ending", ["return", "raise", "sys.exit(3)"])
def test_an_owner_that_never_closes_leaves_no_file(ending):
    p = _child(f"""
        import sys
        from emu.core.memory import SharedBuffer
        def main():
            buf = SharedBuffer.create(1 << 20)   # as the README's example: no close()
            buf.view[:5] = b"hello"
            print(buf.name, flush=True)
            {ending if ending != "raise" else "raise RuntimeError('boom')"}
        main()
        keep = SharedBuffer.create(4096)         # still referenced at interpreter exit
        print(keep.name, flush=True)
    """)
    out, err = p.communicate(timeout=60)
    names = out.split()
    assert names and all(n.startswith("emu-mr-") for n in names), err
    for n in names:
        assert not os.path.exists(os.path.join(shm.SHM_DIR, n)), f"{n} left behind ({ending})"


def test_a_forked_child_does_not_remove_its_parents_file():
    p = _child("""
        import os, sys
        from emu.core.memory import SharedBuffer
        buf = SharedBuffer.create(4096)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)                   # the child's interpreter exits normally
        os.waitpid(pid, 0)
        print(os.path.exists("/dev/shm/" + buf.name), buf.name, flush=True)
    """)
    out, err = p.communicate(timeout=60)
    exists, name = out.split()
    assert exists == "True", err
    assert not os.path.exists(os.path.join(shm.SHM_DIR, name))  # the parent's exit removed it


def test_collect_removes_a_killed_owners_file_and_never_a_live_ones():
    p = _child("""
        import time
        from emu.core.memory import SharedBuffer
        buf = SharedBuffer.create(8 << 20)
        print(buf.name, flush=True)
        time.sleep(600)
    """)
    try:
        name = p.stdout.readline().strip()  # type: ignore[union-attr]
        path = os.path.join(shm.SHM_DIR, name)
        assert shm.owner_pid(name) == p.pid
        mine = SharedBuffer.create(4096)
        assert name not in shm.collect() and os.path.exists(path)  # its owner runs
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        assert os.path.exists(path)  # SIGKILL: the owner could not remove it
        removed = shm.collect()
        assert name in removed and not os.path.exists(path)
        assert mine.name not in removed and os.path.exists(os.path.join(shm.SHM_DIR, mine.name))
        mine.close()
    finally:
        p.kill()
        p.communicate()


def test_foreign_names_are_never_touched(tmp_path):
    for n in ("emu-mr-x", "emu-mr-1-", "other-1-2", "emu-mr-999999999-0.tmp"):
        (tmp_path / n).write_bytes(b"x")
    assert shm.collect(str(tmp_path)) == []
    assert len(list(tmp_path.iterdir())) == 4


@pytest.mark.trio
async def test_the_daemon_removes_a_killed_clients_regions_not_a_live_ones(tmp_path):
    cfg = NicConfig(sock_path=str(tmp_path / "nic" / "h.sock"), transports=["loopback"],
                    ports={"loopback": 0}, addresses=["127.0.0.1"], seed=5)
    client = """
        import sys, time
        from emu.api import Device
        dev = Device.open(sock_path=sys.argv[1])
        buf = dev.alloc_buffer(1 << 20)
        dev.reg_mr(buf)
        if sys.argv[2] == "close":
            dev.close()                      # hangs up, but lives on with its buffer
        print(buf.name, flush=True)
        time.sleep(600)
    """
    async with running(cfg) as d:
        killed = _child(client, cfg.sock_path, "kill")
        alive = _child(client, cfg.sock_path, "close")
        try:
            names = [await trio.to_thread.run_sync(p.stdout.readline) for p in (killed, alive)]
            names = [n.strip() for n in names]
            assert all(os.path.exists(os.path.join(shm.SHM_DIR, n)) for n in names)
            killed.send_signal(signal.SIGKILL)
            with trio.fail_after(30):
                while d.control.counters()["clients"] or killed.poll() is None:
                    await trio.sleep(0.01)
            assert d.control.counters()["orphaned_shm_removed"] == 1
            assert not os.path.exists(os.path.join(shm.SHM_DIR, names[0]))
            assert os.path.exists(os.path.join(shm.SHM_DIR, names[1]))  # its owner still runs
        finally:
            for p in (killed, alive):
                p.kill()
                p.communicate()
    # the live one's owner is gone now too: its own exit could not run (SIGKILL)
    assert names[1] in shm.collect()


def test_device_open_example_from_the_readme_leaves_nothing(tmp_path):
    """The README's API example, against an in-process daemon, without buf.close()."""
    code = """
        import sys, trio
        from emu.api import Device
        from emu.nic.config import NicConfig
        from emu.nic.daemon import running
        cfg = NicConfig(sock_path=sys.argv[1], transports=["loopback"],
                        ports={"loopback": 0}, addresses=["127.0.0.1"], seed=5)
        async def main():
            async with running(cfg):
                def app():
                    with Device.open(sock_path=cfg.sock_path) as dev:
                        buf = dev.alloc_buffer(1 << 20)
                        mr = dev.reg_mr(buf)
                        cq = dev.create_cq(256)
                        qp = dev.create_qp(cq)
                        print(buf.name, flush=True)
                await trio.to_thread.run_sync(app)
        trio.run(main)
    """
    p = _child(code, str(tmp_path / "nic" / "h.sock"))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    name = out.strip()
    assert name.startswith("emu-mr-") and not os.path.exists(os.path.join(shm.SHM_DIR, name))

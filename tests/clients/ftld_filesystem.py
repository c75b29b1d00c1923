#!/usr/bin/python3
"""Tier 3: a real ext4 on ftld. nbdfuse exposes the export as a file, losetup
makes it /dev/loopN (the kernel here has no nbd module), then mkfs.ext4,
mount, write, unmount, fsck -fn; restart ftld (clean stop, then kill -9) and
check fsck and the files again. Everything attached is detached in cleanup."""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_fs import Stack, check_files, fsck, preflight, write_files  # noqa: E402
from ftld_testlib import main  # noqa: E402


def test_ext4_restart_clean_and_kill9(env):
    preflight(env)
    d = env.start_ftld(size="2G")
    s = Stack(env, d)
    s.up()
    env.run(["mkfs.ext4", "-q", "-F", s.loop], timeout=600)
    s.mount()
    sums = write_files(s.mnt)
    s.umount()
    fsck(env, s.loop)
    s.down()

    # Clean restart.
    assert d.stop() == 0
    d2 = env.ftld_process(backing=d.backing).start()
    assert "clean" in d2.ctl("status")["open_report"], d2.ctl("status")
    s = Stack(env, d2)
    s.up()
    fsck(env, s.loop)
    s.mount()
    check_files(s.mnt, sums)
    more = write_files(os.path.join(s.mnt, "more"), n=20)
    s.umount()          # the unmount flushes: the data is durable now
    s.down()

    # Crash: kill -9 after the flush, no checkpoint on the way out.
    d2.kill9()
    d3 = env.ftld_process(backing=d.backing).start()
    s = Stack(env, d3)
    s.up()
    fsck(env, s.loop)
    s.mount()
    check_files(s.mnt, sums)
    check_files(os.path.join(s.mnt, "more"), more)
    s.umount()
    s.down()
    assert d3.stop() == 0


def test_ext4_kill9_while_mounted(env):
    preflight(env)
    d = env.start_ftld(size="1G")
    s = Stack(env, d)
    s.up()
    env.run(["mkfs.ext4", "-q", "-F", s.loop], timeout=600)
    s.mount()
    sums = write_files(s.mnt, n=20)
    env.run(["sync", "-f", s.mnt])
    # Keep writing while the daemon dies.
    writer = subprocess.Popen(["dd", "if=/dev/urandom", f"of={s.mnt}/busy", "bs=64k",
                               "count=2000", "status=none"])
    env.procs.append(writer)
    time.sleep(0.5)
    d.kill9()
    writer.wait(120)
    # The mount is dead now: detach everything forcibly.
    env.run(["umount", "-l", s.mnt], check=False)
    s.mounted = False
    s.down()
    d2 = env.ftld_process(backing=d.backing).start()
    s = Stack(env, d2)
    s.up()
    # The journal needs replaying: a read-write fsck first, then a clean one.
    r = env.run(["fsck.ext4", "-fy", s.loop], check=False)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    fsck(env, s.loop)
    s.mount()
    check_files(s.mnt, sums)
    s.umount()
    s.down()
    assert d2.stop() == 0


main(globals())

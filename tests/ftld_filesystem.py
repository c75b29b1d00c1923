#!/usr/bin/python3
"""Tier 3: a real ext4 on ftld. nbdfuse exposes the export as a file, losetup
makes it /dev/loopN (the kernel here has no nbd module), then mkfs.ext4,
mount, write, unmount, fsck -fn; restart ftld (clean stop, then kill -9) and
check fsck and the files again. Everything attached is detached in cleanup."""

import hashlib
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import Skip, main, need_tool  # noqa: E402


class Stack:
    """nbdfuse -> loop device -> (optionally) mounted ext4, torn down in order."""

    def __init__(self, env, d):
        self.env, self.d = env, d
        self.fuse_dir = env.path(f"fuse{d.port}")
        self.mnt = env.path("mnt")
        os.makedirs(self.fuse_dir, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        self.fuse = None
        self.loop = None
        self.mounted = False
        env.cleanups.append(self.down)

    def up(self):
        pidfile = self.env.path(f"nbdfuse{self.d.port}.pid")
        self.fuse = subprocess.Popen(["nbdfuse", "-P", pidfile, f"{self.fuse_dir}/disk",
                                      self.d.uri()],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.env.procs.append(self.fuse)
        deadline = time.time() + 30
        while not os.path.exists(pidfile):
            if self.fuse.poll() is not None:
                raise AssertionError(f"nbdfuse exited: {self.fuse.stderr.read().decode()}")
            if time.time() > deadline:
                raise AssertionError("nbdfuse not ready after 30s")
            time.sleep(0.05)
        r = self.env.run(["losetup", "--find", "--show", f"{self.fuse_dir}/disk"])
        self.loop = r.stdout.strip()
        assert self.loop.startswith("/dev/loop"), self.loop

    def mount(self):
        self.env.run(["mount", "-t", "ext4", self.loop, self.mnt])
        self.mounted = True

    def umount(self):
        if self.mounted:
            self.env.run(["umount", self.mnt])
            self.mounted = False

    def down(self):
        self.umount()
        if self.loop:
            self.env.run(["losetup", "-d", self.loop], check=False)
            self.loop = None
        if self.fuse and self.fuse.poll() is None:
            self.env.run(["fusermount3", "-u", self.fuse_dir], check=False)
            try:
                self.fuse.wait(30)
            except subprocess.TimeoutExpired:
                self.fuse.kill()
                self.fuse.wait()
        self.fuse = None


def write_files(root, n=40):
    sums = {}
    os.makedirs(os.path.join(root, "dir"), exist_ok=True)
    for i in range(n):
        data = os.urandom(1024 * (1 + (i * 37) % 1500))
        name = f"dir/file{i}"
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        sums[name] = hashlib.sha256(data).hexdigest()
    return sums


def check_files(root, sums):
    for name, digest in sums.items():
        with open(os.path.join(root, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, name


def fsck(env, dev):
    r = env.run(["fsck.ext4", "-fn", dev], check=False)
    assert r.returncode == 0, f"fsck: {r.returncode}\n{r.stdout}\n{r.stderr}"


def preflight(env):
    need_tool("nbdfuse", "losetup", "mkfs.ext4", "fsck.ext4", "mount", "umount", "fusermount3")
    if os.geteuid() != 0:
        raise Skip("needs root for losetup and mount")
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse")


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

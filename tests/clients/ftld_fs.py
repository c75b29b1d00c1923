"""Filesystem helpers for the tier-3 tests: an ftld export as a block device
without the kernel nbd module (nbdfuse exposes the export as a file, losetup
turns it into /dev/loopN), plus file trees with checksums and fsck."""

import hashlib
import os
import re
import subprocess
import time

from ftld_testlib import Skip, need_tool


def is_mounted(path):
    """True if something is mounted on `path`, also a FUSE mount whose
    process is gone (os.path.ismount says False there: stat fails)."""
    path = os.path.abspath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def kernel_log_tail(lines=30):
    """The last kernel messages (why a mount or a loop device failed), or
    why they cannot be read."""
    r = subprocess.run(["dmesg"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"(dmesg: {r.stderr.strip()})"
    return "\n".join(r.stdout.splitlines()[-lines:])


class Stack:
    """nbdfuse -> loop device -> (optionally) mounted ext4, torn down in order.

    export: the NBD export name ("" = the default export); read_only: nbdfuse
    -r and losetup -r (for read-only exports); loop_args: more losetup
    options (e.g. --direct-io=on --sector-size 4096). d: anything with .port
    and .uri(export) (an Ftld, or another NBD server a test runs)."""

    def __init__(self, env, d, export="", read_only=False, loop_args=()):
        self.env, self.d = env, d
        self.export, self.read_only = export, read_only
        self.loop_args = list(loop_args)
        tag = f"{d.port}-{export or 'default'}"
        self.fuse_dir = env.path(f"fuse-{tag}")
        self.mnt = env.path(f"mnt-{tag}")
        self.pidfile = env.path(f"nbdfuse-{tag}.pid")
        os.makedirs(self.fuse_dir, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        self.fuse = None
        self.loop = None
        self.mounted = False
        env.cleanups.append(self.down)

    def up(self):
        if os.path.exists(self.pidfile):
            os.unlink(self.pidfile)
        cmd = ["nbdfuse", "-P", self.pidfile]
        if self.read_only:
            cmd.append("-r")
        cmd += [f"{self.fuse_dir}/disk", self.d.uri(self.export)]
        self.fuse = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.env.procs.append(self.fuse)
        deadline = time.time() + 30
        while not os.path.exists(self.pidfile):
            if self.fuse.poll() is not None:
                raise AssertionError(f"nbdfuse exited: {self.fuse.stderr.read().decode()}")
            if time.time() > deadline:
                raise AssertionError("nbdfuse not ready after 30s")
            time.sleep(0.05)
        cmd = ["losetup", "--find", "--show"] + self.loop_args
        if self.read_only:
            cmd.append("-r")
        r = self.env.run(cmd + [f"{self.fuse_dir}/disk"])
        self.loop = r.stdout.strip()
        assert self.loop.startswith("/dev/loop"), self.loop

    def mount(self, options=None):
        cmd = ["mount", "-t", "ext4"]
        if options:
            cmd += ["-o", options]
        cmd += [self.loop, self.mnt]
        r = self.env.run(cmd, check=False)
        if (r.returncode != 0 and "can't read superblock" in r.stderr
                and not self.server_failed_a_read()):
            # The kernel failed the superblock's read (EIO) while the server
            # failed no read: seen once in CI on a fresh mkfs over the
            # tearing device (docs/decisions.md, "A mount that cannot read
            # its superblock is tried once more"). Said loudly, tried once
            # more after the loop device's buffers are dropped. A read the
            # server failed is the server's error and fails the test.
            print(f"mount of {self.loop} could not read the superblock; once more in 1 s. "
                  f"Kernel log:\n{kernel_log_tail(8)}", flush=True)
            self.env.run(["blockdev", "--flushbufs", self.loop], check=False)
            time.sleep(1)
            r = self.env.run(cmd, check=False)
        if r.returncode != 0:
            raise AssertionError(f"{cmd} failed ({r.returncode}): {r.stderr.strip()}\n"
                                 f"--- kernel log (tail)\n{kernel_log_tail()}")
        self.mounted = True

    def server_failed_a_read(self):
        """True if the server's log (an Ftld's or a TearingServer's) has a
        failed or refused NBD read."""
        path = getattr(self.d, "log_path", None)
        if not path or not os.path.exists(path):
            return False
        with open(path, errors="replace") as f:
            return re.search(r"READ (of \d+ bytes at \d+ failed|refused)", f.read()) is not None

    def umount(self):
        if self.mounted:
            self.env.run(["umount", self.mnt])
            self.mounted = False

    def down(self):
        """Detaches everything, also after the server died (a file system on
        a dead device unmounts with I/O errors). Waits, bounded, for the
        loop device to let go of the nbdfuse file before unmounting nbdfuse
        (losetup -d of a busy loop only marks it for autoclear), and never
        leaves a FUSE mount behind whose process is gone."""
        self.umount()
        if self.loop:
            self.env.run(["losetup", "-d", self.loop], check=False)
            backing = f"/sys/block/{os.path.basename(self.loop)}/loop/backing_file"
            deadline = time.time() + 30
            while os.path.exists(backing) and time.time() < deadline:
                time.sleep(0.05)
            self.loop = None
        if self.fuse:
            # Also when nbdfuse has exited by itself (it does when its server
            # dies): its mount stays until unmounted.
            deadline = time.time() + 30
            while is_mounted(self.fuse_dir):
                r = self.env.run(["fusermount3", "-u", self.fuse_dir], check=False)
                if r.returncode == 0 or time.time() > deadline:
                    break
                time.sleep(0.2)
            try:
                self.fuse.wait(30)
            except subprocess.TimeoutExpired:
                self.fuse.kill()
                self.fuse.wait()
        if is_mounted(self.fuse_dir):
            self.env.run(["fusermount3", "-uz", self.fuse_dir], check=False)
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


def preflight(env, *extra_tools):
    need_tool("nbdfuse", "losetup", "mkfs.ext4", "fsck.ext4", "mount", "umount", "fusermount3",
              *extra_tools)
    if os.geteuid() != 0:
        raise Skip("needs root for losetup and mount")
    if not os.path.exists("/dev/fuse"):
        raise Skip("no /dev/fuse")

"""Filesystem helpers for the tier-3 tests: an ftld export as a block device
without the kernel nbd module (nbdfuse exposes the export as a file, losetup
turns it into /dev/loopN), plus file trees with checksums and fsck."""

import hashlib
import os
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
        if r.returncode != 0:
            # What the layers below said: whether the loop device still
            # has its file (docs/decisions.md, "A loop device is detached
            # only while it is still ours"), nbdfuse's NBD errors, the
            # kernel's log.
            loop = self.env.run(["losetup", "-l", self.loop], check=False)
            raise AssertionError(f"{cmd} failed ({r.returncode}): {r.stderr.strip()}\n"
                                 f"--- losetup -l: {loop.stdout.strip()} {loop.stderr.strip()}\n"
                                 f"--- nbdfuse said: {self.fuse_errors() or '(nothing)'}\n"
                                 f"--- kernel log (tail)\n{kernel_log_tail()}")
        self.mounted = True

    def fuse_errors(self):
        """What nbdfuse has written to its stderr so far (it prints the NBD
        error of every request it fails), without waiting."""
        if not self.fuse or not self.fuse.stderr:
            return ""
        fd = self.fuse.stderr.fileno()
        os.set_blocking(fd, False)
        chunks = []
        try:
            while True:
                b = os.read(fd, 65536)
                if not b:
                    break
                chunks.append(b)
        except BlockingIOError:
            pass
        return b"".join(chunks).decode(errors="replace").strip()

    def loop_is_ours(self):
        """True while self.loop is attached to this stack's nbdfuse file."""
        try:
            with open(f"/sys/block/{os.path.basename(self.loop)}/loop/backing_file") as f:
                return f.read().strip() == os.path.abspath(f"{self.fuse_dir}/disk")
        except OSError:
            return False

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
            # Only while the device is still ours: once cleared, its number
            # may already serve another test's file.
            if self.loop_is_ours():
                self.env.run(["losetup", "-d", self.loop], check=False)
            deadline = time.time() + 30
            while self.loop_is_ours() and time.time() < deadline:
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

"""Helpers for the tier-3 tests: run the real ftld on a real backing file.

Each test gets its own temp dir, a free 127.0.0.1 port (ftld --port 0; the
bound port is read from its log), its own control socket, bounded waits, and
kills only the processes it started. Run with /usr/bin/python3 (the libnbd
bindings live there).

Usage in a test script:
    from ftld_testlib import Env, main
    def test_something(env):
        d = env.start_ftld(size="1G")
        ...
    main(globals())
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

SKIP = 77  # ctest SKIP_RETURN_CODE


class Skip(Exception):
    pass


def need_tool(*names):
    for n in names:
        if shutil.which(n) is None:
            raise Skip(f"{n} not installed")


class Ftld:
    """One ftld process. stop() sends SIGTERM; kill9() sends SIGKILL."""

    def __init__(self, env, backing, args, name):
        self.env = env
        self.backing = backing
        self.args = list(args)
        self.control = os.path.join(env.tmp, f"{name}.ctl")
        self.log_path = os.path.join(env.tmp, f"{name}.log")
        self.proc = None
        self.port = None

    def start(self, expect_ready=True, timeout=60):
        cmd = [self.env.ftld, "--port", "0", "--control", self.control] + self.args + [self.backing]
        self.logf = open(self.log_path, "ab")
        self.log_start = self.logf.tell()
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=self.logf)
        self.env.procs.append(self.proc)
        if not expect_ready:
            return self
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = self.log()
            m = re.search(r"NBD listening on 127\.0\.0\.1:(\d+)", text)
            if m and "ready:" in text:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"ftld exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.05)
        raise AssertionError(f"ftld not ready after {timeout}s:\n{self.log()}")

    def log(self):
        with open(self.log_path, "rb") as f:
            f.seek(self.log_start)
            return f.read().decode(errors="replace")

    def uri(self, export=""):
        return f"nbd://127.0.0.1:{self.port}/{export}"

    def wait(self, timeout=120):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"ftld did not exit within {timeout}s:\n{self.log()[-3000:]}")

    def stop(self, timeout=120):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.wait(timeout)
        self.logf.close()
        return rc

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.logf.close()

    def ctl(self, *args, check=True):
        """Runs ftlctl --json ARGS; returns the parsed reply."""
        r = subprocess.run([self.env.ftlctl, "--control", self.control, "--json", *args],
                           capture_output=True, text=True, timeout=300)
        if check and r.returncode != 0:
            raise AssertionError(f"ftlctl {args} failed ({r.returncode}): {r.stdout}{r.stderr}")
        return json.loads(r.stdout) if r.stdout.strip() else None

    def control_raw(self, data, timeout=10):
        """Sends raw bytes to the control socket; returns the reply lines."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(self.control)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server gave up on us; its reply is still queued
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        s.close()
        return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


class Env:
    def __init__(self, args):
        self.args = args  # every command-line argument (main's extra_args too)
        self.ftld = args.ftld
        self.ftlctl = args.ftlctl
        # ftl-tool: --ftl-tool, else beside ftlctl (both are built in tools/),
        # else on PATH; None if none is found (tests that need it skip).
        self.ftl_tool = args.ftl_tool or _beside(args.ftlctl, "ftl-tool") or shutil.which("ftl-tool")
        self.tmp = tempfile.mkdtemp(prefix="ftld-test-")
        self.procs = []
        self.cleanups = []  # callables, run in reverse order
        self.n = 0

    def path(self, name):
        return os.path.join(self.tmp, name)

    def ftld_process(self, backing=None, args=(), size=None):
        self.n += 1
        backing = backing or self.path(f"backing{self.n}.img")
        a = list(args)
        if size:
            a = ["--size", size] + a
        return Ftld(self, backing, a, f"ftld{self.n}")

    def start_ftld(self, backing=None, args=(), size="1G"):
        return self.ftld_process(backing, args, size).start()

    def run(self, cmd, timeout=300, check=True, **kw):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        if check and r.returncode != 0:
            raise AssertionError(f"{cmd} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r

    def close(self):
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as e:  # keep cleaning
                print(f"cleanup: {e}", file=sys.stderr)
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
        if os.environ.get("FTLD_TEST_KEEP"):
            print(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _beside(path, name):
    p = os.path.join(os.path.dirname(os.path.abspath(path)), name)
    return p if os.access(p, os.X_OK) else None


def main(namespace, extra_args=None):
    """Runs the test_* functions of `namespace`. extra_args(parser), if given,
    adds a script's own arguments (they reach the tests as env.args)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ftld", required=True)
    ap.add_argument("--ftlctl", required=True)
    ap.add_argument("--ftl-tool", default=None)
    ap.add_argument("-k", dest="only", default=None, help="run tests whose name contains this")
    if extra_args:
        extra_args(ap)
    args = ap.parse_args()
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    if args.only:
        tests = [(n, f) for n, f in tests if args.only in n]
    passed = failed = skipped = 0
    for name, fn in tests:
        env = Env(args)
        t0 = time.time()
        try:
            fn(env)
            passed += 1
            print(f"PASS {name} ({time.time() - t0:.1f}s)", flush=True)
        except Skip as e:
            skipped += 1
            print(f"SKIP {name}: {e}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {name} ({time.time() - t0:.1f}s)", flush=True)
            traceback.print_exc()
            for p in os.listdir(env.tmp):
                if p.endswith(".log"):
                    with open(os.path.join(env.tmp, p), errors="replace") as f:
                        print(f"--- {p} (tail)\n{f.read()[-4000:]}")
        finally:
            env.close()
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    if failed:
        sys.exit(1)
    if skipped and not passed:
        sys.exit(SKIP)

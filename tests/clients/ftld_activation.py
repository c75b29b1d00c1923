"""Tier 3: ftld started the ways the NBD ecosystem starts servers (issue 24).

- libnbd's nbd_connect_command with `ftld --stdin` (inetd mode): one client
  on standard input, then a clean close and exit 0; data persists across
  sessions; no control socket unless --control; refusals (not a socket,
  --stdin with --port).
- libnbd's nbd_connect_systemd_socket_activation and `nbdinfo -- [ ftld
  ... ]`: ftld serves the inherited socket; nbd_close's SIGTERM closes the
  pool cleanly.
- systemd's own systemd-socket-activate: two inherited listeners (TCP and
  Unix, LISTEN_FDNAMES) served at once, `ftlctl status` listing them;
  Accept=yes/inetd mode with --stdin over TCP; --port refused alongside
  LISTEN_FDS.
- --exit-with-parent: the parent's exit shuts ftld down cleanly.
- The shipped units (tools/ftld.socket, tools/ftld@.service) pass
  `systemd-analyze verify`.
"""

import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import Skip, main, need_tool  # noqa: E402

import nbd  # noqa: E402  (Debian's python3-libnbd)

MiB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_pool(env, name="pool.img", size="256M"):
    """A formatted pool, made by one --stdin session."""
    path = env.path(name)
    h = nbd.NBD()
    h.connect_command([env.ftld, "--stdin", "--log-level", "warn", "--size", size, path])
    h.shutdown()
    return path


def tool_status(env, backing):
    r = env.run([env.ftl_tool, "check", backing], check=False)
    return r.stdout.strip().splitlines()[-1]


def wait_exit(proc, timeout=60):
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("process did not exit in time")


def wait_unlocked(path, timeout=60):
    """Until no ftld holds BACKING's lock (flock, daemon/backing.cc)."""
    deadline = time.time() + timeout
    with open(path, "rb") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.time() > deadline:
                    raise AssertionError(f"{path} still locked after {timeout}s")
                time.sleep(0.05)


def wait_log(path, pattern, proc=None, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path, errors="replace") as f:
            text = f.read()
        m = re.search(pattern, text)
        if m:
            return m, text
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode} before /{pattern}/:\n{text}")
        time.sleep(0.05)
    raise AssertionError(f"no /{pattern}/ within {timeout}s")


def test_stdin_connect_command(env):
    backing = env.path("stdin.img")
    data = os.urandom(1 * MiB)
    h = nbd.NBD()
    # libnbd passes one end of a socketpair as stdin and stdout; ftld's log
    # goes to stderr (this process's).
    h.connect_command([env.ftld, "--stdin", "--size", "256M", backing])
    size = h.get_size()
    assert size > 100 * MiB, size
    h.pwrite(data, 3 * MiB)
    h.flush()
    assert h.pread(len(data), 3 * MiB) == data
    assert h.pread(4096, 0) == bytes(4096)
    h.shutdown()
    del h  # nbd_close waits for the server process
    # The session closed the pool: clean, no control socket left behind.
    if env.ftl_tool:
        assert tool_status(env, backing) == "status: clean"
    assert not os.path.exists(f"/run/ftld/{os.path.basename(backing)}.sock")
    # A second session sees the data; --control makes the socket exist meanwhile.
    ctl = env.path("stdin.ctl")
    h = nbd.NBD()
    h.connect_command([env.ftld, "--stdin", "--control", ctl, "--log-level", "warn", backing])
    assert h.pread(len(data), 3 * MiB) == data
    r = env.run([env.ftlctl, "--control", ctl, "--json", "status"])
    st = json.loads(r.stdout)
    assert st["listen"] == {}, st["listen"]  # no listeners in --stdin mode
    assert len(st["clients"]) == 1, st["clients"]
    h.shutdown()
    del h
    assert not os.path.exists(ctl)
    # nbdinfo's --command mode? libnbd 1.14's nbdinfo has only [ CMD ] (socket
    # activation), tested below; nbdsh drives connect_command through python.


def test_stdin_kill9_keeps_flushed_data(env):
    pool = make_pool(env)
    flushed, unflushed = os.urandom(MiB), os.urandom(MiB)
    h = nbd.NBD()
    h.connect_command([env.ftld, "--stdin", "--log-level", "warn", pool])
    h.pwrite(flushed, 0)
    h.flush()
    h.pwrite(unflushed, 4 * MiB)
    h.kill_subprocess(signal.SIGKILL)  # the --stdin server, mid-session
    del h
    # The next session recovers: flushed data exact; the rest old or new.
    h = nbd.NBD()
    h.connect_systemd_socket_activation([env.ftld, "--no-control", "--log-level", "warn", pool])
    assert h.pread(MiB, 0) == flushed
    got = h.pread(MiB, 4 * MiB)
    for off in range(0, MiB, 4096):
        assert got[off:off + 4096] in (unflushed[off:off + 4096], bytes(4096)), off
    h.shutdown()
    del h
    if env.ftl_tool:
        assert tool_status(env, pool) == "status: clean"


def test_stdin_refusals(env):
    backing = env.path("refuse.img")
    # Not a socket: a clear error, exit 1, nothing created.
    r = subprocess.run([env.ftld, "--stdin", "--size", "64M", backing], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r
    assert "standard input is not a stream socket" in r.stderr, r.stderr
    assert not os.path.exists(backing)
    r = subprocess.run([env.ftld, "--stdin", "--port", "0", backing], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no --bind, --port or --unix" in r.stderr, r
    # A client that goes away during the handshake: ftld still closes cleanly.
    pool = make_pool(env)
    a, b = socket.socketpair()
    p = subprocess.Popen([env.ftld, "--stdin", "--log-level", "info", pool], stdin=b,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    env.procs.append(p)
    b.close()
    greeting = a.recv(18)
    assert greeting[:8] == b"NBDMAGIC", greeting
    a.close()
    assert wait_exit(p) == 0
    err = p.stderr.read().decode()
    assert "clean shutdown" in err, err
    if env.ftl_tool:
        assert tool_status(env, pool) == "status: clean"


def test_socket_activation_libnbd(env):
    pool = make_pool(env)
    data = os.urandom(256 * 1024)
    h = nbd.NBD()
    h.connect_systemd_socket_activation([env.ftld, "--no-control", pool])
    assert h.get_size() > 100 * MiB
    h.pwrite(data, 8192)
    h.flush()
    h.shutdown()
    del h  # SIGTERM from nbd_close, then waitpid: the pool is closed
    if env.ftl_tool:
        assert tool_status(env, pool) == "status: clean"
    # nbdinfo's subprocess form is the same socket activation.
    r = env.run(["nbdinfo", "--json", "--", "[", env.ftld, "--no-control", pool, "]"])
    info = json.loads(r.stdout)
    assert info["exports"][0]["export-size"] > 100 * MiB, info
    r = env.run(["nbdinfo", "--list", "--", "[", env.ftld, "--no-control", pool, "]"])
    assert 'export="ftl0"' in r.stdout and 'export="":' in r.stdout, r.stdout
    # nbdcopy reads the data back out through another activation.
    out = env.path("out.raw")
    env.run(["nbdcopy", "--", "[", env.ftld, "--no-control", pool, "]", out])
    with open(out, "rb") as f:
        f.seek(8192)
        assert f.read(len(data)) == data


def test_systemd_socket_activate_two_listeners(env):
    need_tool("systemd-socket-activate")
    pool = make_pool(env)
    port = free_port()
    usock = env.path("nbd.sock")
    ctl = env.path("sa.ctl")
    log = env.path("sa.log")
    with open(log, "ab") as logf:
        p = subprocess.Popen(["systemd-socket-activate", "-l", f"127.0.0.1:{port}", "-l", usock,
                              "--fdname=nbd:nbd-unix", env.ftld, "--control", ctl, pool],
                             stdout=logf, stderr=logf)
    env.procs.append(p)
    # systemd-socket-activate starts ftld at the first connection.
    wait_log(log, f"Listening on {usock}", p)
    data = os.urandom(64 * 1024)
    h = nbd.NBD()
    h.connect_uri(f"nbd://127.0.0.1:{port}/ftl0")
    h.pwrite(data, 0)
    h.flush()
    h.shutdown()
    wait_log(log, r"ready: 2 inherited socket\(s\)", p)
    h = nbd.NBD()
    h.connect_uri(f"nbd+unix:///?socket={usock}")
    assert h.pread(len(data), 0) == data
    st = json.loads(env.run([env.ftlctl, "--control", ctl, "--json", "status"]).stdout)
    inherited = st["listen"]["inherited"]
    assert f"127.0.0.1:{port}" in inherited and f"unix:{usock}" in inherited, st["listen"]
    h.shutdown()
    _, text = wait_log(log, r"inherited fd 4 is named 'nbd-unix'")
    p.send_signal(signal.SIGTERM)  # the tool exec()s ftld: this is ftld
    assert wait_exit(p) == 0
    _, text = wait_log(log, "clean shutdown")
    # The sockets belong to whoever made them: ftld does not unlink them.
    assert os.path.exists(usock)
    if env.ftl_tool:
        assert tool_status(env, pool) == "status: clean"


def test_systemd_socket_activate_refusals_and_inetd(env):
    need_tool("systemd-socket-activate")
    pool = make_pool(env)
    port = free_port()
    # --port with inherited sockets: refused with a message.
    log = env.path("refuse.log")
    with open(log, "ab") as logf:
        p = subprocess.Popen(["systemd-socket-activate", "-l", f"127.0.0.1:{port}", env.ftld,
                              "--port", "0", "--no-control", pool], stdout=logf, stderr=logf)
    env.procs.append(p)
    wait_log(log, "Listening on", p)
    h = nbd.NBD()
    try:
        h.connect_uri(f"nbd://127.0.0.1:{port}/")
        raise AssertionError("connected to an ftld that should have refused")
    except nbd.Error:
        pass
    assert wait_exit(p) == 1
    with open(log) as f:
        assert "--bind, --port and --unix do not apply" in f.read()
    # Accept=yes / inetd style: one ftld --stdin per TCP connection.
    port = free_port()
    log = env.path("inetd.log")
    with open(log, "ab") as logf:
        p = subprocess.Popen(["systemd-socket-activate", "--accept", "--inetd", "-l",
                              f"127.0.0.1:{port}", env.ftld, "--stdin", pool],
                             stdout=logf, stderr=logf)
    env.procs.append(p)
    wait_log(log, "Listening on", p)
    socket.create_connection(("127.0.0.1", port), timeout=10).close()
    wait_log(log, "clean shutdown", p)  # that probe was one whole session
    wait_unlocked(pool)
    data = os.urandom(4096)
    h = nbd.NBD()
    h.connect_uri(f"nbd://127.0.0.1:{port}/")
    h.pwrite(data, 4096, nbd.CMD_FLAG_FUA)
    h.shutdown()
    del h
    wait_log(log, r"(?s)clean shutdown.*clean shutdown")
    wait_unlocked(pool)
    h = nbd.NBD()
    h.connect_uri(f"nbd://127.0.0.1:{port}/")
    assert h.pread(4096, 4096) == data
    h.shutdown()
    del h
    wait_log(log, r"(?s)clean shutdown.*clean shutdown.*clean shutdown")
    p.send_signal(signal.SIGTERM)
    wait_exit(p)


def test_exit_with_parent(env):
    pool = make_pool(env)
    log = env.path("ewp.log")
    # The parent (sh) starts ftld and exits after a second: ftld closes cleanly.
    sh = subprocess.Popen(["sh", "-c", f'"$0" --exit-with-parent --port 0 --no-control "$1" '
                           f'2>>"$2" & echo $!; sleep 1', env.ftld, pool, log],
                          stdout=subprocess.PIPE, text=True)
    pid = int(sh.stdout.readline())
    assert wait_exit(sh) == 0
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("ftld outlived its parent")
    with open(log) as f:
        text = f.read()
    assert "Terminated: shutting down" in text and "clean shutdown" in text, text
    if env.ftl_tool:
        assert tool_status(env, pool) == "status: clean"


def test_units_verify(env):
    need_tool("systemd-analyze")
    d = env.path("units")
    os.makedirs(d)
    # The template as the instance the socket names, ExecStart at this build.
    with open(os.path.join(ROOT, "tools", "ftld@.service")) as f:
        service = f.read().replace("/usr/local/bin/ftld", os.path.abspath(env.ftld))
    shutil.copy(os.path.join(ROOT, "tools", "ftld.socket"), d)
    with open(os.path.join(d, "ftld.socket")) as f:
        m = re.search(r"^Service=(\S+)$", f.read(), re.M)
    assert m, "ftld.socket names no Service="
    with open(os.path.join(d, m.group(1)), "w") as f:
        f.write(service)
    r = env.run(["systemd-analyze", "verify", "--man=no", os.path.join(d, "ftld.socket"),
                 os.path.join(d, m.group(1))], check=False, cwd=d)
    bad = [l for l in (r.stdout + r.stderr).splitlines()
           if "ftld" in l and "Failed to read $container" not in l]
    assert r.returncode == 0 and not bad, r.stdout + r.stderr


main(globals())

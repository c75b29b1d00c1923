#!/usr/bin/python3
"""Tier 3: the ftld command line, backing rules, signals, the control socket
and ftlctl, all with the real binaries."""

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import main  # noqa: E402

MiB = 1 << 20


def run_ftld(env, *args, timeout=60):
    return subprocess.run([env.ftld, *args], capture_output=True, text=True, timeout=timeout)


def one_error_line(r, *needles):
    assert r.returncode != 0, r
    lines = [l for l in r.stderr.splitlines() if "error" in l]
    assert len(lines) == 1 and lines[0].startswith("ftld: error: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_command_line_errors(env):
    one_error_line(run_ftld(env), "missing BACKING")
    one_error_line(run_ftld(env, "--bogus", "x"), "unknown option --bogus")
    one_error_line(run_ftld(env, "--size", "12Q", "x"), "--size")
    one_error_line(run_ftld(env, "--port", "70000", "x"), "--port")
    one_error_line(run_ftld(env, "--force", "x"), "--force only makes sense with --format")
    one_error_line(run_ftld(env, "--log-level", "loud", "x"), "--log-level")
    one_error_line(run_ftld(env, "a", "b"), "unexpected argument")
    r = run_ftld(env, "--help")
    assert r.returncode == 0 and "--format" in r.stdout and "--control" in r.stdout
    assert run_ftld(env, "--version").stdout.startswith("ftld ")


def test_backing_rules(env):
    ctl = ["--control", env.path("c.sock"), "--port", "0"]
    missing = env.path("missing.img")
    one_error_line(run_ftld(env, *ctl, missing), "no such file", "--size")
    one_error_line(run_ftld(env, *ctl, "/dev/ftld-no-such-device"), "no such device")
    # Never a file under /dev, even with --size (a mistyped device name),
    # for a mirror's devices too; /dev/shm is a tmpfs for files and allowed.
    r = run_ftld(env, *ctl, "--size", "256M", "/dev/ftld-no-such-device")
    one_error_line(r, "no such device")
    assert not os.path.exists("/dev/ftld-no-such-device")
    r = run_ftld(env, *ctl, "--size", "256M", "--mirror", env.path("m0.img"), "/dev/ftld-no-such-device")
    one_error_line(r, "no such device")
    assert "--size" not in r.stderr, r.stderr
    assert not os.path.exists("/dev/ftld-no-such-device")
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        shm = "/dev/shm/ftld-test-%d.img" % os.getpid()
        env.cleanups.append(lambda: os.path.exists(shm) and os.unlink(shm))
        d = env.start_ftld(backing=shm, size="128M")
        env.run(["nbdinfo", "--size", d.uri()]) if shutil.which("nbdinfo") else None
        d.stop()
        assert os.path.getsize(shm) == 128 * MiB
    # Unformatted: empty and foreign.
    empty = env.path("empty.img")
    with open(empty, "wb") as f:
        f.truncate(256 * MiB)
    one_error_line(run_ftld(env, *ctl, empty), "not formatted", "--format")
    foreign = env.path("foreign.img")
    with open(foreign, "wb") as f:
        f.write(b"\x7fELF" + os.urandom(4096))
        f.truncate(256 * MiB)
    one_error_line(run_ftld(env, *ctl, foreign), "foreign data", "--format")
    # Too small.
    tiny = env.path("tiny.img")
    one_error_line(run_ftld(env, *ctl, "--size", "64K", tiny))
    # --format on the unformatted file works.
    d = env.ftld_process(backing=foreign, args=["--format"]).start()
    assert "formatted" in d.ctl("status")["open_report"]
    import nbd
    h = nbd.NBD()
    h.connect_uri(d.uri())
    h.pwrite(b"keep" * 1024, 0)
    h.flush()
    h.shutdown()
    assert d.stop() == 0
    # An existing pool is never overwritten without --force.
    one_error_line(run_ftld(env, *ctl, "--format", foreign), "already holds an ftld pool", "--force")
    d = env.ftld_process(backing=foreign).start()       # plain open keeps the data
    h = nbd.NBD()
    h.connect_uri(d.uri())
    assert h.pread(4096, 0) == b"keep" * 1024
    h.shutdown()
    # A second daemon on the same backing is refused.
    one_error_line(run_ftld(env, "--control", env.path("other.sock"), "--port", "0", foreign),
                   "in use")
    assert d.stop() == 0
    d = env.ftld_process(backing=foreign, args=["--format", "--force"]).start()
    h = nbd.NBD()
    h.connect_uri(d.uri())
    assert h.pread(4096, 0) == bytes(4096)
    h.shutdown()
    assert d.stop() == 0


def test_sigterm_is_clean_and_second_signal_is_immediate(env):
    import nbd
    d = env.start_ftld(size="1G")
    h = nbd.NBD()
    h.connect_uri(d.uri())
    h.pwrite(os.urandom(MiB), 0)
    data = h.pread(MiB, 0)
    h.shutdown()
    assert d.stop() == 0
    log = d.log()
    assert "clean shutdown" in log, log
    d2 = env.ftld_process(backing=d.backing).start()
    report = d2.ctl("status")["open_report"]
    assert "clean" in report, report
    h = nbd.NBD()
    h.connect_uri(d2.uri())
    assert h.pread(MiB, 0) == data
    # Keep a client busy so a graceful stop has something to wait for, then
    # send two signals: the second exits at once.
    stop_writer = False

    def busy():
        try:
            while not stop_writer:
                h.pwrite(os.urandom(65536), 0)
        except Exception:
            pass

    import threading
    t = threading.Thread(target=busy)
    t.start()
    time.sleep(0.2)
    d2.proc.send_signal(signal.SIGINT)
    d2.proc.send_signal(signal.SIGINT)
    rc = d2.wait(60)
    stop_writer = True
    t.join(30)
    # Either the first signal finished before the second arrived (0) or the
    # second one cut it short (128+SIGINT).
    assert rc in (0, 128 + signal.SIGINT), rc
    d3 = env.ftld_process(backing=d.backing).start()
    assert d3.ctl("status")["open_report"]
    assert d3.stop() == 0


def test_control_socket_protocol(env):
    d = env.start_ftld(size="1G")
    mode = stat.S_IMODE(os.stat(d.control).st_mode)
    assert mode == 0o600, oct(mode)
    replies = d.control_raw(
        b'{"cmd":"status","id":1}\n'
        b"this is not json\n"
        b"[1,2,3]\n"
        b'{"nocmd":true}\n'
        b'{"cmd":42}\n'
        b'{"cmd":"frobnicate"}\n'
        b'{"cmd":"gc","min_free_segments":"lots"}\n'
        b"\n"
        b'{"cmd":"exports"}\r\n'
        b'{"cmd":"help"}\n')
    assert len(replies) == 9, replies
    assert replies[0]["ok"] is True and replies[0]["id"] == 1
    for r in replies[1:7]:
        assert r["ok"] is False and r["error"], r
    assert "unknown command" in replies[5]["error"]
    assert replies[7]["ok"] and replies[7]["exports"][0]["name"] == "ftl0"
    cmds = {c["cmd"] for c in replies[8]["commands"]}
    assert {"status", "stats", "exports", "checkpoint", "gc", "help"} <= cmds, cmds
    # A line over the limit gets an error, not a hang.
    big = d.control_raw(b'{"cmd":"' + b"x" * (2 * MiB) + b'"}\n', timeout=30)
    assert big and big[0]["ok"] is False
    # A silent client does not block others.
    idle = socket.socket(socket.AF_UNIX)
    idle.connect(d.control)
    assert d.ctl("status")["ok"]
    idle.close()
    # A partial line followed by close is dropped quietly.
    s = socket.socket(socket.AF_UNIX)
    s.connect(d.control)
    s.sendall(b'{"cmd":"sta')
    s.close()
    assert d.ctl("stats")["ok"]
    assert d.stop() == 0
    assert not os.path.exists(d.control)


def test_ftlctl(env):
    import nbd
    d = env.start_ftld(size="1G")
    h = nbd.NBD()
    h.connect_uri(d.uri())
    h.pwrite(os.urandom(8 * MiB), 0)
    h.flush()

    def ftlctl(*args, env_extra=None, check=True):
        e = dict(os.environ)
        e.update(env_extra or {})
        r = subprocess.run([env.ftlctl, *args], capture_output=True, text=True, timeout=300, env=e)
        if check:
            assert r.returncode == 0, (args, r.returncode, r.stdout, r.stderr)
        return r

    out = ftlctl("--control", d.control, "status").stdout
    for needle in ["uptime", "backing", d.backing, "geometry:", "block size", "4.0 KiB",
                   "exports:", "ftl0", "clients:"]:
        assert needle in out, (needle, out)
    out = ftlctl("stats", env_extra={"FTLD_CONTROL": d.control}).stdout
    for needle in ["write amplification", "cleaner state", "free", "map memory", "MiB"]:
        assert needle in out, (needle, out)
    st = json.loads(ftlctl("--control", d.control, "stats", "--json").stdout)
    assert st["ok"] and st["volumes"][0]["write_bytes"] >= 8 * MiB, st
    assert st["pool"]["user_write_bytes"] >= 8 * MiB
    assert "NAME" in ftlctl("--control", d.control, "exports").stdout
    cp = json.loads(ftlctl("--control", d.control, "--json", "checkpoint").stdout)
    assert cp["ok"] and cp["checkpoint_count"] >= 1, cp
    gc = json.loads(ftlctl("--control", d.control, "--json", "gc").stdout)
    assert gc["ok"] and "segments_cleaned" in gc, gc
    r = ftlctl("--control", d.control, "nonsense", check=False)
    assert r.returncode == 1 and "unknown command" in r.stderr, r
    r = ftlctl("--control", env.path("nope.sock"), "status", check=False)
    assert r.returncode == 2 and "nope.sock" in r.stderr, r
    r = ftlctl(check=False)
    assert r.returncode == 2 and "usage" in r.stderr
    h.shutdown()
    assert d.stop() == 0


def test_exports_unix_and_read_only(env):
    import nbd
    sock = env.path("nbd.sock")
    d = env.ftld_process(size="1G", args=["--unix", sock, "--export", "data",
                                          "--read-only"])
    d.start(expect_ready=False)
    deadline = time.time() + 30
    while "ready:" not in d.log():
        assert d.proc.poll() is None and time.time() < deadline, d.log()
        time.sleep(0.05)
    assert f"NBD listening on unix:{sock}" in d.log()
    for name in ["data", ""]:
        h = nbd.NBD()
        h.set_export_name(name)
        h.connect_unix(sock)
        assert h.is_read_only()
        assert h.get_size() > 0
        h.shutdown()
    h = nbd.NBD()
    h.set_export_name("ftl0")
    try:
        h.connect_unix(sock)
        raise AssertionError("the renamed volume is still exported under its own name")
    except nbd.Error:
        pass
    assert d.stop() == 0
    assert not os.path.exists(sock)


def test_preallocate(env):
    """--preallocate: the new backing file has every block of its data area
    allocated, freed space is never hole-punched, and the pool works; a
    sparse file formatted without it is not allocated."""
    def allocated(path):
        return os.stat(path).st_blocks * 512

    d = env.start_ftld(size="128M", args=["--preallocate"])
    assert allocated(d.backing) >= 112 * MiB, allocated(d.backing)
    assert "freed space is not discarded" in d.log(), d.log()
    import nbd
    h = nbd.NBD()
    h.connect_uri(d.uri())
    data = bytes(range(256)) * (4 * MiB // 256)
    h.pwrite(data, 0)
    h.flush()
    h.trim(4 * MiB, 0)
    h.shutdown()
    r = subprocess.run([env.ftlctl, "--control", d.control, "gc"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert allocated(d.backing) >= 112 * MiB, "freed space was punched out"
    assert d.stop() == 0
    # Reopened, a fully allocated file keeps discards off by itself.
    d = env.ftld_process(backing=d.backing).start()
    assert "is fully allocated" in d.log(), d.log()
    assert d.stop() == 0
    sparse = env.start_ftld(size="128M")
    assert allocated(sparse.backing) < 16 * MiB, allocated(sparse.backing)
    assert "not discarded" not in sparse.log()
    assert sparse.stop() == 0


def test_direct_io(env):
    """--direct-io: `writes` sends the log's writes around the page cache (16
    MiB written over NBD leave the backing file with almost nothing cached,
    where `off` caches all of it); after a kill -9 the data is read back
    with `on`; an unknown mode is one clear error."""
    import nbd
    fincore = shutil.which("fincore")
    assert fincore, "fincore is missing (util-linux-extra, tools/packages.txt)"

    def cached(path):
        r = subprocess.run([fincore, "--bytes", "--noheadings", "--raw", "--output", "RES", path],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return int(r.stdout.split()[0])

    def media(d):
        r = subprocess.run([env.ftlctl, "--control", d.control, "--json", "status"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout)["media"]

    one_error_line(run_ftld(env, "--direct-io", "sometimes", "--size", "64M", env.path("x.img")),
                   "--direct-io", "sometimes", "off, writes, on")
    assert not os.path.exists(env.path("x.img"))
    data = os.urandom(16 * MiB)
    res = {}
    for mode in ("off", "writes"):
        d = env.start_ftld(backing=env.path(f"{mode}.img"), size="256M", args=["--direct-io", mode])
        if mode == "writes":
            assert media(d).endswith("(direct writes)"), media(d)
        else:
            assert "direct" not in media(d), media(d)
        h = nbd.NBD()
        h.connect_uri(d.uri())
        for off in range(0, len(data), MiB):
            h.pwrite(data[off:off + MiB], off)
        h.flush()
        h.shutdown()
        res[mode] = cached(d.backing)
        if mode == "off":
            assert d.stop() == 0
            continue
        d.kill9()
        d = env.ftld_process(backing=d.backing, args=["--direct-io", "on"]).start()
        assert media(d).endswith("(direct reads and writes)"), media(d)
        h = nbd.NBD()
        h.connect_uri(d.uri())
        got = b"".join(h.pread(MiB, off) for off in range(0, len(data), MiB))
        h.shutdown()
        assert got == data, "data written with direct writes differs after kill -9 and reopen"
        assert d.stop() == 0
    assert res["off"] >= 16 * MiB, res
    assert res["writes"] < 4 * MiB, res


def test_default_control_path(env):
    # /run/ftld/<basename>.sock, created with the directory, mode 0600.
    name = f"ftld-test-{os.getpid()}-{int(time.time())}.img"
    backing = env.path(name)
    expected = f"/run/ftld/{name}.sock"
    p = subprocess.Popen([env.ftld, "--size", "256M", "--port", "0", backing],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    env.procs.append(p)
    env.cleanups.append(lambda: os.path.exists(expected) and os.unlink(expected))
    deadline = time.time() + 30
    while not os.path.exists(expected):
        assert p.poll() is None and time.time() < deadline, p.stderr.read() if p.poll() else ""
        time.sleep(0.05)
    assert stat.S_IMODE(os.stat(expected).st_mode) == 0o600
    r = subprocess.run([env.ftlctl, "status", "--json"], capture_output=True, text=True,
                       env={**os.environ, "FTLD_CONTROL": expected}, timeout=60)
    assert json.loads(r.stdout)["backing"] == backing
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 0
    assert not os.path.exists(expected)


main(globals())

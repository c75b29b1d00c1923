#!/usr/bin/python3
"""Tier 3: range operations (issue 5) through ftlctl against the real ftld,
checked with NBD reads: clone and move (overlapping too), merge with every
policy, immutable ranges (EPERM over NBD via nbdsh), batches, cross-volume
clone from a snapshot, invalid requests that change nothing, and the
atomic-commit demo under repeated kill -9."""

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import atomic_commit_demo as demo  # noqa: E402
from ftld_testlib import main, need_tool  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
BLOCK = 4096
DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "atomic_commit_demo.py")


def connect(d, export=""):
    import nbd
    h = nbd.NBD()
    h.connect_uri(d.uri(export))
    return h


def blocks(tag, n):
    """n distinct 4 KiB blocks naming `tag` and their index."""
    out = b""
    for i in range(n):
        unit = f"[{tag}:{i}]".encode()
        out += (unit * (BLOCK // len(unit) + 1))[:BLOCK]
    return out


def ctl_text(d, *args):
    return d.env.run([d.env.ftlctl, "--control", d.control, *args]).stdout


def ctl_rc(d, *args, stdin=None):
    r = subprocess.run([d.env.ftlctl, "--control", d.control, *args], input=stdin,
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def digest(h, offset, length):
    sha = hashlib.sha256()
    for at in range(offset, offset + length, 16 * MiB):
        sha.update(h.pread(min(16 * MiB, offset + length - at), at))
    return sha.hexdigest()


def test_clone_and_move(env):
    d = env.start_ftld(size="1G")
    h = connect(d)
    x = blocks("X", 256)
    h.pwrite(x, 0)
    out = ctl_text(d, "range", "clone", "0", "8M", "1M")
    assert "cloned 1.0 MiB" in out and "8M" in out, out
    assert h.pread(MiB, 8 * MiB) == x
    # Writes to either side break sharing for the written blocks only.
    h.pwrite(b"n" * BLOCK, 8 * MiB + 4 * BLOCK)
    h.pwrite(b"o" * BLOCK, 9 * BLOCK)
    assert h.pread(MiB, 0) == x[:9 * BLOCK] + b"o" * BLOCK + x[10 * BLOCK:]
    assert h.pread(MiB, 8 * MiB) == x[:4 * BLOCK] + b"n" * BLOCK + x[5 * BLOCK:]

    # Move: the destination gets the content, the source reads as zeros.
    y = h.pread(MiB, 0)
    d.ctl("range", "move", "0", "16M", "1M")
    assert h.pread(MiB, 16 * MiB) == y
    assert h.pread(MiB, 0) == bytes(MiB)

    # Overlapping move forwards and backwards (same volume).
    p = blocks("P", 256)
    h.pwrite(p, 32 * MiB)
    d.ctl("range", "move", "32M", str(32 * MiB + 256 * KiB), "1M")
    assert h.pread(MiB, 32 * MiB + 256 * KiB) == p
    assert h.pread(256 * KiB, 32 * MiB) == bytes(256 * KiB)
    q = blocks("Q", 256)
    h.pwrite(q, 40 * MiB + 128 * KiB)
    d.ctl("range", "move", str(40 * MiB + 128 * KiB), "40M", "1M")
    assert h.pread(MiB, 40 * MiB) == q
    assert h.pread(128 * KiB, 41 * MiB) == bytes(128 * KiB)
    # Overlapping clone: the destination reads as the source did before.
    r = blocks("R", 64)
    h.pwrite(r, 48 * MiB)
    d.ctl("range", "clone", "48M", str(48 * MiB + 16 * KiB), "256K")
    assert h.pread(256 * KiB, 48 * MiB + 16 * KiB) == r
    assert h.pread(16 * KiB, 48 * MiB) == r[:16 * KiB]
    # Numbers and suffixes are the same; JSON output for scripts.
    h.pwrite(blocks("S", 4), 100 * MiB)
    reply = d.ctl("range", "clone", str(100 * MiB), "101M", "16384")
    assert reply["ok"] and reply["ops"] == 1, reply
    assert h.pread(16 * KiB, 101 * MiB) == blocks("S", 4)
    h.shutdown()
    assert d.stop() == 0


def merge_setup(d, h):
    """Base at 0 (16 blocks), sources at 1M (changes 1, 2, 5) and 2M (changes
    3, 5), destination at 3M holding 'D'. Sources are clones of the base, so
    unchanged blocks share its VBAs."""
    base = blocks("base", 16)
    h.pwrite(base, 0)
    d.ctl("range", "clone", "0", "1M", "64K")
    d.ctl("range", "clone", "0", "2M", "64K")
    for i in (1, 2, 5):
        h.pwrite(blocks(f"s1-{i}", 1), MiB + i * BLOCK)
    for i in (3, 5):
        h.pwrite(blocks(f"s2-{i}", 1), 2 * MiB + i * BLOCK)
    h.pwrite(b"D" * 64 * KiB, 3 * MiB)
    return base


def expected_merge(base, last):
    out = bytearray(base)
    for i in (1, 2):
        out[i * BLOCK:(i + 1) * BLOCK] = blocks(f"s1-{i}", 1)
    out[3 * BLOCK:4 * BLOCK] = blocks("s2-3", 1)
    out[5 * BLOCK:6 * BLOCK] = blocks("s2-5" if last else "s1-5", 1)
    return bytes(out)


def test_merge_policies(env):
    d = env.start_ftld(size="1G")
    h = connect(d)
    base = merge_setup(d, h)
    before = h.pread(4 * MiB, 0)
    # fail: exit 1, the conflicting offsets listed, nothing changed.
    rc, out, err = ctl_rc(d, "--json", "range", "merge", "--base", "0", "--dst", "3M", "--len",
                          "64K", "--policy", "fail", "1M", "2M")
    assert rc == 1, (rc, out, err)
    reply = json.loads(out)
    assert reply["ok"] is True and reply["applied"] is False, reply
    assert reply["conflicts"] == [5 * BLOCK], reply
    assert "conflict" in err and str(5 * BLOCK) in err, err
    assert h.pread(4 * MiB, 0) == before
    rc, out, err = ctl_rc(d, "range", "merge", "--base", "0", "--dst", "3M", "--len", "64K",
                          "1M", "2M")   # fail is the default policy
    assert rc == 1 and str(5 * BLOCK) in err and out == "", (rc, out, err)
    assert h.pread(4 * MiB, 0) == before

    reply = d.ctl("range", "merge", "--base", "0", "--dst", "3M", "--len", "64K",
                  "--policy", "first", "1M", "2M")
    assert reply["applied"] is True and reply["blocks"] == 16, reply
    assert reply["unchanged"] + sum(t["blocks"] for t in reply["taken"]) == 16, reply
    assert [t["blocks"] for t in reply["taken"]] == [3, 1], reply
    assert h.pread(64 * KiB, 3 * MiB) == expected_merge(base, last=False)

    out = ctl_text(d, "range", "merge", "--base", "0", "--dst", "3M", "--len", "64K",
                   "--policy=last", "1M", "2M")
    assert "merged 16 block(s)" in out and "source 1M" in out, out
    assert h.pread(64 * KiB, 3 * MiB) == expected_merge(base, last=True)
    # Sources and base themselves are untouched.
    assert h.pread(3 * MiB, 0) == before[:3 * MiB]
    # Base and sources from a snapshot, the result into the live volume.
    d.ctl("snapshot", "create", "m")
    h.pwrite(b"L" * 64 * KiB, 5 * MiB)
    h.pwrite(b"x" * 3 * MiB, 0)
    d.ctl("range", "merge", "--base", "0", "--dst", "5M", "--len", "64K", "--policy", "last",
          "--from", "@m", "--to", "ftl0", "1M", "2M")
    assert h.pread(64 * KiB, 5 * MiB) == expected_merge(base, last=True)
    d.ctl("snapshot", "rollback", "m", "--force")
    # Merge into the base itself.
    d.ctl("range", "merge", "--base", "0", "--dst", "0", "--len", "64K", "--policy", "first",
          "1M", "2M")
    assert h.pread(64 * KiB, 0) == expected_merge(base, last=False)
    h.shutdown()
    assert d.stop() == 0


NBDSH_EPERM = """
import errno
def expect_eperm(fn, *args):
    try:
        fn(*args)
    except nbd.Error as e:
        assert e.errno == "EPERM", (fn.__name__, e.errno, str(e))
        return
    raise AssertionError(f"{fn.__name__} succeeded on an immutable range")
h.set_strict_mode(0)
expect_eperm(h.pwrite, b"w" * 4096, 4096)
expect_eperm(h.pwrite, b"w" * 8192, 1024 * 1024 - 4096)   # straddles the end
expect_eperm(h.trim, 4096, 0)
expect_eperm(h.zero, 4096, 8192)
expect_eperm(h.pwrite, b"w" * 512, 512)
assert h.pread(4096, 0) == expected
h.pwrite(b"ok" * 2048, 2 * 1024 * 1024)
assert h.pread(4096, 2 * 1024 * 1024) == b"ok" * 2048
print("EPERM checked")
"""


def test_immutable_ranges(env):
    need_tool("nbdsh")
    d = env.start_ftld(size="1G")
    h = connect(d)
    data = blocks("I", 256)
    h.pwrite(data, 0)
    h.shutdown()
    out = ctl_text(d, "range", "attr", "0", "1M", "immutable")
    assert "immutable" in out and "OFFSET" in out, out
    attrs = d.ctl("range", "attrs")["attrs"]
    assert attrs == [{"offset": 0, "length": MiB, "immutable": True,
                      "non_persistent": False}], attrs
    script = f"expected = {data[:4096]!r}\n" + NBDSH_EPERM
    # nbdsh runs "python3" from PATH; the libnbd module is Debian's.
    path = dict(os.environ, PATH="/usr/bin:" + os.environ.get("PATH", ""))
    r = env.run(["nbdsh", "-c", f"h.connect_uri({d.uri()!r})", "-c", script], env=path)
    assert "EPERM checked" in r.stdout, r.stdout + r.stderr
    # Range operations into an immutable range are refused too.
    rc, _, err = ctl_rc(d, "range", "clone", "2M", "0", "64K")
    assert rc == 1 and "ftlctl" in err, (rc, err)
    rc, _, err = ctl_rc(d, "range", "move", "0", "4M", "64K")
    assert rc == 1, (rc, err)
    h = connect(d)
    assert h.pread(MiB, 0) == data
    h.shutdown()
    # Mutable again: writes work.
    d.ctl("range", "attr", "0", "1M", "mutable")
    assert d.ctl("range", "attrs")["attrs"] == []
    h = connect(d)
    h.pwrite(b"m" * BLOCK, BLOCK)
    assert h.pread(BLOCK, BLOCK) == b"m" * BLOCK
    h.shutdown()
    # Non-persistent is listed and survives a clean restart (content too).
    d.ctl("range", "attr", "512M", "1M", "non-persistent")
    h = connect(d)
    h.pwrite(blocks("N", 4), 512 * MiB)
    h.shutdown()
    attrs = d.ctl("range", "attrs", "--volume", "ftl0")["attrs"]
    assert attrs == [{"offset": 512 * MiB, "length": MiB, "immutable": False,
                      "non_persistent": True}], attrs
    assert d.stop() == 0
    d2 = env.ftld_process(backing=d.backing).start()
    assert d2.ctl("range", "attrs")["attrs"] == attrs
    h = connect(d2)
    assert h.pread(16 * KiB, 512 * MiB) == blocks("N", 4)
    h.shutdown()
    d2.ctl("range", "attr", "512M", "1M", "persistent")
    assert d2.ctl("range", "attrs")["attrs"] == []
    assert d2.stop() == 0


def test_batch(env):
    d = env.start_ftld(size="1G")
    h = connect(d)
    h.pwrite(blocks("A", 256), 64 * MiB)
    h.pwrite(blocks("B", 16), 80 * MiB)
    batch = env.path("batch.jsonl")
    with open(batch, "w") as f:
        f.write('# the commit\n')
        f.write('{"op":"move","src":"64M","dst":"72M","len":"1M"}\n')
        f.write('\n')
        f.write(f'{{"op":"clone","src":{80 * MiB},"dst":"90M","len":65536,'
                f'"from":"ftl0","to":"ftl0"}}\n')
    out = ctl_text(d, "range", "batch", batch)
    assert "applied 2 operation(s) atomically" in out, out
    assert h.pread(MiB, 72 * MiB) == blocks("A", 256)
    assert h.pread(MiB, 64 * MiB) == bytes(MiB)
    assert h.pread(64 * KiB, 90 * MiB) == blocks("B", 16)
    # From stdin.
    rc, out, err = ctl_rc(d, "--json", "range", "batch", "-",
                          stdin='{"op":"move","src":"72M","dst":"64M","len":"512K"}\n'
                                '{"op":"move","src":"72.5M","dst":"100M","len":"512K"}\n')
    # "72.5M" is not a size: ftlctl refuses the file before sending anything.
    assert rc == 2 and ":2:" in err, (rc, out, err)
    stdin = ('{"op":"move","src":"72M","dst":"64M","len":"512K"}\n'
             f'{{"op":"move","src":{72 * MiB + 512 * KiB},"dst":"100M","len":"512K"}}\n')
    rc, out, err = ctl_rc(d, "--json", "range", "batch", "-", stdin=stdin)
    assert rc == 0 and json.loads(out)["ops"] == 2, (rc, out, err)
    a = blocks("A", 256)
    assert h.pread(512 * KiB, 64 * MiB) == a[:512 * KiB]
    assert h.pread(512 * KiB, 100 * MiB) == a[512 * KiB:]
    assert h.pread(MiB, 72 * MiB) == bytes(MiB)
    # One bad operation: nothing of the batch is applied.
    before = digest(h, 0, 128 * MiB)
    size = h.get_size()
    for bad in [f'{{"op":"move","src":"100M","dst":{size},"len":"512K"}}',   # past the end
                '{"op":"move","src":"100M","dst":"4097","len":"4K"}',         # unaligned
                '{"op":"clone","src":"100M","dst":"0","len":"4K","to":"nope"}',
                '{"op":"clone","src":"100M","dst":"0","len":"4K","to":"@snap"}']:
        rc, out, err = ctl_rc(d, "range", "batch", "-",
                              stdin='{"op":"move","src":"64M","dst":"110M","len":"512K"}\n'
                                    + bad + "\n")
        assert rc == 1 and "ftlctl: range batch:" in err, (bad, rc, out, err)
        assert digest(h, 0, 128 * MiB) == before, bad
    for bad_file in ['{"op":"swap","src":0,"dst":0,"len":4096}', '{"op":"move"}', 'nonsense',
                     '{"op":"move","src":0,"dst":0,"len":4096,"extra":1}', '']:
        rc, out, err = ctl_rc(d, "range", "batch", "-", stdin=bad_file + "\n")
        assert rc == 2, (bad_file, rc, err)
    assert digest(h, 0, 128 * MiB) == before
    h.shutdown()
    assert d.stop() == 0


def test_cross_volume_clone_from_snapshot(env):
    d = env.start_ftld(size="1G")
    h = connect(d)
    a = blocks("A", 64)
    h.pwrite(a, 0)
    d.ctl("snapshot", "create", "s1")
    h.pwrite(blocks("B", 64), 0)
    # Restore one "file" (the first 64 KiB) from the snapshot.
    d.ctl("range", "clone", "0", "0", "64K", "--from", "@s1")
    assert h.pread(64 * KiB, 0) == a[:64 * KiB]
    assert h.pread(192 * KiB, 64 * KiB) == blocks("B", 64)[64 * KiB:]
    d.ctl("range", "clone", "64K", "64K", "192K", "--from", "ftl0@s1", "--to", "ftl0")
    assert h.pread(256 * KiB, 0) == a
    # Into and out of an activated export.
    h.pwrite(blocks("C", 16), 4 * MiB)
    d.ctl("snapshot", "activate", "s1", "--export", "act")
    d.ctl("range", "clone", "4M", "8M", "64K", "--to", "act")
    ha = connect(d, "act")
    assert ha.pread(64 * KiB, 8 * MiB) == blocks("C", 16)
    ha.pwrite(blocks("E", 4), 12 * MiB)
    d.ctl("range", "move", "12M", "12M", "16K", "--from", "act")
    assert h.pread(16 * KiB, 12 * MiB) == blocks("E", 4)
    assert ha.pread(16 * KiB, 12 * MiB) == bytes(16 * KiB)
    # A snapshot is never a destination, and never the source of a move.
    before = digest(h, 0, 16 * MiB)
    rc, _, err = ctl_rc(d, "range", "clone", "0", "0", "4K", "--to", "@s1")
    assert rc == 1, err
    rc, _, err = ctl_rc(d, "range", "move", "0", "1M", "4K", "--from", "@s1")
    assert rc == 1, err
    assert digest(h, 0, 16 * MiB) == before
    assert d.ctl("snapshot", "list")["snapshots"][0]["name"] == "s1"
    ha.shutdown()
    h.shutdown()
    assert d.stop() == 0


def test_invalid_requests_change_nothing(env):
    d = env.start_ftld(size="1G")
    h = connect(d)
    h.pwrite(blocks("Z", 512), 0)
    size = h.get_size()
    before = digest(h, 0, 8 * MiB)
    cases = [
        ["range", "clone", "1000", "1M", "4K"],                 # unaligned source
        ["range", "clone", "0", "1M", "6K"],                    # unaligned length
        ["range", "move", "0", str(size - 4096), "8K"],         # past the end
        ["range", "clone", str(size), "0", "4K"],               # source past the end
        ["range", "clone", "0", "1M", "0"],                     # empty
        ["range", "clone", "0", "1M", "4K", "--to", "nope"],    # unknown volume
        ["range", "clone", "0", "1M", "4K", "--from", "nope@x"],
        ["range", "clone", "0", "1M", "4K", "--from", "@nosnap"],
        ["range", "attr", "1000", "4K", "immutable"],
        ["range", "attr", "0", "4K", "immutable", "--volume", "nope"],
        ["range", "attrs", "--volume", "nope"],
        ["range", "merge", "--base", "0", "--dst", "4K", "--len", "64K", "1M"],  # overlap
    ]
    for args in cases:
        rc, out, err = ctl_rc(d, *args)
        assert rc == 1 and err.startswith("ftlctl: range"), (args, rc, out, err)
        assert digest(h, 0, 8 * MiB) == before, args
    assert d.ctl("range", "attrs")["attrs"] == []
    usage = [["range"], ["range", "zap"], ["range", "clone", "0", "1M"],
             ["range", "clone", "0", "1M", "4Q"], ["range", "merge", "--base", "0", "1M"],
             ["range", "merge", "--base", "0", "--dst", "1M", "--len", "4K"],
             ["range", "merge", "--base", "0", "--dst", "1M", "--len", "4K", "--policy", "x",
              "2M"],
             ["range", "attr", "0", "4K", "sticky"], ["range", "batch"],
             ["range", "batch", env.path("missing.jsonl")]]
    for args in usage:
        rc, out, err = ctl_rc(d, *args)
        assert rc == 2, (args, rc, out, err)
    # Raw protocol: clear errors, nothing changed.
    replies = d.control_raw(
        b'{"cmd":"range"}\n'
        b'{"cmd":"range","action":"clone","src":"4x","dst":0,"len":4096}\n'
        b'{"cmd":"range","action":"clone","src":-1,"dst":0,"len":4096}\n'
        b'{"cmd":"range","action":"clone","src":0,"dst":0}\n'
        b'{"cmd":"range","action":"batch","ops":[]}\n'
        b'{"cmd":"range","action":"batch","ops":[{"op":"move","src":0,"dst":"1M","len":4096},'
        b'{"op":"copy","src":0,"dst":0,"len":4096}]}\n'
        b'{"cmd":"range","action":"merge","base":0,"dst":"1M","len":4096,"sources":[]}\n'
        b'{"cmd":"range","action":"merge","base":0,"dst":"1M","len":4096,"sources":["2M"],'
        b'"policy":"random"}\n'
        b'{"cmd":"range","action":"attr","offset":0,"length":4096,"attr":"sticky"}\n'
        b'{"cmd":"range","action":"clone","src":"8M","dst":"9M","len":"4K","id":9}\n')
    assert [r["ok"] for r in replies] == [False] * 9 + [True], replies
    errors = [r["error"] for r in replies[:9]]
    assert "action" in errors[0] and "clone" in errors[0], errors[0]
    assert "src" in errors[1] and "4x" in errors[1], errors[1]
    assert "src" in errors[2], errors[2]
    assert "len" in errors[3], errors[3]
    assert "empty" in errors[4], errors[4]
    assert "ops[1]" in errors[5] and "copy" in errors[5], errors[5]
    assert "sources" in errors[6], errors[6]
    assert "random" in errors[7], errors[7]
    assert "sticky" in errors[8], errors[8]
    assert all(r["code"] == "INVALID_ARGUMENT" for r in replies[:9]), replies
    assert replies[9]["id"] == 9
    assert digest(h, 0, 8 * MiB) == before
    h.shutdown()
    assert d.stop() == 0


def read_log(path):
    begun, committed, aborted = [], [], set()
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 2:
                    continue  # a torn last line
                kind, txid = parts[0], int(parts[1])
                {"begin": begun, "commit": committed}.get(kind, []).append(txid)
                if kind == "abort":
                    aborted.add(txid)
    return begun, committed, aborted


def check_after_crash(d, layout, log_path, it):
    """The destination holds one whole committed transaction (or none yet),
    at least the last acknowledged one; scratch reads as zeros."""
    begun, committed, aborted = read_log(log_path)
    h = connect(d)
    found = []
    for i in range(layout.blocks):
        found.append(demo.parse_stamp(h.pread(BLOCK, layout.dest_offset(i))))
    scratch = h.pread(layout.blocks * BLOCK, layout.scratch)
    h.shutdown()
    txids = {f[0] if f else None for f in found}
    assert len(txids) == 1, f"iteration {it}: destination mixes transactions: {found}"
    txid = txids.pop()
    if txid is None:
        assert not committed, f"iteration {it}: committed {committed[-1]} lost"
    else:
        assert [f[1] for f in found] == list(range(layout.blocks)), found
        assert txid not in aborted, f"iteration {it}: aborted transaction {txid} visible"
        assert not committed or txid >= committed[-1], \
            f"iteration {it}: acknowledged {committed[-1]} but destination has {txid}"
        assert begun and txid <= begun[-1], (txid, begun[-3:])
    assert scratch == bytes(len(scratch)), \
        f"iteration {it}: scratch not empty after crash recovery: " \
        f"{[demo.parse_stamp(scratch[i:i + BLOCK]) for i in range(0, len(scratch), BLOCK)]}"
    return txid, (begun[-1] if begun else 0)


def test_atomic_commit_kill9_loop(env):
    iterations = int(os.environ.get("FTLD_ATOMIC_ITERATIONS", "25"))
    rng = random.Random(int(os.environ.get("FTLD_ATOMIC_SEED", str(int(time.time())))))
    layout = demo.Layout(demo.DEFAULT_SCRATCH, demo.DEFAULT_DEST, demo.DEFAULT_BLOCKS)
    log_path = env.path("demo.log")
    d = env.start_ftld(size="1G")
    d.ctl("range", "attr", str(layout.scratch), str(layout.blocks * BLOCK), "non-persistent")
    next_txid = 1
    commits_seen = 0
    for it in range(iterations):
        writer = subprocess.Popen(
            [sys.executable, DEMO, "--uri", d.uri(), "--ftlctl", env.ftlctl, "--control",
             d.control, "--first-txid", str(next_txid), "--log", log_path],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        env.procs.append(writer)
        time.sleep(rng.uniform(0.05, 1.2))
        assert writer.poll() is None, \
            f"iteration {it}: the demo stopped early: {writer.stderr.read().decode()}"
        os.kill(d.proc.pid, signal.SIGKILL)        # the daemon, by PID
        d.proc.wait(30)
        d.logf.close()
        try:
            writer.wait(30)                        # it fails on its own now
        except subprocess.TimeoutExpired:
            os.kill(writer.pid, signal.SIGKILL)
            writer.wait(30)
        writer.stderr.close()
        d = env.ftld_process(backing=d.backing).start()
        txid, last_begun = check_after_crash(d, layout, log_path, it)
        attrs = d.ctl("range", "attrs")["attrs"]
        assert attrs == [{"offset": layout.scratch, "length": layout.blocks * BLOCK,
                          "immutable": False, "non_persistent": True}], attrs
        commits_seen += txid is not None
        next_txid = last_begun + 1
    _, committed, aborted = read_log(log_path)
    print(f"{iterations} crashes, {len(committed)} commits, {len(aborted)} aborts acknowledged")
    assert len(committed) >= iterations, "the demo hardly committed anything"
    assert d.stop() == 0


def test_immutable_and_non_persistent_are_exclusive(env):
    d = env.start_ftld(size="256M")
    d.ctl("range", "attr", "0", "1M", "immutable")
    d.ctl("range", "attr", "4M", "1M", "non-persistent")
    for args in (["512K", "1M", "non-persistent"], ["4M", "4K", "immutable"],
                 ["0", "8M", "immutable"]):
        r = d.ctl("range", "attr", *args, check=False)
        assert r["ok"] is False and r["code"] == "FAILED_PRECONDITION", (args, r)
        assert "immutable" in r["error"] and "non-persistent" in r["error"], r
        rc, _, err = ctl_rc(d, "range", "attr", *args)
        assert rc == 1 and err.startswith("ftlctl: "), (rc, err)
    # Nothing changed; next to each other they are fine, and clearing one
    # makes room for the other.
    before = [{"offset": 0, "length": MiB, "immutable": True, "non_persistent": False},
              {"offset": 4 * MiB, "length": MiB, "immutable": False, "non_persistent": True}]
    assert d.ctl("range", "attrs")["attrs"] == before
    d.ctl("range", "attr", "1M", "1M", "non-persistent")
    d.ctl("range", "attr", "0", "1M", "mutable")
    d.ctl("range", "attr", "0", "1M", "non-persistent")
    assert d.ctl("range", "attrs")["attrs"] == [
        {"offset": 0, "length": 2 * MiB, "immutable": False, "non_persistent": True},
        {"offset": 4 * MiB, "length": MiB, "immutable": False, "non_persistent": True}]
    assert d.stop() == 0


main(globals())

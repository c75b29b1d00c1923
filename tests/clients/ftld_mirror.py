#!/usr/bin/python3
"""Tier 3: mirrors, self-heal, device management and scrub (issue 22),
black box: the real ftld on two backing files, fio and libnbd as clients,
bytes flipped in one backing file, ftlctl device / scrub, ftl-tool.

- A mirror of two new files: both ONLINE in `device list`, DEGRADED when
  started with one of them (the other FAULTED, missing), the stale one
  resilvered when both are given again; a replaced device is refused.
- Bytes flipped in one backing file while fio verifies what it wrote:
  fio sees no error; reads and then `scrub` repair every flipped block
  that was live (checked against the other file), a second scrub finds
  nothing, and ftl-tool checks each device clean on its own.
- `device replace` on a live mirror while a client writes: the resilver
  finishes, the data reads back, ftl-tool check is clean on both devices.
- `device offline` / `online`: writes while offline reach the device after
  the resilver.
- `scrub start --rate`: progress, stop; `ftl-tool scrub` offline repairs
  flips (status repaired, then clean).
- kill -9 during writes to a mirror: restarts, both devices check clean.
"""

import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import need_tool, main  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
BLOCK = 4096
LABEL = 1 * MiB  # media/mirror_label.h kLabelAreaBytes: the pool starts here


def start_mirror(env, a, b, size="512M", extra=(), expect_ready=True):
    d = env.ftld_process(b, ["--mirror", a] + list(extra), size=size)
    return d.start(expect_ready=expect_ready)


def devices(d):
    return d.ctl("device", "list")


def wait_resilver(d, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = devices(d)
        if not r["resilver"]["active"] and all(x["state"] == "ONLINE" for x in r["devices"]):
            return r
        time.sleep(0.1)
    raise AssertionError(f"resilver not done after {timeout}s: {devices(d)}")


def fio(env, d, *args, timeout=600, check=True):
    r = env.run(["fio", "--name=m", "--ioengine=nbd", f"--uri={d.uri()}", "--output-format=json",
                 "--verify_state_save=0", *args], timeout=timeout, cwd=env.tmp, check=check)
    return r


def fio_job(r):
    return json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]


def fio_blocks(path):
    """Device offsets of the blocks holding fio verify headers (magic
    0xacca, len 4096), the data fio wrote."""
    found = []
    with open(path, "rb") as f:
        off = 0
        while True:
            chunk = f.read(MiB)
            if not chunk:
                break
            for i in range(0, len(chunk) - BLOCK + 1, BLOCK):
                if chunk[i:i + 2] == b"\xca\xac" and chunk[i + 4:i + 8] == (BLOCK).to_bytes(4, "little"):
                    found.append(off + i)
            off += len(chunk)
    return [o for o in found if o >= LABEL]


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def read_at(path, offset, n=BLOCK):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)


def tool(env, *args):
    return subprocess.run([env.ftl_tool, *args], capture_output=True, text=True, timeout=300)


def check_device(env, path):
    r = tool(env, "check", path)
    assert r.returncode == 0 and "status: clean" in r.stdout, f"ftl-tool check {path}: {r.returncode}\n{r.stdout}{r.stderr}"


# --- tests ------------------------------------------------------------------

def test_mirror_states_across_restarts(env):
    import nbd
    a, b = env.path("a.img"), env.path("b.img")
    d = start_mirror(env, a, b)
    r = devices(d)
    assert r["vdev"] == "mirror" and r["state"] == "ONLINE", r
    assert [x["state"] for x in r["devices"]] == ["ONLINE", "ONLINE"], r
    assert d.ctl("status")["devices"] == {"vdev": "mirror", "state": "ONLINE"}
    h = nbd.NBD()
    h.connect_uri(d.uri())
    first = os.urandom(4 * MiB)
    h.pwrite(first, 0)
    h.flush()
    h.shutdown()
    assert d.stop() == 0
    # Only a: DEGRADED, b missing; writes go on.
    da = env.ftld_process(a, []).start()
    assert "opening the mirror from it alone" in da.log()
    r = devices(da)
    assert r["state"] == "DEGRADED", r
    assert r["devices"][1]["state"] == "FAULTED" and not r["devices"][1]["present"], r
    h = nbd.NBD()
    h.connect_uri(da.uri())
    second = os.urandom(4 * MiB)
    h.pwrite(second, 4 * MiB)
    h.flush()
    h.shutdown()
    assert da.stop() == 0
    # b alone now holds old data: its own label says it is fine, so ftld
    # would open it; a says b is stale. Both: b is resilvered from a.
    d = start_mirror(env, a, b)
    r = wait_resilver(d)
    assert r["resilver"]["completed"] == 1, r
    h = nbd.NBD()
    h.connect_uri(d.uri())
    assert h.pread(4 * MiB, 0) == first
    assert h.pread(4 * MiB, 4 * MiB) == second
    h.shutdown()
    assert d.stop() == 0
    check_device(env, a)
    check_device(env, b)
    # Bad input: a foreign file among mirror devices, one BACKING without --mirror twice.
    c = env.path("c.img")
    with open(c, "wb") as f:
        f.truncate(512 * MiB)
    bad = env.ftld_process(c, ["--mirror", a], size=None).start(expect_ready=False)
    assert bad.wait() != 0
    assert "is no device of the mirror" in bad.log(), bad.log()
    r = env.run([env.ftld, "--port", "0", a, b], check=False)
    assert r.returncode == 2 and "--mirror" in r.stderr, r.stderr


def test_flips_during_fio_verify_are_healed_and_scrubbed(env):
    need_tool("fio")
    a, b = env.path("a.img"), env.path("b.img")
    d = start_mirror(env, a, b)
    common = ["--rw=randwrite", "--bs=4k", "--iodepth=32", "--size=64M", "--verify=crc32c",
              "--verify_fatal=1", "--randseed=22"]
    job = fio_job(fio(env, d, *common, "--do_verify=0"))
    assert job["error"] == 0, job
    d.ctl("checkpoint")
    live = fio_blocks(a)
    assert len(live) == 64 * MiB // BLOCK, len(live)  # written once each: no copies yet
    rng = random.Random(2026)
    targets = sorted(rng.sample(live, 300))
    # fio reads everything back and verifies it while bytes of b flip.
    proc = subprocess.Popen(["fio", "--name=m", "--ioengine=nbd", f"--uri={d.uri()}", "--output-format=json",
                             "--verify_state_save=0", *common, "--verify_only=1", "--do_verify=1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=env.tmp)
    env.procs.append(proc)
    for i, off in enumerate(targets):
        flip(b, off + rng.randrange(16, BLOCK))
        if i % 30 == 0:
            time.sleep(0.05)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"fio verify failed:\n{out}\n{err}"
    job = json.loads(out[out.index("{"):])["jobs"][0]
    assert job["error"] == 0 and job["read"]["io_bytes"] == 64 * MiB, job
    healed_by_reads = devices(d)["devices"][1]["checksum_errors"]
    # Every flipped block is live (fio's data, written once): the scrub
    # finds what the reads did not, and b matches a again.
    s = d.ctl("scrub", "start", "--rate", "0", "--wait")
    assert s["state"] == "finished" and s["unrecoverable"] == 0, s
    r = devices(d)
    cksum = r["devices"][1]["checksum_errors"]
    assert r["devices"][0]["checksum_errors"] == 0, r
    assert cksum == len(targets), (cksum, len(targets), healed_by_reads, s)
    assert s["repaired"] == len(targets) - healed_by_reads, (s, healed_by_reads)
    for off in targets:
        assert read_at(a, off) == read_at(b, off), f"block at {off} of b not repaired"
    again = d.ctl("scrub", "start", "--rate", "0", "--wait")
    assert again["errors"] == 0 and again["passes"] == 2, again
    st = d.ctl("stats")
    assert st["devices"]["healed_units"] == len(targets), st["devices"]
    assert d.stop() == 0
    check_device(env, a)
    check_device(env, b)


def test_replace_on_a_live_mirror(env):
    need_tool("fio")
    a, b, c = env.path("a.img"), env.path("b.img"), env.path("c.img")
    d = start_mirror(env, a, b, extra=["--resilver-rate", "64M"])
    with open(c, "wb") as f:
        f.truncate(600 * MiB)
    common = ["--rw=randwrite", "--bs=4k", "--iodepth=16", "--size=96M", "--verify=crc32c",
              "--verify_fatal=1", "--randseed=7"]
    proc = subprocess.Popen(["fio", "--name=m", "--ioengine=nbd", f"--uri={d.uri()}", "--output-format=json",
                             "--verify_state_save=0", *common, "--do_verify=1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=env.tmp)
    env.procs.append(proc)
    time.sleep(0.5)
    r = d.ctl("device", "replace", b, c)
    assert r["devices"][1]["name"] == c and r["devices"][1]["state"] == "RESILVERING", r
    assert r["state"] == "DEGRADED" and r["resilver"]["active"], r
    progress = [devices(d)["resilver"]["progress"] for _ in range(3)]
    r = wait_resilver(d)
    assert r["state"] == "ONLINE" and "resilvered" in r["resilver"]["last_result"], r
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"fio failed during the replace:\n{out}\n{err}"
    assert fio_job(subprocess.CompletedProcess([], 0, out, err))["error"] == 0
    # After the replace: verify everything once more, then offline checks.
    job = fio_job(fio(env, d, *common, "--verify_only=1", "--do_verify=1"))
    assert job["error"] == 0, job
    # Bad replaces change nothing.
    for args in (["device", "replace", a, c], ["device", "replace", "nosuch", env.path("x.img")],
                 ["device", "replace", c, a]):
        r = subprocess.run([env.ftlctl, "--control", d.control, "device", *args[1:]], capture_output=True, text=True)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
    assert devices(d)["state"] == "ONLINE"
    assert d.stop() == 0
    check_device(env, a)
    check_device(env, c)
    # The replaced device is no member any more.
    old = env.ftld_process(b, ["--mirror", a]).start(expect_ready=False)
    assert old.wait() != 0 and "no longer a member" in old.log(), old.log()
    assert progress  # progress was readable while it ran


def test_offline_online_catches_up(env):
    import nbd
    a, b = env.path("a.img"), env.path("b.img")
    d = start_mirror(env, a, b)
    r = d.ctl("device", "offline", b)
    assert r["state"] == "DEGRADED" and r["devices"][1]["state"] == "OFFLINE", r
    bad = subprocess.run([env.ftlctl, "--control", d.control, "device", "offline", a], capture_output=True, text=True)
    assert bad.returncode == 1 and "last ONLINE" in bad.stderr, bad.stderr
    h = nbd.NBD()
    h.connect_uri(d.uri())
    data = os.urandom(8 * MiB)
    h.pwrite(data, 16 * MiB)
    h.flush()
    d.ctl("device", "online", b)
    wait_resilver(d)
    # Read everything from b alone: offline a.
    d.ctl("device", "offline", a)
    assert h.pread(8 * MiB, 16 * MiB) == data
    d.ctl("device", "online", a)
    wait_resilver(d)
    h.shutdown()
    assert d.stop() == 0
    check_device(env, a)
    check_device(env, b)


def test_scrub_progress_stop_and_offline_scrub(env):
    import nbd
    a, b = env.path("a.img"), env.path("b.img")
    d = start_mirror(env, a, b)
    h = nbd.NBD()
    h.connect_uri(d.uri())
    for i in range(32):
        h.pwrite(os.urandom(MiB), i * MiB)
    h.flush()
    h.shutdown()
    s = d.ctl("scrub", "start", "--rate", "2M")
    assert s["state"] == "running", s
    time.sleep(1.5)
    s = d.ctl("scrub", "status")
    assert s["state"] == "running" and 0 < s["scanned_bytes"] < s["total_bytes"], s
    s = d.ctl("scrub", "stop")
    assert s["state"] == "stopped", s
    r = subprocess.run([env.ftlctl, "--control", d.control, "scrub", "start", "--rate", "bogus"],
                       capture_output=True, text=True)
    assert r.returncode == 1, r
    assert d.stop() == 0
    # Offline: flip bytes of live blocks in b, ftl-tool scrub repairs them.
    d.ctl  # noqa: B018 (the daemon is stopped; ftl-tool works on the files)
    live = []
    with open(a, "rb") as fa, open(b, "rb") as fb:
        # Blocks of the user data: equal on both, not zero, past the labels and metadata.
        for off in range(16 * MiB, 40 * MiB, BLOCK):
            fa.seek(off)
            blk = fa.read(BLOCK)
            if blk.count(0) < BLOCK // 2:
                live.append(off)
    targets = random.Random(5).sample(live, 20)
    for off in targets:
        flip(b, off + 100)
    r = tool(env, "scrub", "--mirror", a, b)
    assert r.returncode == 4 and "status: repaired" in r.stdout, f"{r.returncode}\n{r.stdout}{r.stderr}"
    for off in targets:
        assert read_at(a, off) == read_at(b, off)
    r = tool(env, "scrub", "--mirror", a, b)
    assert r.returncode == 0 and "status: clean" in r.stdout, f"{r.returncode}\n{r.stdout}{r.stderr}"
    # A single-device pool: scrub works, device verbs refuse.
    s1 = env.start_ftld(size="256M")
    s = s1.ctl("scrub", "start", "--wait")
    assert s["state"] == "finished" and s["errors"] == 0, s
    assert s1.ctl("device", "list")["vdev"] == "single"
    r = subprocess.run([env.ftlctl, "--control", s1.control, "device", "offline", "0"], capture_output=True, text=True)
    assert r.returncode == 1 and "not a mirror" in r.stderr, r.stderr
    assert s1.stop() == 0


def test_kill9_during_writes_to_a_mirror(env):
    need_tool("fio")
    a, b = env.path("a.img"), env.path("b.img")
    d = start_mirror(env, a, b)
    for round_ in range(3):
        proc = subprocess.Popen(["fio", "--name=k", "--ioengine=nbd", f"--uri={d.uri()}", "--rw=randwrite",
                                 "--bs=4k", "--iodepth=32", "--size=64M", "--time_based", "--runtime=30",
                                 "--fsync=64"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=env.tmp)
        env.procs.append(proc)
        time.sleep(1.0 + round_)
        d.kill9()
        proc.wait(60)
        d = start_mirror(env, a, b, size=None)
        r = devices(d)
        assert r["state"] == "ONLINE", r
        s = d.ctl("scrub", "start", "--rate", "0", "--wait")
        assert s["unrecoverable"] == 0 and s["errors"] == 0, s
    assert d.stop() == 0
    check_device(env, a)
    check_device(env, b)


main(globals())

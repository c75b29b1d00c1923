#!/usr/bin/python3
"""Tier 3: a full pool, damaged logs and ftl-tool's statuses, black box
(issue 19 engine fixes): the real ftld on a small backing file, libnbd as
the client, kill -9 and bit flips in the backing file, ftlctl and ftl-tool.

- A pool filled with a snapshot holding the old data answers ENOSPC; trim,
  punching write-zeroes, snapshot delete and gc still work (also after a
  restart while full), and afterwards the whole export can be written again.
- A flipped bit in the data of the last record before an answered FLUSH
  reads as EIO (never the older data), and the loss is named by volume and
  LBA; one in its header makes ftld refuse to start until --accept-loss,
  which fences the named blocks off with EIO.
- A flipped bit in an unflushed (unacknowledged) tail drops it: the older
  data reads back.
- ftl-tool check/repair exit statuses: clean, degraded, repaired.
"""

import errno
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import Skip, main  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
BLOCK = 4096
POOL = "72M"          # 17 segments of 4 MiB, 41 MiB logical (64M is below the minimum)
FILL_BOUND_S = 60     # the overwrite loop that must end in ENOSPC


# --- helpers ----------------------------------------------------------------

def connect(d, export=""):
    import nbd
    h = nbd.NBD()
    h.connect_uri(d.uri(export))
    return h


def block(tag, i):
    """One 4 KiB block that names `tag` and its index: unique in the backing
    file as long as (tag, i) is."""
    unit = f"[{tag}:{i:06d}]".encode()
    return (unit * (BLOCK // len(unit) + 1))[:BLOCK]


def blocks(tag, first, count):
    return b"".join(block(tag, first + i) for i in range(count))


def chunks(size):
    """(offset, length) of the 1 MiB requests that cover an export."""
    return [(off, min(MiB, size - off)) for off in range(0, size, MiB)]


def nbd_errnum(fn, *args):
    """Runs fn(*args); returns the errnum of the nbd.Error it raises, or
    None if it succeeded."""
    import nbd
    try:
        fn(*args)
    except nbd.Error as e:
        return e.errnum
    return None


def expect_eio(h, length, offset):
    import nbd
    try:
        data = h.pread(length, offset)
    except nbd.Error as e:
        assert e.errnum == errno.EIO, f"read {offset}+{length}: {e} (expected EIO)"
        return
    raise AssertionError(f"read {offset}+{length} succeeded, expected EIO; got {data[:40]!r}")


def find_block(path, data):
    """Byte offset of the one 4 KiB-aligned copy of `data` in the file."""
    with open(path, "rb") as f:
        image = f.read()
    hits = [m.start() for m in re.finditer(re.escape(data), image) if m.start() % BLOCK == 0]
    assert len(hits) == 1, f"{len(hits)} copies of block {data[:16]!r} in {path}: {hits}"
    return hits[0]


def find_write_header(path, lba, vol=0):
    """Byte offset of the header of the newest record whose first op writes
    block `lba` of volume `vol`: a header block, or (format 9) a 512-byte
    sector header inside an earlier header block (src/log/log_format.h,
    "Sector chains"). Read by field offsets; checksums are not verified."""
    with open(path, "rb") as f:
        image = f.read()
    best, best_seq = None, -1
    for m in re.finditer(b"FTLR", image):
        at = m.start()
        if at % 512 or at + 64 + 13 > len(image):
            continue
        seq = int.from_bytes(image[at + 16:at + 24], "little")
        op = image[at + 64]
        op_vol = int.from_bytes(image[at + 65:at + 69], "little")
        op_lba = int.from_bytes(image[at + 69:at + 73], "little")
        if op == 1 and op_vol == vol and op_lba == lba and seq > best_seq:
            best, best_seq = at, seq
    assert best is not None, f"no record writes volume {vol} block {lba} in {path}"
    return best


def flip(path, offset, mask=0x01):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))
        f.flush()
        os.fsync(f.fileno())


def need_ftl_tool(env):
    if env.ftl_tool is None or not os.access(env.ftl_tool, os.X_OK):
        raise Skip(f"ftl-tool not found ({env.ftl_tool or 'pass --ftl-tool'})")


def ftl_tool(env, *args):
    need_ftl_tool(env)
    return env.run([env.ftl_tool, *args], check=False)


def tool_status(r):
    """The `status: S` of ftl-tool's last line."""
    lines = r.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("status: "), f"no status line:\n{r.stdout}{r.stderr}"
    return lines[-1][len("status: "):]


def ctl_exit(d, *args):
    """Runs ftlctl (text output); returns (exit status, stdout + stderr)."""
    r = d.env.run([d.env.ftlctl, "--control", d.control, *args], check=False)
    return r.returncode, r.stdout + r.stderr


def start_fails(env, backing, args=(), timeout=60):
    """Starts ftld expecting it to refuse; returns (exit status, log)."""
    d = env.ftld_process(backing=backing, args=args)
    d.start(expect_ready=False)
    deadline = time.time() + timeout
    while d.proc.poll() is None and time.time() < deadline:
        assert "ready:" not in d.log(), f"ftld started, expected it to refuse:\n{d.log()}"
        time.sleep(0.05)
    rc = d.wait(1)
    d.logf.close()
    return rc, d.log()


# --- 1. full pool with a snapshot -------------------------------------------

def fill_to_enospc(d, tag):
    """Writes the whole export (tag "old"), snapshots it as "old", then
    overwrites it with `tag` in 1 MiB writes until ENOSPC. Returns
    (export size, offset of the write that got ENOSPC)."""
    import nbd
    h = connect(d)
    size = h.get_size()
    for off, n in chunks(size):
        h.pwrite(blocks("old", off // BLOCK, n // BLOCK), off)
    h.flush()
    rc, out = ctl_exit(d, "snapshot", "create", "old")
    assert rc == 0, out
    # Overwrite in 1 MiB writes. An ENOSPC is final only if it repeats
    # after `ftlctl gc` (the cleaner may still free a segment: the first
    # ENOSPC sometimes comes a few MiB early). Bounded by three passes (the
    # snapshot holds the first one, so the pool must be full long before)
    # and FILL_BOUND_S seconds.
    t0 = time.time()
    requests = chunks(size)
    full_at = first_enospc = None
    gc_at = None  # the offset of the last ENOSPC that ran gc
    i = 0
    while full_at is None and i < 3 * len(requests) and time.time() - t0 < FILL_BOUND_S:
        off, n = requests[i % len(requests)]
        try:
            h.pwrite(blocks(tag, off // BLOCK, n // BLOCK), off)
            i += 1
        except nbd.Error as e:
            assert e.errnum == errno.ENOSPC, f"write at {off}: {e} (expected success or ENOSPC)"
            if first_enospc is None:
                first_enospc = i * MiB
            if gc_at == i:
                full_at = off
            else:
                gc_at = i
                rc, out = ctl_exit(d, "gc")
                assert rc == 0, f"gc on a full pool: exit {rc}: {out}"
    assert full_at is not None, (
        f"no lasting ENOSPC after {i} MiB written in {time.time() - t0:.0f} s over a "
        f"{size // MiB} MiB export whose first pass a snapshot holds "
        f"(first ENOSPC at {first_enospc})")
    if first_enospc != full_at:
        print(f"note: first ENOSPC at {first_enospc // MiB} MiB, full at {full_at // MiB} MiB "
              f"(writes succeeded after gc)", flush=True)
    # Full: reads still work, both the new part and the snapshot-shared rest.
    assert full_at >= MiB and full_at + 2 * MiB < size, (full_at, size)
    assert h.pread(MiB, 0) == blocks(tag, 0, MiB // BLOCK)
    last = size - MiB
    assert h.pread(MiB, last) == blocks("old", last // BLOCK, MiB // BLOCK)
    h.shutdown()
    return size, full_at


def free_and_write_again(d, size, tag):
    """Snapshot delete and gc on a full pool, then the whole export takes
    new data and reads it back."""
    rc, out = ctl_exit(d, "snapshot", "delete", "old")
    assert rc == 0, f"snapshot delete on a full pool: exit {rc}: {out}"
    assert d.ctl("snapshot", "list")["snapshots"] == []
    rc, out = ctl_exit(d, "gc")
    assert rc == 0, f"gc: exit {rc}: {out}"
    h = connect(d)
    for off, n in chunks(size):
        e = nbd_errnum(h.pwrite, blocks(tag, off // BLOCK, n // BLOCK), off)
        assert e is None, f"write at {off} after snapshot delete and gc: errno {e}"
    h.flush()
    for off, n in chunks(size):
        assert h.pread(n, off) == blocks(tag, off // BLOCK, n // BLOCK), off
    h.shutdown()


def test_full_pool_with_snapshot_frees_space(env):
    d = env.start_ftld(size=POOL)
    size, full_at = fill_to_enospc(d, "new")
    h = connect(d)
    # Trim 1 MiB of snapshot-shared data (frees nothing yet, must still be
    # answered), then punch 1 MiB with write-zeroes (no NO_HOLE flag).
    trim_at, zero_at = size - MiB, size - 2 * MiB
    assert trim_at > full_at and zero_at > full_at, (size, full_at)
    e = nbd_errnum(h.trim, MiB, trim_at)
    assert e is None, f"trim on a full pool: errno {e}"
    e = nbd_errnum(h.zero, MiB, zero_at)
    assert e is None, f"write-zeroes on a full pool: errno {e}"
    assert h.pread(MiB, trim_at) == bytes(MiB)
    assert h.pread(MiB, zero_at) == bytes(MiB)
    h.flush()
    # Those freed nothing (the snapshot holds the blocks): still full, so
    # what follows shows that the snapshot delete makes the room.
    e = nbd_errnum(h.pwrite, blocks("new", full_at // BLOCK, MiB // BLOCK), full_at)
    assert e == errno.ENOSPC, f"write after trim and write-zeroes: errno {e}, expected ENOSPC"
    h.shutdown()
    free_and_write_again(d, size, "third")
    assert d.stop() == 0


def test_full_pool_restart_then_snapshot_delete(env):
    d = env.start_ftld(size=POOL)
    size, full_at = fill_to_enospc(d, "new")
    assert d.stop() == 0, d.log()[-2000:]
    d = env.ftld_process(backing=d.backing).start()
    h = connect(d)
    n_blocks = MiB // BLOCK
    # Still full after the restart (otherwise the rest proves nothing) ...
    last = size - MiB
    e = nbd_errnum(h.pwrite, blocks("new", last // BLOCK, n_blocks), last)
    assert e == errno.ENOSPC, f"write to a full pool after a restart: errno {e}, expected ENOSPC"
    # ... with both halves readable, and a trim still answered.
    assert h.pread(MiB, 0) == blocks("new", 0, n_blocks)
    assert h.pread(MiB, last) == blocks("old", last // BLOCK, n_blocks)
    e = nbd_errnum(h.trim, MiB, last)
    assert e is None, f"trim on a full pool after a restart: errno {e}"
    h.shutdown()
    free_and_write_again(d, size, "third")
    assert d.stop() == 0


# --- 2. damage in the last record after an answered FLUSH -------------------

def write_a_then_b(env, flush_b=True, proof_delay=0):
    """Writes C (64 KiB at 1 MiB), A (64 KiB at 0), flush, B (64 KiB at 0),
    flush unless told not to, then kill -9. Returns the backing path.

    proof_delay 0 (--proof-delay 0): the durability marker proving the FLUSH
    is durable before the FLUSH is answered, so kill -9 right after it
    tests the strict guarantee. With a delay (the default 20 ms), kill -9
    waits until `ftlctl stats` says no proof is pending."""
    d = env.start_ftld(size=POOL, args=["--proof-delay", str(proof_delay)])
    h = connect(d)
    h.pwrite(blocks("C", 256, 16), MiB)
    h.pwrite(blocks("A", 0, 16), 0)
    h.flush()
    h.pwrite(blocks("B", 0, 16), 0)
    if flush_b:
        h.flush()
    if proof_delay and flush_b:
        for _ in range(500):
            if not d.ctl("stats")["pool"]["proof_pending"]:
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the deferred durability marker never became durable")
    # No shutdown: the daemon dies with the connection open.
    d.kill9()
    del h
    return d.backing


def flip_b_block_2(env, proof_delay=0):
    """A, flush, B, flush, kill -9; then one bit of B's third block flips."""
    backing = write_a_then_b(env, proof_delay=proof_delay)
    at = find_block(backing, block("B", 2))
    flip(backing, at + 1000, 0x10)
    return backing


def read_b_except_2(h):
    for i in range(16):
        if i != 2:
            got = h.pread(BLOCK, i * BLOCK)
            assert got == block("B", i), f"block {i}: {got[:24]!r}, expected B"


def test_flipped_data_bit_after_flush_reads_eio(env):
    need_ftl_tool(env)
    backing = flip_b_block_2(env)
    # ftl-tool check (recovery in memory, nothing written) reports the loss.
    r = ftl_tool(env, "check", backing)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and tool_status(r) == "damaged", out
    assert re.search(r"volume ftl0 blocks 0-15\b", out), out
    d = env.ftld_process(backing=backing).start()
    assert "record seq" in d.log() and "damaged data" in d.log(), d.log()
    h = connect(d)
    expect_eio(h, BLOCK, 2 * BLOCK)
    expect_eio(h, 64 * KiB, 0)  # a read that covers it fails as a whole
    read_b_except_2(h)          # B, never A
    assert h.pread(64 * KiB, MiB) == blocks("C", 256, 16)
    h.shutdown()
    # Stopped (a checkpoint now holds the state), ftl-tool still finds it.
    assert d.stop() == 0
    r = ftl_tool(env, "check", backing)
    assert r.returncode == 1 and tool_status(r) == "damaged", r.stdout + r.stderr
    # Restarted, the block is still EIO; written again, it reads fine.
    d = env.ftld_process(backing=backing).start()
    h = connect(d)
    expect_eio(h, BLOCK, 2 * BLOCK)
    read_b_except_2(h)
    h.pwrite(block("D", 2), 2 * BLOCK)
    h.flush()
    assert h.pread(BLOCK, 2 * BLOCK) == block("D", 2)
    h.shutdown()
    assert d.stop() == 0
    r = ftl_tool(env, "check", backing)
    assert r.returncode == 0 and tool_status(r) == "clean", r.stdout + r.stderr


def test_flipped_data_bit_after_deferred_proof_reads_eio(env):
    """The default --proof-delay (20 ms): the FLUSH is answered after one
    sync and its proof follows; once `stats` says no proof is pending, a
    flipped bit in the flushed record reads EIO, never the older A."""
    backing = flip_b_block_2(env, proof_delay=20)
    d = env.ftld_process(backing=backing).start()
    assert "damaged data" in d.log(), d.log()
    h = connect(d)
    expect_eio(h, BLOCK, 2 * BLOCK)
    read_b_except_2(h)
    h.shutdown()
    assert d.stop() == 0


def test_lost_data_blocks_are_named_by_volume_and_lba(env):
    """README, "Never wrong data": data blocks of an acknowledged record
    that fail their checksum "are applied and answer EIO, each listed by
    volume and LBA in the log"; ftl-tool check lists "lost blocks by volume
    and LBA". Here LBA 2 of volume ftl0 (a range naming it will do)."""
    need_ftl_tool(env)
    backing = flip_b_block_2(env)
    names_lba_2 = re.compile(r"volume ftl0\D*?(?:block|lba)s? (\d+)(?:-(\d+))?", re.I)

    def names_it(text):
        for m in names_lba_2.finditer(text):
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if lo <= 2 <= hi:
                return True
        return False

    d = env.ftld_process(backing=backing).start()
    h = connect(d)
    expect_eio(h, BLOCK, 2 * BLOCK)
    h.shutdown()
    assert d.stop() == 0
    missing = []
    if not names_it(d.log()):
        lines = [l for l in d.log().splitlines() if "error" in l or "lost" in l]
        missing.append(f"ftld's log does not name volume ftl0 LBA 2: {lines}")
    r = ftl_tool(env, "check", backing)
    if not names_it(r.stdout):
        lines = [l for l in r.stdout.splitlines() if l.startswith("PROBLEM")]
        missing.append(f"ftl-tool check after the daemon's recovery does not name it: {lines}")
    assert not missing, "\n".join(missing)


def test_flipped_header_bit_after_flush_needs_accept_loss(env):
    need_ftl_tool(env)
    backing = write_a_then_b(env)
    find_block(backing, block("B", 0))  # B's data is there
    header = find_write_header(backing, 0)  # B's header: a block or a sector
    # Offset 90 is in the header's op payload (block 1's checksum).
    flip(backing, header + 90, 0xff)
    # A plain start refuses, naming --accept-loss.
    rc, log = start_fails(env, backing)
    assert rc != 0 and "--accept-loss" in log, (rc, log)
    # ftl-tool check cannot open it without --accept-loss ...
    r = ftl_tool(env, "check", backing)
    assert r.returncode == 2 and "--accept-loss" in r.stdout + r.stderr, r.stdout + r.stderr
    # ... and with it reports the loss by volume and blocks.
    r = ftl_tool(env, "check", "--accept-loss", backing)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and tool_status(r) == "damaged", out
    assert re.search(r"volume ftl0 blocks 0-15\b", out), out
    # ftld --accept-loss serves: B's blocks are EIO (never A), C is intact.
    d = env.ftld_process(backing=backing, args=["--accept-loss"]).start()
    assert re.search(r"volume ftl0 blocks 0-15\b", d.log()), d.log()
    h = connect(d)
    for i in range(16):
        expect_eio(h, BLOCK, i * BLOCK)
    assert h.pread(64 * KiB, MiB) == blocks("C", 256, 16)
    h.shutdown()
    assert d.stop() == 0
    # A plain restart opens (the loss is in the checkpoint now) and the
    # blocks are still fenced off; written again, they read fine.
    d = env.ftld_process(backing=backing).start()
    h = connect(d)
    for i in range(16):
        expect_eio(h, BLOCK, i * BLOCK)
    h.pwrite(blocks("D", 0, 16), 0)
    h.flush()
    assert h.pread(64 * KiB, 0) == blocks("D", 0, 16)
    h.shutdown()
    assert d.stop() == 0
    d = env.ftld_process(backing=backing).start()
    h = connect(d)
    assert h.pread(64 * KiB, 0) == blocks("D", 0, 16)
    assert h.pread(64 * KiB, MiB) == blocks("C", 256, 16)
    h.shutdown()
    assert d.stop() == 0


# --- 3. damage in an unflushed tail -----------------------------------------

def test_unflushed_tail(env):
    # Control: without damage the unflushed B survives kill -9 (it is in
    # the page cache, hence in the file) ...
    backing = write_a_then_b(env, flush_b=False)
    find_block(backing, block("B", 2))
    d = env.ftld_process(backing=backing).start()
    h = connect(d)
    assert h.pread(64 * KiB, 0) == blocks("B", 0, 16), "unflushed B lost without damage"
    h.shutdown()
    assert d.stop() == 0
    # ... with a flipped bit in its data it is a torn tail: dropped, A reads.
    backing = write_a_then_b(env, flush_b=False)
    at = find_block(backing, block("B", 2))
    flip(backing, at + 1000, 0x10)
    d = env.ftld_process(backing=backing).start()
    h = connect(d)
    got = h.pread(64 * KiB, 0)
    assert got == blocks("A", 0, 16), f"expected A after a torn unflushed B, got {got[:20]!r}"
    assert h.pread(64 * KiB, MiB) == blocks("C", 256, 16)
    h.shutdown()
    assert d.stop() == 0


# --- 4. ftl-tool exit statuses ----------------------------------------------

def superblock(backing):
    """The fields of superblock copy A that locate the checkpoint slots."""
    import struct
    with open(backing, "rb") as f:
        b = f.read(BLOCK)
    assert b[:8] == b"FLTDSUPR", b[:8]
    slot_blocks, = struct.unpack_from("<I", b, 48)
    newest = b[77]
    slot_bytes = [struct.unpack_from("<Q", b, 78 + 24 * i + 8)[0] for i in (0, 1)]
    return {"slot_blocks": slot_blocks, "newest_slot": newest, "slot_bytes": slot_bytes}


def check_clean(env, backing):
    r = ftl_tool(env, "check", backing)
    assert r.returncode == 0 and tool_status(r) == "clean", r.stdout + r.stderr


def degraded_then_repaired(env, backing, what):
    r = ftl_tool(env, "check", backing)
    out = r.stdout + r.stderr
    assert r.returncode == 3 and tool_status(r) == "degraded", f"{what}:\n{out}"
    assert "DEGRADED:" in out, out
    r = ftl_tool(env, "repair", backing)
    out = r.stdout + r.stderr
    assert r.returncode == 4 and tool_status(r) == "repaired", f"{what}:\n{out}"
    check_clean(env, backing)


def test_ftl_tool_statuses(env):
    need_ftl_tool(env)
    d = env.start_ftld(size=POOL)
    h = connect(d)
    h.pwrite(blocks("A", 0, 256), 0)
    h.flush()
    h.shutdown()
    assert d.stop() == 0
    backing = d.backing
    check_clean(env, backing)
    # Superblock copy B (block 1).
    flip(backing, BLOCK + 40, 0xff)
    degraded_then_repaired(env, backing, "superblock copy B")
    # The checkpoint slots start at byte 8192, each checkpoint_slot_blocks
    # * 4096 long. ftl-tool dump shows that size rounded ("1.2 MiB"), so it
    # is read from superblock copy A (the encoding in log_format.cc).
    r = ftl_tool(env, "dump", backing)
    assert r.returncode == 0 and re.search(r"^checkpoint slot .* x 2$", r.stdout, re.M), r.stdout
    sb = superblock(backing)
    older = 1 - sb["newest_slot"]
    for slot in (older, sb["newest_slot"]):  # the older first: an open never reads it
        sb = superblock(backing)
        length = sb["slot_bytes"][slot]
        assert 0 < length <= sb["slot_blocks"] * BLOCK, sb
        flip(backing, 2 * BLOCK + slot * sb["slot_blocks"] * BLOCK + length // 2, 0xff)
        degraded_then_repaired(env, backing, f"checkpoint slot {slot} (newest {sb['newest_slot']})")
    # The pool still serves what was written.
    d = env.ftld_process(backing=backing).start()
    h = connect(d)
    assert h.pread(MiB, 0) == blocks("A", 0, 256)
    h.shutdown()
    assert d.stop() == 0


if __name__ == "__main__":
    main(globals())

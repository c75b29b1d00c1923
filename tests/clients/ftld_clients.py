#!/usr/bin/python3
"""Tier 3: real NBD clients (libnbd tools, qemu, fio) against the real ftld."""

import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import main, need_tool  # noqa: E402

MiB = 1 << 20


def nbd_handle(uri, meta=True):
    import nbd
    h = nbd.NBD()
    if meta:
        h.add_meta_context("base:allocation")
    h.connect_uri(uri)
    return h


def test_nbdinfo_json(env):
    need_tool("nbdinfo")
    d = env.start_ftld(size="1G")
    out = json.loads(env.run(["nbdinfo", "--json", d.uri()]).stdout)
    e = out["exports"][0]
    geometry = d.ctl("status")["geometry"]
    assert e["export-size"] == geometry["logical_bytes"], (e, geometry)
    assert out["structured"] is True
    for flag in ["can_flush", "can_fua", "can_multi_conn", "can_trim", "can_zero",
                 "can_fast_zero", "can_cache", "can_df"]:
        assert e[flag] is True, flag
    assert e["is_read_only"] is False
    assert "base:allocation" in e["contexts"]
    assert (e["block_size_minimum"], e["block_size_preferred"], e["block_size_maximum"]) == \
        (512, 4096, 32 * MiB), e
    # The primary volume under its name is the same export.
    named = json.loads(env.run(["nbdinfo", "--json", d.uri("ftl0")]).stdout)["exports"][0]
    assert named["export-size"] == e["export-size"]
    assert d.stop() == 0


def test_nbdinfo_list(env):
    need_tool("nbdinfo")
    d = env.start_ftld(size="1G", args=["--export", "disk"])
    out = json.loads(env.run(["nbdinfo", "--list", "--json", d.uri()]).stdout)
    names = [e["export-name"] for e in out["exports"]]
    assert names == ["disk", ""], names  # the default export is listed too
    default = out["exports"][1]
    assert default["description"] == "ftld volume ftl0 (default)", default
    assert default["export-size"] == out["exports"][0]["export-size"], out
    r = env.run(["nbdinfo", "--json", d.uri("nope")], check=False)
    assert r.returncode != 0
    assert d.stop() == 0


def test_nbdinfo_map(env):
    need_tool("nbdinfo")
    d = env.start_ftld(size="1G")
    h = nbd_handle(d.uri())
    h.pwrite(os.urandom(MiB), 4 * MiB)
    h.pwrite(os.urandom(64 * 1024), 16 * MiB)
    h.flush()
    h.shutdown()
    out = json.loads(env.run(["nbdinfo", "--map", "--json", d.uri()]).stdout)
    data = [(x["offset"], x["length"]) for x in out if x["type"] & 1 == 0]
    assert data == [(4 * MiB, MiB), (16 * MiB, 64 * 1024)], out
    assert d.stop() == 0


def test_nbdsh_io(env):
    need_tool("nbdsh")
    d = env.start_ftld(size="1G")
    script = """
import os
buf = os.urandom(1 << 20)
h.pwrite(buf, 8192)
assert h.pread(len(buf), 8192) == buf
h.flush()
h.pwrite(b"z" * 4096, 0, nbd.CMD_FLAG_FUA)
h.zero(65536, 8192)
assert h.pread(65536, 8192) == bytes(65536)
h.trim(4 << 20, 64 << 20)
h.cache(4096, 0)
print("nbdsh ok")
"""
    # nbdsh runs "python3" from PATH; the libnbd module is Debian's.
    path = {**os.environ, "PATH": "/usr/bin:" + os.environ.get("PATH", "")}
    r = env.run(["nbdsh", "-u", d.uri(), "-c", script], env=path)
    assert "nbdsh ok" in r.stdout, r.stdout + r.stderr
    assert d.stop() == 0


def test_libnbd_block_status_and_trim(env):
    d = env.start_ftld(size="1G")
    h = nbd_handle(d.uri())
    h.pwrite(os.urandom(2 * MiB), 0)
    seen = []
    h.block_status(4 * MiB, 0, lambda ctx, off, ents, err: seen.append((ctx, off, list(ents))))
    assert seen[0][0] == "base:allocation"
    ents = seen[0][2]
    assert ents[0:2] == [2 * MiB, 0], ents  # data
    assert ents[3] & 3 == 3, ents           # then hole + zero
    # REQ_ONE: one descriptor.
    import nbd
    seen.clear()
    h.block_status(4 * MiB, 0, lambda ctx, off, ents, err: seen.append(list(ents)),
                   nbd.CMD_FLAG_REQ_ONE)
    assert len(seen[0]) == 2, seen
    # Trim makes it a hole that reads as zeros.
    h.trim(MiB, 0)
    assert h.pread(MiB, 0) == bytes(MiB)
    seen.clear()
    h.block_status(2 * MiB, 0, lambda ctx, off, ents, err: seen.append(list(ents)))
    assert seen[0][1] & 1 == 1 and seen[0][0] == MiB, seen
    # Write zeroes with NO_HOLE stays allocated; FAST_ZERO is accepted.
    h.zero(MiB, MiB, nbd.CMD_FLAG_NO_HOLE)
    assert h.pread(MiB, MiB) == bytes(MiB)
    h.zero(MiB, 8 * MiB, nbd.CMD_FLAG_FAST_ZERO)
    h.shutdown()
    assert d.stop() == 0


def test_libnbd_errors_strict_off(env):
    import nbd
    d = env.start_ftld(size="1G")
    h = nbd_handle(d.uri())
    size = h.get_size()
    h.set_strict_mode(0)

    def expect(errno_name, fn, *args):
        try:
            fn(*args)
        except nbd.Error as e:
            assert e.errno == errno_name, (errno_name, e.errno, str(e))
            return
        raise AssertionError(f"{fn.__name__}{args} succeeded, expected {errno_name}")

    expect("EINVAL", h.pread, 4096, size)             # read past the end
    expect("EINVAL", h.pread, 8192, size - 4096)      # straddling the end
    expect("ENOSPC", h.pwrite, b"x" * 4096, size)     # write past the end
    expect("ENOSPC", h.zero, 4096, size)              # write zeroes past the end
    expect("EINVAL", h.trim, 4096, size)              # trim past the end
    expect("EINVAL", h.pread, 100, 0)                 # misaligned length
    expect("EINVAL", h.pread, 512, 100)               # misaligned offset
    expect("EINVAL", h.pread, 40 * MiB, 0)            # over the maximum
    expect("EINVAL", h.pwrite, bytes(33 * MiB), 0)    # over the maximum, payload drained
    expect("EINVAL", h.pread, 4096, 0, 1 << 7)        # unknown flag
    expect("EINVAL", h.pread, 4096, 0, nbd.CMD_FLAG_REQ_ONE)  # flag not valid for READ
    # The connection is still fine.
    h.pwrite(b"a" * 4096, 0)
    assert h.pread(4096, 0) == b"a" * 4096
    h.shutdown()
    # Read-only export: EPERM.
    assert d.stop() == 0
    ro = env.ftld_process(backing=d.backing, args=["--read-only"]).start()
    h = nbd_handle(ro.uri())
    assert h.is_read_only()
    h.set_strict_mode(0)
    expect("EPERM", h.pwrite, b"b" * 4096, 0)
    expect("EPERM", h.trim, 4096, 0)
    assert h.pread(4096, 0) == b"a" * 4096
    h.shutdown()
    assert ro.stop() == 0


def test_libnbd_byte_granular_without_block_sizes(env):
    # A client that does not ask for NBD_INFO_BLOCK_SIZE agrees to no block
    # sizes: ftld advertises (and enforces) the spec's default minimum of 1
    # and serves any byte offset and length. Random requests against a model,
    # then the flushed state across kill -9.
    import random
    import nbd
    d = env.start_ftld(size="1G")
    span = 2 * MiB + 3
    h = nbd.NBD()
    h.set_request_block_size(False)
    h.add_meta_context("base:allocation")
    h.connect_uri(d.uri())
    assert h.get_block_size(nbd.SIZE_MINIMUM) == 1, h.get_block_size(nbd.SIZE_MINIMUM)
    h.set_strict_mode(0)
    model = bytearray(span)
    rng = random.Random(7)
    h.pwrite(bytes(range(256)) * 8, 0)
    model[0:2048] = bytes(range(256)) * 8
    assert h.pread(511, 1) == bytes(model[1:512])
    for i in range(600):
        off = rng.randrange(span)
        n = 1 + rng.randrange(min(span - off, 3000 if rng.random() < 0.8 else 200000))
        op = rng.randrange(10)
        if op < 4:
            data = os.urandom(n)
            h.pwrite(data, off, nbd.CMD_FLAG_FUA if rng.random() < 0.1 else 0)
            model[off:off + n] = data
        elif op < 6:
            h.zero(n, off, nbd.CMD_FLAG_NO_HOLE if rng.random() < 0.5 else 0)
            model[off:off + n] = bytes(n)
        elif op < 7:
            h.trim(n, off)
            first, end = (off + 4095) // 4096 * 4096, (off + n) // 4096 * 4096
            if first < end:
                model[first:end] = bytes(end - first)
        elif op < 9:
            assert h.pread(n, off) == bytes(model[off:off + n]), (i, off, n)
        else:
            h.cache(n, off)
            seen = []
            h.block_status(n, off, lambda ctx, o, ents, err: seen.append(list(ents)))
            pos = off
            ents = seen[0]
            for k in range(0, len(ents), 2):
                length, flags = ents[k], ents[k + 1]
                assert length > 0, ents
                if flags & 2:  # reads as zeros
                    assert model[pos:pos + length] == bytes(length), (off, n, ents)
                pos += length
            assert off < pos <= off + n, (off, n, ents)
    assert h.pread(span, 0) == bytes(model)
    h.flush()
    h.shutdown()
    assert "byte-granular (no block sizes agreed)" in d.log()
    # Crash: everything acknowledged before the flush is there.
    d.kill9()
    d2 = env.ftld_process(backing=d.backing).start()
    h = nbd_handle(d2.uri(), meta=False)  # asks for block sizes: 512
    assert h.get_block_size(nbd.SIZE_MINIMUM) == 512
    assert h.pread(span - 3, 0) == bytes(model[:span - 3])
    # ... and a client that agreed to 512 gets EINVAL for what it promised
    # not to send.
    h.set_strict_mode(0)
    try:
        h.pread(511, 1)
        raise AssertionError("unaligned read by a client that agreed to 512 succeeded")
    except nbd.Error as e:
        assert e.errno == "EINVAL", e
    h.shutdown()
    # nbdsh, the same way.
    path = {**os.environ, "PATH": "/usr/bin:" + os.environ.get("PATH", "")}
    r = env.run(["nbdsh", "-c", "h.set_request_block_size(False)", "-u", d2.uri(),
                 "-c", "h.set_strict_mode(0)", "-c", "print(h.pread(3, 1).hex())"], env=path)
    assert r.stdout.strip() == bytes(model[1:4]).hex(), r.stdout + r.stderr
    assert d2.stop() == 0


def test_nbdcopy_256m(env):
    need_tool("nbdcopy")
    d = env.start_ftld(size="1G")
    src = env.path("src.raw")
    with open(src, "wb") as f:
        for _ in range(256):
            f.write(os.urandom(MiB))
    env.run(["nbdcopy", src, d.uri()])
    out = env.path("out.raw")
    # Copy back exactly 256 MiB (the export is larger).
    env.run(["nbdcopy", "--length", str(256 * MiB), d.uri(), out]) if _nbdcopy_has_length(env) \
        else env.run(["nbdcopy", d.uri(), out])

    def digest(path, n=256 * MiB):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            left = n
            while left:
                b = f.read(min(left, 8 * MiB))
                if not b:
                    break
                h.update(b)
                left -= len(b)
        return h.hexdigest()

    assert digest(src) == digest(out)
    assert d.stop() == 0


def _nbdcopy_has_length(env):
    return "--length" in env.run(["nbdcopy", "--help"], check=False).stdout


def test_qemu_io_patterns(env):
    need_tool("qemu-io")
    d = env.start_ftld(size="1G")
    uri = d.uri()
    cmds = [
        "write -P 0xa5 0 1M",
        "write -P 0x5a 1M 64k",
        "write -P 0x11 2049 3000",       # unaligned: qemu does read-modify-write
        "write -P 0x22 4095 2",
        "write -z 8M 1M",
        "flush",
        "read -P 0xa5 0 2049",
        "read -P 0x11 2049 2046",
        "read -P 0x22 4095 2",
        "read -P 0x11 4097 952",
        "read -P 0x5a 1M 64k",
        "read -P 0 8M 1M",
        "aio_write -P 0x33 16M 128k",
        "aio_write -P 0x44 17M 128k",
        "aio_flush",
        "read -P 0x33 16M 128k",
        "read -P 0x44 17M 128k",
        "discard 32M 1M",
    ]
    args = ["qemu-io", "-f", "raw"]
    for c in cmds:
        args += ["-c", c]
    r = env.run(args + [uri])
    assert "Pattern verification failed" not in r.stdout + r.stderr, r.stdout
    assert d.stop() == 0


def test_qemu_io_fast_zero(env):
    # qemu-io 'write -z -n' sends WRITE_ZEROES with FAST_ZERO|NO_HOLE: valid
    # per the spec; ftld cannot make allocated zeros fast, so it answers
    # ENOTSUP (qemu's signal to fall back), never EINVAL. With -u (trim
    # allowed) it is fast and works.
    need_tool("qemu-io")
    d = env.start_ftld(size="1G")
    uri = d.uri()
    env.run(["qemu-io", "-f", "raw", "-c", "write -P 0x66 0 256k", uri])
    r = env.run(["qemu-io", "-f", "raw", "-c", "write -z -n 0 64k", uri], check=False)
    out = r.stdout + r.stderr
    assert "Invalid argument" not in out, out
    assert "Operation not supported" in out, out
    r = env.run(["qemu-io", "-f", "raw", "-c", "read -P 0x66 0 256k", uri], check=False)
    assert "Pattern verification failed" not in r.stdout + r.stderr, r.stdout  # unchanged
    env.run(["qemu-io", "-f", "raw", "-c", "write -z -n -u 64k 64k",
             "-c", "read -P 0 64k 64k", "-c", "read -P 0x66 128k 128k", uri])
    assert "WRITE_ZEROES refused" not in d.log(), d.log()[-2000:]
    assert d.stop() == 0


def test_qemu_img_compare(env):
    need_tool("qemu-img")
    d = env.start_ftld(size="1G")
    raw = env.path("ref.raw")
    with open(raw, "wb") as f:
        f.truncate(64 * MiB)
        for i in range(0, 64, 3):
            f.seek(i * MiB + 4096 * i)
            f.write(os.urandom(100 * 1024))
    env.run(["qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", raw, d.uri()])
    # Compare the first 64 MiB of the export against the file.
    r = env.run(["qemu-img", "compare", "-f", "raw", "-F", "raw", raw,
                 f"json:{{\"driver\":\"raw\",\"size\":{64 * MiB},"
                 f"\"file\":{{\"driver\":\"nbd\",\"server\":{{\"type\":\"inet\","
                 f"\"host\":\"127.0.0.1\",\"port\":\"{d.port}\"}},\"export\":\"\"}}}}"],
                check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    # And one byte changed is noticed.
    h = nbd_handle(d.uri(), meta=False)
    h.pwrite(b"\xff" * 512, 5 * MiB)
    h.shutdown()
    r = env.run(["qemu-img", "compare", "-f", "raw", "-F", "raw", raw,
                 f"json:{{\"driver\":\"raw\",\"size\":{64 * MiB},"
                 f"\"file\":{{\"driver\":\"nbd\",\"server\":{{\"type\":\"inet\","
                 f"\"host\":\"127.0.0.1\",\"port\":\"{d.port}\"}},\"export\":\"\"}}}}"],
                check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert d.stop() == 0


def test_fio_randwrite_verify(env):
    need_tool("fio")
    d = env.start_ftld(size="1G")
    r = env.run(["fio", "--name=verify", "--ioengine=nbd", f"--uri={d.uri()}",
                 "--rw=randwrite", "--bs=4k", "--iodepth=32", "--size=128M",
                 "--verify=crc32c", "--do_verify=1", "--verify_fatal=1",
                 "--verify_state_save=0", "--output-format=json"], timeout=600, cwd=env.tmp)
    out = json.loads(r.stdout[r.stdout.index("{"):])
    job = out["jobs"][0]
    assert job["error"] == 0, job
    assert job["write"]["io_bytes"] == 128 * MiB, job["write"]
    assert job["read"]["io_bytes"] == 128 * MiB, job["read"]
    # Mixed sizes and a second pass over the same data (overwrites).
    r = env.run(["fio", "--name=mixed", "--ioengine=nbd", f"--uri={d.uri()}",
                 "--rw=randwrite", "--bsrange=512-256k", "--iodepth=16", "--size=64M",
                 "--verify=crc32c", "--do_verify=1", "--verify_fatal=1",
                 "--verify_state_save=0", "--output-format=json"], timeout=600, cwd=env.tmp)
    assert json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]["error"] == 0
    assert d.stop() == 0


main(globals())

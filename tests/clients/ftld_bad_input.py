#!/usr/bin/python3
"""Tier 3: bad input against the real ftld. Each case checks that the daemon
logs the problem in one line and keeps serving other (and, where the
connection survives, the same) clients."""

import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import main, need_tool  # noqa: E402

MiB = 1 << 20
NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REPLY_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
EINVAL, ENOSPC = 22, 28


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def closed_by_server(s, timeout=10):
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


class Raw:
    """A hand-rolled NBD client, to send what libnbd never would."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        magic, opt, flags = struct.unpack(">QQH", recv_exact(self.s, 18))
        assert (magic, opt) == (NBDMAGIC, IHAVEOPT) and flags & 3 == 3, (magic, opt, flags)

    def send_flags(self, flags=3):
        self.s.sendall(struct.pack(">I", flags))

    def option(self, opt, data=b""):
        self.s.sendall(struct.pack(">QII", IHAVEOPT, opt, len(data)) + data)

    def option_reply(self):
        magic, opt, rtype, length = struct.unpack(">QIII", recv_exact(self.s, 20))
        assert magic == REPLY_MAGIC, hex(magic)
        return opt, rtype, recv_exact(self.s, length)

    def go(self, name=b""):
        self.option(7, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
        size = None
        while True:
            opt, rtype, data = self.option_reply()
            if rtype == 3 and struct.unpack(">H", data[:2])[0] == 0:
                size, flags = struct.unpack(">QH", data[2:12])
            if rtype == 1:
                return size
            assert rtype < 0x80000000, (rtype, data)

    def export_name(self, name=b""):
        """NBD_OPT_EXPORT_NAME (flags 3: no zeroes); returns the size."""
        self.option(1, name)
        size, _ = struct.unpack(">QH", recv_exact(self.s, 10))
        return size

    def request(self, cmd, offset, length, flags=0, cookie=1, payload=b""):
        self.s.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, flags, cmd, cookie, offset, length)
                       + payload)

    def simple_reply(self, data_len=0):
        magic, error, cookie = struct.unpack(">IIQ", recv_exact(self.s, 16))
        assert magic == SIMPLE_REPLY_MAGIC, hex(magic)
        data = recv_exact(self.s, data_len) if error == 0 and data_len else b""
        return error, cookie, data

    def close(self):
        self.s.close()


def recv_big(s, n):
    """recv_exact for large payloads (no quadratic bytes concatenation)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:])
        if not k:
            raise EOFError(f"closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def peak_rss_kib(pid, settle=1.5, timeout=20):
    """The daemon's RSS once it has stopped growing for `settle` seconds."""
    peak = rss_kib(pid)
    changed = time.time()
    deadline = time.time() + timeout
    while time.time() < deadline and time.time() - changed < settle:
        time.sleep(0.1)
        now = rss_kib(pid)
        if now > peak + 1024:
            peak, changed = now, time.time()
    return max(peak, rss_kib(pid))


def still_serves(d):
    import nbd
    h = nbd.NBD()
    h.connect_uri(d.uri())
    h.pwrite(b"k" * 4096, 0)
    assert h.pread(4096, 0) == b"k" * 4096
    h.shutdown()


def wait_log(d, text, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in d.log():
            return
        time.sleep(0.05)
    raise AssertionError(f"log lacks {text!r}:\n{d.log()[-3000:]}")


def test_garbage_and_truncated_handshakes(env):
    d = env.start_ftld(size="1G")
    # Nonsense client flags.
    r = Raw(d.port)
    r.s.sendall(os.urandom(64) + b"\xff\xff\xff\xff")
    assert closed_by_server(r.s)
    r.close()
    # Valid flags, then garbage where an option should be.
    r = Raw(d.port)
    r.send_flags()
    r.s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert closed_by_server(r.s)
    wait_log(d, "bad option: option without IHAVEOPT magic")
    r.close()
    # Truncated: half the flags, then gone.
    r = Raw(d.port)
    r.s.sendall(b"\x00\x00")
    r.close()
    wait_log(d, "closed during handshake (2 of 4 flag bytes)")
    # Truncated: half an option header, then gone.
    r = Raw(d.port)
    r.send_flags()
    r.s.sendall(struct.pack(">Q", IHAVEOPT))
    r.close()
    wait_log(d, "truncated option header (8 of 16 bytes)")
    # Truncated option data.
    r = Raw(d.port)
    r.send_flags()
    r.s.sendall(struct.pack(">QII", IHAVEOPT, 7, 100) + b"\x00" * 10)
    r.close()
    wait_log(d, "truncated NBD_OPT_GO (10 of 100 data bytes)")
    # Not even a byte.
    socket.create_connection(("127.0.0.1", d.port)).close()
    still_serves(d)
    assert d.stop() == 0


def test_options_stay_in_sync(env):
    d = env.start_ftld(size="1G")
    r = Raw(d.port)
    r.send_flags()
    r.option(99, b"whatever")
    assert r.option_reply()[1] == 0x80000001  # ERR_UNSUP
    r.option(5)
    assert r.option_reply()[1] == 0x80000002  # STARTTLS: ERR_POLICY
    r.option(3, b"x")
    assert r.option_reply()[1] == 0x80000003  # LIST with data: ERR_INVALID
    r.option(7, struct.pack(">I", 4) + b"nope" + struct.pack(">H", 0))
    assert r.option_reply()[1] == 0x80000006  # GO unknown export: ERR_UNKNOWN
    r.option(10, b"\x00\x00")                  # SET_META_CONTEXT before structured
    assert r.option_reply()[1] == 0x80000003
    r.option(6, os.urandom(100 * 1024))      # INFO with 100 KiB: drained, ERR_TOO_BIG
    assert r.option_reply()[1] == 0x80000009
    r.option(3)
    names = []
    while True:
        _, rtype, data = r.option_reply()
        if rtype == 1:
            break
        n = struct.unpack(">I", data[:4])[0]
        names.append(data[4:4 + n])
    assert names == [b"ftl0", b""], names
    size = r.go(b"")
    assert size and size > 0
    r.request(0, 0, 4096)
    assert r.simple_reply(4096)[0] == 0
    r.close()
    assert d.stop() == 0


def test_oversize_and_unknown_requests(env):
    d = env.start_ftld(size="1G")
    r = Raw(d.port)
    r.send_flags()
    size = r.go()
    # Oversize write: refused, its payload drained, connection lives on.
    r.request(1, 0, 33 * MiB, cookie=7, payload=bytes(33 * MiB))
    assert r.simple_reply() == (EINVAL, 7, b"")
    # Unknown command.
    r.request(99, 0, 4096, cookie=8)
    assert r.simple_reply() == (EINVAL, 8, b"")
    # Write past the end: ENOSPC, payload consumed.
    r.request(1, size, 4096, cookie=9, payload=b"p" * 4096)
    assert r.simple_reply() == (ENOSPC, 9, b"")
    # FLUSH with a length is invalid.
    r.request(3, 0, 512, cookie=10)
    assert r.simple_reply() == (EINVAL, 10, b"")
    # BLOCK_STATUS without a meta context.
    r.request(7, 0, 4096, cookie=11)
    assert r.simple_reply() == (EINVAL, 11, b"")
    # Still in sync: a pipelined write + read.
    r.request(1, 8192, 4096, cookie=12, payload=b"q" * 4096)
    r.request(3, 0, 0, cookie=13)
    got = {}
    for _ in range(2):
        err, cookie, _ = r.simple_reply()
        got[cookie] = err
    assert got == {12: 0, 13: 0}, got
    r.request(0, 8192, 4096, cookie=14)
    assert r.simple_reply(4096) == (0, 14, b"q" * 4096)
    wait_log(d, "WRITE of 34603008 bytes exceeds the maximum 33554432")
    # Bad request magic: a framing violation closes this connection only.
    r.s.sendall(b"\xde\xad\xbe\xef" + bytes(24))
    assert closed_by_server(r.s)
    wait_log(d, "request without the NBD request magic; closing")
    r.close()
    still_serves(d)
    assert d.stop() == 0


def test_nbd_tester_client_oversize_does_not_hang(env):
    # nbd-tester-client -o: READs of 1 MiB, 1 MiB + 14 and 2 MiB + 28 bytes
    # over NBD_OPT_EXPORT_NAME with simple replies, reading `length` data
    # bytes after every reply header, errors included. A client that agreed
    # to no block sizes is served at any length, so nothing hangs; before,
    # the EINVAL for the unaligned lengths came without data and the client
    # waited forever.
    import nbd
    d = env.start_ftld(size="1G")
    h = nbd.NBD()
    h.connect_uri(d.uri())
    data = os.urandom(3 * MiB)
    h.pwrite(data, 0)
    h.shutdown()
    r = Raw(d.port)
    r.s.settimeout(20)
    r.send_flags()
    assert r.export_name() > 3 * MiB
    for i, n in enumerate([MiB, MiB + 14, 2 * MiB + 28]):
        r.request(0, i, n, cookie=i)
        err, cookie, got = r.simple_reply(n)
        assert (err, cookie) == (0, i), (n, err, cookie)
        assert got == data[i:i + n], n
    r.close()
    still_serves(d)
    assert d.stop() == 0


def test_unread_replies_are_bounded(env):
    # A client that pipelines big READs and never reads the replies must not
    # make the daemon hold them all: a connection holds at most 128 MiB of
    # requests in flight plus replies not yet sent (and 256 requests), then
    # stops reading requests until the client drains its replies.
    import nbd
    d = env.start_ftld(size="1G")
    pid = d.proc.pid
    chunk, n = 32 * MiB, 24  # 768 MiB of replies for 672 bytes of requests
    h = nbd.NBD()
    h.connect_uri(d.uri())
    for i in range(n):
        h.pwrite(struct.pack(">Q", i) * 512, i * chunk + 3 * MiB)
    h.shutdown()
    base = rss_kib(pid)
    r = Raw(d.port)
    r.send_flags()
    r.go()
    for i in range(n):
        r.request(0, i * chunk, chunk, cookie=i)
    grown_mib = (peak_rss_kib(pid) - base) / 1024
    assert grown_mib < 128 + 32 + 48, f"RSS grew by {grown_mib:.0f} MiB"
    # Every reply arrives, right, once the client reads.
    r.s.settimeout(60)
    seen = set()
    for _ in range(n):
        magic, error, cookie = struct.unpack(">IIQ", recv_exact(r.s, 16))
        assert (magic, error) == (SIMPLE_REPLY_MAGIC, 0), (hex(magic), error)
        data = recv_big(r.s, chunk)
        assert data[3 * MiB:3 * MiB + 4096] == struct.pack(">Q", cookie) * 512, cookie
        assert data[:4096] == bytes(4096), cookie
        seen.add(cookie)
    assert seen == set(range(n)), seen
    # Many small READs: the count is bounded too (each reply holds a page).
    count = 20000
    base = rss_kib(pid)
    sender = threading.Thread(target=lambda: r.s.sendall(b"".join(
        struct.pack(">IHHQQI", REQUEST_MAGIC, 0, 0, k, (k % 1000) * 4096, 4096)
        for k in range(count))))
    sender.start()
    grown_mib = (peak_rss_kib(pid) - base) / 1024
    assert grown_mib < 32, f"RSS grew by {grown_mib:.0f} MiB for small replies"
    for _ in range(count):
        magic, error, cookie = struct.unpack(">IIQ", recv_exact(r.s, 16))
        assert error == 0, error
        recv_exact(r.s, 4096)
    sender.join(60)
    r.close()
    still_serves(d)
    assert d.stop() == 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_out_of_descriptors_backs_off_quietly(env):
    # With its descriptors used up, the daemon's accept() fails while
    # connections wait in the backlog. It must neither spin nor log a line
    # per failed accept, and it must serve again once descriptors free up.
    need_tool("prlimit")
    d = env.start_ftld(size="1G")
    pid = d.proc.pid
    limit = len(os.listdir(f"/proc/{pid}/fd")) + 6
    env.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:{limit}"])
    clients = [socket.create_connection(("127.0.0.1", d.port), timeout=10) for _ in range(30)]
    wait_log(d, "Too many open files")
    cpu0 = cpu_seconds(pid)
    time.sleep(3)
    cpu = cpu_seconds(pid) - cpu0
    assert cpu < 0.3, f"{cpu:.2f} s of CPU in 3 s while out of descriptors"
    for c in clients:
        c.close()
    still_serves(d)  # bounded: the back-off never waits more than a second
    time.sleep(1.2)
    still_serves(d)  # a second after the last failure: the episode ends
    lines = [line for line in d.log().splitlines() if "accept" in line.lower()]
    assert len(lines) == 2, "\n".join(lines[:20]) + f"\n... {len(lines)} lines"
    assert "accept failed: Too many open files" in lines[0], lines
    assert "accepting again after" in lines[1], lines
    assert d.stop() == 0


def test_client_vanishes_mid_payload(env):
    d = env.start_ftld(size="1G")
    r = Raw(d.port)
    r.send_flags()
    r.go()
    r.request(1, 0, MiB, cookie=1, payload=os.urandom(100 * 1024))
    r.close()
    wait_log(d, "vanished inside a WRITE payload (102400 of 1048576 bytes)")
    # Half a request header.
    r = Raw(d.port)
    r.send_flags()
    r.go()
    r.s.sendall(struct.pack(">IHH", REQUEST_MAGIC, 0, 0))
    r.close()
    wait_log(d, "vanished inside a request header (8 of 28 bytes)")
    # Requests in flight when the client disappears (replies undeliverable).
    r = Raw(d.port)
    r.send_flags()
    r.go()
    for i in range(64):
        r.request(1, i * 65536, 65536, cookie=i, payload=os.urandom(65536))
    r.s.shutdown(socket.SHUT_RDWR)
    r.close()
    still_serves(d)
    st = d.ctl("stats")
    assert st["nbd"]["protocol_errors"] >= 2, st["nbd"]
    assert d.stop() == 0


def test_64_concurrent_clients(env):
    import nbd
    d = env.start_ftld(size="1G")
    errors = []
    barrier = threading.Barrier(64)

    def client(i):
        try:
            h = nbd.NBD()
            h.connect_uri(d.uri())
            barrier.wait(60)
            base = i * 2 * MiB
            data = os.urandom(256 * 1024)
            for k in range(8):
                h.pwrite(data, base + k * 256 * 1024)
            h.flush()
            for k in range(8):
                assert h.pread(256 * 1024, base + k * 256 * 1024) == data
            if i == 0:
                st = d.ctl("status")
                assert len(st["clients"]) == 64, len(st["clients"])
            barrier.wait(60)
            h.shutdown()
        except Exception as e:  # reported below
            errors.append(f"client {i}: {e!r}")
            barrier.abort()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:5]
    st = d.ctl("stats")
    assert st["nbd"]["connections_total"] >= 64
    still_serves(d)
    assert d.stop() == 0


main(globals())

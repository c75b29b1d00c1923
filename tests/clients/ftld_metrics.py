"""Tier 3: `ftld --metrics` scraped by real clients (issue 24).

- curl scrapes /metrics while fio writes; Debian's python3-prometheus-client
  parses every scrape (text_string_to_metric_families): counters only grow,
  they move during the run, and afterwards the NBD bytes and request counts
  equal what fio reports it wrote, the volume's and pool's byte counters
  agree, histograms are consistent (cumulative buckets, +Inf = _count =
  requests), segments by state add up to ftlctl's total.
- An error reply is counted under the errno the client received; a snapshot
  shows up with its exclusive space; `ftlctl gc` moves the cleaner counters;
  an activated snapshot export gets its own series.
- The HTTP responder's limits: 404, 405 (with Allow), 400, 505, HEAD, a
  query string, 431 for an oversized head, the idle timeout, 503 beyond the
  concurrent-client cap, and serving again afterwards.
- Off by default; bad --metrics values and a port in use are refused.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import main, need_tool  # noqa: E402

import nbd  # noqa: E402  (Debian's python3-libnbd)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

MiB = 1 << 20


def metrics_port(d):
    m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", d.log())
    assert m, d.log()
    return int(m.group(1))


def scrape(d):
    """curl GET /metrics -> {(name, ((label, value), ...)): value}; checks the headers."""
    port = metrics_port(d)
    r = subprocess.run(["curl", "-sS", "--max-time", "20", "-D", "-",
                        f"http://127.0.0.1:{port}/metrics"],
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    head, _, body = r.stdout.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200 OK"), head
    assert "Content-Type: text/plain; version=0.0.4; charset=utf-8" in head, head
    out = {}
    families = {}
    for fam in text_string_to_metric_families(body):
        families[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate sample {key}"
            out[key] = s.value
    return out, families


def total(m, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in m.items()
               if n == name and all(dict(ls).get(k) == v2 for k, v2 in labels.items()))


def series(m, name):
    return {ls: v for (n, ls), v in m.items() if n == name}


def check_histograms(m, name):
    """Cumulative buckets, +Inf == _count, for every series of a histogram."""
    buckets = {}
    for (n, ls), v in m.items():
        if n == f"{name}_bucket":
            d = dict(ls)
            le = d.pop("le")
            buckets.setdefault(tuple(sorted(d.items())), []).append((float(le), v))
    assert buckets, f"no {name} series"
    for ls, bs in buckets.items():
        bs.sort()
        values = [v for _, v in bs]
        assert values == sorted(values), (ls, bs)
        assert bs[-1][0] == float("inf"), bs
        assert m[(f"{name}_count", ls)] == bs[-1][1], ls
        assert m[(f"{name}_sum", ls)] >= 0, ls
    return buckets


def test_scrape_while_fio(env):
    need_tool("fio", "curl")
    d = env.start_ftld(size="512M", args=["--metrics", "127.0.0.1:0"])
    m0, families = scrape(d)
    assert families["ftld_nbd_request_duration_seconds"] == "histogram"
    assert families["ftld_pool_user_written_bytes"] == "counter"  # parser drops _total
    assert families["ftld_pool_free_bytes"] == "gauge"
    for name in ("ftld_pool_segments", "ftld_pool_write_amplification", "ftld_checkpoint_age_seconds",
                 "ftld_snapshots", "ftld_cleaner_segments_cleaned", "ftld_nbd_connections",
                 "ftld_volume_size_bytes", "ftld_start_time_seconds", "ftld_build_info"):
        assert name in families, name
    io_bytes = 192 * MiB
    fio = subprocess.Popen(["fio", "--name=m", "--ioengine=nbd", f"--uri={d.uri()}",
                            "--rw=randwrite", "--bs=4k", "--iodepth=32", "--size=96M",
                            f"--io_size={io_bytes}", "--output-format=json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=env.tmp)
    env.procs.append(fio)
    during = []
    deadline = time.time() + 600
    while fio.poll() is None and time.time() < deadline:
        m, _ = scrape(d)
        if fio.poll() is None:
            during.append(m)
        time.sleep(0.2)
    out, err = fio.communicate(timeout=600)
    assert fio.returncode == 0, err
    job = json.loads(out[out.index("{"):])["jobs"][0]
    assert job["error"] == 0 and job["write"]["io_bytes"] == io_bytes, job["write"]
    m1, _ = scrape(d)

    # Counters only grow, and moved while fio ran.
    assert len(during) >= 2, f"only {len(during)} scrapes while fio ran"
    seq = [m0] + during + [m1]
    for name in ("ftld_nbd_written_bytes_total", "ftld_nbd_requests_total",
                 "ftld_pool_media_written_bytes_total", "ftld_volume_written_bytes_total"):
        values = [total(s, name) for s in seq]
        assert values == sorted(values), (name, values)
    moving = [total(s, "ftld_nbd_written_bytes_total") for s in during]
    assert any(0 < v < io_bytes for v in moving), moving
    assert max(total(s, "ftld_nbd_connections") for s in during) >= 1

    # Afterwards: exactly what fio wrote, on every layer that counts it.
    assert total(m1, "ftld_nbd_written_bytes_total") == io_bytes
    assert total(m1, "ftld_nbd_requests_total", op="write") == io_bytes // 4096
    assert total(m1, "ftld_volume_written_bytes_total", volume="ftl0") == io_bytes
    user = total(m1, "ftld_pool_user_written_bytes_total")
    media = total(m1, "ftld_pool_media_written_bytes_total")
    assert user == io_bytes, (user, io_bytes)
    assert media > user
    wa = total(m1, "ftld_pool_write_amplification")
    assert abs(wa - media / user) < 1e-3 * wa + 0.02, (wa, media, user)
    assert total(m1, "ftld_nbd_request_errors_total") == 0
    h = check_histograms(m1, "ftld_nbd_request_duration_seconds")
    writes = [ls for ls in h if dict(ls).get("op") == "write"]
    assert writes and sum(m1[("ftld_nbd_request_duration_seconds_count", ls)]
                          for ls in writes) == io_bytes // 4096
    check_histograms(m1, "ftld_volume_request_duration_seconds")
    assert m1[("ftld_volume_request_duration_seconds_count",
               (("op", "write"), ("volume", "ftl0")))] == io_bytes // 4096
    # Segments by state add up to the pool's total.
    stats = d.ctl("stats")
    assert total(m1, "ftld_pool_segments") == stats["pool"]["segments_total"], stats["pool"]
    assert 0 < total(m1, "ftld_pool_free_bytes") <= total(m1, "ftld_pool_media_size_bytes")
    assert 0 <= total(m1, "ftld_checkpoint_age_seconds") < 3600
    assert total(m1, "ftld_cleaner_state") == 1
    assert d.stop() == 0


def test_errors_snapshots_cleaner(env):
    need_tool("curl")
    d = env.start_ftld(size="512M", args=["--metrics", "0"])  # PORT alone: 127.0.0.1
    h = nbd.NBD()
    h.connect_uri(d.uri())
    size = h.get_size()
    h.pwrite(os.urandom(4 * MiB), 0)
    h.flush()
    # An error the client sees is counted under the errno it got.
    h.set_strict_mode(0)  # let the request reach the server
    try:
        h.pwrite(bytes(4096), size)
        raise AssertionError("a write past the end succeeded")
    except nbd.Error as e:
        got = e.errno
    h.shutdown()
    m, _ = scrape(d)
    errs = series(m, "ftld_nbd_request_errors_total")
    assert list(errs.values()) == [1], errs
    assert dict(next(iter(errs)))["errno"] == got, (errs, got)
    assert total(m, "ftld_nbd_requests_total", op="write") == 2
    assert total(m, "ftld_nbd_export_connections_total", export="") == 1

    # A snapshot, then 1 MiB of its blocks overwritten: it alone holds them.
    d.ctl("snapshot", "create", "s1")
    h = nbd.NBD()
    h.connect_uri(d.uri())
    h.pwrite(os.urandom(MiB), 0)
    h.flush()
    h.shutdown()
    m, _ = scrape(d)
    assert total(m, "ftld_snapshots") == 1
    excl = series(m, "ftld_snapshot_exclusive_bytes")
    assert excl == {(("snapshot", "s1"), ("volume", "ftl0")): MiB}, excl
    # An activated snapshot is another export (and volume) with its own series.
    d.ctl("snapshot", "activate", "s1")
    h = nbd.NBD()
    h.set_export_name("ftl0-s1")
    h.connect_uri(d.uri("ftl0-s1"))
    assert len(h.pread(65536, 0)) == 65536
    h.shutdown()
    m, _ = scrape(d)
    assert total(m, "ftld_nbd_requests_total", export="ftl0-s1", op="read") == 1
    assert total(m, "ftld_volume_size_bytes", volume="ftl0-s1") == size

    # The cleaner: overwrite the rest a few times, then `ftlctl gc`.
    h = nbd.NBD()
    h.connect_uri(d.uri())
    for rnd in range(3):
        for off in range(0, 96 * MiB, 4 * MiB):
            h.pwrite(os.urandom(4 * MiB), off)
    h.flush()
    h.shutdown()
    before, _ = scrape(d)
    r = d.ctl("gc")
    after, _ = scrape(d)
    cleaned = total(after, "ftld_cleaner_segments_cleaned_total") - \
        total(before, "ftld_cleaner_segments_cleaned_total")
    assert cleaned >= r["segments_cleaned"] > 0, (cleaned, r)
    # (user writes after gc may only take segments; nothing writes here)
    assert total(after, "ftld_pool_segments", state="free") >= r["segments_free"] > 0
    assert total(after, "ftld_cleaner_relocated_bytes_total") >= \
        total(before, "ftld_cleaner_relocated_bytes_total")
    assert d.stop() == 0


def http(port, data, read_timeout=30):
    """Sends raw bytes; returns everything the server sent before closing."""
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
    finally:
        s.close()


def test_http_limits(env):
    d = env.start_ftld(size="256M", args=["--metrics", "127.0.0.1:0"])
    port = metrics_port(d)
    r = http(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 404 "), r
    r = http(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 405 ") and b"Allow: GET, HEAD\r\n" in r, r
    r = http(port, b"GARBAGE\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 400 "), r
    r = http(port, b"GET /metrics HTTP/2.0\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 505 "), r
    r = http(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = r.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and body == b"", r
    assert int(re.search(rb"Content-Length: (\d+)", head).group(1)) > 1000, head
    r = http(port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 200 ") and b"ftld_build_info" in r, r[:200]
    # An oversized head: 431, and the daemon keeps serving.
    r = http(port, b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 9000 + b"\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 431 "), r[:100]
    # A client that sends half a request is closed at the timeout (10 s).
    t0 = time.time()
    r = http(port, b"GET /metr", read_timeout=60)
    waited = time.time() - t0
    assert r == b"" and 5 < waited < 55, (r, waited)
    # More than 16 at once: the 17th gets 503 at once; afterwards all is well.
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(16)]
    time.sleep(0.3)  # all accepted
    r = http(port, b"GET /metrics HTTP/1.1\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 503 "), r[:100]
    for s in idle:
        s.close()
    deadline = time.time() + 30
    while True:
        r = http(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        if r.startswith(b"HTTP/1.1 200 ") or time.time() > deadline:
            break
        time.sleep(0.1)
    assert r.startswith(b"HTTP/1.1 200 "), r[:100]
    # NBD unaffected throughout.
    h = nbd.NBD()
    h.connect_uri(d.uri())
    h.pwrite(b"x" * 4096, 0)
    h.shutdown()
    assert d.stop() == 0


def test_off_by_default_and_refusals(env):
    d = env.start_ftld(size="256M")
    assert "metrics on" not in d.log()
    assert d.stop() == 0
    for bad in ("127.0.0.1:99999", "::1:80", "[::1]", "host:", "abc"):
        r = subprocess.run([env.ftld, "--metrics", bad, env.path("x.img")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--metrics" in r.stderr, (bad, r.stderr)
    # A port already taken: a clear error naming it, exit 1, the pool closed.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    taken = s.getsockname()[1]
    p = env.ftld_process(size="256M", args=["--metrics", f"127.0.0.1:{taken}"])
    p.start(expect_ready=False)
    rc = p.wait(60)
    s.close()
    assert rc == 1 and f"metrics 127.0.0.1:{taken}: Address already in use" in p.log(), p.log()
    r = env.run([env.ftl_tool, "check", p.backing], check=False) if env.ftl_tool else None
    assert r is None or r.stdout.strip().endswith("status: clean"), r.stdout


main(globals())

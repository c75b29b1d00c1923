#!/usr/bin/python3
"""Clients tier (issue 23): key-value datasets over the Redis protocol,
through the real ftld and real Redis clients: redis-cli (Debian's
redis-tools) in scripted sessions for each command, python3-redis for
pipelining, MULTI/EXEC and many concurrent clients; databases by number and
by name, snapshots served read-only (-READONLY); the store shared with the
control socket (ftlctl kv); kill -9 during SET loops with --kv-fsync always
(every acknowledged key present with its last acknowledged value, or the
value of the one SET in flight), everysec (writes older than two seconds
survive kill -9); kill -9 during MSETs, MULTI/EXEC and INCRs with either
setting (every batch whole after the restart, a counter never above the
INCRs sent; with always nothing acknowledged lost); bad input of every kind, each followed by a check that a
fresh client is served. Own ctest label: `resp`."""

import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import Skip, main  # noqa: E402

KILL_ROUNDS = int(os.environ.get("FTLD_RESP_KILL_ROUNDS", "3"))
MAX_KEY, MAX_VALUE = 1024, 64 << 10
ERROR = re.compile(r"^(ERR|READONLY|NOPROTO|EXECABORT|OOM|WRONGTYPE) ")


# --- helpers ----------------------------------------------------------------

def need_redis_tools():
    if shutil.which("redis-cli") is None:
        raise Skip("redis-cli not installed (Debian: redis-tools)")


def redis_module():
    try:
        import redis  # Debian's python3-redis, importable from /usr/bin/python3
    except ImportError:
        raise Skip("python3-redis not installed")
    return redis


def start(env, args=(), backing=None, size="1G"):
    """ftld with the RESP listener on a free port; returns it with .resp_port."""
    need_redis_tools()
    d = env.ftld_process(backing=backing, args=["--kv-port", "0", *args], size=size).start()
    m = None
    deadline = time.time() + 30
    while time.time() < deadline:
        m = re.search(r"RESP listening on 127\.0\.0\.1:(\d+)", d.log())
        if m:
            break
        time.sleep(0.05)
    assert m, f"no RESP listener in the log:\n{d.log()}"
    d.resp_port = int(m.group(1))
    return d


def restart(d):
    """Starts the same daemon again (same backing, flags); a new port."""
    d.start()
    m = None
    deadline = time.time() + 30
    while time.time() < deadline:
        found = re.findall(r"RESP listening on 127\.0\.0\.1:(\d+)", d.log())
        if found:
            m = found[-1]
            break
        time.sleep(0.05)
    assert m, d.log()
    d.resp_port = int(m)
    return d


def cli(d, *args, db=None, stdin=None):
    """redis-cli -p PORT [-n DB] ARGS...; returns stdout as a list of lines."""
    cmd = ["redis-cli", "-p", str(d.resp_port)]
    if db is not None:
        cmd += ["-n", str(db)]
    r = subprocess.run(cmd + [str(a) for a in args], input=stdin, capture_output=True,
                       text=True, timeout=120)
    out = r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout
    lines = out.split("\n") if r.stdout else []
    # redis-cli prints an empty line after each error reply: drop it.
    kept = []
    for i, line in enumerate(lines):
        if line == "" and i > 0 and ERROR.match(lines[i - 1]):
            continue
        kept.append(line)
    return kept


def one(d, *args, **kw):
    out = cli(d, *args, **kw)
    assert len(out) == 1, f"{args}: expected one line, got {out}"
    return out[0]


def client(d, redis, **kw):
    return redis.Redis(host="127.0.0.1", port=d.resp_port, socket_timeout=60, **kw)


class Raw:
    """A raw RESP connection: send bytes, read what comes back until close."""

    def __init__(self, d, timeout=10):
        self.s = socket.create_connection(("127.0.0.1", d.resp_port), timeout=timeout)

    def send(self, data):
        try:
            self.s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed on us; its reply is still readable

    def read_until_closed(self):
        out = b""
        while True:
            try:
                chunk = self.s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        self.s.close()
        return out

    def read_line(self):
        out = b""
        while not out.endswith(b"\r\n"):
            chunk = self.s.recv(1)
            if not chunk:
                break
            out += chunk
        return out


def served(d):
    """A fresh client is served (the daemon survived what came before)."""
    assert one(d, "PING") == "PONG", d.log()[-2000:]
    assert one(d, "SET", "alive", "yes") == "OK"
    assert one(d, "GET", "alive") == "yes"


# --- redis-cli, one command at a time ------------------------------------------

def test_redis_cli_strings(env):
    d = start(env)
    assert one(d, "PING") == "PONG"
    assert one(d, "PING", "hi") == "hi"
    assert one(d, "ECHO", "hello world") == "hello world"
    assert one(d, "GET", "k") == ""                     # nil
    assert one(d, "SET", "k", "v1") == "OK"
    assert one(d, "GET", "k") == "v1"
    assert one(d, "SET", "k", "v2", "NX") == ""         # exists: not set
    assert one(d, "GET", "k") == "v1"
    assert one(d, "SET", "n", "v", "XX") == ""          # missing: not set
    assert one(d, "EXISTS", "n") == "0"
    assert one(d, "SET", "k", "v3", "XX", "GET") == "v1"
    assert one(d, "GET", "k") == "v3"
    assert one(d, "SET", "fresh", "x", "NX", "GET") == ""
    assert one(d, "GET", "fresh") == "x"
    assert one(d, "SET", "k", "v", "NX", "XX") == "ERR syntax error"
    assert one(d, "SET", "k", "v", "EX", "10").startswith("ERR ftld does not support key expiry")
    assert one(d, "SETNX", "k", "zzz") == "0"
    assert one(d, "SETNX", "k2", "zzz") == "1"
    assert one(d, "MSET", "a", "1", "b", "2", "c", "3") == "OK"
    assert cli(d, "MGET", "a", "b", "nope", "c") == ["1", "2", "", "3"]
    assert one(d, "MSET", "a", "1", "b") == "ERR wrong number of arguments for 'mset' command"
    assert one(d, "MSETNX", "a", "9", "zz", "9") == "0"
    assert one(d, "GET", "zz") == ""
    assert one(d, "EXISTS", "a", "b", "nope", "a") == "3"
    assert one(d, "DEL", "a", "b", "nope", "a") == "2"
    assert one(d, "EXISTS", "a", "b") == "0"
    assert one(d, "INCR", "ctr") == "1"
    assert one(d, "INCRBY", "ctr", "41") == "42"
    assert one(d, "DECR", "ctr") == "41"
    assert one(d, "DECRBY", "ctr", "50") == "-9"
    assert one(d, "GET", "ctr") == "-9"
    assert one(d, "INCR", "k") == "ERR value is not an integer or out of range"
    assert one(d, "INCRBY", "ctr", "x") == "ERR value is not an integer or out of range"
    assert one(d, "SET", "big", "9223372036854775807") == "OK"
    assert one(d, "INCR", "big") == "ERR increment or decrement would overflow"
    assert one(d, "APPEND", "s", "Hello") == "5"
    assert one(d, "APPEND", "s", " World") == "11"
    assert one(d, "GET", "s") == "Hello World"
    assert one(d, "STRLEN", "s") == "11"
    assert one(d, "STRLEN", "nope") == "0"
    assert one(d, "GETDEL", "s") == "Hello World"
    assert one(d, "EXISTS", "s") == "0"
    assert one(d, "TYPE", "k") == "string"
    assert one(d, "TYPE", "nope") == "none"
    assert one(d, "TTL", "k") == "-1"
    assert one(d, "TTL", "nope") == "-2"
    assert one(d, "QUIT") == "OK"
    # Errors in Redis's form.
    assert one(d, "NOSUCH", "x", "y") == \
        "ERR unknown command 'NOSUCH', with args beginning with: 'x' 'y'"
    assert one(d, "GET") == "ERR wrong number of arguments for 'get' command"
    assert one(d, "GET", "a", "b") == "ERR wrong number of arguments for 'get' command"
    assert one(d, "SET", "", "v").startswith("ERR empty keys")
    assert one(d, "SET", "K" * (MAX_KEY + 1), "v").startswith("ERR key of 1025 bytes")
    big = "v" * (MAX_VALUE + 1)
    assert one(d, "SET", "k", big).startswith("ERR value of 65537 bytes")
    assert one(d, "SET", "k", "v" * MAX_VALUE) == "OK"
    assert one(d, "STRLEN", "k") == str(MAX_VALUE)
    assert one(d, "APPEND", "k", "x").startswith("ERR string exceeds maximum allowed size")
    assert one(d, "GET", "K" * (MAX_KEY + 1)) == ""     # cannot exist: nil
    served(d)
    assert d.stop() == 0


def test_redis_cli_keyspace(env):
    d = start(env)
    keys = [f"user:{i:03d}" for i in range(150)] + [f"item:{i}" for i in range(20)]
    for i in range(0, len(keys), 50):
        pairs = []
        for k in keys[i:i + 50]:
            pairs += [k, "x"]
        assert one(d, "MSET", *pairs) == "OK"
    assert one(d, "DBSIZE") == str(len(keys))
    got = cli(d, "KEYS", "user:1*")
    assert got == sorted(k for k in keys if k.startswith("user:1")), got
    assert cli(d, "KEYS", "item:[12]") == ["item:1", "item:2"]
    assert cli(d, "KEYS", "*:?9") == sorted(k for k in keys if re.fullmatch(r".*:.9", k))
    # SCAN: an ordered cursor; every key exactly once.
    seen, cursor, rounds = [], "0", 0
    while True:
        out = cli(d, "SCAN", cursor, "COUNT", "7")
        cursor, batch = out[0], [k for k in out[1:] if k]
        assert len(batch) <= 7
        seen += batch
        rounds += 1
        if cursor == "0":
            break
    assert seen == sorted(keys), (len(seen), len(keys))
    assert rounds >= len(keys) // 7
    # MATCH reads only the prefix's range; redis-cli --scan drives the cursor.
    r = subprocess.run(["redis-cli", "-p", str(d.resp_port), "--scan", "--pattern", "item:*"],
                       capture_output=True, text=True, timeout=60)
    assert sorted(r.stdout.split()) == sorted(k for k in keys if k.startswith("item:")), r.stdout
    assert one(d, "SCAN", "12345678") == "ERR invalid cursor"
    out = cli(d, "SCAN", "0", "COUNT", "1000", "TYPE", "hash")   # only strings here
    assert out[0] == "0" and not any(out[1:]), out
    assert one(d, "FLUSHDB") == "OK"
    assert one(d, "DBSIZE") == "0"
    assert not any(cli(d, "KEYS", "*"))
    served(d)
    assert d.stop() == 0


def test_redis_cli_server_commands(env):
    d = start(env)
    assert one(d, "SET", "a", "1") == "OK"
    info = "\n".join(cli(d, "INFO"))
    for field in ("redis_version:", "tcp_port:%d" % d.resp_port, "connected_clients:",
                  "ftld_kv_fsync:always", "total_commands_processed:", "# Keyspace",
                  "db0:keys=1,expires=0,avg_ttl=0", "# Ipl", "page_reads:", "log_sector_writes:",
                  "buffer_hits:", "media_write_bytes:", "unit_merges:", "bombs:"):
        assert field in info, f"{field} not in INFO:\n{info}"
    ipl = "\n".join(cli(d, "INFO", "ipl"))
    assert "db:db0" in ipl and "geometry:page=4096" in ipl and "# Server" not in ipl, ipl
    flushes = int(re.search(r"\nflushes:(\d+)", ipl).group(1))
    assert flushes >= 1, ipl      # the SET was synced (--kv-fsync always)
    assert int(one(d, "COMMAND", "COUNT")) >= 30
    info_get = cli(d, "COMMAND", "INFO", "get")
    assert info_get[0] == "get" and info_get[1] == "2", info_get
    assert cli(d, "CONFIG", "GET", "appendfsync") == ["appendfsync", "always"]
    assert cli(d, "CONFIG", "GET", "save") == ["save", ""]
    assert one(d, "CONFIG", "SET", "save", "").startswith("ERR CONFIG SET is not supported")
    assert one(d, "CLIENT", "SETNAME", "tester") == "OK"
    hello = cli(d, "HELLO", "2")
    assert hello[:2] == ["server", "ftld"], hello
    assert one(d, "HELLO", "4").startswith("NOPROTO")   # RESP3: ftld_resp3.py
    assert one(d, "WATCH", "a").startswith("ERR WATCH is not supported")
    # A scripted session over one connection: MULTI/EXEC and DISCARD.
    out = cli(d, stdin="MULTI\nSET t 1\nINCR t\nINCRBY t 5\nGET t\nEXEC\nGET t\n")
    assert out == ["OK", "QUEUED", "QUEUED", "QUEUED", "QUEUED", "OK", "2", "7", "7", "7"], out
    out = cli(d, stdin="MULTI\nSET t 100\nDISCARD\nGET t\n")
    assert out == ["OK", "QUEUED", "OK", "7"], out
    out = cli(d, stdin="MULTI\nSET t 100\nNOSUCH\nEXEC\nGET t\n")
    assert out[-2:] == ["EXECABORT Transaction discarded because of previous errors.", "7"], out
    out = cli(d, stdin="MULTI\nKEYS *\nEXEC\n")
    assert out[1].startswith("ERR 'keys' is not allowed inside MULTI"), out
    assert one(d, "EXEC") == "ERR EXEC without MULTI"
    served(d)
    assert d.stop() == 0


def test_databases_and_snapshots(env):
    d = start(env)
    # Numbered databases are the datasets db0.. db15, made by their first write.
    assert one(d, "SET", "k", "zero") == "OK"
    assert one(d, "GET", "k", db=3) == ""          # db3 does not exist yet: empty
    assert one(d, "DBSIZE", db=3) == "0"
    assert one(d, "SET", "k", "three", db=3) == "OK"
    assert one(d, "GET", "k", db=3) == "three"
    assert one(d, "GET", "k") == "zero"
    assert one(d, "SELECT", "16") == "ERR DB index is out of range"
    assert one(d, "SELECT", "-1") == "ERR DB index is out of range"
    names = [x["name"] for x in d.ctl("kv", "list")["datasets"]]
    assert "db0" in names and "db3" in names, names
    # Named datasets (ftlctl kv create) by name; the store is the control
    # socket's too: what one writes the other reads.
    d.ctl("kv", "create", "users")
    out = cli(d, stdin="SELECT users\nSET alice admin\nGET alice\n")
    assert out == ["OK", "OK", "admin"], out
    assert subprocess.run([env.ftlctl, "--control", d.control, "kv", "get", "users", "alice"],
                          capture_output=True, text=True).stdout == "admin"
    d.ctl("kv", "put", "users", "bob", "viewer")
    assert cli(d, stdin="SELECT users\nGET bob\n") == ["OK", "viewer"]
    assert one(d, "SELECT", "nosuch").startswith("ERR cannot select 'nosuch'")
    assert one(d, "SELECT", "ftl0").startswith("ERR cannot select 'ftl0'")  # a block volume
    # A snapshot is served read-only, as its own database.
    d.ctl("snapshot", "create", "users@monday")
    assert cli(d, stdin="SELECT users\nSET alice user\nGET alice\n") == ["OK", "OK", "user"]
    out = cli(d, stdin="SELECT users@monday\nGET alice\nDBSIZE\nSET alice x\nINCR n\n"
                       "MULTI\nSET a 1\nGET alice\nEXEC\nGET alice\n")
    assert out[:3] == ["OK", "admin", "2"], out
    assert out[3].startswith("READONLY database 'users@monday' is a snapshot"), out
    assert out[4].startswith("READONLY"), out
    assert out[-3].startswith("READONLY") and out[-2] == "admin" and out[-1] == "admin", out
    assert one(d, "SELECT", "users@tuesday").startswith("ERR cannot select")
    # Snapshots of numbered databases: NUMBER@SNAP.
    d.ctl("snapshot", "create", "db3@s")
    assert one(d, "SET", "k", "changed", db=3) == "OK"
    assert cli(d, stdin="SELECT 3@s\nGET k\n") == ["OK", "three"]
    served(d)
    # Over a Unix socket too, and everything survives a clean restart.
    assert d.stop() == 0
    sock = env.path("resp.sock")
    d.args += ["--kv-unix", sock]
    restart(d)
    r = subprocess.run(["redis-cli", "-s", sock, "-n", "3", "GET", "k"], capture_output=True,
                       text=True, timeout=60)
    assert r.stdout.strip() == "changed", r
    assert cli(d, stdin="SELECT users\nGET alice\nGET bob\n") == ["OK", "user", "viewer"]
    assert d.stop() == 0
    assert not os.path.exists(sock)


# --- python3-redis: pipelining, transactions, concurrency ------------------------

def test_pipelining_and_multi_exec(env):
    redis = redis_module()
    d = start(env)
    r = client(d, redis)
    p = r.pipeline(transaction=False)
    for i in range(2000):
        p.set(f"p:{i}", f"value-{i}")
    for i in range(2000):
        p.get(f"p:{i}")
    p.incr("pc")
    p.mget("p:1", "p:1999", "nope")
    res = p.execute()
    assert res[:2000] == [True] * 2000
    assert res[2000:4000] == [f"value-{i}".encode() for i in range(2000)]
    assert res[4000] == 1 and res[4001] == [b"value-1", b"value-1999", None]
    # A run of GETs is answered together (docs/decisions.md, "A pipelined
    # batch's GETs are answered together"): present, absent, empty and
    # oversize keys, the name in any case, wrong arities and writes between
    # them, each reply in its place.
    p = r.pipeline(transaction=False)
    p.set("g:1", "one").get("g:1").get("g:none").execute_command("GeT", "g:1").get("")
    p.get("k" * 1025).execute_command("GET").execute_command("GET", "g:1", "x").get("g:1")
    p.set("g:1", "two").get("g:1").get("p:5").get("p:1999")
    res = p.execute(raise_on_error=False)
    assert res[:6] == [True, b"one", None, b"one", None, None], res
    assert all(isinstance(x, redis.ResponseError) and "wrong number" in str(x) for x in res[6:8]), res
    assert res[8:] == [b"one", True, b"two", b"value-5", b"value-1999"], res
    # ... and in a numbered database never written (read as empty).
    r9 = client(d, redis, db=9)
    p = r9.pipeline(transaction=False)
    for i in range(70):
        p.get(f"p:{i}")
    assert p.execute() == [None] * 70
    r9.close()
    # A run of INCR / DECR / INCRBY / DECRBY is applied together
    # (docs/decisions.md, "A pipelined batch's counters are applied
    # together"): against a model, with a string, an overflow, a bad
    # increment, a wrong arity and an oversize key inside the run, each
    # reply in its place, in a numbered database never written too.
    for db in (0, 7):
        rc = client(d, redis, db=db)
        rnd = random.Random(db)
        p = rc.pipeline(transaction=False)
        # (The first run meets db7 before it exists: its first INCR makes it.)
        p.incr("c:0").incrby("c:0", 2).set("c:str", "abc").set("c:max", str(2**63 - 2))
        model = {"c:0": 3, "c:max": 2**63 - 2}
        want = [1, 3, True, True]
        for i in range(300):
            key = f"c:{rnd.randrange(12)}"
            op = rnd.randrange(14)
            if op == 0:
                p.incr("c:str")
                want.append("not an integer")
            elif op == 1:
                p.incr("c:max")
                if model["c:max"] == 2**63 - 1:
                    want.append("overflow")
                else:
                    model["c:max"] += 1
                    want.append(model["c:max"])
            elif op == 2:
                p.execute_command("INCRBY", key, "x1")
                want.append("not an integer")
            elif op == 3:
                p.execute_command("INCR", key, "extra")
                want.append("wrong number")
            elif op == 4:
                p.incr("k" * 1025)
                want.append("at most")
            else:
                kind = rnd.randrange(4)
                n = rnd.randrange(-1000, 1000)
                if kind == 0:
                    p.execute_command("iNcR", key)
                    delta = 1
                elif kind == 1:
                    p.decr(key)
                    delta = -1
                elif kind == 2:
                    p.incrby(key, n)
                    delta = n
                else:
                    p.decrby(key, n)
                    delta = -n
                model[key] = model.get(key, 0) + delta
                want.append(model[key])
        res = p.execute(raise_on_error=False)
        assert len(res) == len(want), (len(res), len(want))
        for i, (got, w) in enumerate(zip(res, want)):
            if isinstance(w, str):
                assert isinstance(got, redis.ResponseError) and w in str(got), (db, i, got, w)
            else:
                assert got == w, (db, i, got, w)
        for key, v in model.items():
            assert int(rc.get(key)) == v, (db, key, rc.get(key), v)
        assert rc.get("c:str") == b"abc"
        rc_last = rc.mget("c:1", "c:2")
        rc.close()
    # ... and refused in a snapshot, each with -READONLY, nothing applied.
    d.ctl("snapshot", "create", "db7@counters")
    rs = client(d, redis, db="7@counters")
    p = rs.pipeline(transaction=False)
    for _ in range(5):
        p.incr("c:1").decrby("c:2", 3)
    res = p.execute(raise_on_error=False)
    assert len(res) == 10 and all(isinstance(x, redis.ReadOnlyError) for x in res), res
    assert rs.mget("c:1", "c:2") == rc_last, (rs.mget("c:1", "c:2"), rc_last)
    rs.close()
    # MULTI/EXEC: one atomic batch; reads inside see the transaction's writes.
    t = r.pipeline(transaction=True)
    t.set("acct:a", 100).set("acct:b", 0).decrby("acct:a", 30).incrby("acct:b", 30)
    t.get("acct:a").get("acct:b").mset({"m1": "x", "m2": "y"}).delete("m1")
    assert t.execute() == [True, True, 70, 30, b"70", b"30", True, 1]
    assert r.mget("acct:a", "acct:b", "m1", "m2") == [b"70", b"30", None, b"y"]
    # A runtime error inside EXEC fails that command only (as in Redis).
    t = r.pipeline(transaction=True)
    t.set("s", "abc").incr("s").set("after", "1")
    try:
        t.execute()
        raise AssertionError("EXEC with INCR of a string did not report the error")
    except redis.ResponseError as e:
        assert "not an integer" in str(e)
    assert r.get("after") == b"1"
    # Concurrent INCRs from many clients: each is atomic, none lost.
    def worker(n):
        c = client(d, redis)
        for _ in range(n):
            c.incr("shared")
        c.close()
    threads = [threading.Thread(target=worker, args=(200,)) for _ in range(10)]
    for t_ in threads:
        t_.start()
    for t_ in threads:
        t_.join(120)
    assert int(r.get("shared")) == 2000
    # Concurrent transactions moving money between two keys: the sum holds.
    r.mset({"x": 1000, "y": 1000})
    def mover(seed):
        c = client(d, redis)
        rnd = random.Random(seed)
        for _ in range(100):
            amt = rnd.randint(1, 10)
            src, dst = ("x", "y") if rnd.random() < 0.5 else ("y", "x")
            c.pipeline(transaction=True).decrby(src, amt).incrby(dst, amt).execute()
        c.close()
    threads = [threading.Thread(target=mover, args=(s,)) for s in range(8)]
    for t_ in threads:
        t_.start()
    for t_ in threads:
        t_.join(120)
    assert int(r.get("x")) + int(r.get("y")) == 2000
    # Large replies: a pipeline whose replies pass one batch's 4 MiB is run
    # in several batches, in order; one reply over 16 MiB is refused.
    big = lambda i: bytes([65 + i % 26]) * (60 << 10)  # noqa: E731
    p = r.pipeline(transaction=False)
    for i in range(300):
        p.set(f"big:{i}", big(i))
    assert all(p.execute())
    p = r.pipeline(transaction=False)
    for i in range(300):
        p.get(f"big:{i}")
    assert p.execute() == [big(i) for i in range(300)]       # 18 MiB of replies
    assert r.mget([f"big:{i}" for i in range(200)]) == [big(i) for i in range(200)]
    try:
        r.mget([f"big:{i}" for i in range(300)])
        raise AssertionError("an 18 MiB MGET reply was sent")
    except redis.ResponseError as e:
        assert "exceed" in str(e), str(e)
    r.close()
    served(d)
    assert d.stop() == 0


def test_many_concurrent_clients(env):
    redis = redis_module()
    d = start(env)
    errors = []

    def worker(cid):
        try:
            c = client(d, redis)
            p = c.pipeline(transaction=False)
            for i in range(200):
                p.set(f"c{cid}:{i}", f"{cid}-{i}")
            p.execute()
            for i in range(0, 200, 17):
                assert c.get(f"c{cid}:{i}") == f"{cid}-{i}".encode()
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    assert one(d, "DBSIZE") == str(60 * 200)
    info = "\n".join(cli(d, "INFO", "persistence"))
    flushes = int(re.search(r"ftld_flushes:(\d+)", info).group(1))
    writes = int(re.search(r"ftld_flushed_writes:(\d+)", info).group(1))
    # Group commit: 60 clients' pipelines shared flushes.
    assert writes >= 60 * 200 and flushes * 10 < writes, info
    assert d.stop() == 0


# --- durability ------------------------------------------------------------------

def set_loop(d, redis, cid, acked, inflight, stop):
    """SETs k{cid}:{n} = v{round}; records what was acknowledged."""
    try:
        c = client(d, redis)
        n = 0
        while not stop.is_set():
            key = f"k{cid}:{n % 50}"
            value = f"{cid}-{n}"
            inflight[cid] = (key, value)
            if n % 7 == 6:
                c.mset({key: value, key + ":m": value})   # atomic pair
            else:
                c.set(key, value)
            acked[key] = value
            if n % 7 == 6:
                acked[key + ":m"] = value
            inflight[cid] = None
            n += 1
    except Exception:  # noqa: BLE001 - the daemon was killed
        pass


def kill_during(d, rnd, stop, threads):
    """Runs the client threads, kill -9s the daemon 0.5-2 s in, stops them."""
    for t in threads:
        t.start()
    time.sleep(rnd.uniform(0.5, 2.0))
    d.kill9()
    stop.set()
    for t in threads:
        t.join(60)


def test_kill9_during_set_loop_fsync_always(env):
    redis = redis_module()
    d = start(env, args=["--kv-fsync", "always"])
    rnd = random.Random(int(os.environ.get("FTLD_RESP_SEED", "0")) or None)
    for rnd_i in range(KILL_ROUNDS):
        acked, inflight, stop = {}, {}, threading.Event()
        kill_during(d, rnd, stop, [threading.Thread(target=set_loop,
                                                    args=(d, redis, c, acked, inflight, stop))
                                   for c in range(8)])
        assert len(acked) > 20, f"round {rnd_i}: only {len(acked)} keys acknowledged"
        restart(d)
        r = client(d, redis)
        pending = {v[0]: v[1] for v in inflight.values() if v}
        for key, value in acked.items():
            got = r.get(key)
            allowed = {value.encode()}
            base = key[:-2] if key.endswith(":m") else key
            if base in pending:
                allowed.add(pending[base].encode())   # the SET in flight may have landed
            assert got in allowed, f"round {rnd_i}: {key} = {got!r}, acknowledged {value!r}"
        r.close()
    served(d)
    assert d.stop() == 0


def batch_loops(d, redis, stop, state, pre):
    """Writers of whole groups, until `stop` or the daemon dies: MSET of ten
    keys {pre}g{w}:0..9 all = generation n; MULTI / SET {pre}t{w}:a n /
    SET {pre}t{w}:b n / INCR {pre}t{w}:n / EXEC; INCR of a shared counter.
    `state` records, per writer, the last generation acknowledged and the
    most sent, and per counter the last value acknowledged and the INCRs
    sent."""
    def generations(name, write):
        """write(client, name, n) for n = 1, 2, ... recording each."""
        try:
            c = client(d, redis)
            n = 0
            while not stop.is_set():
                n += 1
                state["sent"][name] = n
                write(c, name, n)
                state["acked"][name] = n
        except Exception:  # noqa: BLE001 - the daemon was killed
            pass

    def mset(c, name, n):
        c.mset({f"{name}:{i}": str(n) for i in range(10)})

    def multi(c, name, n):
        p = c.pipeline(transaction=True)
        p.set(f"{name}:a", str(n)).set(f"{name}:b", str(n)).incr(f"{name}:n")
        p.execute()

    def incr(w):
        try:
            c = client(d, redis)
            i = 0
            while not stop.is_set():
                # Alternately one INCR and a pipeline of four (applied
                # together: ExecuteCounters).
                i += 1
                n = 1 if i % 2 else 4
                state["incr_sent"][w] = state["incr_sent"].get(w, 0) + n
                p = c.pipeline(transaction=False)
                for _ in range(n):
                    p.incr(f"{pre}counter")
                v = max(p.execute())
                state["incr_acked"] = max(state["incr_acked"], v)
        except Exception:  # noqa: BLE001
            pass

    return ([threading.Thread(target=generations, args=(f"{pre}g{w}", mset)) for w in range(3)]
            + [threading.Thread(target=generations, args=(f"{pre}t{w}", multi)) for w in range(2)]
            + [threading.Thread(target=incr, args=(w,)) for w in range(2)])


def check_batches(r, state, durable, where, pre):
    """After a restart: every MSET group and MULTI/EXEC transaction is whole
    (all its keys at one generation), at most the one in flight beyond what
    was acknowledged, and with `durable` (always) at least what was; the
    shared counter at most the INCRs sent and, durable, at least the
    highest acknowledged value."""
    for w, sent in state["sent"].items():
        acked = state["acked"].get(w, 0)
        if w[len(pre)] == "g":
            vals = r.mget([f"{w}:{i}" for i in range(10)])
        else:
            vals = r.mget([f"{w}:a", f"{w}:b", f"{w}:n"])
        gens = {int(v) if v is not None else 0 for v in vals}
        assert len(gens) == 1, f"{where}: {w} torn across a crash: {vals}"
        g = gens.pop()
        assert g <= sent, f"{where}: {w} at generation {g}, only {sent} sent"
        if durable:
            assert g >= acked, f"{where}: {w} at generation {g}, {acked} acknowledged"
    v = int(r.get(f"{pre}counter") or 0)
    sent = sum(state["incr_sent"].values())
    assert v <= sent, f"{where}: counter {v}, only {sent} INCRs sent"
    if durable:
        assert v >= state["incr_acked"], f"{where}: counter {v}, {state['incr_acked']} acknowledged"


def test_kill9_during_batches_and_counters(env):
    """kill -9 while MSETs, MULTI/EXEC transactions and INCRs run, with
    --kv-fsync always and everysec: a batch is all or nothing across the
    crash in both; with always nothing acknowledged is lost."""
    redis = redis_module()
    rnd = random.Random(int(os.environ.get("FTLD_RESP_SEED", "0")) or None)
    for fsync in ("always", "everysec"):
        d = start(env, args=["--kv-fsync", fsync])
        for rnd_i in range(KILL_ROUNDS):
            # Keys of their own each round (a FLUSHDB is not durable with
            # everysec, so the last round's keys could come back).
            pre = f"r{rnd_i}:"
            state = {"sent": {}, "acked": {}, "incr_sent": {}, "incr_acked": 0}
            stop = threading.Event()
            kill_during(d, rnd, stop, batch_loops(d, redis, stop, state, pre))
            assert sum(state["acked"].values()) > 20, f"{fsync} round {rnd_i}: {state['acked']}"
            restart(d)
            r = client(d, redis)
            check_batches(r, state, fsync == "always", f"{fsync} round {rnd_i}", pre)
            r.close()
            print(f"{fsync} round {rnd_i}: batches acknowledged {sum(state['acked'].values())}, "
                  f"counter acknowledged {state['incr_acked']}: whole after kill -9", flush=True)
        served(d)
        assert d.stop() == 0


def test_everysec_flushes_within_two_seconds(env):
    redis = redis_module()
    d = start(env, args=["--kv-fsync", "everysec"])
    assert cli(d, "CONFIG", "GET", "appendfsync") == ["appendfsync", "everysec"]
    r = client(d, redis)
    p = r.pipeline(transaction=False)
    for i in range(3000):
        p.set(f"e:{i}", str(i))
    p.execute()
    r.close()
    time.sleep(2.5)       # the timer flushed them
    d.kill9()
    restart(d)
    r = client(d, redis)
    vals = r.mget([f"e:{i}" for i in range(3000)])
    assert vals == [str(i).encode() for i in range(3000)], \
        sum(1 for v in vals if v is None)
    r.close()
    assert d.stop() == 0


# --- bad input ----------------------------------------------------------------------

def test_bad_input_closes_only_that_client(env):
    d = start(env)
    bystander = Raw(d)            # another client, idle in the middle of a request
    bystander.send(b"*2\r\n$3\r\nGET\r\n$5\r\nabc")
    cases = [
        (b"*abc\r\n", b"invalid multibulk length"),
        (b"*100000000\r\n", b"invalid multibulk length"),
        (b"*1\r\n$-5\r\n", b"invalid bulk length"),
        (b"*2\r\n$3\r\nSET\r\n$2147483648\r\n", b"invalid bulk length"),
        (b"*2\r\n$3\r\nGET\r\n:12\r\n", b"expected '$', got ':'"),
        (b"*1\r\n$4\r\nPINGxx\r\n", b"bulk string not followed by CRLF"),
        (b"*1\r\n$" + b"9" * 40 + b"\r\n", b"invalid bulk length"),
        (b"*1\r\n$" + b"9" * 40, b"too big bulk count string"),
        (b"SET \"unbalanced v\r\n", b"unbalanced quotes"),
        (b"x" * (70 << 10), b"too big inline request"),
    ]
    for data, expect in cases:
        c = Raw(d)
        c.send(b"PING\r\n" + data)
        out = c.read_until_closed()
        assert out.startswith(b"+PONG\r\n"), (data[:40], out[:200])
        # The error reply, unless the close reset the socket before the
        # client read it (unread input makes the kernel send a reset); the
        # daemon's log line is there either way.
        assert expect in out or (len(out) == 7 and expect.decode() in d.log()), \
            (data[:40], out[:200])
        served(d)
    # A request over the per-client limit (16 MiB of arguments) closes too.
    c = Raw(d, timeout=60)
    chunk = b"v" * (4 << 20)
    c.send(b"*6\r\n$4\r\nMSET\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(chunk), chunk)
                                             for _ in range(5)))
    c.read_until_closed()
    assert "Protocol error: request larger than" in d.log()
    served(d)
    # A truncated frame: the client vanishes mid-request.
    c = Raw(d)
    c.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc")
    c.s.close()
    served(d)
    # Errors that are not protocol errors keep the connection.
    c = Raw(d)
    c.send(b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$1\r\nv\r\n")
    assert c.read_line().startswith(b"-ERR empty keys")
    c.send(b"*2\r\n$3\r\nGET\r\n$5\r\nalive\r\n")
    assert c.read_line() == b"$3\r\n" and c.read_line() == b"yes\r\n"
    c.s.close()
    # The idle bystander finishes its request and is answered.
    bystander.send(b"de\r\n")
    assert bystander.read_line() == b"$-1\r\n"
    bystander.s.close()
    log = d.log()
    assert log.count("Protocol error") >= len(cases) + 1, log[-3000:]
    assert "closed inside a request" in log
    info = "\n".join(cli(d, "INFO", "stats"))
    assert int(re.search(r"ftld_protocol_errors:(\d+)", info).group(1)) >= len(cases) + 1
    assert d.stop() == 0


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_client_that_never_reads_its_replies(env):
    """A client pipelining GETs of a 60 KiB value without reading a reply
    stalls itself only: the daemon holds one batch of its replies, not
    the gigabytes it asked for, and serves everyone else meanwhile."""
    d = start(env)
    assert one(d, "SET", "big", "x" * (60 << 10)) == "OK"
    served(d)
    before = rss_kib(d.proc.pid)
    c = Raw(d)
    c.s.setblocking(False)
    req = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 1000
    asked, deadline = 0, time.time() + 5
    while time.time() < deadline:
        try:
            asked += c.s.send(req) // 22
        except BlockingIOError:
            time.sleep(0.05)
    assert asked >= 2000, asked           # 120 MiB of replies asked for
    time.sleep(0.5)
    grown = rss_kib(d.proc.pid) - before
    print(f"asked for {asked} GETs of 60 KiB; RSS grew by {grown} KiB", flush=True)
    assert grown < 48 << 10, f"RSS grew by {grown} KiB for a client that never reads"
    served(d)
    c.s.close()
    served(d)
    assert d.stop() == 0


def test_full_pool(env):
    """A full pool: writes answer -OOM (or, for the writes whose flush found
    it full, an error saying the flush failed); nothing acknowledged is
    lost, reads go on, the daemon keeps serving, across kill -9."""
    redis = redis_module()
    d = start(env, size="72M")       # 17 segments of 4 MiB
    r = client(d, redis)
    value = lambda i: (f"{i:06d}".encode() * 10923)[:60 << 10]  # noqa: E731
    acked, error = [], None
    for i in range(2000):            # about 120 MiB: more than the pool holds
        try:
            r.set(f"f{i:05d}", value(i))
        except redis.ResponseError as e:
            error = str(e)
            break
        acked.append(i)
    assert error is not None and len(acked) > 100, (len(acked), error)
    assert error.startswith("the pool is full") or "flush that makes it durable failed" in error \
        or "pool" in error.lower(), error
    print(f"pool full after {len(acked)} SETs of 60 KiB: {error}", flush=True)
    # Still full: refused, nothing applied. (What the cleaner frees
    # meanwhile may take a few more: those are acknowledged, and must
    # survive as the others.)
    refused, more = 0, []
    for j in range(40):
        try:
            r.set(f"more{j}", value(j))
            more.append(j)
        except redis.ResponseError as e:
            if "full" in str(e):
                assert r.get(f"more{j}") is None, j
                refused += 1
                if refused == 3:
                    break
            else:
                assert "flush that makes it durable failed" in str(e), str(e)
    assert refused == 3 and len(more) < 20, (refused, more)
    assert r.ping()
    vals = r.mget([f"f{i:05d}" for i in acked[:200]])
    assert vals == [value(i) for i in acked[:200]]
    r.close()
    served_read_only = one(d, "PING")
    assert served_read_only == "PONG"
    d.kill9()
    restart(d)
    r = client(d, redis)
    for i in acked:
        assert r.get(f"f{i:05d}") == value(i), i
    for j in more:
        assert r.get(f"more{j}") == value(j), j
    r.close()
    assert d.stop() == 0


def test_read_only_daemon_refuses_writes(env):
    d = start(env)
    assert one(d, "SET", "k", "v") == "OK"
    # SIGTERM with clients connected (idle, inside MULTI, mid-request):
    # they are closed, the daemon exits 0 promptly.
    idle, txn, partial = Raw(d), Raw(d), Raw(d)
    txn.send(b"MULTI\r\nSET k w\r\n")
    assert txn.read_line() == b"+OK\r\n" and txn.read_line() == b"+QUEUED\r\n"
    partial.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nab")
    t0 = time.time()
    assert d.stop() == 0
    assert time.time() - t0 < 20, time.time() - t0
    for c in (idle, txn, partial):
        assert c.read_until_closed() == b""
    d.args += ["--read-only"]
    restart(d)
    assert one(d, "GET", "k") == "v"
    assert one(d, "SET", "k", "w").startswith("READONLY ftld runs with --read-only")
    assert one(d, "GET", "k") == "v"
    assert d.stop() == 0


if __name__ == "__main__":  # ftld_resp3.py imports the helpers
    main(globals())

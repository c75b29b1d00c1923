#!/usr/bin/python3
"""Clients tier (issue 23): RESP3 on ftld's Redis-protocol server, beside
ftld_resp.py (whose helpers it uses). The real `redis-cli -3` (Debian's
redis-tools 7.0): its HELLO 3 map parsed, nil, maps, sets and verbatim INFO
printed as for redis-server; and a small RESP3 reader written here for the
exact bytes: HELLO switching a connection between RESP2 and RESP3, each
RESP3 type where redis-server 7 uses it, and RESP3 and RESP2 clients at
the same time (python3-redis, which speaks RESP2 only, among them), each
answered in its own protocol (docs/decisions.md, "RESP3"). Label `resp`."""

import os
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_resp import cli, client, one, redis_module, served, start  # noqa: E402
from ftld_testlib import main  # noqa: E402


# --- a small RESP2/RESP3 client -------------------------------------------------

class RespError(Exception):
    pass


class Verbatim:
    def __init__(self, fmt, text):
        self.fmt, self.text = fmt, text


class Map(dict):
    """A RESP3 map (a RESP2 one arrives as a flat list)."""


class Set(list):
    """A RESP3 set (a RESP2 one arrives as a list); order kept."""


class Resp:
    """One connection: call() sends a command and returns its reply as a
    value and the exact bytes it came in. Nulls ("$-1", "*-1", "_") are None;
    errors are RespError values (not raised)."""

    def __init__(self, d, timeout=30):
        self.s = socket.create_connection(("127.0.0.1", d.resp_port), timeout=timeout)
        self.f = self.s.makefile("rb")
        self.raw = b""

    def close(self):
        self.f.close()
        self.s.close()

    def send(self, *commands):
        out = b""
        for args in commands:
            out += b"*%d\r\n" % len(args)
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)

    def _line(self):
        line = self.f.readline()
        assert line.endswith(b"\r\n"), f"truncated reply line {line!r} after {self.raw[-200:]!r}"
        self.raw += line
        return line[:1], line[1:-2]

    def _exact(self, n):
        data = self.f.read(n + 2)
        assert len(data) == n + 2 and data.endswith(b"\r\n"), f"bad payload {data!r}"
        self.raw += data
        return data[:-2]

    def _reply(self):
        t, rest = self._line()
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"_":
            assert rest == b"", rest
            return None
        if t == b"$":
            n = int(rest)
            return None if n == -1 else self._exact(n)
        if t == b"=":
            data = self._exact(int(rest))
            assert data[3:4] == b":", data[:8]
            return Verbatim(data[:3].decode(), data[4:].decode())
        if t in (b"*", b"~"):
            n = int(rest)
            if n == -1 and t == b"*":
                return None
            items = [self._reply() for _ in range(n)]
            return items if t == b"*" else Set(items)
        if t == b"%":
            m = Map()
            for _ in range(int(rest)):
                k = self._reply()
                m[k] = self._reply()
            return m
        raise AssertionError(f"unknown reply type {t!r} {rest!r}")

    def read(self):
        self.raw = b""
        v = self._reply()
        return v, self.raw

    def call(self, *args):
        self.send(args)
        return self.read()


# --- redis-cli -3 ----------------------------------------------------------------

def cli3(d, *args, no_raw=True, stdin=None):
    """redis-cli -3 [--no-raw] -p PORT ARGS...: stdout lines (formatted as on
    a terminal with --no-raw, so nil prints "(nil)" and a map "1# k => v")."""
    cmd = ["redis-cli", "-3", "-p", str(d.resp_port)] + (["--no-raw"] if no_raw else [])
    r = subprocess.run(cmd + [str(a) for a in args], input=stdin, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and not r.stderr, (r.returncode, r.stderr)
    return r.stdout.rstrip("\n").split("\n") if r.stdout else []


def test_redis_cli_resp3(env):
    d = start(env)
    hello = cli3(d, "HELLO", "3")
    assert hello[3].startswith('4# "id" => (integer) '), hello    # the id differs per client
    assert hello[:3] + hello[4:] == [
        '1# "server" => "ftld"',
        '2# "version" => "7.0.0"',
        '3# "proto" => (integer) 3',
        '5# "mode" => "standalone"',
        '6# "role" => "master"',
        '7# "modules" => (empty array)',
    ], hello
    # Raw output (not a terminal): a map's pairs on one line each, where
    # RESP2's flat array prints a line per element.
    assert cli3(d, "HELLO", no_raw=False)[:3] == ["server ftld", "version 7.0.0", "proto 3"]
    assert cli(d, "HELLO")[:6] == ["server", "ftld", "version", "7.0.0", "proto", "2"]
    assert cli3(d, "GET", "missing") == ["(nil)"]
    assert cli3(d, "SET", "k", "v") == ["OK"]
    assert cli3(d, "SET", "k", "w", "NX") == ["(nil)"]
    assert cli3(d, "SET", "fresh", "x", "NX", "GET") == ["(nil)"]
    assert cli3(d, "SET", "k", "v2", "GET") == ['"v"']
    assert cli3(d, "MGET", "k", "missing", "fresh") == ['1) "v2"', "2) (nil)", '3) "x"']
    assert cli3(d, "GETDEL", "missing") == ["(nil)"]
    assert cli3(d, "CLIENT", "GETNAME") == ["(nil)"]
    assert cli3(d, "CONFIG", "GET", "appendfsync", "save") == [
        '1# "appendfsync" => "always"', '2# "save" => ""']
    assert cli3(d, "CONFIG", "GET", "appendfsync", no_raw=False) == ["appendfsync always"]
    assert cli(d, "CONFIG", "GET", "appendfsync") == ["appendfsync", "always"]
    assert cli3(d, "CONFIG", "GET", "nothing") == ["(empty hash)"]
    info = cli3(d, "COMMAND", "INFO", "get", "nosuch")
    assert info == ['1) 1) "get"', "   2) (integer) 2", "   3) 1~ readonly",
                    "   4) (integer) 1", "   5) (integer) 1", "   6) (integer) 1", "2) (nil)"], info
    assert cli3(d, "COMMAND", "DOCS") == ["(empty hash)"]
    # INFO: verbatim text, printed without its "txt:" format.
    text = cli3(d, "INFO", "server")
    assert text[0] == "# Server" and "ftld_server:ftld key-value datasets over RESP2 and RESP3 " \
        "(issue 23)" in text, text
    assert not any("txt:" in line for line in text), text
    assert cli3(d, "INFO", "keyspace", no_raw=False)[:2] == ["# Keyspace", "db0:keys=2,expires=0,avg_ttl=0"]
    # A scripted session in RESP3: MULTI/EXEC with a nil inside, then back to RESP2.
    out = cli3(d, stdin="MULTI\nGET missing\nGET k\nEXEC\nHELLO 2\nGET missing\nHELLO 4\n")
    assert out[:7] == ["OK", "QUEUED", "QUEUED", '1) (nil)', '2) "v2"', ' 1) "server"', ' 2) "ftld"'], out
    assert ' 6) (integer) 2' in out, out
    assert out[-2:] == ["(nil)", "(error) NOPROTO unsupported protocol version (ftld speaks RESP2 "
                        "and RESP3)"], out
    served(d)
    assert d.stop() == 0


# --- exact bytes ---------------------------------------------------------------

def test_hello_switches_and_resp3_bytes(env):
    d = start(env)
    r = Resp(d)
    v, raw = r.call("HELLO")
    assert raw.startswith(b"*14\r\n$6\r\nserver\r\n$4\r\nftld\r\n") and v[5] == 2, raw
    v, raw = r.call("HELLO", "3")
    assert isinstance(v, Map) and raw.startswith(b"%7\r\n"), raw
    assert v[b"server"] == b"ftld" and v[b"proto"] == 3 and v[b"modules"] == [], v
    assert v[b"mode"] == b"standalone" and v[b"role"] == b"master" and v[b"id"] >= 1, v
    assert r.call("HELLO")[0][b"proto"] == 3                     # reports, keeps
    assert r.call("GET", "missing") == (None, b"_\r\n")
    assert r.call("SET", "k", "v") == ("OK", b"+OK\r\n")
    assert r.call("SET", "k", "w", "NX") == (None, b"_\r\n")
    assert r.call("SET", "n", "w", "XX") == (None, b"_\r\n")
    assert r.call("SET", "n", "w", "GET") == (None, b"_\r\n")
    assert r.call("GETDEL", "missing") == (None, b"_\r\n")
    assert r.call("CLIENT", "GETNAME") == (None, b"_\r\n")
    assert r.call("MGET", "k", "missing", "n") == ([b"v", None, b"w"],
                                                   b"*3\r\n$1\r\nv\r\n_\r\n$1\r\nw\r\n")
    v, raw = r.call("CONFIG", "GET", "appendonly", "appendfsync")
    assert v == {b"appendonly": b"no", b"appendfsync": b"always"} and isinstance(v, Map), v
    assert raw.startswith(b"%2\r\n"), raw
    v, raw = r.call("COMMAND", "INFO", "set", "nosuch")
    assert v == [[b"set", -3, ["write"], 1, 1, 1], None] and isinstance(v[0][2], Set), v
    assert raw == b"*2\r\n*6\r\n$3\r\nset\r\n:-3\r\n~1\r\n+write\r\n:1\r\n:1\r\n:1\r\n_\r\n", raw
    v, raw = r.call("COMMAND")
    assert all(isinstance(e[2], Set) for e in v) and len(v) == r.call("COMMAND", "COUNT")[0]
    assert r.call("COMMAND", "DOCS") == ({}, b"%0\r\n")
    v, raw = r.call("INFO", "keyspace")
    assert isinstance(v, Verbatim) and v.fmt == "txt", raw
    assert v.text == "# Keyspace\r\ndb0:keys=2,expires=0,avg_ttl=0\r\n\r\n", v.text
    assert raw == b"=%d\r\ntxt:%s\r\n" % (len(v.text) + 4, v.text.encode()), raw
    # Unchanged in RESP3.
    assert r.call("PING") == ("PONG", b"+PONG\r\n")
    assert r.call("EXISTS", "k", "missing") == (1, b":1\r\n")
    assert r.call("SCAN", "0")[1] == b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\nk\r\n$1\r\nn\r\n"
    assert r.call("KEYS", "*")[1] == b"*2\r\n$1\r\nk\r\n$1\r\nn\r\n"
    # MULTI/EXEC: the queued replies in RESP3 too.
    r.send(["MULTI"], ["GET", "missing"], ["INCR", "c"], ["EXEC"])
    assert [r.read()[1] for _ in range(4)] == [b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n",
                                               b"*2\r\n_\r\n:1\r\n"]
    # A version other than 2 or 3, or a bad option: an error, no switch.
    v, raw = r.call("HELLO", "4")
    assert raw == b"-NOPROTO unsupported protocol version (ftld speaks RESP2 and RESP3)\r\n", raw
    assert isinstance(r.call("HELLO", "2", "BOGUS")[0], RespError)
    assert r.call("GET", "missing") == (None, b"_\r\n")
    # HELLO 2 switches back: RESP2's bytes again.
    v, raw = r.call("HELLO", "2", "SETNAME", "two")
    assert isinstance(v, list) and raw.startswith(b"*14\r\n") and v[5] == 2, raw
    assert r.call("GET", "missing") == (None, b"$-1\r\n")
    assert r.call("CLIENT", "GETNAME") == (b"two", b"$3\r\ntwo\r\n")
    assert r.call("CONFIG", "GET", "appendonly")[1] == b"*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    assert r.call("COMMAND", "INFO", "nosuch")[1] == b"*1\r\n*-1\r\n"
    assert r.call("COMMAND", "DOCS")[1] == b"*0\r\n"
    assert r.call("INFO", "keyspace")[1].startswith(b"$")
    r.close()
    served(d)
    assert d.stop() == 0


def test_resp3_and_resp2_clients_at_once(env):
    """RESP3 and RESP2 connections open together and pipelining from
    threads at once (python3-redis among the RESP2 ones): every reply in its
    own connection's protocol."""
    redis = redis_module()
    d = start(env)
    errors = []
    rounds = 300

    def worker(cid, proto):
        try:
            r = Resp(d)
            if proto == 3:
                assert r.call("HELLO", "3")[1].startswith(b"%7\r\n")
            null = b"_\r\n" if proto == 3 else b"$-1\r\n"
            config = b"%1\r\n" if proto == 3 else b"*2\r\n"
            for i in range(rounds):
                key = f"c{cid}:{i}"
                r.send(["GET", key], ["SET", key, i], ["MGET", key, "missing"],
                       ["CONFIG", "GET", "appendonly"], ["SET", key, "x", "NX"])
                got = [r.read()[1] for _ in range(5)]
                assert got[0] == null, got
                assert got[1] == b"+OK\r\n", got
                v = str(i).encode()
                assert got[2] == b"*2\r\n$%d\r\n%s\r\n%s" % (len(v), v, null), got
                assert got[3].startswith(config), got
                assert got[4] == null, got
            r.close()
        except Exception as e:  # reported by the main thread
            errors.append(f"client {cid} (RESP{proto}): {e!r}")

    def py_worker():
        try:
            c = client(d, redis)
            for i in range(rounds):
                assert c.get(f"py:{i}") is None
                assert c.set(f"py:{i}", i) is True
                assert c.mget(f"py:{i}", "missing") == [str(i).encode(), None]
                assert c.config_get("appendonly") == {"appendonly": "no"}
            c.close()
        except Exception as e:
            errors.append(f"python3-redis: {e!r}")

    threads = [threading.Thread(target=worker, args=(i, 3 if i % 2 else 2)) for i in range(6)]
    threads.append(threading.Thread(target=py_worker))
    for t in threads:
        t.start()
    # Meanwhile redis-cli -3 and redis-cli (RESP2) one after the other.
    for _ in range(5):
        assert cli3(d, "GET", "missing", no_raw=False) == [""]
        assert cli3(d, "CONFIG", "GET", "appendonly", no_raw=False) == ["appendonly no"]
        assert cli(d, "CONFIG", "GET", "appendonly") == ["appendonly", "no"]
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert not errors, errors
    assert one(d, "DBSIZE") == str(6 * rounds + rounds)
    served(d)
    assert d.stop() == 0


if __name__ == "__main__":
    main(globals())

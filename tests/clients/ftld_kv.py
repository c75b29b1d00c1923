#!/usr/bin/python3
"""Tier 3: key-value datasets (issue 21) through the real ftld, ftlctl and
the control socket: create / put / get / del / scan / list / stats / destroy
(space comes back), snapshots of a KV dataset (kv get NAME@SNAP reads the
old value, rollback, delete), the geometry option, KV datasets kept out of
NBD exports and block-only verbs, bad requests that change nothing (each
followed by a check that the daemon still serves), kill -9 under synced
puts from several clients (every acknowledged key keeps its last
acknowledged value), and a full pool (puts answer RESOURCE_EXHAUSTED, the
acknowledged keys stay readable, deletes on the full pool itself work and
their space comes back, kv destroy makes room too)."""

import base64
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import main  # noqa: E402

KiB = 1 << 10
DEFAULT_GEOMETRY = "page=4096,pages=28,sectors=32,per-page=1"
MAX_KEY, MAX_VALUE = 1024, 64 * KiB
SCAN_CAP = 10000          # kMaxKvScanLimit (control/control_protocol.h)
KILL_ROUNDS = int(os.environ.get("FTLD_KV_KILL_ROUNDS", "3"))


# --- helpers ----------------------------------------------------------------

def kv(d, *args, check=True, input=None):
    """Runs `ftlctl kv ARGS` (bytes in and out); returns the CompletedProcess."""
    r = subprocess.run([d.env.ftlctl, "--control", d.control, "kv", *args],
                       input=input, capture_output=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"ftlctl kv {args}: exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
    return r


def kv_json(d, *args):
    """Runs `ftlctl --json kv ARGS`; returns the parsed reply."""
    r = subprocess.run([d.env.ftlctl, "--control", d.control, "--json", "kv", *args],
                       capture_output=True, timeout=300)
    assert r.returncode == 0, f"ftlctl --json kv {args}: exit {r.returncode}: {r.stderr!r}"
    return json.loads(r.stdout)


def kv_fail(d, *args, status=1, input=None):
    """Runs ftlctl kv expecting `status`; returns stderr as text."""
    r = kv(d, *args, check=False, input=input)
    assert r.returncode == status, f"ftlctl kv {args}: exit {r.returncode}, expected {status}: " \
                                   f"{r.stdout!r} {r.stderr!r}"
    return r.stderr.decode(errors="replace")


def get(d, ref, key):
    return kv(d, "get", ref, key).stdout


def field(obj, name):
    """A key/value field of a reply: text, or base64 in NAME_b64."""
    if name in obj:
        return obj[name].encode()
    return base64.b64decode(obj[name + "_b64"])


class Control:
    """One connection to the control socket, for many requests."""

    def __init__(self, d, timeout=120):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(timeout)
        self.s.connect(d.control)
        self.buf = b""

    def send(self, req):
        self.s.sendall(json.dumps(req).encode() + b"\n")

    def recv(self):
        while b"\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise EOFError("control connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, **req):
        self.send(req)
        return self.recv()

    def many(self, reqs, window=32):
        """Pipelines requests, at most `window` unanswered (the daemon reads
        no more requests while its replies are not read); returns the
        replies in order."""
        out = []
        for lo in range(0, len(reqs), window):
            chunk = reqs[lo:lo + window]
            self.s.sendall(b"".join(json.dumps(r).encode() + b"\n" for r in chunk))
            out += [self.recv() for _ in chunk]
        return out

    def close(self):
        self.s.close()


def put_req(name, key, value, sync=True):
    r = {"cmd": "kv", "action": "put", "name": name, "sync": sync}
    for f, b in (("key", key), ("value", value)):
        try:
            r[f] = b.decode()
        except UnicodeDecodeError:
            r[f + "_b64"] = base64.b64encode(b).decode()
    return r


def get_req(name, key):
    return {"cmd": "kv", "action": "get", "name": name, "key_b64": base64.b64encode(key).decode()}


def pool_stats(d):
    return d.ctl("stats")["pool"]


def serves(d, name="users", key=b"alive", value=None):
    """The daemon answers, and `name`'s `key` still reads `value` (or is absent)."""
    c = Control(d, timeout=30)
    r = c.call(**get_req(name, key))
    c.close()
    if value is None:
        assert r["ok"] is False and r["code"] == "NOT_FOUND", r
    else:
        assert r["ok"] is True and field(r, "value") == value, r


# --- end to end ---------------------------------------------------------------

def test_put_get_del_scan_list_stats(env):
    d = env.start_ftld(size="1G")
    r = kv_json(d, "create", "users")
    assert r["ok"] and r["dataset"]["name"] == "users", r
    assert r["dataset"]["geometry"] == DEFAULT_GEOMETRY, r
    out = kv(d, "create", "g2", "--geometry", "sectors=64,per-page=2").stdout.decode()
    assert "created key-value dataset g2" in out, out

    # put / get with text, binary (--hex), a file and stdin.
    kv(d, "put", "users", "alice", "A1")
    assert get(d, "users", "alice") == b"A1"
    kv(d, "put", "users", "bob", "", "--no-sync")          # an empty value
    assert get(d, "users", "bob") == b""
    kv(d, "put", "--hex", "users", "00ff80", "deadbeef")
    assert kv(d, "get", "users", "00ff80", "--hex").stdout == b"deadbeef\n"
    blob = random.Random(1).randbytes(10 * KiB)
    kv(d, "put", "users", "blob", "--value-file", "-", input=blob)
    assert get(d, "users", "blob") == blob
    path = env.path("big.bin")
    big = random.Random(2).randbytes(MAX_VALUE)
    with open(path, "wb") as f:
        f.write(big)
    kv(d, "put", "users", "big", "--value-file", path)
    assert get(d, "users", "big") == big
    # JSON: UTF-8 as text, other bytes as base64 with a _b64 field name.
    j = kv_json(d, "get", "users", "alice")
    assert j == {"ok": True, "key": "alice", "value": "A1"}, j
    j = kv_json(d, "get", "users", "blob")
    assert "value" not in j and base64.b64decode(j["value_b64"]) == blob, list(j)
    j = kv_json(d, "get", "--hex", "users", "00ff80")
    assert j["key_b64"] == base64.b64encode(b"\x00\xff\x80").decode(), j
    assert field(j, "value") == b"\xde\xad\xbe\xef", j

    # Missing keys: exit 1 and a message; del then get.
    err = kv_fail(d, "get", "users", "nobody")
    assert err.startswith("ftlctl: kv get: ") and "no such key" in err, err
    kv(d, "del", "users", "alice")
    err = kv_fail(d, "get", "users", "alice")
    assert "no such key" in err, err
    err = kv_fail(d, "del", "users", "alice")
    assert "no such key" in err, err

    # scan: order, [from, to), limit, JSON, binary keys shown escaped.
    c = Control(d)
    replies = c.many([put_req("users", f"k{i:03d}".encode(), f"v{i}".encode(), sync=False)
                      for i in range(50)])
    assert all(r["ok"] for r in replies), replies[:3]
    out = kv(d, "scan", "users", "--from", "k010", "--to", "k020").stdout.decode()
    assert out.splitlines() == [f"k{i:03d}\tv{i}" for i in range(10, 20)], out
    out = kv(d, "scan", "users", "--from", "k045", "--limit", "3").stdout.decode()
    assert out.splitlines() == ["k045\tv45", "k046\tv46", "k047\tv47"], out
    j = kv_json(d, "scan", "users", "--limit", "2")
    assert j["count"] == 2 and j["more"] is True, j
    assert [field(e, "key") for e in j["entries"]] == [b"\x00\xff\x80", b"big"], j
    out = kv(d, "scan", "users", "--to", "bi").stdout.decode()
    assert out == "\\x00\\xff\\x80\t\\xde\\xad\\xbe\\xef\n", repr(out)
    j = kv_json(d, "scan", "users", "--from", "k")
    assert [field(e, "key") for e in j["entries"]] == [f"k{i:03d}".encode() for i in range(50)]
    assert j["more"] is False, j

    # Paging: more entries than one reply holds (SCAN_CAP), and values
    # whose bytes end a reply early (kMaxKvScanBytes, 1 MiB).
    n = SCAN_CAP + 5
    for lo in range(0, n, 2000):
        replies = c.many([put_req("g2", f"p{i:06d}".encode(), b"x", sync=False)
                          for i in range(lo, min(n, lo + 2000))])
        assert all(r["ok"] for r in replies), [r for r in replies if not r["ok"]][:2]
    r = c.call(cmd="kv", action="scan", name="g2", limit=SCAN_CAP + 100)
    assert r["ok"] and r["count"] == SCAN_CAP and r["more"] is True, {k: r[k] for k in r if k != "entries"}
    assert r["next"] == f"p{SCAN_CAP:06d}", r["next"]
    out = kv(d, "scan", "g2").stdout.decode().splitlines()
    assert len(out) == n and out[-1] == f"p{n - 1:06d}\tx", (len(out), out[-1:])
    assert kv_json(d, "scan", "g2", "--from", "p000100", "--limit", "12000")["count"] == n - 100
    for i in range(20):
        assert c.call(**put_req("g2", f"w{i:02d}".encode(), bytes([65 + i]) * 60 * KiB, sync=False))["ok"]
    r = c.call(cmd="kv", action="scan", name="g2", **{"from": "w"})
    assert r["ok"] and r["more"] is True and 16 <= r["count"] <= 18, r["count"]
    assert len(kv(d, "scan", "g2", "--from", "w").stdout.splitlines()) == 20
    c.close()

    # list: geometry, sizes, snapshots; stats: counters move.
    lst = {x["name"]: x for x in kv_json(d, "list")["datasets"]}
    assert set(lst) == {"users", "g2"}, lst
    assert lst["users"]["geometry"] == DEFAULT_GEOMETRY, lst
    assert lst["g2"]["geometry"] == "page=4096,pages=28,sectors=64,per-page=2", lst
    assert lst["users"]["mapped_bytes"] > 0 and lst["users"]["snapshots"] == 0, lst
    text = kv(d, "list").stdout.decode()
    assert "NAME" in text and "users" in text and DEFAULT_GEOMETRY in text, text
    s1 = kv_json(d, "stats", "users")["stats"]
    kv(d, "put", "users", "carol", "C1")
    assert get(d, "users", "carol") == b"C1"
    s2 = kv_json(d, "stats", "users")
    assert s2["geometry"] == DEFAULT_GEOMETRY and s2["read_only"] is False, s2
    s2 = s2["stats"]
    assert s2["synced_writes"] == s1["synced_writes"] + 1, (s1, s2)
    assert s2["flushes"] > s1["flushes"] and s2["media_write_bytes"] > s1["media_write_bytes"], (s1, s2)
    assert s2["buffer_hits"] + s2["buffer_misses"] > s1["buffer_hits"] + s1["buffer_misses"]
    text = kv(d, "stats", "users").stdout.decode()
    assert "synced writes" in text and "geometry" in text, text

    # A clean restart keeps everything, unsynced puts included; the
    # geometry comes back from the dataset's header.
    kv(d, "put", "users", "dave", "D1", "--no-sync")
    assert d.stop() == 0
    d = env.ftld_process(backing=d.backing).start()
    assert get(d, "users", "dave") == b"D1" and get(d, "users", "big") == big
    assert get(d, "users", "bob") == b""
    lst = {x["name"]: x for x in kv_json(d, "list")["datasets"]}
    assert lst["g2"]["geometry"] == "page=4096,pages=28,sectors=64,per-page=2", lst
    assert d.stop() == 0


def test_snapshots_of_a_kv_dataset(env):
    d = env.start_ftld(size="1G")
    kv(d, "create", "cfg")
    kv(d, "put", "cfg", "mode", "old")
    kv(d, "put", "cfg", "lazy", "before", "--no-sync")   # unsynced, still in the snapshot
    r = d.ctl("snapshot", "create", "cfg@s1")
    assert r["snapshot"]["ref"] == "cfg@s1", r
    kv(d, "put", "cfg", "mode", "new")
    kv(d, "put", "cfg", "lazy", "after")
    kv(d, "put", "cfg", "extra", "x")
    assert get(d, "cfg@s1", "mode") == b"old" and get(d, "cfg", "mode") == b"new"
    assert get(d, "cfg@s1", "lazy") == b"before"
    assert "no such key" in kv_fail(d, "get", "cfg@s1", "extra")
    out = kv(d, "scan", "cfg@s1").stdout.decode()
    assert out.splitlines() == ["lazy\tbefore", "mode\told"], out
    assert kv_json(d, "stats", "cfg@s1")["read_only"] is True
    # Snapshots are read-only.
    err = kv_fail(d, "put", "cfg@s1", "mode", "x")
    assert "snapshot" in err and "read-only" in err, err
    assert "read-only" in kv_fail(d, "del", "cfg@s1", "mode")
    assert get(d, "cfg@s1", "mode") == b"old"
    # The snapshot is listed (snapshot list and kv list count it).
    refs = [s["ref"] for s in d.ctl("snapshot", "list")["snapshots"]]
    assert "cfg@s1" in refs, refs
    assert kv_json(d, "list")["datasets"][0]["snapshots"] == 1
    # Block-only snapshot verbs refuse it with a clear error.
    r = subprocess.run([env.ftlctl, "--control", d.control, "snapshot", "activate", "cfg@s1"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "key-value dataset" in r.stderr, r.stderr
    # Rollback: the dataset reads as the snapshot again.
    d.ctl("snapshot", "rollback", "cfg@s1")
    assert get(d, "cfg", "mode") == b"old"
    assert "no such key" in kv_fail(d, "get", "cfg", "extra")
    kv(d, "put", "cfg", "mode", "newer")
    # Survives a restart; then delete drops the snapshot's store.
    assert d.stop() == 0
    d = env.ftld_process(backing=d.backing).start()
    assert get(d, "cfg@s1", "mode") == b"old" and get(d, "cfg", "mode") == b"newer"
    d.ctl("snapshot", "create", "cfg@s2")
    d.ctl("snapshot", "delete", "cfg@s1")
    err = kv_fail(d, "get", "cfg@s1", "mode")
    assert "s1" in err, err
    assert get(d, "cfg@s2", "mode") == b"newer"
    # destroy refuses while snapshots exist, --force takes them along.
    err = kv_fail(d, "destroy", "cfg")
    assert "snapshot" in err and "force" in err, err
    assert get(d, "cfg", "mode") == b"newer"
    out = kv(d, "destroy", "cfg", "--force").stdout.decode()
    assert "destroyed key-value dataset cfg and 1 snapshot(s)" in out, out
    assert "cfg@s2" not in [s["ref"] for s in d.ctl("snapshot", "list")["snapshots"]]
    kv_fail(d, "get", "cfg@s2", "mode")
    assert kv_json(d, "list")["datasets"] == []
    assert d.stop() == 0


def test_kv_datasets_are_not_block_volumes(env):
    d = env.start_ftld(size="512M")
    kv(d, "create", "users")
    kv(d, "put", "users", "k", "v")
    # Not an NBD export, at once or after a restart.
    assert "users" not in [e["name"] for e in d.ctl("exports")["exports"]]
    assert d.stop() == 0
    d = env.ftld_process(backing=d.backing).start()
    assert "users" not in [e["name"] for e in d.ctl("exports")["exports"]]
    r = subprocess.run(["nbdinfo", "--list", "--json", d.uri()], capture_output=True, text=True) \
        if shutil_which("nbdinfo") else None
    if r is not None and r.returncode == 0:
        names = [e["export-name"] for e in json.loads(r.stdout)["exports"]]
        assert "users" not in names, names
    # Block verbs on the KV dataset, and KV verbs on a block volume.
    for args in (["range", "clone", "0", "4K", "4K", "--from", "users", "--to", "ftl0"],
                 ["range", "clone", "0", "4K", "4K", "--to", "users"],
                 ["range", "attrs", "--volume", "users"],
                 ["range", "attr", "0", "4K", "immutable", "--volume", "users"],
                 ["snapshot", "deactivate", "users"]):
        r = subprocess.run([env.ftlctl, "--control", d.control, *args], capture_output=True, text=True)
        assert r.returncode == 1 and "key-value dataset" in r.stderr, (args, r.stderr)
    for args in (["put", "ftl0", "k", "v"], ["get", "ftl0", "k"], ["scan", "ftl0"],
                 ["stats", "ftl0"], ["destroy", "ftl0"], ["del", "ftl0", "k"]):
        err = kv_fail(d, *args)
        assert "block volume" in err or "not a key-value" in err, (args, err)
    assert d.ctl("status")["pid"] == d.proc.pid
    assert get(d, "users", "k") == b"v"
    assert d.stop() == 0


def shutil_which(name):
    import shutil
    return shutil.which(name)


def test_destroy_returns_space(env):
    d = env.start_ftld(size="512M")
    kv(d, "create", "junk")
    c = Control(d)
    value = random.Random(3).randbytes(32 * KiB)
    for lo in range(0, 2000, 500):
        replies = c.many([put_req("junk", f"j{i:05d}".encode(), value, sync=False)
                          for i in range(lo, lo + 500)])
        assert all(r["ok"] for r in replies), [r for r in replies if not r["ok"]][:2]
    assert c.call(cmd="checkpoint")["ok"]
    c.close()
    kv(d, "put", "junk", "last", "x")   # synced: everything before is on the media
    mapped = kv_json(d, "list")["datasets"][0]["mapped_bytes"]
    assert mapped >= 2000 * 32 * KiB, mapped
    before = pool_stats(d)
    out = kv(d, "destroy", "junk").stdout.decode()
    assert "destroyed key-value dataset junk" in out, out
    assert kv_json(d, "list")["datasets"] == []
    assert "no dataset" in kv_fail(d, "get", "junk", "last")
    d.ctl("checkpoint")   # the cleaner takes segments both checkpoints cover
    d.ctl("checkpoint")
    d.ctl("gc")
    after = pool_stats(d)
    assert after["mapped_blocks"] <= before["mapped_blocks"] - mapped // 4096, (before, after)
    assert after["free_bytes"] >= before["free_bytes"] + 48 * (1 << 20), (before, after)
    # The name is free again.
    kv(d, "create", "junk")
    assert "no such key" in kv_fail(d, "get", "junk", "last")
    assert d.stop() == 0


# --- bad requests -------------------------------------------------------------

def test_bad_requests_change_nothing(env):
    d = env.start_ftld(size="512M")
    kv(d, "create", "users")
    kv(d, "put", "users", "alive", "yes")
    kv(d, "create", "ro")
    kv(d, "put", "ro", "k", "v1")
    d.ctl("snapshot", "create", "ro@snap")
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    cases = [
        # (request, code, words in the error)
        ({"cmd": "kv"}, "INVALID_ARGUMENT", "action"),
        ({"cmd": "kv", "action": "frob"}, "INVALID_ARGUMENT", "unknown kv action"),
        ({"cmd": "kv", "action": "put", "key": "k", "value": "v"}, "INVALID_ARGUMENT", "name"),
        ({"cmd": "kv", "action": "put", "name": 5, "key": "k", "value": "v"}, "INVALID_ARGUMENT", "string"),
        ({"cmd": "kv", "action": "put", "name": "users", "value": "v"}, "INVALID_ARGUMENT", "key"),
        ({"cmd": "kv", "action": "put", "name": "users", "key": "k"}, "INVALID_ARGUMENT", "value"),
        ({"cmd": "kv", "action": "put", "name": "users", "key": ["k"], "value": "v"}, "INVALID_ARGUMENT", "string"),
        ({"cmd": "kv", "action": "put", "name": "users", "key": "k", "value": 7}, "INVALID_ARGUMENT", "string"),
        ({"cmd": "kv", "action": "put", "name": "users", "key_b64": "!!!!", "value": "v"}, "INVALID_ARGUMENT", "base64"),
        ({"cmd": "kv", "action": "put", "name": "users", "key": "k", "value_b64": "QUJD$"}, "INVALID_ARGUMENT", "base64"),
        ({"cmd": "kv", "action": "put", "name": "users", "key_b64": "QUJ", "value": "v"}, "INVALID_ARGUMENT", "base64"),
        ({"cmd": "kv", "action": "put", "name": "users", "key": "k", "key_b64": "aw==", "value": "v"}, "INVALID_ARGUMENT", "not both"),
        ({"cmd": "kv", "action": "put", "name": "users", "key": "", "value": "v"}, "INVALID_ARGUMENT", "empty"),
        ({"cmd": "kv", "action": "put", "name": "users", "key": "k" * (MAX_KEY + 1), "value": "v"}, "INVALID_ARGUMENT", "1024"),
        ({"cmd": "kv", "action": "put", "name": "users", "key": "k", "value_b64": b64(b"v" * (MAX_VALUE + 1))}, "INVALID_ARGUMENT", "65536"),
        ({"cmd": "kv", "action": "put", "name": "users", "key": "k", "value": "v", "sync": "yes"}, "INVALID_ARGUMENT", "sync"),
        ({"cmd": "kv", "action": "put", "name": "nosuch", "key": "k", "value": "v"}, "NOT_FOUND", "nosuch"),
        ({"cmd": "kv", "action": "put", "name": "ftl0", "key": "k", "value": "v"}, "FAILED_PRECONDITION", "block volume"),
        ({"cmd": "kv", "action": "put", "name": "ro@snap", "key": "k", "value": "v2"}, "FAILED_PRECONDITION", "read-only"),
        ({"cmd": "kv", "action": "delete", "name": "ro@snap", "key": "k"}, "FAILED_PRECONDITION", "read-only"),
        ({"cmd": "kv", "action": "put", "name": "bad name!", "key": "k", "value": "v"}, "INVALID_ARGUMENT", "name"),
        ({"cmd": "kv", "action": "put", "name": "", "key": "k", "value": "v"}, "INVALID_ARGUMENT", "name"),
        ({"cmd": "kv", "action": "get", "name": "users@nosnap", "key": "k"}, "NOT_FOUND", "nosnap"),
        ({"cmd": "kv", "action": "get", "name": "users", "key": "k" * (MAX_KEY + 1)}, "INVALID_ARGUMENT", "1024"),
        ({"cmd": "kv", "action": "scan", "name": "users", "limit": 0}, "INVALID_ARGUMENT", "limit"),
        ({"cmd": "kv", "action": "scan", "name": "users", "limit": "ten"}, "INVALID_ARGUMENT", "limit"),
        ({"cmd": "kv", "action": "scan", "name": "users", "limit": -1}, "INVALID_ARGUMENT", "limit"),
        ({"cmd": "kv", "action": "scan", "name": "users", "from_b64": "@@"}, "INVALID_ARGUMENT", "base64"),
        ({"cmd": "kv", "action": "create", "name": "users"}, "ALREADY_EXISTS", "users"),
        ({"cmd": "kv", "action": "create", "name": "ftl0"}, "ALREADY_EXISTS", "ftl0"),
        ({"cmd": "kv", "action": "create", "name": "x", "geometry": "pages=zero"}, "INVALID_ARGUMENT", "geometry"),
        ({"cmd": "kv", "action": "create", "name": "x", "geometry": "colour=blue"}, "INVALID_ARGUMENT", "geometry"),
        ({"cmd": "kv", "action": "create", "name": "x", "geometry": "page=1000"}, "INVALID_ARGUMENT", "geometry"),
        ({"cmd": "kv", "action": "create", "name": "x@y"}, "INVALID_ARGUMENT", "snapshot"),
        ({"cmd": "kv", "action": "destroy", "name": "ftl0"}, "FAILED_PRECONDITION", "block volume"),
        ({"cmd": "kv", "action": "destroy", "name": "nosuch"}, "NOT_FOUND", "nosuch"),
        ({"cmd": "kv", "action": "destroy", "name": "ro"}, "FAILED_PRECONDITION", "snapshot"),
        ({"cmd": "kv", "action": "destroy", "name": "users", "force": "yes"}, "INVALID_ARGUMENT", "force"),
        ({"cmd": "kv", "action": "stats", "name": "ftl0"}, "FAILED_PRECONDITION", "block volume"),
    ]
    c = Control(d)
    for i, (req, code, words) in enumerate(cases):
        req = dict(req, id=i)
        r = c.call(**req)
        assert r["ok"] is False and r["code"] == code and r["id"] == i, (req, r)
        assert words in r["error"], (req, r)
        # The daemon still serves, the same connection too, and nothing changed.
        r = c.call(**get_req("users", b"alive"))
        assert r["ok"] and r["value"] == "yes", (req, r)
    c.close()
    assert "no such key" in kv_fail(d, "get", "users", "k")
    assert get(d, "ro", "k") == b"v1" and get(d, "ro@snap", "k") == b"v1"
    assert sorted(x["name"] for x in kv_json(d, "list")["datasets"]) == ["ro", "users"]
    assert "x" not in [x["name"] for x in kv_json(d, "list")["datasets"]]
    assert d.ctl("exports")["exports"][0]["volume"] == "ftl0"
    # Malformed lines on the socket, then the daemon still serves.
    lines = d.control_raw(b'{"cmd":"kv","action":"put","name":"users","key":"a"\n'
                          b'{"cmd":"kv","action":"get","name":"users","key":"alive"}\n')
    assert lines[0]["ok"] is False and lines[0]["code"] == "INVALID_ARGUMENT", lines
    assert lines[1]["ok"] is True and lines[1]["value"] == "yes", lines
    # A request line over the limit (1 MiB) gets an error, and the daemon goes on.
    big = json.dumps(put_req("users", b"k", b"v")).encode()[:-1] + b', "pad":"' + b"x" * (1 << 20) + b'"}\n'
    lines = d.control_raw(big)
    assert lines and lines[0]["ok"] is False and "too long" in lines[0]["error"], lines
    serves(d, "users", b"alive", b"yes")
    assert "no such key" in kv_fail(d, "get", "users", "k")
    # ftlctl's own checks: exit 2, nothing sent.
    assert "hex" in kv_fail(d, "put", "--hex", "users", "zz", "00", status=2)
    assert "65536" in kv_fail(d, "put", "users", "k", "--value-file", "-", status=2,
                              input=b"v" * (MAX_VALUE + 1))
    assert "usage" in kv_fail(d, "get", "users", status=2)
    assert "limit" in kv_fail(d, "scan", "users", "--limit", "0", status=2)
    assert "unknown kv action" in kv_fail(d, "frob", status=2)
    # A daemon run --read-only refuses KV writes and serves reads.
    assert d.stop() == 0
    d = env.ftld_process(backing=d.backing, args=["--read-only"]).start()
    assert "read-only" in kv_fail(d, "put", "users", "k", "v")
    assert "read-only" in kv_fail(d, "create", "new")
    assert get(d, "users", "alive") == b"yes"
    assert d.stop() == 0


# --- kill -9 during synced puts ----------------------------------------------

def put_loop(d, tid, acked, inflight, stop, errors):
    """Synced puts of keys t{tid}-{0..15} until `stop`; records the last
    acknowledged value per key and the one in flight when the daemon died."""
    try:
        c = Control(d, timeout=60)
    except OSError as e:
        errors.append(e)
        return
    i = 0
    try:
        while not stop.is_set() and i < 100000:
            key = f"t{tid}-{i % 16}"
            value = f"{tid}:{i}:" + "v" * (i % 700)
            inflight[key] = value
            r = c.call(**put_req("crash", key.encode(), value.encode(), sync=True))
            if not r["ok"]:
                errors.append(r)
                return
            acked[key] = value
            del inflight[key]
            i += 1
    except (OSError, EOFError, ValueError):
        pass  # killed under us: the put in flight may or may not have landed
    finally:
        c.close()


def ftlctl_put_loop(d, tid, acked, inflight, stop):
    i = 0
    while not stop.is_set() and i < 10000:
        key = f"c{tid}-{i % 4}"
        value = f"ctl{tid}:{i}"
        inflight[key] = value
        r = kv(d, "put", "crash", key, value, check=False)
        if r.returncode != 0:
            return
        acked[key] = value
        del inflight[key]
        i += 1


def test_kill9_during_synced_puts(env):
    d = env.start_ftld(size="512M")
    kv(d, "create", "crash")
    acked, seen_values = {}, {}
    rng = random.Random(int(os.environ.get("FTLD_KV_SEED", "21")))
    for rnd in range(KILL_ROUNDS):
        stop = threading.Event()
        inflight, errors = {}, []
        threads = [threading.Thread(target=put_loop, args=(d, t, acked, inflight, stop, errors))
                   for t in range(4)]
        threads += [threading.Thread(target=ftlctl_put_loop, args=(d, t, acked, inflight, stop))
                    for t in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0 + rng.random() * 2.0)
        d.kill9()
        stop.set()
        for t in threads:
            t.join(60)
            assert not t.is_alive()
        assert not errors, errors[:3]
        maybe = dict(inflight)
        d = env.ftld_process(backing=d.backing).start()
        assert acked, "no put was acknowledged"
        c = Control(d)
        keys = sorted(set(acked) | set(maybe))
        replies = c.many([get_req("crash", k.encode()) for k in keys])
        c.close()
        for k, r in zip(keys, replies):
            # None (absent) only for a key never acknowledged.
            allowed = {acked.get(k)} | ({maybe[k]} if k in maybe else set())
            got = r["value"] if r["ok"] else None
            assert got in allowed, f"round {rnd}: key {k}: read {got!r}, acknowledged " \
                                   f"{acked.get(k)!r}, in flight {maybe.get(k)!r}"
            acked[k] = got  # what the next round must keep
        print(f"round {rnd}: {len(keys)} keys checked", flush=True)
    assert d.stop() == 0


# --- a full pool --------------------------------------------------------------

def test_full_pool(env):
    d = env.start_ftld(size="72M")      # 17 segments of 4 MiB
    kv(d, "create", "fill")
    kv(d, "create", "spare")
    c = Control(d)
    value = lambda i: (f"{i:06d}".encode() * 10923)[:60 * KiB]  # noqa: E731
    replies = c.many([put_req("spare", f"s{i:03d}".encode(), value(i), sync=False) for i in range(100)])
    assert all(r["ok"] for r in replies)
    acked, full = [], None
    for i in range(2000):      # about 80 MiB of values: more than the pool holds
        r = c.call(**put_req("fill", f"f{i:05d}".encode(), value(i), sync=True))
        if not r["ok"]:
            full = (i, r)
            break
        acked.append(i)
    assert full is not None and full[1]["code"] == "RESOURCE_EXHAUSTED", (len(acked), full)
    assert len(acked) > 100, len(acked)
    print(f"pool full after {len(acked)} puts of 60 KiB: {full[1]['error']}", flush=True)
    # Still full, still serving: more puts fail the same way and change
    # nothing; every acknowledged key reads back.
    r = c.call(**put_req("fill", b"one-more", value(0), sync=True))
    assert r["ok"] is False and r["code"] == "RESOURCE_EXHAUSTED", r
    # The put whose flush first found the pool full stays applied in the
    # store's buffer (docs/kv.md, "Errors": like a write after a failed
    # fsync); every later refused write is not applied.
    r = c.call(**get_req("fill", b"one-more"))
    assert r["ok"] is False and r["code"] == "NOT_FOUND", r
    replies = c.many([get_req("fill", f"f{i:05d}".encode()) for i in acked])
    for i, r in zip(acked, replies):
        assert r["ok"] and field(r, "value") == value(i), (i, {k: r[k] for k in r if "value" not in k})
    assert d.ctl("status")["pid"] == d.proc.pid
    # Deletes work on the full pool: a flush of deletes may use the pool's
    # reserve for space-freeing writes (docs/kv.md, "Errors"), and the
    # values they drop are trimmed once the deletes are durable, so the
    # cleaner gets their space back and puts are taken again.
    gone, kept = acked[: len(acked) // 2], acked[len(acked) // 2:]
    replies = c.many([{"cmd": "kv", "action": "delete", "name": "fill", "sync": True,
                       "key": f"f{i:05d}"} for i in gone])
    codes = {r.get("code", "OK") for r in replies}
    assert codes == {"OK"}, f"deletes on the full pool: {codes}"
    back = c.many([get_req("fill", f"f{i:05d}".encode()) for i in gone[:20]])
    assert all(r["ok"] is False and r["code"] == "NOT_FOUND" for r in back), back[:3]
    for _ in range(2):
        d.ctl("checkpoint")
    d.ctl("gc")
    r = c.call(**put_req("fill", b"after-deletes", value(1), sync=True))
    assert r["ok"], f"the space of the deleted values did not come back: {r}"
    # kv destroy works on the full pool too and makes room.
    kv(d, "destroy", "spare")
    for _ in range(2):
        d.ctl("checkpoint")
    d.ctl("gc")
    assert c.call(**put_req("fill", b"marker", b"m", sync=True))["ok"]
    c.close()
    assert "no such key" in kv_fail(d, "get", "fill", f"f{gone[0]:05d}")
    # A restart keeps every acknowledged key and every delete.
    assert d.stop() == 0
    d = env.ftld_process(backing=d.backing).start()
    c = Control(d)
    replies = c.many([get_req("fill", f"f{i:05d}".encode()) for i in acked])
    for i, r in zip(acked, replies):
        if i in kept:
            assert r["ok"] and field(r, "value") == value(i), i
        else:
            assert r["ok"] is False and r["code"] == "NOT_FOUND", (i, r)
    c.close()
    # Destroy frees the space: a new dataset takes puts again.
    kv(d, "destroy", "fill")
    for _ in range(2):
        d.ctl("checkpoint")
    d.ctl("gc")
    kv(d, "create", "again")
    kv(d, "put", "again", "k", "v" * 60000)
    assert len(get(d, "again", "k")) == 60000
    assert d.stop() == 0


if __name__ == "__main__":
    main(globals())

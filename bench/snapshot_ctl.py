#!/usr/bin/python3 -P
"""Helper of bench/snapshot_fio.sh: times snapshot operations against a
running ftld over its control socket (one persistent connection, one JSON
request a line), optionally writing random 4 KiB blocks over NBD (libnbd)
between two creates, and times CLI round trips (ftlctl, qemu-img).

  snapshot_ctl.py create --control SOCK --prefix P --count N [--uri URI --writes W] [--no-snapshot]
  snapshot_ctl.py delete --control SOCK --prefix P --count N
  snapshot_ctl.py request --control SOCK --count N JSON
  snapshot_ctl.py cli --count N -- COMMAND... ({i} in COMMAND is the index)

Prints one JSON object: latencies in microseconds (p50, p99, max, mean, n).
Never asserts on time: it only measures.
"""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time


def summary(us):
    s = sorted(us)
    if not s:
        return {"n": 0}
    pick = lambda q: s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]
    return {"n": len(s), "p50": pick(0.5), "p99": pick(0.99), "max": s[-1],
            "min": s[0], "mean": sum(s) / len(s)}


class Control:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buf = b""

    def request(self, obj):
        line = (json.dumps(obj) + "\n").encode()
        t0 = time.perf_counter()
        self.sock.sendall(line)
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("control socket closed")
            self.buf += chunk
        t1 = time.perf_counter()
        reply, self.buf = self.buf.split(b"\n", 1)
        return json.loads(reply), (t1 - t0) * 1e6


def writer(uri, seed):
    if not uri:
        return None
    sys.path = [p for p in sys.path if p not in ("", os.getcwd())]
    import nbd  # python3-libnbd
    h = nbd.NBD()
    h.connect_uri(uri)
    size = h.get_size()
    rng = random.Random(seed)
    buf = bytearray(os.urandom(4096))

    def write(n):
        for _ in range(n):
            buf[0:8] = rng.getrandbits(64).to_bytes(8, "little")
            h.pwrite(bytes(buf), rng.randrange(size // 4096) * 4096)
        h.flush()
    return write


class Tally:
    """Latencies of the calls that succeeded and the errors of the others."""

    def __init__(self):
        self.us, self.errors = [], []

    def control(self, c, request):
        rep, t = c.request(request)
        if rep.get("ok"):
            self.us.append(t)
        else:
            self.errors.append(rep.get("error"))

    def report(self):
        out = summary(self.us)
        out["errors"] = self.errors[:3]
        out["failed"] = len(self.errors)
        print(json.dumps(out))


def cmd_create(a):
    c = Control(a.control)
    write = writer(a.uri, 1)
    tally = Tally()
    for i in range(a.count):
        if write and a.writes:
            write(a.writes)
        if a.no_snapshot:  # the same writes only (the baseline of a pair)
            continue
        tally.control(c, {"cmd": "snapshot", "action": "create", "name": f"{a.prefix}{i}"})
    tally.report()


def cmd_delete(a):
    c = Control(a.control)
    tally = Tally()
    for i in range(a.count):
        tally.control(c, {"cmd": "snapshot", "action": "delete", "name": f"{a.prefix}{i}"})
    tally.report()


def cmd_request(a):
    c = Control(a.control)
    tally = Tally()
    for _ in range(a.count):
        tally.control(c, json.loads(a.json))
    tally.report()


def cmd_cli(a):
    tally = Tally()
    for i in range(a.count):
        argv = [x.replace("{i}", str(i)) for x in a.command]
        t0 = time.perf_counter()
        p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t1 = time.perf_counter()
        if p.returncode == 0:
            tally.us.append((t1 - t0) * 1e6)
        else:
            tally.errors.append(p.stderr.decode(errors="replace").strip()[:200])
    tally.report()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create")
    c.add_argument("--control", required=True)
    c.add_argument("--prefix", default="s")
    c.add_argument("--count", type=int, default=10)
    c.add_argument("--uri", default="")
    c.add_argument("--writes", type=int, default=0)
    c.add_argument("--no-snapshot", action="store_true")
    d = sub.add_parser("delete")
    d.add_argument("--control", required=True)
    d.add_argument("--prefix", default="s")
    d.add_argument("--count", type=int, default=10)
    r = sub.add_parser("request")
    r.add_argument("--control", required=True)
    r.add_argument("--count", type=int, default=10)
    r.add_argument("json")
    x = sub.add_parser("cli")
    x.add_argument("--count", type=int, default=10)
    x.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    if a.cmd == "cli" and a.command and a.command[0] == "--":
        a.command = a.command[1:]
    {"create": cmd_create, "delete": cmd_delete, "request": cmd_request, "cli": cmd_cli}[a.cmd](a)


if __name__ == "__main__":
    main()

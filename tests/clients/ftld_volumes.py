#!/usr/bin/python3
"""Tier 3: datasets at will (issue 22) through the real ftld, ftlctl, the
control socket and real NBD clients:

- volume create exports the volume at once (nbdinfo --list, nbdsh), resize
  grows at once and shows to clients that reconnect and to nbdinfo (a
  connected client keeps its size; past a shrunk end its writes get
  ENOSPC), a shrink over data is refused until --force (which trims it:
  grown back, the range reads zeros), destroy is refused while a client is
  connected or snapshots exist, --force gives the client ESHUTDOWN; all of
  it across a clean restart and kill -9;
- one dataset namespace: key-value datasets listed beside volumes with
  their kind, volume destroy takes them, resize refuses them; snapshots of
  both kinds;
- bad input (names, sizes, unknown volumes, the primary, a key-value
  resize, a read-only daemon) gets a clear error and changes nothing;
- thin provisioning: two volumes promising twice the pool, filled over NBD
  until ENOSPC; stats and status show the over-commit, the log warns at 80,
  90 and 95% once each; reads, trims, a forced shrink and destroy work on
  the full pool, the log says use fell back, and writes work again;
- kill -9 of the daemon at random moments of a loop of creates, resizes
  (grow, shrink, forced shrink), destroys and FUA stamps
  (FTLD_VOLUMES_KILL_ROUNDS, FTLD_VOLUMES_SEED): after each restart every
  volume is as acknowledged, or as the change in flight left it, never in
  between, and every acknowledged stamp reads back; ftl-tool check is clean
  at the end."""

import errno
import json
import os
import random
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ftld_testlib import main  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
BLOCK = 4096
KILL_ROUNDS = int(os.environ.get("FTLD_VOLUMES_KILL_ROUNDS", "6"))
SEED = int(os.environ.get("FTLD_VOLUMES_SEED", str(random.randrange(1 << 30))))


# --- helpers ----------------------------------------------------------------

def connect(d, export):
    import nbd
    h = nbd.NBD()
    h.connect_uri(d.uri(export))
    return h


def nbd_errno(fn, *args):
    """Runs fn(*args); returns the errno name of the nbd.Error it raises, or
    None if it succeeded."""
    import nbd
    try:
        fn(*args)
    except nbd.Error as e:
        return e.errno
    return None


def pattern(tag, n):
    unit = f"[{tag}]".encode()
    return (unit * (n // len(unit) + 1))[:n]


def ctl_run(d, *args):
    """Runs ftlctl ARGS (human output); returns (exit status, stdout + stderr)."""
    r = d.env.run([d.env.ftlctl, "--control", d.control, *args], check=False)
    return r.returncode, r.stdout + r.stderr


def ctl_fail(d, *args, status=1):
    rc, out = ctl_run(d, *args)
    assert rc == status, f"ftlctl {args}: exit {rc}, expected {status}: {out}"
    return out


def volumes(d):
    """{name: volume row} of `volume list`."""
    return {v["name"]: v for v in d.ctl("volume", "list")["volumes"]}


def exports(d):
    return {e["name"]: e for e in d.ctl("exports")["exports"]}


def nbdinfo_sizes(env, d):
    """{export name: size} from nbdinfo --list --json."""
    r = env.run(["nbdinfo", "--list", "--json", d.uri()])
    return {e["export-name"]: e["export-size"] for e in json.loads(r.stdout)["exports"]}


class Control:
    """One connection to the control socket."""

    def __init__(self, d, timeout=60):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(timeout)
        self.s.connect(d.control)
        self.buf = b""

    def call(self, **req):
        self.s.sendall(json.dumps(req).encode() + b"\n")
        while b"\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise EOFError("control connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def close(self):
        self.s.close()


def need_nbd():
    from ftld_testlib import Skip
    try:
        import nbd  # noqa: F401
    except ImportError:
        raise Skip("python3-libnbd not installed")


# --- 1. lifecycle over NBD --------------------------------------------------

def test_create_resize_destroy_over_nbd(env):
    need_nbd()
    d = env.start_ftld(size="256M")
    out = ctl_run(d, "volume", "create", "vol", "1G")[1]
    assert "created volume vol (1.0 GiB), exported as 'vol'" in out, out
    # Exported at once, thin: 1 GiB on a 256 MiB pool.
    assert nbdinfo_sizes(env, d)["vol"] == GiB
    assert exports(d)["vol"]["size_bytes"] == GiB
    h = connect(d, "vol")
    assert h.get_size() == GiB
    h.pwrite(pattern("head", MiB), 0)
    h.pwrite(pattern("tail", MiB), 900 * MiB)
    h.flush()
    # Grow: at once for new clients and nbdinfo; the connected one keeps its size.
    r = d.ctl("volume", "resize", "vol", "2G")
    assert (r["size_bytes"], r["previous_size_bytes"], r["clients_connected"]) == (2 * GiB, GiB, 1), r
    assert nbdinfo_sizes(env, d)["vol"] == 2 * GiB
    assert h.get_size() == GiB
    h2 = connect(d, "vol")
    assert h2.get_size() == 2 * GiB
    assert h2.pread(MiB, 2 * GiB - MiB) == bytes(MiB)
    h2.pwrite(pattern("grown", MiB), 2 * GiB - MiB)
    h2.shutdown()
    # Shrink over data: refused, nothing changes.
    out = ctl_fail(d, "volume", "resize", "vol", "512M")
    assert "holds data past the new end" in out and "force" in out, out
    assert volumes(d)["vol"]["size_bytes"] == 2 * GiB
    assert h.pread(MiB, 900 * MiB) == pattern("tail", MiB)
    # --force trims it; the old client's writes past the new end get ENOSPC.
    r = d.ctl("volume", "resize", "vol", "512M", "--force")
    assert r["size_bytes"] == 512 * MiB, r
    assert nbdinfo_sizes(env, d)["vol"] == 512 * MiB
    assert nbd_errno(h.pwrite, b"x" * BLOCK, 600 * MiB) == "ENOSPC"
    assert h.pread(MiB, 0) == pattern("head", MiB)
    h.shutdown()
    assert volumes(d)["vol"]["mapped_bytes"] == MiB
    # Grown back, the trimmed range reads zeros (also after kill -9: the
    # writes before the shrink are in the log that recovery replays).
    d.ctl("volume", "resize", "vol", "1G")
    d.kill9()
    d.start()
    assert volumes(d)["vol"]["size_bytes"] == GiB
    assert nbdinfo_sizes(env, d)["vol"] == GiB
    h = connect(d, "vol")
    assert h.pread(MiB, 900 * MiB) == bytes(MiB)
    assert h.pread(MiB, 0) == pattern("head", MiB)
    # Destroy: refused while a client is connected, and while snapshots exist.
    out = ctl_fail(d, "volume", "destroy", "vol")
    assert "1 client(s) connected to volume vol" in out and "force" in out, out
    h.shutdown()
    d.ctl("snapshot", "create", "vol@s1")
    out = ctl_fail(d, "volume", "destroy", "vol")
    assert "has 1 snapshot(s)" in out, out
    assert "vol" in exports(d) and "vol" in volumes(d)
    # --force: a connected client gets ESHUTDOWN, the export and the
    # snapshot are gone.
    h = connect(d, "vol")
    r = d.ctl("volume", "destroy", "vol", "--force")
    assert (r["destroyed"], r["snapshots_deleted"], r["exports_removed"],
            r["clients_disconnected"]) == ("vol", 1, ["vol"], 1), r
    for fn, args in [(h.pread, (BLOCK, 0)), (h.pwrite, (b"y" * BLOCK, 0)), (h.flush, ())]:
        assert nbd_errno(fn, *args) == "ESHUTDOWN", fn.__name__
    h.shutdown()
    assert "vol" not in nbdinfo_sizes(env, d)
    assert "vol" not in volumes(d)
    assert d.ctl("snapshot", "list")["snapshots"] == []
    # A clean restart keeps what is left, sizes and exports included.
    d.ctl("volume", "create", "keep", "64M")
    d.ctl("volume", "resize", "keep", "96M")
    assert d.stop() == 0
    d.start()
    assert nbdinfo_sizes(env, d)["keep"] == 96 * MiB
    assert set(volumes(d)) == {"ftl0", "keep"}
    assert d.stop() == 0
    if env.ftl_tool:
        r = env.run([env.ftl_tool, "check", d.backing], check=False)
        assert r.returncode == 0, r.stdout + r.stderr


def test_one_namespace_for_volumes_and_key_value_datasets(env):
    need_nbd()
    d = env.start_ftld(size="256M")
    d.ctl("volume", "create", "blk", "32M")
    d.ctl("kv", "create", "store")
    d.ctl("kv", "put", "store", "k", "v1")
    vs = volumes(d)
    assert vs["blk"]["kind"] == "volume" and vs["store"]["kind"] == "kv", vs
    assert vs["ftl0"]["primary"] and not vs["blk"]["primary"]
    assert vs["blk"]["exports"] == ["blk"] and vs["store"]["exports"] == [], vs
    assert vs["store"]["size_bytes"] == 1 << 40
    out = ctl_run(d, "volume", "list")[1]
    assert re.search(r"^store\s+kv\s+1\.0 TiB", out, re.M), out
    assert re.search(r"^ftl0 \(primary\)\s+volume", out, re.M), out
    assert "over-commit" in out, out
    # Names are one namespace: a volume cannot take a key-value dataset's
    # name, nor the other way round.
    assert "exists already (a key-value dataset)" in ctl_fail(d, "volume", "create", "store", "1M")
    ctl_fail(d, "kv", "create", "blk")
    # Both kinds take snapshots; a block volume's snapshot activates as an export.
    h = connect(d, "blk")
    h.pwrite(pattern("v1", MiB), 0)
    h.flush()
    d.ctl("snapshot", "create", "blk@one")
    d.ctl("snapshot", "create", "store@one")
    h.pwrite(pattern("v2", MiB), 0)
    h.flush()
    h.shutdown()
    d.ctl("kv", "put", "store", "k", "v2")
    d.ctl("snapshot", "activate", "blk@one", "--export", "blk-one", "--read-only")
    h = connect(d, "blk-one")
    assert h.pread(MiB, 0) == pattern("v1", MiB)
    h.shutdown()
    r = d.env.run([d.env.ftlctl, "--control", d.control, "kv", "get", "store@one", "k"])
    assert r.stdout == "v1", r.stdout
    vs = volumes(d)
    assert vs["blk"]["snapshots"] == 1 and vs["store"]["snapshots"] == 1
    assert vs["blk-one"]["origin"] == "blk@one", vs["blk-one"]
    # A key-value dataset is not resized; volume destroy takes it (with
    # its snapshot under --force).
    out = ctl_fail(d, "volume", "resize", "store", "2T")
    assert "key-value dataset" in out, out
    assert "has 1 snapshot(s)" in ctl_fail(d, "volume", "destroy", "store")
    r = d.ctl("volume", "destroy", "store", "--force")
    assert (r["kind"], r["snapshots_deleted"]) == ("kv", 1), r
    assert "store" not in volumes(d)
    # The activation is a volume like the others: resized and destroyed.
    d.ctl("snapshot", "deactivate", "blk-one")
    assert d.stop() == 0


# --- 2. bad input -----------------------------------------------------------

def test_bad_input_changes_nothing(env):
    d = env.start_ftld(size="256M", args=["--export", "alias"])
    d.ctl("volume", "create", "v", "16M")
    d.ctl("kv", "create", "kv1")
    before = (volumes(d), exports(d), d.ctl("snapshot", "list"))
    c = Control(d)
    bad = [
        # (request, code, words of the message)
        ({"action": "create", "size": "1M"}, "INVALID_ARGUMENT", "missing \"name\""),
        ({"action": "create", "name": "x"}, "INVALID_ARGUMENT", "missing \"size\""),
        ({"action": "create", "name": "", "size": "1M"}, "INVALID_ARGUMENT", "bad volume name"),
        ({"action": "create", "name": "a b", "size": "1M"}, "INVALID_ARGUMENT", "bad volume name"),
        ({"action": "create", "name": "x" * 65, "size": "1M"}, "INVALID_ARGUMENT", "1 to 64"),
        ({"action": "create", "name": "v@s", "size": "1M"}, "INVALID_ARGUMENT", "no '@'"),
        ({"action": "create", "name": "x", "size": 0}, "INVALID_ARGUMENT", "multiple of 4096"),
        ({"action": "create", "name": "x", "size": 1000}, "INVALID_ARGUMENT", "multiple of 4096"),
        ({"action": "create", "name": "x", "size": "1M1"}, "INVALID_ARGUMENT", "size"),
        ({"action": "create", "name": "x", "size": -4096}, "INVALID_ARGUMENT", "size"),
        ({"action": "create", "name": "x", "size": "17T"}, "INVALID_ARGUMENT", "at most"),
        ({"action": "create", "name": "x", "size": 2 ** 64 - 4096}, "INVALID_ARGUMENT", "at most"),
        ({"action": "create", "name": "x", "size": [1]}, "INVALID_ARGUMENT", "size"),
        ({"action": "create", "name": "v", "size": "1M"}, "ALREADY_EXISTS", "exists already"),
        ({"action": "create", "name": "kv1", "size": "1M"}, "ALREADY_EXISTS", "key-value dataset"),
        ({"action": "create", "name": "ftl0", "size": "1M"}, "ALREADY_EXISTS", "exists already"),
        ({"action": "create", "name": "alias", "size": "1M"}, "ALREADY_EXISTS", "NBD export"),
        ({"action": "resize", "name": "nosuch", "size": "1M"}, "NOT_FOUND", "nosuch"),
        ({"action": "resize", "name": "v", "size": 0}, "INVALID_ARGUMENT", "multiple of 4096"),
        ({"action": "resize", "name": "v", "size": 4097}, "INVALID_ARGUMENT", "multiple of 4096"),
        ({"action": "resize", "name": "v", "size": "17T"}, "INVALID_ARGUMENT", "at most"),
        ({"action": "resize", "name": "v", "size": "1M", "force": "yes"}, "INVALID_ARGUMENT",
         "force"),
        ({"action": "resize", "name": "kv1", "size": "2T"}, "FAILED_PRECONDITION", "key-value"),
        ({"action": "resize", "name": "v@s", "size": "1M"}, "NOT_FOUND", "v@s"),
        ({"action": "destroy", "name": "ftl0"}, "FAILED_PRECONDITION", "primary"),
        ({"action": "destroy", "name": "alias"}, "FAILED_PRECONDITION", "primary"),
        ({"action": "destroy", "name": ""}, "FAILED_PRECONDITION", "primary"),
        ({"action": "destroy", "name": "nosuch"}, "NOT_FOUND", "nosuch"),
        ({"action": "destroy"}, "INVALID_ARGUMENT", "missing \"name\""),
        ({"action": "destroy", "name": 7}, "INVALID_ARGUMENT", "name"),
        ({"action": "frobnicate"}, "INVALID_ARGUMENT", "create"),
        ({}, "INVALID_ARGUMENT", "action"),
    ]
    for req, code, words in bad:
        r = c.call(cmd="volume", **req)
        assert not r["ok"] and r["code"] == code and words in r["error"], (req, r)
    c.close()
    # ftlctl's own checks, before any request.
    for args in [("volume",), ("volume", "create", "x"), ("volume", "create", "x", "lots"),
                 ("volume", "resize", "v"), ("volume", "destroy"), ("volume", "list", "x"),
                 ("volume", "grow", "v", "1M"), ("volume", "resize", "v", "1M", "--bogus")]:
        ctl_fail(d, *args, status=2)
    assert (volumes(d), exports(d), d.ctl("snapshot", "list")) == before
    assert d.stop() == 0
    # A read-only daemon lists, and refuses every change.
    d = env.start_ftld(backing=d.backing, size=None, args=["--read-only"])
    for args in [("volume", "create", "w", "1M"), ("volume", "resize", "v", "32M"),
                 ("volume", "destroy", "v", "--force")]:
        assert "--read-only" in ctl_fail(d, *args), args
    assert volumes(d)["v"]["size_bytes"] == 16 * MiB and volumes(d)["v"]["read_only"]
    assert d.stop() == 0


# --- 3. thin provisioning and a full pool ----------------------------------

def test_overcommitted_pool_fills_warns_and_recovers(env):
    need_nbd()
    import nbd
    d = env.start_ftld(size="72M")
    st = d.ctl("stats")["pool"]
    logical = st["logical_bytes"]
    for name in ("a", "b"):
        d.ctl("volume", "create", name, str(logical))
    st = d.ctl("stats")["pool"]
    assert st["provisioned_bytes"] == 3 * logical and abs(st["overcommit"] - 3.0) < 1e-9, st
    space = d.ctl("status")["space"]
    assert space["provisioned_bytes"] == 3 * logical and space["logical_bytes"] == logical, space
    # "a" takes 60% of the capacity, then "b" until ENOSPC (a write that
    # gets it once more after `gc` is final).
    ha, hb = connect(d, "a"), connect(d, "b")
    a_bytes = logical * 6 // 10 // MiB * MiB
    for off in range(0, a_bytes, MiB):
        ha.pwrite(pattern(f"a{off}", MiB), off)
    full_at, gc_tried = None, False
    off = 0
    t0 = time.time()
    while full_at is None and off < logical and time.time() - t0 < 120:
        e = nbd_errno(hb.pwrite, pattern(f"b{off}", MiB), off)
        if e is None:
            off += MiB
        elif e == "ENOSPC" and gc_tried:
            full_at = off
        else:
            assert e == "ENOSPC", e
            assert d.ctl("gc") is not None
            gc_tried = True
    assert full_at is not None, f"no lasting ENOSPC after {off // MiB} MiB in b"
    # The last free blocks: single ones until ENOSPC.
    n = 0
    while nbd_errno(hb.pwrite, pattern(f"c{n}", BLOCK), full_at + n * BLOCK) is None:
        n += 1
        assert full_at + n * BLOCK < logical, "b took the whole capacity"
    st = d.ctl("stats")["pool"]
    print(f"note: full at {(a_bytes + full_at) // MiB} MiB written of {logical // MiB} MiB "
          f"capacity: pool use {st['used_percent']:.1f}%", flush=True)
    # The primary is full too, and the full pool keeps serving.
    hp = connect(d, "")
    assert nbd_errno(hp.pwrite, b"p" * BLOCK, 0) == "ENOSPC"
    hp.shutdown()
    assert ha.pread(MiB, 0) == pattern("a0", MiB)
    assert hb.pread(MiB, 0) == pattern("b0", MiB)
    assert nbd_errno(hb.trim, MiB, 0) is None
    deadline = time.time() + 10
    while time.time() < deadline and "crossed 95%" not in d.log():
        time.sleep(0.1)
    log = d.log()
    for t in (80, 90, 95):
        assert log.count(f"crossed {t}%") == 1, (t, log[-3000:])
    assert log.index("crossed 80%") < log.index("crossed 90%") < log.index("crossed 95%")
    assert "(3.00x the capacity)" in log, log[-3000:]
    # A forced shrink and a destroy work on the full pool and give space back.
    ha.shutdown()
    r = d.ctl("volume", "resize", "a", "1M", "--force")
    assert r["size_bytes"] == MiB
    r = d.ctl("volume", "destroy", "b", "--force")
    assert r["clients_disconnected"] == 1
    assert nbd_errno(hb.pread, BLOCK, 0) == "ESHUTDOWN"
    hb.shutdown()
    d.ctl("gc")
    deadline = time.time() + 10
    while time.time() < deadline and "is back below 80%" not in d.log():
        time.sleep(0.1)
    log = d.log()
    for t in (95, 90, 80):
        assert log.count(f"is back below {t}%") == 1, (t, log[-3000:])
    d.ctl("volume", "resize", "a", str(logical))
    ha = connect(d, "a")
    for off in range(0, 16 * MiB, MiB):
        ha.pwrite(pattern(f"again{off}", MiB), off)
    ha.flush()
    assert ha.pread(MiB, 15 * MiB) == pattern(f"again{15 * MiB}", MiB)
    ha.shutdown()
    assert d.stop() == 0


# --- 4. kill -9 during create / resize / destroy loops ------------------------

SLOT = MiB          # stamps sit at multiples of 1 MiB
SLOTS = 48


def slots_of(size):
    """Stamp slots inside a volume of `size` bytes (slot s covers
    [s * SLOT, s * SLOT + BLOCK))."""
    return min(SLOTS, (size - BLOCK) // SLOT + 1) if size >= BLOCK else 0


def stamp(name, slot, sid):
    b = f"<{name}:{slot}:{sid}>".encode()
    return (b * (BLOCK // len(b) + 1))[:BLOCK]


def read_state(d):
    """{name: (size, {slot: sid})} of every volume but the primary, read
    over NBD: a slot holds zeros or its own stamp."""
    out = {}
    for name, v in volumes(d).items():
        if v["primary"]:
            continue
        assert v["kind"] == "volume" and v["exports"] == [name], v
        h = connect(d, name)
        assert h.get_size() == v["size_bytes"], (name, h.get_size(), v)
        stamps = {}
        for slot in range(slots_of(v["size_bytes"])):
            data = h.pread(BLOCK, slot * SLOT)
            if data == bytes(BLOCK):
                continue
            m = re.match(rb"<([^:>]+):(\d+):(\d+)>", data)
            assert m and data == stamp(name, slot, int(m.group(3))), \
                f"{name} slot {slot} holds neither zeros nor its own stamp: {data[:40]!r}"
            stamps[slot] = int(m.group(3))
        h.shutdown()
        out[name] = (v["size_bytes"], stamps)
    return out


def test_kill9_during_create_resize_destroy(env):
    need_nbd()
    import nbd
    rng = random.Random(SEED)
    print(f"FTLD_VOLUMES_SEED={SEED}", flush=True)
    d = env.start_ftld(size="512M")
    model = {}            # acknowledged: name -> (size, {slot: sid})
    counts = {}
    sid = [0]
    in_flight_kinds = {}
    for rnd in range(KILL_ROUNDS):
        lock = threading.Lock()
        pending = {"model": None, "kind": None}   # the model if the change in flight applies
        stop = threading.Event()
        failure = []

        def worker(seed):
            r = random.Random(seed)
            try:
                c = Control(d)
            except OSError:
                return
            try:
                while not stop.is_set():
                    with lock:
                        nxt = {k: (s, dict(st)) for k, (s, st) in model.items()}
                    op = r.random()
                    names = sorted(nxt)
                    if op < 0.25 and len(nxt) < 5 or not names:
                        sid[0] += 1
                        name = f"v{rnd}x{sid[0]}"  # never used before
                        size = r.randrange(1, 65) * SLOT // 2
                        nxt[name] = (size, {})
                        kind, req = "create", dict(action="create", name=name, size=size)
                    elif op < 0.55:
                        name = r.choice(names)
                        size, st = nxt[name]
                        slots = slots_of(size)
                        if slots == 0:
                            continue
                        slot = r.randrange(slots)
                        sid[0] += 1
                        st[slot] = sid[0]
                        with lock:
                            pending.update(model=nxt, kind="stamp")
                        h = nbd.NBD()
                        h.connect_uri(d.uri(name))
                        h.pwrite(stamp(name, slot, sid[0]), slot * SLOT, nbd.CMD_FLAG_FUA)
                        h.shutdown()
                        with lock:
                            model.clear()
                            model.update(nxt)
                            pending.update(model=None, kind=None)
                            counts["stamp"] = counts.get("stamp", 0) + 1
                        continue
                    elif op < 0.85:
                        name = r.choice(names)
                        size, st = nxt[name]
                        new = r.randrange(1, 65) * SLOT // 2
                        over = any(s * SLOT + BLOCK > new for s in st)
                        force = over and r.random() < 0.75
                        if over and not force:
                            rep = c.call(cmd="volume", action="resize", name=name, size=new)
                            if not rep.get("ok") and rep.get("code") != "FAILED_PRECONDITION":
                                failure.append(f"shrink over data: {rep}")
                                return
                            assert not rep["ok"], rep
                            counts["refused"] = counts.get("refused", 0) + 1
                            continue
                        nxt[name] = (new, {s: v for s, v in st.items() if s < slots_of(new)})
                        kind = "grow" if new > size else "shrink" if new < size else "same"
                        req = dict(action="resize", name=name, size=new, force=force)
                    else:
                        name = r.choice(names)
                        del nxt[name]
                        # force: the last stamp's NBD connection may not be
                        # gone yet on the daemon's side.
                        kind, req = "destroy", dict(action="destroy", name=name, force=True)
                    with lock:
                        pending.update(model=nxt, kind=kind)
                    rep = c.call(cmd="volume", **req)
                    if not rep.get("ok"):
                        failure.append(f"{req}: {rep}")
                        return
                    with lock:
                        model.clear()
                        model.update(nxt)
                        pending.update(model=None, kind=None)
                        counts[kind] = counts.get(kind, 0) + 1
            except (OSError, EOFError, nbd.Error):
                return  # the daemon was killed under us
            except AssertionError as e:
                failure.append(str(e))
            finally:
                c.close()

        t = threading.Thread(target=worker, args=(rng.randrange(1 << 30),))
        t.start()
        time.sleep(rng.uniform(0.3, 2.0))
        d.kill9()
        stop.set()
        t.join(60)
        assert not t.is_alive(), "worker did not stop"
        assert not failure, failure
        d.start()
        got = read_state(d)
        if got != model:
            assert pending["model"] is not None and got == pending["model"], (
                f"round {rnd}: recovered {got}\n acknowledged {model}\n in flight "
                f"{pending['kind']}: {pending['model']}")
            in_flight_kinds[pending["kind"]] = in_flight_kinds.get(pending["kind"], 0) + 1
            model = got
        elif pending["kind"]:
            in_flight_kinds[pending["kind"] + " (lost)"] = \
                in_flight_kinds.get(pending["kind"] + " (lost)", 0) + 1
    print(f"kill -9 rounds: {KILL_ROUNDS}, acknowledged: {counts}, in flight at the kill: "
          f"{in_flight_kinds}, volumes at the end: {len(model)}", flush=True)
    assert sum(counts.get(k, 0) for k in ("create", "grow", "shrink", "destroy")) >= KILL_ROUNDS
    assert d.stop() == 0
    if env.ftl_tool:
        r = env.run([env.ftl_tool, "check", d.backing], check=False)
        assert r.returncode == 0, r.stdout + r.stderr


main(globals())
